// Kernel launchers of gpu_kernels.cu: plain C++ signatures (nvcc compiles the
// .cu, the host compiler everything else). Internal to gpu_runtime.cc.
#pragma once

#include <cstdint>

namespace holdfast::gpu::detail {

// AdamW over [0, n) with ApplyAdamW's float formula; `decay` is the multiplier
// on param. Returns the launch's cudaError_t (as int, 0 = success).
int LaunchAdamW(const float* grad, float* param, float* exp_avg, float* exp_avg_sq, int64_t n, float decay, float beta1,
                float beta2, float step_size, float bc2_sqrt, float eps, const double* norm,
                double max_norm);

}  // namespace holdfast::gpu::detail
