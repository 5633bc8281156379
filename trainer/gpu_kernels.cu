// The fused AdamW kernel (see trainer/adamw.h for the formula and gpu.h for
// why it is ours). One read of grad, param and both moments, one write of the
// last three, per element; the clip coefficient computed once per thread from
// the device-side float64 gradient norm, exactly as ClipCoefficient does on the host.
#include "trainer/gpu_kernels.h"

#include <cuda_runtime.h>

namespace holdfast::gpu::detail {
namespace {

__global__ void AdamWKernel(const float* __restrict__ grad, float* __restrict__ param, float* __restrict__ m,
                            float* __restrict__ v, int64_t n, float decay, float b1, float b2, float step_size,
                            float bc2_sqrt, float eps, const double* __restrict__ norm, double max_norm) {
  float gscale = 1.0f;
  if (max_norm > 0) {
    const double coef = max_norm / (*norm + 1e-6);
    gscale = static_cast<float>(coef < 1.0 ? coef : 1.0);
  }
  const float one_b1 = 1.0f - b1, one_b2 = 1.0f - b2;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float g = grad[i] * gscale;
    const float mi = b1 * m[i] + one_b1 * g;
    const float vi = b2 * v[i] + one_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * decay - step_size * (mi / (sqrtf(vi) / bc2_sqrt + eps));
  }
}

}  // namespace

int LaunchAdamW(const float* grad, float* param, float* exp_avg, float* exp_avg_sq, int64_t n, float decay, float beta1,
                float beta2, float step_size, float bc2_sqrt, float eps, const double* norm,
                double max_norm) {
  if (n <= 0) return 0;
  constexpr int kThreads = 256;
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  int64_t blocks = (n + kThreads - 1) / kThreads;
  const int64_t cap = static_cast<int64_t>(sms > 0 ? sms : 80) * 8;  // grid-stride beyond a few waves
  if (blocks > cap) blocks = cap;
  AdamWKernel<<<static_cast<unsigned>(blocks), kThreads, 0, cudaStreamLegacy>>>(
      grad, param, exp_avg, exp_avg_sq, n, decay, beta1, beta2, step_size, bc2_sqrt, eps, norm, max_norm);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace holdfast::gpu::detail
