// Sampling from a Gpt with a KV cache: rollouts (SampleGroup) and greedy
// evaluation (GreedyBatch).
//
// SampleGroup draws n completions of one prompt as one batch: the prompt is
// prefilled once, fanned out to n rows, and decoded one token per step; a row
// that produces the stop token leaves the batch. Each draw is an inverse-CDF
// lookup over float64 cumulative probabilities with a uniform from our own
// splitmix64 stream (seeded by seed and the row's index), never torch's or the
// standard library's generators: the same weights, prompt, options and seed
// give the same tokens in any process and LibTorch version (on the same CPU
// thread count, where the logits themselves are the same). Log-probabilities
// are those of the model's own distribution (temperature 1, no top-k): what a
// learner's importance ratio compares against.
//
// Thread-safety: none. The calls run the model, so one thread owns the model
// for their duration. No LibTorch in this header; LibTorch's exceptions are
// caught inside and come back as Status.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace holdfast {

class Gpt;  // trainer/model.h

struct SampleOptions {
  int max_new_tokens = 0;    // >= 1; prompt + max_new_tokens - 1 must fit model.block_size
  double temperature = 1.0;  // > 0 (greedy: top_k = 1, or GreedyBatch)
  int top_k = 0;             // sample among the k most likely tokens; 0 = all
  int64_t stop_token = '\n';  // ends a completion (and is part of it); -1 = none
};

struct Completion {
  std::vector<int64_t> tokens;  // generated, including the stop token if produced
  // log p(token) of each generated token under the model's distribution at
  // temperature 1 (log_softmax of the raw logits), whatever the sampling options.
  std::vector<float> logprobs;
  bool stopped = false;  // the stop token ended it (else max_new_tokens did)
};

// n completions of `prompt` (token ids in [0, vocab_size)). Completion i
// draws its uniforms from the stream (seed, i): it does not depend on n or on
// the other completions (beyond the logits' rounding at another batch size).
Result<std::vector<Completion>> SampleGroup(Gpt& model, const std::vector<int64_t>& prompt, int n,
                                            const SampleOptions& opts, uint64_t seed);

// Greedy (argmax, lowest token id on a tie) completions of each prompt, in one
// left-padded batch; prompts may differ in length. Each result holds the
// generated tokens, including stop_token (-1 = none) when produced.
Result<std::vector<std::vector<int64_t>>> GreedyBatch(Gpt& model, const std::vector<std::vector<int64_t>>& prompts,
                                                      int max_new_tokens, int64_t stop_token);

}  // namespace holdfast
