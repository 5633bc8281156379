// SparePool: this node's warm spares (docs/warm-restarts.md; the job file's
// recovery.warm_spares). A spare is the job's own command (holdfast-train),
// started like a rank (RankProcess: the job's env and workdir, its log, death
// with the daemon) but with no rank variables: only HOLDFAST_SPARE_FD, its end
// of a socketpair. It does its rank-independent start-up and waits; Assign
// writes it the rank it becomes (common/spare_assignment.h) and hands back
// the process, which RankGroup then supervises as that rank.
//
// A spare is not a rank: status, lineage and hang detection never see it
// until it is assigned. One that dies while it waits is dropped when reaped
// (OnExit) and replaced at the next TopUp; Assign never waits on a spare: a
// dead or unusable one is killed and the next tried, and with none left the
// caller starts the rank cold. The destructor kills and reaps every spare.
//
// Thread-safety: none; owned by RankGroup on the daemon's event-loop thread.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "common/spare_assignment.h"
#include "common/status.h"
#include "daemon/job_config.h"
#include "daemon/rank_process.h"

namespace holdfast {

inline constexpr int kMaxSpareFailures = 3;

class SparePool {
 public:
  // `job` is not owned and must outlive the pool.
  SparePool(const JobConfig* job, std::string run_dir) : job_(job), run_dir_(std::move(run_dir)) {}
  ~SparePool();
  SparePool(const SparePool&) = delete;
  SparePool& operator=(const SparePool&) = delete;

  // Starts spares (logs RUN_DIR/logs/aA-spare-nN-K.log) until `count` wait, and
  // releases (EOF on their fd: they exit 0) any beyond it. A spare that cannot
  // be started is logged and not retried before the next call.
  void TopUp(int count, int attempt, int node);
  // Hands `a` to a waiting spare and returns it as the process of rank
  // `rank` (its progress record at `progress_path` created first, and
  // `header` + the spare's pid appended to a.log_path before the spare
  // writes there); nullptr when no spare took it (none left, or each one
  // tried was gone): the caller starts the rank cold.
  std::unique_ptr<RankProcess> Assign(int rank, const SpareAssignment& a, const std::string& progress_path,
                                      const std::string& header);
  // A reaped child: true when it was a waiting spare (logged and dropped).
  bool OnExit(pid_t pid, int wstatus);
  // SIGKILLs every waiting spare and reaps it (waiting at most ~2 s).
  void KillAll();
  int size() const { return static_cast<int>(spares_.size()); }
  std::vector<pid_t> pids() const;

 private:
  struct Spare {
    std::unique_ptr<RankProcess> proc;
    int fd = -1;  // the daemon's end of the socketpair
    std::string log_path;
  };
  void Drop(size_t i, int sig);  // signals (0 = none) and forgets spare i, closing its fd

  const JobConfig* job_;  // not owned
  std::string run_dir_;
  int next_id_ = 0;
  // Spares that exited while waiting since the last assignment: after
  // kMaxSpareFailures the pool stops starting them (a spare that cannot start
  // would otherwise be restarted on every poll).
  int failures_ = 0;
  bool stopped_ = false;
  std::vector<Spare> spares_;
  std::vector<pid_t> dropped_;  // signalled or released, not yet reaped
};

}  // namespace holdfast
