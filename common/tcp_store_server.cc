#include "common/tcp_store_server.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <deque>
#include <map>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/memory_store.h"
#include "common/peer_auth.h"
#include "common/tcp_store.h"
#include "common/tcp_store_wire.h"

namespace holdfast {

namespace asio = boost::asio;
using asio::ip::tcp;
namespace wire = tcp_store_wire;

namespace {

// The one place a Boost error code becomes a Status (system errors go through ErrnoError).
Status AsioError(const std::string& context, const boost::system::error_code& ec) {
  if (ec.category() == boost::system::system_category()) return ErrnoError(context, ec.value());
  return IoError(context + ": " + ec.message());
}

std::vector<uint8_t> Frame(uint8_t type, const std::vector<uint8_t>& body) {
  std::vector<uint8_t> out(wire::kHeaderBytes + body.size());
  wire::EncodeHeader(type, static_cast<uint32_t>(body.size()), out.data());
  std::copy(body.begin(), body.end(), out.begin() + wire::kHeaderBytes);
  return out;
}

std::vector<uint8_t> ErrorFrame(StatusCode code, const std::string& message) {
  std::vector<uint8_t> body;
  wire::Writer w(&body);
  w.U8(static_cast<uint8_t>(code));
  w.Raw(reinterpret_cast<const uint8_t*>(message.data()), message.size());
  return Frame(wire::kReplyError, body);
}

}  // namespace

class Connection;

// Everything below runs on the io_context's thread.
class AsioTcpStoreServer::Impl : public std::enable_shared_from_this<AsioTcpStoreServer::Impl> {
 public:
  Impl(asio::io_context* io, RunKey key) : io_(*io), key_(std::move(key)), acceptor_(*io), retry_timer_(*io) {}

  Status Open(const std::string& host, uint16_t port);
  void Accept();
  void Shutdown();
  bool shut_down() const { return shut_down_; }

  // Request handlers: each returns the reply frame, or parks the connection.
  void Handle(const std::shared_ptr<Connection>& conn, uint8_t type, wire::Reader* r);
  void Forget(Connection* conn);
  void Unpark(Connection* conn);
  // Re-checks the waiters parked on key after it was set.
  void Wake(const std::string& key);
  // Whether every key is set; *missing = the first that is not.
  bool AllSet(const std::vector<std::string>& keys, std::string* missing) const;
  const std::vector<uint8_t>* Find(const std::string& key) const {
    auto it = data_.find(key);
    return it == data_.end() ? nullptr : &it->second;
  }
  size_t connection_count() const { return connections_.size(); }
  uint16_t local_port() const { return acceptor_.local_endpoint().port(); }
  const RunKey& key() const { return key_; }
  // Logs a refused client, the same refusal once per address: a peer that keeps knocking does not flood the log.
  void LogRefusal(const std::string& ip, const std::string& peer, const std::string& why);

 private:
  void Park(const std::shared_ptr<Connection>& conn, const std::vector<std::string>& keys);
  void SetKey(const std::string& key, std::vector<uint8_t> value);

  asio::io_context& io_;
  const RunKey key_;
  tcp::acceptor acceptor_;
  asio::steady_timer retry_timer_;  // paces accept after errors such as EMFILE
  std::set<std::string> refused_;  // "ip why" of the refusals logged so far
  bool shut_down_ = false;
  std::map<std::string, std::vector<uint8_t>> data_;
  std::set<std::shared_ptr<Connection>> connections_;
  // key -> connections parked until it is set.
  std::unordered_map<std::string, std::vector<std::shared_ptr<Connection>>> waiters_;

  friend class Connection;
};

// One client connection. Reads continuously (so a client that goes away while
// parked is noticed), answers one request at a time, writes through a queue.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<AsioTcpStoreServer::Impl> server, tcp::socket socket)
      : server_(std::move(server)), socket_(std::move(socket)), timer_(socket_.get_executor()) {
    boost::system::error_code ec;
    auto ep = socket_.remote_endpoint(ec);
    ip_ = ec ? "?" : ep.address().to_string();
    peer_ = ec ? "?" : ip_ + ":" + std::to_string(ep.port());
  }

  // Challenges the client first: nothing else is read until it proves it holds the run's key.
  void Start() {
    Result<std::string> nonce = RandomBytes(kAuthNonceBytes);
    if (!nonce.ok()) {
      spdlog::error("store server: {}", nonce.status().message());
      return Close();
    }
    nonce_ = std::move(nonce).value();
    Send(Frame(wire::kChallenge, std::vector<uint8_t>(nonce_.begin(), nonce_.end())));
    ReadHeader();
  }

  void Send(std::vector<uint8_t> frame) {
    if (closed_) return;
    out_.push_back(std::move(frame));
    if (!writing_) WriteNext();
  }

  // Replies with an error, then closes once it is written. Stops reading.
  void FailAndClose(StatusCode code, const std::string& message) {
    spdlog::warn("store server: closing connection from {}: {}", peer_, message);
    close_after_write_ = true;
    Send(ErrorFrame(code, message));
  }

  // A client that did not prove it holds the run's key: told why, logged once per address, closed.
  void Refuse(const std::string& why) {
    server_->LogRefusal(ip_, peer_, why);
    close_after_write_ = true;
    Send(ErrorFrame(StatusCode::kFailedPrecondition, "the store refused this client: " + why));
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    timer_.cancel();
    if (parked_) server_->Unpark(this);
    server_->Forget(this);
  }

  // Parked request state, owned by the loop thread.
  bool parked_ = false;
  uint8_t parked_type_ = 0;
  std::vector<std::string> parked_keys_;
  uint64_t park_id_ = 0;

  // Arms the timeout of a parked request.
  void ArmTimer(uint64_t timeout_ms) {
    timer_.expires_after(std::chrono::milliseconds(std::min(timeout_ms, wire::kMaxTimeoutMs)));
    timer_.async_wait([self = shared_from_this(), id = park_id_](const boost::system::error_code& ec) {
      if (ec || self->closed_ || !self->parked_ || self->park_id_ != id) return;
      std::string missing;
      self->server_->AllSet(self->parked_keys_, &missing);
      self->server_->Unpark(self.get());
      self->Send(ErrorFrame(StatusCode::kTimeout, "store key '" + missing + "' was not set within " +
                                                      std::to_string(self->timeout_ms_) + " ms"));
    });
  }
  uint64_t timeout_ms_ = 0;

 private:
  void ReadHeader() {
    asio::async_read(socket_, asio::buffer(header_),
                     [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
                       if (self->closed_) return;
                       if (ec) {
                         self->Close();  // EOF or reset: the client went away
                         return;
                       }
                       self->OnHeader();
                     });
  }

  void OnHeader() {
    if (!authenticated_) return OnAuthHeader();
    if (header_[0] != wire::kMagic0 || header_[1] != wire::kMagic1) {
      return FailAndClose(StatusCode::kInvalidArgument, "not a holdfast store message (bad magic bytes)");
    }
    if (header_[2] != wire::kVersion) {
      return FailAndClose(StatusCode::kInvalidArgument,
                          "store protocol version " + std::to_string(header_[2]) + " is not supported; server speaks " +
                              std::to_string(wire::kVersion));
    }
    if (!wire::IsRequest(header_[3])) {
      return FailAndClose(StatusCode::kInvalidArgument, "unknown store request type " + std::to_string(header_[3]));
    }
    uint32_t length = wire::HeaderLength(header_.data());
    if (length > wire::kMaxBodyBytes) {
      return FailAndClose(StatusCode::kInvalidArgument,
                          std::string("store ") + wire::MsgTypeName(header_[3]) + " message of " +
                              std::to_string(length) + " bytes exceeds the limit of " +
                              std::to_string(wire::kMaxBodyBytes));
    }
    if (parked_) {
      return FailAndClose(StatusCode::kInvalidArgument, "request sent before the previous one was answered");
    }
    body_.resize(length);
    asio::async_read(socket_, asio::buffer(body_),
                     [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
                       if (self->closed_) return;
                       if (ec) {
                         self->Close();
                         return;
                       }
                       wire::Reader r(self->body_.data(), self->body_.size());
                       self->server_->Handle(self, self->header_[3], &r);
                       // Large bodies are rare; do not keep their memory per connection.
                       if (self->body_.capacity() > (1u << 20)) std::vector<uint8_t>().swap(self->body_);
                       if (!self->closed_ && !self->close_after_write_) self->ReadHeader();
                     });
  }

  // The first message must be kAuth with the client's nonce and proof.
  void OnAuthHeader() {
    constexpr size_t kBody = kAuthNonceBytes + kAuthProofBytes;
    if (header_[0] != wire::kMagic0 || header_[1] != wire::kMagic1 || header_[2] != wire::kVersion) {
      return Refuse("it does not speak holdfast store protocol v" + std::to_string(wire::kVersion) +
                    " (its first bytes are no store v" + std::to_string(wire::kVersion) + " message)");
    }
    if (header_[3] != wire::kAuth || wire::HeaderLength(header_.data()) != kBody) {
      return Refuse(std::string("it sent ") + wire::MsgTypeName(header_[3]) +
                    " before proving it holds the run's key (ranks read it from HOLDFAST_STORE_KEY_FILE)");
    }
    body_.resize(kBody);
    asio::async_read(socket_, asio::buffer(body_), [self = shared_from_this()](const boost::system::error_code& ec,
                                                                              size_t) {
      if (self->closed_) return;
      if (ec) return self->Close();
      const std::string client_nonce(self->body_.begin(), self->body_.begin() + kAuthNonceBytes);
      const std::string proof(self->body_.begin() + kAuthNonceBytes, self->body_.end());
      const RunKey& key = self->server_->key();
      if (!key.Verify(wire::kClientLabel, self->nonce_, client_nonce, proof)) {
        return self->Refuse("its proof does not match the run's key (another run's key, or none)");
      }
      self->authenticated_ = true;
      const std::string mine = key.Proof(wire::kServerLabel, self->nonce_, client_nonce);
      self->Send(Frame(wire::kReplyOk, std::vector<uint8_t>(mine.begin(), mine.end())));
      self->ReadHeader();
    });
  }

  void WriteNext() {
    writing_ = true;
    asio::async_write(socket_, asio::buffer(out_.front()),
                      [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
                        if (self->closed_) return;
                        self->writing_ = false;
                        if (ec) {
                          self->Close();
                          return;
                        }
                        self->out_.pop_front();
                        if (!self->out_.empty()) {
                          self->WriteNext();
                        } else if (self->close_after_write_) {
                          self->Close();
                        }
                      });
  }

  std::shared_ptr<AsioTcpStoreServer::Impl> server_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  std::string ip_;    // the client's address, for the once-per-address refusal log
  std::string peer_;  // address:port
  std::string nonce_;  // this connection's challenge
  bool authenticated_ = false;  // the client proved it holds the run's key
  std::array<uint8_t, wire::kHeaderBytes> header_{};
  std::vector<uint8_t> body_;
  std::deque<std::vector<uint8_t>> out_;
  bool writing_ = false;
  bool close_after_write_ = false;
  bool closed_ = false;
};

Status AsioTcpStoreServer::Impl::Open(const std::string& host, uint16_t port) {
  std::string where = "store server: listen on " + HostPort{host, port}.ToString();
  boost::system::error_code ec;
  tcp::resolver resolver(io_);
  auto results = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
  if (ec) return AsioError(where + ": resolve", ec);
  Status last = InvalidArgumentError(where + ": no address found for '" + host + "'");
  for (const auto& entry : results) {
    acceptor_.open(entry.endpoint().protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(entry.endpoint(), ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (!ec) return Status::Ok();
    last = AsioError(where, ec);
    boost::system::error_code ignored;
    acceptor_.close(ignored);
  }
  return last;
}

void AsioTcpStoreServer::Impl::Accept() {
  acceptor_.async_accept([self = shared_from_this()](const boost::system::error_code& ec, tcp::socket socket) {
    if (self->shut_down_) return;
    if (ec) {
      spdlog::warn("store server: accept failed: {}", ec.message());
      self->retry_timer_.expires_after(std::chrono::milliseconds(100));
      self->retry_timer_.async_wait([self](const boost::system::error_code& e) {
        if (!e && !self->shut_down_) self->Accept();
      });
      return;
    }
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    auto conn = std::make_shared<Connection>(self, std::move(socket));
    self->connections_.insert(conn);
    conn->Start();
    self->Accept();
  });
}

void AsioTcpStoreServer::Impl::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  retry_timer_.cancel();
  auto conns = connections_;  // Close() erases from connections_
  for (const auto& c : conns) c->Close();
  connections_.clear();
  waiters_.clear();
  data_.clear();
}

void AsioTcpStoreServer::Impl::LogRefusal(const std::string& ip, const std::string& peer, const std::string& why) {
  if (!refused_.insert(ip + " " + why).second) return;
  spdlog::warn("store server: refused a client at {}: {} (the run goes on; the same refusal of {} is not logged again)",
               peer, why, ip);
}

void AsioTcpStoreServer::Impl::Forget(Connection* conn) {
  for (auto it = connections_.begin(); it != connections_.end(); ++it) {
    if (it->get() == conn) {
      connections_.erase(it);
      return;
    }
  }
}

bool AsioTcpStoreServer::Impl::AllSet(const std::vector<std::string>& keys, std::string* missing) const {
  for (const std::string& k : keys) {
    if (data_.count(k) == 0) {
      if (missing) *missing = k;
      return false;
    }
  }
  return true;
}

void AsioTcpStoreServer::Impl::Park(const std::shared_ptr<Connection>& conn, const std::vector<std::string>& keys) {
  conn->parked_ = true;
  ++conn->park_id_;
  conn->parked_keys_ = keys;
  for (const std::string& k : keys) {
    if (data_.count(k) == 0) waiters_[k].push_back(conn);
  }
  conn->ArmTimer(conn->timeout_ms_);
}

void AsioTcpStoreServer::Impl::Unpark(Connection* conn) {
  conn->parked_ = false;
  for (const std::string& k : conn->parked_keys_) {
    auto it = waiters_.find(k);
    if (it == waiters_.end()) continue;
    auto& v = it->second;
    v.erase(std::remove_if(v.begin(), v.end(), [&](const auto& c) { return c.get() == conn; }), v.end());
    if (v.empty()) waiters_.erase(it);
  }
}

void AsioTcpStoreServer::Impl::Wake(const std::string& key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  std::vector<std::shared_ptr<Connection>> woken = std::move(it->second);
  waiters_.erase(it);
  for (const auto& conn : woken) {
    if (!conn->parked_) continue;
    if (!AllSet(conn->parked_keys_, nullptr)) {
      // Still waiting on another key. Re-register for every missing one, since
      // a Delete may have removed a key that was set earlier.
      for (const std::string& k : conn->parked_keys_) {
        if (data_.count(k) != 0) continue;
        auto& v = waiters_[k];
        if (std::find(v.begin(), v.end(), conn) == v.end()) v.push_back(conn);
      }
      continue;
    }
    std::vector<uint8_t> payload;
    if (conn->parked_type_ == wire::kGet) payload = data_.at(conn->parked_keys_.front());
    Unpark(conn.get());
    conn->Send(Frame(wire::kReplyOk, payload));
  }
}

void AsioTcpStoreServer::Impl::SetKey(const std::string& key, std::vector<uint8_t> value) {
  data_[key] = std::move(value);
  Wake(key);
}

void AsioTcpStoreServer::Impl::Handle(const std::shared_ptr<Connection>& conn, uint8_t type, wire::Reader* r) {
  auto malformed = [&](const char* what) {
    conn->FailAndClose(StatusCode::kInvalidArgument, std::string("malformed store ") + wire::MsgTypeName(type) +
                                                         " request: " + what);
  };
  switch (type) {
    case wire::kSet: {
      std::string key = r->Key();
      if (!r->ok()) return malformed("bad key (keys are at most 4096 bytes)");
      if (r->remaining() > wire::kMaxValueBytes) return malformed("value larger than 64 MiB");
      SetKey(key, std::vector<uint8_t>(r->Rest(), r->Rest() + r->remaining()));
      return conn->Send(Frame(wire::kReplyOk, {}));
    }
    case wire::kGet: {
      uint64_t timeout_ms = r->U64();
      std::string key = r->Key();
      if (!r->ok() || r->remaining() != 0) return malformed("bad key or trailing bytes");
      if (const auto* v = Find(key)) return conn->Send(Frame(wire::kReplyOk, *v));
      conn->parked_type_ = wire::kGet;
      conn->timeout_ms_ = timeout_ms;
      return Park(conn, {key});
    }
    case wire::kAdd: {
      int64_t delta = static_cast<int64_t>(r->U64());
      std::string key = r->Key();
      if (!r->ok() || r->remaining() != 0) return malformed("bad key or trailing bytes");
      int64_t next = delta;
      if (const auto* v = Find(key)) {
        Result<int64_t> current = ParseStoreCounter(key, *v);
        if (!current.ok()) {
          return conn->Send(ErrorFrame(current.status().code(), current.status().message()));
        }
        // Wraps like the two's-complement counter it is rather than being undefined.
        next = static_cast<int64_t>(static_cast<uint64_t>(*current) + static_cast<uint64_t>(delta));
      }
      SetKey(key, StoreCounterBytes(next));
      std::vector<uint8_t> body;
      wire::Writer(&body).U64(static_cast<uint64_t>(next));
      return conn->Send(Frame(wire::kReplyOk, body));
    }
    case wire::kWait: {
      uint64_t timeout_ms = r->U64();
      uint32_t count = r->U32();
      if (!r->ok() || count > wire::kMaxWaitKeys) return malformed("bad key count (at most 1024 keys)");
      std::vector<std::string> keys;
      keys.reserve(count);
      for (uint32_t i = 0; i < count; ++i) keys.push_back(r->Key());
      if (!r->ok() || r->remaining() != 0) return malformed("bad key or trailing bytes");
      if (AllSet(keys, nullptr)) return conn->Send(Frame(wire::kReplyOk, {}));
      conn->parked_type_ = wire::kWait;
      conn->timeout_ms_ = timeout_ms;
      return Park(conn, keys);
    }
    case wire::kCheck: {
      std::string key = r->Key();
      if (!r->ok() || r->remaining() != 0) return malformed("bad key or trailing bytes");
      return conn->Send(Frame(wire::kReplyOk, {static_cast<uint8_t>(Find(key) != nullptr)}));
    }
    case wire::kDelete: {
      std::string key = r->Key();
      if (!r->ok() || r->remaining() != 0) return malformed("bad key or trailing bytes");
      data_.erase(key);
      return conn->Send(Frame(wire::kReplyOk, {}));
    }
    default:
      HF_CHECK_MSG(false, "unreachable: request type was validated in OnHeader");
  }
}

// ---- AsioTcpStoreServer ----------------------------------------------------

AsioTcpStoreServer::AsioTcpStoreServer(std::shared_ptr<Impl> impl, uint16_t port)
    : impl_(std::move(impl)), port_(port) {}

AsioTcpStoreServer::~AsioTcpStoreServer() { Shutdown(); }

Result<std::unique_ptr<AsioTcpStoreServer>> AsioTcpStoreServer::Listen(asio::io_context* io, const std::string& host,
                                                                       uint16_t port, const RunKey& key) {
  auto impl = std::make_shared<Impl>(io, key);
  HF_RETURN_IF_ERROR(impl->Open(host, port));
  uint16_t bound = impl->local_port();
  impl->Accept();
  return std::unique_ptr<AsioTcpStoreServer>(new AsioTcpStoreServer(std::move(impl), bound));
}

void AsioTcpStoreServer::Shutdown() { impl_->Shutdown(); }

size_t AsioTcpStoreServer::connection_count() const { return impl_->connection_count(); }

// ---- TcpStoreServer: an AsioTcpStoreServer on its own thread ----------------

struct TcpStoreServer::Impl {
  asio::io_context io;
  std::unique_ptr<AsioTcpStoreServer> server;  // touched only on the loop thread after start
  std::thread thread;
  HostPort address;
  bool stopped = false;  // guarded by the owner: Stop is not called concurrently with itself
};

TcpStoreServer::TcpStoreServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

TcpStoreServer::~TcpStoreServer() { Stop(); }

uint16_t TcpStoreServer::port() const { return impl_->address.port; }

HostPort TcpStoreServer::address() const { return impl_->address; }

void TcpStoreServer::Stop() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  // Shutdown on the loop thread; with nothing left to do, run() returns.
  asio::post(impl_->io, [impl = impl_.get()] { impl->server.reset(); });
  impl_->thread.join();
}

Result<std::unique_ptr<TcpStoreServer>> StartTcpStoreServer(const std::string& host, uint16_t port, const RunKey& key) {
  auto impl = std::make_unique<TcpStoreServer::Impl>();
  HF_ASSIGN_OR_RETURN(impl->server, AsioTcpStoreServer::Listen(&impl->io, host, port, key));
  impl->address = HostPort{host, impl->server->port()};
  impl->thread = std::thread([io = &impl->io] { io->run(); });
  return std::make_unique<TcpStoreServer>(std::move(impl));
}

}  // namespace holdfast
