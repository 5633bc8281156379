// CausalAttention (one autograd node, blocked queries, strided heads) against
// the textbook formula: softmax(q k^T / sqrt(hs) with the future masked) v,
// forward and backward, for sequence lengths on and off the block grid.
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
