// The probes of a build without CUDA: each reports skipped with the reason.
#include "health/gpu_probes.h"

namespace holdfast::health {

bool GpuProbesCompiled() { return false; }
bool NcclProbeCompiled() { return false; }

std::vector<CheckResult> RunGpuMemtest(const HealthConfig&) {
  return {Skipped("gpu.memtest", "", "holdfast-health was built without CUDA (HOLDFAST_HAVE_CUDA=OFF)")};
}
std::vector<CheckResult> RunGpuGemm(const HealthConfig&) {
  return {Skipped("gpu.gemm", "", "holdfast-health was built without CUDA (HOLDFAST_HAVE_CUDA=OFF)")};
}
std::vector<CheckResult> RunNcclAllreduce(const HealthConfig&) {
  return {Skipped("nccl.allreduce_busbw", "", "holdfast-health was built without NCCL (HOLDFAST_HAVE_NCCL=OFF)")};
}

}  // namespace holdfast::health
