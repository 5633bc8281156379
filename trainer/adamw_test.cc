#include "trainer/adamw.h"

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace holdfast {
namespace {

// The textbook AdamW (Loshchilov & Hutter, as torch.optim.AdamW applies it) in double.
struct Reference {
  std::vector<double> p, m, v;
  void Step(const AdamWStep& s, const std::vector<float>& grad, const std::vector<bool>& decays) {
    for (size_t i = 0; i < p.size(); ++i) {
      const double g = grad[i] * s.grad_scale;
      if (decays[i]) p[i] *= 1 - s.lr * s.weight_decay;
      m[i] = s.beta1 * m[i] + (1 - s.beta1) * g;
      v[i] = s.beta2 * v[i] + (1 - s.beta2) * g * g;
      const double m_hat = m[i] / (1 - std::pow(s.beta1, s.step));
      const double denom = std::sqrt(v[i]) / std::sqrt(1 - std::pow(s.beta2, s.step)) + s.eps;
      p[i] -= s.lr * m_hat / denom;
    }
  }
};

TEST(AdamWTest, MatchesTheTextbookUpdateOverManySteps) {
  const int64_t n = 1037;  // not a multiple of any vector width
  const std::vector<std::pair<int64_t, int64_t>> runs = {{0, 100}, {250, 500}, {1000, 37}};
  std::vector<bool> decays(n, false);
  for (auto [off, count] : runs) for (int64_t i = off; i < off + count; ++i) decays[i] = true;

  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> p(n), m(n, 0.0f), v(n, 0.0f), g(n);
  for (auto& x : p) x = normal(rng);
  Reference ref{std::vector<double>(p.begin(), p.end()), std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};

  AdamWStep s;
  s.beta1 = 0.9;
  s.beta2 = 0.95;
  s.eps = 1e-8;
  s.weight_decay = 0.1;
  for (int step = 1; step <= 50; ++step) {
    for (auto& x : g) x = normal(rng) * 0.01f;
    const std::vector<float> g_before = g;
    s.step = step;
    s.lr = 1e-3 * (1 + step % 7);
    s.grad_scale = step % 3 == 0 ? 0.25 : 1.0;
    ApplyAdamW(s, runs, n, g.data(), p.data(), m.data(), v.data());
    ref.Step(s, g, decays);
    ASSERT_EQ(g, g_before) << "gradients must be left as they were";
  }
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_NEAR(p[i], ref.p[i], 1e-5 * (1 + std::abs(ref.p[i]))) << "param " << i;
    ASSERT_NEAR(m[i], ref.m[i], 1e-6) << "exp_avg " << i;
    ASSERT_NEAR(v[i], ref.v[i], 1e-8) << "exp_avg_sq " << i;
  }
}

TEST(AdamWTest, WeightDecayOnlyInsideTheDecayRuns) {
  // Zero gradients: Adam's step is 0, so only decay moves a parameter.
  const int64_t n = 10;
  std::vector<float> p(n, 2.0f), m(n, 0.0f), v(n, 0.0f), g(n, 0.0f);
  AdamWStep s;
  s.lr = 0.5;
  s.weight_decay = 0.1;
  ApplyAdamW(s, {{2, 3}, {8, 1}}, n, g.data(), p.data(), m.data(), v.data());
  const std::vector<float> expected = {2, 2, 1.9f, 1.9f, 1.9f, 2, 2, 2, 1.9f, 2};
  for (int64_t i = 0; i < n; ++i) EXPECT_FLOAT_EQ(p[i], expected[i]) << "param " << i;
}

TEST(AdamWTest, RepeatsBitForBit) {
  const int64_t n = 513;
  std::vector<float> p0(n), g(n);
  for (int64_t i = 0; i < n; ++i) {
    p0[i] = std::sin(static_cast<float>(i));
    g[i] = std::cos(static_cast<float>(i) * 0.37f);
  }
  auto run = [&] {
    std::vector<float> p = p0, m(n, 0.0f), v(n, 0.0f);
    AdamWStep s;
    s.lr = 1e-2;
    s.weight_decay = 0.01;
    for (int step = 1; step <= 5; ++step) {
      s.step = step;
      ApplyAdamW(s, {{0, 200}}, n, g.data(), p.data(), m.data(), v.data());
    }
    return p;
  };
  EXPECT_EQ(run(), run());
}

}  // namespace
}  // namespace holdfast

namespace holdfast {
namespace {

// Float64 ground truth, summed independently of SumOfSquares: long double with
// Kahan compensation.
double ReferenceSumOfSquares(const std::vector<float>& x) {
  long double sum = 0, carry = 0;
  for (float f : x) {
    const long double y = static_cast<long double>(f) * f - carry;
    const long double t = sum + y;
    carry = (t - sum) - y;
    sum = t;
  }
  return static_cast<double>(sum);
}

TEST(ClipNormTest, MatchesFloat64AtTensOfMillionsOfElements) {
  // Gradients as a real model has them: most tiny, some layers large, over
  // several orders of magnitude; 30M elements and an odd tail.
  const int64_t n = 30'000'017;
  std::vector<float> g(static_cast<size_t>(n));
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    const float scale = (i / 1'000'000) % 7 == 3 ? 3e-1f : ((i / 1'000'000) % 7 == 5 ? 1e-5f : 2e-3f);
    g[static_cast<size_t>(i)] = normal(rng) * scale;
  }
  const double truth = ReferenceSumOfSquares(g);
  const double got = SumOfSquares(g.data(), n);
  EXPECT_NEAR(got / truth, 1.0, 1e-12) << "sum of squares " << got << ", float64 " << truth;
  EXPECT_NEAR(std::sqrt(got) / std::sqrt(truth), 1.0, 1e-12);

  // The float32 flat norm this replaces is visibly off on the same data (so
  // this test can tell the two apart).
  float f32 = 0;
  for (float v : g) f32 += v * v;
  EXPECT_GT(std::abs(static_cast<double>(f32) / truth - 1.0), 1e-5);
}

TEST(ClipNormTest, SameBitsForTheSameGradients) {
  std::vector<float> g(1'000'003);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& v : g) v = u(rng);
  const double a = SumOfSquares(g.data(), static_cast<int64_t>(g.size()));
  const double b = SumOfSquares(g.data(), static_cast<int64_t>(g.size()));
  EXPECT_EQ(a, b);
  EXPECT_EQ(SumOfSquares(g.data(), 0), 0.0);
  EXPECT_EQ(SumOfSquares(g.data(), 3), static_cast<double>(g[0]) * g[0] + static_cast<double>(g[1]) * g[1] +
                                           static_cast<double>(g[2]) * g[2]);
}

TEST(ClipNormTest, CoefficientIsClipGradNormsAndOffAtZero) {
  EXPECT_DOUBLE_EQ(ClipCoefficient(4.0, 1.0), 1.0 / (4.0 + 1e-6));
  EXPECT_DOUBLE_EQ(ClipCoefficient(0.5, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(ClipCoefficient(100.0, 0.0), 1.0);
}

}  // namespace
}  // namespace holdfast
