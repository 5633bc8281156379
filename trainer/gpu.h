// The trainer's own CUDA code, behind a header with no CUDA or LibTorch in it.
//
// LibTorch does the model's math on the GPU; what it does not offer in every
// version the trainer builds against (Debian's 1.13 CPU, a wheel's 2.x CUDA)
// lives here: the flat AdamW as one fused kernel, the checkpoint's copy engine
// (a copy stream, events, pinned memory) and what the determinism fingerprint
// records about the device. Device work is queued on the CUDA legacy default
// stream, which is LibTorch's default stream, so it is ordered with the
// model's kernels without touching LibTorch's CUDA API.
//
// Built with nvcc where the CUDA toolkit is found (gpu_kernels.cu,
// gpu_runtime.cc); elsewhere gpu_stub.cc answers every call with a
// FailedPrecondition that says how to get a CUDA build.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "trainer/adamw.h"
#include "trainer/device_stager.h"

namespace holdfast::gpu {

// True when this binary has the CUDA kernels compiled in.
bool Built();

// Makes `ordinal` the calling thread's current device (where ApplyAdamWOnDevice runs).
Status SetDevice(int ordinal);

// What bit-exact resume depends on besides LibTorch: recorded in the
// determinism fingerprint of every checkpoint saved on a GPU.
struct DeviceInfo {
  std::string name;          // "NVIDIA H200"
  int sm = 0;                // compute capability, 90 = sm_90
  int64_t memory_bytes = 0;
  std::string driver;        // CUDA driver API version the driver supports, "13.0"
  std::string runtime;       // CUDA runtime, "13.0"
  std::string cublas;        // "13.0.2"

  // "NVIDIA H200 (sm_90, 139 GiB), driver 13.0, CUDA runtime 13.0, cuBLAS 13.0.2"
  std::string Describe() const;
};
Result<DeviceInfo> QueryDevice(int ordinal);

// ApplyAdamW on device memory, queued on the legacy default stream; returns
// once queued. The clip coefficient comes from the device: ClipCoefficient
// (*d_norm, max_norm) with d_norm the float64 gradient norm, read by the kernel itself, so no host
// synchronisation happens between the gradient norm and the update. s.grad_scale
// is ignored.
Status ApplyAdamWOnDevice(const AdamWStep& s, const std::vector<std::pair<int64_t, int64_t>>& decay_runs, int64_t n,
                          const float* grad, float* param, float* exp_avg, float* exp_avg_sq,
                          const double* d_norm, double max_norm);

// The copy engine DeviceStager stages checkpoints with, on `ordinal`.
Result<std::unique_ptr<CopyEngine>> MakeCopyEngine(int ordinal);

}  // namespace holdfast::gpu
