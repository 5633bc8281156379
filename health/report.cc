#include "health/report.h"

#include <nlohmann/json.hpp>

namespace holdfast::health {
namespace {

using nlohmann::json;

json ToObject(const CheckResult& r) {
  return json{{"name", r.name},
              {"subject", r.subject},
              {"status", CheckStatusName(r.status)},
              {"message", r.message},
              {"action", ActionName(r.action)},
              {"runbook", r.runbook},
              {"evidence",
               {{"measured", r.evidence.measured},
                {"threshold", r.evidence.threshold},
                {"source", r.evidence.source}}}};
}

Result<CheckResult> FromObject(const json& j) {
  if (!j.is_object()) return InvalidArgumentError("health result JSON: expected an object");
  auto str = [&](const json& o, const char* key) -> std::string {
    auto it = o.find(key);
    return it != o.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  CheckResult r;
  r.name = str(j, "name");
  if (r.name.empty()) return InvalidArgumentError("health result JSON: missing 'name'");
  r.subject = str(j, "subject");
  r.message = str(j, "message");
  r.runbook = str(j, "runbook");
  const std::string status = str(j, "status");
  bool found = false;
  for (CheckStatus s : {CheckStatus::kPass, CheckStatus::kWarn, CheckStatus::kFail, CheckStatus::kSkipped}) {
    if (status == CheckStatusName(s)) {
      r.status = s;
      found = true;
    }
  }
  if (!found) return InvalidArgumentError("health result JSON: unknown status '" + status + "'");
  HF_ASSIGN_OR_RETURN(r.action, ParseAction(str(j, "action"), "health result JSON 'action'"));
  auto ev = j.find("evidence");
  if (ev != j.end() && ev->is_object()) {
    r.evidence.measured = str(*ev, "measured");
    r.evidence.threshold = str(*ev, "threshold");
    r.evidence.source = str(*ev, "source");
  }
  return r;
}

Result<json> Parse(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgumentError("health result JSON: not valid JSON");
  return j;
}

}  // namespace

std::string ResultToJson(const CheckResult& result) { return ToObject(result).dump(); }

std::string ReportToJson(const std::vector<CheckResult>& results, const Decision& decision) {
  json arr = json::array();
  for (const CheckResult& r : results) arr.push_back(ToObject(r));
  std::vector<std::string> causes;
  for (const CheckResult& c : decision.causes) causes.push_back(c.name + (c.subject.empty() ? "" : " " + c.subject));
  json j{{"status", CheckStatusName(WorstStatus(results))},
         {"decision", {{"action", ActionName(decision.action)}, {"reason", decision.reason}, {"causes", causes}}},
         {"drain_reason", DrainReason(results)},
         {"results", arr}};
  return j.dump(2);
}

Result<CheckResult> ResultFromJson(const std::string& text) {
  HF_ASSIGN_OR_RETURN(json j, Parse(text));
  return FromObject(j);
}

Result<std::vector<CheckResult>> ResultsFromReportJson(const std::string& text) {
  HF_ASSIGN_OR_RETURN(json j, Parse(text));
  if (!j.is_object() || !j.contains("results") || !j["results"].is_array()) {
    return InvalidArgumentError("health report JSON: missing 'results' array");
  }
  std::vector<CheckResult> out;
  for (const json& e : j["results"]) {
    HF_ASSIGN_OR_RETURN(CheckResult r, FromObject(e));
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace holdfast::health
