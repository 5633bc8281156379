// RunController, second half: carrying out what the recovery policy decided
// once every rank of the generation has exited (restart after the backoff,
// drain and requeue, or stop with the right final state), and the end of a run.
#include <spdlog/spdlog.h>

#include "daemon/exit_codes.h"
#include "daemon/run_controller.h"
#include "lineage/incident.h"

namespace holdfast {
namespace {

std::string JoinedHosts(const std::vector<std::string>& hosts) {
  std::string out;
  for (const std::string& h : hosts) out += (out.empty() ? "" : ", ") + h;
  return out;
}

// Drains each host on the way out, recording each drain (or why it failed) as
// an event of `kind`.
void DrainHosts(const std::vector<std::string>& hosts, const std::string& why, const char* kind,
                const char* if_failed, RunActions* actions, RunRecorder* recorder) {
  for (const std::string& host : hosts) {
    Status s = actions->Drain(host, why);
    // A drain on the way out needs no guide: the run goes on.
    recorder->Record(kind, s.ok() ? "drained " + host + ": " + why : "could not drain " + host + ": " + s.message(),
                     s.ok() ? "drain" : if_failed, {}, WithoutRunbook(host));
  }
}

RunState StateFor(StopOutcome o) {
  switch (o) {
    case StopOutcome::kFailed: return RunState::kFailed;
    case StopOutcome::kStopped: return RunState::kStopped;
    case StopOutcome::kPreempted: return RunState::kPreempted;
  }
  return RunState::kFailed;
}

}  // namespace

void RunController::Execute() {
  const RecoveryDecision d = *pending_;
  const Facts facts = *pending_facts_;
  const std::string& why = facts.report.summary;
  switch (d.action) {
    case RecoveryAction::kRestartInPlace: {
      ++restarts_used_;
      state_ = State::kBackoff;
      spdlog::info("restarting in {:.2f} s (restart {} of {})", d.backoff_s, restarts_used_,
                   opts_.supervise.restart_budget);
      actions_->ArmTimer(ControllerTimer::kRestart, d.backoff_s);
      return;
    }
    case RecoveryAction::kRequeueExcluding:
    case RecoveryAction::kDrainAndRequeue: {
      DrainHosts(d.drain_hosts, why, event_kind::kRequeue, "requeue without draining", actions_, recorder_);
      if (facts.cause == IncidentKind::kPreemption) {
        recorder_->Record(event_kind::kPreempt, why, "requeue");
        EndGeneration(RunState::kPreempted, why);
      }
      Status s = actions_->Requeue(d.exclude_hosts, why);
      if (!s.ok()) {
        recorder_->Record(event_kind::kRequeue, "requeue failed: " + s.message(),
                          "stopped the run; resume it with `runctl resume " + recorder_->run_id() +
                              "` once the scheduler answers");
        FinishRun(RunState::kFailed, "requeue failed (" + s.message() + "); " + why, kDaemonExitFailed);
        return;
      }
      std::string action = "requeued" + (d.exclude_hosts.empty() ? std::string() : " excluding " + [&] {
        std::string h;
        for (const auto& x : d.exclude_hosts) h += (h.empty() ? "" : ",") + x;
        return h;
      }());
      if (const std::string note = actions_->RequeueNote(); !note.empty()) action += " (" + note + ")";
      recorder_->Record(event_kind::kRequeue, d.reason, std::move(action),
                        RequeueEvidence(d.exclude_hosts, facts.cause != IncidentKind::kPreemption),
                        WithoutRunbook());  // done: no guide
      // The attempt ends as the policy says; the run stays resumable for the next one.
      recorder_->EndAttempt(StateFor(d.outcome), why);
      FinishRun(RunState::kPreempted, "requeued: " + d.reason, kDaemonExitPreempted);
      return;
    }
    case RecoveryAction::kContinueWithout: {
      DrainHosts(d.drain_hosts, why, event_kind::kReshard, "continue without draining", actions_, recorder_);
      const int before = opts_.world_size;
      Result<int> world = actions_->Reshape(d.exclude_hosts, d.replacement_hosts);
      if (!world.ok()) {
        const std::string cause = "could not go on without " + JoinedHosts(d.exclude_hosts) + ": " +
                                  world.status().message() + "; " + why;
        recorder_->Record(event_kind::kReshard, cause,
                          "stopped the run; resume it with `runctl resume " + recorder_->run_id() + "`");
        FinishRun(RunState::kFailed, cause, kDaemonExitFailed);
        return;
      }
      opts_.world_size = *world;
      const std::string summary = "world size " + std::to_string(before) + " -> " + std::to_string(*world) +
                                  ": without " + JoinedHosts(d.exclude_hosts) +
                                  (d.replacement_hosts.empty() ? "" : ", with " + JoinedHosts(d.replacement_hosts)) +
                                  "; " + why;
      IncidentEvidence evidence;
      evidence.world_size_before = before;
      evidence.world_size_after = *world;
      evidence.left = d.exclude_hosts;
      evidence.joined = d.replacement_hosts;
      evidence.nodes = actions_->ActiveHosts();
      const int64_t from = recorder_->NewestCommittedStep();
      recorder_->Record(event_kind::kReshard, summary,
                        "restart generation " + std::to_string(generation_ + 1) + " on " +
                            std::to_string(actions_->ActiveHosts().size()) + " nodes from " +
                            (from >= 0 ? "step " + std::to_string(from) : "the start") +
                            " (the trainer reshards the checkpoint) [recovery: " + d.reason + "]",
                        evidence, AtHost(d.exclude_hosts.front()));
      spdlog::warn("RESHARD: {}", summary);
      state_ = State::kBackoff;
      actions_->ArmTimer(ControllerTimer::kRestart, 0);
      return;
    }
    case RecoveryAction::kStop: break;
  }
  // Stop. Did every rank commit a final checkpoint on its way out?
  std::vector<ExitClass> exits;
  for (const auto& [r, s] : exits_) exits.push_back(ClassifyExit(s, ""));
  const bool all_committed = RanksCommitted(exits);
  const RunEnd end = EndOfStoppedRun(facts.cause, d.outcome, all_committed);
  const std::string resume = "stopped; resume with `runctl resume " + recorder_->run_id() + "`";
  std::string cause = why;
  if (facts.cause == IncidentKind::kStopRequest || facts.cause == IncidentKind::kDaemonSignal) {
    if (all_committed) cause += "; the ranks committed step " + std::to_string(recorder_->last_committed_step()) + " first";
    EndGeneration(StateFor(end.outcome), cause);
    // A daemon stopped by a signal did not choose to stop: on-call reads the crash guide.
    EventContext at;
    if (facts.cause == IncidentKind::kDaemonSignal) at.runbook_of = event_kind::kCrash;
    recorder_->Record(event_kind::kStop, cause, resume, {}, at);
  } else if (facts.cause == IncidentKind::kPreemption) {
    EndGeneration(StateFor(end.outcome), why);
    recorder_->Record(event_kind::kPreempt, why, resume);
  } else if (!d.bound.empty()) {
    // The job's own failure, or a bound of the run: the cause says which (the incident's event has the guide).
    cause = (d.reason.rfind("stop: ", 0) == 0 ? d.reason.substr(6) : d.reason) + "; last incident: " + why;
  } else if (d.budget_exhausted && facts.cause != IncidentKind::kRoleFailed) {
    cause = "restart budget of " + std::to_string(opts_.supervise.restart_budget) + " exhausted; last incident: " + why;
    recorder_->Record(event_kind::kBudgetExhausted, cause, "stopped the run");
  }
  // (A role failure's event, budget_exhausted or role_crash, was recorded with the incident.)
  FinishRun(StateFor(end.outcome), cause, end.exit_code);
}

void RunController::EndGeneration(RunState state, const std::string& cause) {
  recorder_->UpdateStep(max_step_seen_, /*force=*/true);  // where it ended, not where it was last sampled
  recorder_->EndGeneration(state, cause);
}

void RunController::FinishRun(RunState state, const std::string& cause, int code) {
  if (state_ == State::kFinished) return;
  state_ = State::kFinished;
  exit_code_ = code;
  actions_->CancelTimer(ControllerTimer::kKillGrace);
  actions_->CancelTimer(ControllerTimer::kRestart);
  CancelPreemptDeadline();
  recorder_->EndRun(state, cause);
  spdlog::info("run {} {}{}{}", recorder_->run_id(), RunStateName(state), cause.empty() ? "" : ": ", cause);
  actions_->Finish(code);
}

// ---- exits (judged one by one in run_controller.cc: JudgeExit) ----

void RunController::OnRankExit(const RankExit& e, const std::vector<RankView>& views) { OnRankExits({e}, views); }

void RunController::OnRankExits(const std::vector<RankExit>& exits, const std::vector<RankView>& views) {
  if (exits.empty()) return;
  if (state_ == State::kRunning || state_ == State::kStopping) {
    // A save that failed (or committed) just before the exits is recorded before what follows them.
    recorder_->ObserveCheckpoints(views, opts_.world_size);
    max_step_seen_ = NewestStep(views, max_step_seen_);
  }
  for (const RankExit& e : exits) {
    if (state_ == State::kFinished) return;
    JudgeExit(e, views);
  }
}

}  // namespace holdfast
