#include "daemon/leader_link.h"

#include <fcntl.h>

#include <spdlog/spdlog.h>

namespace holdfast {

namespace asio = boost::asio;

LeaderLink::LeaderLink(asio::io_context* io, Scheduler* scheduler, const TimeSource* clock, RunKey key,
                       std::string run_id, Handlers handlers, double peer_timeout_s)
    : io_(*io), scheduler_(scheduler), clock_(clock), key_(std::move(key)), run_id_(std::move(run_id)),
      handlers_(std::move(handlers)),
      acceptor_(io_), peer_timeout_s_(peer_timeout_s) {}

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
    auto peer = std::make_shared<Peer>();
    boost::system::error_code ec;
    const auto remote = sock.remote_endpoint(ec);
    peer->ip = ec ? "?" : remote.address().to_string();
    peer->where = ec ? "?" : peer->ip + ":" + std::to_string(remote.port());
    auto conn = std::make_shared<LineConnection>(std::move(sock));
    if (self->peer_timeout_s_ > 0) {
      // Without it a follower cut off the network is never lost: the run waits on it forever.
      if (Status s = conn->SetPeerTimeout(self->peer_timeout_s_); !s.ok()) spdlog::warn("{}", s.ToString());
    }
    std::weak_ptr<LineConnection> weak_conn = conn;
    conn->Start(
        [self, weak_conn, peer](std::string_view line) {
          auto c = weak_conn.lock();
          if (!c) return;
          const int64_t now = self->clock_->MonotonicNs();
          const std::string refuse = self->OnLine(peer.get(), c, line, now);
          if (refuse.empty()) return;
          c->Send(EncodeClusterMessage(RejectMsg{refuse}, now));
          c->CloseAfterSending(refuse);
        },
        [self, peer](const std::string& why) {
          if (peer->node <= 0) return;  // never a node: nothing was lost
          self->nodes_.erase(peer->node);
          self->handlers_.on_lost(peer->node, why);
        });
    Result<std::string> nonce = RandomBytes(kAuthNonceBytes);
    if (!nonce.ok()) {
      spdlog::error("cluster port: {}", nonce.status().message());
      conn->Close(nonce.status().message());
    } else {
      peer->nonce = std::move(nonce).value();
      conn->Send(EncodeClusterMessage(ChallengeMsg{peer->nonce}, self->clock_->MonotonicNs()));
    }
    self->Accept();
  });
}

std::string LeaderLink::OnLine(Peer* peer, const std::shared_ptr<LineConnection>& conn, std::string_view line,
                               int64_t now) {
  auto msg = ParseClusterMessage(line, now);
  std::string refuse;
  if (!msg.ok()) {
    refuse = "bad message: " + msg.status().message();  // a version mismatch, say: tell it why
  } else if (const auto* hello = std::get_if<HelloMsg>(&*msg)) {
    if (peer->node > 0) {
      refuse = "a second hello";
    } else if (!key_.Verify(kClusterFollowerLabel, peer->nonce, hello->nonce, hello->proof)) {
      refuse = "its hello does not prove it holds the run's key (RUN_DIR/cluster.key): it is not a daemon of this run";
    } else {
      refuse = handlers_.on_hello(*hello);
      if (refuse.empty()) {
        peer->node = hello->node;
        nodes_[hello->node] = conn;
        conn->Send(EncodeClusterMessage(
            WelcomeMsg{key_.Proof(kClusterLeaderLabel, peer->nonce, hello->nonce), run_id_}, now));
        return "";
      }
      spdlog::error("follower: {}", refuse);  // a daemon of this run the leader cannot take
      return refuse;
    }
  } else if (peer->node <= 0) {
    refuse = std::string("a '") + ClusterMessageTypeName(*msg) + "' message before a hello that proves the run's key";
  } else if (!IsFollowerMessage(*msg)) {
    refuse = std::string("unexpected message '") + ClusterMessageTypeName(*msg) + "' from a follower";
  } else {
    handlers_.on_message(peer->node, std::move(*msg));
    return "";
  }
  if (peer->node > 0) {
    spdlog::error("follower node {}: {}", peer->node, refuse);
  } else {
    LogRefusal(*peer, refuse);  // not (yet) a node of this run: whatever it is, once per address
  }
  return refuse;
}

void LeaderLink::LogRefusal(const Peer& peer, const std::string& why) {
  if (!refused_.insert(peer.ip + " " + why).second) return;
  spdlog::warn("cluster port: refused a peer at {}: {} (the run goes on; the same refusal of {} is not logged again)",
               peer.where, why, peer.ip);
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
