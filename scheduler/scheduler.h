// Scheduler: what holdfastd needs from whatever gave it its nodes — Slurm, or
// nothing (the local machine). The daemon asks it for the allocation (which
// hosts, which one is this, who leads, the job id and restart count) and asks
// it to act on the job: requeue it (excluding hosts), drain a host. Everything
// else in the daemon is the same under every scheduler.
//
// Implementations: LocalScheduler (scheduler/local_scheduler.h: flags, the run
// directory's cluster.addr, a detached relaunch), SlurmScheduler (libslurm,
// added by the Slurm issue) and RecordingScheduler (scheduler/
// recording_scheduler.h: a test double that records what it was asked).
//
// Thread-safety: a Scheduler is used from the daemon's event-loop thread only.
// Calls may block briefly (a file read, an RPC); none waits on the ranks.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/scheduler_kind.h"
#include "common/status.h"

namespace holdfast {

// One node of the allocation. Nodes are hosts, not indexes.
struct NodeInfo {
  std::string host;  // the scheduler's name for it ("gpu-a17"); unique in the allocation
  std::string addr;  // an address other nodes reach it on (IP or resolvable name)
};

struct Allocation {
  SchedulerKind scheduler = SchedulerKind::kLocal;
  std::string job_id;               // "" when local
  int restart_count = 0;            // Slurm's SLURM_RESTART_COUNT; 0 when local
  std::vector<NodeInfo> nodes;      // the allocation's nodes, in the scheduler's order; nodes[0] leads
  int this_node = 0;                // index into nodes of the node this daemon runs on
  bool leader() const { return this_node == 0; }
  const NodeInfo& self() const { return nodes.at(static_cast<size_t>(this_node)); }
  std::vector<std::string> hosts() const;
};

// What a scheduler can do for a run. The recovery policy (daemon/
// recovery_policy.h) chooses only actions the scheduler can carry out.
struct SchedulerCapabilities {
  bool requeue = false;        // the job can be put back in the queue (or relaunched locally)
  bool exclude_hosts = false;  // a requeue can keep named hosts out of the next allocation
  bool drain = false;          // a host can be drained with a reason (needs privilege under Slurm)
};

// What a termination signal to holdfastd means under a scheduler (Slurm sends
// SIGTERM for a time limit, a requeue and a cancel alike; only the job's state
// tells them apart).
struct SignalMeaning {
  bool preemption = false;  // checkpoint, requeue, resume later; false: an operator's stop
  std::string why;          // one sentence for lineage
  double lead_time_s = -1;  // seconds left before the scheduler kills the job; < 0 unknown
  // An advance warning (Slurm's --signal): the job may go on until the lead
  // time is spent. false: the scheduler is ending the job now (SIGTERM).
  bool warning = false;
};

class Scheduler {
 public:
  virtual ~Scheduler() = default;

  virtual const char* name() const = 0;  // "local", "slurm", "recording"
  virtual SchedulerCapabilities capabilities() const = 0;

  // The allocation this daemon runs in. Called once at start.
  virtual Result<Allocation> Discover() = 0;

  // Leader: makes its cluster address ("host:port") findable by the
  // followers of this job, and only of this job (no stale address survives a
  // job: it is removed by Withdraw, and stamped so that a reader can tell a
  // dead leader's address from a live one).
  virtual Status PublishLeader(const std::string& addr) = 0;
  // Leader, at exit: removes what PublishLeader left.
  virtual void WithdrawLeader() = 0;
  // Follower: the live leader's cluster address; waits up to `timeout` for it
  // to be published. kTimeout when it never appears.
  virtual Result<std::string> FindLeader(std::chrono::milliseconds timeout) = 0;

  // Puts the job back in the queue (locally: starts a detached holdfastd that
  // continues `run_id` once this one has exited), keeping `exclude_hosts` out
  // of the next allocation where capabilities().exclude_hosts. `reason` is
  // recorded by the scheduler where it can (Slurm's job comment).
  virtual Status Requeue(const std::string& run_id, const std::vector<std::string>& exclude_hosts,
                         const std::string& reason) = 0;
  // Takes `host` out of service with `reason`. kFailedPrecondition where the
  // scheduler cannot (capabilities().drain false, or no privilege).
  virtual Status Drain(const std::string& host, const std::string& reason) = 0;

  // What `sig` (SIGTERM, SIGUSR1, ...) to holdfastd means; nullopt: the
  // daemon's own meaning (daemon/daemon_signals.h). May ask the scheduler.
  virtual std::optional<SignalMeaning> ExplainSignal(int sig) { return std::nullopt; }
  // After a successful Requeue: what was done, in words for lineage
  // ("requeued job 42; holdfast-slurmctld-epilog excludes n2"). "" when nothing to add.
  virtual std::string last_requeue() const { return ""; }
};

}  // namespace holdfast
