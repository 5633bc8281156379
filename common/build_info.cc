#include "common/build_info.h"

namespace holdfast {

const BuildInfo& GetBuildInfo() {
  static const BuildInfo info{HOLDFAST_BUILD_VERSION, HOLDFAST_BUILD_COMMIT, HOLDFAST_BUILD_LIBTORCH,
                              HOLDFAST_BUILD_SLURM,   HOLDFAST_BUILD_CUDA,   HOLDFAST_BUILD_NCCL};
  return info;
}

}  // namespace holdfast
