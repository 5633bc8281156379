// CausalAttention (one autograd node, blocked queries, strided heads) against
// the textbook formula: softmax(q k^T / sqrt(hs) with the future masked) v,
// forward and backward, for sequence lengths on and off the block grid.
#include <algorithm>
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "trainer/model.h"

namespace holdfast {
namespace {

torch::Tensor Reference(const torch::Tensor& qkv, int64_t n_head) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, hs = C / n_head;
  auto parts = qkv.split(C, 2);
  auto heads = [&](const torch::Tensor& t) { return t.view({B, T, n_head, hs}).transpose(1, 2); };
  auto att = torch::matmul(heads(parts[0]), heads(parts[1]).transpose(-2, -1)) / std::sqrt(static_cast<double>(hs));
  auto future = torch::ones({T, T}, torch::kBool).triu(1);
  att = torch::softmax(att.masked_fill(future, -std::numeric_limits<float>::infinity()), -1);
  return torch::matmul(att, heads(parts[2])).transpose(1, 2).reshape({B, T, C});
}

struct Case {
  int64_t T;
  int64_t block;
};

class CausalAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(CausalAttentionTest, MatchesTheTextbookFormulaForwardAndBackward) {
  const auto [T, block] = GetParam();
  const int64_t B = 3, n_head = 4, C = 32;
  torch::manual_seed(7);
  auto input = torch::randn({B, T, 3 * C});
  auto upstream = torch::randn({B, T, C});
  auto mask = torch::full({T, T}, -std::numeric_limits<float>::infinity()).triu(1);

  auto a = input.clone().requires_grad_(true);
  auto y = CausalAttention(a, n_head, mask, block);
  (y * upstream).sum().backward();

  auto b = input.clone().requires_grad_(true);
  auto y_ref = Reference(b, n_head);
  (y_ref * upstream).sum().backward();

  ASSERT_EQ(y.sizes(), y_ref.sizes());
  EXPECT_TRUE(torch::allclose(y, y_ref, 1e-5, 1e-5)) << "max |dy| " << (y - y_ref).abs().max().item<float>();
  EXPECT_TRUE(torch::allclose(a.grad(), b.grad(), 1e-5, 1e-5))
      << "max |d grad| " << (a.grad() - b.grad()).abs().max().item<float>();
  // The first query sees only the first key: its output is exactly v_0.
  EXPECT_TRUE(torch::equal(y.select(1, 0), input.select(1, 0).narrow(1, 2 * C, C)));
}

INSTANTIATE_TEST_SUITE_P(Lengths, CausalAttentionTest,
                         ::testing::Values(Case{1, 64}, Case{7, 64}, Case{64, 64}, Case{65, 64}, Case{130, 64},
                                           Case{256, 64}, Case{100, 16}, Case{33, 1}),
                         [](const auto& info) {
                           return "T" + std::to_string(info.param.T) + "_block" + std::to_string(info.param.block);
                         });

TEST(CausalAttentionTest, FutureTokensDoNotChangeThePast) {
  const int64_t B = 2, T = 150, n_head = 2, C = 16;
  torch::manual_seed(11);
  auto mask = torch::full({T, T}, -std::numeric_limits<float>::infinity()).triu(1);
  auto qkv = torch::randn({B, T, 3 * C});
  auto changed = qkv.clone();
  changed.narrow(1, 100, T - 100).normal_();
  auto y = CausalAttention(qkv, n_head, mask);
  auto y_changed = CausalAttention(changed, n_head, mask);
  EXPECT_TRUE(torch::equal(y.narrow(1, 0, 100), y_changed.narrow(1, 0, 100)));
  EXPECT_FALSE(torch::equal(y.narrow(1, 100, 50), y_changed.narrow(1, 100, 50)));
}

}  // namespace
}  // namespace holdfast

namespace holdfast {
namespace {

std::vector<std::string> ParameterNames(const Gpt& model) {
  std::vector<std::string> names;
  for (const auto& item : model->named_parameters()) names.push_back(item.key());
  return names;
}

TEST(GptLayoutTest, BiasFalseMeansNoBiasAnywhereAsInNanoGpt) {
  ModelConfig cfg;
  cfg.n_layer = 2;
  cfg.bias = false;
  Gpt model(cfg);
  const std::vector<std::string> names = ParameterNames(model);
  for (const std::string& n : names) EXPECT_EQ(n.find("bias"), std::string::npos) << n;
  // nanoGPT's names and order, without a single bias.
  const std::vector<std::string> want = {
      "wte.weight", "wpe.weight",
      "h.0.ln_1.weight", "h.0.attn.c_attn.weight", "h.0.attn.c_proj.weight", "h.0.ln_2.weight",
      "h.0.mlp.c_fc.weight", "h.0.mlp.c_proj.weight",
      "h.1.ln_1.weight", "h.1.attn.c_attn.weight", "h.1.attn.c_proj.weight", "h.1.ln_2.weight",
      "h.1.mlp.c_fc.weight", "h.1.mlp.c_proj.weight",
      "ln_f.weight"};
  EXPECT_EQ(names, want);
  cfg.bias = true;
  Gpt with_bias(cfg);
  const std::vector<std::string> all = ParameterNames(with_bias);
  EXPECT_NE(std::find(all.begin(), all.end(), "h.0.ln_1.bias"), all.end());
  EXPECT_NE(std::find(all.begin(), all.end(), "ln_f.bias"), all.end());
  EXPECT_EQ(all.size(), want.size() + 2 * 6 + 1);  // per block: 2 LN + 4 linear biases; ln_f.bias
}

TEST(GptLayoutTest, LayerNormWithoutBiasIsTheTextbookFormula) {
  torch::manual_seed(5);
  LayerNorm ln(8, /*bias=*/false);
  {
    torch::NoGradGuard no_grad;
    ln->named_parameters()["weight"].uniform_(0.5, 1.5);
  }
  auto x = torch::randn({3, 8}, torch::kFloat64).to(torch::kFloat32);
  auto got = ln(x).to(torch::kFloat64);
  auto xd = x.to(torch::kFloat64);
  auto mean = xd.mean(-1, true);
  auto var = (xd - mean).pow(2).mean(-1, true);
  auto want = (xd - mean) / torch::sqrt(var + 1e-5) * ln->named_parameters()["weight"].to(torch::kFloat64);
  EXPECT_LT((got - want).abs().max().item<double>(), 1e-5);
}

TEST(GptComputeTest, Bf16MatmulsStayCloseToFloat32) {
  ModelConfig cfg;
  cfg.n_layer = 2;
  cfg.n_embd = 64;
  cfg.block_size = 32;
  torch::manual_seed(11);
  Gpt fp32(cfg);
  fp32->InitWeights();
  Gpt bf16(cfg, ComputeOptions{true});
  {
    torch::NoGradGuard no_grad;
    auto src = fp32->parameters();
    auto dst = bf16->parameters();
    ASSERT_EQ(src.size(), dst.size());
    for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
  auto idx = torch::randint(0, 256, {4, 32}, torch::kLong);
  auto targets = torch::randint(0, 256, {4, 32}, torch::kLong);
  auto a = fp32->forward(idx, targets);
  auto b = bf16->forward(idx, targets);
  EXPECT_EQ(b.scalar_type(), torch::kFloat32) << "the loss is float32";
  const double rel = std::abs(a.item<double>() - b.item<double>()) / a.item<double>();
  EXPECT_LT(rel, 1e-2);
  EXPECT_GT(rel, 0.0) << "bf16 matmuls round differently: the switch must change the math";
  b.backward();
  for (const auto& p : bf16->parameters()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.grad().scalar_type(), torch::kFloat32) << "master gradients are float32";
  }
}

}  // namespace
}  // namespace holdfast
