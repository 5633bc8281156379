#include "trainer/sampler.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <numeric>
#include <string>

#include "trainer/model.h"

namespace holdfast {
namespace {

// splitmix64 (Steele, Lea, Flood 2014): tiny, and the same numbers on every
// platform, which torch's and the standard library's distributions do not promise.
uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// One row's uniforms in [0, 1): a stream per (seed, row index).
class UniformStream {
 public:
  UniformStream(uint64_t seed, uint64_t index) {
    uint64_t s = seed;
    s = SplitMix64(&s) ^ index;
    state_ = SplitMix64(&s);
  }
  double Next() { return static_cast<double>(SplitMix64(&state_) >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

// First index of the largest logit.
int64_t Argmax(const float* logits, int64_t vocab) {
  return static_cast<int64_t>(std::max_element(logits, logits + vocab) - logits);
}

// Inverse CDF over float64 cumulative weights exp((l - max) / temperature) of
// the kept tokens (the top_k largest logits, lower ids first on a tie), in
// token order; u in [0, 1).
int64_t SampleToken(const float* logits, int64_t vocab, double temperature, int top_k, double u,
                    std::vector<int64_t>* scratch) {
  std::vector<int64_t>& kept = *scratch;
  kept.resize(static_cast<size_t>(vocab));
  std::iota(kept.begin(), kept.end(), int64_t{0});
  if (top_k > 0 && top_k < vocab) {
    std::partial_sort(kept.begin(), kept.begin() + top_k, kept.end(), [&](int64_t a, int64_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    kept.resize(static_cast<size_t>(top_k));
    std::sort(kept.begin(), kept.end());
  }
  double max = -std::numeric_limits<double>::infinity();
  for (int64_t t : kept) max = std::max(max, static_cast<double>(logits[t]));
  double total = 0;
  for (int64_t t : kept) total += std::exp((static_cast<double>(logits[t]) - max) / temperature);
  const double target = u * total;
  double cumulative = 0;
  for (int64_t t : kept) {
    cumulative += std::exp((static_cast<double>(logits[t]) - max) / temperature);
    if (cumulative > target) return t;
  }
  return kept.back();  // u * total rounded up to total: the last kept token
}

Status CheckFinite(const float* logits, int64_t vocab, const char* who) {
  for (int64_t t = 0; t < vocab; ++t) {
    if (!std::isfinite(logits[t])) {
      return InternalError(std::string(who) + ": the model produced a non-finite logit (" + std::to_string(logits[t]) +
                           " for token " + std::to_string(t) + "); its weights have diverged or are corrupt");
    }
  }
  return Status::Ok();
}

// A prompt that can be decoded max_new_tokens tokens: the last generated token
// is never fed back, so positions run to prompt + max_new_tokens - 2.
Status CheckPrompt(const std::vector<int64_t>& prompt, const ModelConfig& cfg, int max_new_tokens,
                   const std::string& what) {
  if (prompt.empty()) return InvalidArgumentError(what + " is empty: a completion needs at least one prompt token");
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= cfg.vocab_size) {
      return InvalidArgumentError(what + " token " + std::to_string(i) + " = " + std::to_string(prompt[i]) +
                                  " is outside the model's vocabulary [0, " + std::to_string(cfg.vocab_size) + ")");
    }
  }
  const int64_t length = static_cast<int64_t>(prompt.size());
  if (length > cfg.block_size) {
    return InvalidArgumentError(what + " has " + std::to_string(length) + " tokens, more than model.block_size = " +
                                std::to_string(cfg.block_size) + "; shorten the prompt");
  }
  if (length + max_new_tokens - 1 > cfg.block_size) {
    return InvalidArgumentError(what + " (" + std::to_string(length) + " tokens) with max_new_tokens = " +
                                std::to_string(max_new_tokens) + " runs past model.block_size = " +
                                std::to_string(cfg.block_size) + "; set max_new_tokens <= " +
                                std::to_string(cfg.block_size - length + 1));
  }
  return Status::Ok();
}

Status CheckCommon(const ModelConfig& cfg, int max_new_tokens, int64_t stop_token) {
  if (max_new_tokens < 1) {
    return InvalidArgumentError("max_new_tokens must be >= 1, got " + std::to_string(max_new_tokens));
  }
  if (stop_token < -1 || stop_token >= cfg.vocab_size) {
    return InvalidArgumentError("stop_token " + std::to_string(stop_token) + " is outside the model's vocabulary [0, " +
                                std::to_string(cfg.vocab_size) + ") (-1 = no stop token)");
  }
  return Status::Ok();
}

torch::Tensor Rows(const std::vector<int64_t>& rows) {
  return torch::tensor(torch::ArrayRef<int64_t>(rows), torch::kLong);
}

}  // namespace

Result<std::vector<Completion>> SampleGroup(Gpt& model, const std::vector<int64_t>& prompt, int n,
                                            const SampleOptions& opts, uint64_t seed) {
  const ModelConfig& cfg = model->config();
  HF_RETURN_IF_ERROR(CheckCommon(cfg, opts.max_new_tokens, opts.stop_token));
  if (n < 1) return InvalidArgumentError("SampleGroup: n (completions per prompt) must be >= 1, got " + std::to_string(n));
  if (!(opts.temperature > 0) || !std::isfinite(opts.temperature)) {
    return InvalidArgumentError("temperature must be a finite number > 0, got " + std::to_string(opts.temperature) +
                                "; for greedy decoding set top_k = 1");
  }
  if (opts.top_k < 0) return InvalidArgumentError("top_k must be >= 0 (0 = off), got " + std::to_string(opts.top_k));
  HF_RETURN_IF_ERROR(CheckPrompt(prompt, cfg, opts.max_new_tokens, "the prompt"));

  const int64_t vocab = cfg.vocab_size;
  const int64_t length = static_cast<int64_t>(prompt.size());
  std::vector<Completion> out(static_cast<size_t>(n));
  try {
    torch::NoGradGuard no_grad;
    KvCache cache;
    // Prefill the prompt once and fan its cache out to the n rows.
    auto logits = model->Prefill(Rows(prompt).view({1, length}), &cache, length + opts.max_new_tokens - 1);
    cache.Select(torch::zeros({n}, torch::kLong));
    logits = logits.expand({n, vocab});

    std::vector<UniformStream> streams;
    for (int i = 0; i < n; ++i) streams.emplace_back(seed, static_cast<uint64_t>(i));
    std::vector<int64_t> active(static_cast<size_t>(n));  // completion index of each cached row
    std::iota(active.begin(), active.end(), int64_t{0});
    std::vector<int64_t> scratch;
    for (int step = 0; step < opts.max_new_tokens; ++step) {
      auto cpu = logits.to(torch::kCPU, torch::kFloat32).contiguous();
      auto logp = torch::log_softmax(cpu, -1);
      const float* l = cpu.data_ptr<float>();
      const float* lp = logp.data_ptr<float>();
      std::vector<int64_t> keep, next;  // rows still going, and the tokens they feed back
      for (size_t r = 0; r < active.size(); ++r) {
        const float* row = l + r * vocab;
        HF_RETURN_IF_ERROR(CheckFinite(row, vocab, "SampleGroup"));
        Completion& c = out[static_cast<size_t>(active[r])];
        const int64_t token =
            SampleToken(row, vocab, opts.temperature, opts.top_k, streams[static_cast<size_t>(active[r])].Next(), &scratch);
        c.tokens.push_back(token);
        c.logprobs.push_back(lp[r * vocab + token]);
        if (token == opts.stop_token) {
          c.stopped = true;
        } else {
          keep.push_back(static_cast<int64_t>(r));
          next.push_back(token);
        }
      }
      if (keep.empty() || step + 1 == opts.max_new_tokens) break;
      if (keep.size() < active.size()) {  // finished rows leave the batch
        cache.Select(Rows(keep));
        std::vector<int64_t> still;
        for (int64_t r : keep) still.push_back(active[static_cast<size_t>(r)]);
        active.swap(still);
      }
      logits = model->DecodeStep(Rows(next), &cache);
    }
  } catch (const std::exception& e) {
    return InternalError(std::string("SampleGroup: LibTorch failed: ") + e.what());
  }
  return out;
}

Result<std::vector<std::vector<int64_t>>> GreedyBatch(Gpt& model, const std::vector<std::vector<int64_t>>& prompts,
                                                      int max_new_tokens, int64_t stop_token) {
  const ModelConfig& cfg = model->config();
  HF_RETURN_IF_ERROR(CheckCommon(cfg, max_new_tokens, stop_token));
  std::vector<std::vector<int64_t>> out(prompts.size());
  if (prompts.empty()) return out;
  int64_t longest = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    HF_RETURN_IF_ERROR(CheckPrompt(prompts[i], cfg, max_new_tokens, "prompts[" + std::to_string(i) + "]"));
    longest = std::max<int64_t>(longest, static_cast<int64_t>(prompts[i].size()));
  }

  const int64_t vocab = cfg.vocab_size;
  const int64_t batch = static_cast<int64_t>(prompts.size());
  try {
    torch::NoGradGuard no_grad;
    // Left-pad to the longest prompt, so that every row's next token goes to the same slot.
    std::vector<int64_t> tokens(static_cast<size_t>(batch * longest), 0), pad;
    bool padded = false;
    for (size_t b = 0; b < prompts.size(); ++b) {
      const auto& p = prompts[b];
      const int64_t offset = longest - static_cast<int64_t>(p.size());
      std::copy(p.begin(), p.end(), tokens.begin() + static_cast<int64_t>(b) * longest + offset);
      pad.push_back(offset);
      padded = padded || offset > 0;
    }
    KvCache cache;
    auto logits = model->Prefill(Rows(tokens).view({batch, longest}), &cache, longest + max_new_tokens - 1,
                                 padded ? Rows(pad) : torch::Tensor());

    std::vector<int64_t> active(static_cast<size_t>(batch));
    std::iota(active.begin(), active.end(), int64_t{0});
    for (int step = 0; step < max_new_tokens; ++step) {
      auto cpu = logits.to(torch::kCPU, torch::kFloat32).contiguous();
      const float* l = cpu.data_ptr<float>();
      std::vector<int64_t> keep, next;
      for (size_t r = 0; r < active.size(); ++r) {
        HF_RETURN_IF_ERROR(CheckFinite(l + r * vocab, vocab, "GreedyBatch"));
        const int64_t token = Argmax(l + r * vocab, vocab);
        out[static_cast<size_t>(active[r])].push_back(token);
        if (token != stop_token) {
          keep.push_back(static_cast<int64_t>(r));
          next.push_back(token);
        }
      }
      if (keep.empty() || step + 1 == max_new_tokens) break;
      if (keep.size() < active.size()) {
        cache.Select(Rows(keep));
        std::vector<int64_t> still;
        for (int64_t r : keep) still.push_back(active[static_cast<size_t>(r)]);
        active.swap(still);
      }
      logits = model->DecodeStep(Rows(next), &cache);
    }
  } catch (const std::exception& e) {
    return InternalError(std::string("GreedyBatch: LibTorch failed: ") + e.what());
  }
  return out;
}

}  // namespace holdfast
