// AdamW over flat float buffers in one pass.
//
// torch.optim.AdamW (single-tensor path) and a flat port of it walk the
// parameters nine times per step (decay, two passes per moment, sqrt, div,
// add, addcdiv) and the clip scaling once more: about 22 reads or writes of a
// 4-byte float per parameter. This reads each of grad, param, exp_avg and
// exp_avg_sq once and writes the last three once (bench/: 3.3M parameters,
// ~8 ms -> ~3 ms a step). Same formula, float arithmetic; the rounding order of
// the few operations per element differs from ATen's, so results agree with
// torch.optim.AdamW to float tolerance, not bit for bit — and bit for bit with
// themselves, which is what resume needs. No LibTorch.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace holdfast {

struct AdamWStep {
  double lr = 0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  int64_t step = 1;          // 1-based: the step being taken (bias corrections use it)
  double grad_scale = 1.0;   // gradient clipping coefficient, applied to grad as it is read
};

// Updates n parameters: for each i, with g = grad[i] * grad_scale,
//   param *= 1 - lr * weight_decay            (only inside decay_runs: [offset, count))
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   param -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
// grad is left as it was. decay_runs are sorted and disjoint.
// Clipping: the global gradient norm and the coefficient clip_grad_norm_ applies.
//
// The norm is sqrt(sum of g^2) over every gradient, summed in double: a float32
// norm of the flat buffer drifts by ~1e-4 relative at 10M elements (step 1 of a
// 3-layer, 192-wide GPT: float32 7.29310417, float64 7.29335600,
// clip_grad_norm_'s per-tensor float32 norms 7.29335260), which scaled every
// clipped step wrong. Summed in a fixed order (8 lanes, then the lanes in
// order): the same bits for the same gradients, as resume needs.
double SumOfSquares(const float* x, int64_t n);
// min(1, max_norm / (norm + 1e-6)) as torch.nn.utils.clip_grad_norm_; 1 when max_norm <= 0 (off).
double ClipCoefficient(double norm, double max_norm);

void ApplyAdamW(const AdamWStep& s, const std::vector<std::pair<int64_t, int64_t>>& decay_runs, int64_t n,
                const float* grad, float* param, float* exp_avg, float* exp_avg_sq);

}  // namespace holdfast
