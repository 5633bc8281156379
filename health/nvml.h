// Nvml: the few NVML queries the GPU health checks need, behind an interface.
//
// The real implementation (OpenNvml) loads libnvidia-ml.so.1 with dlopen and
// resolves each function by name, so nothing here needs nvml.h (which the CUDA
// toolkit does not ship) or links against the driver: a node without a driver
// gets a Status saying so, and the checks report `skipped`. The types and
// constants it declares follow the NVML API Reference Guide of the R580
// driver branch (docs.nvidia.com/deploy/nvml-api): nvmlReturn_t, nvmlFieldValue_t, NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
// (230), nvmlDeviceGpuRecoveryAction_t.
//
// Tests use FakeNvml (health/testing/fake_nvml.h) in process, or point
// OpenNvml at a fake shared library (health/testing/fake_libnvidia_ml.cc) to
// drive the dlopen path itself.
//
// Thread-safety: an Nvml object is used by one thread at a time (NVML itself is
// thread-safe; the object's caches are not).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace holdfast::health {

// Memory error state of one GPU. A `*_supported` flag is false when the driver
// answered NVML_ERROR_NOT_SUPPORTED (ECC off, or an architecture without it).
struct GpuMemoryErrors {
  bool ecc_supported = false;
  uint64_t volatile_uncorrected = 0;   // since the last driver load
  uint64_t aggregate_uncorrected = 0;  // lifetime
  uint64_t volatile_corrected = 0;

  bool retired_supported = false;  // page retirement: Kepler..Volta
  uint64_t retired_sbe = 0;        // pages retired for multiple single-bit errors
  uint64_t retired_dbe = 0;        // pages retired for a double-bit error
  bool retired_pending = false;    // a retirement waits for the next driver reload

  bool remap_supported = false;  // row remapping: Ampere and later
  uint64_t remapped_correctable = 0;
  uint64_t remapped_uncorrectable = 0;
  bool remap_pending = false;  // a remap waits for a GPU reset
  bool remap_failure = false;  // a row could not be remapped: the GPU needs replacing
};

// nvmlDeviceGpuRecoveryAction_t.
enum class GpuRecoveryAction {
  kNone = 0,
  kGpuReset = 1,
  kNodeReboot = 2,
  kDrainP2p = 3,
  kDrainAndReset = 4,
};
const char* GpuRecoveryActionName(int action);  // "NONE", "GPU_RESET", ... or "UNKNOWN"

class Nvml {
 public:
  virtual ~Nvml() = default;
  virtual Result<int> DeviceCount() = 0;
  // "NVIDIA H200 (GPU-1234...)": for evidence.
  virtual Result<std::string> DeviceName(int index) = 0;
  virtual Result<GpuMemoryErrors> MemoryErrors(int index) = 0;
  // NVML_FI_DEV_GET_GPU_RECOVERY_ACTION; FailedPrecondition when the driver
  // does not know the field (older than R570).
  virtual Result<int> RecoveryAction(int index) = 0;
};

// dlopens `library` (e.g. "libnvidia-ml.so.1", or a path), resolves the
// functions and calls nvmlInit_v2. Unavailable with "libnvidia-ml.so.1 not
// found: no NVIDIA driver on this node" when the library is missing;
// Unavailable with NVML's message when init fails. nvmlShutdown runs when the
// object is destroyed.
Result<std::unique_ptr<Nvml>> OpenNvml(const std::string& library);

}  // namespace holdfast::health
