// What holdfast-slurmctld-epilog (scheduler/slurmctld_epilog_main.cc) does for
// one job, decided by pure functions of the job as slurmctld reports it, so
// that a table test covers every case and main() only carries them out.
//
// Trust. slurmctld runs the epilog as SlurmUser, who may do anything to any
// job; the request it acts on sits in the job's comment, which the job's owner
// can write (holdfastd runs as the owner and writes it there). Nothing in a
// comment can be authenticated against its owner, so the epilog does to a job
// only what the owner could do to it anyway, and only for a request bound to
// the job:
//   - the request names the job id, the owner's uid and the restart count of
//     the attempt that wrote it; it is acted on only when all three are the
//     job's and the job was requeued since (its restart count is one more).
//     Another job's request, another user's, one from an earlier attempt, one
//     never followed by a requeue, one at the end of a job that was not being
//     requeued, a malformed or oversized one: the epilog logs why and changes
//     nothing.
//   - what it changes is what the owner may change on their own pending job:
//     the excluded nodes, the comment, BeginTime.
//   - the one hold it releases is the one slurmctld itself places after a
//     failed Prolog (reason "launch failed requeued held", a user-level hold
//     the owner may release too); an admin's hold (JobHeldAdmin, `scontrol
//     hold`, which also sticks to a running job through its requeue), the
//     owner's own hold and `scontrol requeuehold` are left as they are.
//   - slurmctld is asked little: one load per job end; a watcher polls with
//     backoff (PollSchedule) and stops after kMaxWatcherRpcs RPCs.
#pragma once

#include <optional>
#include <string>

#include "scheduler/slurm_client.h"
#include "scheduler/slurm_scheduler.h"

namespace holdfast {

// Reason= of a job slurmctld requeued held after a Prolog failed on one of its nodes.
inline constexpr const char* kPrologFailedHoldReason = "launch_failed_requeued_held";

// Whether `request` may be acted on for `job`; kFailedPrecondition saying why not.
Status CheckRequestBinding(const RequeueRequest& request, const SlurmJob& job);

// At the job's end: leave it, or watch it until it is pending.
struct EpilogPlan {
  bool watch = false;
  std::optional<RequeueRequest> request;  // a bound request; nullopt: only a Prolog hold to release
  bool prolog_hold = false;               // slurmctld requeued it held after a failed Prolog
  std::string log;                        // what to log; empty for a job with nothing for us
};
EpilogPlan PlanEpilog(const SlurmJob& job);

// One look at the watched job. The request leaves the comment at the first
// look (on a job still COMPLETING: kWait with an update), the rest once the job
// is pending and no longer COMPLETING (kFinish).
struct WatchStep {
  enum Kind { kWait, kFinish, kOver } kind = kWait;
  std::optional<SlurmJobUpdate> update;  // what to change now; nullopt: nothing
  std::string log;                       // what was decided, without the job id
};
WatchStep DecideWatchStep(const SlurmJob& job, const EpilogPlan& plan);

// When a watcher asks slurmctld again: `first_s` after it starts, then each
// wait `growth` times the last, up to `max_s`, until `deadline_s` have passed.
// A look comes at most (growth - 1) x the time waited so far, plus `first_s`,
// after the job became pending. The epilog's (0.25, 1.5, 30, 120) looks at 0.25, 0.63, 1.19,
// 2.03, 3.30 s ... and 14 times in 120 s; the watcher it replaced polled every
// 100 ms, 1200 times for a job that never became pending.
class PollSchedule {
 public:
  PollSchedule(double first_s, double growth, double max_s, double deadline_s)
      : next_s_(first_s), growth_(growth), max_s_(max_s), deadline_s_(deadline_s) {}
  // The wait before the next look; nullopt once the deadline has passed.
  std::optional<double> Next();
  double elapsed_s() const { return elapsed_s_; }

 private:
  double next_s_, growth_, max_s_, deadline_s_;
  double elapsed_s_ = 0;
};

// Every RPC of one watcher counted, retries of an unanswered one included.
inline constexpr int kMaxWatcherRpcs = 16;

}  // namespace holdfast
