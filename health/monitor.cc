#include "health/monitor.h"

namespace holdfast::health {

HealthMonitor::HealthMonitor(HealthConfig config, HostPaths paths, DiskProbe* disk)
    : config_(std::move(config)),
      paths_(std::move(paths)),
      disk_(disk != nullptr ? disk : &real_disk_),
      kernel_log_(paths_.kernel_log) {}

HealthMonitor::PollResult HealthMonitor::Poll(TimePoint now) {
  PollResult out;
  std::vector<CheckResult>& r = out.results;

  auto ports = ReadIbPorts(paths_.sysfs_root, config_.ib_devices);
  for (CheckResult& c : CheckIbPorts(ports, config_)) r.push_back(std::move(c));
  if (ports.ok()) {
    if (prev_ports_.has_value()) {
      const double seconds = std::chrono::duration<double>(now - prev_time_).count();
      for (CheckResult& c : CheckIbCounterDeltas(*prev_ports_, *ports, seconds, config_)) r.push_back(std::move(c));
    }
    prev_ports_ = *ports;
    prev_time_ = now;
  }

  if (!config_.checkpoint_dir.empty()) r.push_back(CheckCheckpointSpace(config_, disk_));

  auto log = kernel_log_.Read();
  if (!log.ok()) {
    r.push_back(Skipped("gpu.xid", "", "cannot watch Xid events: " + log.status().message()));
  } else if (!first_poll_) {
    const std::vector<XidEvent> events = ParseXidEvents(*log);
    if (!events.empty()) {
      for (CheckResult& c : CheckXidEvents(events, paths_.kernel_log)) r.push_back(std::move(c));
    }
  }
  first_poll_ = false;

  std::map<std::string, CheckStatus> status;
  for (const CheckResult& c : r) {
    const std::string key = c.name + " " + c.subject;
    auto it = prev_status_.find(key);
    if (it == prev_status_.end() || it->second != c.status) out.changed.push_back(c);
    status[key] = c.status;
  }
  prev_status_ = std::move(status);
  return out;
}

}  // namespace holdfast::health
