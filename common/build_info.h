// What this build is: the project version, the git commit it was configured from, and the
// versions of the libraries the build found (empty when it did not). Filled in by CMake
// (common/CMakeLists.txt) in build_info.cc alone, so a new commit recompiles one small file.
#pragma once

#include <string>

namespace holdfast {

struct BuildInfo {
  std::string version;   // the project's VERSION in CMakeLists.txt, e.g. "0.1.0"
  std::string commit;    // `git describe --always` at configure time; "unknown" outside git
  std::string libtorch;  // e.g. "1.13.1"; "" when built without LibTorch
  std::string slurm;     // e.g. "22.05.8"
  std::string cuda;      // the CUDA toolkit, e.g. "13.0.88"
  std::string nccl;      // e.g. "2.28.9"
};

const BuildInfo& GetBuildInfo();

}  // namespace holdfast
