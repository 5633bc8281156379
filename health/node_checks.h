// The one-shot node check suites that need no CUDA: what `holdfast-health
// --prolog` runs, and what the daemon runs in process before it launches ranks.
//
//   kProlog     fast (well under a second on a healthy node): host memory,
//               devices, mounts, checkpoint free space, CPU allreduce; IB port
//               state and rate; GPU count, memory errors, recovery action, Xids
//               (NVML through dlopen). No disk write test, no counter sampling.
//   kPreLaunch  kProlog plus the checkpoint write test and, when
//               health.ib_sample_seconds > 0, two counter samples that far
//               apart (the call then sleeps that long: run it off the event
//               loop, or leave ib_sample_seconds at 0 in the daemon).
// The CUDA/NCCL probes (memory test, GEMM, all-reduce) are not here: they run
// only in the holdfast-health process (health/gpu_probes.h).
//
// Thread-safety: reentrant; a DiskProbe passed in is used by this call only.
#pragma once

#include <cstdint>
#include <vector>

#include "health/check.h"
#include "health/config.h"
#include "health/host.h"

namespace holdfast::health {

enum class Suite { kProlog, kPreLaunch };

// Check classes, for `holdfast-health --checks host,ib,gpu,nccl`.
enum CheckClass : uint32_t {
  kClassHost = 1,
  kClassIb = 2,
  kClassGpu = 4,   // driver-level here; plus the CUDA probes in holdfast-health
  kClassNccl = 8,  // only in holdfast-health
  kClassAll = 15,
};
// "host,ib" -> kClassHost|kClassIb; errors name the unknown word.
Result<uint32_t> ParseCheckClasses(const std::string& text);

struct NodeCheckOptions {
  Suite suite = Suite::kPreLaunch;
  uint32_t classes = kClassAll;
  HealthConfig config;
  HostPaths paths;
  DiskProbe* disk = nullptr;  // not owned; null: statvfs and steady_clock
  // Called with a check's name (a string literal: "host.memory", "ib.ports",
  // "gpu.nvml", ...) just before it starts, on the calling thread; null: none.
  // holdfast-health's --timeout names the check that hung from it.
  void (*on_check)(const char* name) = nullptr;
};

std::vector<CheckResult> RunNodeChecks(const NodeCheckOptions& options);

}  // namespace holdfast::health
