// MemoryRestore: the leading holdfastd's part of restoring a run of several
// nodes from memory snapshots (docs/memory-snapshots.md, "Several nodes").
//
// Before a generation's ranks start, Plan asks every live node's replica
// port for its inventory (daemon/replica_wire.h) and picks the step
// (PlanMemoryRestore, daemon/replica_plan.h); Gather then has every node of
// the new generation make that step whole in its own snapshot folder, all
// nodes at once on a thread of its own, and reports when they are done —
// so the trainer's restore from memory (every rank reads every shard's
// parameters from its node's folder) is the same as on one node.
//
// Also here, for the leader and the followers alike: StartReplicas (the
// node's ReplicaService, when the tier is on and the run has several nodes)
// and LocalSnapshotFiles (what a node's ranks write).
//
// Thread-safety: Plan, last_plan and Gather from the owner's (event-loop)
// thread; Gather's callback runs on the gather thread. Plan blocks its caller
// for the inventory round trips (each peer at most kInventoryTimeout).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/peer_auth.h"
#include "daemon/job_config.h"
#include "daemon/replica_plan.h"
#include "daemon/replica_service.h"
#include "scheduler/launch_plan.h"

namespace holdfast {

inline constexpr std::chrono::milliseconds kInventoryTimeout{1000};

class MemoryRestore {
 public:
  // `hosts`: node index -> host name, for the notes.
  MemoryRestore(std::string run_dir, RunKey key, std::map<int, std::string> hosts)
      : run_dir_(std::move(run_dir)), key_(std::move(key)), hosts_(std::move(hosts)) {}
  ~MemoryRestore();

  // The step the live `nodes` can start from, and where each file is;
  // nullopt when none is whole on them (the ranks then restore from disk).
  std::optional<MemoryRestorePlan> Plan(const std::vector<int>& nodes);
  // The newest Plan's answer.
  const std::optional<MemoryRestorePlan>& last_plan() const { return last_; }
  // Has each of `nodes` make plan.step whole; then done(OK) or done(the first
  // node's failure), on the gather thread. A gather still running is waited for.
  void Gather(const MemoryRestorePlan& plan, const std::vector<int>& nodes, std::function<void(Status)> done);

 private:
  const std::string run_dir_;
  const RunKey key_;
  const std::map<int, std::string> hosts_;
  std::optional<MemoryRestorePlan> last_;
  std::thread gather_;
};

// The node's replica service, when `enabled` (the tier is on, several
// nodes); nullptr when not, or when it cannot start (logged: the node's
// snapshots then stay its own).
std::unique_ptr<ReplicaService> StartReplicas(bool enabled, const RecoveryConfig& recovery, const std::string& root,
                                              int node, const std::string& addr, const std::string& run_dir,
                                              const RunKey& key);

// The snapshot files a node's ranks write: their shards of `world`, and
// MANIFEST.json when rank 0 is among them (a committed step).
std::vector<std::string> LocalSnapshotFiles(int world, const std::vector<RankPlacement>& ranks);

}  // namespace holdfast
