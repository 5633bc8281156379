#include "daemon/run_controller.h"

#include <signal.h>

#include <algorithm>
#include <cstdio>

#include <spdlog/spdlog.h>

#include "daemon/exit_codes.h"
#include "daemon/preempt_plan.h"
#include "health/report.h"
#include "lineage/incident.h"

namespace holdfast {

RunController::RunController(ControllerOptions options, const TimeSource* clock, RunRecorder* recorder,
                             RunActions* actions)
    : opts_(std::move(options)), clock_(clock), recorder_(recorder), actions_(actions),
      hang_(opts_.supervise),
      straggler_(StragglerConfig::FromSupervise(opts_.supervise)) {}

const char* RunController::state_name() const {
  switch (state_) {
    case State::kIdle: return "starting";
    case State::kRunning: return "running";
    case State::kStopping: return "stopping";
    case State::kBackoff: return "restarting";
    case State::kFinished: return "finished";
  }
  return "?";
}

void RunController::Launch() {
  if (state_ != State::kIdle) return;
  StartGeneration();
}

void RunController::StartGeneration() {
  const int64_t requested = generation_ < 0 ? recorder_->requested_start_step() : -1;
  const int64_t memory = requested >= 0 ? -1 : actions_->NewestMemorySnapshot();
  const int64_t newest = memory >= 0 ? memory : recorder_->NewestCommittedStep();
  generation_start_step_ = requested >= 0 ? requested : std::max<int64_t>(0, newest);
  generation_ = recorder_->StartGeneration(generation_start_step_);
  exits_.clear();
  first_clean_exit_.reset();
  ended_after_peers_.clear();
  max_step_seen_ = -1;
  pending_.reset();
  pending_facts_.reset();
  hang_.StartGeneration(clock_->MonotonicNs(), opts_.world_size);
  steps_seen_.clear();  // a restart's steps run again: no save of the last generation's is measured
  straggler_.StartGeneration(clock_->MonotonicNs(), opts_.world_size);
  state_ = State::kRunning;
  Status s = actions_->LaunchGeneration(generation_, requested);
  if (!s.ok()) {
    // By contract nothing of this generation was started (RunActions::LaunchGeneration).
    spdlog::error("{}", s.ToString());
    for (int r = 0; r < opts_.world_size; ++r) exits_.emplace(r, 127 << 8);
    Facts f;
    f.cause = s.code() == StatusCode::kInvalidArgument ? IncidentKind::kBadInput : IncidentKind::kCrash;
    f.report.event = event_kind::kCrash;
    f.report.summary = "generation " + std::to_string(generation_) + " could not start: " + s.message();
    HandleIncident(std::move(f), {});
    return;
  }
  spdlog::info("generation {} started: {} ranks, from step {}", generation_, opts_.world_size, generation_start_step_);
}

bool RunController::WaitingForInput(const std::vector<RankView>& live) {
  if (live.empty()) return false;
  for (const RankView& v : live) {
    if (!v.progress.attached() || v.progress.torn) return false;
    if (v.progress.phase != Phase::kData) return false;
    if (IsStopped(v.proc_state)) return false;  // a stopped rank is its own culprit
  }
  return true;
}

bool RunController::Progressed(const std::vector<RankView>& views) const {
  return NewestStep(views, max_step_seen_) > generation_start_step_;
}

void RunController::OnTick(const std::vector<RankView>& views) {
  if (state_ != State::kRunning && state_ != State::kStopping) return;
  recorder_->ObserveCheckpoints(views, opts_.world_size);
  // The ranks' own word on where the generation starts (an older step when they passed a snapshot over).
  if (std::optional<int64_t> restored = recorder_->ObserveRestore(views, opts_.world_size)) {
    generation_start_step_ = *restored;
  }
  const int64_t step = NewestStep(views, -1);
  max_step_seen_ = std::max(max_step_seen_, step);
  ObserveSaves(clock_->MonotonicNs(), views);
  CheckExitGrace(clock_->MonotonicNs(), views);
  if (state_ != State::kRunning) return;
  recorder_->UpdateStep(step);
  // Ranks that finished cleanly are not waiting for anyone.
  std::vector<RankView> live;
  for (const RankView& v : views) {
    if (v.alive && exits_.count(v.rank) == 0) live.push_back(v);
  }
  const int64_t now = clock_->MonotonicNs();
  ObserveStragglers(now, views);
  // Ranks that did the work of a peer that exited cleanly are finishing, not
  // hung: exit_grace_s bounds them (CheckExitGrace).
  if (first_clean_exit_ && opts_.supervise.exit_grace_s > 0 && OnlyFinishedRanksRun(views)) return;
  HangDetector::Verdict verdict = hang_.Observe(now, live);
  if (verdict.hung && WaitingForInput(live)) {
    // Every rank waits for input: in a run with roles, for what they produce.
    const RankView& first = live.front();
    const std::string doing = "in data of step " + std::to_string(first.progress.step + 1);
    if (const int named = actions_->BlameRolesForStall(verdict.stalled_s, verdict.timeout_s, doing); named > 0) {
      spdlog::warn("the learner waited {:.1f} s {}: {} role process(es) named as the cause; the learner keeps "
                   "running", verdict.stalled_s, doing, named);
      hang_.Excuse(now);
      return;
    }
  }
  if (verdict.hung) {
    Facts f;
    f.cause = IncidentKind::kHang;
    // Ranks that already exited cleanly are no suspects: their records stop
    // where they finished (a hang after its peers exited 0 named rank 0).
    std::vector<RankView> suspects;
    for (const RankView& v : views) {
      if (exits_.count(v.rank) == 0) suspects.push_back(v);
    }
    f.report = TriageHang(now, suspects, verdict);
    // Before anything is stopped: what every hung process is doing (bounded in time).
    f.report.evidence.stacks = actions_->CaptureStacks(views);
    for (int c : f.report.culprits) {
      const std::string h = opts_.host_of_rank(c);
      if (std::find(f.hosts.begin(), f.hosts.end(), h) == f.hosts.end()) f.hosts.push_back(h);
    }
    spdlog::error("HANG: {}", f.report.summary);
    HandleIncident(std::move(f), views);
  }
}

void RunController::ObserveStragglers(int64_t now, const std::vector<RankView>& views) {
  const StragglerVerdict v = straggler_.Observe(now, views);
  if (!v.straggler && !v.recovered) return;
  // Reported, never acted on: a straggler slows every rank but loses nothing,
  // and a restart would not make its node faster.
  IncidentEvidence ev;
  ev.rank = v.rank;
  ev.ratio = v.ratio;
  ev.held_s = v.held_s;
  for (const RankView& r : views) {
    if (auto p = straggler_.Pace(r.rank)) {
      RankEvidence re = RankEvidenceOf(now, r);
      re.pace = PaceEvidence{p->steps_per_s, p->step_ms_p50, p->step_ms_p99, p->compute_ms_p50, p->wait_ms_p50};
      ev.ranks.push_back(std::move(re));
    }
  }
  const char* kind = v.straggler ? event_kind::kStraggler : event_kind::kStragglerRecovered;
  spdlog::warn("{}: {}", kind, v.summary);
  recorder_->Record(kind, v.summary,
                    v.straggler ? "reported; no restart (the run goes on at the straggler's pace)" : "reported", ev,
                    EventContext{opts_.host_of_rank(v.rank), v.rank, {}, "", ""});
}

void RunController::JudgeExit(const RankExit& e, const std::vector<RankView>& views) {
  const bool ended_after_peers =
      std::find(ended_after_peers_.begin(), ended_after_peers_.end(), e.rank) != ended_after_peers_.end();
  // A rank terminated after it had done its peers' work ends as they did (the
  // exit_stuck event holds how it really ended).
  exits_[e.rank] = ended_after_peers && first_clean_exit_ ? first_clean_exit_->wstatus : e.wstatus;
  if (!ended_after_peers) NoteCleanExit(e, views);
  const bool all_exited = static_cast<int>(exits_.size()) >= opts_.world_size;
  if (state_ == State::kStopping) {
    if (all_exited) AfterAllStopped();
    return;
  }
  if (state_ != State::kRunning) return;
  const int ws = exits_[e.rank];
  const ExitClass exit = ClassifyExit(ws, e.exec_error);
  if (exit == ExitClass::kClean || exit == ExitClass::kCheckpointed) {
    if (!all_exited) return;  // the others follow; one that does not is a hang
    bool all_clean = true;
    for (const auto& [r, s] : exits_) all_clean = all_clean && ClassifyExit(s, "") == ExitClass::kClean;
    if (all_clean) {
      EndGeneration(RunState::kSucceeded, "");
      FinishRun(RunState::kSucceeded, "", kDaemonExitOk);
      return;
    }
    // The ranks checkpointed and stopped on their own: someone preempted them.
    Facts f;
    f.cause = IncidentKind::kPreemption;
    f.report.event = event_kind::kPreempt;
    f.report.summary = "ranks checkpointed step " + std::to_string(recorder_->last_committed_step()) +
                       " and stopped (preemption)";
    HandleIncident(std::move(f), views);
    return;
  }
  Facts f;
  f.report = TriageExit(clock_->MonotonicNs(), views, e.rank, ws, e.log_tail);
  f.hosts = {opts_.host_of_rank(e.rank)};
  f.cause = exit == ExitClass::kCrash ? IncidentKind::kCrash : IncidentKind::kBadInput;
  if (!e.exec_error.empty()) {
    f.report.summary = "rank " + std::to_string(e.rank) + " could not be started: " + e.exec_error;
  } else if (exit == ExitClass::kBadInput) {
    f.report.summary += " (bad config, flag or data: a restart cannot help)";
  } else if (exit == ExitClass::kNotExecuted) {
    f.report.summary += " (its command could not be executed: a restart cannot help)";
  }
  spdlog::error("CRASH: {}", f.report.summary);
  HandleIncident(std::move(f), views);
}

void RunController::NoteCleanExit(const RankExit& e, const std::vector<RankView>& views) {
  if (first_clean_exit_ || (state_ != State::kRunning && state_ != State::kStopping)) return;
  const ExitClass exit = ClassifyExit(e.wstatus, e.exec_error);
  if (exit != ExitClass::kClean && exit != ExitClass::kCheckpointed) return;
  if (static_cast<int>(exits_.size()) >= opts_.world_size) return;  // nobody left to wait for
  CleanExit c;
  c.rank = e.rank;
  c.wstatus = e.wstatus;
  c.checkpointed = exit == ExitClass::kCheckpointed;
  c.at_ns = clock_->MonotonicNs();
  for (const RankView& v : views) {
    if (v.rank != e.rank || !v.progress.attached() || v.progress.torn) continue;
    c.step = v.progress.step;
    c.checkpoint_step = v.progress.checkpoint_step;
  }
  first_clean_exit_ = c;
}

bool RunController::DidPeersWork(const RankView& v) const {
  if (!first_clean_exit_ || !v.progress.attached() || v.progress.torn) return false;
  const CleanExit& c = *first_clean_exit_;
  // A stop's exit 75 is work done only when the exiting rank committed the step
  // it was on (the contract's "save the last completed step"); an older
  // checkpoint says nothing of what a peer still saving is doing.
  if (c.checkpointed) {
    return c.checkpoint_step >= 0 && c.checkpoint_step >= c.step && v.progress.checkpoint_step >= c.checkpoint_step;
  }
  return c.step >= 0 && v.progress.step >= c.step;
}

bool RunController::OnlyFinishedRanksRun(const std::vector<RankView>& views) const {
  bool any = false;
  for (const RankView& v : views) {
    if (!v.alive || exits_.count(v.rank) != 0) continue;
    if (!DidPeersWork(v)) return false;
    any = true;
  }
  return any;
}

void RunController::CheckExitGrace(int64_t now, const std::vector<RankView>& views) {
  if (!first_clean_exit_ || !ended_after_peers_.empty() || opts_.supervise.exit_grace_s <= 0) return;
  const CleanExit& c = *first_clean_exit_;
  const double waited_s = static_cast<double>(now - c.at_ns) / 1e9;
  if (waited_s < opts_.supervise.exit_grace_s || !OnlyFinishedRanksRun(views)) return;
  IncidentEvidence ev;
  std::string names;
  for (const RankView& v : views) {
    ev.ranks.push_back(RankEvidenceOf(now, v));
    if (!v.alive || exits_.count(v.rank) != 0) continue;
    ended_after_peers_.push_back(v.rank);
    names += (names.empty() ? "" : ", ") + std::to_string(v.rank);
  }
  const std::string work = c.checkpointed ? "committed the checkpoint of step " + std::to_string(c.checkpoint_step)
                                          : "completed step " + std::to_string(c.step);
  char waited[32];
  std::snprintf(waited, sizeof(waited), "%.1f", waited_s);
  const std::string summary = std::string(ended_after_peers_.size() == 1 ? "rank " : "ranks ") + names + " " +
                              work + " but did not exit " + waited + " s after rank " + std::to_string(c.rank) +
                              " exited " + (c.checkpointed ? "75 (stopped)" : "0") +
                              " (stuck in its teardown: destroy_process_group, an atexit hook, a thread)";
  const std::string action = "SIGTERM, SIGKILL after " + std::to_string(static_cast<int>(opts_.supervise.term_grace_s)) +
                             " s; the generation ends as its peers did (exit_grace_s " +
                             std::to_string(static_cast<int>(opts_.supervise.exit_grace_s)) + ")";
  ev.stacks = actions_->CaptureStacks(views);
  spdlog::warn("{}: {} -> {}", event_kind::kExitStuck, summary, action);
  EventContext at;
  at.rank = ended_after_peers_.front();
  at.host = opts_.host_of_rank(ended_after_peers_.front());
  recorder_->Record(event_kind::kExitStuck, summary, action, ev, at);
  actions_->TerminateRanks(summary, opts_.supervise.term_grace_s);
  actions_->ArmTimer(ControllerTimer::kKillGrace, opts_.supervise.term_grace_s);
}

void RunController::OnHealth(const health::Decision& decision, const std::string& host, const std::string& when) {
  if (decision.action == health::Action::kNone || state_ == State::kFinished) return;
  Facts f;
  f.cause = IncidentKind::kHealth;
  f.hosts = {host};
  f.health_action = decision.action;
  f.report.event = event_kind::kHealth;
  f.report.summary = when + " health check failed on " + host + ": " + decision.reason;
  f.context.report_json = health::ReportToJson(decision.causes, decision);
  if (!decision.causes.empty()) f.context.runbook = decision.causes.front().runbook;  // the failed check's guide
  spdlog::error("HEALTH: {} (health policy: {})", f.report.summary, health::ActionName(decision.action));
  // Already stopping, or nothing runs to restart: the finding is recorded with the results.
  if (Redecide(f.cause, decision.action, /*from_role=*/false) == Redecision::kIgnore) return;
  HandleIncident(std::move(f), {});
}

void RunController::OnNodeLost(const std::string& host, const std::vector<int>& ranks_of_node,
                               const std::string& why) {
  if (state_ == State::kFinished) return;
  for (int r : ranks_of_node) exits_.emplace(r, SIGKILL);  // its ranks died with their daemon
  Facts f;
  f.cause = IncidentKind::kNodeLost;
  f.hosts = {host};
  f.report.event = event_kind::kNodeLost;
  f.report.summary = host + "'s holdfastd is gone (" + why + ")";
  spdlog::error("NODE LOST: {}", f.report.summary);
  const Redecision redecision = Redecide(f.cause, health::Action::kNone, /*from_role=*/false);
  switch (redecision) {
    case Redecision::kDecide:
      // A restart in place is no longer possible as planned (or nothing was pending).
      pending_.reset();
      HandleIncident(std::move(f), {});
      return;
    case Redecision::kDecideWithPending: {
      // Going on without other nodes: decide again without this one too.
      std::vector<std::string> hosts = pending_->exclude_hosts;
      if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
      f.hosts = hosts;
      f.context.host = host;  // the event is this node's; the others were recorded when they left
      pending_.reset();
      HandleIncident(std::move(f), {});
      return;
    }
    case Redecision::kJoinPendingRequeue:
    case Redecision::kRecordOnly:
    case Redecision::kIgnore:
      break;
  }
  // Already stopping otherwise (a preemption, say: Slurm requeues a job whose node stopped
  // answering, with SIGTERM, before the daemons find that node lost): the lost node is still
  // an incident of the run, and a requeue does not come back to it (found by
  // bench/soak_slurm.py: lineage had no node_lost, and the requeue excluded nothing).
  std::string action = pending_ ? "already stopping [recovery: " + pending_->reason + "]" : "already stopping";
  if (redecision == Redecision::kJoinPendingRequeue) {
    std::vector<std::string>& ex = pending_->exclude_hosts;
    if (std::find(ex.begin(), ex.end(), host) == ex.end()) ex.push_back(host);
    action += "; the requeue excludes " + host;
  }
  spdlog::warn("action: {}", action);
  recorder_->Record(f.report.event, f.report.summary, std::move(action), {}, AtHost(host));
  if (static_cast<int>(exits_.size()) >= opts_.world_size) AfterAllStopped();
}

void RunController::ObserveSaves(int64_t now, const std::vector<RankView>& views) {
  int64_t committed = -1;
  int64_t least = -1;
  for (const RankView& v : views) {
    if (!v.progress.valid) continue;
    committed = std::max(committed, v.progress.checkpoint_step);
    if (v.alive && exits_.count(v.rank) == 0) least = least < 0 ? v.progress.step : std::min(least, v.progress.step);
  }
  if (committed > save_committed_) {
    // The save of `committed` began when the last rank finished that step:
    // after the last poll that saw one short of it.
    int64_t before_ns = -1;
    while (!steps_seen_.empty() && steps_seen_.front().first < committed) {
      before_ns = steps_seen_.front().second;
      steps_seen_.pop_front();
    }
    if (before_ns >= 0) measured_save_s_ = std::max(measured_save_s_, static_cast<double>(now - before_ns) / 1e9);
    save_committed_ = committed;
  }
  if (least < 0) return;
  if (!steps_seen_.empty() && steps_seen_.back().first == least) {
    steps_seen_.back().second = now;  // the last poll that saw it there
    return;
  }
  steps_seen_.emplace_back(least, now);
  if (steps_seen_.size() > 4096) steps_seen_.pop_front();  // a run that never saves
}

void RunController::NoteLeadTime(double lead_time_s) {
  if (lead_time_s < 0 || measured_save_s_ < 0 || lead_time_s >= measured_save_s_) return;
  char text[256];
  std::snprintf(text, sizeof(text),
                "the scheduler's lead time (%.0f s) is shorter than this run's measured checkpoint save (%.1f s): "
                "the final checkpoint may not commit; give the job more warning (sbatch --signal=B:USR1@N, "
                "KillWait) or save less state",
                lead_time_s, measured_save_s_);
  spdlog::warn("{}", text);
  recorder_->Record(event_kind::kPreempt, text, "warning");
}

void RunController::OnPreemptionWarning(const std::string& why, double lead_time_s) {
  if (state_ == State::kFinished) return;
  if (state_ != State::kRunning || deferred_preemption_) {
    // Between generations, stopping already, or a second warning while training on: now.
    OnStopRequest(IncidentKind::kPreemption, why);
    return;
  }
  const PreemptInputs in{lead_time_s, measured_save_s_, hang_.P99StepSeconds(), opts_.supervise.preempt_margin_s};
  const PreemptPlan plan = PlanPreemptStop(in);
  IncidentEvidence ev;
  ev.step = max_step_seen_;  // where the ranks were when the warning came
  if (lead_time_s >= 0) ev.lead_time_s = lead_time_s;
  if (measured_save_s_ >= 0) ev.save_s = measured_save_s_;
  if (plan.step_allowance_s > 0) ev.step_allowance_s = plan.step_allowance_s;
  ev.margin_s = in.margin_s;
  ev.save_in_s = plan.save_in_s;
  if (!plan.defer) {
    const std::string action = "checkpoint and stop now: " + plan.reason;
    spdlog::warn("{}: {}", why, action);
    recorder_->Record(event_kind::kPreempt, why, action, ev);
    OnStopRequest(IncidentKind::kPreemption, why);
    return;
  }
  spdlog::warn("{}: {}", why, plan.reason);
  recorder_->Record(event_kind::kPreempt, why, plan.reason, ev);
  deferred_preemption_ = why;
  deferred_for_s_ = plan.save_in_s;
  actions_->ArmTimer(ControllerTimer::kPreemptDeadline, plan.save_in_s);
}

void RunController::CancelPreemptDeadline() {
  if (!deferred_preemption_) return;
  deferred_preemption_.reset();
  actions_->CancelTimer(ControllerTimer::kPreemptDeadline);
}

void RunController::OnStopRequest(IncidentKind kind, const std::string& why) {
  if (state_ == State::kFinished) return;
  if (deferred_preemption_) spdlog::warn("{}: not waiting for the warning's deadline", why);
  CancelPreemptDeadline();  // a stop now supersedes the stop planned for later
  if (Redecide(kind, health::Action::kNone, false) == Redecision::kIgnore) return;  // already stopping for it
  Facts f;
  f.cause = kind;
  f.report.event = kind == IncidentKind::kPreemption ? event_kind::kPreempt : event_kind::kStop;
  f.report.summary = why;
  spdlog::warn("{}: asking the ranks to checkpoint and stop", why);
  if (state_ == State::kStopping) pending_.reset();  // an operator's stop overrides a restart
  HandleIncident(std::move(f), {});
}

void RunController::OnRoleIncident(const RoleIncident& r, const std::vector<RankView>& views) {
  if (state_ == State::kFinished) return;
  Facts f;
  f.cause = r.cause;
  f.report = r.report;
  f.context.runbook_of = r.runbook_of;
  const bool already_stopping = state_ == State::kStopping && pending_ && pending_->action == RecoveryAction::kStop;
  if (Redecide(r.cause, health::Action::kNone, /*from_role=*/true) == Redecision::kRecordOnly) {
    // The learner group is restarting or stopping already: the role process
    // restarts with it (or the run ends anyway). Recorded, nothing more to do.
    const std::string action = already_stopping
                                   ? "none: the run is stopping already"
                                   : "none: the learner group is restarting already; the process restarts with it";
    spdlog::warn("{}: {} -> {}", f.report.event, f.report.summary, action);
    recorder_->Record(f.report.event, f.report.summary, action, f.report.evidence, f.context);
    return;
  }
  spdlog::error("ROLE: {}", f.report.summary);
  if (state_ == State::kStopping) pending_.reset();  // a failed role overrides a restart
  HandleIncident(std::move(f), views);
}

Redecision RunController::Redecide(IncidentKind cause, health::Action health_action, bool from_role) const {
  ControllerPhase phase = ControllerPhase::kRunning;
  switch (state_) {
    case State::kIdle: phase = ControllerPhase::kIdle; break;
    case State::kRunning: phase = ControllerPhase::kRunning; break;
    case State::kStopping: phase = ControllerPhase::kStopping; break;
    case State::kBackoff: phase = ControllerPhase::kBackoff; break;
    case State::kFinished: phase = ControllerPhase::kStopping; break;  // (callers return before)
  }
  return RedecideFor(cause, health_action, from_role, phase, pending_ ? &*pending_ : nullptr);
}

void RunController::HandleIncident(Facts facts, const std::vector<RankView>& views) {
  RecoveryInput in;
  in.kind = facts.cause;
  in.hosts = facts.hosts;
  in.health_action = facts.health_action;
  in.host_incidents = recorder_->HostIncidents();
  // Blame and the run's bounds (recovery_policy.h): who the evidence names, and what lineage holds.
  in.all_ranks = facts.cause == IncidentKind::kHang &&
                 facts.report.culprits.size() >= static_cast<size_t>(std::max(1, opts_.world_size));
  if (facts.cause == IncidentKind::kCrash && facts.report.event == event_kind::kCrash && !facts.hosts.empty()) {
    in.failure = CrashFailureOf(facts.report.evidence, facts.hosts.front(), recorder_->attempt());
  }
  in.history = recorder_->History();
  in.max_requeues = opts_.supervise.max_requeues;
  in.max_excluded_nodes = opts_.supervise.max_excluded_nodes;
  in.restarts_used = restarts_used_;
  in.restart_budget = opts_.supervise.restart_budget;
  const bool ran = state_ == State::kRunning || state_ == State::kStopping;
  in.failures_without_progress = ran && Progressed(views) ? 0 : failures_without_progress_ + 1;
  in.backoff_initial_s = opts_.supervise.backoff_initial_s;
  in.backoff_max_s = opts_.supervise.backoff_max_s;
  in.caps = opts_.caps;
  if (opts_.min_nodes > 0) {
    in.elastic.active = actions_->ActiveHosts();
    in.elastic.spares = actions_->SpareHosts();
    in.elastic.min_nodes = opts_.min_nodes;
  }
  const RecoveryDecision d = DecideRecovery(in);

  const bool operator_stop = facts.cause == IncidentKind::kStopRequest || facts.cause == IncidentKind::kDaemonSignal;
  const bool preempt_action = facts.cause == IncidentKind::kPreemption;
  if (!operator_stop && !preempt_action) {
    EventContext at = facts.context;
    // The event's node is the host the incident counts against, and only when
    // the evidence names that one host (never "the first host" of many).
    if (at.host.empty() && d.credited_hosts.size() == 1) at.host = d.credited_hosts.front();
    if (d.bound == "job_failure") at.runbook = "runbooks/job-failure.md";
    if (d.bound == "max_requeues" || d.bound == "max_excluded_nodes") at.runbook = "runbooks/recovery-bounds.md";
    if (facts.report.culprits.size() == 1) at.rank = facts.report.culprits.front();
    const std::string action = ActionText(facts, d);
    spdlog::warn("action: {}", action);
    recorder_->Record(facts.report.event, facts.report.summary, action, facts.report.evidence, at);
  }
  if (ran && !operator_stop && !preempt_action) EndGeneration(RunState::kFailed, facts.report.summary);
  failures_without_progress_ = in.failures_without_progress;
  pending_facts_ = facts;
  pending_ = d;

  const bool any_running = state_ == State::kRunning || state_ == State::kStopping;
  if (!any_running || static_cast<int>(exits_.size()) >= opts_.world_size) {
    // Nothing runs (before a launch, between generations, or all ranks gone).
    actions_->CancelTimer(ControllerTimer::kRestart);
    state_ = State::kStopping;
    AfterAllStopped();
    return;
  }
  state_ = State::kStopping;
  if (facts.cause == IncidentKind::kHang && !facts.report.culprits.empty() &&
      facts.report.culprits.size() < static_cast<size_t>(opts_.world_size)) {
    // A hung culprit does not act on TERM: do not wait out the grace period for it.
    actions_->KillRanks(facts.report.culprits);
  }
  const double grace = d.checkpoint_first
                           ? std::max(opts_.supervise.term_grace_s, opts_.supervise.checkpoint_allowance_s)
                           : opts_.supervise.term_grace_s;
  actions_->TerminateRanks(facts.report.summary, grace);
  actions_->ArmTimer(ControllerTimer::kKillGrace, grace);
}

std::string RunController::ActionText(const Facts& facts, const RecoveryDecision& d) const {
  // "stopped all ranks; restart generation 2 from step 1200 [recovery: restart in place now (restart 1 of 3): ...]"
  std::string text = state_ == State::kRunning ? "stopped all ranks"
                     : state_ == State::kIdle  ? "did not launch"
                                               : "restart cancelled";
  if (d.action == RecoveryAction::kRestartInPlace || d.action == RecoveryAction::kContinueWithout) {
    // As the trainer chooses: the newest memory snapshot first, then the disk.
    const int64_t memory = actions_->NewestMemorySnapshot();
    const int64_t from = memory >= 0 ? memory : recorder_->NewestCommittedStep();
    text += "; restart generation " + std::to_string(generation_ + 1) + " from " +
            (from >= 0 ? "step " + std::to_string(from) : "the start");
    if (memory >= 0) {
      const std::string note = actions_->MemorySnapshotNote();
      text += " (memory snapshot" + (note.empty() ? "" : "; " + note) + ")";
    }
  }
  if (facts.cause == IncidentKind::kHealth) {
    text += std::string(" [health policy: ") + health::ActionName(facts.health_action) + "]";
  }
  return text + " [recovery: " + d.reason + "]";
}

void RunController::OnTimer(ControllerTimer timer) {
  if (timer == ControllerTimer::kPreemptDeadline) {
    if (!deferred_preemption_) return;
    char trained[96];
    std::snprintf(trained, sizeof(trained), " (trained on for %.1f s after the warning)", deferred_for_s_);
    const std::string why = *deferred_preemption_ + trained;
    deferred_preemption_.reset();
    OnStopRequest(IncidentKind::kPreemption, why);
    return;
  }
  if (timer == ControllerTimer::kKillGrace) {
    // Stopping, or running while ranks that did their peers' work are ended (CheckExitGrace).
    if (state_ != State::kStopping && (state_ != State::kRunning || ended_after_peers_.empty())) return;
    spdlog::warn("ranks did not stop within the grace period: SIGKILL");
    actions_->KillRanks({});
    return;
  }
  if (timer == ControllerTimer::kRestart && state_ == State::kBackoff) StartGeneration();
}

void RunController::AfterAllStopped() {
  if (state_ != State::kStopping || !pending_) return;
  actions_->CancelTimer(ControllerTimer::kKillGrace);
  Execute();
}

}  // namespace holdfast
