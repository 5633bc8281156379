// SlurmClient: the project's only door to libslurm (the C API of Slurm
// 22.05+, <slurm/slurm.h>; no scontrol, no sbatch). Everything Holdfast asks
// of Slurm goes through here, in plain C++ types, and every Slurm error comes
// back as one Status made in one place (SlurmError): what we asked, Slurm's
// own message and its error number, e.g.
//   "requeue job 42: Requested operation is presently disabled (slurm error 2037)"
//
// Retries. slurmctld can be away for a while (restart, failover, overload):
// every RPC that fails with a communication error (the controller did not
// answer, the connection broke) is retried with exponential backoff (0.5 s,
// doubling to 5 s) until `RetryPolicy::deadline_s` has passed; errors Slurm
// answered with (unknown job, not permitted, ...) are returned at once. Each
// retry is logged (spdlog warn), so a stalled requeue shows in the daemon log.
//
// Thread-safety: libslurm keeps global state (slurm_init); a SlurmClient may be
// used from one thread at a time. Calls block for the RPC and its retries.
#pragma once

#include <cstdint>
#include <ctime>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace holdfast {

// One job, as slurmctld reports it (slurm_load_job).
struct SlurmJob {
  uint32_t job_id = 0;
  std::string state;        // base state: "PENDING", "RUNNING", "COMPLETED", "CANCELLED", "TIMEOUT", ...
  bool completing = false;  // JOB_COMPLETING: still cleaning up (epilogs)
  bool requeue_pending = false;  // JOB_REQUEUE / JOB_REQUEUE_HOLD: Slurm is putting it back in the queue
  std::string reason;       // why pending or failed ("BeginTime", "launch_failed_requeued_held", "JobHeldAdmin", ...)
  int restart_count = 0;
  bool batch = false;       // a batch job (sbatch), the only kind Slurm can requeue
  bool requeue_allowed = false;  // submitted with --requeue (or the cluster's default)
  std::vector<std::string> nodes;  // allocated nodes, expanded ("n[1-2]" -> n1, n2)
  std::string exc_nodes;    // the excluded-node expression ("n2,n5"); "" none
  std::string comment;
  std::string name, partition, account, qos, work_dir, std_out, std_err, std_in, command;
  std::string tres_per_node;  // e.g. "gres:gpu:8"
  uint32_t num_nodes = 0, num_tasks = 0;
  uint16_t ntasks_per_node = 0, cpus_per_task = 0;
  uint64_t pn_min_memory = 0;
  uint32_t time_limit_min = 0;  // 0 or UINT32_MAX (INFINITE) when none
  uint32_t priority = 0;        // 0 = held
  uint32_t user_id = 0, group_id = 0;
  std::time_t start_time = 0, end_time = 0, begin_time = 0;
  bool pending() const { return state == "PENDING"; }
  // Slurm is putting the job back in the queue itself (scontrol requeue, a
  // preemption with PreemptMode=REQUEUE): already pending, flagged, or
  // completing with no end time (how 22.05 shows a requeue in progress).
  bool being_requeued() const { return pending() || requeue_pending || (completing && end_time == 0); }
  // A time limit is set (0, INFINITE and NO_VAL mean none).
  bool has_time_limit() const { return time_limit_min != 0 && time_limit_min < 0xfffffffeu; }
  bool running() const { return state == "RUNNING"; }
};

// What of the controller's configuration Holdfast needs (slurm_load_ctl_conf).
struct SlurmConfig {
  std::string cluster_name;
  std::string epilog_slurmctld;  // EpilogSlurmctld=
  std::string prolog;            // Prolog=
  bool prolog_flags_alloc = false;  // PrologFlags=Alloc
  int kill_wait_s = 30;          // KillWait=: SIGTERM -> SIGKILL
  uint32_t slurm_user_id = 0;    // SlurmUser's uid
};

// A change to a job (slurm_update_job). Unset fields are left as they are.
struct SlurmJobUpdate {
  std::optional<std::string> exc_nodes;
  std::optional<std::string> comment;
  bool begin_now = false;  // begin_time = now: no BeginTime hold
  bool release = false;    // priority = INFINITE: release a held job
};

// A batch job to submit (slurm_submit_batch_job).
struct SlurmSubmission {
  std::string script;  // the whole batch script
  std::string name, partition, account, qos, work_dir, std_out, std_err, std_in, comment;
  std::string exc_nodes, dependency, tres_per_node;
  std::vector<std::string> environment;  // "K=V"
  uint32_t num_nodes = 0, num_tasks = 0;
  uint16_t ntasks_per_node = 0, cpus_per_task = 0;
  uint64_t pn_min_memory = 0;
  uint32_t time_limit_min = 0;
  bool requeue = true;
  int warn_signal = 0;  // --signal=[B:]SIG@TIME
  int warn_time_s = 0;
  bool warn_batch_only = false;  // the B: of --signal
};

class SlurmClient {
 public:
  struct RetryPolicy {
    double initial_s = 0.5;
    double max_s = 5;
    double deadline_s = 120;  // give up on an unreachable controller after this long
  };

  // Calls slurm_init (once per process; SLURM_CONF or the default slurm.conf).
  explicit SlurmClient(RetryPolicy retry);
  SlurmClient() : SlurmClient(RetryPolicy{}) {}

  Result<SlurmJob> LoadJob(uint32_t job_id) const;
  Result<SlurmConfig> LoadConfig() const;
  // Node name -> its NodeAddr (the address slurmctld reaches it on).
  Result<std::map<std::string, std::string>> NodeAddrs() const;

  Status Requeue(uint32_t job_id) const;
  Status UpdateJob(uint32_t job_id, const SlurmJobUpdate& update) const;
  // Drain (true) or resume (false) `node` with `reason`.
  Status SetNodeDrained(const std::string& node, bool drain, const std::string& reason) const;
  // Signals the job's batch shell (KILL_JOB_BATCH), or every step when !batch_only.
  Status Signal(uint32_t job_id, int sig, bool batch_only) const;
  Result<std::string> BatchScript(uint32_t job_id) const;
  Result<uint32_t> Submit(const SlurmSubmission& job) const;

  const RetryPolicy& retry() const { return retry_; }
  // RPCs sent to slurmctld so far, each retry counted.
  int rpcs() const { return rpcs_; }

 private:
  RetryPolicy retry_;
  mutable int rpcs_ = 0;
};

// The one place where a Slurm error number becomes a Status: `what` we asked,
// Slurm's message, the number. Permission errors are kPermissionDenied,
// unknown jobs/nodes kNotFound, unreachable controllers kUnavailable, the rest
// kFailedPrecondition.
Status SlurmError(const std::string& what, int slurm_errno);
// Whether `slurm_errno` means the controller could not be reached (retry).
bool IsSlurmCommunicationError(int slurm_errno);

// "n[1-3],gpu7" -> n1, n2, n3, gpu7 (slurm_hostlist_*; no RPC). kInvalidArgument when malformed.
Result<std::vector<std::string>> ExpandSlurmHostlist(const std::string& expr);
// The compact form of `hosts` ("n1,n3" -> "n[1,3]").
std::string CompressSlurmHostlist(const std::vector<std::string>& hosts);

// "USR1" / "SIGUSR1" / "10" -> 10; 0 when not a signal.
int ParseSignal(const std::string& text);
// The first `#SBATCH --signal=[{R|B}:]SIG[@TIME]` of a batch script (what
// slurmctld does not keep in the job record, so a resubmission must read it
// from the script). nullopt when the script has none.
struct WarnSignal {
  int sig = 0;
  int time_s = 60;
  bool batch_only = false;
};
std::optional<WarnSignal> ScriptWarnSignal(const std::string& script);

}  // namespace holdfast
