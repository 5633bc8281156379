#include "daemon/role_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "daemon/recovery_policy.h"

namespace holdfast {

const char* RoleActionName(RoleAction action) {
  switch (action) {
    case RoleAction::kFinished: return "finished";
    case RoleAction::kRestartAlone: return "restart_alone";
    case RoleAction::kRestartLearner: return "restart_learner";
    case RoleAction::kStopRun: return "stop_run";
  }
  return "unknown";
}

namespace {

double Backoff(const RoleFailureInput& in) {
  if (in.failures_without_progress <= 0) return 0;
  const double raw = std::ldexp(std::max(0.0, in.backoff_initial_s), in.failures_without_progress - 1);
  return std::min(std::max(0.0, in.backoff_max_s), raw);
}

}  // namespace

RoleDecision DecideRoleFailure(const RoleFailureInput& in) {
  RoleDecision d;
  const ExitClass exit = in.hung ? ExitClass::kCrash : ClassifyExit(in.wstatus, "");
  if (exit == ExitClass::kClean) {
    d.action = RoleAction::kFinished;
    d.reason = "finished (exit 0): not restarted";
    return d;
  }
  if (exit == ExitClass::kBadInput || exit == ExitClass::kNotExecuted) {
    d.action = RoleAction::kStopRun;
    d.bad_input = true;
    d.reason = exit == ExitClass::kBadInput
                   ? "stop the run: bad config, flag or data (exit 2): a restart cannot help"
                   : "stop the run: its command could not be executed: a restart cannot help";
    return d;
  }
  if (in.restart == RoleRestart::kLearner) {
    d.action = RoleAction::kRestartLearner;
    d.reason = "restart the learner group with it (restart = \"learner\")";
    return d;
  }
  const std::string budget = std::to_string(in.restart_budget);
  if (in.restarts_used >= in.restart_budget) {
    d.action = RoleAction::kStopRun;
    d.budget_exhausted = true;
    d.reason = "stop the run: the role's restart budget is spent (" + std::to_string(in.restarts_used) + " of " +
               budget + " restarts used)";
    return d;
  }
  d.action = RoleAction::kRestartAlone;
  d.backoff_s = Backoff(in);
  char after[48] = "now";
  if (d.backoff_s > 0) std::snprintf(after, sizeof(after), "after %.2f s", d.backoff_s);
  d.reason = std::string("restart alone ") + after + " (restart " + std::to_string(in.restarts_used + 1) + " of " +
             budget + ")";
  return d;
}

std::vector<size_t> BlameRolesForLearnerStall(const std::vector<RoleStallObservation>& roles,
                                              double learner_stalled_s) {
  std::vector<size_t> stopped, silent;
  for (size_t i = 0; i < roles.size(); ++i) {
    const RoleStallObservation& r = roles[i];
    if (!r.running) continue;
    if (r.stopped) {
      stopped.push_back(i);
    } else if (r.attached && learner_stalled_s > 0 && r.silent_s >= learner_stalled_s) {
      silent.push_back(i);
    }
  }
  return stopped.empty() ? silent : stopped;
}

RoleHangWatch::Verdict RoleHangWatch::Observe(int64_t now_ns, const RankProgress& p) {
  Verdict v;
  v.attached = p.attached();
  if (v.attached && !p.torn) {
    const RankProgress& r = p;
    if (!seen_ || r.heartbeat_ns != heartbeat_ || r.step != step_ || r.phase != phase_) {
      last_activity_ns_ = now_ns;  // attaching counts too: the startup allowance ends here
      seen_ = true;
      heartbeat_ = r.heartbeat_ns;
      step_ = r.step;
      phase_ = r.phase;
    }
  }
  v.silent_s = std::max(0.0, static_cast<double>(now_ns - last_activity_ns_) / 1e9);
  v.timeout_s = seen_ ? hang_s_ : std::max(hang_s_, startup_s_);
  v.hung = hang_s_ > 0 && v.silent_s >= v.timeout_s;
  last_ = v;
  return v;
}

}  // namespace holdfast
