#include "cli/commands.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "checkpoint/format.h"
#include "common/proc_state.h"
#include "common/run_spec.h"
#include "common/toml_reader.h"
#include "cli/report.h"
#include "daemon/control_protocol.h"
#include "daemon/resume_point.h"
#include "daemon/run_lock.h"
#include "lineage/incident.h"
#include "lineage/lineage_db.h"
#include "scheduler/local_scheduler.h"
#ifdef HOLDFAST_HAVE_SLURM
#include "scheduler/slurm_scheduler.h"
#endif

extern char** environ;

namespace holdfast {

const char kExitCodesHelp[] =
    "Exit codes:\n"
    "  0  ok\n"
    "  1  failure reported by the daemon, a request runctl refuses (the message says why),\n"
    "     or lineage.db unreadable/corrupt\n"
    "  2  usage error (bad flag or argument)\n"
    "  3  run or lineage.db not found (unknown or ambiguous RUN, no such checkpoint)\n"
    "  4  holdfastd not reachable (checkpoint and stop need a live daemon)\n"
    "  5  stop --wait or checkpoint --wait gave up after --timeout\n";

namespace {

using json = nlohmann::json;

// ---- output helpers ----

int Fail(const CliContext& c, int code, const std::string& message) {
  *c.err << "runctl: " << message << "\n";
  return code;
}

// NotFound -> 3, everything else -> 1.
int ExitFor(const Status& s) {
  return s.code() == StatusCode::kNotFound ? kRunctlNotFound : kRunctlFailure;
}

void PrintJson(const CliContext& c, const json& j) {
  *c.out << j.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string FormatBytes(int64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

// holdfastd names nodes by their index ("0", "1"): print those as "node 0";
// a name that says what it is (a hostname, "node0") stays as it is.
std::string NodeLabel(const std::string& node) {
  const bool index = !node.empty() && node.find_first_not_of("0123456789") == std::string::npos;
  return index ? "node " + node : node;
}

std::string Join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

template <typename T>
json OptJson(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

template <typename T>
std::string OptText(const std::optional<T>& v) {
  return v ? std::to_string(*v) : "-";
}

// Columns padded to their widest cell; the last column is not padded.
class Table {
 public:
  explicit Table(std::vector<std::string> headers) { rows_.push_back(std::move(headers)); }
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void Print(std::ostream& os) const {
    std::vector<size_t> width;
    for (const auto& row : rows_) {
      if (width.size() < row.size()) width.resize(row.size(), 0);
      for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
    }
    for (const auto& row : rows_) {
      std::string line;
      for (size_t i = 0; i < row.size(); ++i) {
        line += row[i];
        if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      os << line << "\n";
    }
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

const char* SignalName(int sig) {
  switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGXCPU: return "SIGXCPU";
    default: return nullptr;
  }
}

// The runbook file for an incident kind, when the event does not name one.
std::string DefaultRunbook(const std::string& kind) { return RunbookFor(kind); }

std::string BaseName(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// ---- lineage access ----

std::string DbPath(const CliContext& c) { return c.run_dir + "/lineage.db"; }
std::string SocketPath(const CliContext& c) { return ControlSocketPath(c.run_dir); }

Result<std::unique_ptr<LineageDb>> OpenDb(const CliContext& c) {
  LineageOptions options;
  options.read_only = true;
  return LineageDb::Open(DbPath(c), options);
}

Result<RunRecord> ResolveRun(LineageDb* db, const std::string& spec) { return db->FindRun(spec); }

// An unknown or ambiguous RUN is "not found" (3); anything else (a broken
// file) is 1.
int ExitForRunLookup(const Status& s) {
  return s.code() == StatusCode::kNotFound || s.code() == StatusCode::kInvalidArgument
             ? kRunctlNotFound
             : kRunctlFailure;
}

// Opens the DB and resolves RUN, printing the error; returns an exit code on
// failure.
struct RunLookup {
  std::unique_ptr<LineageDb> db;
  RunRecord run;
  int exit = kRunctlOk;
};
RunLookup LookUp(const CliContext& c, const std::string& spec) {
  RunLookup r;
  Result<std::unique_ptr<LineageDb>> db = OpenDb(c);
  if (!db.ok()) {
    r.exit = Fail(c, ExitFor(db.status()), db.status().message());
    return r;
  }
  r.db = std::move(db).value();
  Result<RunRecord> run = ResolveRun(r.db.get(), spec);
  if (!run.ok()) {
    r.exit = Fail(c, ExitForRunLookup(run.status()), run.status().message());
    return r;
  }
  r.run = std::move(run).value();
  return r;
}

json ParseJsonOr(const std::string& text, json fallback) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? fallback : j;
}

json RunJson(const RunRecord& r) {
  return {{"run_id", r.run_id},
          {"name", r.name},
          {"state", RunStateName(r.state)},
          {"cause", r.cause},
          {"owner_uid", r.owner_uid},
          {"run_dir", r.run_dir},
          {"config_path", r.config_path},
          {"config_hash", r.config_hash},
          {"world_size", r.world_size},
          {"nodes", r.nodes},
          {"scheduler", SchedulerKindName(r.scheduler)},
          {"slurm_job_id", r.slurm_job_id},
          {"created_ms", r.created_ms},
          {"ended_ms", OptJson(r.ended_ms)},
          {"last_step", OptJson(r.last_step)}};
}

json AttemptJson(const AttemptRecord& a) {
  return {{"attempt", a.attempt},
          {"parent_attempt", OptJson(a.parent_attempt)},
          {"slurm_job_id", a.slurm_job_id},
          {"restart_count", a.restart_count},
          {"nodes", a.nodes},
          {"started_ms", a.started_ms},
          {"ended_ms", OptJson(a.ended_ms)},
          {"state", RunStateName(a.state)},
          {"cause", a.cause},
          {"resumed_from_step", OptJson(a.resumed_from_step)}};
}

json GenerationJson(const GenerationRecord& g) {
  return {{"attempt", g.attempt},
          {"generation", g.generation},
          {"started_ms", g.started_ms},
          {"ended_ms", OptJson(g.ended_ms)},
          {"start_step", g.start_step},
          {"last_step", OptJson(g.last_step)},
          {"last_step_ms", OptJson(g.last_step_ms)},
          {"state", RunStateName(g.state)},
          {"cause", g.cause}};
}

json CheckpointJson(const CheckpointRecord& k) {
  return {{"step", k.step},
          {"path", k.path},
          {"bytes", k.bytes},
          {"world_size", k.world_size},
          {"attempt", OptJson(k.attempt)},
          {"generation", OptJson(k.generation)},
          {"committed_ms", k.committed_ms},
          {"state", CheckpointStateName(k.state)},
          {"reason", k.reason},
          {"state_ms", OptJson(k.state_ms)}};
}

json EventJson(const EventRecord& e) {
  return {{"id", e.id},
          {"time_ms", e.time_ms},
          {"kind", e.kind},
          {"incident", e.incident},
          {"attempt", OptJson(e.attempt)},
          {"generation", OptJson(e.generation)},
          {"node", e.node},
          {"rank", OptJson(e.rank)},
          {"summary", e.summary},
          {"evidence", ParseJsonOr(e.evidence_json, json(e.evidence_json))},
          {"action", e.action},
          {"runbook", e.runbook.empty() ? DefaultRunbook(e.kind) : e.runbook}};
}

std::string StateAndCause(const std::string& state, const std::string& cause) {
  return cause.empty() ? state : state + ": " + cause;
}

// ---- status ----

// "job 42 (restart 1) on n1,n3": a Slurm attempt, live or recorded. The
// restart count shows even when 0, so a first run is told from a requeue.
std::string SlurmJobText(const std::string& job_id, int restart_count,
                         const std::vector<std::string>& hosts) {
  return "job " + job_id + " (restart " + std::to_string(restart_count) + ")" +
         (hosts.empty() ? "" : " on " + Join(hosts, ","));
}

void PrintLiveStatus(const CliContext& c, const RunStatus& s) {
  std::ostream& os = *c.out;
  os << "run " << s.run_id << " (" << s.name << ")  " << s.state << "  attempt " << s.attempt
     << ", generation " << s.generation << ", step " << s.step << "\n";
  if (s.scheduler == "slurm") os << "slurm " << SlurmJobText(s.job_id, s.restart_count, s.hosts) << "\n";
  os << "world size " << s.world_size << ", restarts " << s.restarts_used << "/"
     << s.restart_budget << ", last checkpoint step " << OptText(s.last_checkpoint_step)
     << ", up " << FormatDuration(s.uptime_s) << "\n\n";
  // STEPS/S .. WAIT: the rank's pace over the daemon's straggler window. Every
  // rank of a data-parallel run steps at the same rate; a straggler shows as
  // long COMPUTE and short WAIT while the others wait for it.
  Table t({"NODE", "RANK", "PID", "STATE", "STEP", "PHASE", "HEARTBEAT", "LAST STEP", "STEPS/S",
           "STEP P50/P99", "COMPUTE", "WAIT", "WAITING ON", "ISSUED"});
  auto ms = [](const std::optional<double>& v) {
    char buf[32] = "-";
    if (v) std::snprintf(buf, sizeof(buf), "%.0f ms", *v);
    return std::string(buf);
  };
  for (const NodeStatus& n : s.nodes) {
    for (const RankStatus& r : n.ranks) {
      char rate[32] = "-";
      if (r.steps_per_s) std::snprintf(rate, sizeof(rate), "%.2f", *r.steps_per_s);
      char p50_p99[48] = "-";
      if (r.step_ms_p50 && r.step_ms_p99) {
        std::snprintf(p50_p99, sizeof(p50_p99), "%.0f/%.0f ms", *r.step_ms_p50, *r.step_ms_p99);
      }
      t.Add({n.host.empty() ? std::to_string(n.node) : n.host, std::to_string(r.rank), std::to_string(r.pid), r.state,
             std::to_string(r.step), r.phase, FormatDuration(r.heartbeat_age_s) + " ago", ms(r.last_step_ms),
             rate, p50_p99, ms(r.compute_ms_p50), ms(r.wait_ms_p50),
             r.waiting_on && *r.waiting_on != 0 ? "#" + std::to_string(*r.waiting_on) : "-",
             std::to_string(r.collectives_issued)});
    }
  }
  t.Print(os);
  if (!s.roles.empty()) {
    // Role processes ([[roles]]): beside the learner's ranks, restarted alone
    // or with the learner (RESTART), each with its own progress record.
    os << "\nroles:\n";
    Table rt({"ROLE", "INDEX", "PID", "STATE", "RESTART", "RESTARTS", "STEP", "HEARTBEAT"});
    for (const RoleStatus& r : s.roles) {
      rt.Add({r.role, std::to_string(r.index), r.pid > 0 ? std::to_string(r.pid) : "-", r.state, r.restart,
              std::to_string(r.restarts), r.step ? std::to_string(*r.step) : "-",
              r.heartbeat_age_s ? FormatDuration(*r.heartbeat_age_s) + " ago" : "-"});
    }
    rt.Print(os);
  }
  if (s.slowest_rank) {
    os << "\nslowest rank: "
       << (s.slowest_rank_note ? *s.slowest_rank_note : "rank " + std::to_string(*s.slowest_rank)) << "\n";
  }
  if (s.last_incident) {
    const IncidentSummary& i = *s.last_incident;
    os << "\nlast incident: " << i.kind << " at " << FormatTime(i.at_ms) << ": " << i.summary
       << (i.action.empty() ? "" : " -> " + i.action)
       << (i.runbook.empty() ? "" : " (" + i.runbook + ")") << "\n";
  }
}

// The last recorded state of a run, for when no daemon answers.
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

bool MatchesRun(const std::string& spec, const std::string& run_id) { return RunSpecNames(spec, run_id); }

}  // namespace

int CmdStatus(const CliContext& c, const std::string& run) {
  ControlRequest req;
  req.id = 1;
  req.op = control_op::kStatus;
  Result<ControlResponse> resp = CallDaemon(SocketPath(c), req, c.timeout);
  if (!resp.ok()) {
    if (resp.status().code() == StatusCode::kUnavailable ||
        resp.status().code() == StatusCode::kTimeout) {
      return PrintRecordedStatus(c, run, resp.status().message());
    }
    return Fail(c, kRunctlFailure, resp.status().message());
  }
  if (!resp->ok) {
    return Fail(c, kRunctlFailure, "holdfastd refused 'status': " + resp->error_code + ": " +
                                     resp->error.message());
  }
  json raw = json::parse(resp->result_json, nullptr, false);
  std::string daemon_run = raw.is_object() && raw.value("run_id", json()).is_string()
                               ? raw["run_id"].get<std::string>()
                               : "";
  if (!MatchesRun(run, daemon_run)) {
    return PrintRecordedStatus(c, run, "holdfastd in " + c.run_dir + " supervises run " +
                                           daemon_run + ", not " + run);
  }
  if (c.json) {
    PrintJson(c, {{"live", true}, {"source", "holdfastd"}, {"status", raw}});
    return kRunctlOk;
  }
  Result<RunStatus> status = ParseStatusResult(resp->result_json);
  if (!status.ok()) {
    return Fail(c, kRunctlFailure, "holdfastd's status reply is not one runctl understands (" +
                                     status.status().message() + "); try --json");
  }
  PrintLiveStatus(c, *status);
  return kRunctlOk;
}

int CmdRuns(const CliContext& c, int limit) {
  Result<std::unique_ptr<LineageDb>> db = OpenDb(c);
  if (!db.ok()) return Fail(c, ExitFor(db.status()), db.status().message());
  Result<std::vector<RunRecord>> runs = (*db)->ListRuns(limit);
  if (!runs.ok()) return Fail(c, kRunctlFailure, runs.status().message());
  json out = json::array();
  Table t({"RUN", "NAME", "STATE", "ATTEMPTS", "LAST STEP", "EFFECTIVE", "STARTED", "CAUSE"});
  const int64_t now = NowMs();
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

  // One list in the order things were written (lineage's seq: a wall clock
  // that stepped back does not reorder it); what one write recorded at once
  // (ending a generation and its attempt) goes starts, then what happens
  // inside them, then ends.
  struct Item {
    int64_t seq;
    int64_t t;
    int order;
    int64_t tie;
    std::string att, gen, text;
  };
  std::vector<Item> items;
  auto opt = [](const std::optional<int>& v) { return v ? std::to_string(*v) : std::string("-"); };
  for (const AttemptRecord& a : *attempts) {
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
  for (const GenerationRecord& g : *gens) {
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
  for (const CheckpointRecord& k : *ckpts) {
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
  for (const EventRecord& e : *events) {
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
  std::ostream& os = *c.out;
  os << "run " << run.run_id << " (" << run.name << ")  "
     << StateAndCause(RunStateName(run.state), run.cause) << "\n";
  os << "dir " << run.run_dir << ", world size " << run.world_size << ", "
     << SchedulerKindName(run.scheduler)
     << (run.slurm_job_id.empty() ? "" : " job " + run.slurm_job_id) << ", config "
     << run.config_path << "\n\n";
  Table t({"TIME", "ATT", "GEN", "WHAT"});
  for (const Item& i : items) t.Add({FormatTime(i.t), i.att, i.gen, i.text});
  t.Print(os);
  if (max_events > 0 && static_cast<int>(events->size()) == max_events) {
    os << "(only the newest " << max_events << " events; --events 0 shows all)\n";
  }
  return kRunctlOk;
}

namespace {

// "rank 1 on node 0, pid 4242: collective at step 141 (for 1m02s), waiting on
// collective #9001 (allreduce), 9001 issued, heartbeat 1m01s ago, process stopped"
std::string DescribeRankEvidence(const RankEvidence& r) {
  std::string s = "rank " + (r.rank >= 0 ? std::to_string(r.rank) : std::string("?"));
  if (!r.host.empty()) {
    s += " on " + r.host;
  } else if (r.node >= 0) {
    s += " on node " + std::to_string(r.node);
  }
  if (r.pid > 0) s += ", pid " + std::to_string(r.pid);
  if (!r.phase.empty()) {
    s += ": " + r.phase;
    if (r.step) s += " at step " + std::to_string(*r.step);
    if (r.phase_age_s) s += " (for " + FormatDuration(*r.phase_age_s) + ")";
  } else if (!r.record_valid && !r.pace) {
    s += ": no progress reported";
  }
  if (r.waiting_on > 0) {
    s += ", waiting on collective #" + std::to_string(r.waiting_on);
    // The kind of that collective, from the ring of recent ones.
    for (const CollectiveEvidence& c : r.ring) {
      if (c.seq == r.waiting_on && !c.kind.empty()) s += " (" + c.kind + ")";
    }
  }
  if (r.collectives_issued) s += ", " + std::to_string(*r.collectives_issued) + " issued";
  if (r.heartbeat_age_s) s += ", heartbeat " + FormatDuration(*r.heartbeat_age_s) + " ago";
  if (r.last_step_ms && *r.last_step_ms > 0) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.0f ms", *r.last_step_ms);
    s += ", last step " + std::string(buf);
  }
  if (!r.alive) s += ", exited";
  if (r.proc_state.size() == 1) {
    if (const char* words = ProcStateWords(ProcStateFromLetter(r.proc_state[0]))) s += ", " + std::string(words);
  }
  if (r.record_torn) s += ", record torn mid-update";
  return s;
}

// Culprits: the evidence's list, else its "rank", else the event's rank.
std::vector<int> Culprits(const EventRecord& e, const IncidentEvidence& ev) {
  std::vector<int> culprits = ev.culprits;
  if (culprits.empty() && ev.rank) culprits.push_back(*ev.rank);
  if (culprits.empty() && e.rank) culprits.push_back(*e.rank);
  return culprits;
}

// `runctl triage`'s text for one incident of `run` (the report shows the
// same text for each of its incidents).
void PrintTriage(std::ostream& os, const RunRecord& run, const EventRecord& e) {
  const std::string runbook = e.runbook.empty() ? DefaultRunbook(e.kind) : e.runbook;
  // Evidence this runctl cannot read is shown as it is, with why.
  const Result<IncidentEvidence> parsed = ParseIncidentEvidence(e.evidence_json);
  const IncidentEvidence ev = parsed.ok() ? *parsed : IncidentEvidence{};
  const std::vector<int> culprits = Culprits(e, ev);
  os << "run       " << run.run_id << " (" << run.name << ")  "
     << StateAndCause(RunStateName(run.state), run.cause) << "\n";
  std::string where;
  if (e.attempt) where += "attempt " + std::to_string(*e.attempt);
  if (e.generation) where += (where.empty() ? "" : ", ") + std::string("generation ") +
                             std::to_string(*e.generation);
  if (!e.node.empty()) where += (where.empty() ? "" : ", ") + std::string("node ") + e.node;
  os << "incident  " << e.kind << " at " << FormatTime(e.time_ms)
     << (where.empty() ? "" : " (" + where + ")") << "\n";
  os << "summary   " << e.summary << "\n";

  if (!ev.role.empty()) {
    // A role process: its evidence holds it as the one "rank", numbered by its index.
    const std::string who = "role " + ev.role + "[" + (ev.role_index ? std::to_string(*ev.role_index) : "?") + "]";
    std::string line = who;
    for (const RankEvidence& r : ev.ranks) {
      const std::string d = DescribeRankEvidence(r);
      const std::string prefix = "rank " + (r.rank >= 0 ? std::to_string(r.rank) : std::string("?"));
      line = who + (d.rfind(prefix, 0) == 0 ? d.substr(prefix.size()) : ": " + d);
    }
    os << "culprit   " << line << "\n";
  }
  for (int cr : culprits) {
    std::string line = "rank " + std::to_string(cr);
    for (const RankEvidence& r : ev.ranks) {
      if (r.rank == cr) line = DescribeRankEvidence(r);
    }
    os << "culprit   " << line << "\n";
  }
  // A health report's "status" is its worst check's, not how a rank ended.
  std::string exit = e.kind == event_kind::kHealth ? std::string() : ev.exit_status;
  const int sig = ev.signal.value_or(0);
  const int code = ev.exit_code.value_or(-1);
  if (exit.empty() && sig > 0) {
    const char* name = SignalName(sig);
    exit = "killed by signal " + std::to_string(sig) + (name ? std::string(" (") + name + ")" : "");
  } else if (exit.empty() && code >= 0) {
    exit = "exited with code " + std::to_string(code);
  }
  if (!exit.empty()) os << "exit      " << exit << "\n";
  // checkpoint_failed: what each rank's save reported.
  for (const SaveFailureEvidence& r : ev.reports) {
    if (r.error.empty()) continue;
    os << "error     " << (r.rank ? "rank " + std::to_string(*r.rank) + ": " : "") << r.error << "\n";
  }
  if (ev.stalled_s) {
    os << "stalled   no step for " << FormatDuration(*ev.stalled_s);
    if (ev.timeout_s) {
      os << " (" << (ev.allowance.empty() ? "step" : ev.allowance) << " allowance "
         << FormatDuration(*ev.timeout_s) << ")";
    }
    os << "\n";
  }
  bool header = false;
  for (const RankEvidence& r : ev.ranks) {
    if (!ev.role.empty()) break;  // the role process, shown above
    if (std::find(culprits.begin(), culprits.end(), r.rank) != culprits.end()) continue;
    if (!header) os << "others:\n";
    header = true;
    os << "  " << DescribeRankEvidence(r) << "\n";
  }
  if (!ev.log_tail.empty()) {
    os << "last log lines:\n";
    for (const std::string& line : ev.log_tail) os << "  | " << line << "\n";
  }
  if (!parsed.ok()) {
    os << "evidence  " << e.evidence_json << "\n"
       << "          (" << parsed.status().message() << ")\n";
  }
  os << "action    " << (e.action.empty() ? "(none recorded)" : e.action) << "\n";
  if (runbook.empty()) {
    os << "runbook   none for '" << e.kind << "' (see runbooks/ in the Holdfast source tree)\n";
  } else {
    os << "runbook   " << BaseName(runbook) << "  (" << runbook << " in the Holdfast source tree)\n";
  }
}

}  // namespace

bool HigherIsBetter(const std::string& metric) {
  return metric.find("accuracy") != std::string::npos || metric.find("reward") != std::string::npos ||
         metric.find("margin") != std::string::npos;
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

namespace {

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
  d.generated_ms = NowMs();

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

namespace {

// The run id to send to the daemon for RUN: lineage.db's when it can resolve
// it (the daemon refuses another run's id); without a lineage.db, RUN as
// given, or "" (the daemon alone decides). Returns an exit code on failure.
int RunIdForDaemon(const CliContext& c, const std::string& spec, std::string* run_id) {
  Result<std::unique_ptr<LineageDb>> db = OpenDb(c);
  if (db.ok()) {
    Result<RunRecord> run = ResolveRun(db->get(), spec);
    if (!run.ok()) return Fail(c, ExitForRunLookup(run.status()), run.status().message());
    *run_id = run->run_id;
  } else if (db.status().code() != StatusCode::kNotFound) {
    return Fail(c, kRunctlFailure, db.status().message());
  } else if (!IsLatestRunSpec(spec)) {
    *run_id = spec;
  }
  return kRunctlOk;
}

bool IsUnreachable(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kTimeout;
}

}  // namespace

namespace {

// A live line on the terminal while a person waits ("waiting for the
// checkpoint of step 140 to commit  [  ###     ]  3.2 s"), redrawn in place on
// stderr; silent when stderr is not a terminal or the output is JSON.
class WaitLine {
 public:
  WaitLine(const CliContext& c, std::string what)
      : on_(!c.json && isatty(STDERR_FILENO) == 1), what_(std::move(what)), t0_(std::chrono::steady_clock::now()) {}
  ~WaitLine() { Done(); }
  void Tick() {
    if (!on_) return;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    constexpr int kWidth = 12, kBlock = 3;
    const int pos = static_cast<int>(s * 4) % (2 * (kWidth - kBlock));  // bounces: no end is known
    const int at = pos < kWidth - kBlock ? pos : 2 * (kWidth - kBlock) - pos;
    std::string bar(kWidth, ' ');
    for (int i = 0; i < kBlock; ++i) bar[at + i] = '#';
    std::fprintf(stderr, "\r%s  [%s] %6.1f s", what_.c_str(), bar.c_str(), s);
    std::fflush(stderr);
    drawn_ = true;
  }
  void Done() {
    if (drawn_) std::fprintf(stderr, "\r%*s\r", static_cast<int>(what_.size()) + 26, "");
    drawn_ = false;
  }

 private:
  bool on_;
  bool drawn_ = false;
  std::string what_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace

int CmdCheckpoint(const CliContext& c, const std::string& spec, bool wait, std::chrono::milliseconds wait_timeout) {
  std::string run_id;
  if (int exit = RunIdForDaemon(c, spec, &run_id); exit != kRunctlOk) return exit;
  ControlRequest req;
  req.id = 1;
  req.op = control_op::kCheckpoint;
  req.args_json = run_id.empty() ? "{}" : json({{"run_id", run_id}}).dump();
  Result<ControlResponse> resp = CallDaemon(SocketPath(c), req, c.timeout);
  if (!resp.ok()) {
    int code = IsUnreachable(resp.status()) ? kRunctlUnreachable : kRunctlFailure;
    return Fail(c, code, "cannot ask holdfastd for a checkpoint: " + resp.status().message());
  }
  if (!resp->ok) {
    return Fail(c, kRunctlFailure,
                "holdfastd refused: " + resp->error_code + ": " + resp->error.message());
  }
  json result = json::parse(resp->result_json, nullptr, false);
  int64_t requested = -1;  // -1: the daemon did not say
  if (result.is_object() && result.value("requested_at_step", json()).is_number()) {
    requested = result["requested_at_step"].get<int64_t>();
  }
  if (wait) {
    // The ranks save after the step they all agree on: the first commit at or
    // after the requested step is this checkpoint.
    using Clock = std::chrono::steady_clock;
    const Clock::time_point t0 = Clock::now(), deadline = t0 + wait_timeout;
    WaitLine line(c, "waiting for the checkpoint" +
                         (requested >= 0 ? " (requested at step " + std::to_string(requested) + ")" : std::string()) +
                         " to commit");
    for (;;) {
      ControlRequest sreq;
      sreq.id = 2;
      sreq.op = control_op::kStatus;
      Result<ControlResponse> sresp = CallDaemon(SocketPath(c), sreq, c.timeout);
      if (!sresp.ok() && IsUnreachable(sresp.status())) {
        line.Done();
        return Fail(c, kRunctlUnreachable,
                    "holdfastd stopped answering before the checkpoint committed: `runctl lineage` tells whether it "
                    "did");
      }
      if (sresp.ok() && sresp->ok) {
        Result<RunStatus> st = ParseStatusResult(sresp->result_json);
        if (st.ok() && st->last_checkpoint_step && *st->last_checkpoint_step >= requested) {
          line.Done();
          const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
          if (c.json) {
            PrintJson(c, {{"run_id", run_id}, {"result", result}, {"committed_step", *st->last_checkpoint_step},
                          {"waited_s", secs}});
          } else {
            char buf[32];
            std::snprintf(buf, sizeof(buf), "%.1f", secs);
            *c.out << "checkpoint of step " << *st->last_checkpoint_step << " committed (waited " << buf << " s)\n";
          }
          return kRunctlOk;
        }
      }
      if (Clock::now() >= deadline) {
        line.Done();
        return Fail(c, kRunctlStillRunning,
                    "no checkpoint committed within " +
                        std::to_string(std::chrono::duration_cast<std::chrono::seconds>(wait_timeout).count()) +
                        "s (a large state takes a while; a failed save is in `runctl lineage`): wait longer with "
                        "--timeout");
      }
      line.Tick();
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
  }
  if (c.json) {
    PrintJson(c, {{"run_id", run_id}, {"result", result}});
    return kRunctlOk;
  }
  std::string step = requested >= 0 ? std::to_string(requested) : "?";
  *c.out << "checkpoint requested at step " << step << "; `runctl --run-dir " << c.run_dir
         << " lineage " << (run_id.empty() ? "latest" : run_id)
         << "` shows it once it is committed\n";
  return kRunctlOk;
}

namespace {

// How often `stop --wait` looks again; stopping takes seconds to minutes
// (a checkpoint is saved first), so a few looks a second cost nothing.
constexpr std::chrono::milliseconds kStopPollInterval{250};
// After the daemon stops answering, how long lineage.db may still say
// "running" (the daemon's last write may land just after its socket closes)
// before runctl calls it a daemon that died without recording an end.
constexpr std::chrono::milliseconds kDaemonGoneGrace{2000};

// The run's row as lineage.db holds it now (a fresh read-only open per look,
// so each sees the daemon's newest commit).
Result<RunRecord> ReadRun(const CliContext& c, const std::string& run_id) {
  HF_ASSIGN_OR_RETURN(std::unique_ptr<LineageDb> db, OpenDb(c));
  return db->GetRun(run_id);
}

int PrintStopped(const CliContext& c, const RunRecord& run, const json& result) {
  std::optional<int64_t> ckpt;
  if (Result<std::unique_ptr<LineageDb>> db = OpenDb(c); db.ok()) {
    Result<std::optional<CheckpointRecord>> k = (*db)->NewestCommittedCheckpoint(run.run_id);
    if (k.ok() && k->has_value()) ckpt = (*k)->step;
  }
  const int exit = run.state == RunState::kFailed ? kRunctlFailure : kRunctlOk;
  if (c.json) {
    PrintJson(c, {{"run_id", run.run_id},
                  {"result", result},
                  {"final", RunJson(run)},
                  {"last_checkpoint_step", OptJson(ckpt)}});
    return exit;
  }
  *c.out << "run " << run.run_id << " (" << run.name << ") ended "
         << StateAndCause(RunStateName(run.state), run.cause) << "\n"
         << "  last step " << OptText(run.last_step) << ", newest committed checkpoint "
         << (ckpt ? "step " + std::to_string(*ckpt) : std::string("none")) << "\n";
  if (run.state != RunState::kSucceeded) {
    *c.out << "  continue it:  runctl --run-dir " << c.run_dir << " resume " << run.run_id << "\n";
  }
  return exit;
}

}  // namespace

int CmdStop(const CliContext& c, const std::string& spec, bool wait,
            std::chrono::milliseconds wait_timeout) {
  std::string run_id;
  if (spec.empty()) {
    // No RUN: the run the live daemon supervises, which --wait needs to name.
    ControlRequest st;
    st.id = 1;
    st.op = control_op::kStatus;
    Result<ControlResponse> resp = CallDaemon(SocketPath(c), st, c.timeout);
    if (!resp.ok()) {
      return Fail(c, IsUnreachable(resp.status()) ? kRunctlUnreachable : kRunctlFailure,
                  "cannot ask holdfastd to stop its run: " + resp.status().message() +
                      " (`runctl status` shows the last recorded state)");
    }
    json raw = resp->ok ? json::parse(resp->result_json, nullptr, false) : json();
    if (raw.is_object() && raw.value("run_id", json()).is_string()) {
      run_id = raw["run_id"].get<std::string>();
    }
  } else if (int exit = RunIdForDaemon(c, spec, &run_id); exit != kRunctlOk) {
    return exit;
  }
  const std::string which = run_id.empty() ? std::string("its run") : "run " + run_id;

  ControlRequest req;
  req.id = 1;
  req.op = control_op::kStop;
  req.args_json = run_id.empty() ? "{}" : json({{"run_id", run_id}}).dump();
  Result<ControlResponse> resp = CallDaemon(SocketPath(c), req, c.timeout);
  if (!resp.ok()) {
    return Fail(c, IsUnreachable(resp.status()) ? kRunctlUnreachable : kRunctlFailure,
                "cannot ask holdfastd to stop " + which + ": " + resp.status().message() +
                    " (`runctl status` shows the last recorded state)");
  }
  if (!resp->ok) {
    return Fail(c, kRunctlFailure,
                "holdfastd refused to stop " + which + ": " + resp->error_code + ": " +
                    resp->error.message());
  }
  json result = json::parse(resp->result_json, nullptr, false);
  if (!c.json) {
    *c.out << "asked holdfastd to stop " << which
           << ": the ranks checkpoint and stop; `runctl --run-dir " << c.run_dir
           << " status` to follow\n";
  }
  if (!wait) {
    if (c.json) PrintJson(c, {{"run_id", run_id}, {"result", result}});
    return kRunctlOk;
  }
  if (!c.json) *c.out << "waiting for " << which << " to stop...\n" << std::flush;
  WaitLine line(c, "stopping " + which);

  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + wait_timeout;
  bool gone = false;             // the daemon did not answer the last ping
  Clock::time_point gone_since;  // since when, while `gone`
  for (;;) {
    bool recorded = false;  // lineage.db holds the run (and says it still runs)
    if (!run_id.empty()) {
      Result<RunRecord> run = ReadRun(c, run_id);
      if (run.ok() && run->state != RunState::kRunning) return PrintStopped(c, *run, result);
      recorded = run.ok() || run.status().code() == StatusCode::kUnavailable;
      // A busy file is a writer mid-commit: look again. Anything else is final.
      if (!run.ok() && run.status().code() != StatusCode::kUnavailable &&
          run.status().code() != StatusCode::kNotFound) {
        return Fail(c, kRunctlFailure, run.status().message());
      }
    }
    const Clock::time_point now = Clock::now();
    ControlRequest ping;
    ping.id = 2;
    ping.op = control_op::kPing;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    Result<ControlResponse> alive = CallDaemon(
        SocketPath(c), ping, std::min(c.timeout, std::max(left, std::chrono::milliseconds(100))));
    if (alive.ok() || alive.status().code() == StatusCode::kTimeout) {
      gone = false;  // answering, or too busy to: still stopping
    } else if (!gone) {
      gone = true;
      gone_since = now;
    }
    if (gone && !recorded) {
      // Nothing to read the outcome from: the daemon's exit is all there is.
      if (c.json) {
        PrintJson(c, {{"run_id", run_id}, {"result", result}, {"final", nullptr}});
      } else {
        *c.out << "holdfastd has exited; " << DbPath(c) << " holds no record of " << which
               << ", so how it ended is not known here\n";
      }
      return kRunctlOk;
    }
    if (gone && now - gone_since >= kDaemonGoneGrace) {
      return Fail(c, kRunctlFailure,
                  "holdfastd in " + c.run_dir + " stopped answering, but " + DbPath(c) +
                      " still records run " + run_id +
                      " as running: the daemon ended without recording how (see " + c.run_dir +
                      "/holdfastd.log; `runctl status " + run_id + "`)");
    }
    if (now >= deadline) {
      return Fail(c, kRunctlStillRunning,
                  which + " is still running after " +
                      std::to_string(std::chrono::duration_cast<std::chrono::seconds>(wait_timeout)
                                         .count()) +
                      "s (holdfastd is still stopping it: a large checkpoint takes a while); "
                      "`runctl status` to follow, or wait longer with --timeout");
    }
    line.Tick();
    std::this_thread::sleep_for(std::min<Clock::duration>(kStopPollInterval, deadline - now));
  }
}

namespace {

std::string SelfDir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  std::string path(buf, static_cast<size_t>(n));
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

bool IsExecutable(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

// `env` (a test's or operator's override), next to runctl, ../<sibling>/ of
// runctl's folder (the build tree), then PATH. `looked` lists where it looked.
std::string FindTool(const std::string& name, const char* env, const std::string& sibling,
                     std::vector<std::string>* looked) {
  const char* forced = std::getenv(env);
  if (forced != nullptr && *forced != '\0') {
    looked->push_back(std::string("$") + env + "=" + forced);
    return IsExecutable(forced) ? forced : "";
  }
  std::string self = SelfDir();
  if (!self.empty()) {
    for (const std::string& p : {self + "/" + name, self + "/../" + sibling + "/" + name}) {
      looked->push_back(p);
      if (IsExecutable(p)) return p;
    }
  }
  looked->push_back("PATH");
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) continue;
    std::string p = dir + "/" + name;
    if (IsExecutable(p)) return p;
  }
  return "";
}

std::vector<char*> Argv(std::vector<std::string>& args) {
  std::vector<char*> v;
  for (std::string& a : args) v.push_back(a.data());
  v.push_back(nullptr);
  return v;
}

}  // namespace

int CmdResume(const CliContext& c, const std::string& spec, std::optional<int64_t> from_step, bool force,
              bool wait, std::chrono::milliseconds wait_timeout) {
  RunLookup l = LookUp(c, spec);
  if (l.exit != kRunctlOk) return l.exit;
  const RunRecord& run = l.run;
  if (run.state == RunState::kSucceeded && !force) {
    return Fail(c, kRunctlFailure,
                "run " + run.run_id + " succeeded" + (run.cause.empty() ? "" : " (" + run.cause + ")") +
                    ": there is nothing left to train, and resuming it would only add an empty "
                    "attempt. To train it further anyway (e.g. after raising its step limit), "
                    "add --force");
  }
  if (from_step) {
    Result<std::vector<CheckpointRecord>> ckpts = l.db->Checkpoints(run.run_id);
    if (!ckpts.ok()) return Fail(c, kRunctlFailure, ckpts.status().message());
    // What holdfastd --from-step checks too (daemon/resume_point.h).
    if (Status ok = CheckResumeStep(run.run_id, *ckpts, *from_step, c.run_dir); !ok.ok()) {
      return Fail(c, kRunctlNotFound, ok.message());
    }
  }
  // One daemon per run directory: refuse while one holds the run's lock —
  // also when it does not answer (stopped, or busy).
  if (std::optional<pid_t> holder = RunLock::Holder(c.run_dir); holder.has_value()) {
    return Fail(c, kRunctlFailure,
                "holdfastd (pid " + std::to_string(*holder) + ") is supervising " + c.run_dir +
                    " (it holds " + RunLock::LockPath(c.run_dir, 0) +
                    ", answering or not); stop it first (runctl stop, or kill it), then resume");
  }

  if (run.scheduler == SchedulerKind::kSlurm) {
    // A Slurm run resumes as a Slurm job: its queued job released, or its saved submission again.
#ifdef HOLDFAST_HAVE_SLURM
    Result<std::string> what = ResumeSlurmRun(c.run_dir, run.run_id, run.slurm_job_id, from_step);
    if (!what.ok()) return Fail(c, kRunctlFailure, what.status().message());
    if (c.json) {
      PrintJson(c, {{"run_id", run.run_id}, {"slurm", *what}, {"from_step", OptJson(from_step)}});
      return kRunctlOk;
    }
    *c.out << *what << "\n  status:  runctl --run-dir " << c.run_dir << " status\n";
    return kRunctlOk;
#else
    return Fail(c, kRunctlFailure, "run " + run.run_id + " runs under Slurm, and this runctl was built without "
                                   "libslurm: rebuild with libslurm-dev installed, or sbatch the run's script again");
#endif
  }
  std::vector<std::string> looked;
  std::string daemon = FindTool("holdfastd", "RUNCTL_HOLDFASTD", "daemon", &looked);
  if (daemon.empty()) {
    return Fail(c, kRunctlFailure, "holdfastd not found (looked in " + Join(looked, ", ") + ")");
  }
  std::vector<std::string> args = {"--run-dir", c.run_dir, "--resume", run.run_id};
  if (from_step) {
    args.push_back("--from-step");
    args.push_back(std::to_string(*from_step));
  }
  const std::string log = c.run_dir + "/holdfastd.log";
  // The local scheduler's detached start: its own session, only stdio
  // inherited, an exec failure reported here.
  if (Status s = StartDetachedDaemon(daemon, args, log); !s.ok()) return Fail(c, kRunctlFailure, s.message());

  const std::string from = from_step ? "step " + std::to_string(*from_step)
                                     : std::string("the newest committed checkpoint");
  json started = {{"run_id", run.run_id}, {"daemon", daemon}, {"from_step", OptJson(from_step)}, {"log", log}};
  if (c.json && !wait) {
    PrintJson(c, started);
    return kRunctlOk;
  }
  if (!c.json) {
    *c.out << "started holdfastd resuming run " << run.run_id << " from "
           << from << " as a new attempt\n"
           << "  follow it:  tail -f " << log << "\n"
           << "  status:     runctl --run-dir " << c.run_dir << " status\n";
  }
  if (!wait) return kRunctlOk;
  // Until the resumed ranks have restored and stepped: every rank running and
  // the slowest one past the step it was first seen at.
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = Clock::now(), deadline = t0 + wait_timeout;
  WaitLine line(c, "resuming run " + run.run_id + " (restore, then the first step)");
  std::optional<int64_t> first_seen;
  for (;;) {
    ControlRequest sreq;
    sreq.id = 3;
    sreq.op = control_op::kStatus;
    Result<ControlResponse> sresp = CallDaemon(SocketPath(c), sreq, c.timeout);
    if (sresp.ok() && sresp->ok) {
      Result<RunStatus> st = ParseStatusResult(sresp->result_json);
      if (st.ok() && !st->nodes.empty()) {
        bool running = true;
        int64_t slowest = INT64_MAX;
        for (const NodeStatus& n : st->nodes) {
          for (const RankStatus& r : n.ranks) {
            running = running && r.state == "running";
            slowest = std::min(slowest, r.step);
          }
        }
        if (running && slowest != INT64_MAX) {
          if (!first_seen) first_seen = slowest;
          if (slowest > *first_seen) {
            line.Done();
            char buf[32];
            std::snprintf(buf, sizeof(buf), "%.1f", std::chrono::duration<double>(Clock::now() - t0).count());
            if (c.json) {
              started["training_at_step"] = slowest;
              PrintJson(c, started);
            } else {
              *c.out << "run " << run.run_id << " is training again at step " << slowest << " (waited " << buf
                     << " s)\n";
            }
            return kRunctlOk;
          }
        }
      }
    }
    Result<RunRecord> now_run = ReadRun(c, run.run_id);
    if (Clock::now() - t0 > std::chrono::seconds(5) && now_run.ok() && now_run->state != RunState::kRunning) {
      line.Done();
      return Fail(c, kRunctlFailure, "the resumed run ended before it trained (" + std::string(RunStateName(now_run->state)) +
                                         (now_run->cause.empty() ? "" : ": " + now_run->cause) + "); see " + log);
    }
    if (Clock::now() >= deadline) {
      line.Done();
      return Fail(c, kRunctlStillRunning, "the resumed run has not completed a step within " +
                                              std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                                                 wait_timeout).count()) +
                                              "s; follow it with `runctl status` or " + log);
    }
    line.Tick();
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

int CmdHealth(const CliContext& c, const std::vector<std::string>& passthrough) {
  std::vector<std::string> looked;
  std::string tool = FindTool("holdfast-health", "RUNCTL_HOLDFAST_HEALTH", "health", &looked);
  if (tool.empty()) {
    return Fail(c, kRunctlFailure,
                "holdfast-health not found (looked in " + Join(looked, ", ") + ")");
  }
  std::vector<std::string> args = {tool};
  if (c.json) args.push_back("--json");
  args.insert(args.end(), passthrough.begin(), passthrough.end());
  std::vector<char*> argv = Argv(args);
  c.out->flush();
  pid_t pid = 0;
  int rc = posix_spawn(&pid, tool.c_str(), nullptr, nullptr, argv.data(), environ);
  if (rc != 0) return Fail(c, kRunctlFailure, ErrnoError("run " + tool, rc).message());
  int ws = 0;
  while (waitpid(pid, &ws, 0) < 0) {
    if (errno != EINTR) return Fail(c, kRunctlFailure, ErrnoError("wait for " + tool, errno).message());
  }
  if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0) return kRunctlOk;
  if (WIFSIGNALED(ws)) {
    return Fail(c, kRunctlFailure, "holdfast-health was killed by signal " + std::to_string(WTERMSIG(ws)));
  }
  return kRunctlFailure;  // a failed check: holdfast-health has said which
}

}  // namespace holdfast
