// RankGroup: the ranks of one generation on this node, as OS processes — the
// same on the leader and on a follower. Starts them from their placements
// (scheduler/launch_plan.h) with the launch contract in their environment
// (common/launch_contract.h; the torchrun variables too), reaps them, signals
// them, and reads their progress records into RankViews.
//
// Thread-safety: none; owned by the daemon's event-loop thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/run_files.h"
#include "common/status.h"
#include "daemon/job_config.h"
#include "daemon/rank_process.h"
#include "daemon/spare_pool.h"
#include "daemon/triage.h"
#include "scheduler/launch_plan.h"

namespace holdfast {

// (GenerationSpec: scheduler/launch_plan.h.)

// A rank that left: reaped by Reap().
struct ReapedRank {
  int rank = 0;
  int wstatus = 0;
  std::vector<std::string> log_tail;
};

// Where a run's per-rank files go: RUN_DIR/logs/aA-gG-rankR.log
// (common/run_files.h RankLogPath) and PROGRESS_DIR/holdfast-RUN-aA-gG-rR.rec
// (the prefix used by cleanup).
std::string ProgressRecordPrefix(const std::string& run_id);
std::string ProgressRecordPath(const std::string& progress_dir, const std::string& run_id, int attempt,
                               int generation, int rank);
// Removes every progress record of `run_id` in progress_dir (a dead daemon's
// leftovers, or this attempt's at the end); returns how many. With `ranks`,
// only the records of those global ranks: several nodes on one machine share
// progress_dir, and a follower must not remove the records of other nodes'
// live ranks.
int RemoveProgressRecords(const std::string& progress_dir, const std::string& run_id,
                          const std::vector<int>* ranks = nullptr);

class RankGroup {
 public:
  // `job` is not owned and must outlive the group.
  RankGroup(const JobConfig* job, std::string run_dir) : job_(job), run_dir_(run_dir), spares_(job, run_dir) {}

  // Starts `placements` (this node's ranks): each from a warm spare when one
  // waits (recovery.warm_spares: spare_pool.h), else cold. A rank whose command
  // cannot be executed is an InvalidArgument error naming it; ranks already
  // started stay (the caller stops them).
  Status Launch(const GenerationSpec& spec, const std::vector<RankPlacement>& placements);
  // With recovery.warm_spares, once every rank of this generation here has
  // completed a step (so that starting them does not slow the restore),
  // starts spares until one waits per local rank. Call it every poll.
  void TopUpSpares();
  std::vector<pid_t> spare_pids() const { return spares_.pids(); }
  // Reaps exited children (WNOHANG) and returns those of this group (a warm
  // spare that died while waiting is logged and dropped here). Children
  // that are not ranks of this group (role processes: role_supervisor.h) are
  // appended to `others` as (pid, wait status) when it is not null.
  std::vector<ReapedRank> Reap(std::vector<std::pair<pid_t, int>>* others = nullptr);
  void SignalAll(int sig);
  void Kill(const std::vector<int>& ranks);  // SIGKILL these global ranks if they are ours
  bool AnyAlive() const;
  std::vector<int> ranks() const;
  // This node's ranks as the supervisor sees them now.
  std::vector<RankView> Views(int node, const std::string& host) const;
  int generation() const { return generation_; }
  void Clear() { ranks_.clear(); }
  // The daemon's memory snapshot folder (snapshot_dir.h), told to the ranks
  // with their share of job.recovery.memory_budget_mb; "" = no snapshots.
  // `replicated`: the node's snapshots are replicated to a peer (several
  // nodes), so the ranks keep the newest replicated step too.
  void set_snapshot_dir(std::string dir, bool replicated) {
    snapshot_dir_ = std::move(dir);
    replicated_ = replicated;
  }

 private:
  const JobConfig* job_;  // not owned
  std::string run_dir_;
  int generation_ = -1;
  int attempt_ = 0;
  int node_ = 0;
  std::string snapshot_dir_;
  bool replicated_ = false;
  std::vector<std::unique_ptr<RankProcess>> ranks_;
  SparePool spares_;  // empty without recovery.warm_spares; killed with the group
};

}  // namespace holdfast
