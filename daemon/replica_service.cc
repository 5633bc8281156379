#include "daemon/replica_service.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <spdlog/spdlog.h>

#include "checkpoint/format.h"
#include "common/tcp_store.h"

namespace holdfast {

namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
constexpr size_t kChunk = 1 << 20;
constexpr milliseconds kIoTimeout{30000};    // one read or write on an open connection
constexpr milliseconds kPushConnect{1000};   // a successor that does not answer is skipped
}  // namespace

// One blocking connection with timeouts on every read and write.
class ReplicaConn {
 public:
  explicit ReplicaConn(int fd) : fd_(fd) {
    timeval tv{static_cast<time_t>(kIoTimeout.count() / 1000), 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~ReplicaConn() {
    if (fd_ >= 0) ::close(fd_);
  }
  ReplicaConn(const ReplicaConn&) = delete;
  ReplicaConn& operator=(const ReplicaConn&) = delete;
  int fd() const { return fd_; }

  Status WriteAll(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::send(fd_, p, n, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return ErrnoError("send to the replica peer", errno);
      p += w;
      n -= static_cast<size_t>(w);
    }
    return Status::Ok();
  }
  Status WriteLine(const std::string& line) { return WriteAll(line.data(), line.size()); }

  Result<std::string> ReadLine() {
    for (;;) {
      const size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buf_.substr(0, nl + 1);
        buf_.erase(0, nl + 1);
        return line;
      }
      if (buf_.size() >= kMaxReplicaLineBytes) {
        return InvalidArgumentError("a replica line longer than " + std::to_string(kMaxReplicaLineBytes) + " bytes");
      }
      char tmp[4096];
      const ssize_t n = ::recv(fd_, tmp, std::min(sizeof(tmp), kMaxReplicaLineBytes - buf_.size()), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoError("read from the replica peer", errno);
      if (n == 0) return UnavailableError("the replica peer closed the connection");
      buf_.append(tmp, static_cast<size_t>(n));
    }
  }

  // Reads exactly n bytes, handing them to `sink` in pieces.
  Status ReadExact(uint64_t n, const std::function<Status(const uint8_t*, size_t)>& sink) {
    const size_t have = std::min<uint64_t>(buf_.size(), n);
    if (have > 0) {
      HF_RETURN_IF_ERROR(sink(reinterpret_cast<const uint8_t*>(buf_.data()), have));
      buf_.erase(0, have);
      n -= have;
    }
    std::unique_ptr<uint8_t[]> chunk(new uint8_t[kChunk]);
    while (n > 0) {
      const ssize_t r = ::recv(fd_, chunk.get(), std::min<uint64_t>(kChunk, n), 0);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return ErrnoError("read from the replica peer", errno);
      if (r == 0) return UnavailableError("the replica peer closed the connection " + std::to_string(n) +
                                          " bytes before the end of the file it announced");
      HF_RETURN_IF_ERROR(sink(chunk.get(), static_cast<size_t>(r)));
      n -= static_cast<uint64_t>(r);
    }
    return Status::Ok();
  }

 private:
  int fd_;
  std::string buf_;
};

namespace {

Result<int> Dial(const std::string& addr, milliseconds timeout) {
  HF_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(addr));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int gai = ::getaddrinfo(hp.host.c_str(), std::to_string(hp.port).c_str(), &hints, &res); gai != 0) {
    return UnavailableError("resolve " + hp.host + ": " + gai_strerror(gai));
  }
  Status last = UnavailableError("no address for " + addr);
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = ::poll(&p, 1, static_cast<int>(timeout.count())) == 1 ? 0 : -1;
      int err = rc == 0 ? 0 : ETIMEDOUT;
      socklen_t len = sizeof(err);
      if (rc == 0) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc == 0) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      ::freeaddrinfo(res);
      return fd;
    }
    last = ErrnoError("connect to the replica port " + addr, errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return UnavailableError(last.message());  // the ring skips a node that does not answer
}

// Connects and runs the client's half of the handshake.
Result<std::unique_ptr<ReplicaConn>> Open(const std::string& addr, const RunKey& key, milliseconds timeout) {
  HF_ASSIGN_OR_RETURN(int fd, Dial(addr, timeout));
  auto conn = std::make_unique<ReplicaConn>(fd);
  HF_ASSIGN_OR_RETURN(std::string line, conn->ReadLine());
  HF_ASSIGN_OR_RETURN(std::string challenge, ParseChallenge(line));
  HF_ASSIGN_OR_RETURN(std::string nonce, RandomBytes(kAuthNonceBytes));
  HF_RETURN_IF_ERROR(conn->WriteLine(EncodeHello(nonce, key.Proof(kReplicaClientLabel, challenge, nonce))));
  HF_ASSIGN_OR_RETURN(line, conn->ReadLine());
  HF_ASSIGN_OR_RETURN(std::string proof, ParseWelcome(line));
  if (!key.Verify(kReplicaServerLabel, challenge, nonce, proof)) {
    return FailedPreconditionError("the replica port " + addr + " did not prove it holds the run's key");
  }
  return conn;
}

Result<ReplicaReply> Ask(ReplicaConn* conn, const ReplicaRequest& req) {
  HF_RETURN_IF_ERROR(conn->WriteLine(EncodeRequest(req)));
  HF_ASSIGN_OR_RETURN(std::string line, conn->ReadLine());
  HF_ASSIGN_OR_RETURN(ReplicaReply reply, ParseReply(line));
  if (reply.type == ReplicaReply::Type::kError) return FailedPreconditionError("the peer refused: " + reply.text);
  return reply;
}

// Sends a file's bytes, at most `bytes_per_s` (0 = unlimited) unless `stop`.
Status SendFile(ReplicaConn* conn, const std::string& path, uint64_t size, double bytes_per_s,
                const std::atomic<bool>* stop) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open " + path, errno);
  std::unique_ptr<uint8_t[]> buf(new uint8_t[kChunk]);
  const Clock::time_point start = Clock::now();
  uint64_t sent = 0;
  Status s;
  while (s.ok() && sent < size) {
    const ssize_t n = ::read(fd, buf.get(), std::min<uint64_t>(kChunk, size - sent));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      s = n == 0 ? IoError(path + " is shorter than it was") : ErrnoError("read " + path, errno);
      break;
    }
    s = conn->WriteAll(buf.get(), static_cast<size_t>(n));
    sent += static_cast<uint64_t>(n);
    while (s.ok() && bytes_per_s > 0 && (stop == nullptr || !stop->load())) {
      const auto due = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(sent / bytes_per_s));
      if (Clock::now() >= due) break;
      std::this_thread::sleep_for(std::min<Clock::duration>(due - Clock::now(), milliseconds(20)));
    }
    if (stop != nullptr && stop->load()) s = CancelledError("holdfastd is stopping");
  }
  ::close(fd);
  return s;
}

std::string Mib(uint64_t bytes) {
  char t[32];
  std::snprintf(t, sizeof(t), "%.1f MiB", bytes / 1048576.0);
  return t;
}

}  // namespace

std::map<int, std::string> ReadReplicaEndpoints(const std::string& run_dir) {
  std::map<int, std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(run_dir + "/replicas", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("node-", 0) != 0 || name.size() > 9 || name.size() < 6) continue;
    const std::string digits = name.substr(5);
    if (digits.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path());
    std::string addr;
    if (std::getline(in, addr) && !addr.empty() && addr.size() <= kMaxReplicaAddrBytes) out[std::stoi(digits)] = addr;
  }
  return out;
}

Result<std::vector<SnapshotCopy>> RequestInventory(const std::string& addr, const RunKey& key, milliseconds timeout) {
  HF_ASSIGN_OR_RETURN(std::unique_ptr<ReplicaConn> conn, Open(addr, key, timeout));
  ReplicaRequest req;
  req.type = ReplicaRequest::Type::kInventory;
  HF_ASSIGN_OR_RETURN(ReplicaReply reply, Ask(conn.get(), req));
  if (reply.type != ReplicaReply::Type::kInventory) return InvalidArgumentError("the replica port " + addr + " answered an inventory request with something else");
  return reply.copies;
}

Result<std::string> RequestGather(const std::string& addr, const RunKey& key, int64_t step,
                                  const std::vector<GatherFile>& files, milliseconds timeout) {
  HF_ASSIGN_OR_RETURN(std::unique_ptr<ReplicaConn> conn, Open(addr, key, timeout));
  ReplicaRequest req;
  req.type = ReplicaRequest::Type::kGather;
  req.step = step;
  req.gather = files;
  HF_ASSIGN_OR_RETURN(ReplicaReply reply, Ask(conn.get(), req));
  return reply.text;
}

Status FetchFile(const ReplicaHolder& holder, const RunKey& key, int64_t step, const std::string& name,
                 const std::string& dest, milliseconds timeout) {
  HF_ASSIGN_OR_RETURN(std::unique_ptr<ReplicaConn> conn, Open(holder.addr, key, timeout));
  ReplicaRequest req;
  req.type = ReplicaRequest::Type::kFetch;
  req.step = step;
  req.kind = holder.kind;
  req.origin = holder.origin;
  req.name = name;
  HF_ASSIGN_OR_RETURN(ReplicaReply reply, Ask(conn.get(), req));
  if (reply.type != ReplicaReply::Type::kFile) return InvalidArgumentError("the replica port did not send a file");
  const int fd = ::open(dest.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError("create " + dest, errno);
  Status s = conn->ReadExact(reply.size, [&](const uint8_t* p, size_t n) -> Status {
    for (size_t off = 0; off < n;) {
      const ssize_t w = ::write(fd, p + off, n - off);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return ErrnoError("write " + dest, errno);
      off += static_cast<size_t>(w);
    }
    return Status::Ok();
  });
  ::close(fd);
  std::error_code ec;
  if (!s.ok()) fs::remove(dest, ec);
  return s;
}

ReplicaService::ReplicaService(ReplicaServiceOptions options, const RunKey& key)
    : opts_(std::move(options)), key_(key), store_(opts_.root, opts_.node, opts_.budget_bytes) {}

Result<std::unique_ptr<ReplicaService>> ReplicaService::Start(ReplicaServiceOptions options, const RunKey& key) {
  std::unique_ptr<ReplicaService> s(new ReplicaService(std::move(options), key));
  const ReplicaServiceOptions& o = s->opts_;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (int gai = ::getaddrinfo(o.bind_addr.c_str(), "0", &hints, &res); gai != 0) {
    return UnavailableError("the replica port: resolve this node's address " + o.bind_addr + ": " + gai_strerror(gai));
  }
  const int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool bound = fd >= 0 && ::bind(fd, res->ai_addr, res->ai_addrlen) == 0 && ::listen(fd, 64) == 0;
  ::freeaddrinfo(res);
  if (!bound) {
    Status e = ErrnoError("the replica port: bind " + o.bind_addr, errno);
    if (fd >= 0) ::close(fd);
    return e;
  }
  s->listen_fd_ = fd;
  sockaddr_storage sa{};
  socklen_t len = sizeof(sa);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  const uint16_t port = ntohs(sa.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&sa)->sin6_port
                                                       : reinterpret_cast<sockaddr_in*>(&sa)->sin_port);
  s->addr_ = HostPort{o.bind_addr, port}.ToString();
  std::error_code ec;
  fs::create_directories(o.run_dir + "/replicas", ec);
  s->endpoint_file_ = o.run_dir + "/replicas/node-" + std::to_string(o.node);
  {
    std::ofstream out(s->endpoint_file_ + ".tmp", std::ios::trunc);
    out << s->addr_ << "\n";
  }
  if (::rename((s->endpoint_file_ + ".tmp").c_str(), s->endpoint_file_.c_str()) != 0) {
    return ErrnoError("publish the replica port in " + s->endpoint_file_, errno);
  }
  s->accept_thread_ = std::thread([p = s.get()] { p->AcceptMain(); });
  if (o.send) s->send_thread_ = std::thread([p = s.get()] { p->SendMain(); });
  spdlog::info("memory snapshot replicas: serving on {} (node {}), pushing to the next node at {}", s->addr_, o.node,
               o.mb_per_s > 0 ? std::to_string(static_cast<int64_t>(o.mb_per_s)) + " MiB/s at most" : "full speed");
  return s;
}

ReplicaService::~ReplicaService() { Stop(); }

void ReplicaService::Stop() {
  if (stop_.exchange(true)) return;
  cv_.notify_all();
  if (listen_fd_ >= 0) ::shutdown(listen_fd_, SHUT_RDWR);
  if (accept_thread_.joinable()) accept_thread_.join();
  if (send_thread_.joinable()) send_thread_.join();
  {
    std::unique_lock<std::mutex> l(mu_);
    for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
    workers_done_.wait(l, [this] { return workers_ == 0; });
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
  std::error_code ec;
  if (ReadReplicaEndpoints(opts_.run_dir)[opts_.node] == addr_) fs::remove(endpoint_file_, ec);
}

void ReplicaService::SetLocalFiles(std::vector<std::string> names) {
  std::lock_guard<std::mutex> l(mu_);
  local_files_ = std::move(names);
}

void ReplicaService::AcceptMain() {
  while (!Stopping()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> l(mu_);
    if (Stopping() || open_fds_.size() >= 64) {
      ::close(fd);  // a flood of connections: the peer retries with its next step
      continue;
    }
    open_fds_.insert(fd);
    ++workers_;
    std::thread([this, fd] {
      Serve(fd);  // its last use of the fd is before it leaves open_fds_
      std::lock_guard<std::mutex> done(mu_);
      --workers_;
      workers_done_.notify_all();
    }).detach();
  }
}

void ReplicaService::Serve(int fd) {
  {
    ReplicaConn conn(fd);
    ServeOn(conn);
  }
  std::lock_guard<std::mutex> l(mu_);
  open_fds_.erase(fd);  // closed: Stop must not shut down a number the kernel hands out again
}

void ReplicaService::ServeOn(ReplicaConn& conn) {
  auto refuse = [&](const Status& why) {
    spdlog::warn("replica port {}: refused a peer: {}", addr_, why.ToString());
    ReplicaReply r;
    r.type = ReplicaReply::Type::kError;
    r.text = why.message();
    (void)conn.WriteLine(EncodeReply(r));
  };
  Result<std::string> nonce = RandomBytes(kAuthNonceBytes);
  Result<std::string> hello = nonce.ok() && conn.WriteLine(EncodeChallenge(*nonce)).ok() ? conn.ReadLine()
                                                                                        : Result<std::string>(nonce.status());
  Result<std::pair<std::string, std::string>> h = hello.ok() ? ParseHello(*hello) : hello.status();
  if (!h.ok()) {
    refuse(h.status());
    return;
  }
  if (!key_.Verify(kReplicaClientLabel, *nonce, h->first, h->second)) {
    refuse(FailedPreconditionError("the peer did not prove it holds the run's key (another run's daemon, or not a "
                                   "holdfastd)"));
    return;
  }
  Result<std::string> line = conn.WriteLine(EncodeWelcome(key_.Proof(kReplicaServerLabel, *nonce, h->first))).ok()
                                 ? conn.ReadLine()
                                 : Result<std::string>(UnavailableError("the peer went away"));
  Result<ReplicaRequest> req = line.ok() ? ParseRequest(*line) : line.status();
  if (!req.ok()) {
    refuse(req.status());
    return;
  }
  ReplicaReply reply;
  Status s;
  switch (req->type) {
    case ReplicaRequest::Type::kInventory:
      reply.type = ReplicaReply::Type::kInventory;
      reply.copies = store_.Inventory();
      break;
    case ReplicaRequest::Type::kFetch: {
      Result<std::string> path = store_.PathOf(req->kind, req->origin, req->step, req->name);
      struct stat st {};
      if (path.ok() && ::stat(path->c_str(), &st) != 0) path = ErrnoError("stat " + *path, errno);
      if (!path.ok()) {
        s = path.status();
        break;
      }
      reply.type = ReplicaReply::Type::kFile;
      reply.size = static_cast<uint64_t>(st.st_size);
      s = conn.WriteLine(EncodeReply(reply));
      if (s.ok()) s = SendFile(&conn, *path, reply.size, 0, &stop_);
      if (!s.ok()) spdlog::warn("replica port {}: sending {} failed: {}", addr_, *path, s.ToString());
      return;
    }
    case ReplicaRequest::Type::kPush: {
      std::lock_guard<std::mutex> l(push_mu_);
      Result<std::string> incoming = store_.BeginPush(req->origin, req->step, req->files);
      if (!incoming.ok()) {
        s = incoming.status();
        break;
      }
      uint64_t total = 0;
      for (const ReplicaFile& f : req->files) {
        const std::string path = *incoming + "/" + f.name;
        const int out = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (out < 0) {
          s = ErrnoError("create " + path, errno);
          break;
        }
        Xxh3Stream stream;
        s = conn.ReadExact(f.size, [&](const uint8_t* p, size_t n) -> Status {
          stream.Update(p, n);
          for (size_t off = 0; off < n;) {
            const ssize_t w = ::write(out, p + off, n - off);
            if (w < 0 && errno == EINTR) continue;
            if (w < 0) return ErrnoError("write " + path, errno);
            off += static_cast<size_t>(w);
          }
          return Status::Ok();
        });
        const uint64_t sum = stream.Digest();
        ::close(out);
        if (s.ok() && sum != f.xxh3) {
          s = CorruptionError(f.name + " arrived with XXH3 " + HexU64(sum) + ", not the " + HexU64(f.xxh3) +
                              " it was sent with");
        }
        if (!s.ok()) break;
        total += f.size;
      }
      if (s.ok()) s = store_.CommitPush(*incoming, req->origin, req->step);
      if (!s.ok()) {
        store_.AbortPush(*incoming);
        s = s.WithContext("the replica of node " + std::to_string(req->origin) + "'s step " + std::to_string(req->step));
        break;
      }
      spdlog::debug("kept the replica of node {}'s memory snapshot of step {} ({})", req->origin, req->step, Mib(total));
      break;
    }
    case ReplicaRequest::Type::kGather: {
      auto fetch = [this](const ReplicaHolder& holder, int64_t step, const std::string& name, const std::string& dest) {
        return FetchFile(holder, key_, step, name, dest, kIoTimeout);
      };
      Result<std::string> note = store_.Gather(req->step, req->gather, fetch);
      if (!note.ok()) {
        s = note.status();
        break;
      }
      reply.text = *note;
      spdlog::info("memory snapshot of step {} is whole on node {}{}", req->step, opts_.node,
                   note->empty() ? "" : ": " + *note);
      break;
    }
  }
  if (!s.ok()) {
    refuse(s);
  } else {
    (void)conn.WriteLine(EncodeReply(reply));
  }
}

Status ReplicaService::Push(const std::string& addr, int64_t step) {
  ReplicaRequest req;
  req.type = ReplicaRequest::Type::kPush;
  req.step = step;
  req.origin = opts_.node;
  std::vector<std::string> paths;
  for (const SnapshotCopy& c : store_.Inventory()) {
    if (c.kind != CopyKind::kHeld || c.step != step) continue;
    for (ReplicaFile f : c.files) {
      HF_ASSIGN_OR_RETURN(std::string path, store_.PathOf(CopyKind::kHeld, opts_.node, step, f.name));
      HF_ASSIGN_OR_RETURN(auto sum, FileXxh3(path));
      f.xxh3 = sum.first;
      f.size = sum.second;
      req.files.push_back(f);
      paths.push_back(path);
    }
  }
  if (req.files.empty()) return NotFoundError("step " + std::to_string(step) + " is not held");
  HF_ASSIGN_OR_RETURN(std::unique_ptr<ReplicaConn> conn, Open(addr, key_, kPushConnect));
  HF_RETURN_IF_ERROR(conn->WriteLine(EncodeRequest(req)));
  for (size_t i = 0; i < paths.size(); ++i) {
    HF_RETURN_IF_ERROR(SendFile(conn.get(), paths[i], req.files[i].size, opts_.mb_per_s * 1048576.0, &stop_));
  }
  HF_ASSIGN_OR_RETURN(std::string line, conn->ReadLine());
  HF_ASSIGN_OR_RETURN(ReplicaReply reply, ParseReply(line));
  if (reply.type == ReplicaReply::Type::kError) return FailedPreconditionError("node at " + addr + " refused: " + reply.text);
  return Status::Ok();
}

Status ReplicaService::PushToSuccessor(int64_t step) {
  const std::map<int, std::string> peers = ReadReplicaEndpoints(opts_.run_dir);
  std::vector<std::pair<int, std::string>> ring;  // the nodes after this one, then the ones before
  for (auto it = peers.upper_bound(opts_.node); it != peers.end(); ++it) ring.push_back(*it);
  for (auto it = peers.begin(); it != peers.end() && it->first < opts_.node; ++it) ring.push_back(*it);
  Status last = UnavailableError("no other node publishes a replica port");
  for (const auto& [node, addr] : ring) {
    last = Push(addr, step);
    if (last.ok() || last.code() != StatusCode::kUnavailable) return last.WithContext("node " + std::to_string(node));
  }
  return last;
}

void ReplicaService::SendMain() {
  std::string last_error;
  while (!Stopping()) {
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait_for(l, milliseconds(100), [this] { return Stopping(); });
    }
    std::vector<std::string> names;
    {
      std::lock_guard<std::mutex> l(mu_);
      names = local_files_;
    }
    if (names.empty() || Stopping()) continue;
    std::vector<int64_t> complete;
    for (int64_t step : store_.CompleteLocalSteps(names)) {
      if (step % std::max<int64_t>(opts_.every, 1) == 0) complete.push_back(step);
    }
    for (size_t i = std::min<size_t>(complete.size(), 2); i-- > 0;) {  // the two newest, oldest first
      if (complete[i] > last_pushed_.load()) (void)store_.Hold(complete[i], names);
    }
    std::vector<int64_t> held = store_.HeldSteps();
    for (auto it = held.rbegin(); it != held.rend() && !Stopping(); ++it) {
      if (*it <= last_pushed_.load()) continue;
      Status s = PushToSuccessor(*it);
      if (s.ok()) {
        if (last_pushed_.load() < 0) spdlog::info("memory snapshot of step {} replicated to the next node", *it);
        last_pushed_ = *it;
        last_error.clear();
      } else if (s.message() != last_error) {
        last_error = s.message();
        spdlog::warn("memory snapshot of step {} not replicated (tried again with the next): {}", *it, s.ToString());
      }
    }
  }
}

}  // namespace holdfast
