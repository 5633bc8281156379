#include "daemon/control_server.h"

#include <fcntl.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "daemon/control_remote.h"
#include "daemon/unix_socket_address.h"

namespace holdfast {

namespace asio = boost::asio;

ControlServer::ControlServer(asio::io_context* io, std::string socket_path, Handler handler)
    : io_(*io), path_(std::move(socket_path)), handler_(std::move(handler)), acceptor_(io_), tcp_acceptor_(io_) {}

Status ControlServer::Start() {
  ::unlink(path_.c_str());  // a dead daemon's socket; the run lock says none is alive
  // A path longer than sun_path is bound through its directory (daemon/unix_socket_address.h).
  Result<UnixSocketAddress> addr = UnixSocketAddress::For(path_);
  if (!addr.ok()) return addr.status().WithContext("control socket " + path_);
  boost::system::error_code ec;
  asio::local::stream_protocol::endpoint ep(addr->sun_path());
  acceptor_.open(ep.protocol(), ec);
  if (!ec) ::fcntl(acceptor_.native_handle(), F_SETFD, FD_CLOEXEC);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return IoError("control socket " + path_ + ": " + ec.message());
  Accept();
  return Status::Ok();
}

Result<uint16_t> ControlServer::ListenTcp(const std::string& addr, uint16_t port, std::string munge_socket) {
  boost::system::error_code ec;
  asio::ip::tcp::endpoint ep(asio::ip::make_address(addr, ec), port);
  if (ec) return InvalidArgumentError("control port: bad address " + addr + ": " + ec.message());
  tcp_acceptor_.open(ep.protocol(), ec);
  if (!ec) ::fcntl(tcp_acceptor_.native_handle(), F_SETFD, FD_CLOEXEC);
  if (!ec) tcp_acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) tcp_acceptor_.bind(ep, ec);
  if (!ec) tcp_acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  const uint16_t bound = ec ? 0 : tcp_acceptor_.local_endpoint(ec).port();
  if (ec) return IoError("control port " + addr + ":" + std::to_string(port) + ": " + ec.message());
  tcp_where_ = addr + ":" + std::to_string(bound);
  munge_socket_ = std::move(munge_socket);
  AcceptTcp();
  return bound;
}

void ControlServer::Close() {
  boost::system::error_code ec;
  if (acceptor_.is_open()) {
    acceptor_.close(ec);
    ::unlink(path_.c_str());
  }
  if (tcp_acceptor_.is_open()) tcp_acceptor_.close(ec);
}

void ControlServer::Accept() {
  acceptor_.async_accept([self = shared_from_this()](const boost::system::error_code& e,
                                                     asio::local::stream_protocol::socket sock) {
    if (e) return;
    ::fcntl(sock.native_handle(), F_SETFD, FD_CLOEXEC);
    auto s = std::make_shared<asio::local::stream_protocol::socket>(std::move(sock));
    auto buf = std::make_shared<asio::streambuf>(kMaxControlMessageBytes);
    self->Serve(s, buf, "");
    self->Accept();
  });
}

void ControlServer::AcceptTcp() {
  tcp_acceptor_.async_accept([self = shared_from_this()](const boost::system::error_code& e,
                                                         asio::ip::tcp::socket sock) {
    if (e) return;
    ::fcntl(sock.native_handle(), F_SETFD, FD_CLOEXEC);
    boost::system::error_code ec;
    const auto remote = sock.remote_endpoint(ec);
    const std::string peer = ec ? "?:0" : remote.address().to_string() + ":" + std::to_string(remote.port());
    auto s = std::make_shared<asio::ip::tcp::socket>(std::move(sock));
    // Room for the credential in front of a request of the Unix socket's limit.
    auto buf = std::make_shared<asio::streambuf>(kMaxControlMessageBytes + kMaxControlCredentialBytes + 1);
    self->Serve(s, buf, peer);
    self->AcceptTcp();
  });
}

std::string ControlServer::Answer(int fd, const std::string& peer, const std::string& line, bool* close_after) {
  uid_t uid = 0;
  std::string request = line;
  if (peer.empty()) {
    auto creds = ReadPeerCredentials(fd);
    if (!creds.ok()) {
      *close_after = true;
      return EncodeErrorResponse(0, creds.status());
    }
    uid = creds->uid;
  } else {
    Result<AuthenticatedRequest> auth = AuthenticateControlLine(munge_socket_, tcp_where_, line);
    if (!auth.ok()) {
      *close_after = true;
      if (auth.status().code() == StatusCode::kUnavailable) {
        spdlog::error("control port: {}", auth.status().message());
        return EncodeErrorResponse(0, ControlErrorCode::kUnavailable, auth.status().message());
      }
      LogRefusal(peer, auth.status().message());
      return EncodeErrorResponse(0, ControlErrorCode::kUnauthenticated, auth.status().message());
    }
    uid = auth->uid;
    request = std::move(auth->request);
  }
  auto req = ParseControlRequest(request);
  if (!req.ok()) return EncodeErrorResponse(0, req.status());
  return handler_(*req, uid);
}

void ControlServer::LogRefusal(const std::string& peer, const std::string& why) {
  const std::string ip = peer.substr(0, peer.rfind(':'));
  if (!refused_.insert(ip + " " + why).second) return;
  spdlog::warn("control port: refused a request from {}: {} (the run goes on; the same refusal of {} is not logged "
               "again)",
               peer, why, ip);
}

template <typename Socket>
void ControlServer::Serve(std::shared_ptr<Socket> sock, std::shared_ptr<asio::streambuf> buf, std::string peer) {
  asio::async_read_until(*sock, *buf, '\n', [self = shared_from_this(), sock, buf, peer](
                                                const boost::system::error_code& e, size_t n) {
    std::string reply;
    bool close_after = false;
    if (e == asio::error::not_found) {
      reply = EncodeErrorResponse(0, ControlErrorCode::kInvalidArgument,
                                  "message longer than " + std::to_string(kMaxControlMessageBytes) + " bytes");
      close_after = true;
    } else if (e) {
      return;  // the peer went away
    } else {
      std::string line(asio::buffers_begin(buf->data()), asio::buffers_begin(buf->data()) + static_cast<long>(n));
      buf->consume(n);
      reply = self->Answer(sock->native_handle(), peer, line, &close_after);
    }
    auto out = std::make_shared<std::string>(std::move(reply));
    asio::async_write(*sock, asio::buffer(*out), [self, sock, buf, out, close_after, peer](
                                                     const boost::system::error_code& we, size_t) {
      if (we || close_after) return;
      self->Serve(sock, buf, peer);
    });
  });
}

}  // namespace holdfast
