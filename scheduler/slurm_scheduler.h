// SlurmScheduler: holdfastd inside a Slurm job (one holdfastd per node, started
// by `srun --ntasks-per-node=1` from the batch script; examples/slurm/).
// Everything goes through libslurm (scheduler/slurm_client.h):
//
//   Discover()       the job from its environment: SLURM_JOB_ID,
//                    SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST) expanded to
//                    node names, this node (SLURMD_NODENAME, else SLURM_NODEID),
//                    SLURM_RESTART_COUNT; each node's address is its Slurm
//                    NodeAddr (slurm_load_node), this node's replaced by --addr.
//                    The leader is the step's first node.
//   PublishLeader()  RUN_DIR/cluster-slurm.addr: "ADDR JOBID RESTARTCOUNT". A
//   FindLeader()     follower takes only a line with its own job id and restart
//                    count: an earlier job's (or run's) leader is never dialled.
//   Requeue()        puts the job back in the queue, keeping hosts out, by one
//                    of two paths (RequeuePath, below).
//   Drain()          drains the node with the reason (root or SlurmUser only:
//                    capabilities().drain says whether this daemon may).
//   ExplainSignal()  SIGTERM/SIGUSR1 from Slurm, from the job's state; a
//                    SIGUSR1 is the job's time-limit warning, with its lead
//                    time, only within its script's #SBATCH --signal time
//                    (IsJobsWarning).
//
// Requeue paths. A job cannot requeue itself *and* change its excluded nodes
// (exc_nodes changes only on a pending job; a requeue from inside kills the
// caller first), and Slurm holds a requeued job back ~120 s (BeginTime). So:
//   epilog     the daemon writes its request into the job's comment
//              ("holdfast-requeue job=J uid=U restart=K run=R exclude=n2":
//              this job, its owner, this attempt) and calls slurm_requeue;
//              `holdfast-slurmctld-epilog` (EpilogSlurmctld= on the controller,
//              scheduler/slurmctld_epilog.h) finishes it once the job is
//              pending: excluded nodes, no BeginTime hold. Same job id,
//              restart count + 1. Needs the admin's slurm.conf line.
//   resubmit   the daemon submits the job's own batch script again as a new
//              job (same options, excluded nodes added,
//              --dependency=afterany:<this job>) and this job ends. Needs no
//              admin setting; a new job id, found by the run directory.
//   auto       epilog where the controller's EpilogSlurmctld names
//              holdfast-slurmctld-epilog, else resubmit. The default.
// When Slurm is already requeueing the job itself (scontrol requeue, a
// preemption with PreemptMode=REQUEUE) and no host is to be excluded, Requeue
// does nothing more.
//
// Thread-safety: like every Scheduler, one thread (the daemon's event loop).
// Calls block for libslurm RPCs, which retry an unreachable slurmctld with
// backoff for up to `rpc_deadline_s`.
#pragma once

#include <cstddef>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/scheduler.h"
#include "scheduler/slurm_client.h"

namespace holdfast {

enum class RequeuePath { kAuto, kEpilog, kResubmit };
const char* RequeuePathName(RequeuePath p);  // "auto", "epilog", "resubmit"
// kInvalidArgument naming the choices.
Result<RequeuePath> ParseRequeuePath(const std::string& text);

// The comment tag of a requeue request (written by the daemon, read by the
// slurmctld epilog, scheduler/slurmctld_epilog.h).
inline constexpr const char* kRequeueRequestTag = "holdfast-requeue";
// sbatch(1): the --signal warning "may be sent up to 60 seconds earlier than specified".
inline constexpr int kWarningEarlyS = 60;
// Whether SIGUSR1 with `lead_time_s` left before the time limit (< 0: none)
// is the job's own --signal warning (the batch script's, `script_warning`):
// it comes within its time, up to kWarningEarlyS early. A SIGUSR1 long before
// it, or in a job whose script sets none, is someone's `scancel --signal=USR1`.
bool IsJobsWarning(double lead_time_s, const std::optional<WarnSignal>& script_warning);
// A request longer than this is refused whole (a comment is the owner's to fill).
inline constexpr size_t kMaxRequeueRequestBytes = 1024;
inline constexpr size_t kMaxRequeueExcludedHosts = 64;
// What the daemon asks the epilog to finish, bound to the job it was written
// for: its id, its owner's uid and the restart count of the attempt that asked.
// The epilog acts only on a request whose three match the job it runs for.
struct RequeueRequest {
  uint32_t job_id = 0;
  uint32_t uid = 0;
  int restart = 0;  // SLURM_RESTART_COUNT of the attempt that wrote it
  std::string run_id;
  std::vector<std::string> exclude;  // node names
};
// "holdfast-requeue job=42 uid=1000 restart=0 run=R exclude=n2,n3"
std::string FormatRequeueRequest(const RequeueRequest& r);
// The request `comment` carries: nullopt when it carries none (its last
// ';'-separated part, where the daemon puts it after the user's own comment,
// does not begin with the tag); kInvalidArgument saying what is wrong when the
// part is malformed: an unknown or repeated key, a missing job/uid/restart, a
// value that is not a number or a name, more than kMaxRequeueExcludedHosts
// hosts, more than kMaxRequeueRequestBytes bytes.
Result<std::optional<RequeueRequest>> ReadRequeueRequest(const std::string& comment);
// `comment` without a tagged last part, well-formed or not (what the epilog
// writes back once it acted on it, and what the daemon replaces).
std::string StripRequeueRequest(const std::string& comment);

struct SlurmSchedulerOptions {
  std::string run_dir;
  std::string addr;  // --addr: this node's address, instead of its NodeAddr
  RequeuePath requeue_path = RequeuePath::kAuto;
  double rpc_deadline_s = 120;  // how long an unreachable slurmctld is retried
};

class SlurmScheduler : public Scheduler {
 public:
  explicit SlurmScheduler(SlurmSchedulerOptions options);

  const char* name() const override { return "slurm"; }
  SchedulerCapabilities capabilities() const override;

  // kInvalidArgument, saying what to change, outside a Slurm job or with more
  // than one holdfastd per node; Slurm's error when the controller cannot say
  // the nodes' addresses.
  Result<Allocation> Discover() override;
  Status PublishLeader(const std::string& addr) override;
  void WithdrawLeader() override;
  Result<std::string> FindLeader(std::chrono::milliseconds timeout) override;
  Status Requeue(const std::string& run_id, const std::vector<std::string>& exclude_hosts,
                 const std::string& reason) override;
  Status Drain(const std::string& host, const std::string& reason) override;
  std::optional<SignalMeaning> ExplainSignal(int sig) override;
  std::string last_requeue() const override { return last_requeue_; }

  std::string leader_file() const { return options_.run_dir + "/cluster-slurm.addr"; }
  uint32_t job_id() const { return job_id_; }

 private:
  Status RequeueByEpilog(const SlurmJob& job, const std::string& run_id, const std::vector<std::string>& exclude);
  Status Resubmit(const SlurmJob& job, const std::vector<std::string>& exclude);

  SlurmSchedulerOptions options_;
  SlurmClient client_;
  uint32_t job_id_ = 0;
  int restart_count_ = 0;
  bool may_drain_ = false;
  std::time_t end_time_ = 0;  // the job's time limit as an end time; 0 none
  bool leader_ = false;
  std::optional<WarnSignal> warning_;  // leader: the batch script's #SBATCH --signal
  std::string last_requeue_;
};

// The submission that reproduces `job` (its options as slurmctld keeps them,
// `script`, and the --signal of the script's #SBATCH lines), with the
// environment given. What a resubmission copies is listed in docs/slurm.md.
SlurmSubmission SubmissionFromJob(const SlurmJob& job, const std::string& script, std::vector<std::string> environment);
// RUN_DIR/slurm-job.json: the leader saves its job's submission there at the
// start of every attempt, so `runctl resume` can submit the run again after
// slurmctld has forgotten the job (MinJobAge).
std::string SavedSubmissionPath(const std::string& run_dir);
Status SaveSubmission(const std::string& path, const SlurmSubmission& sub);
Result<SlurmSubmission> LoadSubmission(const std::string& path);

// `runctl resume` of a Slurm run, from outside any job: when the run's last
// job (`last_job_id`) is still queued, releases it and starts it now (held,
// or waiting on BeginTime); when it is running, kFailedPrecondition; else
// submits the saved submission again with HOLDFAST_RESUME=run_id (and
// HOLDFAST_FROM_STEP). Returns what was done, in words.
Result<std::string> ResumeSlurmRun(const std::string& run_dir, const std::string& run_id,
                                   const std::string& last_job_id, std::optional<int64_t> from_step);

// The environment a resubmitted job gets: this process's, without the
// variables Slurm sets for a job, step or task (SLURM_* but SLURM_CONF,
// SLURMD_*), so that the new job describes itself.
std::vector<std::string> ResubmitEnvironment(char** environ_);

}  // namespace holdfast
