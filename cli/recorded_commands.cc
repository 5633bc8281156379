// runctl's commands over the recorded run: runs, lineage, triage, best,
// report, and the recorded status shown when no daemon answers — everything
// read from RUN_DIR/lineage.db (read-only) and the files the run left.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/compare_html.h"
#include "cli/format.h"
#include "cli/rank_summary.h"
#include "cli/report.h"
#include "cli/runbook_path.h"
#include "cli/run_data.h"
#include "cli/timeline.h"
#include "common/toml_reader.h"
#include "lineage/incident.h"
#include "lineage/lineage_db.h"

namespace holdfast {

namespace {

using json = nlohmann::json;

bool HigherIsBetter(const std::string& metric) {
  return metric.find("accuracy") != std::string::npos || metric.find("reward") != std::string::npos ||
         metric.find("margin") != std::string::npos;
}

}  // namespace

namespace {

// The recorded status's ranks: as the last incident's evidence saw them (the
// only record of every rank lineage keeps), summarised as the live status
// is, or `sel`'s a line each. Returns the exit code of a bad selection, else
// kRunctlOk.
int PrintRecordedRanks(const CliContext& c, const EventRecord* incident, const RankSelection& sel) {
  Result<IncidentEvidence> ev =
      incident ? ParseIncidentEvidence(incident->evidence_json) : Result<IncidentEvidence>(IncidentEvidence{});
  const std::vector<int> culprits = ev.ok() && incident ? Culprits(*incident, *ev) : std::vector<int>{};
  const std::vector<RankRow> rows = ev.ok() ? RankRows(*ev, culprits) : std::vector<RankRow>{};
  if (rows.empty()) {
    if (!sel.any()) return kRunctlOk;
    return Fail(c, kRunctlNotFound, "no rank was recorded: holdfastd is not running here, and lineage keeps every "
                                    "rank's state only with an incident (the last has none)");
  }
  if (Status ok = CheckSelection(sel, rows); !ok.ok()) return Fail(c, kRunctlUsage, ok.message());
  if (c.json) return kRunctlOk;  // the incident's evidence holds every rank
  std::ostream& os = *c.out;
  os << "\nranks at the last incident (" << incident->kind << " at " << FormatTime(incident->time_ms) << "):\n";
  if (!sel.any()) {
    PrintRankSummary(os, rows, ContextOf(rows));
    return kRunctlOk;
  }
  for (const RankEvidence& r : ev->ranks) {
    RankRow key;
    key.rank = r.rank;
    key.node = r.node;
    key.host = r.host;
    if (Selected(sel, key)) os << "  " << DescribeRankEvidence(r) << "\n";
  }
  return kRunctlOk;
}

}  // namespace

int PrintRecordedStatus(const CliContext& c, const std::string& spec, const std::string& why,
                        const RankSelection& sel) {
  RunLookup l = LookUp(c, spec);
  if (l.exit != kRunctlOk) return l.exit;
  const RunRecord& run = l.run;
  Result<std::vector<AttemptRecord>> attempts = l.db->Attempts(run.run_id);
  Result<std::vector<GenerationRecord>> gens = l.db->Generations(run.run_id);
  Result<std::optional<CheckpointRecord>> ckpt = l.db->NewestCommittedCheckpoint(run.run_id);
  Result<std::optional<EventRecord>> incident = l.db->LastIncident(run.run_id);
  for (const Status& s : {attempts.status(), gens.status(), ckpt.status(), incident.status()}) {
    if (!s.ok()) return Fail(c, kRunctlFailure, s.message());
  }
  const AttemptRecord* attempt = attempts->empty() ? nullptr : &attempts->back();
  const GenerationRecord* gen = gens->empty() ? nullptr : &gens->back();
  const bool slurm = attempt != nullptr && !attempt->slurm_job_id.empty();
  const RunHealth health = RecordedHealth(run.state);
  if (c.json) {
    if (int exit = PrintRecordedRanks(c, incident->has_value() ? &**incident : nullptr, sel); exit != kRunctlOk) {
      return exit;
    }
    // "slurm" repeats the newest attempt's job fields under the live status's names.
    json slurm_json = nullptr;
    if (slurm) {
      slurm_json = {{"job_id", attempt->slurm_job_id},
                    {"restart_count", attempt->restart_count},
                    {"hosts", attempt->nodes}};
    }
    PrintJson(c, {{"live", false},
                  {"source", "lineage.db"},
                  {"daemon", why},
                  {"health", RunHealthName(health)},
                  {"run", RunJson(run)},
                  {"attempt", attempt ? AttemptJson(*attempt) : json(nullptr)},
                  {"slurm", std::move(slurm_json)},
                  {"generation", gen ? GenerationJson(*gen) : json(nullptr)},
                  {"last_checkpoint", *ckpt ? CheckpointJson(**ckpt) : json(nullptr)},
                  {"last_incident", *incident ? EventJson(**incident) : json(nullptr)}});
    return ExitForHealth(health);
  }
  std::ostream& os = *c.out;
  os << "no holdfastd answers; last recorded state:\n";
  os << "  (" << why << ")\n";
  Table t({"run", run.run_id + " (" + run.name + ")"});
  t.Add({"state", StateAndCause(RunStateName(run.state), run.cause)});
  if (attempt) {
    t.Add({"attempt", std::to_string(attempt->attempt) + " started " +
                          FormatTime(attempt->started_ms) +
                          (attempt->ended_ms ? ", ended " + FormatTime(*attempt->ended_ms) : "") +
                          ", " + RunStateName(attempt->state)});
  }
  if (slurm) t.Add({"slurm", SlurmJobText(attempt->slurm_job_id, attempt->restart_count, attempt->nodes)});
  if (gen) {
    t.Add({"generation", std::to_string(gen->generation) + ", last step " +
                             OptText(gen->last_step) +
                             (gen->last_step_ms ? " at " + FormatTime(*gen->last_step_ms) : "")});
  }
  t.Add({"world size", std::to_string(run.world_size) +
                           (run.nodes.empty() ? ""
                                              : (run.nodes.size() == 1 ? " on node " : " on nodes ") +
                                                    Join(run.nodes, ","))});
  t.Add({"checkpoint", *ckpt ? "step " + std::to_string((*ckpt)->step) + ", committed " +
                                   FormatTime((*ckpt)->committed_ms)
                             : "none committed"});
  if (*incident) {
    const EventRecord& e = **incident;
    t.Add({"incident", e.kind + " at " + FormatTime(e.time_ms) + ": " + e.summary +
                           " (runctl triage " + run.run_id + ")"});
  }
  t.Print(os);
  if (int exit = PrintRecordedRanks(c, incident->has_value() ? &**incident : nullptr, sel); exit != kRunctlOk) {
    return exit;
  }
  return ExitForHealth(health);
}

int CmdRuns(const CliContext& c, int limit) {
  Result<std::unique_ptr<LineageDb>> db = OpenDb(c);
  if (!db.ok()) return Fail(c, ExitFor(db.status()), db.status().message());
  Result<std::vector<RunSummary>> runs = SummariseRuns(**db, limit, c.clock->UnixMs());
  if (!runs.ok()) return Fail(c, kRunctlFailure, runs.status().message());
  if (c.json) {
    json out = json::array();
    for (const RunSummary& r : *runs) out.push_back(RunSummaryJson(r));
    PrintJson(c, {{"runs", out}});
  } else if (runs->empty()) {
    *c.out << "no runs recorded in " << DbPath(c) << "\n";
  } else {
    Table t(RunSummaryHeaders());
    for (const RunSummary& r : *runs) t.Add(RunSummaryCells(r));
    t.Print(*c.out);
  }
  return kRunctlOk;
}

int CmdLineage(const CliContext& c, const std::string& spec, int max_events) {
  RunLookup l = LookUp(c, spec);
  if (l.exit != kRunctlOk) return l.exit;
  const RunRecord& run = l.run;
  auto attempts = l.db->Attempts(run.run_id);
  auto gens = l.db->Generations(run.run_id);
  auto ckpts = l.db->Checkpoints(run.run_id);
  auto events = l.db->Events(run.run_id, max_events);
  for (const Status& s : {attempts.status(), gens.status(), ckpts.status(), events.status()}) {
    if (!s.ok()) return Fail(c, kRunctlFailure, s.message());
  }
  if (c.json) {
    json att = json::array();
    for (const AttemptRecord& a : *attempts) {
      json j = AttemptJson(a);
      j["generations"] = json::array();
      for (const GenerationRecord& g : *gens) {
        if (g.attempt == a.attempt) j["generations"].push_back(GenerationJson(g));
      }
      att.push_back(std::move(j));
    }
    json ck = json::array();
    for (const CheckpointRecord& k : *ckpts) ck.push_back(CheckpointJson(k));
    json ev = json::array();
    for (const EventRecord& e : *events) ev.push_back(EventJson(e));
    PrintJson(c, {{"run", RunJson(run)}, {"attempts", att}, {"checkpoints", ck}, {"events", ev}});
    return kRunctlOk;
  }
  std::ostream& os = *c.out;
  os << "run " << run.run_id << " (" << run.name << ")  "
     << StateAndCause(RunStateName(run.state), run.cause) << "\n";
  os << "dir " << run.run_dir << ", world size " << run.world_size << ", "
     << SchedulerKindName(run.scheduler)
     << (run.slurm_job_id.empty() ? "" : " job " + run.slurm_job_id) << ", config "
     << run.config_path << "\n\n";
  Table t({"TIME", "ATT", "GEN", "WHAT"});
  for (const TimelineItem& i : TimelineItems(*attempts, *gens, *ckpts, *events)) t.Add({FormatTime(i.t), i.att, i.gen, i.text});
  t.Print(os);
  if (max_events > 0 && static_cast<int>(events->size()) == max_events) {
    os << "(only the newest " << max_events << " events; --events 0 shows all)\n";
  }
  return kRunctlOk;
}

int CmdBest(const CliContext& c, const std::string& spec, const std::string& metric) {
  RunLookup l = LookUp(c, spec);
  if (l.exit != kRunctlOk) return l.exit;
  const RunRecord& run = l.run;
  Result<std::vector<CheckpointRecord>> all = l.db->Checkpoints(run.run_id);
  if (!all.ok()) return Fail(c, kRunctlFailure, all.status().message());
  std::set<std::string> present;
  const CheckpointRecord* best = nullptr;
  const bool higher = HigherIsBetter(metric);
  for (const CheckpointRecord& k : *all) {
    for (const auto& [name, value] : k.metrics) {
      if (name != "eval_step") present.insert(name);
    }
    if (k.state != CheckpointState::kCommitted) continue;  // pruned or corrupt: not there to use
    auto it = k.metrics.find(metric);
    auto at = k.metrics.find("eval_step");
    // Only metrics measured on this checkpoint's own weights count.
    if (it == k.metrics.end() || at == k.metrics.end() || static_cast<int64_t>(at->second) != k.step) continue;
    const double v = it->second, b = best == nullptr ? 0 : best->metrics.at(metric);
    if (best == nullptr || (higher ? v > b : v < b)) best = &k;
  }
  if (present.empty()) {
    return Fail(c, kRunctlNotFound,
                "run " + run.run_id + " has no checkpoint with eval metrics: set [eval] every_steps and holdout in "
                "the trainer config (a multiple of checkpoint.every_steps, so that checkpoints are evaluated)");
  }
  if (present.count(metric) == 0) {
    std::string names;
    for (const std::string& n : present) names += (names.empty() ? "" : ", ") + n;
    return Fail(c, kRunctlUsage, "run " + run.run_id + " has no eval metric '" + metric + "'; its checkpoints carry: " +
                                     names + " (choose one with --metric)");
  }
  if (best == nullptr) {
    return Fail(c, kRunctlNotFound,
                "no committed checkpoint of run " + run.run_id + " was evaluated at its own step (" + metric +
                    " was measured at other steps, or those checkpoints were pruned); make eval.every_steps a "
                    "multiple of checkpoint.every_steps");
  }
  const double value = best->metrics.at(metric);
  if (c.json) {
    PrintJson(c, {{"run", run.run_id}, {"metric", metric}, {"higher_is_better", higher}, {"step", best->step},
                  {"value", value}, {"path", best->path}});
    return kRunctlOk;
  }
  *c.out << "best checkpoint of run " << run.run_id << " by " << metric << " (" << (higher ? "higher" : "lower")
         << " is better): step " << best->step << "  " << metric << " " << value << "  " << best->path << "\n";
  return kRunctlOk;
}

namespace {

// One run's values of a metric, by the step of the checkpoint evaluated on
// its own weights (pruned or corrupt checkpoints too: the measurement stands).
struct RunMetric {
  RunRecord run;
  LineageDb* db = nullptr;  // where it is recorded (not owned)
  std::map<int64_t, double> by_step;
  std::set<std::string> carried;  // every eval metric its checkpoints carry
};

std::string MetricValue(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", v);
  return buf;
}

}  // namespace

// The runs `specs` name (compare's RUN arguments): run ids of the run
// directory's lineage.db, or run directories (their newest run); none: every
// run of the run directory, oldest first. The databases opened go to *dbs.
// Returns kRunctlOk or the exit code of what could not be read or found.
static int ResolveRuns(const CliContext& c, const std::vector<std::string>& specs,
                std::vector<std::unique_ptr<LineageDb>>* dbs_out,
                std::vector<std::pair<RunRecord, LineageDb*>>* runs_out) {
  std::vector<std::unique_ptr<LineageDb>>& dbs = *dbs_out;
  std::vector<std::pair<RunRecord, LineageDb*>>& runs = *runs_out;
  int open_exit = kRunctlOk;
  auto open_db = [&](const CliContext& at) -> LineageDb* {
    Result<std::unique_ptr<LineageDb>> db = OpenDb(at);
    if (!db.ok()) {
      open_exit = Fail(c, ExitFor(db.status()), db.status().message());
      return nullptr;
    }
    dbs.push_back(std::move(db).value());
    return dbs.back().get();
  };
  std::set<std::pair<std::string, std::string>> seen;  // (lineage.db, run id)
  if (specs.empty()) {
    LineageDb* db = open_db(c);
    if (db == nullptr) return open_exit;
    Result<std::vector<RunRecord>> all = db->ListRuns(0);
    if (!all.ok()) return Fail(c, kRunctlFailure, all.status().message());
    for (auto it = all->rbegin(); it != all->rend(); ++it) runs.emplace_back(*it, db);  // oldest first
  }
  LineageDb* here = nullptr;
  for (const std::string& spec : specs) {
    std::error_code ec;
    const bool dir = std::filesystem::is_regular_file(std::filesystem::path(spec) / "lineage.db", ec);
    CliContext at = c;
    if (dir) at.run_dir = spec;
    LineageDb* db = dir ? open_db(at) : (here != nullptr ? here : (here = open_db(c)));
    if (db == nullptr) return open_exit;
    Result<RunRecord> run = db->FindRun(dir ? "latest" : spec);
    if (!run.ok()) return Fail(c, ExitForRunLookup(run.status()), run.status().message());
    if (seen.insert({at.run_dir, run->run_id}).second) runs.emplace_back(std::move(run).value(), db);
  }
  return kRunctlOk;
}

// The comparison as an HTML page at `path`, written aside and renamed.
static int WriteComparePage(const CliContext& c, const std::vector<RunMetric>& rows, const std::string& metric,
                            bool higher, const std::string& path) {
  CompareData d;
  d.metric = metric;
  d.higher_is_better = higher;
  d.generated = FormatTime(c.clock->UnixMs());
  for (const RunMetric& r : rows) {
    CompareSeries series{r.run.run_id, r.run.name, RunStateName(r.run.state), {}};
    series.points.assign(r.by_step.begin(), r.by_step.end());
    d.runs.push_back(std::move(series));
  }
  const std::string tmp = path + ".tmp";
  std::ofstream f(tmp, std::ios::trunc);
  f << RenderCompareHtml(d);
  f.close();
  if (!f) return Fail(c, kRunctlFailure, "cannot write " + tmp + ": check that its folder exists and is writable");
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Fail(c, kRunctlFailure, ErrnoError("rename " + tmp + " to " + path, errno).message());
  }
  return kRunctlOk;
}

int CmdCompare(const CliContext& c, const std::vector<std::string>& specs, const std::string& wanted,
               const std::string& html) {
  std::vector<std::unique_ptr<LineageDb>> dbs;
  std::vector<std::pair<RunRecord, LineageDb*>> runs;
  if (int exit = ResolveRuns(c, specs, &dbs, &runs); exit != kRunctlOk) return exit;
  if (runs.empty()) return Fail(c, kRunctlNotFound, "no run is recorded in " + c.run_dir + "/lineage.db");
  std::vector<RunMetric> rows;
  std::set<std::string> present;
  for (auto& [run, db] : runs) {
    Result<std::vector<CheckpointRecord>> ckpts = db->Checkpoints(run.run_id);
    if (!ckpts.ok()) return Fail(c, kRunctlFailure, ckpts.status().message());
    RunMetric r;
    r.run = std::move(run);
    r.db = db;
    for (const CheckpointRecord& k : *ckpts) {
      for (const auto& [name, value] : k.metrics) {
        if (name != "eval_step") r.carried.insert(name);
      }
    }
    present.insert(r.carried.begin(), r.carried.end());
    rows.push_back(std::move(r));
  }
  if (present.empty()) {
    return Fail(c, kRunctlNotFound,
                "none of these runs has a checkpoint with eval metrics: set [eval] every_steps and holdout in the "
                "trainer config (a multiple of checkpoint.every_steps, so that checkpoints are evaluated)");
  }
  std::string metric = wanted;
  if (metric.empty()) metric = present.count("eval_loss") ? "eval_loss" : *present.begin();
  if (present.count(metric) == 0) {
    std::string names;
    for (const std::string& n : present) names += (names.empty() ? "" : ", ") + n;
    return Fail(c, kRunctlUsage, "no run has the eval metric '" + metric + "'; their checkpoints carry: " + names +
                                     " (choose one with --metric)");
  }
  for (RunMetric& r : rows) {
    Result<std::vector<CheckpointRecord>> ckpts = r.db->Checkpoints(r.run.run_id);
    if (!ckpts.ok()) return Fail(c, kRunctlFailure, ckpts.status().message());
    for (const CheckpointRecord& k : *ckpts) {
      auto it = k.metrics.find(metric);
      auto at = k.metrics.find("eval_step");
      if (it == k.metrics.end() || at == k.metrics.end() || static_cast<int64_t>(at->second) != k.step) continue;
      r.by_step[k.step] = it->second;
    }
  }
  const bool higher = HigherIsBetter(metric);
  if (!html.empty()) {
    if (int exit = WriteComparePage(c, rows, metric, higher, html); exit != kRunctlOk) return exit;
  }
  auto best_of = [&](const RunMetric& r) {
    auto best = r.by_step.begin();
    for (auto it = r.by_step.begin(); it != r.by_step.end(); ++it) {
      if (higher ? it->second > best->second : it->second < best->second) best = it;
    }
    return best;
  };
  if (c.json) {
    json out = {{"metric", metric}, {"higher_is_better", higher}, {"runs", json::array()}};
    for (const RunMetric& r : rows) {
      json j = {{"run_id", r.run.run_id}, {"name", r.run.name}, {"state", RunStateName(r.run.state)},
                {"values", json::array()}, {"best", nullptr}, {"last", nullptr}};
      for (const auto& [step, v] : r.by_step) j["values"].push_back({{"step", step}, {"value", v}});
      if (!r.by_step.empty()) {
        const auto b = best_of(r);
        j["best"] = {{"step", b->first}, {"value", b->second}};
        j["last"] = {{"step", r.by_step.rbegin()->first}, {"value", r.by_step.rbegin()->second}};
      }
      out["runs"].push_back(std::move(j));
    }
    if (!html.empty()) out["html"] = html;
    PrintJson(c, out);
    return kRunctlOk;
  }
  std::ostream& os = *c.out;
  os << metric << " (" << (higher ? "higher" : "lower") << " is better) at each run's evaluated checkpoints\n\n";
  if (!html.empty()) os << "curves: " << html << "\n\n";
  Table summary({"RUN", "NAME", "STATE", "BEST", "AT STEP", "LAST", "AT STEP"});
  std::set<int64_t> steps;
  for (const RunMetric& r : rows) {
    std::vector<std::string> row = {r.run.run_id, r.run.name, RunStateName(r.run.state)};
    if (r.by_step.empty()) {
      row.insert(row.end(), {"-", "-", "-", "-"});
    } else {
      const auto b = best_of(r);
      row.insert(row.end(), {MetricValue(b->second), std::to_string(b->first),
                             MetricValue(r.by_step.rbegin()->second), std::to_string(r.by_step.rbegin()->first)});
    }
    summary.Add(std::move(row));
    for (const auto& [step, v] : r.by_step) steps.insert(step);
  }
  summary.Print(os);
  if (steps.empty()) return kRunctlOk;
  os << "\n";
  std::vector<std::string> head = {"STEP"};
  for (const RunMetric& r : rows) head.push_back(r.run.run_id);
  Table by_step(head);
  for (int64_t step : steps) {
    std::vector<std::string> row = {std::to_string(step)};
    for (const RunMetric& r : rows) {
      auto it = r.by_step.find(step);
      row.push_back(it == r.by_step.end() ? "-" : MetricValue(it->second));
    }
    by_step.Add(std::move(row));
  }
  by_step.Print(os);
  return kRunctlOk;
}

int CmdTriage(const CliContext& c, const std::string& spec, const RankSelection& sel) {
  RunLookup l = LookUp(c, spec);
  if (l.exit != kRunctlOk) return l.exit;
  RunRecord run = l.run;
  if (run.run_dir.empty()) run.run_dir = c.run_dir;  // where its logs are
  Result<std::optional<EventRecord>> incident = l.db->LastIncident(run.run_id);
  if (!incident.ok()) return Fail(c, kRunctlFailure, incident.status().message());
  if (!*incident) {
    if (c.json) {
      PrintJson(c, {{"run", RunJson(run)}, {"incident", nullptr}});
    } else {
      *c.out << "run " << run.run_id << " (" << run.name << ") "
             << StateAndCause(RunStateName(run.state), run.cause)
             << ": no incident recorded\n";
    }
    return kRunctlOk;
  }
  const EventRecord& e = **incident;
  if (c.json) {
    const Result<IncidentEvidence> parsed = ParseIncidentEvidence(e.evidence_json);
    json j = EventJson(e);
    const IncidentEvidence ev = parsed.ok() ? *parsed : IncidentEvidence{};
    j["culprits"] = Culprits(e, ev);
    const std::string log = CulpritLogPath(run, e, ev);
    j["log_path"] = log.empty() ? json(nullptr) : json(log);
    const std::string runbook = e.runbook.empty() ? DefaultRunbook(e.kind) : e.runbook;
    j["runbook_file"] = BaseName(runbook);
    const std::string file = RunbookFile(RunbookDir(), runbook);
    j["runbook_path"] = file == runbook ? json(nullptr) : json(file);
    PrintJson(c, {{"run", RunJson(run)}, {"incident", j}});
    return kRunctlOk;
  }

  PrintTriage(*c.out, run, e, RunbookDir(), sel);
  return kRunctlOk;
}

int CmdReport(const CliContext& c, const std::string& spec, const std::string& out_path,
              const std::string& metrics_path) {
  RunLookup l = LookUp(c, spec);
  if (l.exit != kRunctlOk) return l.exit;
  ReportData d;
  if (int exit = LoadRunData(c, l, metrics_path, &d); exit != kRunctlOk) return exit;
  const std::string& id = d.run.run_id;
  const std::string& metrics = d.metrics_file;

  const std::string out = out_path.empty() ? c.run_dir + "/report-" + id + ".html" : out_path;
  {
    // Written aside and renamed: a browser never sees half a page.
    const std::string tmp = out + ".tmp";
    std::ofstream f(tmp, std::ios::trunc);
    f << RenderReportHtml(d);
    f.close();
    if (!f) return Fail(c, kRunctlFailure, "cannot write " + tmp);
    if (std::rename(tmp.c_str(), out.c_str()) != 0) {
      return Fail(c, kRunctlFailure, ErrnoError("rename " + tmp + " to " + out, errno).message());
    }
  }
  if (c.json) {
    PrintJson(c, {{"run_id", id},
                  {"report", out},
                  {"metrics", metrics.empty() ? json(nullptr) : json(metrics)},
                  {"effective_s", d.time.effective_s},
                  {"wall_s", d.time.wall_s},
                  {"lost_s", d.time.lost_s}});
    return kRunctlOk;
  }
  *c.out << "report of run " << id << ": " << out << "\n"
         << "  effective training time " << FormatDuration(d.time.effective_s) << " of "
         << FormatDuration(d.time.wall_s) << " wall time; "
         << (metrics.empty() ? "no metrics.jsonl found: pass --metrics PATH for the charts"
                             : "metrics from " + metrics)
         << "\n";
  return kRunctlOk;
}

}  // namespace holdfast
