// Decoding with the KV cache (GptImpl::Prefill / DecodeStep) against full
// forwards (GptImpl::Logits), and the sampler built on it: greedy against
// repeated full forwards, seeded determinism, behaviour log-probs, stop token,
// top-k, temperature, the sampling distribution, and input errors.
#include "trainer/sampler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "trainer/model.h"

namespace holdfast {
namespace {

ModelConfig SmallConfig(bool bias = true) {
  ModelConfig cfg;
  cfg.n_layer = 2;
  cfg.n_head = 4;
  cfg.n_embd = 32;
  cfg.block_size = 24;
  cfg.vocab_size = 256;
  cfg.bias = bias;
  return cfg;
}

// A random model whose logits are far from uniform (weights N(0, 0.15),
// biases and LayerNorms perturbed too), so argmax ties do not come up and
// every parameter matters.
Gpt RandomModel(const ModelConfig& cfg, uint64_t seed) {
  torch::manual_seed(seed);
  Gpt model(cfg);
  torch::NoGradGuard no_grad;
  for (auto& item : model->named_parameters()) {
    torch::Tensor& p = item.value();
    const std::string& name = item.key();
    const bool is_ln = name.find("ln_") != std::string::npos;
    const bool is_bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (is_ln && !is_bias) {
      p.fill_(1.0).add_(torch::randn_like(p) * 0.1);
    } else if (is_bias) {
      p.normal_(0.0, 0.05);
    } else {
      p.normal_(0.0, 0.15);
    }
  }
  return model;
}

torch::Tensor RandomTokens(int64_t B, int64_t T, int64_t vocab) {
  return torch::randint(vocab, {B, T}, torch::kLong);
}

std::vector<int64_t> ToVector(const torch::Tensor& t) {
  auto c = t.to(torch::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

// Greedy by a full forward of the whole sequence per new token: no cache.
std::vector<int64_t> GreedyWithoutCache(Gpt& model, std::vector<int64_t> seq, int max_new, int64_t stop) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> out;
  for (int i = 0; i < max_new; ++i) {
    auto logits = model->Logits(torch::tensor(seq, torch::kLong).view({1, -1}));
    const int64_t token = logits[0][-1].argmax().item<int64_t>();
    out.push_back(token);
    seq.push_back(token);
    if (token == stop) break;
  }
  return out;
}

float MaxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<float>(); }

class CacheTest : public ::testing::TestWithParam<bool> {};

// Every position: the prompt's last logits from Prefill, the rest one DecodeStep at a time.
TEST_P(CacheTest, PrefillAndDecodeMatchFullLogitsAtEveryPosition) {
  const ModelConfig cfg = SmallConfig(/*bias=*/GetParam());
  Gpt model = RandomModel(cfg, 1);
  const int64_t B = 3, T = cfg.block_size;
  torch::manual_seed(2);
  auto idx = RandomTokens(B, T, cfg.vocab_size);
  torch::Tensor full;
  {
    torch::NoGradGuard no_grad;
    full = model->Logits(idx);  // [B, T, V]
  }
  for (int64_t prompt : std::vector<int64_t>{1, 2, 5, 16, T}) {
    SCOPED_TRACE("prompt length " + std::to_string(prompt));
    KvCache cache;
    auto logits = model->Prefill(idx.narrow(1, 0, prompt), &cache, T);
    EXPECT_FALSE(logits.requires_grad());
    ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{B, cfg.vocab_size}));
    float worst = MaxAbsDiff(logits, full.select(1, prompt - 1));
    EXPECT_LE(worst, 1e-4);
    for (int64_t t = prompt; t < T; ++t) {
      logits = model->DecodeStep(idx.select(1, t), &cache);
      ASSERT_EQ(cache.length(), t + 1);
      const float diff = MaxAbsDiff(logits, full.select(1, t));
      EXPECT_LE(diff, 1e-4) << "position " << t;
      worst = std::max(worst, diff);
    }
    std::printf("prompt %2lld, B = %lld: max |cache - full| over positions %lld..%lld = %.2e (logits up to %.2f)\n",
                static_cast<long long>(prompt), static_cast<long long>(B), static_cast<long long>(prompt - 1),
                static_cast<long long>(T - 1), worst, full.abs().max().item<float>());
    // The cache is full at block_size: one more position is a clear error.
    try {
      model->DecodeStep(idx.select(1, 0), &cache);
      ADD_FAILURE() << "decoding past block_size did not fail";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find("block_size"), std::string::npos) << e.what();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Bias, CacheTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "bias" : "no_bias"; });

TEST(CacheTest, IgnoresDropoutAndTrainingMode) {
  ModelConfig cfg = SmallConfig();
  cfg.dropout = 0.3;
  Gpt model = RandomModel(cfg, 3);
  auto idx = RandomTokens(2, 10, cfg.vocab_size);
  model->eval();
  torch::Tensor full;
  {
    torch::NoGradGuard no_grad;
    full = model->Logits(idx);
  }
  model->train();
  KvCache cache;
  auto logits = model->Prefill(idx.narrow(1, 0, 4), &cache, 10);
  EXPECT_LE(MaxAbsDiff(logits, full.select(1, 3)), 1e-4);
  for (int64_t t = 4; t < 10; ++t) EXPECT_LE(MaxAbsDiff(model->DecodeStep(idx.select(1, t), &cache), full.select(1, t)), 1e-4);
}

// ComputeOptions::bf16: the decode path runs the same bfloat16 matmuls, so it
// agrees with Logits() up to bfloat16 rounding (attention sums in another order).
TEST(CacheTest, Bf16ComputeAgreesWithinBf16Rounding) {
  const ModelConfig cfg = SmallConfig();
  Gpt reference = RandomModel(cfg, 16);
  Gpt model(cfg, ComputeOptions{/*bf16=*/true});
  {
    torch::NoGradGuard no_grad;
    auto src = reference->named_parameters();
    for (auto& item : model->named_parameters()) item.value().copy_(src[item.key()]);
  }
  auto idx = RandomTokens(2, 12, cfg.vocab_size);
  torch::Tensor full;
  {
    torch::NoGradGuard no_grad;
    full = model->Logits(idx);
  }
  KvCache cache;
  auto logits = model->Prefill(idx.narrow(1, 0, 3), &cache, 12);
  float worst = MaxAbsDiff(logits, full.select(1, 2));
  for (int64_t t = 3; t < 12; ++t) worst = std::max(worst, MaxAbsDiff(model->DecodeStep(idx.select(1, t), &cache), full.select(1, t)));
  const float scale = full.abs().max().item<float>();
  std::printf("bf16: max |cache - full| = %.4f (logits up to %.2f)\n", worst, scale);
  EXPECT_LE(worst, 0.02 * scale);
}

// Left padding: each row's logits are those of its own unpadded sequence.
TEST(CacheTest, LeftPaddedRowsMatchTheirUnpaddedSequences) {
  const ModelConfig cfg = SmallConfig();
  Gpt model = RandomModel(cfg, 4);
  const std::vector<int64_t> lengths = {7, 3, 1, 5};  // prompt lengths; the longest sets the padding
  const int64_t longest = 7, extra = 8, B = static_cast<int64_t>(lengths.size());
  torch::manual_seed(5);
  auto seqs = RandomTokens(B, longest + extra, cfg.vocab_size);  // row b: its prompt, then its continuation
  auto idx = torch::full({B, longest}, 255, torch::kLong);      // padding value must not matter
  std::vector<int64_t> pad;
  for (int64_t b = 0; b < B; ++b) {
    pad.push_back(longest - lengths[b]);
    idx[b].narrow(0, pad.back(), lengths[b]).copy_(seqs[b].narrow(0, 0, lengths[b]));
  }
  KvCache cache;
  auto logits = model->Prefill(idx, &cache, longest + extra, torch::tensor(pad, torch::kLong));
  for (int64_t step = 0; step <= extra; ++step) {
    for (int64_t b = 0; b < B; ++b) {
      torch::NoGradGuard no_grad;
      auto full = model->Logits(seqs[b].narrow(0, 0, lengths[b] + step).view({1, -1}));
      EXPECT_LE(MaxAbsDiff(logits[b], full[0][-1]), 1e-4) << "row " << b << " step " << step;
    }
    if (step == extra) break;
    std::vector<int64_t> next;
    for (int64_t b = 0; b < B; ++b) next.push_back(seqs[b][lengths[b] + step].item<int64_t>());
    logits = model->DecodeStep(torch::tensor(next, torch::kLong), &cache);
  }
}

TEST(CacheTest, RejectsPromptsLongerThanTheBlock) {
  const ModelConfig cfg = SmallConfig();
  Gpt model = RandomModel(cfg, 6);
  KvCache cache;
  EXPECT_THROW(model->Prefill(RandomTokens(1, cfg.block_size + 1, cfg.vocab_size), &cache), c10::Error);
  EXPECT_THROW(model->Prefill(RandomTokens(1, 4, cfg.vocab_size), &cache, cfg.block_size + 1), c10::Error);
  EXPECT_THROW(model->DecodeStep(torch::zeros({1}, torch::kLong), &cache), c10::Error);  // nothing prefilled
}

TEST(GreedyBatchTest, MatchesGreedyByRepeatedFullForwards) {
  const ModelConfig cfg = SmallConfig();
  Gpt model = RandomModel(cfg, 7);
  torch::manual_seed(8);
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t length : {6, 1, 4, 6, 9}) prompts.push_back(ToVector(RandomTokens(1, length, cfg.vocab_size)));
  const int max_new = 12;  // the longest prompt (9) + 12 - 1 = 20 positions <= block_size 24

  auto got = GreedyBatch(model, prompts, max_new, /*stop_token=*/-1);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ((*got)[i], GreedyWithoutCache(model, prompts[i], max_new, -1)) << "prompt " << i;
  }

  // With a stop token that one prompt produces mid-way: that row stops there, the others go on.
  const int64_t stop = (*got)[2][4];
  auto stopped = GreedyBatch(model, prompts, max_new, stop);
  ASSERT_TRUE(stopped.ok()) << stopped.status().ToString();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto expected = GreedyWithoutCache(model, prompts[i], max_new, stop);
    EXPECT_EQ((*stopped)[i], expected) << "prompt " << i;
  }
  EXPECT_LE((*stopped)[2].size(), 5u);
  EXPECT_EQ((*stopped)[2].back(), stop);
}

TEST(SampleGroupTest, SameSeedSameTokensOtherSeedOtherTokens) {
  const ModelConfig cfg = SmallConfig();
  Gpt model = RandomModel(cfg, 9);
  const std::vector<int64_t> prompt = {'1', '2', '+', '3', '4', '='};
  SampleOptions opts;
  opts.max_new_tokens = 10;
  opts.stop_token = -1;
  auto a = SampleGroup(model, prompt, 8, opts, 42);
  auto b = SampleGroup(model, prompt, 8, opts, 42);
  auto c = SampleGroup(model, prompt, 8, opts, 43);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok()) << a.status().ToString();
  ASSERT_EQ(a->size(), 8u);
  int differ_in_group = 0, differ_across_seeds = 0;
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ((*a)[i].tokens, (*b)[i].tokens);
    EXPECT_EQ((*a)[i].logprobs, (*b)[i].logprobs);
    EXPECT_EQ((*a)[i].tokens.size(), 10u);
    EXPECT_FALSE((*a)[i].stopped);
    differ_across_seeds += (*a)[i].tokens != (*c)[i].tokens;
    differ_in_group += (*a)[i].tokens != (*a)[0].tokens;
  }
  EXPECT_GT(differ_across_seeds, 0);
  EXPECT_GT(differ_in_group, 0);  // each row draws from its own stream

  // Completion i's stream depends on (seed, i), not on the group size.
  auto smaller = SampleGroup(model, prompt, 3, opts, 42);
  ASSERT_TRUE(smaller.ok());
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ((*smaller)[i].tokens, (*a)[i].tokens);
}

// What the learner recomputes: log_softmax of a full forward of prompt + completion.
TEST(SampleGroupTest, LogprobsAreTheModelsTemperatureOneLogprobs) {
  const ModelConfig cfg = SmallConfig();
  Gpt model = RandomModel(cfg, 10);
  const std::vector<int64_t> prompt = {'7', '+', '8', '='};
  SampleOptions opts;
  opts.max_new_tokens = 12;
  opts.temperature = 0.7;  // sampling options must not leak into the log-probs
  opts.top_k = 20;
  opts.stop_token = -1;
  auto group = SampleGroup(model, prompt, 5, opts, 7);
  ASSERT_TRUE(group.ok()) << group.status().ToString();
  torch::NoGradGuard no_grad;
  for (const Completion& c : *group) {
    ASSERT_EQ(c.tokens.size(), c.logprobs.size());
    std::vector<int64_t> seq = prompt;
    seq.insert(seq.end(), c.tokens.begin(), c.tokens.end());
    auto logp = torch::log_softmax(model->Logits(torch::tensor(seq, torch::kLong).view({1, -1})), -1)[0];
    const auto logits = model->Logits(torch::tensor(seq, torch::kLong).view({1, -1}))[0];
    for (size_t j = 0; j < c.tokens.size(); ++j) {
      const int64_t pos = static_cast<int64_t>(prompt.size() + j) - 1;
      EXPECT_NEAR(c.logprobs[j], logp[pos][c.tokens[j]].item<float>(), 1e-4) << "token " << j;
      // top_k = 20: every token is among the 20 most likely at its position.
      const float kth = std::get<0>(logits[pos].topk(opts.top_k))[opts.top_k - 1].item<float>();
      EXPECT_GE(logits[pos][c.tokens[j]].item<float>(), kth) << "token " << j;
    }
  }
}

TEST(SampleGroupTest, StopTokenEndsACompletionAndTheOthersGoOn) {
  const ModelConfig cfg = SmallConfig();
  Gpt model = RandomModel(cfg, 11);
  const std::vector<int64_t> prompt = {'4', '0', '+', '2', '='};
  SampleOptions opts;
  opts.max_new_tokens = 15;
  opts.stop_token = -1;
  auto free_run = SampleGroup(model, prompt, 6, opts, 5);
  ASSERT_TRUE(free_run.ok());
  opts.stop_token = (*free_run)[0].tokens[3];  // completion 0 produces it at step 3 (or earlier)
  auto group = SampleGroup(model, prompt, 6, opts, 5);
  ASSERT_TRUE(group.ok()) << group.status().ToString();
  int stopped = 0;
  for (size_t i = 0; i < group->size(); ++i) {
    // Each completion is its free run cut right after the first stop token.
    const auto& full = (*free_run)[i].tokens;
    auto cut = std::find(full.begin(), full.end(), opts.stop_token);
    const bool stops = cut != full.end();
    std::vector<int64_t> expected(full.begin(), stops ? cut + 1 : full.end());
    EXPECT_EQ((*group)[i].tokens, expected) << "completion " << i;
    EXPECT_EQ((*group)[i].stopped, stops) << "completion " << i;
    EXPECT_EQ((*group)[i].logprobs.size(), (*group)[i].tokens.size());
    stopped += stops;
  }
  EXPECT_TRUE((*group)[0].stopped);
  EXPECT_LE((*group)[0].tokens.size(), 4u);
  std::printf("stop token %lld ended %d of 6 completions\n", static_cast<long long>(opts.stop_token), stopped);
}

TEST(SampleGroupTest, TopOneAndTinyTemperatureAreGreedyAndZeroTemperatureIsRejected) {
  const ModelConfig cfg = SmallConfig();
  Gpt model = RandomModel(cfg, 12);
  const std::vector<int64_t> prompt = {'9', '9', '+', '1', '='};
  const auto greedy = GreedyWithoutCache(model, prompt, 10, -1);
  SampleOptions opts;
  opts.max_new_tokens = 10;
  opts.stop_token = -1;
  opts.top_k = 1;
  auto top1 = SampleGroup(model, prompt, 4, opts, 1);
  ASSERT_TRUE(top1.ok());
  for (const Completion& c : *top1) EXPECT_EQ(c.tokens, greedy);

  opts.top_k = 0;
  opts.temperature = 1e-6;
  auto cold = SampleGroup(model, prompt, 4, opts, 1);
  ASSERT_TRUE(cold.ok());
  for (const Completion& c : *cold) EXPECT_EQ(c.tokens, greedy);

  for (double t : {0.0, -1.0, std::nan("")}) {
    opts.temperature = t;
    auto bad = SampleGroup(model, prompt, 4, opts, 1);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find("temperature"), std::string::npos) << bad.status().message();
  }
}

// The first token's empirical distribution over 4000 draws against
// softmax(logits / T) over the top k, computed here with torch.
TEST(SampleGroupTest, DrawsFollowTheTemperedTopKDistribution) {
  const ModelConfig cfg = SmallConfig();
  Gpt model = RandomModel(cfg, 13);
  const std::vector<int64_t> prompt = {'3', '+', '5', '='};
  SampleOptions opts;
  opts.max_new_tokens = 1;
  opts.temperature = 1.5;
  opts.top_k = 6;
  const int n = 4000;
  auto group = SampleGroup(model, prompt, n, opts, 99);
  ASSERT_TRUE(group.ok());
  std::map<int64_t, int> counts;
  for (const Completion& c : *group) counts[c.tokens.at(0)]++;

  torch::NoGradGuard no_grad;
  auto logits = model->Logits(torch::tensor(prompt, torch::kLong).view({1, -1}))[0][-1];
  auto [values, indices] = logits.topk(opts.top_k);
  auto probs = torch::softmax(values.to(torch::kDouble) / opts.temperature, -1);
  double tv = 0, covered = 0;
  for (int64_t j = 0; j < opts.top_k; ++j) {
    const int64_t token = indices[j].item<int64_t>();
    const double empirical = counts.count(token) ? counts[token] / static_cast<double>(n) : 0.0;
    tv += std::abs(empirical - probs[j].item<double>());
    covered += empirical;
  }
  EXPECT_DOUBLE_EQ(covered, 1.0);  // nothing outside the top k
  tv /= 2;
  std::printf("total variation between draws and softmax(logits / %.1f) over the top %d: %.4f\n", opts.temperature,
              opts.top_k, tv);
  EXPECT_LT(tv, 0.05);
}

TEST(SamplerErrorsTest, BadInputsAreInvalidArgumentsThatSayWhatToDo) {
  const ModelConfig cfg = SmallConfig();
  Gpt model = RandomModel(cfg, 14);
  SampleOptions opts;
  opts.max_new_tokens = 4;
  auto expect_invalid = [](const Status& s, const std::string& needle) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  expect_invalid(SampleGroup(model, {}, 2, opts, 1).status(), "empty");
  expect_invalid(SampleGroup(model, {1, 2}, 0, opts, 1).status(), "n (completions per prompt)");
  expect_invalid(SampleGroup(model, std::vector<int64_t>(cfg.block_size + 1, 1), 2, opts, 1).status(),
                 "more than model.block_size");
  expect_invalid(SampleGroup(model, std::vector<int64_t>(cfg.block_size - 1, 1), 2, opts, 1).status(),
                 "set max_new_tokens <= 2");
  expect_invalid(SampleGroup(model, {1, 256}, 2, opts, 1).status(), "vocabulary");
  SampleOptions bad = opts;
  bad.top_k = -1;
  expect_invalid(SampleGroup(model, {1}, 2, bad, 1).status(), "top_k");
  bad = opts;
  bad.stop_token = 300;
  expect_invalid(SampleGroup(model, {1}, 2, bad, 1).status(), "stop_token");
  bad = opts;
  bad.max_new_tokens = 0;
  expect_invalid(SampleGroup(model, {1}, 2, bad, 1).status(), "max_new_tokens");

  expect_invalid(GreedyBatch(model, {{1, 2}, {}}, 4, -1).status(), "prompts[1] is empty");
  expect_invalid(GreedyBatch(model, {{1}, std::vector<int64_t>(cfg.block_size, 1)}, 4, -1).status(), "prompts[1]");
  auto none = GreedyBatch(model, {}, 4, -1);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());

  // The longest prompt that fits: block_size tokens and one new token.
  auto edge = GreedyBatch(model, {std::vector<int64_t>(cfg.block_size, 1)}, 1, -1);
  ASSERT_TRUE(edge.ok()) << edge.status().ToString();
  EXPECT_EQ((*edge)[0].size(), 1u);
}

// Shows that the cache matters; prints, asserts nothing about speed.
TEST(SamplerThroughput, DecodeTokensPerSecondWithAndWithoutCache) {
  ModelConfig cfg;
  cfg.n_layer = 4;
  cfg.n_head = 4;
  cfg.n_embd = 128;
  cfg.block_size = 128;
  Gpt model = RandomModel(cfg, 15);
  const std::vector<int64_t> prompt(8, 'a');
  const int n = 8, max_new = 100;
  SampleOptions opts;
  opts.max_new_tokens = max_new;
  opts.stop_token = -1;
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto group = SampleGroup(model, prompt, n, opts, 1);
  const double cached = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_TRUE(group.ok());

  // The same work without a cache: a full forward of the batch per token.
  torch::NoGradGuard no_grad;
  auto seq = torch::tensor(prompt, torch::kLong).view({1, -1}).expand({n, -1}).contiguous();
  const auto t1 = Clock::now();
  for (int i = 0; i < max_new; ++i) {
    auto next = model->Logits(seq).select(1, -1).argmax(-1, /*keepdim=*/true);
    seq = torch::cat({seq, next}, 1);
  }
  const double uncached = std::chrono::duration<double>(Clock::now() - t1).count();
  std::printf("decode, %d x %d new tokens after an %zu-token prompt (L=%d, C=%d), %d intra-op threads: "
              "with KV cache %.0f tokens/s, full forward per token %.0f tokens/s (%.1fx)\n",
              n, max_new, prompt.size(), cfg.n_layer, cfg.n_embd, at::get_num_threads(), n * max_new / cached,
              n * max_new / uncached, uncached / cached);
}

}  // namespace
}  // namespace holdfast
