// HealthMonitor: the daemon's light periodic checks. Each Poll reads the
// InfiniBand ports (state, rate, error counters: a few small sysfs files), the
// checkpoint directory's free space (one statvfs) and the kernel log's new
// Xid lines (non-blocking reads), and compares counters with the previous
// poll: a rising link_downed fails, errors rising past a rate warn (see
// CheckIbCounterDeltas). No threads, no sleeping, nothing that blocks beyond
// reading small files: cheap enough to call every few seconds from the
// daemon's event loop.
//
// Thread-safety: not thread-safe; one owner (the daemon's event-loop thread).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "health/check.h"
#include "health/config.h"
#include "health/gpu_checks.h"
#include "health/host.h"
#include "health/infiniband.h"

namespace holdfast::health {

class HealthMonitor {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  struct PollResult {
    std::vector<CheckResult> results;  // everything this poll looked at
    // The results whose (name, subject) is new or whose status differs from
    // the previous poll: what the daemon records in lineage.
    std::vector<CheckResult> changed;
  };

  // `disk` (not owned, may be null for the real statvfs) must outlive the monitor.
  HealthMonitor(HealthConfig config, HostPaths paths, DiskProbe* disk = nullptr);

  // Runs the periodic checks as of `now` (the daemon's clock; only
  // differences between polls matter). The first poll sets the counter
  // baseline and skips the Xids already in the log (the pre-launch checks
  // covered those).
  PollResult Poll(TimePoint now);

 private:
  HealthConfig config_;
  HostPaths paths_;
  RealDiskProbe real_disk_;
  DiskProbe* disk_;  // not owned; &real_disk_ when none was given
  KernelLogReader kernel_log_;
  bool first_poll_ = true;
  std::optional<std::vector<IbPort>> prev_ports_;
  TimePoint prev_time_;
  std::map<std::string, CheckStatus> prev_status_;  // by name + " " + subject
};

}  // namespace holdfast::health
