// LeaderLink: the leader's end of the cluster protocol (docs/
// cluster-protocol.md) — the TCP port followers join on, published through
// the Scheduler, the per-node connections, the hello handshake, and the
// parsing of every follower message. It knows nothing about the run: what a
// hello, a progress report or a lost node means is the Supervisor's (and its
// RunController's) business, reached through the Handlers.
//
// Trust (docs/cluster-protocol.md, "Trust"): every connection is challenged
// first, and a hello counts only with a proof that the follower holds the
// run's key (common/peer_auth.h); the leader then proves it back (welcome).
// A peer without the key — anything else that connects to the port — is
// sent a reject, closed, and logged (the same refusal once per address); it never becomes a
// node, so the run does not notice it.
//
// Thread-safety: loop thread only.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include <boost/asio.hpp>

#include "common/peer_auth.h"
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
    std::function<void(int node, ClusterMessage msg)> on_message;  // the message is the handler's to keep
    // An accepted node's connection ended (or it sent what it must not).
    std::function<void(int node, const std::string& why)> on_lost;
  };

  // `io`, `scheduler` and `clock` are not owned and must outlive the link;
  // followers must prove they hold `key`; the welcome tells them `run_id`.
  // peer_timeout_s > 0: a follower whose node answers nothing that long is
  // lost (LineConnection::SetPeerTimeout); 0: only when its connection closes.
  LeaderLink(boost::asio::io_context* io, Scheduler* scheduler, const TimeSource* clock, RunKey key,
             std::string run_id, Handlers handlers, double peer_timeout_s = 0);

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
  // One connection's state before and after its hello.
  struct Peer {
    int node = -1;       // > 0 once its hello was accepted
    std::string nonce;   // the challenge it was sent
    std::string ip;      // its address, for the once-per-address log
    std::string where;   // address:port
  };
  void Accept();
  // What to refuse `line` from `peer` for; "" when it was taken (a hello accepted, or a message handled).
  std::string OnLine(Peer* peer, const std::shared_ptr<LineConnection>& conn, std::string_view line, int64_t now);
  void LogRefusal(const Peer& peer, const std::string& why);

  boost::asio::io_context& io_;
  Scheduler* scheduler_;     // not owned
  const TimeSource* clock_;  // not owned
  const RunKey key_;
  const std::string run_id_;
  Handlers handlers_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::map<int, std::shared_ptr<LineConnection>> nodes_;  // accepted followers by node
  bool published_ = false;
  std::set<std::string> refused_;  // "ip why" of the refusals of unauthenticated peers logged so far
  const double peer_timeout_s_;
};

}  // namespace holdfast
