#include "common/rank_progress.h"

#include <string_view>

#include <algorithm>
#include <cstring>

#include "common/utf8.h"

namespace holdfast {
namespace {

constexpr uint32_t kMaxPhase = static_cast<uint32_t>(Phase::kDone);
constexpr uint32_t kMaxCollectiveKind = static_cast<uint32_t>(CollectiveKind::kSendRecv);
constexpr uint32_t kMaxRestoreTier = static_cast<uint32_t>(RestoreTier::kMemory);

// A peer rank as recorded: one past the largest world a run has (the
// cluster protocol's) is no rank, as -1 is.
int32_t PeerOf(int32_t rank) { return rank >= 0 && rank <= kMaxRecordedRank ? rank : -1; }

bool KnownDetail(const CollectiveDetail& d) {
  return d.group <= kCollectiveGroups && d.send_what <= kMaxMessageKind && d.recv_what <= kMaxMessageKind;
}

}  // namespace

RankProgress DecodeProgress(const ProgressSnapshot& snapshot) {
  RankProgress out;
  out.torn = snapshot.torn;
  if (!snapshot.valid) return out;
  const ProgressRecordLayout& p = snapshot.record;
  const uint64_t n = std::min<uint64_t>(p.ring_head, kProgressRingSize);
  // (ring_head - n + i) % size, oldest first: entry i of the newest n.
  auto entry = [&](uint64_t i) -> const CollectiveEntry& { return p.ring[(p.ring_head - n + i) % kProgressRingSize]; };
  if (p.phase > kMaxPhase || p.collective_kind > kMaxCollectiveKind || p.restore_tier > kMaxRestoreTier) return out;
  auto detail = [&](uint64_t i) -> const CollectiveDetail& {
    return p.ring_detail[(p.ring_head - n + i) % kProgressRingSize];
  };
  for (uint64_t i = 0; i < n; ++i) {
    if (entry(i).kind > kMaxCollectiveKind || !KnownDetail(detail(i))) return out;
  }
  out.valid = true;
  out.writer_pid = p.pid;
  out.step = p.step;
  out.phase = static_cast<Phase>(p.phase);
  out.collective_kind = static_cast<CollectiveKind>(p.collective_kind);
  out.collectives_issued = p.collectives_issued;
  out.collectives_done = p.collectives_done;
  out.waiting_on = p.waiting_on;
  out.phase_started_ns = p.phase_started_ns;
  out.step_started_ns = p.step_started_ns;
  out.heartbeat_ns = p.heartbeat_ns;
  out.last_step_ns = p.last_step_ns;
  out.checkpoint_step = p.checkpoint_step;
  out.checkpoint_failures = p.checkpoint_failures;
  out.checkpoint_failed_step = p.checkpoint_failed_step;
  // At most the field less its NUL, as the writer leaves it (and as the cluster
  // protocol carries it): a record without a NUL loses its last byte, so the
  // leader's view of a follower's rank equals the follower's own (fuzz).
  out.checkpoint_error =
      ValidUtf8(std::string_view(p.checkpoint_error, strnlen(p.checkpoint_error, sizeof(p.checkpoint_error) - 1)));
  out.restored_step = p.restored_step;
  out.restore_tier = static_cast<RestoreTier>(p.restore_tier);
  out.restore_skipped = p.restore_skipped;
  out.ring_head = p.ring_head;
  out.ring.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    const CollectiveEntry& e = entry(i);
    const CollectiveDetail& d = detail(i);
    CollectiveRecord c;
    c.seq = e.seq;
    c.kind = static_cast<CollectiveKind>(e.kind);
    c.bytes = e.bytes;
    c.issued_ns = e.issued_ns;
    c.completed_ns = e.completed_ns;
    c.label.group = static_cast<CollectiveGroup>(d.group);
    c.group_seq = d.group != 0 ? d.group_seq : 0;
    c.label.send_to = PeerOf(d.send_to);
    c.label.recv_from = PeerOf(d.recv_from);
    c.label.send_what = static_cast<MessageKind>(d.send_what);
    c.label.recv_what = static_cast<MessageKind>(d.recv_what);
    c.label.send_micro = std::max<int32_t>(-1, d.send_micro);
    c.label.recv_micro = std::max<int32_t>(-1, d.recv_micro);
    out.ring.push_back(c);
  }
  auto in_range = [](int32_t v) { return v >= 1 && v <= kMaxMeshSize; };
  if (in_range(p.mesh_tensor) && in_range(p.mesh_pipeline) && in_range(p.mesh_expert)) {
    out.mesh = MeshShape{p.mesh_tensor, p.mesh_pipeline, p.mesh_expert};
  }
  for (int g = 0; g < kCollectiveGroups; ++g) out.group_issued[static_cast<size_t>(g)] = p.group_issued[g];
  return out;
}

const CollectiveRecord* RankProgress::waited() const {
  if (!in_collective()) return nullptr;
  for (const CollectiveRecord& c : ring) {
    if (c.seq == waiting_on) return &c;
  }
  return nullptr;
}

std::optional<DeviceMesh> ModelParallelMesh(const std::vector<RankView>& ranks) {
  std::optional<MeshShape> shape;
  for (const RankView& r : ranks) {
    if (!r.progress.valid || !r.progress.mesh) continue;
    const MeshShape& m = *r.progress.mesh;
    if (shape && (shape->tensor != m.tensor || shape->pipeline != m.pipeline || shape->expert != m.expert)) {
      return std::nullopt;  // ranks that disagree: no mesh to reason with
    }
    shape = m;
  }
  if (!shape || (shape->tensor == 1 && shape->pipeline == 1 && shape->expert == 1)) return std::nullopt;
  Result<DeviceMesh> mesh = DeviceMesh::Create(static_cast<int>(ranks.size()), *shape);
  if (!mesh.ok()) return std::nullopt;
  for (const RankView& r : ranks) {
    if (r.rank < 0 || r.rank >= mesh->world()) return std::nullopt;
  }
  return *mesh;
}

bool MeshGroupOf(CollectiveGroup g, MeshGroup* out) {
  switch (g) {
    case CollectiveGroup::kData: *out = MeshGroup::kData; return true;
    case CollectiveGroup::kTensor: *out = MeshGroup::kTensor; return true;
    case CollectiveGroup::kPipeline: *out = MeshGroup::kPipeline; return true;
    case CollectiveGroup::kExpert: *out = MeshGroup::kExpert; return true;
    case CollectiveGroup::kExpertData: *out = MeshGroup::kExpertData; return true;
    case CollectiveGroup::kUnknown:
    case CollectiveGroup::kWorld: return false;
  }
  return false;
}

CollectiveGroup CollectiveGroupOf(MeshGroup group) {
  switch (group) {
    case MeshGroup::kData: return CollectiveGroup::kData;
    case MeshGroup::kTensor: return CollectiveGroup::kTensor;
    case MeshGroup::kPipeline: return CollectiveGroup::kPipeline;
    case MeshGroup::kExpert: return CollectiveGroup::kExpert;
    case MeshGroup::kExpertData: return CollectiveGroup::kExpertData;
  }
  return CollectiveGroup::kUnknown;
}

int64_t NewestStep(const std::vector<RankView>& ranks, int64_t at_least) {
  int64_t best = at_least;
  for (const RankView& v : ranks) {
    if (v.progress.valid) best = std::max(best, v.progress.step);
  }
  return best;
}

}  // namespace holdfast
