// runctl's commands over incidents and hosts: the write-up of one incident
// (`incident`), one host's incidents across runs (`node`), and every run
// under a root with the hosts flagged there (`runs --all`). Lineage is read
// read-only through cli/run_data.h; the cross-run view reads the host history
// (common/host_history.h), never another run's database for it.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "cli/incident.h"
#include "cli/run_data.h"
#include "cli/runbook_path.h"
#include "common/host_history.h"

namespace holdfast {

namespace {

using json = nlohmann::json;

constexpr int kMaxScanDepth = 3;  // ROOT/a/b/c/lineage.db at the deepest

// The run directories under `root` (it, or folders at most kMaxScanDepth
// below): each folder holding a lineage.db, sorted. Hidden folders are
// skipped, and a run directory's own folders (checkpoints, logs) are not entered.
std::vector<std::string> ScanRunDirs(const std::string& root) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  std::vector<std::pair<fs::path, int>> todo = {{fs::path(root), 0}};
  while (!todo.empty()) {
    auto [dir, depth] = todo.back();
    todo.pop_back();
    std::error_code ec;
    if (fs::is_regular_file(dir / "lineage.db", ec)) {
      out.push_back(dir.lexically_normal().string());
      continue;
    }
    if (depth >= kMaxScanDepth) continue;
    for (fs::directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end; !ec && it != end;
         it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.empty() || name[0] == '.' || !it->is_directory(ec) || it->is_symlink(ec)) continue;
      todo.push_back({it->path(), depth + 1});
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

struct HostJudgement {
  std::string host;
  HostHistory history;
  HostVerdict verdict;
};

// Every host of the history, judged by `rule` at `now_ms`; unreadable files
// in *skipped.
Result<std::vector<HostJudgement>> JudgeHosts(const std::string& history_dir, const HistoryRule& rule, int64_t now_ms,
                                              std::vector<std::string>* skipped) {
  HF_ASSIGN_OR_RETURN(std::vector<std::string> hosts, HistoryHosts(history_dir));
  std::vector<HostJudgement> out;
  for (const std::string& h : hosts) {
    HF_ASSIGN_OR_RETURN(HostHistory history, ReadHostHistory(history_dir, h));
    skipped->insert(skipped->end(), history.skipped.begin(), history.skipped.end());
    HostVerdict v = JudgeHost(history, rule, now_ms);
    out.push_back({h, std::move(history), std::move(v)});
  }
  return out;
}

json RuleJson(const HistoryRule& rule) { return {{"runs", rule.runs}, {"window_days", rule.window_days}}; }

json HostIncidentJson(const HostIncident& i) {
  return {{"time_ms", i.time_ms},   {"time", FormatTimeMs(i.time_ms, true)},
          {"kind", i.kind},         {"credited", i.credited},
          {"run_id", i.run_id},     {"run_name", i.run_name},
          {"run_dir", i.run_dir},   {"event_id", i.event_id},
          {"attempt", OptJson(i.attempt)}, {"generation", OptJson(i.generation)},
          {"rank", OptJson(i.rank)}, {"slurm_job_id", i.slurm_job_id},
          {"summary", i.summary},   {"action", i.action},
          {"file", i.file},         {"owner_uid", i.owner_uid}};
}

void WarnSkipped(const CliContext& c, const std::vector<std::string>& skipped) {
  for (const std::string& s : skipped) *c.err << "runctl: skipped " << s << "\n";
}

}  // namespace

int CmdIncident(const CliContext& c, const std::string& spec, const std::string& number, const std::string& format) {
  if (format != "md" && format != "json") {
    return Fail(c, kRunctlUsage, "--format must be md or json, got '" + format + "'");
  }
  int n = 0;  // 0: the latest
  if (!number.empty()) {
    const bool digits = number.find_first_not_of("0123456789") == std::string::npos && number.size() <= 9;
    if (!digits || (n = std::stoi(number)) < 1) {
      return Fail(c, kRunctlUsage, "N must be an incident's number (1 is the run's first), got '" + number + "'");
    }
  }
  RunLookup l = LookUp(c, spec);
  if (l.exit != kRunctlOk) return l.exit;
  if (l.run.run_dir.empty()) l.run.run_dir = c.run_dir;
  ReportData d;
  if (int exit = LoadRunData(c, l, "", &d); exit != kRunctlOk) return exit;
  const std::vector<const EventRecord*> incidents = IncidentsOf(d);
  if (incidents.empty()) {
    return Fail(c, kRunctlNotFound, "run " + d.run.run_id + " has no incident recorded (`runctl lineage " +
                                        d.run.run_id + "` lists its events)");
  }
  if (n > static_cast<int>(incidents.size())) {
    *c.err << "runctl: run " << d.run.run_id << " has " << incidents.size() << " incident"
           << (incidents.size() == 1 ? "" : "s") << "; there is no incident " << n << ". Its incidents:\n";
    for (size_t i = 0; i < incidents.size(); ++i) {
      *c.err << "  " << i + 1 << "  " << FormatTime(incidents[i]->time_ms) << "  " << incidents[i]->kind << ": "
             << incidents[i]->summary << "\n";
    }
    return kRunctlNotFound;
  }
  const IncidentWriteUp w = BuildIncidentWriteUp(d, n == 0 ? static_cast<int>(incidents.size()) : n, RunbookDir());
  if (c.json || format == "json") {
    PrintJson(c, IncidentJson(w));
  } else {
    PrintIncidentMarkdown(*c.out, w);
  }
  return kRunctlOk;
}

int CmdNode(const CliContext& c, const std::string& host, const std::string& history_dir_flag,
            const HistoryRule& rule) {
  if (Status s = CheckHistoryHost(host); !s.ok()) return Fail(c, kRunctlUsage, "HOST: " + s.message());
  if (Status s = CheckHistoryRule(rule); !s.ok()) return Fail(c, kRunctlUsage, s.message());
  const std::string dir = history_dir_flag.empty() ? FindHistoryDir(c.run_dir) : history_dir_flag;
  if (dir.empty()) {
    return Fail(c, kRunctlNotFound, "no host history at or above " + c.run_dir +
                                        " (no .holdfast/hosts there): pass --history-dir DIR, or run runctl in or "
                                        "below the folder that holds the runs");
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    return Fail(c, errno == ENOENT ? kRunctlNotFound : kRunctlFailure,
                ErrnoError("host history " + dir, errno).message());
  }
  Result<HostHistory> h = ReadHostHistory(dir, host);
  if (!h.ok()) return Fail(c, kRunctlFailure, h.status().message());
  WarnSkipped(c, h->skipped);
  const HostVerdict v = JudgeHost(*h, rule, c.clock->UnixMs());
  if (c.json) {
    json incidents = json::array();
    for (const HostIncident& i : h->incidents) incidents.push_back(HostIncidentJson(i));
    PrintJson(c, {{"host", host},
                  {"history_dir", dir},
                  {"rule", RuleJson(rule)},
                  {"flagged", v.flagged},
                  {"verdict", {{"text", VerdictText(host, v, rule)},
                               {"runs", v.runs},
                               {"credited", v.credited},
                               {"involved", v.involved},
                               {"window_start_ms", v.window_start_ms}}},
                  {"incidents", std::move(incidents)},
                  {"skipped", h->skipped}});
    return kRunctlOk;
  }
  std::ostream& os = *c.out;
  os << "host " << host << ": " << (v.flagged ? "FLAGGED: " : "not flagged: ") << VerdictText(host, v, rule) << "\n";
  os << "history " << dir << "\n\n";
  if (h->incidents.empty()) {
    os << "no incident recorded for " << host << "\n";
    return kRunctlOk;
  }
  Table t({"TIME", "RUN", "KIND", "CREDITED", "ATT/GEN", "SLURM JOB", "SUMMARY"});
  for (const HostIncident& i : h->incidents) {
    t.Add({FormatTime(i.time_ms), i.run_id, i.kind,
           i.credited ? "yes" : (i.time_ms >= v.window_start_ms ? "no (involved)" : "no"),
           OptText(i.attempt) + "/" + OptText(i.generation), i.slurm_job_id.empty() ? "-" : i.slurm_job_id, i.summary});
  }
  t.Print(os);
  os << "\n(a write-up of one: runctl --run-dir RUN_DIR incident RUN; the run dirs are in --json's run_dir)\n";
  return kRunctlOk;
}

int CmdRunsAll(const CliContext& c, const std::string& root, int limit, const std::string& history_dir_flag,
               const HistoryRule& rule) {
  if (Status s = CheckHistoryRule(rule); !s.ok()) return Fail(c, kRunctlUsage, s.message());
  std::error_code ec;
  if (!std::filesystem::is_directory(root, ec)) {
    return Fail(c, kRunctlNotFound, "--all " + root + " is not a folder: name the folder that holds the run directories");
  }
  const std::string abs_root = std::filesystem::absolute(root).lexically_normal().string();
  const std::string history_dir = history_dir_flag.empty() ? abs_root + "/.holdfast/hosts" : history_dir_flag;
  const int64_t now = c.clock->UnixMs();
  std::vector<std::string> skipped;
  Result<std::vector<HostJudgement>> hosts = JudgeHosts(history_dir, rule, now, &skipped);
  if (!hosts.ok()) return Fail(c, kRunctlFailure, hosts.status().message());
  WarnSkipped(c, skipped);
  std::map<std::string, const HostJudgement*> flagged;
  for (const HostJudgement& j : *hosts) {
    if (j.verdict.flagged) flagged[j.host] = &j;
  }
  json runs = json::array(), unreadable = json::array();
  std::vector<std::string> headers = RunSummaryHeaders();
  headers.insert(headers.begin(), "DIR");
  headers.insert(headers.end() - 1, "FLAGGED HOSTS");  // before the cause, the longest
  Table t(headers);
  for (const std::string& dir : ScanRunDirs(abs_root)) {
    LineageOptions o;
    o.read_only = true;
    Result<std::unique_ptr<LineageDb>> db = LineageDb::Open(dir + "/lineage.db", o);
    Result<std::vector<RunSummary>> rows = db.ok() ? SummariseRuns(**db, limit, now)
                                                   : Result<std::vector<RunSummary>>(db.status());
    if (!rows.ok()) {
      unreadable.push_back({{"dir", dir}, {"error", rows.status().message()}});
      *c.err << "runctl: " << dir << ": " << rows.status().message() << "\n";
      continue;
    }
    for (const RunSummary& r : *rows) {
      std::vector<std::string> hit;
      for (const std::string& n : r.run.nodes) {
        if (flagged.count(n) != 0) hit.push_back(n);
      }
      json j = RunSummaryJson(r);
      j["dir"] = dir;
      j["flagged_hosts"] = hit;
      runs.push_back(std::move(j));
      std::vector<std::string> cells = RunSummaryCells(r);
      cells.insert(cells.begin(), dir.size() > abs_root.size() ? dir.substr(abs_root.size() + 1) : ".");
      cells.insert(cells.end() - 1, hit.empty() ? "-" : Join(hit, ","));
      t.Add(std::move(cells));
    }
  }
  json flagged_json = json::array();
  for (const auto& [host, j] : flagged) {
    flagged_json.push_back({{"host", host}, {"runs", j->verdict.runs}, {"credited", j->verdict.credited},
                            {"text", VerdictText(host, j->verdict, rule)}});
  }
  if (c.json) {
    PrintJson(c, {{"root", abs_root}, {"runs", std::move(runs)}, {"unreadable", std::move(unreadable)},
                  {"history_dir", history_dir}, {"rule", RuleJson(rule)}, {"flagged", std::move(flagged_json)},
                  {"skipped", skipped}});
    return kRunctlOk;
  }
  std::ostream& os = *c.out;
  if (runs.empty()) {
    os << "no run directory (a folder with a lineage.db) in " << abs_root << "\n";
  } else {
    t.Print(os);
  }
  char days[32];
  std::snprintf(days, sizeof(days), "%g", rule.window_days);
  os << "\nhosts with incidents in " << rule.runs << " or more runs within " << days << " days (history "
     << history_dir << ", " << hosts->size() << (hosts->size() == 1 ? " host" : " hosts") << "):"
     << (flagged.empty() ? " none" : "") << "\n";
  for (const auto& [host, j] : flagged) {
    os << "  FLAGGED " << VerdictText(host, j->verdict, rule) << "  (runctl node " << host << ")\n";
  }
  return kRunctlOk;
}

}  // namespace holdfast
