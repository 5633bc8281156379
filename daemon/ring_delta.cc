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
    std::vector<CollectiveRecord>& ring = v.progress.ring;
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
      ring.erase(ring.begin(), std::find_if(ring.begin(), ring.end(),
                                            [since](const CollectiveRecord& e) { return e.seq >= since; }));
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
    auto base = std::find_if(held.begin(), held.end(),
                             [&v](const RankView& h) { return h.rank == v.rank && h.pid == v.pid; });
    if (base == held.end()) continue;
    std::vector<CollectiveRecord> ring;
    for (const CollectiveRecord& e : base->progress.ring) {
      if (e.seq < since) ring.push_back(e);
    }
    ring.insert(ring.end(), v.progress.ring.begin(), v.progress.ring.end());
    if (ring.size() > static_cast<size_t>(kProgressRingSize)) {
      ring.erase(ring.begin(), ring.end() - kProgressRingSize);
    }
    v.progress.ring = std::move(ring);
  }
}

}  // namespace holdfast
