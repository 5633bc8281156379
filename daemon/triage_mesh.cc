// Triage of a hang in a run with model parallelism (daemon/triage_internal.h).
//
// With tensor, pipeline and expert groups the ranks no longer issue one
// sequence of collectives: a pipeline stage sends and receives, each group
// numbers its own collectives, and a rank waiting in its data-parallel group's
// reduce-scatter may only be behind a stage that never sent its activations.
// So the blame follows the waits: each rank blocked in a labelled collective
// waits on the members of its group that have not entered it yet (their
// count of that group's collectives is lower), or on the peer of its
// send/recv unless that peer is in a send/recv with it too; the culprits are
// the ranks waited on that wait on nobody (computing, stopped, dead).
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "daemon/triage_internal.h"

namespace holdfast {
namespace triage_internal {
namespace {

// Culprits named one by one; more are folded into a count (512 ranks).
constexpr size_t kDetailedCulprits = 4;

// "micro-batch 2's activations", "the tied embedding's gradient", "activations" (evaluation).
std::string MessageWords(MessageKind what, int micro) {
  if (what == MessageKind::kTiedEmbedding) return "the tied embedding's gradient";
  if (micro >= 0) return "micro-batch " + std::to_string(micro) + "'s " + MessageKindName(what);
  return MessageKindName(what);
}

std::string RanksWord(const std::vector<int>& ranks, const DeviceMesh* mesh) {
  return ranks.size() == 1 ? Who(mesh, ranks[0]) : "ranks " + RankList(ranks);
}

// One rank blocked in a collective the record labels.
struct Blocked {
  const RankView* view = nullptr;
  const CollectiveRecord* in = nullptr;
  std::vector<int> on;  // the ranks it waits for
  double for_s = 0;
};

// A process that cannot take part in anything it entered: its peers wait on it.
bool Frozen(const RankView* q) { return q == nullptr || !q->alive || IsStopped(q->proc_state); }

// What `w` waits on `culprit` (its record `theirs`) for, in words (the waiter's side).
std::string WaitsFor(const Blocked& w, int culprit, const RankView* theirs, const DeviceMesh& mesh) {
  const CollectiveLabel& l = w.in->label;
  if (w.in->kind == CollectiveKind::kSendRecv) {
    std::string s;
    if (l.recv_from == culprit) s = "to receive " + MessageWords(l.recv_what, l.recv_micro) + " from it";
    if (l.send_to == culprit) {
      s += std::string(s.empty() ? "to " : " and ") + "send " + MessageWords(l.send_what, l.send_micro) + " to it";
    }
    return s;
  }
  const bool entered = theirs != nullptr && theirs->progress.valid &&
                       theirs->progress.issued_in(w.in->label.group) >= w.in->group_seq;
  return "in " + CollectiveWords(*w.in, w.view->rank, &mesh) + (entered ? "" : ", which it never entered");
}

}  // namespace

std::vector<int> GroupMembers(const DeviceMesh& mesh, CollectiveGroup g, int rank) {
  if (g == CollectiveGroup::kWorld) {
    std::vector<int> all(static_cast<size_t>(mesh.world()));
    for (int r = 0; r < mesh.world(); ++r) all[static_cast<size_t>(r)] = r;
    return all;
  }
  MeshGroup mg;
  if (!MeshGroupOf(g, &mg) || rank < 0 || rank >= mesh.world()) return {};
  return mesh.GroupOf(mg, rank);
}

std::string Who(const DeviceMesh* mesh, int rank) {
  std::string s = "rank " + std::to_string(rank);
  if (mesh != nullptr && rank >= 0 && rank < mesh->world()) s += " (" + mesh->Describe(rank) + ")";
  return s;
}

std::string CollectiveWords(const CollectiveRecord& c, int rank, const DeviceMesh* mesh) {
  const CollectiveLabel& l = c.label;
  if (mesh == nullptr || l.group == CollectiveGroup::kUnknown) {
    return std::string(CollectiveKindName(c.kind)) + " #" + std::to_string(c.seq);
  }
  if (c.kind == CollectiveKind::kSendRecv) {
    const std::string recv = l.recv_from >= 0 ? "receiving " + MessageWords(l.recv_what, l.recv_micro) : "";
    const std::string send = l.send_to >= 0 ? "sending " + MessageWords(l.send_what, l.send_micro) : "";
    if (l.send_to >= 0 && l.recv_from >= 0 && l.send_to != l.recv_from) {
      return "send/recv (" + recv + " from rank " + std::to_string(l.recv_from) + ", " + send + " to rank " +
             std::to_string(l.send_to) + ")";
    }
    const int peer = l.recv_from >= 0 ? l.recv_from : l.send_to;
    std::string both = recv;
    if (!send.empty()) both += (both.empty() ? "" : ", ") + send;
    return "send/recv with rank " + std::to_string(peer) + " (" + both + ")";
  }
  std::string s = std::string(CollectiveKindName(c.kind)) + " #" + std::to_string(c.group_seq);
  if (l.group == CollectiveGroup::kWorld) return s + " of the world";
  const std::vector<int> members = GroupMembers(*mesh, l.group, rank);
  return s + " of its " + CollectiveGroupName(l.group) + " group (ranks " + RankList(members) + ")";
}

// Who waits on whom: each rank blocked in a collective the record labels,
// with the ranks it waits for; `waiting` gets every rank blocked in one.
template <typename At>
std::vector<Blocked> WaitGraph(int64_t now_ns, const std::vector<RankView>& ranks, const DeviceMesh& mesh, At at,
                               std::set<int>* waiting) {
  std::vector<Blocked> blocked;
  for (const RankView& r : ranks) {
    if (!r.progress.in_collective()) continue;
    waiting->insert(r.rank);
    const CollectiveRecord* c = r.progress.waited();
    if (c == nullptr || c->label.group == CollectiveGroup::kUnknown) continue;
    Blocked b;
    b.view = &r;
    b.in = c;
    b.for_s = r.progress.phase_started_ns > 0 ? Seconds(now_ns - r.progress.phase_started_ns) : 0;
    if (c->kind == CollectiveKind::kSendRecv) {
      for (int peer : {c->label.recv_from, c->label.send_to}) {
        if (peer < 0 || std::find(b.on.begin(), b.on.end(), peer) != b.on.end()) continue;
        const RankView* q = at(peer);
        const CollectiveRecord* theirs = q != nullptr ? q->progress.waited() : nullptr;
        const bool mutual = theirs != nullptr && theirs->kind == CollectiveKind::kSendRecv &&
                            (theirs->label.send_to == r.rank || theirs->label.recv_from == r.rank);
        if (!mutual || Frozen(q)) b.on.push_back(peer);
      }
    } else {
      for (int m : GroupMembers(mesh, c->label.group, r.rank)) {
        const RankView* q = at(m);
        if (m == r.rank) continue;
        if (Frozen(q) || !q->progress.valid || q->progress.issued_in(c->label.group) < c->group_seq) {
          b.on.push_back(m);
        }
      }
    }
    blocked.push_back(std::move(b));
  }
  return blocked;
}

// Everyone waited on is waiting too: a collective all its members entered
// that does not complete, or two ranks each in a send/recv with the other
// (the transport, or stages that disagree on the schedule).
void BlameStuck(int64_t now_ns, const std::vector<Blocked>& blocked, const DeviceMesh& mesh, TriageReport* report) {
  std::vector<int> culprits;
  std::string line;
  const Blocked* stuck = nullptr;
  for (const Blocked& b : blocked) {
    if (b.on.empty() && (stuck == nullptr || b.for_s > stuck->for_s)) stuck = &b;
  }
  if (stuck == nullptr) stuck = &blocked.front();
  const int r = stuck->view->rank;
  if (stuck->in->kind == CollectiveKind::kSendRecv) {
    const CollectiveLabel& l = stuck->in->label;
    culprits = {r};
    for (int peer : {l.recv_from, l.send_to}) {
      if (peer >= 0 && std::find(culprits.begin(), culprits.end(), peer) == culprits.end()) culprits.push_back(peer);
    }
    line = Who(&mesh, r) + " and rank" + (culprits.size() > 2 ? "s " : " ") +
           RankList(std::vector<int>(culprits.begin() + 1, culprits.end())) +
           " are each in a send/recv with the other that does not complete: " + Who(&mesh, r) + " " +
           Doing(now_ns, *stuck->view, &mesh);
  } else {
    culprits = GroupMembers(mesh, stuck->in->label.group, r);
    line = "all ranks of " + std::string(CollectiveGroupName(stuck->in->label.group)) + " group " +
           RankList(culprits) + " entered " + std::string(CollectiveKindName(stuck->in->kind)) + " #" +
           std::to_string(stuck->in->group_seq) + " of it but it has not completed";
  }
  std::sort(culprits.begin(), culprits.end());
  report->culprits = culprits;
  report->summary = line;
}

bool BlameMesh(int64_t now_ns, const std::vector<RankView>& ranks, const DeviceMesh& mesh,
               const std::vector<int>& stopped, TriageReport* report) {
  std::vector<const RankView*> by_rank(static_cast<size_t>(mesh.world()), nullptr);
  for (const RankView& r : ranks) by_rank[static_cast<size_t>(r.rank)] = &r;
  auto at = [&](int rank) -> const RankView* {
    return rank >= 0 && rank < mesh.world() ? by_rank[static_cast<size_t>(rank)] : nullptr;
  };
  std::set<int> waiting;  // every rank blocked in a collective, labelled or not
  const std::vector<Blocked> blocked = WaitGraph(now_ns, ranks, mesh, at, &waiting);
  if (blocked.empty() && stopped.empty()) return false;

  TriageReport& inc = *report;
  std::vector<int> culprits = stopped;
  std::string line;
  if (culprits.empty()) {
    std::set<int> held;
    for (const Blocked& b : blocked) {
      for (int q : b.on) {
        if (waiting.count(q) == 0) held.insert(q);
      }
    }
    culprits.assign(held.begin(), held.end());
  }
  if (culprits.empty()) {
    BlameStuck(now_ns, blocked, mesh, report);
    return true;
  }
  std::sort(culprits.begin(), culprits.end());
  std::set<int> named(culprits.begin(), culprits.end());
  for (size_t i = 0; i < culprits.size() && i < kDetailedCulprits; ++i) {
    const int c = culprits[i];
    const RankView* v = at(c);
    line += std::string(line.empty() ? "" : "; ") + Who(&mesh, c) + " " +
            (v != nullptr ? Doing(now_ns, *v, &mesh) : std::string("has not reported"));
    // Its direct waiters, those waiting for the same thing folded together.
    std::map<std::string, std::pair<std::vector<int>, double>> waiters;
    for (const Blocked& b : blocked) {
      if (std::find(b.on.begin(), b.on.end(), c) == b.on.end()) continue;
      auto& [who, for_s] = waiters[WaitsFor(b, c, v, mesh)];
      who.push_back(b.view->rank);
      for_s = std::max(for_s, b.for_s);
      named.insert(b.view->rank);
    }
    for (const auto& [words, w] : waiters) {
      line += "; " + RanksWord(w.first, &mesh) + " waiting " + Fixed1(w.second) + " s " + words;
    }
  }
  if (culprits.size() > kDetailedCulprits) {
    line += "; and ranks " +
            RankList(std::vector<int>(culprits.begin() + static_cast<std::ptrdiff_t>(kDetailedCulprits),
                                      culprits.end())) +
            " likewise";
  }
  // The others, behind them: folded by what they wait in.
  std::map<std::string, std::vector<int>> behind;
  for (const Blocked& b : blocked) {
    if (named.count(b.view->rank) != 0) continue;
    const std::string what = b.in->kind == CollectiveKind::kSendRecv
                                 ? std::string("send/recv with their pipeline neighbours")
                                 : std::string(CollectiveKindName(b.in->kind)) + " of their " +
                                       CollectiveGroupName(b.in->label.group) + " groups";
    behind[what].push_back(b.view->rank);
    named.insert(b.view->rank);
  }
  for (const auto& [what, who] : behind) line += "; " + RanksWord(who, nullptr) + " waiting behind them in " + what;
  std::vector<int> unlabelled;
  for (int w : waiting) {
    if (named.count(w) == 0) unlabelled.push_back(w);
  }
  if (!unlabelled.empty()) line += "; " + RanksWord(unlabelled, nullptr) + " waiting in a collective";
  inc.culprits = culprits;
  inc.summary = line;
  return true;
}

}  // namespace triage_internal
}  // namespace holdfast
