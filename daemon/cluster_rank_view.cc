// Cluster protocol: a RankView (process state + RankProgress) as JSON, its clock readings as ages.
#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "daemon/cluster_protocol.h"
#include "daemon/cluster_protocol_internal.h"

namespace holdfast {
namespace cluster_internal {
namespace {

constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
// The checkpoint error text, without the record's terminating NUL.
constexpr size_t kMaxCheckpointErrorBytes = kProgressErrorSize - 1;
constexpr uint32_t kMaxPhase = static_cast<uint32_t>(Phase::kDone);
constexpr uint32_t kMaxCollectiveKind = static_cast<uint32_t>(CollectiveKind::kSendRecv);
constexpr int64_t kMaxGroup = kCollectiveGroups;
constexpr int64_t kMaxMessage = kMaxMessageKind;
static_assert(kMaxRecordedRank == kMaxClusterWorldSize - 1, "a record's peers are ranks the protocol carries");
constexpr uint32_t kMaxRestoreTier = static_cast<uint32_t>(RestoreTier::kMemory);

// ---- clocks: local times <-> ages ----

// A local CLOCK_MONOTONIC reading as an age at now; -1 when unset (<= 0). A
// reading after now (the record was written after now was taken) is age 0.
int64_t Age(int64_t t, int64_t now) {
  if (t <= 0) return -1;
  if (t >= now) return 0;
  return now - t;
}

// An age back into a local reading; 0 (unset) for -1. An age older than this
// machine's clock becomes 1, the oldest reading that still means "set".
int64_t Back(int64_t age, int64_t now) {
  if (age < 0) return 0;
  if (age >= now) return 1;
  return now - age;
}

// ---- encoding ----

// A view travels as an array of these items, in this order (protocol v4: the
// keyed object of v3 cost the leader a map, its keys' strings and their
// lexing per view, about half of its CPU at 2048 ranks; docs/cluster-protocol.md).
const std::vector<std::string_view> kViewItems = {
    "rank",           "node",         "host",          "pid",
    "alive",          "state",        "valid",         "writer",
    "torn",           "step",         "phase",         "kind",
    "issued",         "done",         "waiting_on",    "phase_age",
    "step_age",       "heartbeat_age", "last_step_ns", "checkpoint_step",
    "checkpoint_failures", "checkpoint_failed_step", "checkpoint_error", "restored_step",
    "restore_tier",   "restore_skipped", "mesh",      "groups",
    "ring_head",      "ring_since",   "ring"};

std::string ViewItemsText() {
  std::string s;
  for (std::string_view name : kViewItems) s += (s.empty() ? "" : ", ") + std::string(name);
  return "[" + s + "]";
}

ojson ViewToJson(const RankView& v, int64_t now) {
  CheckRange(v.rank, 0, kMaxClusterWorldSize - 1, "RankView::rank");
  CheckRange(v.node, 0, kMaxClusterNodes - 1, "RankView::node");
  CheckRange(v.pid, 0, kPidMax, "RankView::pid");
  CheckCount(v.progress.ring.size(), kProgressRingSize, "ring entries");
  // Nothing of a record that is not valid is interpreted, so none of it is sent.
  const RankProgress p = v.progress.valid ? v.progress : RankProgress{};
  ojson ring = ojson::array();
  for (const CollectiveRecord& e : p.ring) {
    // As short as it can be (the leader parses every follower's rings): 5
    // items without a group, 7 with one, 13 with messages (a send/recv).
    const CollectiveLabel& l = e.label;
    ojson entry = ojson::array({e.seq, static_cast<uint32_t>(e.kind), e.bytes, Age(e.issued_ns, now),
                                Age(e.completed_ns, now)});
    const bool messages = l.send_to >= 0 || l.recv_from >= 0 || l.send_what != MessageKind::kNone ||
                          l.recv_what != MessageKind::kNone || l.send_micro >= 0 || l.recv_micro >= 0;
    if (l.group != CollectiveGroup::kUnknown || messages) {
      entry.push_back(static_cast<uint32_t>(l.group));
      entry.push_back(e.group_seq);
    }
    if (messages) {
      for (int64_t v : {int64_t{l.send_to}, int64_t{l.recv_from}, static_cast<int64_t>(l.send_what),
                        static_cast<int64_t>(l.recv_what), int64_t{l.send_micro}, int64_t{l.recv_micro}}) {
        entry.push_back(v);
      }
    }
    ring.push_back(std::move(entry));
  }
  ojson mesh = ojson::array();
  if (p.mesh) mesh = ojson::array({p.mesh->tensor, p.mesh->pipeline, p.mesh->expert});
  ojson groups = ojson::array();
  for (uint64_t n : p.group_issued) groups.push_back(n);
  ojson j = ojson::array();
  j.push_back(v.rank);
  j.push_back(v.node);
  j.push_back(Text(v.host, kMaxClusterHostBytes));
  j.push_back(static_cast<int64_t>(v.pid));
  j.push_back(v.alive);
  j.push_back(std::string(1, ProcStateLetter(v.proc_state)));
  j.push_back(p.valid);
  j.push_back(p.writer_pid != 0);  // the rank attached a progress writer (RankProgress::attached)
  j.push_back(v.progress.torn);
  j.push_back(p.step);
  j.push_back(static_cast<uint32_t>(p.phase));
  j.push_back(static_cast<uint32_t>(p.collective_kind));
  j.push_back(p.collectives_issued);
  j.push_back(p.collectives_done);
  j.push_back(p.waiting_on);
  j.push_back(Age(p.phase_started_ns, now));
  j.push_back(Age(p.step_started_ns, now));
  j.push_back(Age(p.heartbeat_ns, now));
  j.push_back(p.last_step_ns);
  j.push_back(p.checkpoint_step);
  j.push_back(p.checkpoint_failures);
  j.push_back(p.checkpoint_failed_step);
  j.push_back(Text(p.checkpoint_error, kMaxCheckpointErrorBytes));
  j.push_back(p.restored_step);
  j.push_back(static_cast<uint32_t>(p.restore_tier));
  j.push_back(p.restore_skipped);
  j.push_back(std::move(mesh));
  j.push_back(std::move(groups));
  // ring_head says how many collectives ever entered the ring: the ring holds the newest min(ring_head, 16).
  j.push_back(std::max<uint64_t>(p.ring_head, p.ring.size()));
  // ring_since (daemon/ring_delta.h): only the entries from it on; 0, the whole ring.
  j.push_back(p.valid ? v.ring_since : 0);
  j.push_back(std::move(ring));
  HF_CHECK(j.size() == kViewItems.size());
  return j;
}

// ---- parsing ----

Status ParseRing(const json& ring, const std::string& where, int64_t now, RankProgress* p) {
  for (size_t i = 0; i < ring.size(); ++i) {
    const json& e = ring[i];
    auto at = [&] { return where + ": ring[" + std::to_string(i) + "]"; };
    if (!e.is_array() || (e.size() != 5 && e.size() != 7 && e.size() != 13)) {
      return InvalidArgumentError(at() + " must be [seq, kind, bytes, issued_age, completed_age], with [..., group, " +
                                  "group_seq] or [..., group, group_seq, send_to, recv_from, send_what, recv_what, " +
                                  "send_micro, recv_micro], got " + Shown(e));
    }
    int64_t kind = 0, issued = 0, completed = 0, group = 0, send_to = -1, recv_from = -1;
    int64_t send_what = 0, recv_what = 0, send_micro = -1, recv_micro = -1;
    const bool grouped = e.size() >= 7, messages = e.size() == 13;
    if (!e[0].is_number_unsigned() || !IntIn(e[1], 0, kMaxCollectiveKind, &kind) || !e[2].is_number_unsigned() ||
        !IntIn(e[3], -1, kInt64Max, &issued) || !IntIn(e[4], -1, kInt64Max, &completed) ||
        (grouped && (!IntIn(e[5], 0, kMaxGroup, &group) || !e[6].is_number_unsigned())) ||
        (messages &&
         (!IntIn(e[7], -1, kMaxClusterWorldSize - 1, &send_to) || !IntIn(e[8], -1, kMaxClusterWorldSize - 1, &recv_from) ||
          !IntIn(e[9], 0, kMaxMessage, &send_what) || !IntIn(e[10], 0, kMaxMessage, &recv_what) ||
          !IntIn(e[11], -1, INT16_MAX, &send_micro) || !IntIn(e[12], -1, INT16_MAX, &recv_micro)))) {
      return InvalidArgumentError(at() + " must be [seq >= 0, kind in [0, " + std::to_string(kMaxCollectiveKind) +
                                  "], bytes >= 0, issued_age >= -1, completed_age >= -1, group in [0, " +
                                  std::to_string(kMaxGroup) + "], group_seq >= 0, send_to and recv_from ranks or -1, " +
                                  "send_what and recv_what in [0, " + std::to_string(kMaxMessage) +
                                  "], send_micro and recv_micro in [-1, 32767]], got " + Shown(e));
    }
    CollectiveRecord c;
    c.seq = e[0].get<uint64_t>();
    c.kind = static_cast<CollectiveKind>(kind);
    c.bytes = e[2].get<uint64_t>();
    c.issued_ns = Back(issued, now);
    c.completed_ns = Back(completed, now);
    c.label.group = static_cast<CollectiveGroup>(group);
    c.group_seq = group != 0 ? e[6].get<uint64_t>() : 0;  // (group 0: entry shorter than 7, or unknown)
    c.label.send_to = static_cast<int32_t>(send_to);
    c.label.recv_from = static_cast<int32_t>(recv_from);
    c.label.send_what = static_cast<MessageKind>(send_what);
    c.label.recv_what = static_cast<MessageKind>(recv_what);
    c.label.send_micro = static_cast<int32_t>(send_micro);
    c.label.recv_micro = static_cast<int32_t>(recv_micro);
    p->ring.push_back(c);
  }
  return Status::Ok();
}

Result<RankView> ParseView(const json& j, const std::string& where, int64_t now) {
  if (!j.is_array() || j.size() != kViewItems.size()) {
    return InvalidArgumentError(where + " must be an array of the " + std::to_string(kViewItems.size()) +
                                " items " + ViewItemsText() + " (cluster protocol v" +
                                std::to_string(kClusterProtocolVersion) + "), got " + Shown(j));
  }
  Fields f(j, where, kViewItems);
  RankView v;
  RankProgress& p = v.progress;
  HF_RETURN_IF_ERROR(f.Int("rank", 0, kMaxClusterWorldSize - 1, &v.rank));
  HF_RETURN_IF_ERROR(f.Int("node", 0, kMaxClusterNodes - 1, &v.node));
  HF_RETURN_IF_ERROR(f.Text("host", kMaxClusterHostBytes, &v.host));
  HF_RETURN_IF_ERROR(f.Int("pid", 0, kPidMax, &v.pid));
  HF_RETURN_IF_ERROR(f.Bool("alive", &v.alive));
  std::string state;
  HF_RETURN_IF_ERROR(f.Text("state", 1, &state));
  if (state.size() != 1 || static_cast<unsigned char>(state[0]) <= 0x20 || static_cast<unsigned char>(state[0]) >= 0x7f) {
    return f.Error("\"state\" must be one printable ASCII character (R, S, D, T, Z, ?...), got " + Shown(state));
  }
  v.proc_state = ProcStateFromLetter(state[0]);  // a letter this build does not know: kUnknown
  HF_RETURN_IF_ERROR(f.Bool("valid", &p.valid));
  bool writer = true;
  HF_RETURN_IF_ERROR(f.Bool("writer", &writer));
  HF_RETURN_IF_ERROR(f.Bool("torn", &p.torn));
  // The writer's own pid does not travel: the rank's pid stands for it (a new process in the slot is a new pid).
  p.writer_pid = writer ? std::max<int32_t>(1, static_cast<int32_t>(v.pid)) : 0;
  HF_RETURN_IF_ERROR(f.Int("step", kInt64Min, kInt64Max, &p.step));
  uint32_t phase = 0;
  uint32_t kind = 0;
  HF_RETURN_IF_ERROR(f.Int("phase", 0, kMaxPhase, &phase));
  HF_RETURN_IF_ERROR(f.Int("kind", 0, kMaxCollectiveKind, &kind));
  p.phase = static_cast<Phase>(phase);
  p.collective_kind = static_cast<CollectiveKind>(kind);
  HF_RETURN_IF_ERROR(f.Unsigned("issued", &p.collectives_issued));
  HF_RETURN_IF_ERROR(f.Unsigned("done", &p.collectives_done));
  HF_RETURN_IF_ERROR(f.Unsigned("waiting_on", &p.waiting_on));
  int64_t age = 0;
  HF_RETURN_IF_ERROR(f.Int("phase_age", -1, kInt64Max, &age));
  p.phase_started_ns = Back(age, now);
  HF_RETURN_IF_ERROR(f.Int("step_age", -1, kInt64Max, &age));
  p.step_started_ns = Back(age, now);
  HF_RETURN_IF_ERROR(f.Int("heartbeat_age", -1, kInt64Max, &age));
  p.heartbeat_ns = Back(age, now);
  HF_RETURN_IF_ERROR(f.Int("last_step_ns", kInt64Min, kInt64Max, &p.last_step_ns));
  HF_RETURN_IF_ERROR(f.Int("checkpoint_step", kInt64Min, kInt64Max, &p.checkpoint_step));
  HF_RETURN_IF_ERROR(f.Unsigned("checkpoint_failures", &p.checkpoint_failures));
  HF_RETURN_IF_ERROR(f.Int("checkpoint_failed_step", kInt64Min, kInt64Max, &p.checkpoint_failed_step));
  HF_RETURN_IF_ERROR(f.Text("checkpoint_error", kMaxCheckpointErrorBytes, &p.checkpoint_error));
  if (p.checkpoint_error.find('\0') != std::string::npos) return f.Error("\"checkpoint_error\" must not contain NUL");
  uint32_t tier = 0;
  HF_RETURN_IF_ERROR(f.Int("restored_step", kInt64Min, kInt64Max, &p.restored_step));
  HF_RETURN_IF_ERROR(f.Int("restore_tier", 0, kMaxRestoreTier, &tier));
  HF_RETURN_IF_ERROR(f.Int("restore_skipped", 0, std::numeric_limits<uint32_t>::max(), &p.restore_skipped));
  p.restore_tier = static_cast<RestoreTier>(tier);
  HF_ASSIGN_OR_RETURN(const json* mesh, f.Array("mesh", 3));
  if (!mesh->empty()) {
    int64_t tp = 0, pp = 0, ep = 0;
    if (mesh->size() != 3 || !IntIn((*mesh)[0], 1, kMaxMeshSize, &tp) || !IntIn((*mesh)[1], 1, kMaxMeshSize, &pp) ||
        !IntIn((*mesh)[2], 1, kMaxMeshSize, &ep)) {
      return f.Error("\"mesh\" must be [] or [tensor, pipeline, expert], each in [1, " + std::to_string(kMaxMeshSize) +
                     "], got " + Shown(*mesh));
    }
    p.mesh = MeshShape{static_cast<int>(tp), static_cast<int>(pp), static_cast<int>(ep)};
  }
  HF_ASSIGN_OR_RETURN(const json* groups, f.Array("groups", kCollectiveGroups));
  if (groups->size() != kCollectiveGroups) {
    return f.Error("\"groups\" must hold " + std::to_string(kCollectiveGroups) + " counts, got " + Shown(*groups));
  }
  for (size_t g = 0; g < groups->size(); ++g) {
    if (!(*groups)[g].is_number_unsigned()) return f.Error("\"groups\" must hold counts >= 0, got " + Shown(*groups));
    p.group_issued[g] = (*groups)[g].get<uint64_t>();
  }
  HF_RETURN_IF_ERROR(f.Unsigned("ring_head", &p.ring_head));
  HF_RETURN_IF_ERROR(f.Unsigned("ring_since", &v.ring_since));
  HF_ASSIGN_OR_RETURN(const json* ring, f.Array("ring", kProgressRingSize));
  const uint64_t n = std::min<uint64_t>(p.ring_head, kProgressRingSize);
  if (v.ring_since > 0) {  // a delta: the entries from ring_since on, at most the whole ring
    if (ring->size() > n) {
      return f.Error("\"ring\" has " + std::to_string(ring->size()) + " entries; ring_head " +
                     std::to_string(p.ring_head) + " allows at most " + std::to_string(n));
    }
  } else if (ring->size() != n) {
    return f.Error("\"ring\" has " + std::to_string(ring->size()) + " entries; ring_head " +
                   std::to_string(p.ring_head) + " means " + std::to_string(n));
  }
  HF_RETURN_IF_ERROR(ParseRing(*ring, where, now, &p));
  for (const CollectiveRecord& e : p.ring) {
    if (e.seq < v.ring_since) {
      return f.Error("\"ring\" holds collective #" + std::to_string(e.seq) + ", older than ring_since " +
                     std::to_string(v.ring_since));
    }
  }
  return v;
}

}  // namespace

ojson ViewsToJson(const std::vector<RankView>& views, int64_t now) {
  CheckCount(views.size(), kMaxClusterNodeRanks, "rank views");
  ojson out = ojson::array();
  for (const RankView& v : views) out.push_back(ViewToJson(v, now));
  return out;
}

Result<std::vector<RankView>> ParseViews(Fields& f, const std::string& where, int64_t now) {
  HF_ASSIGN_OR_RETURN(const json* ranks, f.Array("ranks", kMaxClusterNodeRanks));
  std::vector<RankView> out;
  out.reserve(ranks->size());
  for (size_t i = 0; i < ranks->size(); ++i) {
    HF_ASSIGN_OR_RETURN(RankView v, ParseView((*ranks)[i], where + ": ranks[" + std::to_string(i) + "]", now));
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace cluster_internal

const std::vector<std::string_view>& ClusterRankViewItems() { return cluster_internal::kViewItems; }

}  // namespace holdfast
