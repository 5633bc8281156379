// Host checks: free memory, the checkpoint directory's free space and write
// bandwidth, a CPU allreduce between two local processes, and the devices and
// mounts a job needs.
//
// The disk is reached through DiskProbe, the one seam between these checks and
// the filesystem's statvfs and the clock (LevelDB's Env habit): tests inject a
// full disk or a slow clock without filling a disk or asserting on time.
//
// Thread-safety: the functions are reentrant; a DiskProbe is used by one
// thread at a time. CheckCpuAllreduce forks: the child touches only memory
// allocated before fork and calls only read/write/_exit, so it is safe from a
// multi-threaded daemon.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "health/check.h"
#include "health/config.h"

namespace holdfast::health {

struct FsSpace {
  uint64_t total_bytes = 0;
  uint64_t available_bytes = 0;  // what an unprivileged writer can use (f_bavail)
};

class DiskProbe {
 public:
  virtual ~DiskProbe() = default;
  virtual Result<FsSpace> Space(const std::string& dir) = 0;
  virtual std::chrono::nanoseconds Now() = 0;  // monotonic
};

// statvfs and steady_clock.
class RealDiskProbe : public DiskProbe {
 public:
  Result<FsSpace> Space(const std::string& dir) override;
  std::chrono::nanoseconds Now() override;
};

// "host.memory": MemAvailable from `meminfo` (a /proc/meminfo file) against
// config.min_free_memory_gb.
CheckResult CheckFreeMemory(const std::string& meminfo, const HealthConfig& config);

// "host.checkpoint_space": free space of config.checkpoint_dir. Cheap (one
// statvfs): the daemon's periodic check. `probe` is not owned.
CheckResult CheckCheckpointSpace(const HealthConfig& config, DiskProbe* probe);

// "host.checkpoint_write": writes and fsyncs config.checkpoint_write_mb into a
// temporary file in config.checkpoint_dir, removes it, and compares MB/s with
// the warn/fail thresholds. Seconds of I/O: pre-launch, not periodic.
CheckResult CheckCheckpointWrite(const HealthConfig& config, DiskProbe* probe);

// "host.cpu_allreduce": forks one process; the two exchange
// config.cpu_allreduce_elements uint64 values over a socketpair, each sums
// both vectors, and the sums must agree with each other and with the closed
// form. A wrong sum points at bad memory or CPU; no reply within the timeout
// at a stuck node.
CheckResult CheckCpuAllreduce(const HealthConfig& config);

// "host.devices": each of config.required_devices exists (a leading "/dev/"
// is read under paths.dev_root).
CheckResult CheckRequiredDevices(const HealthConfig& config, const HostPaths& paths);

// "host.mounts": each of config.required_mounts is a mount point in
// paths.mounts (the /proc/self/mounts format, octal escapes decoded).
CheckResult CheckRequiredMounts(const HealthConfig& config, const HostPaths& paths);

}  // namespace holdfast::health
