#include "daemon/health_watch.h"

#include <chrono>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "daemon/checkpoint_tracker.h"

namespace holdfast {

HealthWatch::HealthWatch(TimerFactory* timers, const JobConfig* job, const TimeSource* clock)
    : clock_(clock), job_(job), timer_(timers->NewTimer()) {}

Status HealthWatch::SetUp() {
  auto cfg = health::ParseHealthConfig(job_->text, job_->source);
  if (!cfg.ok()) return cfg.status();
  cfg_ = std::move(cfg).value();
  if (cfg_.checkpoint_dir.empty()) {
    const std::string root = CheckpointRoot(*job_);
    if (!root.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(root, ec);
      cfg_.checkpoint_dir = root;
    }
  }
  paths_.sysfs_root = job_->supervise.health_sysfs_root;
  if (job_->supervise.health_poll_s > 0) {
    monitor_ = std::make_unique<health::HealthMonitor>(cfg_, paths_);
    (void)monitor_->Poll(Now());  // the baseline for counter deltas
  }
  return Status::Ok();
}

std::vector<health::CheckResult> HealthWatch::RunPrelaunch(const std::string& host) {
  health::NodeCheckOptions o;
  o.suite = health::Suite::kPreLaunch;
  o.classes = health::kClassHost | health::kClassIb;
  o.config = cfg_;
  o.paths = paths_;
  std::vector<health::CheckResult> results = health::RunNodeChecks(o);
  spdlog::info("pre-launch health checks on {}: {}", host, health::CheckStatusName(health::WorstStatus(results)));
  return results;
}

health::Decision HealthWatch::Decide(const std::vector<health::CheckResult>& results) const {
  return health::Decide(results, cfg_.policy);
}

void HealthWatch::StartPolling(OnChange on_change) {
  on_change_ = std::move(on_change);
  Arm();
}

void HealthWatch::Stop() {
  stopped_ = true;
  timer_->Cancel();
}

void HealthWatch::Arm() {
  if (!monitor_ || stopped_) return;
  timer_->Arm(job_->supervise.health_poll_s, [this] {
    if (stopped_) return;
    health::HealthMonitor::PollResult poll = monitor_->Poll(Now());
    if (!poll.changed.empty() && on_change_) on_change_(poll.changed, Decide(poll.results));
    Arm();
  });
}

}  // namespace holdfast
