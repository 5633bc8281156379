// GRPO's math against float64 ground truth written out element by element
// (an independent implementation of grpo_loss.h's formulas), and the policy's
// weights through a dump and back.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "trainer/model.h"
#include "trainer/rl/grpo_loss.h"
#include "trainer/rl/policy.h"

namespace holdfast::rl {
namespace {

TEST(GrpoTest, GroupAdvantagesAreZScoresWithTheSampleStdAndZeroForAnEvenGroup) {
  const std::vector<double> r = {1, 0, 0, 1, 1, 0, 0, 0};
  const std::vector<double> a = GroupAdvantages(r, 0.0);
  // mean 3/8; sample std sqrt(sum (r-m)^2 / 7) = sqrt((3*(5/8)^2 + 5*(3/8)^2) / 7)
  const double std = std::sqrt((3 * 0.390625 + 5 * 0.140625) / 7.0);
  EXPECT_NEAR(a[0], 0.625 / std, 1e-15);
  EXPECT_NEAR(a[1], -0.375 / std, 1e-15);
  for (double x : GroupAdvantages({1, 1, 1, 1})) EXPECT_EQ(x, 0.0);
  for (double x : GroupAdvantages({0, 0})) EXPECT_EQ(x, 0.0);
}

TEST(GrpoTest, TheLossAndItsGradientMatchFloat64GroundTruth) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(-3.0, -0.05);
  std::uniform_real_distribution<double> jitter(-0.4, 0.4);
  const int B = 5, L = 7;
  const double clip = 0.2, beta = 0.04;
  std::vector<double> logp(B * L), beh(B * L), ref(B * L), mask(B * L), adv(B);
  for (int i = 0; i < B; ++i) {
    adv[i] = jitter(rng) * 4;
    const int len = 1 + i;  // rows of 1..5 tokens, the rest masked
    for (int t = 0; t < L; ++t) {
      logp[i * L + t] = u(rng);
      beh[i * L + t] = logp[i * L + t] + jitter(rng);  // ratios both inside and outside the clip
      ref[i * L + t] = logp[i * L + t] + jitter(rng);
      mask[i * L + t] = t >= 1 && t < 1 + len ? 1.0 : 0.0;
    }
  }
  // Ground truth: loss and d loss / d logp, in float64.
  double loss = 0;
  std::vector<double> grad(B * L, 0.0);
  for (int i = 0; i < B; ++i) {
    double n = 0;
    for (int t = 0; t < L; ++t) n += mask[i * L + t];
    double row = 0;
    for (int t = 0; t < L; ++t) {
      if (mask[i * L + t] == 0) continue;
      const double lp = logp[i * L + t];
      const double ratio = std::exp(lp - beh[i * L + t]);
      const double clipped = std::min(std::max(ratio, 1 - clip), 1 + clip);
      const double s1 = ratio * adv[i], s2 = clipped * adv[i];
      const double pg = -std::min(s1, s2);
      const double d = ref[i * L + t] - lp;
      const double kl = std::exp(d) - d - 1;
      row += pg + beta * kl;
      // d pg / d lp: -ratio * A where the unclipped term is the min, else 0.
      const double dpg = s1 <= s2 ? -ratio * adv[i] : 0.0;
      const double dkl = -std::exp(d) + 1;  // d/dlp of exp(ref-lp) - (ref-lp) - 1
      grad[i * L + t] = (dpg + beta * dkl) / n / B;
    }
    loss += row / n / B;
  }
  auto t64 = [&](const std::vector<double>& v, std::vector<int64_t> shape) {
    return torch::from_blob(const_cast<double*>(v.data()), shape, torch::kFloat64).to(torch::kFloat32);
  };
  auto lp = t64(logp, {B, L}).requires_grad_(true);
  GrpoTerms terms = GrpoLoss(lp, t64(beh, {B, L}), t64(ref, {B, L}), t64(mask, {B, L}), t64(adv, {B}), clip, beta);
  terms.loss.backward();
  EXPECT_NEAR(terms.loss.item<double>(), loss, 1e-6 * std::max(1.0, std::abs(loss)));
  auto g = lp.grad().to(torch::kFloat64).contiguous();
  for (int k = 0; k < B * L; ++k) EXPECT_NEAR(g.data_ptr<double>()[k], grad[k], 1e-6) << "element " << k;
  EXPECT_GT(terms.clip_fraction, 0.0);
  EXPECT_LT(terms.clip_fraction, 1.0);
}

TEST(GrpoTest, TokenLogProbsReadTheNextTokensLogSoftmax) {
  torch::manual_seed(3);
  auto logits = torch::randn({2, 4, 9});
  auto idx = torch::randint(0, 9, {2, 4}, torch::kLong);
  auto lp = TokenLogProbs(logits, idx);
  ASSERT_EQ(lp.sizes(), (std::vector<int64_t>{2, 3}));
  const auto full = torch::log_softmax(logits.to(torch::kFloat64), -1);
  for (int b = 0; b < 2; ++b) {
    for (int t = 0; t < 3; ++t) {
      EXPECT_NEAR(lp[b][t].item<double>(), full[b][t][idx[b][t + 1].item<int64_t>()].item<double>(), 1e-6);
    }
  }
}

TEST(GrpoTest, APolicyDumpLoadsIntoAnotherModelExactlyAndAnotherConfigIsRefused) {
  ModelConfig cfg;
  cfg.n_layer = 1;
  cfg.n_embd = 16;
  cfg.n_head = 2;
  cfg.block_size = 8;
  torch::manual_seed(1);
  Gpt a(cfg);
  a->InitWeights();
  torch::manual_seed(2);
  Gpt b(cfg);
  b->InitWeights();
  ASSERT_TRUE(LoadModel(DumpModel(a), b, "dump").ok());
  auto idx = torch::randint(0, 256, {1, 8}, torch::kLong);
  EXPECT_TRUE(torch::equal(a->Logits(idx), b->Logits(idx)));
  ModelConfig other = cfg;
  other.n_embd = 32;
  Gpt c(other);
  Status s = LoadModel(DumpModel(a), c, "weights/v00000003");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("weights/v00000003"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace holdfast::rl
