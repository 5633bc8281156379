#include "cli/daemon_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "cli/waiter.h"

namespace holdfast {

namespace {

using json = nlohmann::json;

json ParseObject(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : json::object();
}

// The reply of one exchange, turned into a Reply of T by `read` (the answer's
// result object -> T).
template <typename T, typename Read>
Reply<T> Typed(const Reply<std::string>& raw, Read read) {
  if (raw.ok()) return Reply<T>::Answer(read(*raw));
  if (raw.refused()) return Reply<T>::Refused(raw.refusal_code(), raw.status());
  return Reply<T>::Failed(raw.status());
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

std::string RunIdArgs(const std::string& run_id) {
  return run_id.empty() ? "{}" : json({{"run_id", run_id}}).dump();
}

DaemonClient::DaemonClient(const std::string& run_dir, std::chrono::milliseconds timeout)
    : socket_path_(ControlSocketPath(run_dir)), timeout_(timeout) {}

Reply<std::string> DaemonClient::Call(const std::string& op, const std::string& args_json,
                                      std::chrono::milliseconds timeout) const {
  ControlRequest req;
  req.id = next_id_.fetch_add(1);
  req.op = op;
  req.args_json = args_json;
  Result<ControlResponse> resp = CallDaemon(socket_path_, req, timeout);
  if (!resp.ok()) return Reply<std::string>::Failed(resp.status());
  if (!resp->ok) return Reply<std::string>::Refused(resp->error_code, resp->error);
  return Reply<std::string>::Answer(resp->result_json);
}

Reply<PingAnswer> DaemonClient::Ping(std::optional<std::chrono::milliseconds> timeout) const {
  return Typed<PingAnswer>(Call(control_op::kPing, "{}", timeout.value_or(timeout_)),
                           [](const std::string& r) { return PingAnswer{r}; });
}

Reply<StatusAnswer> DaemonClient::GetStatus() const {
  return Typed<StatusAnswer>(Call(control_op::kStatus, "{}", timeout_), [](const std::string& r) {
    StatusAnswer a;
    a.result_json = r;
    const json j = ParseObject(r);
    if (j.value("run_id", json()).is_string()) a.run_id = j["run_id"].get<std::string>();
    a.status = ParseStatusResult(r);
    return a;
  });
}

Reply<CheckpointAnswer> DaemonClient::Checkpoint(const std::string& run_id) const {
  return Typed<CheckpointAnswer>(Call(control_op::kCheckpoint, RunIdArgs(run_id), timeout_),
                                 [](const std::string& r) {
                                   CheckpointAnswer a;
                                   a.result_json = r;
                                   const json j = ParseObject(r);
                                   if (j.value("requested_at_step", json()).is_number()) {
                                     a.requested_at_step = j["requested_at_step"].get<int64_t>();
                                   }
                                   return a;
                                 });
}

Reply<StopAnswer> DaemonClient::Stop(const std::string& run_id) const {
  return Typed<StopAnswer>(Call(control_op::kStop, RunIdArgs(run_id), timeout_),
                           [](const std::string& r) { return StopAnswer{r}; });
}

Result<std::string> DaemonClient::SendLine(const std::string& line) const {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path_.size() >= sizeof(addr.sun_path)) {
    return InvalidArgumentError("control socket path " + socket_path_ + " is too long for a Unix socket");
  }
  std::memcpy(addr.sun_path, socket_path_.c_str(), socket_path_.size() + 1);
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return ErrnoError("socket(AF_UNIX)", errno);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return UnavailableError("no daemon is listening on " + socket_path_ + " (" + std::strerror(errno) + ")");
  }
  const std::string out = line + "\n";
  size_t sent = 0;
  while (sent < out.size()) {
    const ssize_t n = ::send(fd.get(), out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the daemon may hang up on a hostile line: read what it said
    sent += static_cast<size_t>(n);
  }
  Clock* clock = RealClock::Get();
  const int64_t deadline = clock->MonotonicNs() + std::chrono::nanoseconds(timeout_).count();
  std::string in;
  char buf[4096];
  for (;;) {
    const int64_t left_ms = (deadline - clock->MonotonicNs() + 999'999) / 1'000'000;
    if (left_ms <= 0) {
      return TimeoutError("holdfastd on " + socket_path_ + " sent no reply line within " +
                          std::to_string(timeout_.count()) + " ms");
    }
    pollfd p{fd.get(), POLLIN, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, 24LL * 3600 * 1000)));
    if (rc < 0 && errno != EINTR) return ErrnoError("poll on " + socket_path_, errno);
    if (rc <= 0) continue;
    const ssize_t n = ::recv(fd.get(), buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return UnavailableError("holdfastd on " + socket_path_ + " closed the connection without a whole reply");
    }
    in.append(buf, static_cast<size_t>(n));
    if (size_t nl = in.find('\n'); nl != std::string::npos) return in.substr(0, nl);
  }
}

}  // namespace holdfast
