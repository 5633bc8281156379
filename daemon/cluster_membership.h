// ClusterMembership: the leader's view of the run's nodes — which train
// (active, in launch-plan order) and which stand by (an elastic run's spares:
// JobConfig::max_nodes), the launch plan made from the active ones, the
// follower daemons that joined with their ranks' latest views and when each
// was last heard, and the decisions about them: whether a hello is accepted
// (and why not), what a lost node was (active, spare, or one the run had
// already left), the plan after a reshape, and all ranks' views merged with
// each follower report's age.
//
// Pure: no I/O, no clock (times are passed in), no logging; the Supervisor
// does what it decides (daemon/supervisor.cc) and the table test
// (daemon/cluster_membership_test.cc) pins every decision.
//
// Thread-safety: none; owned by the daemon's event-loop thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/rank_progress.h"
#include "common/status.h"
#include "daemon/cluster_protocol.h"
#include "scheduler/launch_plan.h"
#include "scheduler/scheduler.h"

namespace holdfast {

class ClusterMembership {
 public:
  // What a follower's lost connection meant for the run.
  enum class LostNode {
    kActive,  // its ranks were part of the run: an incident (RunController::OnNodeLost)
    kSpare,   // a joined spare: no rank ran there; one spare fewer
    kFormer,  // a node the run had already left (a reshape): nothing to do
  };

  // `nproc`: ranks per node (JobConfig::nproc).
  ClusterMembership(Allocation allocation, int nproc);

  // Splits the allocation: the leader and the next nodes up to max_nodes (0 =
  // all) train, the rest stand by; makes the first plan over `devices` (the
  // GPUs visible to every node's ranks, ParseVisibleDevices; empty = CPU).
  // InvalidArgument when fewer than min_nodes would train.
  Status Init(int min_nodes, int max_nodes, std::vector<int> devices);

  const LaunchPlan& plan() const { return plan_; }
  int world() const { return plan_.world_size; }
  const std::vector<int>& active() const { return active_; }
  const std::vector<int>& spares() const { return spares_; }
  std::vector<std::string> HostsOf(const std::vector<int>& nodes) const;
  const std::string& HostOf(int node) const { return alloc_.nodes[static_cast<size_t>(node)].host; }
  int NodeOf(const std::string& host) const;  // -1 when not in the allocation
  // The global ranks `node` runs in the current plan (none for a spare).
  std::vector<int> RanksOf(int node) const;

  // ---- followers ----
  // "" accepts `hello`; otherwise the refusal sent back to the follower.
  // `run_over`: the run has finished; `run_started`: generation 0 has been
  // launched (a follower that missed it cannot take part).
  std::string CheckHello(const HelloMsg& hello, bool run_over, bool run_started) const;
  // An accepted hello: the node has joined and was heard at now_ns.
  void Join(int node, int64_t now_ns);
  void Heard(int node, int64_t now_ns);
  // A follower's latest report of its ranks (in this machine's clock); rings
  // sent as deltas are completed from the report before.
  void SetViews(int node, std::vector<RankView> views);
  // A new generation starts: the old one's reports are void.
  void ClearViews();
  // Forgets `node` (its views, when heard) and says what it was; a lost spare
  // is no longer a spare.
  LostNode Lose(int node);
  bool joined(int node) const { return followers_.count(node) != 0; }
  std::vector<int> joined_nodes() const;  // ascending
  bool has_followers() const { return !followers_.empty(); }

  // The next generations run without `leaving`, with `joining` (spares) in
  // their place; returns the new world size. FailedPrecondition (and nothing
  // changes) when the leader would leave or a joining host is not a spare.
  Result<int> Reshape(const std::vector<std::string>& leaving, const std::vector<std::string>& joining);

  // `local` (the leader's own ranks) and every follower's latest views, each
  // follower's report_age_s = seconds since it was last heard; by rank.
  std::vector<RankView> Merge(std::vector<RankView> local, int64_t now_ns) const;

 private:
  const Allocation alloc_;
  const int nproc_;
  std::vector<int> devices_;
  LaunchPlan plan_;
  std::vector<int> active_;  // the nodes the ranks run on (plan_ is made from these, in this order)
  std::vector<int> spares_;  // joined or not, standing by
  std::map<int, std::vector<RankView>> followers_;  // joined node -> its ranks' latest views
  std::map<int, int64_t> heard_ns_;                  // joined node -> when its last message arrived
};

const char* LostNodeName(ClusterMembership::LostNode lost);  // "active", "spare", "former"

}  // namespace holdfast
