#include "common/rank_progress.h"

#include <string_view>

#include <algorithm>
#include <cstring>

#include "common/utf8.h"

namespace holdfast {
namespace {

constexpr uint32_t kMaxPhase = static_cast<uint32_t>(Phase::kDone);
constexpr uint32_t kMaxCollectiveKind = static_cast<uint32_t>(CollectiveKind::kReduceScatter);
constexpr uint32_t kMaxRestoreTier = static_cast<uint32_t>(RestoreTier::kMemory);

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
  for (uint64_t i = 0; i < n; ++i) {
    if (entry(i).kind > kMaxCollectiveKind) return out;
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
    out.ring.push_back(CollectiveRecord{e.seq, static_cast<CollectiveKind>(e.kind), e.bytes, e.issued_ns, e.completed_ns});
  }
  return out;
}

int64_t NewestStep(const std::vector<RankView>& ranks, int64_t at_least) {
  int64_t best = at_least;
  for (const RankView& v : ranks) {
    if (v.progress.valid) best = std::max(best, v.progress.step);
  }
  return best;
}

}  // namespace holdfast
