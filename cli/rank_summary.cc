#include "cli/rank_summary.h"

#include <algorithm>
#include <cmath>
#include <cctype>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <utility>

#include "cli/format.h"
#include "cli/report.h"
#include "common/proc_state.h"
#include "lineage/event_kind.h"

namespace holdfast {

namespace {

// The unhealthy ranks shown a row each up to this many; past it, a line per condition.
constexpr size_t kMaxUnhealthyRows = 12;
// Nodes with an unhealthy rank named one a line up to this many.
constexpr size_t kMaxNodeLines = 6;
// Conditions (folded) and collectives shown, at most.
constexpr size_t kMaxFoldLines = 8;

bool StartsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

bool IsRunning(const RankRow& r) { return r.state == "running"; }

// What the summary line counts a rank as: its process state, and for a
// running rank without a progress record, that.
std::string StateWord(const RankRow& r) {
  if (IsRunning(r) && !r.attached) return "running without a progress record";
  return r.state;
}

// "3 stopped (SIGSTOP)" parts ordered by count (most first), then by name.
std::vector<std::pair<std::string, std::vector<const RankRow*>>> GroupBy(
    const std::vector<const RankRow*>& rows, const std::function<std::string(const RankRow&)>& key) {
  std::map<std::string, std::vector<const RankRow*>> by;
  for (const RankRow* r : rows) by[key(*r)].push_back(r);
  std::vector<std::pair<std::string, std::vector<const RankRow*>>> out(by.begin(), by.end());
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
  return out;
}

std::string Plural(size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string StepRange(const std::vector<const RankRow*>& rows) {
  std::optional<int64_t> lo, hi;
  for (const RankRow* r : rows) {
    if (!r->step || !r->attached) continue;
    lo = lo ? std::min(*lo, *r->step) : *r->step;
    hi = hi ? std::max(*hi, *r->step) : *r->step;
  }
  if (!lo) return "";
  return *lo == *hi ? " at step " + std::to_string(*lo)
                    : " at steps " + std::to_string(*lo) + "-" + std::to_string(*hi);
}

std::vector<int> RanksOf(const std::vector<const RankRow*>& rows) {
  std::vector<int> v;
  for (const RankRow* r : rows) v.push_back(r->rank);
  return v;
}

size_t NodeCount(const std::vector<const RankRow*>& rows) {
  std::set<std::string> nodes;
  for (const RankRow* r : rows) nodes.insert(NodeName(*r));
  return nodes.size();
}

// "512 ranks on 64 nodes: 511 running at step 1234, 1 stopped (SIGSTOP)"
void PrintStateLine(std::ostream& os, const std::vector<const RankRow*>& all) {
  os << Plural(all.size(), "rank", "ranks") << " on " << Plural(NodeCount(all), "node", "nodes") << ":";
  const char* sep = " ";
  for (const auto& [state, rows] : GroupBy(all, StateWord)) {
    os << sep << rows.size() << " " << state << (IsRunning(*rows[0]) ? StepRange(rows) : "");
    sep = ", ";
  }
  os << "\n";
}

// "waiting in collectives: 510 in #9001, 1 in #9002"; with model parallelism
// each group's own numbers, "2 in reduce_scatter #196 of dp, 1 in send/recv
// #34 of pp"; nothing when none waits.
void PrintCollectivesLine(std::ostream& os, const std::vector<const RankRow*>& all) {
  std::vector<const RankRow*> waiting;
  for (const RankRow* r : all) {
    if (r->waiting_on != 0 && IsRunning(*r)) waiting.push_back(r);
  }
  if (waiting.empty()) return;
  os << "waiting in collectives:";
  const char* sep = " ";
  size_t shown = 0;
  const auto groups = GroupBy(waiting, [](const RankRow& r) {
    const std::string kind = r.waiting_kind.empty() ? std::string() : r.waiting_kind + " ";
    if (!r.waiting_group.empty() && r.waiting_group_seq != 0) {
      return kind + "#" + std::to_string(r.waiting_group_seq) + " of " + r.waiting_group;
    }
    return kind + "#" + std::to_string(r.waiting_on);
  });
  for (const auto& [what, rows] : groups) {
    if (shown++ == kMaxFoldLines) {
      os << sep << "...";
      break;
    }
    os << sep << rows.size() << " in " << what;
    sep = ", ";
  }
  os << "\n";
}

// "nodes: all 64 healthy", or the nodes with a rank that is not, one a line.
void PrintNodeLines(std::ostream& os, const std::vector<const RankRow*>& all, const RankContext& ctx) {
  std::map<std::string, std::vector<const RankRow*>> by_node;
  std::vector<std::string> order;  // nodes in the order of their first rank
  for (const RankRow* r : all) {
    const std::string n = NodeName(*r);
    if (by_node.find(n) == by_node.end()) order.push_back(n);
    by_node[n].push_back(r);
  }
  std::vector<std::string> bad;
  for (const std::string& n : order) {
    for (const RankRow* r : by_node[n]) {
      if (!Condition(*r, ctx).empty()) {
        bad.push_back(n);
        break;
      }
    }
  }
  if (bad.empty()) {
    os << "nodes: " << (order.size() == 1 ? "the one node" : "all " + std::to_string(order.size())) << " healthy\n";
    return;
  }
  os << "nodes: " << order.size() - bad.size() << " of " << order.size() << " healthy; not healthy:\n";
  std::vector<std::pair<std::string, std::string>> lines;
  for (size_t i = 0; i < bad.size() && i < kMaxNodeLines; ++i) {
    std::vector<const RankRow*> unhealthy;
    size_t healthy = 0;
    for (const RankRow* r : by_node[bad[i]]) {
      if (Condition(*r, ctx).empty()) {
        ++healthy;
      } else {
        unhealthy.push_back(r);
      }
    }
    std::string what = healthy > 0 ? std::to_string(healthy) + " healthy" : "";
    for (const auto& [cond, rows] : GroupBy(unhealthy, [&ctx](const RankRow& r) { return Condition(r, ctx); })) {
      what += (what.empty() ? "" : ", ") + std::to_string(rows.size()) + " " + cond;
    }
    lines.emplace_back(bad[i], what);
  }
  size_t width = 0;
  for (const auto& [node, what] : lines) width = std::max(width, node.size());
  for (const auto& [node, what] : lines) os << "  " << node << std::string(width - node.size() + 2, ' ') << what << "\n";
  if (bad.size() > kMaxNodeLines) os << "  ... and " << bad.size() - kMaxNodeLines << " more nodes (--all)\n";
}

void PrintUnhealthy(std::ostream& os, const std::vector<const RankRow*>& all, const RankContext& ctx) {
  std::vector<const RankRow*> bad;
  for (const RankRow* r : all) {
    if (!Condition(*r, ctx).empty()) bad.push_back(r);
  }
  if (bad.empty()) return;
  os << "not healthy: " << Plural(bad.size(), "rank", "ranks")
     << " (--rank R or --node HOST for full rows, --all for every rank)\n";
  if (bad.size() <= kMaxUnhealthyRows) {
    Table t({"NODE", "RANK", "PID", "CONDITION", "STEP", "PHASE", "HEARTBEAT", "WAITING ON"});
    for (const RankRow* r : bad) {
      t.Add({NodeName(*r), std::to_string(r->rank), r->pid > 0 ? std::to_string(r->pid) : "-", Condition(*r, ctx),
             r->step ? std::to_string(*r->step) : "-", r->phase.empty() ? "-" : r->phase,
             r->heartbeat_age_s ? FormatDuration(*r->heartbeat_age_s) + " ago" : "-",
             r->waiting_on != 0 ? "#" + std::to_string(r->waiting_on) : "-"});
    }
    t.Print(os);
    return;
  }
  size_t shown = 0;
  const auto groups = GroupBy(bad, [&ctx](const RankRow& r) { return Condition(r, ctx); });
  for (const auto& [cond, rows] : groups) {
    if (shown++ == kMaxFoldLines) {
      os << "  ... and " << groups.size() - kMaxFoldLines << " more conditions (--all)\n";
      break;
    }
    os << "  " << rows.size() << " " << cond << ": " << (rows.size() == 1 ? "rank " : "ranks ") << RankList(RanksOf(rows))
       << " on " << Plural(NodeCount(rows), "node", "nodes") << "\n";
  }
}

// What a rank of an incident was doing, as the fold groups it.
std::string EvidenceActivity(const RankEvidence& r) {
  if (!r.alive) return "exited";
  std::string s;
  if (!r.record_valid && !r.pace) {
    s = "no progress reported";
  } else if (r.waiting_on > 0) {
    std::string kind = "collective";
    for (const CollectiveEvidence& c : r.ring) {
      if (c.seq == r.waiting_on && !c.kind.empty()) kind = c.kind;
    }
    s = "waiting in " + kind + " #" + std::to_string(r.waiting_on);
  } else {
    s = "in " + (r.phase.empty() ? std::string("an unknown phase") : r.phase);
  }
  if (r.step) s += " at step " + std::to_string(*r.step);
  if (r.proc_state.size() == 1) {
    if (const char* words = ProcStateWords(ProcStateFromLetter(r.proc_state[0]))) s += ", " + std::string(words);
  }
  return s;
}

}  // namespace

std::vector<RankRow> RankRows(const RunStatus& s) {
  std::vector<RankRow> rows;
  for (const NodeStatus& n : s.nodes) {
    for (const RankStatus& r : n.ranks) {
      RankRow row;
      row.rank = r.rank;
      row.node = n.node;
      row.host = n.host;
      row.pid = r.pid;
      // A daemon from before "stopped (SIGSTOP)" said "stopped".
      row.state = r.state == "stopped" ? "stopped (SIGSTOP)" : r.state;
      row.attached = !StartsWith(r.phase, "unknown");
      row.step = r.step;
      row.phase = row.attached ? r.phase : "";
      row.heartbeat_age_s = r.heartbeat_age_s;
      row.report_age_s = r.report_age_s;
      row.steps_per_s = r.steps_per_s;
      row.waiting_on = r.waiting_on.value_or(0);
      row.waiting_kind = r.waiting_kind;
      row.waiting_group = r.waiting_group;
      row.waiting_group_seq = r.waiting_group_seq.value_or(0);
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

std::vector<RankRow> RankRows(const IncidentEvidence& ev, const std::vector<int>& culprits) {
  std::vector<RankRow> rows;
  for (const RankEvidence& r : ev.ranks) {
    RankRow row;
    row.rank = r.rank;
    row.node = r.node;
    row.host = r.host;
    row.pid = r.pid;
    const ProcState ps = r.proc_state.size() == 1 ? ProcStateFromLetter(r.proc_state[0]) : ProcState::kUnknown;
    if (!r.alive) {
      row.state = "exited";
    } else if (IsStopped(ps)) {
      row.state = ps == ProcState::kTraced ? "stopped (traced)" : "stopped (SIGSTOP)";
    } else {
      row.state = "running";
      if (const char* words = ProcStateWords(ps)) row.proc_words = words;
    }
    row.attached = r.record_valid || r.pace.has_value();
    row.step = r.step;
    row.phase = r.phase;
    row.phase_age_s = r.phase_age_s;
    row.heartbeat_age_s = r.heartbeat_age_s;
    row.waiting_on = r.waiting_on;
    for (const CollectiveEvidence& c : r.ring) {
      if (c.seq == r.waiting_on && !c.kind.empty()) row.waiting_kind = c.kind;
    }
    row.culprit = std::find(culprits.begin(), culprits.end(), r.rank) != culprits.end();
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string NodeName(const RankRow& r) {
  if (!r.host.empty()) return r.host;
  return r.node >= 0 ? "node " + std::to_string(r.node) : "node ?";
}

std::string RankList(std::vector<int> ranks, size_t max_parts) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::vector<std::string> parts;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    parts.push_back(j == i ? std::to_string(ranks[i]) : std::to_string(ranks[i]) + "-" + std::to_string(ranks[j]));
    i = j + 1;
  }
  if (parts.size() > max_parts) {
    parts.resize(max_parts);
    return Join(parts, ",") + ",... (" + std::to_string(ranks.size()) + " ranks)";
  }
  return Join(parts, ",");
}

RankContext ContextOf(const std::vector<RankRow>& rows, const RunStatus* live) {
  RankContext ctx;
  for (const RankRow& r : rows) {
    if (r.step && r.attached) ctx.newest_step = std::max(ctx.newest_step.value_or(*r.step), *r.step);
    if (r.steps_per_s) ctx.steps_per_s = std::max(ctx.steps_per_s, *r.steps_per_s);
  }
  // The daemon's note says "for N s" only while the ratio holds at straggler_factor (docs/control-protocol.md).
  if (live != nullptr && live->slowest_rank && live->slowest_rank_note &&
      live->slowest_rank_note->find(" of the others for ") != std::string::npos) {
    ctx.straggler = live->slowest_rank;
  }
  return ctx;
}

namespace {

// Whether `r`, `behind` steps behind the newest, lags: 2 or more beyond what
// its view's age explains (RankContext).
bool Lags(const RankRow& r, const RankContext& ctx, int64_t behind) {
  if (r.report_age_s <= 0) return behind >= 2;
  if (ctx.steps_per_s <= 0) return false;  // an old view and no pace: cannot tell
  const auto explained = static_cast<int64_t>(std::ceil(r.report_age_s * ctx.steps_per_s));
  return behind - explained >= 2;
}

}  // namespace

std::string Condition(const RankRow& r, const RankContext& ctx) {
  if (r.culprit) return "culprit" + (IsRunning(r) ? std::string() : ", " + r.state);
  if (r.state == "exited with code 0") return "";  // finished its work
  if (!IsRunning(r)) return r.state;
  if (!r.proc_words.empty()) return r.proc_words;
  if (!r.attached) return "no progress record";
  if (ctx.newest_step && r.step && Lags(r, ctx, *ctx.newest_step - *r.step)) {
    return "lagging " + std::to_string(*ctx.newest_step - *r.step) + " steps";
  }
  if (ctx.straggler && *ctx.straggler == r.rank) return "straggling";
  return "";
}

void PrintRankSummary(std::ostream& os, const std::vector<RankRow>& rows, const RankContext& ctx) {
  if (rows.empty()) {
    os << "no ranks running\n";
    return;
  }
  std::vector<const RankRow*> all;
  for (const RankRow& r : rows) all.push_back(&r);
  PrintStateLine(os, all);
  PrintCollectivesLine(os, all);
  PrintNodeLines(os, all, ctx);
  PrintUnhealthy(os, all, ctx);
}

Result<std::vector<int>> ParseRankList(const std::string& text) {
  auto number = [](const std::string& s, int* out) {
    if (s.empty() || s.size() > 9 || !std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
      return false;
    }
    *out = std::stoi(s);
    return true;
  };
  const std::string usage = " (want ranks and ranges separated by commas, e.g. --rank 3,8-11)";
  std::vector<int> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    const std::string part = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t dash = part.find('-');
    int lo = 0, hi = 0;
    const bool ok = dash == std::string::npos ? number(part, &lo) && number(part, &hi)
                                              : number(part.substr(0, dash), &lo) && number(part.substr(dash + 1), &hi);
    if (!ok) return InvalidArgumentError("--rank: '" + part + "' is not a rank or a range" + usage);
    if (hi < lo) return InvalidArgumentError("--rank: the range '" + part + "' runs backwards" + usage);
    if (hi - lo >= 1 << 20) return InvalidArgumentError("--rank: the range '" + part + "' is too long");
    for (int r = lo; r <= hi; ++r) out.push_back(r);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

bool Selected(const RankSelection& sel, const RankRow& r) {
  if (sel.all) return true;
  if (!sel.ranks.empty() && !std::binary_search(sel.ranks.begin(), sel.ranks.end(), r.rank)) return false;
  if (!sel.node.empty() && sel.node != r.host && sel.node != NodeName(r) &&
      sel.node != std::to_string(r.node)) {
    return false;
  }
  return !sel.ranks.empty() || !sel.node.empty();
}

Status CheckSelection(const RankSelection& sel, const std::vector<RankRow>& rows) {
  std::vector<int> have;
  for (const RankRow& r : rows) have.push_back(r.rank);
  std::sort(have.begin(), have.end());
  std::vector<int> missing;
  for (int r : sel.ranks) {
    if (!std::binary_search(have.begin(), have.end(), r)) missing.push_back(r);
  }
  if (!missing.empty()) {
    return InvalidArgumentError("--rank: no rank " + RankList(missing) + " in this run (it has " +
                                (have.empty() ? std::string("none") : "ranks " + RankList(have)) + ")");
  }
  if (!sel.node.empty()) {
    std::vector<std::string> nodes;
    for (const RankRow& r : rows) {
      if (sel.node == r.host || sel.node == NodeName(r) || sel.node == std::to_string(r.node)) return Status::Ok();
      if (std::find(nodes.begin(), nodes.end(), NodeName(r)) == nodes.end()) nodes.push_back(NodeName(r));
    }
    if (nodes.size() > 8) {
      const size_t more = nodes.size() - 8;
      nodes.resize(8);
      nodes.push_back("... " + std::to_string(more) + " more");
    }
    return InvalidArgumentError("--node: no node '" + sel.node + "' in this run (it has " +
                                (nodes.empty() ? std::string("none") : Join(nodes, ", ")) + ")");
  }
  return Status::Ok();
}

std::vector<std::string> FoldOtherRanks(const IncidentEvidence& ev, const std::vector<int>& culprits, int64_t time_ms,
                                        std::string (*describe)(const RankEvidence&)) {
  std::vector<std::string> order;  // activities in the order of their first rank
  std::map<std::string, std::vector<const RankEvidence*>> by;
  for (const RankEvidence& r : ev.ranks) {
    if (std::find(culprits.begin(), culprits.end(), r.rank) != culprits.end()) continue;
    const std::string what = EvidenceActivity(r);
    if (by.find(what) == by.end()) order.push_back(what);
    by[what].push_back(&r);
  }
  std::vector<std::string> lines;
  for (const std::string& what : order) {
    const std::vector<const RankEvidence*>& group = by[what];
    if (group.size() <= 2) {
      for (const RankEvidence* r : group) lines.push_back(describe(*r));
      continue;
    }
    std::optional<double> lo, hi;
    std::vector<int> ranks;
    std::set<std::string> nodes;
    for (const RankEvidence* r : group) {
      ranks.push_back(r->rank);
      nodes.insert(!r->host.empty() ? r->host : std::to_string(r->node));
      if (r->phase_age_s) {
        lo = std::min(lo.value_or(*r->phase_age_s), *r->phase_age_s);
        hi = std::max(hi.value_or(*r->phase_age_s), *r->phase_age_s);
      }
    }
    std::string line = std::to_string(group.size()) + " ranks " + what;
    if (hi && time_ms > 0) line += " since " + FormatTime(time_ms - static_cast<int64_t>(*hi * 1000));
    if (hi) {
      const std::string from = FormatDuration(*lo), to = FormatDuration(*hi);  // equal as printed: one
      line += " (for " + (from == to ? to : from + ".." + to) + ")";
    }
    line += ": ranks " + RankList(ranks) + " on " + Plural(nodes.size(), "node", "nodes");
    lines.push_back(std::move(line));
  }
  return lines;
}

const char* RunHealthName(RunHealth h) {
  switch (h) {
    case RunHealth::kTraining: return "training";
    case RunHealth::kSucceeded: return "succeeded";
    case RunHealth::kHung: return "hung";
    case RunHealth::kFailed: return "failed";
    case RunHealth::kStopped: return "stopped";
  }
  return "?";
}

RunHealth LiveHealth(const RunStatus& s, const std::optional<RunState>& recorded) {
  for (const RankRow& r : RankRows(s)) {
    if (StartsWith(r.state, "stopped")) return RunHealth::kHung;
  }
  for (const RoleStatus& r : s.roles) {  // "stopped" alone: by the daemon, as the run ends
    if (StartsWith(r.state, "stopped (")) return RunHealth::kHung;
  }
  const bool recovering = s.state == "stopping" || s.state == "restarting";
  if (recovering && s.last_incident &&
      (s.last_incident->kind == event_kind::kHang || s.last_incident->kind == event_kind::kRoleHang)) {
    return RunHealth::kHung;
  }
  if (s.state == "finished") return recorded ? RecordedHealth(*recorded) : RunHealth::kTraining;
  return RunHealth::kTraining;
}

RunHealth RecordedHealth(RunState state) {
  switch (state) {
    case RunState::kRunning: return RunHealth::kTraining;
    case RunState::kSucceeded: return RunHealth::kSucceeded;
    case RunState::kFailed: return RunHealth::kFailed;
    case RunState::kStopped:
    case RunState::kPreempted: return RunHealth::kStopped;
  }
  return RunHealth::kTraining;
}

int ExitForHealth(RunHealth h) {
  switch (h) {
    case RunHealth::kTraining:
    case RunHealth::kSucceeded: return kRunctlOk;
    case RunHealth::kHung: return kRunctlHung;
    case RunHealth::kFailed: return kRunctlRunFailed;
    case RunHealth::kStopped: return kRunctlRunStopped;
  }
  return kRunctlOk;
}

}  // namespace holdfast
