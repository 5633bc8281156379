// RunController: the leading holdfastd's state machine for one attempt of a
// run — generations start, ranks exit or hang, health turns, nodes vanish,
// operators stop — and the only caller of the recovery policy
// (daemon/recovery_policy.h). It decides nothing itself: it gathers the facts
// of an incident, asks the policy, records incident and decision through the
// RunRecorder, and has RunActions carry the decision out.
//
//        Launch()                      incident / stop request
//   kIdle ───────► kRunning ───────────────────────────────► kStopping
//     ▲               ▲                                          │ every rank exited
//     │               │ restart timer                            ▼
//     │            kBackoff ◄──── restart in place ──── (execute the decision)
//     │                                                          │ stop / requeue
//     └──── (followers joining)                                  ▼
//                                                            kFinished
//
// run_controller.cc turns inputs into incidents and decisions;
// run_controller_execute.cc carries a decision out once the ranks are gone.
// Time comes from an injected TimeSource and timers are requested from
// RunActions (ArmTimer/CancelTimer, delivered back as OnTimer), so the whole
// machine runs in unit tests on a fake clock with a recording RunActions
// (daemon/run_controller_test.cc) — no processes, no sleeps.
//
// Thread-safety: none; owned by the daemon's event-loop thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/time_source.h"
#include "daemon/job_config.h"
#include "daemon/recovery_policy.h"
#include "daemon/run_recorder.h"
#include "daemon/straggler.h"
#include "daemon/triage.h"
#include "health/policy.h"
#include "scheduler/scheduler.h"

namespace holdfast {

// kPreemptDeadline: a scheduler's warning whose stop waits for the lead time
// to be used (OnPreemptionWarning).
enum class ControllerTimer { kKillGrace, kRestart, kPreemptDeadline };

// What carries the controller's decisions out: the Supervisor (real ranks on
// every node, asio timers, the scheduler), or a recording double in tests.
class RunActions {
 public:
  virtual ~RunActions() = default;
  // Starts `generation` on every node; `resume_step` -1 = the newest checkpoint.
  // An error means no rank of the generation was started. A rank that could
  // not be started while others were is reported as an exit (OnRankExit with
  // exec_error), so that the others are stopped and counted.
  virtual Status LaunchGeneration(int generation, int64_t resume_step) = 0;
  // TERM (and CONT) every live rank on every node; a node that loses its
  // leader kills its ranks after `grace_s` on its own.
  virtual void TerminateRanks(const std::string& why, double grace_s) = 0;
  // SIGKILL these ranks now (any node); empty = every live rank.
  virtual void KillRanks(const std::vector<int>& ranks) = 0;
  virtual void ArmTimer(ControllerTimer timer, double seconds) = 0;
  virtual void CancelTimer(ControllerTimer timer) = 0;
  virtual Status Drain(const std::string& host, const std::string& reason) = 0;
  virtual Status Requeue(const std::vector<std::string>& exclude_hosts, const std::string& reason) = 0;
  // After a successful Requeue: what the scheduler did, for lineage ("" = nothing to add).
  virtual std::string RequeueNote() const { return ""; }
  // The newest step of this run's memory snapshots (docs/memory-snapshots.md)
  // that every rank committed, which a restarted trainer resumes from before
  // the disk; -1 = none, or no memory tier.
  virtual int64_t NewestMemorySnapshot() const { return -1; }
  // Where that snapshot's state comes from when it is not all on the nodes
  // that wrote it, for the incident's action ("node 1 (b)'s shards from the
  // replica on node 0 (a)"); "" = nothing to add.
  virtual std::string MemorySnapshotNote() const { return ""; }
  // Elastic runs: the hosts the ranks run on now, and the joined nodes
  // standing by (ControllerOptions::min_nodes > 0 only).
  virtual std::vector<std::string> ActiveHosts() const { return {}; }
  virtual std::vector<std::string> SpareHosts() const { return {}; }
  // The next generations run without `leaving`, with `joining` (spares) in
  // their place; returns the new world size. Called between generations.
  virtual Result<int> Reshape(const std::vector<std::string>& leaving, const std::vector<std::string>& joining) {
    (void)leaving;
    (void)joining;
    return FailedPreconditionError("this supervisor cannot change the run's nodes");
  }
  // Every live rank was judged hung while waiting for input (phase `data`):
  // the role processes the learner waits on may be what is stuck
  // (RoleSupervisor::BlameLearnerStall). Returns how many role processes were
  // named and are being handled; 0 = the learner's own hang.
  virtual int BlameRolesForStall(double stalled_s, double timeout_s, const std::string& learner_doing) {
    (void)stalled_s;
    (void)timeout_s;
    (void)learner_doing;
    return 0;
  }
  // A hang was found and its ranks are about to be stopped: their stacks, for
  // the evidence (daemon/stack_capture.h; bounded by supervise.stack_timeout_s).
  virtual StackEvidence CaptureStacks(const std::vector<RankView>& views) {
    (void)views;
    return {};
  }
  // The run is over: tear down and leave the loop with `exit_code`.
  virtual void Finish(int exit_code) = 0;
};

struct RankExit {
  int rank = 0;
  int wstatus = 0;           // as from waitpid
  std::string exec_error;    // non-empty: the rank's command could not be executed (why)
  std::vector<std::string> log_tail;
};

// A role process's trouble that reaches the learner (daemon/role_policy.h):
//   kCrash, kHang   a restart = "learner" role process failed: the learner
//                   group restarts as after a rank failure (no host implicated)
//   kRoleFailed     a role process cannot go on: stop the run, the learner
//                   checkpointing first
struct RoleIncident {
  IncidentKind cause = IncidentKind::kCrash;  // what the recovery policy decides on
  TriageReport report;  // event (role_crash, role_hang, budget_exhausted), summary, evidence (TriageRole)
  std::string runbook_of;  // "" = the event's kind's runbook; else that kind's (EventContext::runbook_of)
};

struct ControllerOptions {
  SuperviseConfig supervise;
  int world_size = 1;
  std::function<std::string(int rank)> host_of_rank;  // the node host a rank runs on
  SchedulerCapabilities caps;
  int min_nodes = 0;  // JobConfig::min_nodes: > 0 makes the run elastic
};

class RunController {
 public:
  enum class State { kIdle, kRunning, kStopping, kBackoff, kFinished };

  // `clock`, `recorder` and `actions` are not owned and must outlive this.
  RunController(ControllerOptions options, const TimeSource* clock, RunRecorder* recorder, RunActions* actions);

  // Starts the attempt's first generation (after pre-launch checks).
  void Launch();
  // Every poll: hang detection, checkpoints, step bookkeeping, stragglers.
  void OnTick(const std::vector<RankView>& views);
  void OnRankExit(const RankExit& exit, const std::vector<RankView>& views);
  // Several exits seen at once (one poll's, one burst of followers' reports),
  // judged in order against the same views: the checkpoints they show are
  // observed once, not once per exit (a stop of 2048 ranks would otherwise
  // scan every view 2048 times; issue 28).
  void OnRankExits(const std::vector<RankExit>& exits, const std::vector<RankView>& views);
  // The health policy's decision about `host` ("pre-launch" or "periodic").
  void OnHealth(const health::Decision& decision, const std::string& host, const std::string& when);
  // A node's daemon is gone (or never joined); its ranks died with it.
  void OnNodeLost(const std::string& host, const std::vector<int>& ranks_of_node, const std::string& why);
  // kStopRequest, kDaemonSignal or kPreemption: the ranks checkpoint and stop
  // now (a warning's deadline waiting is cancelled: it stops now too).
  void OnStopRequest(IncidentKind kind, const std::string& why);
  // A scheduler's advance warning (SignalMeaning::warning) with
  // `lead_time_s` (< 0 unknown) before it kills the job. With a measured save
  // and step time and enough lead the ranks train on and the stop comes when
  // the kPreemptDeadline timer fires, so that the newest step can just commit
  // before the limit (daemon/preempt_plan.h); else they stop now. Either way a
  // `preempt` event records the plan (lead, save estimate, margin, when the
  // save starts). A second warning while waiting stops now.
  void OnPreemptionWarning(const std::string& why, double lead_time_s);
  // Training on after a warning, until the kPreemptDeadline timer.
  bool preemption_deferred() const { return deferred_preemption_.has_value(); }
  // A role process's failure that the learner must act on (RoleIncident).
  void OnRoleIncident(const RoleIncident& incident, const std::vector<RankView>& views);
  void OnTimer(ControllerTimer timer);
  // The scheduler's lead time before it kills the job (< 0 unknown), told with
  // a preemption signal that is no warning (SIGTERM: KillWait): a lineage
  // warning when it is shorter than this run's measured checkpoint save time.
  void NoteLeadTime(double lead_time_s);
  // The longest checkpoint save seen in this attempt, seconds; < 0 none yet.
  // An upper bound, whether or not a poll caught the save's phase (an
  // asynchronous save leaves phase `checkpoint` as soon as its state is
  // staged): from the last poll that saw a rank short of step S to the poll
  // that saw S committed — over by at most a poll interval and a step.
  double measured_save_s() const { return measured_save_s_; }

  State state() const { return state_; }
  const char* state_name() const;
  int generation() const { return generation_; }
  int restarts_used() const { return restarts_used_; }
  int world_size() const { return opts_.world_size; }
  int exit_code() const { return exit_code_; }
  // Exit statuses of this generation's ranks so far (global rank -> wstatus).
  const std::map<int, int>& exits() const { return exits_; }
  const StragglerDetector& stragglers() const { return straggler_; }

 private:
  // An incident as the controller handles it: the cause the recovery policy
  // decides on, the hosts it implicates, and the report lineage records.
  struct Facts {
    IncidentKind cause = IncidentKind::kCrash;
    std::vector<std::string> hosts;
    health::Action health_action = health::Action::kNone;
    TriageReport report;  // event, culprits, summary, evidence
    // The event's runbook and health report, when not its kind's defaults
    // (host and rank are filled in when it is recorded: the host the recovery
    // policy credits, unless set here).
    EventContext context;
  };
  // Decides, records, and stops the ranks (or executes at once when none run).
  void HandleIncident(Facts facts, const std::vector<RankView>& views);
  // Records a straggler episode's start and end (never an action).
  void ObserveStragglers(int64_t now, const std::vector<RankView>& views);
  void AfterAllStopped();
  void Execute();
  void StartGeneration();
  void EndGeneration(RunState state, const std::string& cause);
  void FinishRun(RunState state, const std::string& cause, int code);
  bool Progressed(const std::vector<RankView>& views) const;
  // Every live rank is in phase `data` (waiting for input, in no collective).
  static bool WaitingForInput(const std::vector<RankView>& live);
  std::string ActionText(const Facts& facts, const RecoveryDecision& d) const;
  // What to do with an incident arriving now (recovery_policy.h RedecideFor).
  Redecision Redecide(IncidentKind cause, health::Action health_action, bool from_role) const;

  ControllerOptions opts_;
  const TimeSource* clock_;  // not owned
  RunRecorder* recorder_;    // not owned
  RunActions* actions_;      // not owned
  HangDetector hang_;
  StragglerDetector straggler_;

  State state_ = State::kIdle;
  int generation_ = -1;
  int64_t generation_start_step_ = 0;
  int restarts_used_ = 0;
  int failures_without_progress_ = 0;
  int64_t max_step_seen_ = -1;       // this generation
  // Checkpoint saves (measured_save_s): per poll, the least advanced live
  // rank's step and when (this generation, oldest first, bounded); the newest
  // committed step seen.
  std::deque<std::pair<int64_t, int64_t>> steps_seen_;
  int64_t save_committed_ = -1;
  double measured_save_s_ = -1;
  void ObserveSaves(int64_t now, const std::vector<RankView>& views);
  std::map<int, int> exits_;         // this generation: global rank -> wait status
  // The first rank of this generation to exit cleanly (0, or 75 after a stop's
  // checkpoint) while others still ran, and what it had done: its peers that
  // report the same get exit_grace_s to follow (OnExitGrace).
  struct CleanExit {
    int rank = -1;
    int wstatus = 0;
    bool checkpointed = false;     // 75: the work is the committed checkpoint
    int64_t step = -1;             // its last reported step (-1 = no record)
    int64_t checkpoint_step = -1;  // its last committed checkpoint
    int64_t at_ns = 0;             // when it exited
  };
  std::optional<CleanExit> first_clean_exit_;
  // Ranks terminated after they had done their peers' work: they end as the peers did.
  std::vector<int> ended_after_peers_;
  // One exit of OnRankExits, after the views' checkpoints were observed.
  void JudgeExit(const RankExit& e, const std::vector<RankView>& views);
  void NoteCleanExit(const RankExit& e, const std::vector<RankView>& views);
  // Whether `v` (alive, not exited) reports the work of first_clean_exit_ done.
  bool DidPeersWork(const RankView& v) const;
  // Every rank still running has done first_clean_exit_'s work.
  bool OnlyFinishedRanksRun(const std::vector<RankView>& views) const;
  // Every tick: ranks past exit_grace_s that did their peers' work are terminated.
  void CheckExitGrace(int64_t now, const std::vector<RankView>& views);
  // The incident being handled and what the policy decided about it.
  std::optional<Facts> pending_facts_;
  std::optional<RecoveryDecision> pending_;
  // The warning whose stop waits for the kPreemptDeadline timer (its why).
  std::optional<std::string> deferred_preemption_;
  double deferred_for_s_ = 0;  // how long it trains on
  void CancelPreemptDeadline();
  int exit_code_ = 0;
};

}  // namespace holdfast
