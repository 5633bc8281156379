#include "daemon/control_server.h"

#include <fcntl.h>
#include <unistd.h>

namespace holdfast {

namespace asio = boost::asio;

ControlServer::ControlServer(asio::io_context* io, std::string socket_path, Handler handler)
    : io_(*io), path_(std::move(socket_path)), handler_(std::move(handler)), acceptor_(io_) {}

Status ControlServer::Start() {
  ::unlink(path_.c_str());  // a dead daemon's socket; the run lock says none is alive
  boost::system::error_code ec;
  asio::local::stream_protocol::endpoint ep(path_);
  acceptor_.open(ep.protocol(), ec);
  if (!ec) ::fcntl(acceptor_.native_handle(), F_SETFD, FD_CLOEXEC);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return IoError("control socket " + path_ + ": " + ec.message());
  Accept();
  return Status::Ok();
}

void ControlServer::Close() {
  boost::system::error_code ec;
  if (acceptor_.is_open()) {
    acceptor_.close(ec);
    ::unlink(path_.c_str());
  }
}

void ControlServer::Accept() {
  acceptor_.async_accept([self = shared_from_this()](const boost::system::error_code& e,
                                                     asio::local::stream_protocol::socket sock) {
    if (e) return;
    ::fcntl(sock.native_handle(), F_SETFD, FD_CLOEXEC);
    auto s = std::make_shared<asio::local::stream_protocol::socket>(std::move(sock));
    auto buf = std::make_shared<asio::streambuf>(kMaxControlMessageBytes);
    self->Serve(s, buf);
    self->Accept();
  });
}

void ControlServer::Serve(std::shared_ptr<asio::local::stream_protocol::socket> sock,
                          std::shared_ptr<asio::streambuf> buf) {
  asio::async_read_until(*sock, *buf, '\n', [self = shared_from_this(), sock, buf](const boost::system::error_code& e,
                                                                                   size_t n) {
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
      auto creds = ReadPeerCredentials(sock->native_handle());
      auto req = ParseControlRequest(line);
      if (!creds.ok()) {
        reply = EncodeErrorResponse(0, creds.status());
        close_after = true;
      } else if (!req.ok()) {
        reply = EncodeErrorResponse(0, req.status());
      } else {
        reply = self->handler_(*req, creds->uid);
      }
    }
    auto out = std::make_shared<std::string>(std::move(reply));
    asio::async_write(*sock, asio::buffer(*out), [self, sock, buf, out, close_after](const boost::system::error_code& we,
                                                                                     size_t) {
      if (we || close_after) return;
      self->Serve(sock, buf);
    });
  });
}

}  // namespace holdfast
