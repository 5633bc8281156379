#include "trainer/adamw.h"

#include <algorithm>
#include <cmath>

namespace holdfast {

namespace {

// One contiguous range; `decay` is the multiplier on param (1 outside decay runs).
// Plain indexed loop over restrict pointers: the compiler vectorizes it
// (CMakeLists builds this file with -O3 -fno-math-errno so sqrt vectorizes).
void Range(const float* __restrict grad, float* __restrict param, float* __restrict m, float* __restrict v,
           int64_t n, float decay, float gscale, float b1, float b2, float step_size, float bc2_sqrt, float eps) {
  const float one_b1 = 1.0f - b1, one_b2 = 1.0f - b2;
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * gscale;
    const float mi = b1 * m[i] + one_b1 * g;
    const float vi = b2 * v[i] + one_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * decay - step_size * (mi / (std::sqrt(vi) / bc2_sqrt + eps));
  }
}

}  // namespace

double SumOfSquares(const float* x, int64_t n) {
  constexpr int kLanes = 8;  // independent sums: the loop vectorizes without reassociating
  double lane[kLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const double v = x[i + l];
      lane[l] += v * v;
    }
  }
  double tail = 0;
  for (; i < n; ++i) tail += static_cast<double>(x[i]) * x[i];
  double sum = 0;
  for (double l : lane) sum += l;
  return sum + tail;
}

double ClipCoefficient(double norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  return std::min(1.0, max_norm / (norm + 1e-6));
}

void ApplyAdamW(const AdamWStep& s, const std::vector<std::pair<int64_t, int64_t>>& decay_runs, int64_t n,
                const float* grad, float* param, float* exp_avg, float* exp_avg_sq) {
  const double t = static_cast<double>(s.step);
  const float step_size = static_cast<float>(s.lr / (1 - std::pow(s.beta1, t)));
  const float bc2_sqrt = static_cast<float>(std::sqrt(1 - std::pow(s.beta2, t)));
  const float decay = static_cast<float>(1 - s.lr * s.weight_decay);
  const auto b1 = static_cast<float>(s.beta1), b2 = static_cast<float>(s.beta2), eps = static_cast<float>(s.eps);
  const auto gscale = static_cast<float>(s.grad_scale);
  auto run = [&](int64_t from, int64_t to, float d) {
    if (to > from) {
      Range(grad + from, param + from, exp_avg + from, exp_avg_sq + from, to - from, d, gscale, b1, b2, step_size,
            bc2_sqrt, eps);
    }
  };
  int64_t at = 0;
  for (const auto& [offset, count] : decay_runs) {
    run(at, offset, 1.0f);
    run(offset, offset + count, decay);
    at = offset + count;
  }
  run(at, n, 1.0f);
}

}  // namespace holdfast
