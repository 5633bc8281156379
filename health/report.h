// JSON form of health results: what `holdfast-health --json` prints, what the
// daemon stores in lineage as a check's evidence, and what `runctl triage`
// reads back. Stable field names:
//   {"status": "fail", "decision": {"action": "exclude_node", "reason": "..."},
//    "results": [{"name", "subject", "status", "message", "action", "runbook",
//                 "evidence": {"measured", "threshold", "source"}}]}
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "health/check.h"
#include "health/policy.h"

namespace holdfast::health {

// One result as a JSON object (lineage stores these one per row).
std::string ResultToJson(const CheckResult& result);
// The whole report, with the policy's decision.
std::string ReportToJson(const std::vector<CheckResult>& results, const Decision& decision);
// Reads ResultToJson's object or ReportToJson's "results" back.
Result<CheckResult> ResultFromJson(const std::string& json);
Result<std::vector<CheckResult>> ResultsFromReportJson(const std::string& json);

}  // namespace holdfast::health
