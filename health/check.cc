#include "health/check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace holdfast::health {

const char* CheckStatusName(CheckStatus status) {
  switch (status) {
    case CheckStatus::kPass: return "pass";
    case CheckStatus::kWarn: return "warn";
    case CheckStatus::kFail: return "fail";
    case CheckStatus::kSkipped: return "skipped";
  }
  return "?";
}

const char* ActionName(Action action) {
  switch (action) {
    case Action::kNone: return "none";
    case Action::kRestart: return "restart";
    case Action::kExcludeNode: return "exclude_node";
    case Action::kDrainNode: return "drain_node";
  }
  return "?";
}

Result<Action> ParseAction(const std::string& text, const std::string& where) {
  for (Action a : {Action::kNone, Action::kRestart, Action::kExcludeNode, Action::kDrainNode}) {
    if (text == ActionName(a)) return a;
  }
  return InvalidArgumentError(where + ": unknown action '" + text +
                              "' (known actions: none, restart, exclude_node, drain_node)");
}

std::string CheckResult::Class() const { return name.substr(0, name.find('.')); }

CheckResult Pass(std::string name, std::string subject, std::string message, Evidence evidence) {
  CheckResult r;
  r.name = std::move(name);
  r.subject = std::move(subject);
  r.status = CheckStatus::kPass;
  r.message = std::move(message);
  r.evidence = std::move(evidence);
  return r;
}

CheckResult Warn(std::string name, std::string subject, std::string message, Evidence evidence) {
  CheckResult r = Pass(std::move(name), std::move(subject), std::move(message), std::move(evidence));
  r.status = CheckStatus::kWarn;
  r.runbook = "runbooks/health-" + r.Class() + ".md";
  return r;
}

CheckResult Fail(std::string name, std::string subject, std::string message, Evidence evidence, Action action) {
  CheckResult r = Warn(std::move(name), std::move(subject), std::move(message), std::move(evidence));
  r.status = CheckStatus::kFail;
  r.action = action;
  return r;
}

CheckResult Skipped(std::string name, std::string subject, std::string reason) {
  CheckResult r;
  r.name = std::move(name);
  r.subject = std::move(subject);
  r.status = CheckStatus::kSkipped;
  r.message = std::move(reason);
  return r;
}

namespace {
int Severity(CheckStatus s) {
  switch (s) {
    case CheckStatus::kSkipped: return 0;
    case CheckStatus::kPass: return 1;
    case CheckStatus::kWarn: return 2;
    case CheckStatus::kFail: return 3;
  }
  return 0;
}

std::string Sanitize(const std::string& s) {
  std::string out;
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f && c != '"' && c != '\'') out += c;
    else if (c == '\n' || c == '\t') out += ' ';
  }
  return out;
}
}  // namespace

CheckStatus WorstStatus(const std::vector<CheckResult>& results) {
  CheckStatus worst = CheckStatus::kSkipped;
  for (const CheckResult& r : results) {
    if (Severity(r.status) > Severity(worst)) worst = r.status;
  }
  return worst;
}

std::string FormatTable(const std::vector<CheckResult>& results) {
  size_t name_w = 5, subject_w = 7;
  for (const CheckResult& r : results) {
    name_w = std::max(name_w, r.name.size());
    subject_w = std::max(subject_w, r.subject.size());
  }
  std::ostringstream os;
  auto pad = [](const std::string& s, size_t w) { return s + std::string(w > s.size() ? w - s.size() : 0, ' '); };
  os << pad("STATUS", 8) << pad("CHECK", name_w + 2) << pad("SUBJECT", subject_w + 2) << pad("ACTION", 14)
     << "MESSAGE\n";
  for (const CheckResult& r : results) {
    os << pad(CheckStatusName(r.status), 8) << pad(r.name, name_w + 2) << pad(r.subject, subject_w + 2)
       << pad(r.status == CheckStatus::kFail ? ActionName(r.action) : "-", 14)
       << r.message << "\n";
    const Evidence& e = r.evidence;
    if (!e.measured.empty() || !e.threshold.empty() || !e.source.empty()) {
      os << std::string(8, ' ') << "  measured: " << (e.measured.empty() ? "-" : e.measured)
         << "; threshold: " << (e.threshold.empty() ? "-" : e.threshold)
         << "; source: " << (e.source.empty() ? "-" : e.source) << "\n";
    }
  }
  return os.str();
}

std::string DrainReason(const std::vector<CheckResult>& results, size_t max_chars) {
  std::vector<const CheckResult*> failed;
  for (const CheckResult& r : results) {
    if (r.status == CheckStatus::kFail) failed.push_back(&r);
  }
  if (failed.empty()) return "";
  // Worst suggested action first so that a truncated reason keeps the cause that matters.
  std::stable_sort(failed.begin(), failed.end(),
                   [](const CheckResult* a, const CheckResult* b) { return a->action > b->action; });
  std::string out = "holdfast:";
  for (size_t i = 0; i < failed.size(); ++i) {
    std::string part = (i == 0 ? " " : "; ") + failed[i]->name;
    if (!failed[i]->subject.empty()) part += " " + failed[i]->subject;
    if (!failed[i]->evidence.measured.empty()) part += " " + failed[i]->evidence.measured;
    out += Sanitize(part);
  }
  if (failed.size() > 1) out += " (" + std::to_string(failed.size()) + " failed)";
  if (out.size() > max_chars) {
    const std::string more = " (+" + std::to_string(failed.size()) + " failed)";
    size_t keep = max_chars > more.size() + 3 ? max_chars - more.size() - 3 : max_chars;
    out = out.substr(0, keep);
    if (keep < max_chars) out += "..." + more;
    out = out.substr(0, max_chars);
  }
  return out;
}

std::string FormatNumber(double value) {
  char buf[64];
  if (std::fabs(value) >= 100 || value == std::floor(value)) {
    std::snprintf(buf, sizeof(buf), "%.0f", value);
  } else if (std::fabs(value) >= 1) {
    std::snprintf(buf, sizeof(buf), "%.1f", value);
  } else {
    std::snprintf(buf, sizeof(buf), "%.3g", value);
  }
  return buf;
}

}  // namespace holdfast::health
