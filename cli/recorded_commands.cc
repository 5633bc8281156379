// runctl's commands over the recorded run: runs, lineage, triage, best,
// report, and the recorded status shown when no daemon answers — everything
// read from RUN_DIR/lineage.db (read-only) and the files the run left.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "cli/report.h"
#include "common/toml_reader.h"
#include "lineage/incident.h"
#include "lineage/lineage_db.h"

namespace holdfast {

namespace {

using json = nlohmann::json;

// One line of `runctl lineage`'s timeline.
struct Item {
  int64_t seq;  // lineage's write order
  int64_t t;
  int order;    // among what one write recorded at once
  int64_t tie;
  std::string att, gen, text;
};

// Lineage's records as one list in the order things were written (lineage's
// seq: a wall clock that stepped back does not reorder it); what one write
// recorded at once (ending a generation and its attempt) goes starts, then
// what happens inside them, then ends.
std::vector<Item> TimelineItems(const std::vector<AttemptRecord>& attempts,
                                const std::vector<GenerationRecord>& gens,
                                const std::vector<CheckpointRecord>& ckpts,
                                const std::vector<EventRecord>& events) {
  std::vector<Item> items;
  auto opt = [](const std::optional<int>& v) { return v ? std::to_string(*v) : std::string("-"); };
  for (const AttemptRecord& a : attempts) {
    std::string how = a.resumed_from_step
                          ? "resumed from step " + std::to_string(*a.resumed_from_step)
                          : std::string("fresh start");
    if (a.parent_attempt) how += ", after attempt " + std::to_string(*a.parent_attempt);
    if (!a.slurm_job_id.empty()) how += ", slurm job " + a.slurm_job_id;
    if (a.restart_count > 0) how += ", requeue #" + std::to_string(a.restart_count);
    if (!a.nodes.empty()) how += ", nodes " + Join(a.nodes, ",");
    items.push_back({a.seq, a.started_ms, 0, 0, std::to_string(a.attempt), "-",
                     "attempt " + std::to_string(a.attempt) + " started: " + how});
    if (a.ended_ms) {
      items.push_back({a.ended_seq.value_or(a.seq), *a.ended_ms, 5, 0, std::to_string(a.attempt),
                       "-",
                       "attempt " + std::to_string(a.attempt) + " ended " +
                           StateAndCause(RunStateName(a.state), a.cause)});
    }
  }
  for (const GenerationRecord& g : gens) {
    std::string a = std::to_string(g.attempt), n = std::to_string(g.generation);
    items.push_back({g.seq, g.started_ms, 1, 0, a, n,
                     "generation " + n + " started from step " + std::to_string(g.start_step)});
    if (g.ended_ms) {
      // Older daemons left last_step unset when no step came before the end:
      // then it ended where it started.
      items.push_back({g.ended_seq.value_or(g.seq), *g.ended_ms, 4, 0, a, n,
                       "generation " + n + " ended " + RunStateName(g.state) + " at step " +
                           std::to_string(g.last_step.value_or(g.start_step)) +
                           (g.cause.empty() ? "" : ": " + g.cause)});
    }
  }
  for (const CheckpointRecord& k : ckpts) {
    items.push_back({k.seq, k.committed_ms, 2, k.step, opt(k.attempt), opt(k.generation),
                     "checkpoint step " + std::to_string(k.step) + " committed (" +
                         FormatBytes(k.bytes) + ", world " + std::to_string(k.world_size) +
                         ") " + k.path});
    if (k.state != CheckpointState::kCommitted) {
      items.push_back({k.state_seq.value_or(k.seq), k.state_ms.value_or(k.committed_ms), 2, k.step,
                       opt(k.attempt), opt(k.generation),
                       "checkpoint step " + std::to_string(k.step) + " marked " +
                           CheckpointStateName(k.state) +
                           (k.reason.empty() ? "" : ": " + k.reason)});
    }
  }
  for (const EventRecord& e : events) {
    std::string who;
    if (e.rank) who += "rank " + std::to_string(*e.rank);
    if (!e.node.empty()) who += (who.empty() ? "" : " on ") + NodeLabel(e.node);
    std::string text = (e.incident ? "[" + e.kind + "] " : e.kind + ": ") +
                       (who.empty() ? "" : who + ": ") + e.summary;
    if (!e.action.empty()) text += " -> " + e.action;
    if (e.incident) {
      std::string rb = e.runbook.empty() ? DefaultRunbook(e.kind) : e.runbook;
      if (!rb.empty()) text += " (" + rb + ")";
    }
    items.push_back({e.seq, e.time_ms, 3, e.id, opt(e.attempt), opt(e.generation), text});
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    if (a.seq != b.seq) return a.seq < b.seq;
    if (a.order != b.order) return a.order < b.order;
    return a.tie < b.tie;
  });
  return items;
}

bool HigherIsBetter(const std::string& metric) {
  return metric.find("accuracy") != std::string::npos || metric.find("reward") != std::string::npos ||
         metric.find("margin") != std::string::npos;
}

// Where the run's trainer wrote metrics.jsonl, read from the job config the
// run was launched with (lineage's config_text): the ranks' command's
// `--metrics P`, `--set output.dir=D`, `--set output.metrics=M`, and
// `--config F`'s [output] when not overridden. Relative paths are the ranks'
// (holdfastd's working directory, which lineage does not record), so they are
// tried against the current directory, the run directory and its parents.
// Returns the first that exists, or "" with *looked listing what was tried.
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

}  // namespace

int PrintRecordedStatus(const CliContext& c, const std::string& spec, const std::string& why) {
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
  if (c.json) {
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
                  {"run", RunJson(run)},
                  {"attempt", attempt ? AttemptJson(*attempt) : json(nullptr)},
                  {"slurm", std::move(slurm_json)},
                  {"generation", gen ? GenerationJson(*gen) : json(nullptr)},
                  {"last_checkpoint", *ckpt ? CheckpointJson(**ckpt) : json(nullptr)},
                  {"last_incident", *incident ? EventJson(**incident) : json(nullptr)}});
    return kRunctlOk;
  }
  std::ostream& os = *c.out;
  os << "holdfastd is not running; last recorded state:\n";
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
  return kRunctlOk;
}

int CmdRuns(const CliContext& c, int limit) {
  Result<std::unique_ptr<LineageDb>> db = OpenDb(c);
  if (!db.ok()) return Fail(c, ExitFor(db.status()), db.status().message());
  Result<std::vector<RunRecord>> runs = (*db)->ListRuns(limit);
  if (!runs.ok()) return Fail(c, kRunctlFailure, runs.status().message());
  json out = json::array();
  Table t({"RUN", "NAME", "STATE", "ATTEMPTS", "LAST STEP", "EFFECTIVE", "STARTED", "CAUSE"});
  const int64_t now = c.clock->UnixMs();
  for (const RunRecord& r : *runs) {
    Result<std::vector<AttemptRecord>> attempts = (*db)->Attempts(r.run_id);
    Result<std::vector<GenerationRecord>> gens = (*db)->Generations(r.run_id);
    Result<std::vector<CheckpointRecord>> ckpts = (*db)->Checkpoints(r.run_id);
    Result<std::vector<EventRecord>> events = (*db)->Events(r.run_id, 0);
    for (const Status& s : {attempts.status(), gens.status(), ckpts.status(), events.status()}) {
      if (!s.ok()) return Fail(c, kRunctlFailure, s.message());
    }
    // From lineage alone (no metrics.jsonl: listing stays quick), so the step
    // time is lineage's estimate and checkpoint stalls are not counted; the
    // report's figure can differ by those (docs/report.md).
    const TimeAccount time = AccountTime(*attempts, *gens, *ckpts, *events, {}, now);
    json j = RunJson(r);
    j["attempts"] = attempts->size();
    j["effective_s"] = time.effective_s;
    j["wall_s"] = time.wall_s;
    out.push_back(std::move(j));
    char eff[64];
    std::snprintf(eff, sizeof(eff), "%s (%.0f%%)", FormatDuration(time.effective_s).c_str(),
                  time.wall_s > 0 ? 100.0 * time.effective_s / time.wall_s : 0.0);
    t.Add({r.run_id, r.name, RunStateName(r.state), std::to_string(attempts->size()),
           OptText(r.last_step), time.wall_s > 0 ? eff : "-", FormatTime(r.created_ms), r.cause});
  }
  if (c.json) {
    PrintJson(c, {{"runs", out}});
  } else if (runs->empty()) {
    *c.out << "no runs recorded in " << DbPath(c) << "\n";
  } else {
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
  for (const Item& i : TimelineItems(*attempts, *gens, *ckpts, *events)) t.Add({FormatTime(i.t), i.att, i.gen, i.text});
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

int CmdTriage(const CliContext& c, const std::string& spec) {
  RunLookup l = LookUp(c, spec);
  if (l.exit != kRunctlOk) return l.exit;
  const RunRecord& run = l.run;
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
    j["culprits"] = Culprits(e, parsed.ok() ? *parsed : IncidentEvidence{});
    j["runbook_file"] = BaseName(e.runbook.empty() ? DefaultRunbook(e.kind) : e.runbook);
    PrintJson(c, {{"run", RunJson(run)}, {"incident", j}});
    return kRunctlOk;
  }

  PrintTriage(*c.out, run, e);
  return kRunctlOk;
}

int CmdReport(const CliContext& c, const std::string& spec, const std::string& out_path,
              const std::string& metrics_path) {
  RunLookup l = LookUp(c, spec);
  if (l.exit != kRunctlOk) return l.exit;
  ReportData d;
  d.run = l.run;
  const std::string& id = d.run.run_id;
  auto attempts = l.db->Attempts(id);
  auto gens = l.db->Generations(id);
  auto ckpts = l.db->Checkpoints(id);
  auto events = l.db->Events(id, 0);
  for (const Status& s : {attempts.status(), gens.status(), ckpts.status(), events.status()}) {
    if (!s.ok()) return Fail(c, kRunctlFailure, s.message());
  }
  d.attempts = std::move(attempts).value();
  d.generations = std::move(gens).value();
  d.checkpoints = std::move(ckpts).value();
  d.events = std::move(events).value();
  d.generated_ms = c.clock->UnixMs();

  std::string metrics = metrics_path;
  std::vector<std::string> looked;
  if (metrics.empty()) metrics = FindMetrics(d.run, &looked);
  if (!metrics.empty()) {
    std::ifstream in(metrics);
    if (!in) return Fail(c, kRunctlNotFound, "cannot read metrics file " + metrics);
    d.metrics = ParseMetricsJsonl(in);
    d.metrics_source = metrics;
  } else {
    d.metrics_source = "no metrics.jsonl found (looked for " + Join(looked, ", ") + "; pass --metrics PATH)";
  }
  for (const EventRecord& e : d.events) {
    if (!e.incident) continue;
    std::ostringstream os;
    PrintTriage(os, d.run, e);
    d.triage[e.id] = os.str();
  }
  d.time = AccountTime(d.attempts, d.generations, d.checkpoints, d.events, d.metrics, d.generated_ms);

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
