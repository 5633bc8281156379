// Control protocol clients: CallDaemon, one request and its reply over the run's Unix socket, and
// CallRunDaemon, which also reaches a leader on another node over TCP (daemon/control_remote.h).
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>

#include "daemon/control_protocol.h"
#include "daemon/control_remote.h"
#include "daemon/unix_socket_address.h"

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

// A connected socket, or why there is none. `no_listener`: nothing could be
// reached at all (no socket file, refused, not permitted, no such host), the
// only failure after which kAuto tries the other way.
struct Connected {
  int fd = -1;
  Status error;
  bool no_listener = false;
};

Connected ConnectUnix(const std::string& socket_path, Clock::time_point deadline) {
  Connected c;
  Result<UnixSocketAddress> addr = UnixSocketAddress::For(socket_path);
  if (!addr.ok() && addr.status().code() == StatusCode::kNotFound) {
    c.error = UnavailableError("no daemon is listening on " + socket_path + " (its directory does not exist)");
    c.no_listener = true;
    return c;
  }
  if (!addr.ok()) {
    c.error = addr.status();
    return c;
  }
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    c.error = ErrnoError("socket(AF_UNIX)", errno);
    return c;
  }
  // A Unix connect blocks only while the daemon's backlog is full; bound it.
  int ms = std::max(1, RemainingMs(deadline));
  struct timeval tv {ms / 1000, (ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  int rc;
  do {
    rc = ::connect(fd, addr->addr(), addr->size());
  } while (rc != 0 && errno == EINTR);
  if (rc == 0) {
    c.fd = fd;
    return c;
  }
  const int err = errno;
  ::close(fd);
  switch (err) {
    case ENOENT:
    case ECONNREFUSED:
    case ENOTSOCK:
    case ENOTDIR:
      c.error = UnavailableError("no daemon is listening on " + socket_path + " (" + std::strerror(err) + ")");
      c.no_listener = true;
      break;
    case EACCES:
      c.error = ErrnoError("connect to " + socket_path, err);
      c.no_listener = true;  // the socket is not this user's: over TCP the daemon says who may
      break;
    case EAGAIN:
    case EINPROGRESS:
      c.error = UnavailableError("holdfastd on " + socket_path + " is not accepting connections (its backlog is full)");
      break;
    default: c.error = ErrnoError("connect to " + socket_path, err);
  }
  return c;
}

Connected ConnectTcp(const std::string& addr, uint16_t port, Clock::time_point deadline) {
  Connected c;
  const std::string where = addr + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const int gai = ::getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (gai != 0) {
    c.error = UnavailableError("cannot resolve " + where + ": " + gai_strerror(gai));
    c.no_listener = true;
    return c;
  }
  std::string last = "no address";
  for (addrinfo* ai = res; ai != nullptr && c.fd < 0; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      Status w = WaitFor(fd, POLLOUT, deadline, "connecting to holdfastd at " + where + " timed out");
      int err = 0;
      socklen_t len = sizeof(err);
      if (w.ok()) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      rc = w.ok() && err == 0 ? 0 : -1;
      errno = w.ok() ? err : ETIMEDOUT;
    }
    if (rc == 0) {
      c.fd = fd;
    } else {
      last = std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(res);
  if (c.fd < 0) {
    c.error = UnavailableError("no holdfastd answers at " + where + " (" + last + ")");
    c.no_listener = true;
  }
  return c;
}

// One line out on a connected socket, one reply line back (with its '\n'),
// bounded by `deadline`. `where` names the daemon, `what` the request in the
// timeout message. `raw`: the daemon hanging up while the line is sent is not
// an error — what it answered before closing is read (it refuses a hostile
// line and closes).
Result<std::string> Exchange(int fd_in, const std::string& where, const std::string& out, Clock::time_point deadline,
                             std::chrono::milliseconds timeout, const std::string& what, bool raw) {
  Fd fd(fd_in);
  const std::string timeout_msg =
      "holdfastd " + where + " did not answer " + what + " within " + std::to_string(timeout.count()) + " ms";
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
        return UnavailableError("holdfastd " + where + " closed the connection before reading the request");
      }
      return ErrnoError("send to holdfastd " + where, err);
    }
  }

  std::string in;
  char buf[65536];
  for (;;) {
    HF_RETURN_IF_ERROR(WaitFor(fd.get(), POLLIN, deadline, timeout_msg));
    ssize_t n = ::recv(fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      if (errno == ECONNRESET) n = 0;  // same as a hang-up for the caller
      else return ErrnoError("recv from holdfastd " + where, errno);
    }
    if (n == 0) {
      if (in.empty()) return UnavailableError("holdfastd " + where + " closed the connection without answering");
      return UnavailableError("holdfastd " + where + " closed the connection in the middle of its reply (" +
                              std::to_string(in.size()) + " bytes, no newline)");
    }
    in.append(buf, static_cast<size_t>(n));
    size_t nl = in.find('\n', in.size() - static_cast<size_t>(n));  // only the new bytes: replies can be long
    if (nl != std::string::npos) {
      in.resize(nl + 1);  // one request, one reply: anything after is ignored
      break;
    }
    if (in.size() >= kMaxControlReplyBytes) {
      return InvalidArgumentError("reply from holdfastd " + where + " exceeds " +
                                  std::to_string(kMaxControlReplyBytes) + " bytes without a newline");
    }
  }
  return in;
}

Result<std::string> ExchangeUnix(const std::string& socket_path, const std::string& out,
                                 std::chrono::milliseconds timeout, const std::string& what, bool raw,
                                 bool* no_listener = nullptr) {
  const Clock::time_point deadline = Clock::now() + timeout;
  Connected c = ConnectUnix(socket_path, deadline);
  if (no_listener != nullptr) *no_listener = c.no_listener;
  if (c.fd < 0) return c.error;
  return Exchange(c.fd, "on " + socket_path, out, deadline, timeout, what, raw);
}

Result<ControlResponse> ParseReplyTo(const ControlRequest& request, const std::string& in) {
  HF_ASSIGN_OR_RETURN(ControlResponse resp, ParseControlResponse(in));
  if (resp.id != request.id && !(resp.id == 0 && !resp.ok)) {
    return InvalidArgumentError("reply from holdfastd carries id " + std::to_string(resp.id) +
                                ", expected " + std::to_string(request.id));
  }
  return resp;
}

// The request over TCP to the leader of `run_dir` (daemon/control_remote.h).
Result<ControlResponse> CallOverTcp(const std::string& run_dir, const ControlRequest& request,
                                    std::chrono::milliseconds timeout, const std::string& munge_socket) {
  Result<ControlEndpoint> ep = ReadControlEndpoint(run_dir);
  if (!ep.ok()) {
    return UnavailableError("holdfastd cannot be reached over TCP: " + ep.status().message());
  }
  const std::string leader = "holdfastd (pid " + std::to_string(ep->pid) + " on " + ep->host + ")";
  if (ep->port == 0) {
    return UnavailableError(leader + " takes runctl on its own node only (TCP control is off: " + ep->off +
                            "); run runctl on " + ep->host);
  }
  std::string line = EncodeRequest(request);
  line.pop_back();  // the credential binds the request's text, without its newline
  Result<std::string> out = AuthenticatedControlLine(munge_socket, ep->Where(), line);
  if (!out.ok()) {
    return UnavailableError("cannot prove to " + leader + " at " + ep->Where() + " who this is: " +
                            out.status().message());
  }
  const Clock::time_point deadline = Clock::now() + timeout;
  Connected c = ConnectTcp(ep->addr, ep->port, deadline);
  if (c.fd < 0) return UnavailableError(c.error.message() + ": " + leader + " wrote " + ControlEndpointPath(run_dir) +
                                        " and is not running, or this node cannot reach " + ep->addr);
  HF_ASSIGN_OR_RETURN(const std::string in, Exchange(c.fd, "at " + ep->Where(), *out, deadline, timeout,
                                                     "'" + request.op + "'", /*raw=*/false));
  return ParseReplyTo(request, in);
}

}  // namespace

Result<std::string> SendControlLine(const std::string& socket_path, const std::string& line,
                                    std::chrono::milliseconds timeout) {
  HF_ASSIGN_OR_RETURN(std::string reply, ExchangeUnix(socket_path, line + "\n", timeout, "a raw line", /*raw=*/true));
  reply.pop_back();  // the '\n'
  return reply;
}

Result<ControlResponse> CallDaemon(const std::string& socket_path, const ControlRequest& request,
                                   std::chrono::milliseconds timeout) {
  HF_ASSIGN_OR_RETURN(const std::string in, ExchangeUnix(socket_path, EncodeRequest(request), timeout,
                                                         "'" + request.op + "'", /*raw=*/false));
  return ParseReplyTo(request, in);
}

Result<ControlResponse> CallRunDaemon(const std::string& run_dir, const ControlRequest& request,
                                      std::chrono::milliseconds timeout, ControlVia via,
                                      const std::string& munge_socket) {
  if (via == ControlVia::kTcp) return CallOverTcp(run_dir, request, timeout, munge_socket);
  bool no_listener = false;
  const std::string socket_path = ControlSocketPath(run_dir);
  Result<std::string> in =
      ExchangeUnix(socket_path, EncodeRequest(request), timeout, "'" + request.op + "'", /*raw=*/false, &no_listener);
  if (in.ok()) return ParseReplyTo(request, *in);
  if (via == ControlVia::kUnix || !no_listener) return in.status();
  // Nothing listens here: the leader may be on another node.
  if (!std::filesystem::exists(ControlEndpointPath(run_dir))) return in.status();
  Result<ControlResponse> tcp = CallOverTcp(run_dir, request, timeout, munge_socket);
  if (tcp.ok() || tcp.status().code() != StatusCode::kUnavailable) return tcp;
  return UnavailableError(in.status().message() + "; over TCP: " + tcp.status().message());
}

}  // namespace holdfast
