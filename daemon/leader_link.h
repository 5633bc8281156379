// LeaderLink: the leader's end of the cluster protocol (docs/
// cluster-protocol.md) — the TCP port followers join on, published through
// the Scheduler, the per-node connections, the hello handshake, and the
// parsing of every follower message. It knows nothing about the run: what a
// hello, a progress report or a lost node means is the Supervisor's (and its
// RunController's) business, reached through the Handlers.
//
// Thread-safety: loop thread only.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include <boost/asio.hpp>

#include "common/status.h"
#include "common/time_source.h"
#include "daemon/cluster_protocol.h"
#include "daemon/line_connection.h"
#include "scheduler/scheduler.h"

namespace holdfast {

class LeaderLink : public std::enable_shared_from_this<LeaderLink> {
 public:
  struct Handlers {
    // A follower says hello: "" accepts it as node hello.node; otherwise why not.
    std::function<std::string(const HelloMsg& hello)> on_hello;
    // Any later message of an accepted node.
    std::function<void(int node, const ClusterMessage& msg)> on_message;
    // An accepted node's connection ended (or it sent what it must not).
    std::function<void(int node, const std::string& why)> on_lost;
  };

  // `io`, `scheduler` and `clock` are not owned and must outlive the link.
  // peer_timeout_s > 0: a follower whose node answers nothing that long is
  // lost (LineConnection::SetPeerTimeout); 0: only when its connection closes.
  LeaderLink(boost::asio::io_context* io, Scheduler* scheduler, const TimeSource* clock, Handlers handlers,
             double peer_timeout_s = 0);

  // Binds addr:port (0 = any), publishes "addr:port" for the followers, accepts.
  Status Listen(const std::string& addr, uint16_t port);
  void Send(int node, const ClusterMessage& msg);
  void Broadcast(const ClusterMessage& msg);
  size_t joined() const { return nodes_.size(); }
  bool has(int node) const { return nodes_.count(node) != 0; }
  // Stops accepting, withdraws the published address; with `flush`, lets
  // queued messages (a "finish") reach the followers before closing.
  void Close(bool flush);

 private:
  void Accept();

  boost::asio::io_context& io_;
  Scheduler* scheduler_;     // not owned
  const TimeSource* clock_;  // not owned
  Handlers handlers_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::map<int, std::shared_ptr<LineConnection>> nodes_;  // accepted followers by node
  bool published_ = false;
  const double peer_timeout_s_;
};

}  // namespace holdfast
