// Control protocol client: CallDaemon, one request and its reply over the run's Unix socket.
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "daemon/control_protocol.h"

namespace holdfast {

namespace {

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

using Clock = std::chrono::steady_clock;

// Milliseconds left until `deadline`, rounded up so that poll never spins at 0.
int RemainingMs(Clock::time_point deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<int64_t>(left, 24LL * 3600 * 1000));
}

// Waits for `events` on fd; kTimeout at the deadline.
Status WaitFor(int fd, short events, Clock::time_point deadline, const std::string& timeout_msg) {
  for (;;) {
    int ms = RemainingMs(deadline);
    if (ms == 0) return TimeoutError(timeout_msg);
    struct pollfd p {fd, events, 0};
    int rc = ::poll(&p, 1, ms);
    if (rc > 0) return Status::Ok();
    if (rc == 0) continue;  // the loop re-checks the deadline
    if (errno != EINTR) return ErrnoError("poll on the control socket", errno);
  }
}

// One line out, one reply line back (with its '\n'), bounded by `timeout`.
// `what` names the request in the timeout message. `raw`: the line is sent as
// it is, and the daemon hanging up while it is sent is not an error — what it
// answered before closing is read (it refuses a hostile line and closes).
Result<std::string> Exchange(const std::string& socket_path, const std::string& out, std::chrono::milliseconds timeout,
                             const std::string& what, bool raw) {
  const Clock::time_point deadline = Clock::now() + timeout;
  struct sockaddr_un addr {};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(addr.sun_path)) {
    return InvalidArgumentError("control socket path " + socket_path + " is " +
                                std::to_string(socket_path.size()) + " bytes; Unix sockets allow " +
                                std::to_string(sizeof(addr.sun_path) - 1) +
                                ": use a shorter run directory");
  }
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());

  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return ErrnoError("socket(AF_UNIX)", errno);
  // A Unix connect blocks only while the daemon's backlog is full; bound it.
  int ms = std::max(1, RemainingMs(deadline));
  struct timeval tv {ms / 1000, (ms % 1000) * 1000};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));

  int rc;
  do {
    rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    int err = errno;
    switch (err) {
      case ENOENT:
      case ECONNREFUSED:
      case ENOTSOCK:
      case ENOTDIR:
        return UnavailableError("no daemon is listening on " + socket_path + " (" +
                                std::strerror(err) + ")");
      case EAGAIN:
      case EINPROGRESS:
        return UnavailableError("holdfastd on " + socket_path +
                                " is not accepting connections (its backlog is full)");
      default: return ErrnoError("connect to " + socket_path, err);
    }
  }

  const std::string timeout_msg =
      "holdfastd on " + socket_path + " did not answer " + what + " within " + std::to_string(timeout.count()) + " ms";
  size_t sent = 0;
  while (sent < out.size()) {
    ssize_t n = ::send(fd.get(), out.data() + sent, out.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      HF_RETURN_IF_ERROR(WaitFor(fd.get(), POLLOUT, deadline, timeout_msg));
    } else if (n < 0 && errno != EINTR) {
      int err = errno;
      if ((err == EPIPE || err == ECONNRESET) && raw) break;  // read what it said
      if (err == EPIPE || err == ECONNRESET) {
        return UnavailableError("holdfastd on " + socket_path +
                                " closed the connection before reading the request");
      }
      return ErrnoError("send to " + socket_path, err);
    }
  }

  std::string in;
  char buf[4096];
  for (;;) {
    HF_RETURN_IF_ERROR(WaitFor(fd.get(), POLLIN, deadline, timeout_msg));
    ssize_t n = ::recv(fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      if (errno == ECONNRESET) n = 0;  // same as a hang-up for the caller
      else return ErrnoError("recv from " + socket_path, errno);
    }
    if (n == 0) {
      if (in.empty()) {
        return UnavailableError("holdfastd on " + socket_path +
                                " closed the connection without answering");
      }
      return UnavailableError("holdfastd on " + socket_path +
                              " closed the connection in the middle of its reply (" +
                              std::to_string(in.size()) + " bytes, no newline)");
    }
    in.append(buf, static_cast<size_t>(n));
    size_t nl = in.find('\n');
    if (nl != std::string::npos) {
      in.resize(nl + 1);  // one request, one reply: anything after is ignored
      break;
    }
    if (in.size() >= kMaxControlMessageBytes) {
      return InvalidArgumentError("reply from holdfastd on " + socket_path + " exceeds " +
                                  std::to_string(kMaxControlMessageBytes) +
                                  " bytes without a newline");
    }
  }
  return in;
}

}  // namespace

Result<std::string> SendControlLine(const std::string& socket_path, const std::string& line,
                                    std::chrono::milliseconds timeout) {
  HF_ASSIGN_OR_RETURN(std::string reply, Exchange(socket_path, line + "\n", timeout, "a raw line", /*raw=*/true));
  reply.pop_back();  // the '\n'
  return reply;
}

Result<ControlResponse> CallDaemon(const std::string& socket_path, const ControlRequest& request,
                                   std::chrono::milliseconds timeout) {
  HF_ASSIGN_OR_RETURN(const std::string in,
                      Exchange(socket_path, EncodeRequest(request), timeout, "'" + request.op + "'", /*raw=*/false));
  HF_ASSIGN_OR_RETURN(ControlResponse resp, ParseControlResponse(in));
  if (resp.id != request.id && !(resp.id == 0 && !resp.ok)) {
    return InvalidArgumentError("reply from holdfastd carries id " + std::to_string(resp.id) +
                                ", expected " + std::to_string(request.id));
  }
  return resp;
}

}  // namespace holdfast
