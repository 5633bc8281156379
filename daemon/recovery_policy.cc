#include "daemon/recovery_policy.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <utility>

#include "common/launch_contract.h"
#include "daemon/exit_codes.h"

namespace holdfast {

const char* IncidentKindName(IncidentKind kind) {
  switch (kind) {
    case IncidentKind::kCrash: return "crash";
    case IncidentKind::kHang: return "hang";
    case IncidentKind::kBadInput: return "bad_input";
    case IncidentKind::kNodeLost: return "node_lost";
    case IncidentKind::kHealth: return "health";
    case IncidentKind::kStopRequest: return "stop_request";
    case IncidentKind::kDaemonSignal: return "daemon_signal";
    case IncidentKind::kPreemption: return "preemption";
    case IncidentKind::kRoleFailed: return "role_failed";
  }
  return "unknown";
}

const char* RecoveryActionName(RecoveryAction action) {
  switch (action) {
    case RecoveryAction::kRestartInPlace: return "restart";
    case RecoveryAction::kRequeueExcluding: return "requeue";
    case RecoveryAction::kDrainAndRequeue: return "drain_requeue";
    case RecoveryAction::kStop: return "stop";
    case RecoveryAction::kContinueWithout: return "continue_without";
  }
  return "unknown";
}

namespace {

// "gpu-a17" / "gpu-a17, gpu-a18".
std::string JoinHosts(const std::vector<std::string>& hosts) {
  std::string out;
  for (const std::string& h : hosts) {
    if (!out.empty()) out += ", ";
    out += h;
  }
  return out;
}

// The incident's hosts, in input order, without empty names or repeats.
std::vector<std::string> UniqueHosts(const std::vector<std::string>& hosts) {
  std::vector<std::string> out;
  for (const std::string& h : hosts) {
    if (!h.empty() && std::find(out.begin(), out.end(), h) == out.end()) out.push_back(h);
  }
  return out;
}

int EarlierIncidents(const RecoveryInput& in, const std::string& host) {
  const auto it = in.host_incidents.find(host);
  return it == in.host_incidents.end() ? 0 : it->second;
}

// The hosts the incident counts against (recovery_policy.h, "Blame").
std::vector<std::string> Credited(const RecoveryInput& in, const std::vector<std::string>& hosts) {
  switch (in.kind) {
    case IncidentKind::kCrash:
    case IncidentKind::kBadInput: return hosts.size() == 1 ? hosts : std::vector<std::string>{};
    case IncidentKind::kHang:
      return hosts.size() == 1 && !in.all_ranks ? hosts : std::vector<std::string>{};
    case IncidentKind::kNodeLost:
    case IncidentKind::kHealth: return hosts;
    default: return {};
  }
}

// The credited hosts that were implicated often enough before to leave.
std::vector<std::string> RepeatedHosts(const RecoveryInput& in, const std::vector<std::string>& hosts) {
  std::vector<std::string> out;
  for (const std::string& h : Credited(in, hosts)) {
    if (EarlierIncidents(in, h) >= in.repeat_threshold) out.push_back(h);
  }
  return out;
}

// "gpu-a17 implicated in 2 incidents of this run" (this one included).
std::string RepeatText(const RecoveryInput& in, const std::vector<std::string>& repeated) {
  std::string out;
  for (const std::string& h : repeated) {
    if (!out.empty()) out += ", ";
    out += h + " implicated in " + std::to_string(EarlierIncidents(in, h) + 1) + " incidents of this run";
  }
  return out;
}

// What happened, for the reason's tail: "crash on gpu-a17".
std::string Describe(const RecoveryInput& in, const std::vector<std::string>& hosts) {
  const std::string on = hosts.empty() ? std::string(" (no host implicated)") : " on " + JoinHosts(hosts);
  switch (in.kind) {
    case IncidentKind::kCrash: return "crash" + on;
    case IncidentKind::kHang: return "hang" + on;
    case IncidentKind::kBadInput: return "bad input" + on;
    case IncidentKind::kNodeLost:
      return hosts.empty() ? std::string("a node was lost (no host named)") : "lost node " + JoinHosts(hosts);
    case IncidentKind::kHealth:
      return std::string("health check asks for ") + health::ActionName(in.health_action) + on;
    case IncidentKind::kStopRequest:
      return hosts.empty() ? std::string("operator stop request") : "operator stop request on " + JoinHosts(hosts);
    case IncidentKind::kDaemonSignal:
      return hosts.empty() ? std::string("holdfastd received a fatal signal")
                           : "holdfastd received a fatal signal on " + JoinHosts(hosts);
    case IncidentKind::kPreemption:
      return hosts.empty() ? std::string("preemption (scheduler warning or time limit)")
                           : "preemption (scheduler warning or time limit) on " + JoinHosts(hosts);
    case IncidentKind::kRoleFailed:
      return hosts.empty() ? std::string("a role process cannot go on")
                           : "a role process cannot go on on " + JoinHosts(hosts);
  }
  return "unknown incident" + on;
}

// "(1 of 3 restarts used)": every reason carries the budget's state.
std::string BudgetText(const RecoveryInput& in) {
  return "(" + std::to_string(in.restarts_used) + " of " + std::to_string(in.restart_budget) + " restarts used)";
}

double Backoff(const RecoveryInput& in) {
  if (in.failures_without_progress <= 0) return 0;
  const double max_s = std::max(0.0, in.backoff_max_s);
  // ldexp saturates to inf on a large exponent; min() then takes the cap.
  const double raw = std::ldexp(std::max(0.0, in.backoff_initial_s), in.failures_without_progress - 1);
  return std::min(max_s, raw);
}

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", s);
  return buf;
}

RecoveryDecision Stop(StopOutcome outcome, bool checkpoint_first, std::string reason) {
  RecoveryDecision d;
  d.action = RecoveryAction::kStop;
  d.outcome = outcome;
  d.checkpoint_first = checkpoint_first;
  d.reason = std::move(reason);
  return d;
}

RecoveryDecision Requeue(std::vector<std::string> exclude, StopOutcome outcome, bool checkpoint_first,
                         std::string reason) {
  RecoveryDecision d;
  d.action = RecoveryAction::kRequeueExcluding;
  d.exclude_hosts = std::move(exclude);
  d.outcome = outcome;
  d.checkpoint_first = checkpoint_first;
  d.reason = std::move(reason);
  return d;
}

// "requeue excluding gpu-a17" / "requeue" (no host to keep out).
std::string RequeueText(const std::vector<std::string>& exclude) {
  return exclude.empty() ? std::string("requeue") : "requeue excluding " + JoinHosts(exclude);
}

// kCrash, kHang and a health check that asks for a restart: the node is
// presumed fine unless it was implicated before.
RecoveryDecision CrashLike(const RecoveryInput& in, const std::vector<std::string>& hosts) {
  const std::string what = Describe(in, hosts);
  const std::vector<std::string> repeated = RepeatedHosts(in, hosts);
  const bool can_exclude = in.caps.requeue && in.caps.exclude_hosts;
  if (!repeated.empty() && can_exclude) {
    return Requeue(repeated, StopOutcome::kFailed, false,
                   RequeueText(repeated) + ": " + what + "; " + RepeatText(in, repeated) + " " + BudgetText(in));
  }
  // A repeated host stays in the job: say so, so that the on-call person knows
  // why the same node keeps coming back.
  std::string stuck;
  if (!repeated.empty()) {
    stuck = "; " + RepeatText(in, repeated) + ", but this scheduler cannot " +
            (in.caps.requeue ? "exclude hosts" : "requeue the job");
  }
  if (in.restarts_used < in.restart_budget) {
    RecoveryDecision d;
    d.action = RecoveryAction::kRestartInPlace;
    d.consumes_restart = true;
    d.backoff_s = Backoff(in);
    d.outcome = StopOutcome::kFailed;
    d.reason = "restart in place " + (d.backoff_s > 0 ? "after " + Seconds(d.backoff_s) + " s" : std::string("now")) +
               " (restart " + std::to_string(in.restarts_used + 1) + " of " + std::to_string(in.restart_budget) +
               "): " + what + stuck;
    return d;
  }
  RecoveryDecision d = Stop(StopOutcome::kFailed, false,
                            "stop: " + what + " and the restart budget is spent " + BudgetText(in) + stuck);
  d.budget_exhausted = true;
  return d;
}

RecoveryDecision NodeLost(const RecoveryInput& in, const std::vector<std::string>& hosts) {
  const std::string what = Describe(in, hosts);
  if (in.caps.requeue && in.caps.exclude_hosts) {
    return Requeue(hosts, StopOutcome::kFailed, false, RequeueText(hosts) + ": " + what + " " + BudgetText(in));
  }
  if (in.caps.requeue) {
    std::string why = hosts.empty() ? std::string() : " (this scheduler cannot exclude " + JoinHosts(hosts) + ")";
    return Requeue({}, StopOutcome::kFailed, false, "requeue" + why + ": " + what + " " + BudgetText(in));
  }
  const std::string lost = hosts.empty() ? std::string("the lost node") : JoinHosts(hosts);
  return Stop(StopOutcome::kFailed, false,
              "stop: " + what + "; the run cannot continue without " + lost +
                  "; requeue it or runctl resume " + BudgetText(in));
}

// A health check asks the node(s) to leave the job (kExcludeNode), or to be
// taken out of service as well (kDrainNode).
RecoveryDecision HealthLeave(const RecoveryInput& in, const std::vector<std::string>& hosts) {
  const std::string what = Describe(in, hosts);
  const bool drain = in.health_action == health::Action::kDrainNode;
  if (hosts.empty()) {
    // Nothing to keep out: a fresh allocation is the best a requeue can do.
    if (in.caps.requeue) {
      return Requeue({}, StopOutcome::kFailed, false, "requeue: " + what + ", but no host was named to exclude " +
                                                          BudgetText(in));
    }
    return Stop(StopOutcome::kFailed, false,
                "stop: " + what + ", no host was named and this scheduler cannot requeue the job " + BudgetText(in));
  }
  if (drain && in.caps.drain && in.caps.requeue && in.caps.exclude_hosts) {
    RecoveryDecision d = Requeue(hosts, StopOutcome::kFailed, false,
                                 "drain " + JoinHosts(hosts) + " and requeue excluding " +
                                     (hosts.size() == 1 ? "it" : "them") + ": " + what + " " +
                                     BudgetText(in));
    d.action = RecoveryAction::kDrainAndRequeue;
    d.drain_hosts = hosts;
    return d;
  }
  if (in.caps.requeue && in.caps.exclude_hosts) {
    std::string note = drain ? "; " + JoinHosts(hosts) + " could not be drained (this scheduler cannot drain)" : "";
    return Requeue(hosts, StopOutcome::kFailed, false, RequeueText(hosts) + ": " + what + note + " " + BudgetText(in));
  }
  return Stop(StopOutcome::kFailed, false,
              "stop: " + what + "; " + JoinHosts(hosts) + " must leave the job, but this scheduler cannot " +
                  (in.caps.requeue ? "exclude hosts" : "requeue the job") + " " + BudgetText(in));
}

// The rules without elastic continuation.
RecoveryDecision Decide(const RecoveryInput& in, const std::vector<std::string>& hosts) {
  switch (in.kind) {
    case IncidentKind::kBadInput:
      return Stop(StopOutcome::kFailed, false,
                  "stop: " + Describe(in, hosts) + "; the same input would fail again " + BudgetText(in));
    case IncidentKind::kStopRequest:
    case IncidentKind::kDaemonSignal:
      return Stop(StopOutcome::kStopped, true,
                  "stop after a checkpoint: " + Describe(in, hosts) + " " + BudgetText(in));
    case IncidentKind::kPreemption:
      if (in.caps.requeue) {
        return Requeue({}, StopOutcome::kPreempted, true,
                       "requeue after a checkpoint: " + Describe(in, hosts) + " " + BudgetText(in));
      }
      return Stop(StopOutcome::kPreempted, true,
                  "stop after a checkpoint, to be resumed: " + Describe(in, hosts) +
                      "; this scheduler cannot requeue the job " + BudgetText(in));
    case IncidentKind::kNodeLost:
      return NodeLost(in, hosts);
    case IncidentKind::kRoleFailed:
      return Stop(StopOutcome::kFailed, true, "stop after a checkpoint: " + Describe(in, hosts) + " " + BudgetText(in));
    case IncidentKind::kHealth:
      if (in.health_action == health::Action::kExcludeNode || in.health_action == health::Action::kDrainNode) {
        return HealthLeave(in, hosts);
      }
      return CrashLike(in, hosts);  // kRestart (and kNone, which should not reach here)
    case IncidentKind::kCrash:
    case IncidentKind::kHang:
      return CrashLike(in, hosts);
  }
  return CrashLike(in, hosts);  // an out-of-range kind: the budget still bounds it
}

// The hosts an incident asks to leave the run, before the rules that requeue
// them away: a lost node, a health check's exclude/drain, a repeated host of a
// crash or hang (that a requeue would exclude).
std::vector<std::string> LeavingHosts(const RecoveryInput& in, const std::vector<std::string>& hosts) {
  switch (in.kind) {
    case IncidentKind::kNodeLost: return hosts;
    case IncidentKind::kHealth:
      if (in.health_action == health::Action::kExcludeNode || in.health_action == health::Action::kDrainNode) {
        return hosts;
      }
      return RepeatedHosts(in, hosts);
    case IncidentKind::kCrash:
    case IncidentKind::kHang: return RepeatedHosts(in, hosts);
    default: return {};
  }
}

// An elastic run goes on without the leaving hosts (spares first) when at
// least min_nodes remain; nullopt when it cannot, with *short_note saying why.
std::optional<RecoveryDecision> ContinueWithout(const RecoveryInput& in, const std::vector<std::string>& hosts,
                                                std::string* short_note) {
  const RecoveryInput::Elastic& e = in.elastic;
  if (e.min_nodes <= 0) return std::nullopt;
  std::vector<std::string> leaving;
  for (const std::string& h : LeavingHosts(in, hosts)) {
    if (std::find(e.active.begin(), e.active.end(), h) != e.active.end()) leaving.push_back(h);
  }
  if (leaving.empty()) return std::nullopt;
  std::vector<std::string> spares;
  for (const std::string& s : e.spares) {
    if (spares.size() < leaving.size() && std::find(leaving.begin(), leaving.end(), s) == leaving.end()) {
      spares.push_back(s);
    }
  }
  const int left = static_cast<int>(e.active.size() - leaving.size() + spares.size());
  if (left < std::max(1, e.min_nodes)) {
    *short_note = " (min_nodes " + std::to_string(e.min_nodes) + ": only " + std::to_string(left) +
                  " would be left)";
    return std::nullopt;
  }
  RecoveryDecision d;
  d.action = RecoveryAction::kContinueWithout;
  d.exclude_hosts = leaving;
  d.replacement_hosts = spares;
  if (in.kind == IncidentKind::kHealth && in.health_action == health::Action::kDrainNode && in.caps.drain) {
    d.drain_hosts = leaving;
  }
  d.outcome = StopOutcome::kFailed;
  std::string how = spares.empty() ? std::string() : ", " + JoinHosts(spares) + " taking over";
  d.reason = "continue without " + JoinHosts(leaving) + how + " on " + std::to_string(left) + " of " +
             std::to_string(e.active.size()) + " nodes (min_nodes " + std::to_string(e.min_nodes) +
             "), from the newest checkpoint: " + Describe(in, hosts);
  const std::vector<std::string> repeated = RepeatedHosts(in, hosts);
  if (in.kind != IncidentKind::kNodeLost && !repeated.empty()) d.reason += "; " + RepeatText(in, repeated);
  d.reason += " " + BudgetText(in);
  return d;
}

RecoveryDecision WithNote(RecoveryDecision d, const std::string& note) {
  if (note.empty()) return d;
  const size_t colon = d.reason.find(": ");
  if (colon == std::string::npos) {
    d.reason += note;
  } else {
    d.reason.insert(colon, note);
  }
  return d;
}

// The same crash on another host than an earlier one: the job's failure.
std::optional<RecoveryDecision> JobFailure(const RecoveryInput& in) {
  if (in.kind != IncidentKind::kCrash || !in.failure || in.failure->host.empty() || in.failure->step < 0) {
    return std::nullopt;
  }
  const FailureRecord& now = *in.failure;
  for (const FailureRecord& e : in.history.failures) {
    if (e.host.empty() || e.host == now.host || !SameFailure(e, now)) continue;
    const std::string step = std::to_string(now.step);
    RecoveryDecision d = Stop(StopOutcome::kFailed, false,
                              "stop: the job fails at step " + step + " wherever it runs: " + DescribeFailure(now) +
                                  " at step " + step + " on " + now.host + ", as on " + e.host + " (attempt " +
                                  std::to_string(e.attempt) + "); no host is excluded " + BudgetText(in));
    d.bound = "job_failure";
    return d;
  }
  return std::nullopt;
}

// A requeue after a failure, past a bound of the run, becomes a stop naming it.
RecoveryDecision Bounded(const RecoveryInput& in, const std::vector<std::string>& hosts, RecoveryDecision d) {
  const bool requeue = d.action == RecoveryAction::kRequeueExcluding || d.action == RecoveryAction::kDrainAndRequeue;
  if (!requeue || in.kind == IncidentKind::kPreemption) return d;
  const std::string what = Describe(in, hosts);
  if (in.history.requeues >= in.max_requeues) {
    RecoveryDecision s = Stop(StopOutcome::kFailed, false,
                              "stop: max_requeues reached (" + std::to_string(in.history.requeues) + " of " +
                                  std::to_string(std::max(0, in.max_requeues)) +
                                  " requeues after failures used): " + what + "; instead of: " + d.reason);
    s.bound = "max_requeues";
    return s;
  }
  const std::vector<std::string> before = UniqueHosts(in.history.excluded_hosts);
  std::vector<std::string> fresh;
  for (const std::string& h : d.exclude_hosts) {
    if (std::find(before.begin(), before.end(), h) == before.end()) fresh.push_back(h);
  }
  if (fresh.empty() || static_cast<int>(before.size() + fresh.size()) <= in.max_excluded_nodes) return d;
  RecoveryDecision s = Stop(StopOutcome::kFailed, false,
                            "stop: max_excluded_nodes reached (" +
                                (before.empty() ? std::string("none excluded yet") : JoinHosts(before) + " excluded") +
                                ", at most " + std::to_string(std::max(0, in.max_excluded_nodes)) + "; " +
                                JoinHosts(fresh) + " would be " + std::to_string(fresh.size()) + " more): " + what +
                                "; instead of: " + d.reason);
  s.bound = "max_excluded_nodes";
  return s;
}

}  // namespace

bool SameFailure(const FailureRecord& a, const FailureRecord& b) {
  // SIGKILL and SIGTERM come from outside the process (the OOM killer, an
  // operator, a scheduler, a test): they tell nothing of the job's own code.
  if (a.signal == SIGKILL || a.signal == SIGTERM) return false;
  return a.step >= 0 && a.step == b.step && a.exit_code == b.exit_code && a.signal == b.signal;
}

std::string DescribeFailure(const FailureRecord& f) {
  if (f.signal > 0) {
    const char* name = sigabbrev_np(f.signal);
    return "signal " + std::to_string(f.signal) + (name != nullptr ? std::string(" (SIG") + name + ")" : "");
  }
  return "exit code " + std::to_string(f.exit_code);
}

std::vector<std::string> CreditedHosts(const RecoveryInput& in) { return Credited(in, UniqueHosts(in.hosts)); }

RecoveryDecision DecideRecovery(const RecoveryInput& in) {
  if (std::optional<RecoveryDecision> d = JobFailure(in)) return *d;  // the job's: no host is credited
  const std::vector<std::string> hosts = UniqueHosts(in.hosts);
  std::string short_note;
  RecoveryDecision d;
  if (std::optional<RecoveryDecision> c = ContinueWithout(in, hosts, &short_note)) {
    d = *c;
  } else {
    d = Bounded(in, hosts, WithNote(Decide(in, hosts), short_note));
  }
  d.credited_hosts = Credited(in, hosts);
  return d;
}

// ---- exits ----

bool ExitedWithCode(int wstatus, int code) { return WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == code; }

bool IsExecFailureStatus(int wstatus) {
  return WIFEXITED(wstatus) && (WEXITSTATUS(wstatus) == 126 || WEXITSTATUS(wstatus) == 127);
}

ExitClass ClassifyExit(int wstatus, const std::string& exec_error) {
  if (!exec_error.empty() || IsExecFailureStatus(wstatus)) return ExitClass::kNotExecuted;
  if (ExitedWithCode(wstatus, kRankExitOk)) return ExitClass::kClean;
  if (ExitedWithCode(wstatus, kRankExitPreempted)) return ExitClass::kCheckpointed;
  if (ExitedWithCode(wstatus, kRankExitUsage)) return ExitClass::kBadInput;
  return ExitClass::kCrash;
}

const char* ExitClassName(ExitClass c) {
  switch (c) {
    case ExitClass::kClean: return "clean";
    case ExitClass::kCheckpointed: return "checkpointed";
    case ExitClass::kBadInput: return "bad_input";
    case ExitClass::kNotExecuted: return "not_executed";
    case ExitClass::kCrash: return "crash";
  }
  return "crash";
}

// ---- the end of a stopped run ----

bool RanksCommitted(const std::vector<ExitClass>& exits) {
  if (exits.empty()) return false;
  for (ExitClass c : exits) {
    if (c != ExitClass::kClean && c != ExitClass::kCheckpointed) return false;
  }
  return true;
}

RunEnd EndOfStoppedRun(IncidentKind cause, StopOutcome decided, bool ranks_committed) {
  switch (cause) {
    case IncidentKind::kStopRequest:
    case IncidentKind::kDaemonSignal:
      return {StopOutcome::kStopped, ranks_committed ? kDaemonExitPreempted : kDaemonExitStopped};
    case IncidentKind::kPreemption: return {StopOutcome::kPreempted, kDaemonExitPreempted};
    case IncidentKind::kBadInput: return {decided, kDaemonExitUsage};
    default: return {decided, kDaemonExitFailed};
  }
}

// ---- incidents while a decision is carried out ----

const char* RedecisionName(Redecision r) {
  switch (r) {
    case Redecision::kDecide: return "decide";
    case Redecision::kDecideWithPending: return "decide_with_pending";
    case Redecision::kJoinPendingRequeue: return "join_pending_requeue";
    case Redecision::kRecordOnly: return "record_only";
    case Redecision::kIgnore: return "ignore";
  }
  return "decide";
}

Redecision RedecideFor(IncidentKind incoming, health::Action health_action, bool from_role, ControllerPhase phase,
                       const RecoveryDecision* pending) {
  const bool stopping = phase == ControllerPhase::kStopping;
  const bool stopping_to_stop = stopping && pending != nullptr && pending->action == RecoveryAction::kStop;
  if (from_role) {
    if (incoming == IncidentKind::kRoleFailed) return stopping_to_stop ? Redecision::kRecordOnly : Redecision::kDecide;
    if (phase != ControllerPhase::kRunning || stopping_to_stop) return Redecision::kRecordOnly;
    return Redecision::kDecide;
  }
  switch (incoming) {
    case IncidentKind::kNodeLost:
      if (!stopping) return Redecision::kDecide;
      if (pending == nullptr) return Redecision::kRecordOnly;
      switch (pending->action) {
        case RecoveryAction::kRestartInPlace: return Redecision::kDecide;
        case RecoveryAction::kContinueWithout: return Redecision::kDecideWithPending;
        case RecoveryAction::kRequeueExcluding:
        case RecoveryAction::kDrainAndRequeue: return Redecision::kJoinPendingRequeue;
        case RecoveryAction::kStop: return Redecision::kRecordOnly;
      }
      return Redecision::kRecordOnly;
    case IncidentKind::kHealth:
      if (stopping) return Redecision::kIgnore;
      if ((phase == ControllerPhase::kIdle || phase == ControllerPhase::kBackoff) &&
          (health_action == health::Action::kRestart || health_action == health::Action::kNone)) {
        return Redecision::kIgnore;
      }
      return Redecision::kDecide;
    case IncidentKind::kStopRequest:
    case IncidentKind::kPreemption:
    case IncidentKind::kDaemonSignal:
      if (stopping && pending != nullptr && pending->checkpoint_first) return Redecision::kIgnore;
      return Redecision::kDecide;
    default: return Redecision::kDecide;
  }
}

}  // namespace holdfast
