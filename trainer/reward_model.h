// A learned reward model served by holdfast-reward (--model): a GPT with a
// scalar head (model.reward_head), trained by train.objective = "reward" on
// preference pairs (docs/rl-reward.md, "A learned reward").
//
// The reward of a text (a prompt, then a completion up to and with its first
// newline; byte-level tokens, the first block_size of them) is
// sigmoid(head(ln_f(h)[last token])): what the objective trains, through the
// same Gpt::Rewards. A call (the requests the service batched together, up to
// kForwardsPerCall x batch texts) runs forwards of exactly `batch` rows of
// block_size tokens (unused rows padded), so a text's reward is the same bits
// whatever else is in its call and wherever in it: a synchronous RL run stays
// deterministic however the service happens to batch its requests.
//
// No LibTorch in this header (holdfast-reward's main includes it).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "common/status.h"
#include "trainer/rl/reward_server.h"

namespace holdfast {

// Texts of one scorer call, in forwards: the service's batches are up to this
// many forwards' worth of waiting requests.
inline constexpr size_t kForwardsPerCall = 16;

struct RewardModelOptions {
  std::string config;   // the reward model's training config (its [model] section is used)
  std::string weights;  // a params dump (--dump-final) or a checkpoint (a step folder or a root)
  size_t batch = 8;     // rows per forward (bench/reward_bench.sh: 8 beats 64 on a CPU)
  int threads = 1;      // LibTorch intra-op threads
};

// Loads and checks the model: a config without model.reward_head, or weights
// that do not fit it, are kInvalidArgument/kFailedPrecondition naming the file.
Result<std::shared_ptr<rl::TextScorer>> LoadRewardModel(const RewardModelOptions& options);

}  // namespace holdfast
