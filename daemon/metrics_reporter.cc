#include "daemon/metrics_reporter.h"

#include <utility>

#include <spdlog/spdlog.h>

#include "daemon/checkpoint_tracker.h"
#include "lineage/event_kind.h"

namespace holdfast {

MetricsReporter::MetricsReporter(const JobConfig* job, std::string addr, std::string textfile)
    : job_(job), addr_(std::move(addr)), textfile_(std::move(textfile)) {}

MetricsReporter::~MetricsReporter() = default;

Status MetricsReporter::Start(MetricsSnapshot run, const std::vector<RankView>& views) {
  if (!enabled()) return Status::Ok();
  if (!MetricsAvailable()) {
    return FailedPreconditionError("--metrics-addr/--metrics-textfile: this holdfastd was built without "
                                   "prometheus-cpp (install prometheus-cpp-dev and rebuild)");
  }
  metrics_ = std::make_unique<RunMetrics>();
  metrics_->Update(Snapshot(std::move(run), views));
  if (!textfile_.empty()) {
    // A path that cannot be written is a configuration error: say so now, not every poll.
    HF_RETURN_IF_ERROR(WriteMetricsTextfile(textfile_, metrics_->Exposition()));
    spdlog::info("metrics: writing {} every poll", textfile_);
  }
  if (!addr_.empty()) {
    HF_ASSIGN_OR_RETURN(endpoint_, MetricsEndpoint::Start(addr_, metrics_.get()));
    spdlog::info("metrics: http://{}/metrics", endpoint_->address());
  }
  return Status::Ok();
}

void MetricsReporter::Update(MetricsSnapshot run, const std::vector<RankView>& views) {
  if (!metrics_) return;
  metrics_->Update(Snapshot(std::move(run), views));
  if (textfile_.empty()) return;
  Status s = WriteMetricsTextfile(textfile_, metrics_->Exposition());
  if (!s.ok() && !textfile_failing_) spdlog::warn("{} (retrying every poll)", s.ToString());
  textfile_failing_ = !s.ok();
}

MetricsSnapshot MetricsReporter::Snapshot(MetricsSnapshot s, const std::vector<RankView>& views) {
  for (const RankView& v : views) {
    RankSample r;
    r.rank = v.rank;
    r.host = v.host;
    r.alive = v.alive;
    const RankProgress& p = v.progress;
    r.has_progress = p.valid;
    if (p.valid) {
      r.step = p.step;
      if (p.last_step_ns > 0) r.last_step_s = static_cast<double>(p.last_step_ns) / 1e9;
      if (r.last_step_s && job_->tokens_per_step > 0) {
        r.tokens_per_s = static_cast<double>(job_->tokens_per_step) / *r.last_step_s;
      }
      r.in_checkpoint = p.phase == Phase::kCheckpoint;
    }
    s.ranks.push_back(std::move(r));
  }
  // Every incident kind from zero, so that rate() and alerts see the first one.
  for (const EventKindInfo& k : kEventKinds) {
    if (k.is_incident) s.incidents.emplace(k.kind, 0);
  }
  if (s.checkpoint_step >= 0 && s.checkpoint_step != checkpoint_step_) {
    checkpoint_step_ = s.checkpoint_step;  // sized once per new checkpoint: a stat per file
    const CheckpointTracker tracker(CheckpointRoot(*job_));
    checkpoint_bytes_.reset();
    if (tracker.enabled()) checkpoint_bytes_ = tracker.StepBytes(s.checkpoint_step);
  }
  if (s.checkpoint_step >= 0) s.checkpoint_bytes = checkpoint_bytes_;
  for (const auto& [key, status] : health_states_) {
    s.health.push_back(HealthSample{std::get<0>(key), std::get<1>(key), std::get<2>(key), status});
  }
  return s;
}

void MetricsReporter::RecordHealth(const std::vector<health::CheckResult>& results, const std::string& host) {
  for (const health::CheckResult& r : results) {
    const auto key = std::make_tuple(host, r.name, r.subject);
    if (r.status == health::CheckStatus::kSkipped) {
      health_states_.erase(key);
    } else {
      health_states_[key] = r.status == health::CheckStatus::kPass ? 0 : r.status == health::CheckStatus::kWarn ? 1 : 2;
    }
  }
}

}  // namespace holdfast
