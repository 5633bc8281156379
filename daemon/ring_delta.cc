#include "daemon/ring_delta.h"

#include <algorithm>

#include "common/progress_record.h"

namespace holdfast {

void RingTrimmer::Trim(std::vector<RankView>* views) {
  for (RankView& v : *views) {
    v.ring_since = 0;
    if (!v.progress.valid) {
      sent_.erase(v.rank);
      continue;
    }
    CollectiveRing& ring = v.progress.ring;
    uint64_t first_open = ring.empty() ? 0 : ring.back().seq + 1;
    for (const CollectiveRecord& e : ring) {
      if (!e.completed()) {
        first_open = e.seq;
        break;
      }
    }
    auto it = sent_.find(v.rank);
    if (it != sent_.end() && it->second.pid == v.pid && it->second.first_open > 0) {
      const uint64_t since = it->second.first_open;
      v.ring_since = since;
      // Every entry older than `since`, not only a prefix: a record read while
      // its writer wrapped the ring (torn) may hold an old entry after newer
      // ones, and the leader refuses a delta that holds one (seen at 2048 ranks).
      ring.erase(std::remove_if(ring.begin(), ring.end(), [since](const CollectiveRecord& e) { return e.seq < since; }),
                 ring.end());
    }
    // An empty ring so far: nothing to skip next time either.
    sent_[v.rank] = Sent{v.pid, first_open};
  }
}

void MergeRings(const std::vector<RankView>& held, std::vector<RankView>* incoming) {
  for (RankView& v : *incoming) {
    if (v.ring_since == 0) continue;
    const uint64_t since = v.ring_since;
    v.ring_since = 0;
    // The held views are usually in the same order: look at the same place first.
    const size_t i = static_cast<size_t>(&v - incoming->data());
    auto same = [&v](const RankView& h) { return h.rank == v.rank && h.pid == v.pid; };
    auto base = i < held.size() && same(held[i]) ? held.begin() + static_cast<std::ptrdiff_t>(i)
                                                 : std::find_if(held.begin(), held.end(), same);
    if (base == held.end()) continue;
    // The held entries older than the delta, then the delta: the newest 16.
    size_t older = 0;
    for (const CollectiveRecord& e : base->progress.ring) older += e.seq < since ? 1 : 0;
    const size_t keep = std::min(older, static_cast<size_t>(kProgressRingSize) - v.progress.ring.size());
    CollectiveRing ring;
    size_t skip = older - keep;
    for (const CollectiveRecord& e : base->progress.ring) {
      if (e.seq >= since) continue;
      if (skip > 0) {
        --skip;
        continue;
      }
      ring.push_back(e);
    }
    ring.insert(ring.end(), v.progress.ring.begin(), v.progress.ring.end());
    v.progress.ring = ring;
  }
}

}  // namespace holdfast
