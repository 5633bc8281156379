// HealthWatch: this node's health as holdfastd sees it — the job file's
// [health] configuration, the pre-launch checks (CPU-side only: the daemon
// never touches a GPU; holdfast-health does) and the light periodic monitor
// on the event loop. It reports results and the health policy's decision;
// what to do about them is the recovery policy's business, on the leader.
//
// Thread-safety: loop thread only.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>


#include "common/status.h"
#include "common/time_source.h"
#include "common/timer.h"
#include "daemon/job_config.h"
#include "health/check.h"
#include "health/config.h"
#include "health/monitor.h"
#include "health/node_checks.h"
#include "health/policy.h"

namespace holdfast {

class HealthWatch {
 public:
  // `changed`: the results that changed since the last poll; `decision`: the
  // health policy over all current results.
  using OnChange = std::function<void(const std::vector<health::CheckResult>& changed, const health::Decision& decision)>;

  // `timers`, `job` and `clock` are not owned and must outlive the watch;
  // `clock` times the counter deltas of the periodic checks.
  HealthWatch(TimerFactory* timers, const JobConfig* job, const TimeSource* clock);

  // Reads the [health] sections (and the checkpoint root for the disk checks).
  Status SetUp();
  std::vector<health::CheckResult> RunPrelaunch(const std::string& host);
  health::Decision Decide(const std::vector<health::CheckResult>& results) const;
  // Polls every [supervise] health_poll_s (0 = never) until Stop().
  void StartPolling(OnChange on_change);
  void Stop();

 private:
  // The monitor's time: CLOCK_MONOTONIC as a steady_clock reading.
  std::chrono::steady_clock::time_point Now() const {
    return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(clock_->MonotonicNs()));
  }
  const TimeSource* clock_;  // not owned
  void Arm();

  const JobConfig* job_;  // not owned
  health::HealthConfig cfg_;
  health::HostPaths paths_;
  std::unique_ptr<health::HealthMonitor> monitor_;
  std::unique_ptr<Timer> timer_;
  OnChange on_change_;
  bool stopped_ = false;
};

}  // namespace holdfast
