// The health policy: a pure, deterministic function from check results to the
// one action the daemon takes (none < restart < exclude node < drain node).
//
//   fail     -> the check's suggested action, or the [health.fail_actions]
//               override for its name; never less than restart
//   warn     -> policy.on_warn (default none)
//   skipped  -> policy.on_skipped (default none)
//   pass     -> none
// The decision is the largest; its causes are the results that asked for it,
// in input order. Same input, same output: no clock, no state.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "health/check.h"
#include "health/config.h"

namespace holdfast::health {

struct Decision {
  Action action = Action::kNone;
  std::vector<CheckResult> causes;  // the results that asked for `action` (empty for kNone)
  std::string reason;               // one line, DrainReason-style; empty for kNone
};

// The action one result asks for under `policy`.
Action ActionFor(const CheckResult& result, const PolicyConfig& policy);

Decision Decide(const std::vector<CheckResult>& results, const PolicyConfig& policy);

}  // namespace holdfast::health
