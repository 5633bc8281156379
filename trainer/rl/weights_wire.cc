#include "trainer/rl/weights_wire.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <list>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace holdfast::rl {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr char kClientLabel[] = "holdfast weights v1 client";
constexpr char kServerLabel[] = "holdfast weights v1 server";
constexpr size_t kMaxLine = 64 * 1024;          // a control line
constexpr int64_t kMaxIndexBytes = 64LL << 20;  // params.json text
constexpr int64_t kMaxDataBytes = 64LL << 30;   // float32 data

std::string Hex(std::string_view bytes) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(d[c >> 4]);
    out.push_back(d[c & 15]);
  }
  return out;
}

Result<std::string> Unhex(const std::string& hex, size_t bytes, const std::string& what) {
  if (hex.size() != 2 * bytes) return InvalidArgumentError(what + " must be " + std::to_string(2 * bytes) + " hex digits");
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) {
    auto v = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
    const int hi = v(hex[i]), lo = v(hex[i + 1]);
    if (hi < 0 || lo < 0) return InvalidArgumentError(what + " is not lowercase hex");
    out.push_back(static_cast<char>(hi * 16 + lo));
  }
  return out;
}

// A fresh random 32 bytes as 64 hex digits (OpenSSL's CSPRNG, through RunKey).
Result<std::string> Nonce() {
  HF_ASSIGN_OR_RETURN(RunKey k, RunKey::Generate());
  return k.Hex();
}

uint64_t Checksum(const std::string& index, const float* data, size_t floats) {
  return XXH3_64bits_withSeed(data, floats * 4, XXH3_64bits(index.data(), index.size()));
}

// A connected socket with buffered reads. Every call has a deadline.
class Conn {
 public:
  explicit Conn(int fd) : fd_(fd) {}
  ~Conn() { Close(); }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  void Shutdown() {
    if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
  }
  int fd() const { return fd_; }

  Status Write(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      const ssize_t w = ::send(fd_, c, n, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return ErrnoError("send", errno);
      c += w;
      n -= static_cast<size_t>(w);
    }
    return Status::Ok();
  }
  Status WriteLine(const json& j) {
    const std::string line = j.dump() + "\n";
    return Write(line.data(), line.size());
  }
  // Waits up to timeout_ms (< 0: forever) for the next line.
  Result<json> ReadJsonLine(int timeout_ms) {
    for (;;) {
      const size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        json j = json::parse(buf_.substr(0, nl), nullptr, false);
        buf_.erase(0, nl + 1);
        if (j.is_discarded() || !j.is_object()) return CorruptionError("the peer sent a line that is not a JSON object");
        return j;
      }
      if (buf_.size() > kMaxLine) return CorruptionError("the peer sent a line longer than 64 KiB");
      HF_RETURN_IF_ERROR(Fill(timeout_ms));
    }
  }
  // Exactly n bytes into p.
  Status ReadExact(void* p, size_t n, int timeout_ms) {
    char* c = static_cast<char*>(p);
    const size_t from_buf = std::min(n, buf_.size());
    std::memcpy(c, buf_.data(), from_buf);
    buf_.erase(0, from_buf);
    c += from_buf;
    n -= from_buf;
    while (n > 0) {
      HF_RETURN_IF_ERROR(WaitReadable(timeout_ms));
      const ssize_t r = ::recv(fd_, c, n, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) return UnavailableError("the peer closed the connection");
      if (r < 0) return ErrnoError("recv", errno);
      c += r;
      n -= static_cast<size_t>(r);
    }
    return Status::Ok();
  }

 private:
  Status WaitReadable(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    for (;;) {
      const int r = ::poll(&p, 1, timeout_ms);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return ErrnoError("poll", errno);
      if (r == 0) return TimeoutError("no data from the peer within " + std::to_string(timeout_ms) + " ms");
      return Status::Ok();
    }
  }
  Status Fill(int timeout_ms) {
    HF_RETURN_IF_ERROR(WaitReadable(timeout_ms));
    char tmp[4096];
    const ssize_t r = ::recv(fd_, tmp, sizeof(tmp), 0);
    if (r == 0) return UnavailableError("the peer closed the connection");
    if (r < 0) return errno == EINTR ? Status::Ok() : ErrnoError("recv", errno);
    buf_.append(tmp, static_cast<size_t>(r));
    return Status::Ok();
  }

  int fd_;
  std::string buf_;
};

Result<int> ConnectTo(const HostPort& hp, int timeout_ms) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(hp.host.c_str(), std::to_string(hp.port).c_str(), &hints, &res);
  if (rc != 0) return UnavailableError("resolve " + hp.host + ": " + gai_strerror(rc));
  int fd = -1;
  int err = 0;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      err = errno;
      ::close(fd);
      fd = -1;
      continue;
    }
    pollfd p{fd, POLLOUT, 0};
    int so = 0;
    socklen_t len = sizeof(so);
    if (::poll(&p, 1, timeout_ms) != 1 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &len) != 0 || so != 0) {
      err = so != 0 ? so : ETIMEDOUT;
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd < 0) return ErrnoError("connect to " + hp.ToString(), err);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));  // a learner's host that vanishes
  // Back to blocking: reads and writes wait in poll (reads) or block (writes).
  const int fl = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  return fd;
}

}  // namespace

std::string WeightsAddressPath(const std::string& exchange_dir) { return exchange_dir + "/weights.addr"; }

// ---- WeightsServer --------------------------------------------------------

class WeightsServer::Impl {
 public:
  Impl(RunKey key) : key_(std::move(key)) {}

  Status Listen(const std::string& host) {
    HF_ASSIGN_OR_RETURN(int fd, ListenOn(host));
    listen_fd_ = fd;
    host_ = host;
    sockaddr_storage a{};
    socklen_t len = sizeof(a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&a)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&a)->sin_port);
    accept_ = std::thread([this] { AcceptLoop(); });
    return Status::Ok();
  }

  HostPort address() const { return {host_, port_}; }

  void Publish(int64_t version, std::shared_ptr<const ParamsDump> dump) {
    auto v = std::make_shared<Version>();
    v->version = version;
    v->index = ParamsDumpIndex(*dump);
    v->xxh3 = Checksum(v->index, dump->data.data(), dump->data.size());
    v->dump = std::move(dump);
    {
      std::lock_guard<std::mutex> lock(mu_);
      latest_ = std::move(v);
    }
    cv_.notify_all();
  }

  uint64_t sent() const { return sent_.load(); }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      stopping_ = true;
      for (Conn* c : conns_) c->Shutdown();
    }
    cv_.notify_all();
    if (listen_fd_ >= 0) ::shutdown(listen_fd_, SHUT_RDWR);
    if (accept_.joinable()) accept_.join();
    if (listen_fd_ >= 0) ::close(listen_fd_);
    listen_fd_ = -1;
    std::list<Session> sessions;
    {
      std::lock_guard<std::mutex> lock(mu_);
      sessions.swap(sessions_);
    }
    for (auto& t : sessions) t.thread.join();
  }

 private:
  struct Version {
    int64_t version = -1;
    std::string index;
    std::shared_ptr<const ParamsDump> dump;
    uint64_t xxh3 = 0;
  };

  static Result<int> ListenOn(const std::string& host) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    const int rc = ::getaddrinfo(host.c_str(), "0", &hints, &res);
    if (rc != 0) return InvalidArgumentError("weights server: cannot resolve '" + host + "': " + gai_strerror(rc));
    const int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    if (fd >= 0) ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    const bool ok = fd >= 0 && ::bind(fd, res->ai_addr, res->ai_addrlen) == 0 && ::listen(fd, 64) == 0;
    const int err = errno;
    ::freeaddrinfo(res);
    if (!ok) {
      if (fd >= 0) ::close(fd);
      return ErrnoError("weights server: listen on " + host, err);
    }
    return fd;
  }

  void AcceptLoop() {
    for (;;) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;  // shut down (Stop), or the listener is broken
      }
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) {
        ::close(fd);
        return;
      }
      // The threads of subscribers that went away are joined here: a worker
      // reconnecting again and again leaves no finished threads behind.
      for (auto it = sessions_.begin(); it != sessions_.end();) {
        if (!it->done) {
          ++it;
          continue;
        }
        it->thread.join();  // it set `done` last and has released mu_: it is returning
        it = sessions_.erase(it);
      }
      Session& session = sessions_.emplace_back();
      session.thread = std::thread([this, fd, &session] { Serve(fd, &session.done); });
    }
  }

  // One subscriber: the handshake, then each newer version it asks for;
  // *done (guarded by mu_) set as the last thing it does.
  void Serve(int fd, bool* done) {
    Conn c(fd);
    {
      std::lock_guard<std::mutex> lock(mu_);
      conns_.push_back(&c);
      if (stopping_) c.Shutdown();
    }
    Status s = Handshake(c);
    while (s.ok()) s = ServeOne(c);
    if (s.code() != StatusCode::kUnavailable && s.code() != StatusCode::kCancelled) {
      spdlog::warn("weights server: a subscriber's connection ended: {}", s.ToString());
    }
    std::lock_guard<std::mutex> lock(mu_);
    conns_.erase(std::find(conns_.begin(), conns_.end(), &c));
    *done = true;
  }

  Status Handshake(Conn& c) {
    HF_ASSIGN_OR_RETURN(std::string challenge, Nonce());
    HF_RETURN_IF_ERROR(c.WriteLine({{"v", 1}, {"challenge", challenge}}));
    HF_ASSIGN_OR_RETURN(json hello, c.ReadJsonLine(30000));
    const std::string nonce = hello.value("nonce", ""), proof_hex = hello.value("proof", "");
    Result<std::string> proof = Unhex(proof_hex, kAuthProofBytes, "proof");
    if (nonce.size() != 64 || !proof.ok() || !key_.Verify(kClientLabel, challenge, nonce, *proof)) {
      (void)c.WriteLine({{"error", "this peer does not hold the run's key: no weights for it"}});
      return FailedPreconditionError("a peer without the run's key was turned away");
    }
    return c.WriteLine({{"proof", Hex(key_.Proof(kServerLabel, nonce, challenge))}});
  }

  Status ServeOne(Conn& c) {
    HF_ASSIGN_OR_RETURN(json ask, c.ReadJsonLine(-1));
    if (!ask.contains("after") || !ask["after"].is_number_integer()) {
      return InvalidArgumentError("a request without an integer \"after\"");
    }
    const int64_t after = ask["after"].get<int64_t>();
    std::shared_ptr<const Version> v;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || (latest_ != nullptr && latest_->version > after); });
      if (stopping_) return CancelledError("stopping");
      v = latest_;
    }
    char sum[17];
    std::snprintf(sum, sizeof(sum), "%016llx", static_cast<unsigned long long>(v->xxh3));
    HF_RETURN_IF_ERROR(c.WriteLine({{"version", v->version},
                                    {"index", v->index.size()},
                                    {"data", v->dump->data.size() * 4},
                                    {"xxh3", sum}}));
    HF_RETURN_IF_ERROR(c.Write(v->index.data(), v->index.size()));
    HF_RETURN_IF_ERROR(c.Write(v->dump->data.data(), v->dump->data.size() * 4));
    sent_.fetch_add(1);
    return Status::Ok();
  }

  const RunKey key_;
  std::string host_;
  uint16_t port_ = 0;
  int listen_fd_ = -1;
  std::thread accept_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;                  // guarded by mu_
  std::shared_ptr<const Version> latest_;  // guarded by mu_
  struct Session {
    std::thread thread;
    bool done = false;  // guarded by mu_
  };
  std::list<Session> sessions_;            // guarded by mu_ (a list: a Session never moves)
  std::vector<Conn*> conns_;               // guarded by mu_
  std::atomic<uint64_t> sent_{0};
};

Result<std::unique_ptr<WeightsServer>> WeightsServer::Start(const std::string& host, RunKey key) {
  // spdlog builds its registry on first use; build it before our threads can
  // log (its lazy construction is invisible to ThreadSanitizer).
  spdlog::default_logger();
  auto impl = std::make_shared<Impl>(std::move(key));
  HF_RETURN_IF_ERROR(impl->Listen(host));
  return std::unique_ptr<WeightsServer>(new WeightsServer(std::move(impl)));
}
WeightsServer::~WeightsServer() { Stop(); }
HostPort WeightsServer::address() const { return impl_->address(); }
void WeightsServer::Publish(int64_t version, std::shared_ptr<const ParamsDump> dump) {
  impl_->Publish(version, std::move(dump));
}
uint64_t WeightsServer::sent() const { return impl_->sent(); }
void WeightsServer::Stop() { impl_->Stop(); }

// ---- WeightsSubscriber ----------------------------------------------------

class WeightsSubscriber::Impl {
 public:
  Impl(std::string addr_file, RunKey key) : addr_file_(std::move(addr_file)), key_(std::move(key)) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      if (conn_ != nullptr) conn_->Shutdown();
    }
    cv_.notify_all();
    thread_.join();
  }

  std::optional<ReceivedWeights> Latest() const {
    std::lock_guard<std::mutex> lock(mu_);
    return latest_;
  }
  uint64_t connects() const { return connects_.load(); }

 private:
  void Loop() {
    std::string last_error;
    double backoff_s = 0.02;
    for (;;) {
      std::string address;
      Status s = Session(&address);
      {
        std::unique_lock<std::mutex> lock(mu_);
        latest_.reset();  // what came from that server is no longer the policy
        conn_ = nullptr;
        if (stopping_) return;
        if (s.message() != last_error) {
          // Once per kind of failure: a learner being restarted is retried every few ms.
          if (!address.empty()) {
            spdlog::info("weights subscriber: {} ({}); reading the exchange directory's weights until it answers",
                         address, s.message());
          }
          last_error = s.message();
        }
        cv_.wait_for(lock, std::chrono::duration<double>(backoff_s), [&] { return stopping_; });
        if (stopping_) return;
      }
      backoff_s = std::min(0.2, backoff_s * 2);  // a refused connect costs microseconds
      if (s.ok()) backoff_s = 0.02;
    }
  }

  // One connection: connect, prove the key, then receive versions until it fails.
  Status Session(std::string* address) {
    std::ifstream in(addr_file_);
    std::string text;
    if (!(in >> text)) return NotFoundError("no weights server address in " + addr_file_ + " (yet)");
    *address = text;
    HF_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(text));
    HF_ASSIGN_OR_RETURN(int fd, ConnectTo(hp, 5000));
    Conn c(fd);
    // Forgets `c` before it is closed (declared after it: destroyed first).
    struct Forget {
      Impl* self;
      ~Forget() {
        std::lock_guard<std::mutex> lock(self->mu_);
        self->conn_ = nullptr;
      }
    } forget{this};
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return CancelledError("stopping");
      conn_ = &c;
    }
    connects_.fetch_add(1);
    HF_ASSIGN_OR_RETURN(json challenge, c.ReadJsonLine(30000));
    const std::string ch = challenge.value("challenge", "");
    if (challenge.value("v", 0) != 1 || ch.size() != 64) return CorruptionError("not a holdfast weights server");
    HF_ASSIGN_OR_RETURN(std::string nonce, Nonce());
    HF_RETURN_IF_ERROR(c.WriteLine({{"nonce", nonce}, {"proof", Hex(key_.Proof(kClientLabel, ch, nonce))}}));
    HF_ASSIGN_OR_RETURN(json answer, c.ReadJsonLine(30000));
    if (answer.contains("error")) return FailedPreconditionError(answer.value("error", ""));
    Result<std::string> proof = Unhex(answer.value("proof", ""), kAuthProofBytes, "proof");
    if (!proof.ok() || !key_.Verify(kServerLabel, nonce, ch, *proof)) {
      return FailedPreconditionError("the weights server at " + text + " does not hold the run's key");
    }
    int64_t after = -1;
    for (;;) {
      HF_RETURN_IF_ERROR(c.WriteLine({{"after", after}}));
      HF_ASSIGN_OR_RETURN(json head, c.ReadJsonLine(-1));
      const auto t0 = Clock::now();
      const int64_t version = head.value("version", int64_t{-1});
      const int64_t index_bytes = head.value("index", int64_t{-1}), data_bytes = head.value("data", int64_t{-1});
      if (version <= after || index_bytes < 0 || index_bytes > kMaxIndexBytes || data_bytes < 0 ||
          data_bytes > kMaxDataBytes || data_bytes % 4 != 0) {
        return CorruptionError("a version header out of bounds: " + head.dump());
      }
      std::string index(static_cast<size_t>(index_bytes), '\0');
      std::vector<float> data(static_cast<size_t>(data_bytes / 4));
      HF_RETURN_IF_ERROR(c.ReadExact(index.data(), index.size(), 60000));
      HF_RETURN_IF_ERROR(c.ReadExact(data.data(), data.size() * 4, 60000));
      char sum[17];
      std::snprintf(sum, sizeof(sum), "%016llx",
                    static_cast<unsigned long long>(Checksum(index, data.data(), data.size())));
      if (head.value("xxh3", "") != sum) {
        return CorruptionError("version " + std::to_string(version) + " from " + text + " fails its checksum");
      }
      HF_ASSIGN_OR_RETURN(ParamsDump dump, ParseParamsDump(index, std::move(data), "weights version " +
                                                                                     std::to_string(version) +
                                                                                     " from " + text));
      ReceivedWeights got;
      got.version = version;
      got.dump = std::make_shared<const ParamsDump>(std::move(dump));
      got.from = text;
      got.transfer_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      {
        std::lock_guard<std::mutex> lock(mu_);
        latest_ = std::move(got);
      }
      after = version;
    }
  }

  const std::string addr_file_;
  const RunKey key_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;                  // guarded by mu_
  Conn* conn_ = nullptr;                   // guarded by mu_: the live connection, to shut down on stop
  std::optional<ReceivedWeights> latest_;  // guarded by mu_
  std::atomic<uint64_t> connects_{0};
  std::thread thread_;  // last
};

WeightsSubscriber::WeightsSubscriber(std::string addr_file, RunKey key) {
  spdlog::default_logger();  // before the thread can log (as WeightsServer::Start)
  impl_ = std::make_shared<Impl>(std::move(addr_file), std::move(key));
}
WeightsSubscriber::~WeightsSubscriber() = default;
std::optional<ReceivedWeights> WeightsSubscriber::Latest() const { return impl_->Latest(); }
uint64_t WeightsSubscriber::connects() const { return impl_->connects(); }

}  // namespace holdfast::rl
