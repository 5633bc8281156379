#include "daemon/leader_link.h"

#include <fcntl.h>

#include <spdlog/spdlog.h>

namespace holdfast {

namespace asio = boost::asio;

LeaderLink::LeaderLink(asio::io_context* io, Scheduler* scheduler, const TimeSource* clock, Handlers handlers,
                       double peer_timeout_s)
    : io_(*io), scheduler_(scheduler), clock_(clock), handlers_(std::move(handlers)), acceptor_(io_),
      peer_timeout_s_(peer_timeout_s) {}

Status LeaderLink::Listen(const std::string& addr, uint16_t port) {
  boost::system::error_code ec;
  asio::ip::tcp::endpoint ep(asio::ip::make_address(addr, ec), port);
  if (ec) return InvalidArgumentError("bad address " + addr + ": " + ec.message());
  acceptor_.open(ep.protocol(), ec);
  if (!ec) ::fcntl(acceptor_.native_handle(), F_SETFD, FD_CLOEXEC);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return IoError("cluster port " + addr + ":" + std::to_string(port) + ": " + ec.message());
  const std::string published = addr + ":" + std::to_string(acceptor_.local_endpoint(ec).port());
  HF_RETURN_IF_ERROR(scheduler_->PublishLeader(published));
  published_ = true;
  spdlog::info("waiting for followers on {}", published);
  Accept();
  return Status::Ok();
}

void LeaderLink::Accept() {
  acceptor_.async_accept([self = shared_from_this()](const boost::system::error_code& e, asio::ip::tcp::socket sock) {
    if (e) return;
    ::fcntl(sock.native_handle(), F_SETFD, FD_CLOEXEC);
    auto conn = std::make_shared<LineConnection>(std::move(sock));
    if (self->peer_timeout_s_ > 0) {
      // Without it a follower cut off the network is never lost: the run waits on it forever.
      if (Status s = conn->SetPeerTimeout(self->peer_timeout_s_); !s.ok()) spdlog::warn("{}", s.ToString());
    }
    auto node = std::make_shared<int>(-1);
    std::weak_ptr<LineConnection> weak_conn = conn;
    conn->Start(
        [self, weak_conn, node](std::string_view line) {
          auto c = weak_conn.lock();
          if (!c) return;
          const int64_t now = self->clock_->MonotonicNs();
          auto msg = ParseClusterMessage(line, now);
          std::string refuse;
          if (!msg.ok()) {
            refuse = "bad message: " + msg.status().message();  // a version mismatch, say: tell it why
          } else if (const auto* hello = std::get_if<HelloMsg>(&*msg)) {
            refuse = *node > 0 ? "a second hello" : self->handlers_.on_hello(*hello);
            if (refuse.empty()) {
              *node = hello->node;
              self->nodes_[hello->node] = c;
              return;
            }
          } else if (*node <= 0) {
            refuse = "a message before hello";
          } else if (!IsFollowerMessage(*msg)) {
            refuse = std::string("unexpected message '") + ClusterMessageTypeName(*msg) + "' from a follower";
          } else {
            self->handlers_.on_message(*node, *msg);
            return;
          }
          spdlog::error("follower{}: {}", *node > 0 ? " node " + std::to_string(*node) : "", refuse);
          c->Send(EncodeClusterMessage(RejectMsg{refuse}, now));
          c->CloseAfterSending(refuse);
        },
        [self, node](const std::string& why) {
          if (*node <= 0) return;
          self->nodes_.erase(*node);
          self->handlers_.on_lost(*node, why);
        });
    self->Accept();
  });
}

void LeaderLink::Send(int node, const ClusterMessage& msg) {
  auto it = nodes_.find(node);
  if (it != nodes_.end()) it->second->Send(EncodeClusterMessage(msg, clock_->MonotonicNs()));
}

void LeaderLink::Broadcast(const ClusterMessage& msg) {
  if (nodes_.empty()) return;
  const std::string line = EncodeClusterMessage(msg, clock_->MonotonicNs());
  for (auto& [n, c] : nodes_) c->Send(line);
}

void LeaderLink::Close(bool flush) {
  boost::system::error_code ec;
  acceptor_.close(ec);
  if (published_) scheduler_->WithdrawLeader();
  published_ = false;
  auto nodes = std::move(nodes_);  // no on_lost for a close of our own
  nodes_.clear();
  for (auto& [n, c] : nodes) {
    if (flush) {
      c->CloseAfterSending("finished");
    } else {
      c->Close("finished");
    }
  }
}

}  // namespace holdfast
