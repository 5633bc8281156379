#include "health/history_check.h"

#include "common/host_history.h"

namespace holdfast::health {

CheckResult CheckHostHistory(const HealthConfig& c, const std::string& host, int64_t now_ms) {
  const char* kName = "host.history";
  if (c.history_dir.empty()) return Skipped(kName, host, "no host history named (health.history_dir, --history-dir)");
  const HistoryRule rule{c.history_runs, c.history_window_days};
  Result<HostHistory> h = ReadHostHistory(c.history_dir, host);
  if (!h.ok()) return Skipped(kName, host, "cannot read the host history: " + h.status().message());
  const HostVerdict v = JudgeHost(*h, rule, now_ms);
  std::string message = VerdictText(host, v, rule);
  if (!h->skipped.empty()) {
    message += " (" + std::to_string(h->skipped.size()) + " unreadable file(s) skipped: " + h->skipped.front() + ")";
  }
  std::string runs;
  for (const std::string& r : v.runs) runs += (runs.empty() ? "" : ",") + r;
  Evidence e;
  e.measured = "in " + std::to_string(v.runs.size()) + " runs/" + FormatNumber(c.history_window_days) + "d" +
               (runs.empty() ? "" : ": " + runs);
  e.threshold = ">= " + std::to_string(c.history_runs) + " runs within " + FormatNumber(c.history_window_days) +
                " days";
  e.source = c.history_dir + "/" + host;
  if (!v.flagged) return Pass(kName, host, message, e);
  message += "; `runctl node " + host + " --history-dir " + c.history_dir + "` lists them";
  CheckResult r = c.history_action == HistoryAction::kRefuse ? Fail(kName, host, message, e, Action::kDrainNode)
                                                             : Warn(kName, host, message, e);
  r.runbook = "runbooks/host-history.md";
  return r;
}

}  // namespace holdfast::health
