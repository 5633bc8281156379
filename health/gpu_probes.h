// GPU probes that run CUDA and NCCL: a device memory test, GEMM throughput, and
// the all-reduce bus bandwidth across the node's GPUs (nccl-tests' definition:
// busbw = algbw * 2(n-1)/n). Compiled into holdfast::health_gpu only where the
// toolkit exists (HOLDFAST_HAVE_CUDA / HOLDFAST_HAVE_NCCL) and linked only into
// holdfast-health-gpu, which holdfast-health runs as a child (probe_process.h):
// a GPU fault during a probe takes down that process only. No CUDA types here.
//
// Thread-safety: each call uses the devices exclusively while it runs; do not
// run two at once.
#pragma once

#include <vector>

#include "health/check.h"
#include "health/config.h"

namespace holdfast::health {

// Whether this build has the CUDA probes (false: the functions report skipped).
bool GpuProbesCompiled();
bool NcclProbeCompiled();

// "gpu.memtest": per GPU, writes and verifies config.memtest_mb with several
// patterns (zeros, ones, address, inverted address, LCG). Any mismatch fails.
std::vector<CheckResult> RunGpuMemtest(const HealthConfig& config);

// "gpu.gemm": per GPU, BF16 GEMM (FP32 accumulate) of config.gemm_size through
// cuBLAS, TFLOPS against config.gemm_tflops_min.
std::vector<CheckResult> RunGpuGemm(const HealthConfig& config);

// "nccl.allreduce_busbw": all-reduce of config.nccl_bytes across all local GPUs
// in one process (ncclCommInitAll), bus bandwidth against
// config.nccl_busbw_gbps_min. Skipped with fewer than 2 GPUs.
std::vector<CheckResult> RunNcclAllreduce(const HealthConfig& config);

}  // namespace holdfast::health
