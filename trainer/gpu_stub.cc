// gpu.h without the CUDA toolkit: every call says how to get a CUDA build.
#include "trainer/gpu.h"

namespace holdfast::gpu {
namespace {
Status NotBuilt(const std::string& what) {
  return FailedPreconditionError(what + ": holdfast-train was built without the CUDA toolkit (none found at configure "
                                 "time, or HOLDFAST_WITH_CUDA=OFF, or a sanitizer build): rebuild on a machine with "
                                 "/usr/local/cuda, or train with train.device = \"cpu\"");
}
}  // namespace

bool Built() { return false; }

Status SetDevice(int) { return NotBuilt("selecting the GPU"); }

std::string DeviceInfo::Describe() const { return name; }

Result<DeviceInfo> QueryDevice(int) { return NotBuilt("querying the GPU"); }

Status ApplyAdamWOnDevice(const AdamWStep&, const std::vector<std::pair<int64_t, int64_t>>&, int64_t, const float*,
                          float*, float*, float*, const double*, double) {
  return NotBuilt("AdamW on the GPU");
}

Result<std::unique_ptr<CopyEngine>> MakeCopyEngine(int) { return NotBuilt("staging a checkpoint from the GPU"); }

}  // namespace holdfast::gpu
