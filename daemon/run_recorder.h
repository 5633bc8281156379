// RunRecorder: the leading holdfastd's bookkeeping in the run's lineage.db —
// which run and attempt this is, generations, incidents and the decisions
// taken about them, checkpoints as the ranks commit them (and as the trainer
// prunes them), failed saves. Everything on-call later reads with runctl goes
// through here; the supervisor and its state machine never touch SQL.
//
// Lineage errors are logged and never stop a run: the record is for people,
// the run is what matters. While another process holds lineage.db locked
// (an `sqlite3` shell left in a transaction, a backup), writes wait at most
// kBusyWaitMs, so supervision is never held up, and are kept in memory in
// order and written once the lock is gone (Flush, every poll); a
// lineage_delayed event then says for how long and how many. At the end of
// the run the daemon waits up to kExitWaitMs for the lock, then logs every
// record it could not write.
//
// Thread-safety: none; owned by the daemon's event-loop thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/time_source.h"
#include "daemon/checkpoint_tracker.h"
#include "daemon/control_protocol.h"
#include "daemon/job_checkpoints.h"
#include "daemon/job_config.h"
#include "daemon/recovery_policy.h"
#include "daemon/triage.h"
#include "health/check.h"
#include "lineage/incident.h"
#include "lineage/lineage_db.h"
#include "scheduler/scheduler.h"

namespace holdfast {

// Where an event happened, and what it tells on-call beyond its kind's defaults.
struct EventContext {
  std::string host;  // "" = not tied to a node
  std::optional<int> rank;
  // nullopt: the kind's runbook (lineage/event_kind.h), or that of
  // `runbook_of` when set (a daemon stopped by a signal: crash's); "" none;
  // else this one (a health finding: its failed check's).
  std::optional<std::string> runbook;
  std::string runbook_of;
  // Kind health: the report of health/report.h, recorded as the evidence as it is.
  std::string report_json;
};
// Shorthands for the common contexts.
inline EventContext AtHost(std::string host) { return EventContext{std::move(host), {}, {}, "", ""}; }
inline EventContext WithoutRunbook(std::string host = "") { return EventContext{std::move(host), {}, "", "", ""}; }

// A crash event's failure, as the job-failure rule compares them: the ending
// rank's step (completed + 1; unknown without its progress record), exit code
// and signal; its host from its evidence, else `host`. nullopt without a rank.
std::optional<FailureRecord> CrashFailureOf(const IncidentEvidence& evidence, const std::string& host, int attempt);
// What a generation's ranks restored: its start step and "none", "disk" or "memory".
struct GenerationRestore {
  int64_t step = 0;
  std::string tier;
};

// A requeue event's evidence: the hosts it excluded ("left") and why
// ("reason": "failure" or "preemption"), which RunRecorder::History counts.
IncidentEvidence RequeueEvidence(const std::vector<std::string>& excluded, bool after_failure);

struct RecorderOptions {
  std::string run_dir;
  const JobConfig* job = nullptr;  // not owned; outlives the recorder
  Allocation allocation;
  int world_size = 0;
  std::string resume_run;     // continue this run (id, prefix or "latest") as a new attempt
  int64_t from_step = -1;     // with resume_run: the checkpoint step to start from
  int gpus = 0;               // ranks given a GPU (the launch plan's devices); 0: all on the CPU
};

class RunRecorder {
 public:
  // Opens lineage.db, finds the run to continue (an explicit --resume, or an
  // unfinished run in this directory) or creates one, and starts an attempt.
  // `clock` is not owned and must outlive the recorder.
  static Result<std::unique_ptr<RunRecorder>> Open(const RecorderOptions& options, const TimeSource* clock);

  const std::string& run_id() const { return run_id_; }
  int attempt() const { return attempt_; }
  // An elastic run changed its world size (checkpoints it finds committed on
  // its own are recorded with this one).
  void SetWorldSize(int world_size) { opts_.world_size = world_size; }
  int generation() const { return generation_; }
  // What gave this attempt its nodes (scheduler, job id, restart count, hosts),
  // as recorded with the attempt.
  const Allocation& allocation() const { return opts_.allocation; }
  // The step the attempt's first generation must start from (--from-step), or -1.
  int64_t requested_start_step() const { return requested_start_step_; }
  // Newest checkpoint recorded or seen this attempt (-1: none).
  int64_t last_committed_step() const { return last_committed_step_; }

  // ---- generations ----
  int StartGeneration(int64_t start_step);
  // Records the step every few seconds (cheap; called on each tick).
  void UpdateStep(int64_t step, bool force = false);
  void EndGeneration(RunState state, const std::string& cause);

  // What the generation's ranks report restoring (every rank's progress
  // record has said, run_recorder_generation.cc): records the step and tier as
  // the generation's start, once per generation, and a snapshot_passed_over
  // event when they passed memory snapshots over. Returns the step when it
  // records it (the caller's idea of the generation's start may then be
  // corrected), else nullopt.
  std::optional<int64_t> ObserveRestore(const std::vector<RankView>& views, int world_size);
  // The current generation's, once ObserveRestore has recorded it.
  const std::optional<GenerationRestore>& restore() const { return restore_; }

  // ---- events ----
  // Records an event of the current attempt and generation: the one way an
  // event reaches lineage. The runbook comes from the kind's row of
  // lineage/event_kind.h (unless `at` names another), the evidence is written
  // by lineage/incident.h ToJson. Incident kinds become the run's last
  // incident (runctl status).
  void Record(const std::string& kind, std::string summary, std::string action,
              const IncidentEvidence& evidence = {}, const EventContext& at = {});
  const std::optional<IncidentSummary>& last_incident() const { return last_incident_; }
  // Incidents recorded by this recorder (this daemon), by kind (metrics).
  const std::map<std::string, int64_t>& incident_counts() const { return incident_counts_; }
  // Earlier incidents of this run (every attempt) per host: events whose node
  // is set (the host the recovery policy credited; daemon/recovery_policy.h).
  std::map<std::string, int> HostIncidents();
  // Where incidents are published for the cross-run view (common/host_history.h);
  // "" when [lineage] host_history is off.
  const std::string& history_dir() const { return history_dir_; }
  // Earlier crashes, requeues after failures and the hosts they excluded, of
  // this run (every attempt): the recovery policy's job-failure rule and bounds.
  RunHistory History();

  // ---- checkpoints ----
  // Records each checkpoint every rank has committed since the last call
  // (every step folder in between, not only the newest), marks checkpoints
  // the trainer pruned from disk, and records failed saves the ranks report.
  // A step the job reported a path for (daemon/job_checkpoints.h), or any
  // step of a job whose checkpoint_dir holds no holdfast-train step folder,
  // is the job's own: recorded with that path and its size, never pruned.
  void ObserveCheckpoints(const std::vector<RankView>& views, int world_size);
  // The step a restart resumes from: the newest the trainer's loader would
  // take, or the newest of the job's own whose path is still there.
  int64_t NewestCommittedStep();

  // ---- health ----
  void RecordHealth(const std::vector<health::CheckResult>& results, const std::string& host);

  // ---- writes held while lineage.db is locked ----
  static constexpr int kBusyWaitMs = 50;
  static constexpr int kExitWaitMs = 60'000;
  // Writes what is held, in order, as far as the lock allows.
  void Flush();
  // Records held in memory, waiting for the lock.
  size_t held() const { return held_.size(); }

  // ---- the end ----
  // Ends this attempt only (before a requeue: the run goes on in the next).
  void EndAttempt(RunState state, const std::string& cause);
  // Ends the run, and this attempt if it still runs.
  void EndRun(RunState state, const std::string& cause);

 private:
  RunRecorder(const RecorderOptions& options, const TimeSource* clock);
  Status OpenRun();
  // The run this daemon continues (--resume, the Slurm job's, or this
  // directory's unfinished one), nullopt for a new run; *kind is the event
  // that says so (resume or daemon_restart).
  Result<std::optional<RunRecord>> RunToContinue(std::string* kind);
  // The run that has an attempt of Slurm job `job_id` (newest first), if any.
  Result<std::optional<RunRecord>> RunOfSlurmJob(const std::string& job_id);
  void RecordCommitted(int64_t step, int world_size);
  void RecordPruned();
  // A resume from `step` of a run with later checkpoints: each later step
  // folder on disk is moved aside ("step-N.fenced", checkpoint/format.h) and
  // its lineage row marked fenced, so that no restart of the resumed
  // timeline goes back onto the abandoned one. Returns the fenced steps.
  Result<std::vector<int64_t>> FenceLaterThan(int64_t step);
  void RecordCheckpointFailures(const std::vector<RankView>& views);
  // Checkpoints a trainer found corrupt while resuming (CheckpointTracker::CorruptMark).
  void RecordCorrupt();

  // Runs `write` now, or holds it (and every later one, to keep their order)
  // while lineage.db is locked by another process.
  void Write(std::string what, std::function<Status(LineageDb&)> write);
  void FlushBeforeExit();
  // A host an incident is published for in the host history, and whether the
  // recovery policy credited it (else it was only involved: a culprit's host).
  struct HistoryHost {
    std::string host;
    bool credited = false;
  };
  // An incident of a kind that can count against a host: its credited host
  // (the event's node), else its culprits' hosts as involved; none otherwise
  // or with the history off (run_recorder_history.cc).
  std::vector<HistoryHost> HistoryHostsOf(const EventRecord& ev, const IncidentEvidence& evidence) const;
  // Publishes event `id` for each of `hosts` (a failure is logged, never fatal).
  void PublishHistory(const EventRecord& ev, int64_t id, const std::vector<HistoryHost>& hosts);
  void RecordEvent(EventRecord ev, std::vector<HistoryHost> hosts = {});
  std::string history_dir_;  // "" = off
  bool history_warned_ = false;  // a failure to publish was logged

  struct HeldWrite {
    std::string what;
    std::function<Status(LineageDb&)> write;
  };
  std::deque<HeldWrite> held_;
  int64_t locked_since_ns_ = 0;  // monotonic; when the first write was held
  size_t held_total_ = 0;        // held since then

  RecorderOptions opts_;
  const TimeSource* clock_;  // not owned
  std::unique_ptr<LineageDb> db_;
  CheckpointTracker tracker_;
  JobCheckpointReports job_reports_;
  // The job's own committed checkpoints (CheckpointOwner::kJob): step -> path ("" unreported).
  std::map<int64_t, std::string> job_owned_;
  bool trainer_format_seen_ = false;  // a holdfast-train step folder was seen in checkpoint_dir
  bool TrainerOwns();
  std::string run_id_;
  int attempt_ = 0;
  int generation_ = -1;
  int64_t generation_expected_step_ = 0;  // the start step StartGeneration was given
  int restore_recorded_ = -1;              // the generation whose restore is recorded
  std::optional<GenerationRestore> restore_;  // the current generation's, once recorded
  int64_t requested_start_step_ = -1;
  int64_t last_committed_step_ = -1;
  std::set<int64_t> recorded_steps_;  // committed in lineage and (as far as we know) on disk
  bool corrupt_scan_due_ = true;       // a generation is restoring: look for corrupt folders
  std::set<std::string> corrupt_seen_;  // "step\nreason" of each corruption recorded
  int64_t last_recorded_step_ = -1;
  int64_t last_step_update_ns_ = 0;
  // Checkpoint failures already handled; records start at zero each generation.
  int failures_generation_ = -1;
  std::map<int, uint64_t> failures_seen_;    // global rank -> its checkpoint_failures handled
  std::set<int64_t> failed_steps_recorded_;  // steps with a checkpoint_failed event
  std::optional<IncidentSummary> last_incident_;
  std::map<std::string, int64_t> incident_counts_;
  bool attempt_ended_ = false;
};

}  // namespace holdfast
