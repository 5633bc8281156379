// TCP store client (plain POSIX sockets: no Asio in the trainer's hot headers
// or compile) and the host:port helpers. The server is tcp_store_server.cc.
#include "common/tcp_store.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/launch_contract.h"
#include "common/tcp_store_wire.h"

namespace holdfast {

namespace wire = tcp_store_wire;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string HostPort::ToString() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

Result<HostPort> ParseHostPort(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError("store address '" + text + "' " + why + " (expected host:port or [v6addr]:port)");
  };
  HostPort out;
  std::string port_text;
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return bad("has an unterminated '[' or no port");
    }
    out.host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string::npos) return bad("has no port");
    out.host = text.substr(0, colon);
    if (out.host.find(':') != std::string::npos) return bad("is an IPv6 address without brackets");
    port_text = text.substr(colon + 1);
  }
  if (out.host.empty()) return bad("has no host");
  unsigned port = 0;
  auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || ptr != port_text.data() + port_text.size() || port == 0 ||
      port > 65535) {
    return bad("has port '" + port_text + "', which is not a number in 1..65535");
  }
  out.port = static_cast<uint16_t>(port);
  return out;
}

namespace {

int RemainingMs(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

uint64_t WireTimeout(milliseconds t) {
  return std::min<uint64_t>(static_cast<uint64_t>(std::max<int64_t>(t.count(), 0)), wire::kMaxTimeoutMs);
}

// Waits until fd is ready for `events`; false on deadline. Errors show up on the next I/O call.
bool PollUntil(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, RemainingMs(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return true;
  }
}

class TcpStoreClient final : public Store {
 public:
  TcpStoreClient(HostPort address, RunKey key, milliseconds connect_timeout)
      : address_(std::move(address)), key_(std::move(key)), connect_timeout_(connect_timeout) {}
  ~TcpStoreClient() override { CloseLocked(); }

  Status Connect() {
    std::lock_guard<std::mutex> lock(mu_);
    return ConnectLocked();
  }

  Status Set(const std::string& key, const std::vector<uint8_t>& value) override {
    HF_RETURN_IF_ERROR(CheckKey("Set", key));
    if (value.size() > wire::kMaxValueBytes) {
      return InvalidArgumentError(Where() + ": Set('" + key + "'): value of " + std::to_string(value.size()) +
                                  " bytes exceeds the store's limit of 64 MiB");
    }
    std::vector<uint8_t> prefix;
    wire::Writer(&prefix).Str(key);
    std::vector<uint8_t> reply;
    return Roundtrip(wire::kSet, prefix, &value, kTcpStoreRequestTimeout, key, &reply);
  }

  Result<std::vector<uint8_t>> Get(const std::string& key, milliseconds timeout) override {
    HF_RETURN_IF_ERROR(CheckKey("Get", key));
    std::vector<uint8_t> body;
    wire::Writer w(&body);
    w.U64(WireTimeout(timeout));
    w.Str(key);
    std::vector<uint8_t> reply;
    HF_RETURN_IF_ERROR(Roundtrip(wire::kGet, body, nullptr, WaitingDeadline(timeout), key, &reply));
    return reply;
  }

  Result<int64_t> Add(const std::string& key, int64_t delta) override {
    HF_RETURN_IF_ERROR(CheckKey("Add", key));
    std::vector<uint8_t> body;
    wire::Writer w(&body);
    w.U64(static_cast<uint64_t>(delta));
    w.Str(key);
    std::vector<uint8_t> reply;
    HF_RETURN_IF_ERROR(Roundtrip(wire::kAdd, body, nullptr, kTcpStoreRequestTimeout, key, &reply));
    wire::Reader r(reply.data(), reply.size());
    int64_t v = static_cast<int64_t>(r.U64());
    if (!r.ok()) return CorruptionError(Where() + ": Add('" + key + "'): short reply from the server");
    return v;
  }

  Status Wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    if (keys.size() > wire::kMaxWaitKeys) {
      return InvalidArgumentError(Where() + ": Wait on " + std::to_string(keys.size()) +
                                  " keys exceeds the limit of 1024 keys per call");
    }
    std::vector<uint8_t> body;
    wire::Writer w(&body);
    w.U64(WireTimeout(timeout));
    w.U32(static_cast<uint32_t>(keys.size()));
    for (const std::string& k : keys) {
      HF_RETURN_IF_ERROR(CheckKey("Wait", k));
      w.Str(k);
    }
    std::string what;
    for (size_t i = 0; i < keys.size() && i < 4; ++i) what += (i ? "', '" : "") + keys[i];
    if (keys.size() > 4) what += "', ... (" + std::to_string(keys.size()) + " keys)";
    std::vector<uint8_t> reply;
    return Roundtrip(wire::kWait, body, nullptr, WaitingDeadline(timeout), what, &reply);
  }

  Result<bool> Check(const std::string& key) override {
    HF_RETURN_IF_ERROR(CheckKey("Check", key));
    std::vector<uint8_t> body;
    wire::Writer(&body).Str(key);
    std::vector<uint8_t> reply;
    HF_RETURN_IF_ERROR(Roundtrip(wire::kCheck, body, nullptr, kTcpStoreRequestTimeout, key, &reply));
    if (reply.size() != 1) return CorruptionError(Where() + ": Check('" + key + "'): bad reply from the server");
    return reply[0] != 0;
  }

  Status Delete(const std::string& key) override {
    HF_RETURN_IF_ERROR(CheckKey("Delete", key));
    std::vector<uint8_t> body;
    wire::Writer(&body).Str(key);
    std::vector<uint8_t> reply;
    return Roundtrip(wire::kDelete, body, nullptr, kTcpStoreRequestTimeout, key, &reply);
  }

 private:
  // The server answers a waiting call by its timeout; allow for the trip back.
  static milliseconds WaitingDeadline(milliseconds timeout) {
    return milliseconds(WireTimeout(timeout)) + std::chrono::seconds(10);
  }

  std::string Where() const { return "store " + address_.ToString(); }

  Status CheckKey(const char* op, const std::string& key) const {
    if (key.size() > wire::kMaxKeyBytes) {
      return InvalidArgumentError(Where() + ": " + op + "('" + key.substr(0, 64) + "...'): key of " +
                                  std::to_string(key.size()) + " bytes exceeds the limit of 4096");
    }
    return Status::Ok();
  }

  void CloseLocked() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  Status ConnectLocked() {
    if (fd_ >= 0) return Status::Ok();
    const Clock::time_point deadline = Clock::now() + connect_timeout_;
    milliseconds backoff(10);
    std::string last_error = "no attempt made";
    for (;;) {
      addrinfo hints{};
      hints.ai_family = AF_UNSPEC;
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* res = nullptr;
      int gai = ::getaddrinfo(address_.host.c_str(), std::to_string(address_.port).c_str(), &hints, &res);
      if (gai != 0 && gai != EAI_AGAIN) {
        return InvalidArgumentError(Where() + ": cannot resolve host '" + address_.host + "': " + gai_strerror(gai));
      }
      if (gai == EAI_AGAIN) last_error = std::string("resolve: ") + gai_strerror(gai);
      for (addrinfo* ai = res; ai != nullptr && fd_ < 0; ai = ai->ai_next) {
        Status s = TryConnect(ai, deadline);
        if (!s.ok()) last_error = s.message();
      }
      if (res) ::freeaddrinfo(res);
      if (fd_ >= 0) {
        Status auth = Authenticate(deadline);
        if (!auth.ok()) CloseLocked();
        return auth;
      }
      if (Clock::now() + backoff >= deadline) break;
      // The server may simply not be up yet; a connect retry has no event to wait on.
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, milliseconds(500));
    }
    return UnavailableError("could not connect to the store at " + address_.ToString() + " within " +
                            std::to_string(connect_timeout_.count()) + " ms; last error: " + last_error);
  }

  Status TryConnect(const addrinfo* ai, Clock::time_point deadline) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) return ErrnoError("socket", errno);
    int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      if (!PollUntil(fd, POLLOUT, deadline)) {
        ::close(fd);
        return TimeoutError("connect timed out");
      }
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc != 0) {
      Status s = ErrnoError("connect", errno);
      ::close(fd);
      return s;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    fd_ = fd;
    return Status::Ok();
  }

  // The handshake of tcp_store_wire.h on a fresh connection: answer the
  // server's challenge, check its proof back.
  Status Authenticate(Clock::time_point deadline) {
    const std::string where = Where() + ": authenticate with the run's key";
    deadline = std::max(deadline, Clock::now() + std::chrono::seconds(10));
    uint8_t header[wire::kHeaderBytes];
    std::string err = RecvAll(header, sizeof(header), deadline);
    if (!err.empty()) return UnavailableError(where + ": " + err + " (before its challenge)");
    if (header[0] != wire::kMagic0 || header[1] != wire::kMagic1 || header[2] != wire::kVersion ||
        header[3] != wire::kChallenge || wire::HeaderLength(header) != kAuthNonceBytes) {
      return FailedPreconditionError(where + ": the server did not challenge this client (is it a holdfast store v" +
                                     std::to_string(wire::kVersion) + "?)");
    }
    std::string server_nonce(kAuthNonceBytes, '\0');
    err = RecvAll(reinterpret_cast<uint8_t*>(server_nonce.data()), kAuthNonceBytes, deadline);
    if (!err.empty()) return UnavailableError(where + ": " + err);
    HF_ASSIGN_OR_RETURN(const std::string client_nonce, RandomBytes(kAuthNonceBytes));
    const std::string body = client_nonce + key_.Proof(wire::kClientLabel, server_nonce, client_nonce);
    wire::EncodeHeader(wire::kAuth, static_cast<uint32_t>(body.size()), header);
    iovec iov[2] = {{header, sizeof(header)}, {const_cast<char*>(body.data()), body.size()}};
    err = SendAll(iov, 2, deadline);
    if (err.empty()) err = RecvAll(header, sizeof(header), deadline);
    const uint32_t length = err.empty() ? wire::HeaderLength(header) : 0;
    if (err.empty() && (header[3] != wire::kReplyOk && header[3] != wire::kReplyError)) err = "a malformed reply";
    if (err.empty() && length > 4096) err = "an oversized reply";
    std::string reply(length, '\0');
    if (err.empty()) err = RecvAll(reinterpret_cast<uint8_t*>(reply.data()), length, deadline);
    if (!err.empty()) return UnavailableError(where + ": " + err);
    if (header[3] == wire::kReplyError) {
      return FailedPreconditionError(where + ": " + (reply.empty() ? std::string("refused") : reply.substr(1)));
    }
    if (!key_.Verify(wire::kServerLabel, server_nonce, client_nonce, reply)) {
      return FailedPreconditionError(where + ": the server did not prove it holds the run's key: it is not this "
                                     "run's store (a stale HOLDFAST_STORE_ADDR, or another run's daemon on the port)");
    }
    return Status::Ok();
  }

  // Sends all of the iovecs; "" on success, else what went wrong.
  std::string SendAll(iovec* iov, int iovcnt, Clock::time_point deadline) {
    while (iovcnt > 0) {
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<size_t>(iovcnt);
      ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          if (!PollUntil(fd_, POLLOUT, deadline)) return "timed out sending";
          continue;
        }
        return ErrnoError("send", errno).message();
      }
      size_t sent = static_cast<size_t>(n);
      while (iovcnt > 0 && sent >= iov->iov_len) {
        sent -= iov->iov_len;
        ++iov;
        --iovcnt;
      }
      if (iovcnt > 0) {
        iov->iov_base = static_cast<uint8_t*>(iov->iov_base) + sent;
        iov->iov_len -= sent;
      }
    }
    return "";
  }

  std::string RecvAll(uint8_t* p, size_t n, Clock::time_point deadline) {
    while (n > 0) {
      ssize_t got = ::recv(fd_, p, n, 0);
      if (got > 0) {
        p += got;
        n -= static_cast<size_t>(got);
      } else if (got == 0) {
        return "the server closed the connection";
      } else if (errno == EINTR) {
        continue;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (!PollUntil(fd_, POLLIN, deadline)) return "timed out waiting for the reply";
      } else {
        return ErrnoError("recv", errno).message();
      }
    }
    return "";
  }

  // Sends one request (body = prefix + optional value) and reads its reply
  // payload into *reply. `key` names the request in errors.
  Status Roundtrip(uint8_t type, const std::vector<uint8_t>& prefix, const std::vector<uint8_t>* value,
                   milliseconds reply_timeout, const std::string& key, std::vector<uint8_t>* reply) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string what = Where() + ": " + wire::MsgTypeName(type) + "('" + key + "')";
    HF_RETURN_IF_ERROR(ConnectLocked().WithContext(what));
    const Clock::time_point deadline = Clock::now() + reply_timeout;
    size_t body_len = prefix.size() + (value ? value->size() : 0);
    uint8_t header[wire::kHeaderBytes];
    wire::EncodeHeader(type, static_cast<uint32_t>(body_len), header);
    iovec iov[3] = {{header, sizeof(header)},
                    {const_cast<uint8_t*>(prefix.data()), prefix.size()},
                    {value ? const_cast<uint8_t*>(value->data()) : nullptr, value ? value->size() : 0}};
    std::string err = SendAll(iov, value ? 3 : 2, deadline);
    if (err.empty()) err = RecvAll(header, sizeof(header), deadline);
    uint32_t length = 0;
    if (err.empty()) {
      length = wire::HeaderLength(header);
      if (header[0] != wire::kMagic0 || header[1] != wire::kMagic1 || header[2] != wire::kVersion ||
          (header[3] != wire::kReplyOk && header[3] != wire::kReplyError) || length > wire::kMaxBodyBytes) {
        err = "the server sent a malformed reply (is this a holdfast store of the same version?)";
      }
    }
    if (err.empty()) {
      reply->resize(length);
      err = RecvAll(reply->data(), length, deadline);
    }
    if (!err.empty()) {
      // The stream is out of step now; the next call reconnects.
      CloseLocked();
      if (err.rfind("timed out", 0) == 0) {
        return TimeoutError(what + ": " + err + " within " + std::to_string(reply_timeout.count()) + " ms");
      }
      return UnavailableError(what + ": " + err);
    }
    if (header[3] == wire::kReplyError) {
      if (reply->empty()) return InternalError(what + ": the server sent an empty error reply");
      auto code = static_cast<StatusCode>((*reply)[0]);
      std::string message(reply->begin() + 1, reply->end());
      if (code == StatusCode::kOk || code > StatusCode::kInternal) code = StatusCode::kInternal;
      return Status(code, what + ": " + message);
    }
    return Status::Ok();
  }

  const HostPort address_;
  const RunKey key_;
  const milliseconds connect_timeout_;
  std::mutex mu_;
  int fd_ = -1;  // guarded by mu_; -1 = not connected
};

}  // namespace

Result<std::shared_ptr<Store>> ConnectTcpStore(const std::string& host, uint16_t port, const RunKey& key,
                                               milliseconds connect_timeout) {
  auto client = std::make_shared<TcpStoreClient>(HostPort{host, port}, key, connect_timeout);
  HF_RETURN_IF_ERROR(client->Connect());
  return std::shared_ptr<Store>(std::move(client));
}

Result<RunKey> StoreKeyFromEnvironment() {
  const char* path = std::getenv(kEnvStoreKeyFile);
  if (path == nullptr || *path == '\0') {
    return InvalidArgumentError(std::string(kEnvStoreKeyFile) +
                                " is not set: the store takes only clients that hold the run's key; start ranks "
                                "through holdfastd or holdfast-train --nproc N, which set it");
  }
  return ReadRunKey(path);
}

}  // namespace holdfast
