#include "cli/run_data.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/format.h"
#include "cli/runbook_path.h"
#include "common/toml_reader.h"

namespace holdfast {

std::string FindMetrics(const RunRecord& run, std::vector<std::string>* looked) {
  namespace fs = std::filesystem;
  std::vector<fs::path> bases = {fs::current_path()};
  for (fs::path p = run.run_dir; !p.empty() && p != p.parent_path(); p = p.parent_path()) {
    bases.push_back(p);
  }
  auto resolve = [&](const std::string& rel, bool want_dir) -> std::string {
    if (rel.empty()) return "";
    if (fs::path(rel).is_absolute()) return fs::exists(rel) ? rel : "";
    for (const fs::path& b : bases) {
      std::error_code ec;
      const fs::path p = b / rel;
      if (want_dir ? fs::is_directory(p, ec) : fs::is_regular_file(p, ec)) return p.string();
    }
    return "";
  };
  std::vector<std::string> candidates;
  if (Result<toml::table> job = ParseToml(run.config_text, "config"); job.ok()) {
    std::vector<std::string> cmd;
    if (const toml::array* a = (*job)["job"]["command"].as_array()) {
      for (const toml::node& n : *a) {
        if (const auto* v = n.as_string()) cmd.push_back(v->get());
      }
    }
    std::string metrics_flag, dir, name, config;
    for (size_t i = 0; i + 1 < cmd.size(); ++i) {
      const std::string& next = cmd[i + 1];
      if (cmd[i] == "--metrics") metrics_flag = next;
      if (cmd[i] == "--config" || cmd[i] == "-c") config = next;
      if (cmd[i] == "--set" && next.rfind("output.dir=", 0) == 0) dir = next.substr(11);
      if (cmd[i] == "--set" && next.rfind("output.metrics=", 0) == 0) name = next.substr(15);
    }
    if (!config.empty() && (dir.empty() || name.empty())) {
      if (std::string f = resolve(config, false); !f.empty()) {
        if (Result<toml::table> t = ParseTomlFile(f); t.ok()) {
          if (dir.empty()) dir = (*t)["output"]["dir"].value_or(std::string());
          if (name.empty()) name = (*t)["output"]["metrics"].value_or(std::string());
        }
      }
    }
    if (name.empty()) name = "metrics.jsonl";
    if (!metrics_flag.empty()) candidates.push_back(metrics_flag);
    candidates.push_back((fs::path(dir.empty() ? "." : dir) / name).string());
  }
  candidates.push_back((fs::path(run.run_dir) / "metrics.jsonl").string());
  for (const std::string& c : candidates) {
    looked->push_back(c);
    if (std::string p = resolve(c, false); !p.empty()) return p;
  }
  return "";
}

int LoadRunData(const CliContext& c, const RunLookup& l, const std::string& metrics_path, ReportData* d) {
  d->run = l.run;
  const std::string& id = d->run.run_id;
  auto attempts = l.db->Attempts(id);
  auto gens = l.db->Generations(id);
  auto ckpts = l.db->Checkpoints(id);
  auto events = l.db->Events(id, 0);
  for (const Status& s : {attempts.status(), gens.status(), ckpts.status(), events.status()}) {
    if (!s.ok()) return Fail(c, kRunctlFailure, s.message());
  }
  d->attempts = std::move(attempts).value();
  d->generations = std::move(gens).value();
  d->checkpoints = std::move(ckpts).value();
  d->events = std::move(events).value();
  d->generated_ms = c.clock->UnixMs();

  std::string metrics = metrics_path;
  std::vector<std::string> looked;
  if (metrics.empty()) metrics = FindMetrics(d->run, &looked);
  if (!metrics.empty()) {
    std::ifstream in(metrics);
    if (!in) return Fail(c, kRunctlNotFound, "cannot read metrics file " + metrics);
    d->metrics = ParseMetricsJsonl(in);
    d->metrics_source = metrics;
    d->metrics_file = metrics;
  } else {
    d->metrics_source = "no metrics.jsonl found (looked for " + Join(looked, ", ") + "; pass --metrics PATH)";
  }
  const std::string runbooks = RunbookDir();
  RunRecord run = d->run;
  if (run.run_dir.empty()) run.run_dir = c.run_dir;  // where its logs are
  for (const EventRecord& e : d->events) {
    if (!e.incident) continue;
    std::ostringstream os;
    PrintTriage(os, run, e, runbooks);
    d->triage[e.id] = os.str();
  }
  d->time = AccountTime(d->attempts, d->generations, d->checkpoints, d->events, d->metrics, d->generated_ms);
  return kRunctlOk;
}

Result<std::vector<RunSummary>> SummariseRuns(LineageDb& db, int limit, int64_t now_ms) {
  HF_ASSIGN_OR_RETURN(std::vector<RunRecord> runs, db.ListRuns(limit));
  std::vector<RunSummary> out;
  for (RunRecord& r : runs) {
    HF_ASSIGN_OR_RETURN(std::vector<AttemptRecord> attempts, db.Attempts(r.run_id));
    HF_ASSIGN_OR_RETURN(std::vector<GenerationRecord> gens, db.Generations(r.run_id));
    HF_ASSIGN_OR_RETURN(std::vector<CheckpointRecord> ckpts, db.Checkpoints(r.run_id));
    HF_ASSIGN_OR_RETURN(std::vector<EventRecord> events, db.Events(r.run_id, 0));
    RunSummary s;
    s.attempts = attempts.size();
    s.time = AccountTime(attempts, gens, ckpts, events, {}, now_ms);
    s.run = std::move(r);
    out.push_back(std::move(s));
  }
  return out;
}

nlohmann::json RunSummaryJson(const RunSummary& s) {
  nlohmann::json j = RunJson(s.run);
  j["attempts"] = s.attempts;
  j["effective_s"] = s.time.effective_s;
  j["wall_s"] = s.time.wall_s;
  return j;
}

std::vector<std::string> RunSummaryHeaders() {
  return {"RUN", "NAME", "STATE", "ATTEMPTS", "LAST STEP", "EFFECTIVE", "STARTED", "CAUSE"};
}

std::vector<std::string> RunSummaryCells(const RunSummary& s) {
  char eff[64];
  std::snprintf(eff, sizeof(eff), "%s (%.0f%%)", FormatDuration(s.time.effective_s).c_str(),
                s.time.wall_s > 0 ? 100.0 * s.time.effective_s / s.time.wall_s : 0.0);
  const RunRecord& r = s.run;
  return {r.run_id, r.name, RunStateName(r.state), std::to_string(s.attempts),
          OptText(r.last_step), s.time.wall_s > 0 ? eff : "-", FormatTime(r.created_ms), r.cause};
}

}  // namespace holdfast
