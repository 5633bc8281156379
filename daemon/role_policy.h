// The role policy: what holdfastd does when a role process (a [[roles]]
// entry of the job file: an RL job's rollout worker, its reward service)
// ends or stops making progress — one pure, deterministic function, like the
// recovery policy (daemon/recovery_policy.h) for the learner's ranks, so the
// whole table is a unit test (daemon/role_policy_test.cc).
//
//   exit 0                         finished: not restarted
//   exit 2, 126, 127 (bad input)   stop the run: the same input fails again
//   any other exit, a signal,      restart = "alone":   restart that process
//   or a hang                        alone after the backoff, while the
//                                    process's restarts < the role's budget;
//                                    else stop the run (budget exhausted)
//                                  restart = "learner": restart the learner
//                                    group (the recovery policy decides how,
//                                    on the learner's budget) and the process
//                                    with it
//
// The backoff is the ranks' (recovery_policy.h): 0 s when the process made
// progress (completed a step) before it failed, else
// min(backoff_max_s, backoff_initial_s * 2^(n-1)) for its n-th consecutive
// failure without progress.
//
// RoleHangWatch judges one process's hang from its progress record over time,
// on an injected clock: any change of its heartbeat, step or phase is
// activity; no activity for hang_s is a hang. Until the process attaches a
// writer to its record it gets max(hang_s, startup_allowance_s).
//
// Thread-safety: pure functions; a RoleHangWatch is used by one thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/rank_progress.h"
#include "daemon/job_config.h"

namespace holdfast {

enum class RoleAction {
  kFinished,        // exited 0: done, not restarted
  kRestartAlone,    // restart only this process after backoff_s
  kRestartLearner,  // restart the learner group (and this process with it)
  kStopRun,         // stop the run with a cause (budget spent, bad input)
};
const char* RoleActionName(RoleAction action);  // "finished", "restart_alone", ...

struct RoleFailureInput {
  RoleRestart restart = RoleRestart::kAlone;
  bool hung = false;  // found hung (then wstatus is not looked at)
  int wstatus = 0;    // as from waitpid, when it exited
  int restarts_used = 0;   // this process's restarts in this attempt
  int restart_budget = 10;
  // Consecutive failures of this process without progress, this one included
  // (0 when it made progress before failing): drives the backoff.
  int failures_without_progress = 0;
  double backoff_initial_s = 0.25;
  double backoff_max_s = 30;
};

struct RoleDecision {
  RoleAction action = RoleAction::kFinished;
  double backoff_s = 0;       // kRestartAlone
  bool bad_input = false;     // kStopRun because a restart cannot help
  bool budget_exhausted = false;  // kStopRun because the budget is spent
  // One line for lineage: "restart alone after 0.50 s (restart 2 of 10)".
  std::string reason;
};

RoleDecision DecideRoleFailure(const RoleFailureInput& input);

// The learner's ranks were judged hung while every one of them waits for
// input (phase `data`, none in a collective): in a run with roles, what they
// wait for is what the role processes produce. The culprit is then a role
// process, not the learner, when one is
//   - stopped (SIGSTOP, or by a tracer): it can do nothing, whatever its
//     hang_s says; every stopped process is named;
//   - else silent (no heartbeat, step or phase change) for the whole of the
//     learner's stall: it has not moved while the learner waited.
// A process that never attached a progress record cannot be judged and is
// not named. Returns the indexes (into `roles`) of the culprits, stopped ones
// first; empty = the learner itself is what hangs.
struct RoleStallObservation {
  bool running = false;   // a live process the supervisor runs now
  bool stopped = false;   // /proc state T or t
  bool attached = false;  // it writes its progress record
  double silent_s = 0;    // since its last activity (RoleHangWatch)
};
std::vector<size_t> BlameRolesForLearnerStall(const std::vector<RoleStallObservation>& roles,
                                              double learner_stalled_s);

class RoleHangWatch {
 public:
  // `hang_s` 0 turns the watch off. The process started at `started_ns`.
  RoleHangWatch(double hang_s, double startup_allowance_s, int64_t started_ns)
      : hang_s_(hang_s), startup_s_(startup_allowance_s), last_activity_ns_(started_ns) {}

  struct Verdict {
    bool hung = false;
    double silent_s = 0;   // since the last activity (or the start)
    double timeout_s = 0;  // the allowance that applied
    bool attached = false;  // the process has attached a progress writer
  };
  Verdict Observe(int64_t now_ns, const RankProgress& progress);
  // The last verdict Observe returned (silent 0 before the first).
  const Verdict& last() const { return last_; }

 private:
  double hang_s_;
  double startup_s_;
  int64_t last_activity_ns_;
  bool seen_ = false;
  int64_t heartbeat_ = 0;
  int64_t step_ = 0;
  Phase phase_ = Phase::kStarting;
  Verdict last_;
};

}  // namespace holdfast
