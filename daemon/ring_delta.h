// The collective rings of a follower's reports, sent as deltas (issue 28: at
// 512 ranks on 64 nodes, 16 ring entries a rank in every poll's report were
// three quarters of the cluster protocol's bytes and of the leader's parsing).
//
// An entry of a rank's ring changes once: when its collective completes. So
// the follower sends, for each rank, only the entries from the oldest one that
// was still open in its previous report on (RankView::ring_since), and the
// leader puts them after the entries it already holds. A new process in the
// rank's slot (another pid), a new connection or no previous report sends the
// whole ring.
//
// Thread-safety: none; each lives on its daemon's loop.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "common/rank_progress.h"

namespace holdfast {

// Follower side: trims each view's ring to what the leader lacks.
class RingTrimmer {
 public:
  // Sets ring_since and drops the entries older than it (views of a valid
  // record only; the others are sent as they are).
  void Trim(std::vector<RankView>* views);
  // A new connection: the next report carries whole rings.
  void Reset() { sent_.clear(); }

 private:
  struct Sent {
    pid_t pid = 0;
    uint64_t first_open = 0;  // the oldest entry still open in the last report, or its newest + 1
  };
  std::unordered_map<int, Sent> sent_;  // by rank
};

// Leader side: completes `incoming`'s rings with the entries before their
// ring_since from `held` (the same rank, the same pid), keeping the newest
// kProgressRingSize, and clears ring_since. A ring without a base is left as
// it came (only its newest entries: the oldest reappear as they complete).
void MergeRings(const std::vector<RankView>& held, std::vector<RankView>* incoming);

}  // namespace holdfast
