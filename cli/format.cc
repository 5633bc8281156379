#include "cli/format.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <csignal>
#include <cstdio>

#include "cli/rank_summary.h"
#include "cli/report.h"
#include "cli/runbook_path.h"
#include "common/proc_state.h"
#include "common/run_files.h"

namespace holdfast {

namespace {

using json = nlohmann::json;

json ParseJsonOr(const std::string& text, json fallback) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? fallback : j;
}

}  // namespace

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

std::string FormatHours(double h) {
  char buf[48];
  if (!(h > 0)) return "0";
  if (h < 1) {
    // Two significant digits, never an exponent: 0.011, 0.000059.
    const int decimals = std::min(9, std::max(2, 1 - static_cast<int>(std::floor(std::log10(h)))));
    std::snprintf(buf, sizeof(buf), "%.*f", decimals, h);
  } else {
    std::snprintf(buf, sizeof(buf), h < 100 ? "%.1f" : "%.0f", h);
  }
  return buf;
}

std::string NodeLabel(const std::string& node) {
  const bool index = !node.empty() && node.find_first_not_of("0123456789") == std::string::npos;
  return index ? "node " + node : node;
}

std::string Join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

void Table::Print(std::ostream& os) const {
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

std::string DefaultRunbook(const std::string& kind) { return RunbookFor(kind); }

std::string BaseName(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string ShellWord(const std::string& word) {
  const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return std::isalnum(c) || std::strchr("/._-+,:=@%", ch) != nullptr;
  });
  if (plain) return word;
  std::string out = "'";
  for (char ch : word) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
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
          {"resumed_from_step", OptJson(a.resumed_from_step)},
          {"gpus", OptJson(a.gpus)}};
}

json GenerationJson(const GenerationRecord& g) {
  return {{"attempt", g.attempt},
          {"generation", g.generation},
          {"started_ms", g.started_ms},
          {"ended_ms", OptJson(g.ended_ms)},
          {"start_step", g.start_step},
          {"restore_tier", g.restore_tier.empty() ? json(nullptr) : json(g.restore_tier)},
          {"mesh", g.mesh.empty() ? json(nullptr) : json(g.mesh)},
          {"last_step", OptJson(g.last_step)},
          {"last_step_ms", OptJson(g.last_step_ms)},
          {"state", RunStateName(g.state)},
          {"cause", g.cause}};
}

json CheckpointJson(const CheckpointRecord& k) {
  return {{"step", k.step},
          {"path", k.path},
          {"bytes", k.bytes},
          {"owner", CheckpointOwnerName(k.owner)},
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

std::string StateAndCause(const std::string& state, const std::string& cause) {
  return cause.empty() ? state : state + ": " + cause;
}

std::string SlurmJobText(const std::string& job_id, int restart_count,
                         const std::vector<std::string>& hosts) {
  return "job " + job_id + " (restart " + std::to_string(restart_count) + ")" +
         (hosts.empty() ? "" : " on " + Join(hosts, ","));
}

namespace {

// Every column of the ranks `sel` selects (--all, --rank, --node): the full
// table that the default view summarises.
void PrintRankTable(std::ostream& os, const RunStatus& s, const RankSelection& sel) {
  // STEPS/S .. WAIT: the rank's pace over the daemon's straggler window. Every
  // rank of a data-parallel run steps at the same rate; a straggler shows as
  // long COMPUTE and short WAIT while the others wait for it.
  std::vector<std::string> columns = {"NODE", "RANK", "PID", "STATE", "STEP", "PHASE", "HEARTBEAT", "LAST STEP",
                                      "STEPS/S", "STEP P50/P99", "COMPUTE", "WAIT", "WAITING ON", "ISSUED"};
  // With model parallelism, where each rank sits in the mesh (after RANK).
  const bool mesh = !s.mesh.empty();
  if (mesh) columns.insert(columns.begin() + 2, "MESH (TP, PP, DP)");
  Table t(columns);
  auto ms = [](const std::optional<double>& v) {
    char buf[32] = "-";
    if (v) std::snprintf(buf, sizeof(buf), "%.0f ms", *v);
    return std::string(buf);
  };
  for (const NodeStatus& n : s.nodes) {
    for (const RankStatus& r : n.ranks) {
      RankRow key;
      key.rank = r.rank;
      key.node = n.node;
      key.host = n.host;
      if (!Selected(sel, key)) continue;
      char rate[32] = "-";
      if (r.steps_per_s) std::snprintf(rate, sizeof(rate), "%.2f", *r.steps_per_s);
      char p50_p99[48] = "-";
      if (r.step_ms_p50 && r.step_ms_p99) {
        std::snprintf(p50_p99, sizeof(p50_p99), "%.0f/%.0f ms", *r.step_ms_p50, *r.step_ms_p99);
      }
      std::vector<std::string> row = {n.host.empty() ? std::to_string(n.node) : n.host, std::to_string(r.rank),
                                      std::to_string(r.pid), r.state, std::to_string(r.step), r.phase,
                                      FormatDuration(r.heartbeat_age_s) + " ago", ms(r.last_step_ms), rate, p50_p99,
                                      ms(r.compute_ms_p50), ms(r.wait_ms_p50),
                                      r.waiting_on && *r.waiting_on != 0 ? "#" + std::to_string(*r.waiting_on) : "-",
                                      std::to_string(r.collectives_issued)};
      if (mesh) row.insert(row.begin() + 2, r.place.empty() ? "-" : r.place);
      t.Add(row);
    }
  }
  t.Print(os);
}

}  // namespace

void PrintLiveStatus(std::ostream& os, const RunStatus& s, const RankSelection& sel) {
  os << "run " << s.run_id << " (" << s.name << ")  " << s.state << "  attempt " << s.attempt
     << ", generation " << s.generation;
  if (s.restored_step && s.restore_tier && *s.restore_tier != "none") {
    os << " (from step " << *s.restored_step << ", " << RestoreTierText(*s.restore_tier) << ")";
  }
  os << ", step " << s.step << "\n";
  if (s.scheduler == "slurm") os << "slurm " << SlurmJobText(s.job_id, s.restart_count, s.hosts) << "\n";
  os << "world size " << s.world_size << (s.mesh.empty() ? "" : " (mesh " + s.mesh + ")") << ", restarts "
     << s.restarts_used << "/"
     << s.restart_budget << ", last checkpoint step " << OptText(s.last_checkpoint_step)
     << ", up " << FormatDuration(s.uptime_s) << "\n\n";
  if (sel.any()) {
    PrintRankTable(os, s, sel);
  } else {
    const std::vector<RankRow> rows = RankRows(s);
    PrintRankSummary(os, rows, ContextOf(rows, &s));
  }
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

std::string CulpritLogPath(const RunRecord& run, const EventRecord& e, const IncidentEvidence& ev) {
  const std::string dir = run.run_dir.empty() ? std::string("RUN_DIR") : run.run_dir;
  if (!e.attempt) return "";
  if (!ev.role.empty()) return ev.role_index ? RoleLogPath(dir, *e.attempt, ev.role, *ev.role_index) : "";
  const std::vector<int> culprits = Culprits(e, ev);
  if (culprits.empty() || !e.generation) return "";
  return RankLogPath(dir, *e.attempt, *e.generation, culprits[0]);
}

namespace {

// How the culprit ended, from its evidence: "killed by signal 6 (SIGABRT)".
std::string ExitText(const EventRecord& e, const IncidentEvidence& ev) {
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
  return exit;
}

// "culprit" lines: the role process, then each culprit rank — at most
// `max_lines`, the rest folded into the last one.
void PrintCulprits(std::ostream& os, const IncidentEvidence& ev, const std::vector<int>& culprits, size_t max_lines) {
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
  const size_t shown = culprits.size() > max_lines ? max_lines - 1 : culprits.size();
  for (size_t i = 0; i < shown; ++i) {
    std::string line = "rank " + std::to_string(culprits[i]);
    for (const RankEvidence& r : ev.ranks) {
      if (r.rank == culprits[i]) line = DescribeRankEvidence(r);
    }
    os << "culprit   " << line << "\n";
  }
  if (shown < culprits.size()) {
    const std::vector<int> rest(culprits.begin() + static_cast<std::ptrdiff_t>(shown), culprits.end());
    os << "culprit   and " << rest.size() << " more: ranks " << RankList(rest)
       << " (--all describes each; --json has every rank's evidence)\n";
  }
}

// The evidence blocks of one incident, after what on-call acts on: every
// block a triage shows below the runbook is printed here, in this order.
void PrintEvidenceBlocks(std::ostream& os, const EventRecord& e, const IncidentEvidence& ev,
                         const std::vector<int>& culprits, const Status& parsed, const RankSelection& sel) {
  // checkpoint_failed: what each rank's save reported.
  for (const SaveFailureEvidence& r : ev.reports) {
    if (r.error.empty()) continue;
    os << "error     " << (r.rank ? "rank " + std::to_string(*r.rank) + ": " : "") << r.error << "\n";
  }
  if (!ev.log_tail.empty()) {
    os << "last log lines:\n";
    for (const std::string& line : ev.log_tail) os << "  | " << line << "\n";
  }
  if (ev.role.empty()) {  // a role incident's one "rank" is the role process, shown above
    std::vector<std::string> others;
    if (sel.all) {
      for (const RankEvidence& r : ev.ranks) {
        if (std::find(culprits.begin(), culprits.end(), r.rank) == culprits.end()) {
          others.push_back(DescribeRankEvidence(r));
        }
      }
    } else {
      others = FoldOtherRanks(ev, culprits, e.time_ms, &DescribeRankEvidence);
    }
    if (!others.empty()) os << (sel.all ? "others:\n" : "others (by state; --all: a line each):\n");
    for (const std::string& line : others) os << "  " << line << "\n";
  }
  for (const std::string& line : RenderStacks(ev.stacks, culprits)) os << line << "\n";  // lineage/stacks.h
  if (!parsed.ok()) {
    os << "evidence  " << e.evidence_json << "\n"
       << "          (" << parsed.message() << ")\n";
  }
}

}  // namespace

void PrintTriage(std::ostream& os, const RunRecord& run, const EventRecord& e, const std::string& runbooks_dir,
                 const RankSelection& sel) {
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

  // The first 10 lines: run, incident, summary, culprits, exit or stall, log, action, runbook.
  const std::string exit = ExitText(e, ev);
  // At most 3 culprit lines (2 beside both an exit and a stall), so the first 10 lines hold all of this.
  const size_t culprit_lines = sel.all ? culprits.size() + 1 : (!exit.empty() && ev.stalled_s ? size_t{2} : size_t{3});
  PrintCulprits(os, ev, culprits, culprit_lines);
  if (!exit.empty()) os << "exit      " << exit << "\n";
  if (ev.stalled_s) {
    os << "stalled   no step for " << FormatDuration(*ev.stalled_s);
    if (ev.timeout_s) {
      os << " (" << (ev.allowance.empty() ? "step" : ev.allowance) << " allowance "
         << FormatDuration(*ev.timeout_s) << ")";
    }
    os << "\n";
  }
  if (const std::string log = CulpritLogPath(run, e, ev); !log.empty()) {
    std::string host = e.node;
    for (const RankEvidence& r : ev.ranks) {
      if (!culprits.empty() && r.rank == culprits[0] && !r.host.empty()) host = r.host;
    }
    os << "log       " << log << (host.empty() ? "" : " (on " + host + ")")
       << (culprits.size() > 1 ? "; the other culprits' beside it" : "") << "\n";
  }
  os << "action    " << (e.action.empty() ? "(none recorded)" : e.action) << "\n";
  if (runbook.empty()) {
    os << "runbook   none for '" << e.kind << "' (see "
       << (runbooks_dir.empty() ? "runbooks/ in the Holdfast source tree" : runbooks_dir) << ")\n";
  } else {
    const std::string file = RunbookFile(runbooks_dir, runbook);
    os << "runbook   " << BaseName(runbook) << "  ("
       << (file == runbook ? runbook + " in the Holdfast source tree" : file) << ")\n";
  }
  PrintEvidenceBlocks(os, e, ev, culprits, parsed.status(), sel);
}

}  // namespace holdfast
