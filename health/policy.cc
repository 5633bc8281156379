#include "health/policy.h"

#include <algorithm>

namespace holdfast::health {

Action ActionFor(const CheckResult& result, const PolicyConfig& policy) {
  switch (result.status) {
    case CheckStatus::kPass: return Action::kNone;
    case CheckStatus::kSkipped: return policy.on_skipped;
    case CheckStatus::kWarn: return policy.on_warn;
    case CheckStatus::kFail: {
      auto it = policy.fail_actions.find(result.name);
      Action a = it != policy.fail_actions.end() ? it->second : result.action;
      // A failed check always asks for something: a failure nobody acts on is a silent one.
      return std::max(a, Action::kRestart);
    }
  }
  return Action::kNone;
}

Decision Decide(const std::vector<CheckResult>& results, const PolicyConfig& policy) {
  Decision d;
  for (const CheckResult& r : results) d.action = std::max(d.action, ActionFor(r, policy));
  if (d.action == Action::kNone) return d;
  for (const CheckResult& r : results) {
    if (ActionFor(r, policy) == d.action) d.causes.push_back(r);
  }
  // The reason lists the causes as failures even when a warning or skip caused the action.
  std::vector<CheckResult> as_failed = d.causes;
  for (CheckResult& r : as_failed) r.status = CheckStatus::kFail;
  d.reason = std::string(ActionName(d.action)) + ": " + DrainReason(as_failed, 200).substr(std::string("holdfast: ").size());
  return d;
}

}  // namespace holdfast::health
