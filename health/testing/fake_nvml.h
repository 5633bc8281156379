// FakeNvml: an in-process Nvml for tests of code that takes one (the daemon's,
// too). Each GPU's answers are public fields; an empty `count_error` means
// DeviceCount succeeds. Not thread-safe.
#pragma once

#include <string>
#include <vector>

#include "health/nvml.h"

namespace holdfast::health {

class FakeNvml : public Nvml {
 public:
  struct Gpu {
    std::string name = "Fake GPU";
    GpuMemoryErrors memory;
    int recovery_action = 0;
    bool recovery_supported = true;
  };
  std::vector<Gpu> gpus;
  std::string count_error;

  Result<int> DeviceCount() override {
    if (!count_error.empty()) return InternalError(count_error);
    return static_cast<int>(gpus.size());
  }
  Result<std::string> DeviceName(int index) override { return gpus.at(index).name; }
  Result<GpuMemoryErrors> MemoryErrors(int index) override { return gpus.at(index).memory; }
  Result<int> RecoveryAction(int index) override {
    if (!gpus.at(index).recovery_supported) return FailedPreconditionError("recovery action not supported");
    return gpus.at(index).recovery_action;
  }
};

}  // namespace holdfast::health
