// ReplayBuffer: the GRPO learner's groups that arrived from the rollout
// workers and are not yet trained on, with the policy version that made each
// (exchange.h). It is part of the learner's checkpointed state ("rl.buffer"):
// after a learner restart the buffer, the consumed prompts and the policy
// version (= the step) come back together from one checkpoint, so no group is
// trained on twice, none is lost, and none from a policy that no longer exists
// (steps after the checkpoint) is kept.
//
// Rules (Offer): a group made by a version newer than the learner's is
// dropped whenever it is seen (not kept for later: see below); a group is
// taken only when it is asked for (consumed_below <=
// q < upto), not here already, of the right size and task, made by a version
// the learner has had (version <= learner_version: a newer one comes from a
// learner timeline that was rolled back), and fresh enough for the step that
// will train it (step(q) - version <= max_staleness; 0 = synchronous: every
// group made by the policy of its own step). Learner step s trains prompts
// [s*P, (s+1)*P), in order (TakeStep).
//
// Plain data; no LibTorch. Thread-safety: one thread (the learner's rank 0).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/rl/exchange.h"

namespace holdfast::rl {

class ReplayBuffer {
 public:
  enum class Verdict { kAccepted, kDuplicate, kConsumed, kNotAsked, kFromALostTimeline, kTooStale, kMalformed };
  static const char* VerdictName(Verdict v);

  ReplayBuffer(int64_t prompts_per_step, int64_t group_size, int64_t max_staleness, std::string task);

  // Offers a group read from the exchange; *why says what was wrong when not accepted.
  Verdict Offer(RolloutGroup group, int64_t learner_version, uint64_t upto, std::string* why);

  // Whether every group of `step` is here; the missing prompt indexes.
  bool HasStep(int64_t step) const;
  std::vector<uint64_t> Missing(int64_t step) const;
  // Removes and returns the groups of `step` in prompt order (HasStep must be
  // true); consumed_below becomes (step + 1) * P.
  std::vector<RolloutGroup> TakeStep(int64_t step);

  uint64_t consumed_below() const { return consumed_below_; }
  // A learner at `step` has consumed everything before its prompts.
  void SetConsumedBelow(uint64_t q);
  std::set<uint64_t> buffered() const;
  size_t size() const { return groups_.size(); }

  // The checkpointed form (JSON text: the settings, consumed_below, every group).
  std::string Serialize() const;
  // Restores a Serialize()d buffer; settings that differ from this buffer's
  // (prompts_per_step, group_size, task) are an error saying which.
  Status Restore(const std::string& text, const std::string& source);

 private:
  int64_t prompts_per_step_;
  int64_t group_size_;
  int64_t max_staleness_;
  std::string task_;
  uint64_t consumed_below_ = 0;
  std::map<uint64_t, RolloutGroup> groups_;
};

}  // namespace holdfast::rl
