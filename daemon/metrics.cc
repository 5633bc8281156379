#include "daemon/metrics.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <exception>
#include <tuple>
#include <utility>

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <prometheus/summary.h>
#include <prometheus/text_serializer.h>

namespace holdfast {

namespace {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Summary;

// Step times and commit durations: the median and tail over the last five minutes.
const Summary::Quantiles& Quantiles() {
  static const Summary::Quantiles q{{0.5, 0.05}, {0.9, 0.01}, {0.99, 0.001}};
  return q;
}
constexpr std::chrono::minutes kSummaryWindow{5};
constexpr int kSummaryAgeBuckets = 5;
// Polls remembered for "when did the run first reach step s" (commit durations).
constexpr size_t kMaxReachedPolls = 100000;

// Raises a counter to `total` (a cumulative count the daemon keeps).
void RaiseTo(Counter& c, double total) {
  if (total > c.Value()) c.Increment(total - c.Value());
}

// Drops families without a series: a metric nobody fed (tokens/s of a job
// that reports none) is left out instead of exposed as an empty family.
class NonEmptyFamilies : public prometheus::Collectable {
 public:
  explicit NonEmptyFamilies(std::shared_ptr<prometheus::Registry> registry) : registry_(std::move(registry)) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> out = registry_->Collect();
    out.erase(std::remove_if(out.begin(), out.end(),
                             [](const prometheus::MetricFamily& f) { return f.metric.empty(); }),
              out.end());
    return out;
  }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
};

}  // namespace

class RunMetrics::Impl {
 public:
  Impl()
      : registry_(std::make_shared<prometheus::Registry>()),
        collectable_(std::make_shared<NonEmptyFamilies>(registry_)),
        state_(MakeGauge("holdfast_run_state", "1 for the run's current supervisor state, 0 for states it has left")),
        attempt_(MakeGauge("holdfast_attempt", "The run's attempt (one per daemon start or Slurm requeue)")),
        generation_(MakeGauge("holdfast_generation", "The current generation of ranks (a restart in place starts the next)")),
        world_size_(MakeGauge("holdfast_world_size", "Ranks in the run")),
        restarts_(MakeCounter("holdfast_restarts_total", "Restarts in place of this attempt")),
        restart_budget_(MakeGauge("holdfast_restart_budget", "Restarts in place an attempt may use ([supervise] restart_budget)")),
        incidents_(MakeCounter("holdfast_incidents_total", "Incidents recorded in lineage, by kind (crash, hang, health, ...)")),
        effective_(MakeCounter("holdfast_effective_training_seconds_total",
                           "Wall time in which the run advanced past the furthest step it had reached "
                           "(startup, restarts and redone steps do not count)")),
        rank_step_(MakeGauge("holdfast_rank_step", "Completed optimizer steps of the rank (its progress record)")),
        rank_alive_(MakeGauge("holdfast_rank_alive", "1 while the rank's process runs")),
        rank_step_seconds_(prometheus::BuildSummary()
                               .Name("holdfast_rank_step_duration_seconds")
                               .Help("Duration of the rank's steps, sampled each poll (the latest step's duration "
                                     "counted for every step completed since the last poll)")
                               .Register(*registry_)),
        rank_tokens_(MakeGauge("holdfast_rank_tokens_per_second", "Tokens per second of the rank, when the job reports them")),
        checkpoint_step_(MakeGauge("holdfast_checkpoint_step", "Step of the newest committed checkpoint")),
        checkpoint_bytes_(MakeGauge("holdfast_checkpoint_size_bytes", "Size on disk of the newest committed checkpoint")),
        commit_seconds_(prometheus::BuildSummary()
                            .Name("holdfast_checkpoint_commit_duration_seconds")
                            .Help("From the run first reaching a checkpoint's step to its commit by every rank "
                                  "(resolution: one poll)")
                            .Register(*registry_)),
        stall_(MakeCounter("holdfast_checkpoint_stall_seconds_total",
                       "Time ranks spent in the checkpoint phase with training waiting (sampled each poll)")),
        health_(MakeGauge("holdfast_health_check_status", "Latest result of a node health check: 0 pass, 1 warn, 2 fail")) {}

  void Update(const MetricsSnapshot& s);
  std::vector<prometheus::MetricFamily> Collect() const { return collectable_->Collect(); }
  std::weak_ptr<prometheus::Collectable> collectable() const { return collectable_; }

 private:
  Family<prometheus::Gauge>& MakeGauge(const std::string& name, const std::string& help) {
    return prometheus::BuildGauge().Name(name).Help(help).Register(*registry_);
  }
  Family<prometheus::Counter>& MakeCounter(const std::string& name, const std::string& help) {
    return prometheus::BuildCounter().Name(name).Help(help).Register(*registry_);
  }
  void UpdateRanks(const MetricsSnapshot& s, bool same_generation);
  void UpdateProgress(const MetricsSnapshot& s, bool same_generation, double dt_s);

  struct RankSeries {
    std::string host;
    prometheus::Gauge* step = nullptr;
    prometheus::Gauge* alive = nullptr;
    prometheus::Summary* step_seconds = nullptr;
    prometheus::Gauge* tokens = nullptr;
    int64_t last_step = -1;  // this generation; -1: not seen yet
  };

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<NonEmptyFamilies> collectable_;
  Family<prometheus::Gauge>& state_;
  Family<prometheus::Gauge>& attempt_;
  Family<prometheus::Gauge>& generation_;
  Family<prometheus::Gauge>& world_size_;
  Family<prometheus::Counter>& restarts_;
  Family<prometheus::Gauge>& restart_budget_;
  Family<prometheus::Counter>& incidents_;
  Family<prometheus::Counter>& effective_;
  Family<prometheus::Gauge>& rank_step_;
  Family<prometheus::Gauge>& rank_alive_;
  Family<prometheus::Summary>& rank_step_seconds_;
  Family<prometheus::Gauge>& rank_tokens_;
  Family<prometheus::Gauge>& checkpoint_step_;
  Family<prometheus::Gauge>& checkpoint_bytes_;
  Family<prometheus::Summary>& commit_seconds_;
  Family<prometheus::Counter>& stall_;
  Family<prometheus::Gauge>& health_;

  // Loop thread only (Update).
  bool first_ = true;
  std::string run_;
  int64_t last_now_ns_ = 0;
  int last_generation_ = -1;
  std::string last_state_;
  std::map<int, RankSeries> ranks_;
  int64_t generation_start_step_ = -1;  // the run's step at this generation's first poll with progress
  int64_t last_max_step_ = -1;          // the run's step at the last poll (this generation)
  int64_t furthest_step_ = -1;          // the furthest step seen (any generation)
  std::deque<std::pair<int64_t, int64_t>> reached_;  // (poll time, run step) each time the step rose, this generation
  int64_t last_checkpoint_step_ = -1;
};

void RunMetrics::Impl::Update(const MetricsSnapshot& s) {
  if (first_) run_ = s.run_id;
  const prometheus::Labels run{{"run", run_}};
  const double dt_s = first_ ? 0 : std::max<double>(0, static_cast<double>(s.now_ns - last_now_ns_) / 1e9);
  const bool same_generation = !first_ && s.generation == last_generation_;

  if (s.state != last_state_) {
    if (!last_state_.empty()) state_.Add({{"run", run_}, {"state", last_state_}}).Set(0);
    state_.Add({{"run", run_}, {"state", s.state}}).Set(1);
    last_state_ = s.state;
  }
  attempt_.Add(run).Set(s.attempt);
  generation_.Add(run).Set(s.generation);
  world_size_.Add(run).Set(s.world_size);
  RaiseTo(restarts_.Add(run), s.restarts);
  restart_budget_.Add(run).Set(s.restart_budget);
  for (const auto& [kind, n] : s.incidents) RaiseTo(incidents_.Add({{"run", run_}, {"kind", kind}}), n);
  for (const HealthSample& h : s.health) {
    health_.Add({{"run", run_}, {"host", h.host}, {"check", h.check}, {"subject", h.subject}}).Set(h.status);
  }

  UpdateRanks(s, same_generation);
  UpdateProgress(s, same_generation, dt_s);

  first_ = false;
  last_now_ns_ = s.now_ns;
  last_generation_ = s.generation;
}

void RunMetrics::Impl::UpdateRanks(const MetricsSnapshot& s, bool same_generation) {
  for (const RankSample& r : s.ranks) {
    RankSeries& series = ranks_[r.rank];
    if (series.alive == nullptr || series.host != r.host) {
      if (series.alive != nullptr) {  // the rank moved to another host: its old series go
        rank_alive_.Remove(series.alive);
        if (series.step != nullptr) rank_step_.Remove(series.step);
        if (series.step_seconds != nullptr) rank_step_seconds_.Remove(series.step_seconds);
        if (series.tokens != nullptr) rank_tokens_.Remove(series.tokens);
        series = RankSeries{};
      }
      series.host = r.host;
      series.alive = &rank_alive_.Add({{"run", run_}, {"rank", std::to_string(r.rank)}, {"host", r.host}});
    }
    series.alive->Set(r.alive ? 1 : 0);
    if (!same_generation) series.last_step = -1;
    // A job that writes no progress record has no step: no series rather than a 0.
    if (!r.has_progress) continue;
    if (series.step == nullptr) {
      const prometheus::Labels l{{"run", run_}, {"rank", std::to_string(r.rank)}, {"host", r.host}};
      series.step = &rank_step_.Add(l);
      series.step_seconds = &rank_step_seconds_.Add(l, Quantiles(), kSummaryWindow, kSummaryAgeBuckets);
    }
    series.step->Set(static_cast<double>(r.step));
    if (r.tokens_per_s) {
      if (series.tokens == nullptr) {
        series.tokens = &rank_tokens_.Add({{"run", run_}, {"rank", std::to_string(r.rank)}, {"host", r.host}});
      }
      series.tokens->Set(*r.tokens_per_s);
    }
    // Every step completed since the last poll counts once, at the latest
    // step's duration: _count follows the steps, _sum their time.
    if (series.last_step >= 0 && r.step > series.last_step && r.last_step_s) {
      for (int64_t i = series.last_step; i < r.step; ++i) series.step_seconds->Observe(*r.last_step_s);
    }
    series.last_step = r.step;
  }
}

void RunMetrics::Impl::UpdateProgress(const MetricsSnapshot& s, bool same_generation, double dt_s) {
  const prometheus::Labels run{{"run", run_}};
  int64_t step = -1;
  bool stalled = false;
  for (const RankSample& r : s.ranks) {
    if (!r.has_progress) continue;
    step = std::max(step, r.step);
    stalled = stalled || (r.alive && r.in_checkpoint);
  }
  if (!same_generation) {
    generation_start_step_ = -1;
    last_max_step_ = -1;
    reached_.clear();
  }
  if (step >= 0) {
    if (generation_start_step_ < 0) generation_start_step_ = step;
    // Effective time: the part of this interval's steps that were new.
    if (last_max_step_ >= 0 && step > last_max_step_ && dt_s > 0) {
      const int64_t fresh = step - std::max(last_max_step_, furthest_step_);
      if (fresh > 0) {
        effective_.Add(run).Increment(dt_s * static_cast<double>(fresh) / static_cast<double>(step - last_max_step_));
      }
    }
    if (reached_.empty() || step > reached_.back().second) {
      reached_.emplace_back(s.now_ns, step);
      if (reached_.size() > kMaxReachedPolls) reached_.pop_front();
    }
    last_max_step_ = step;
    furthest_step_ = std::max(furthest_step_, step);
  }
  effective_.Add(run);
  stall_.Add(run);
  if (stalled && dt_s > 0) stall_.Add(run).Increment(dt_s);

  if (s.checkpoint_step >= 0) {
    checkpoint_step_.Add(run).Set(static_cast<double>(s.checkpoint_step));
    if (s.checkpoint_bytes) checkpoint_bytes_.Add(run).Set(static_cast<double>(*s.checkpoint_bytes));
  }
  // A commit counts when this generation was seen reaching its step: the
  // checkpoint a generation resumes from, or one committed before the daemon
  // started, has no start the daemon saw.
  if (!first_ && s.checkpoint_step > last_checkpoint_step_ && s.checkpoint_step > generation_start_step_ &&
      generation_start_step_ >= 0) {
    auto it = std::find_if(reached_.begin(), reached_.end(),
                           [&](const std::pair<int64_t, int64_t>& p) { return p.second >= s.checkpoint_step; });
    if (it != reached_.end()) {
      commit_seconds_.Add(run, Quantiles(), kSummaryWindow, kSummaryAgeBuckets)
          .Observe(static_cast<double>(s.now_ns - it->first) / 1e9);
      reached_.erase(reached_.begin(), it);  // later commits are of later steps
    }
  }
  last_checkpoint_step_ = std::max(last_checkpoint_step_, s.checkpoint_step);
}

RunMetrics::RunMetrics() : impl_(std::make_unique<Impl>()) {}
RunMetrics::~RunMetrics() = default;
void RunMetrics::Update(const MetricsSnapshot& snapshot) { impl_->Update(snapshot); }
std::string RunMetrics::Exposition() const { return prometheus::TextSerializer().Serialize(impl_->Collect()); }

bool MetricsAvailable() { return true; }

// ---- the HTTP endpoint ----

class MetricsEndpoint::Impl {
 public:
  std::unique_ptr<prometheus::Exposer> exposer;
};

Result<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(const std::string& addr, RunMetrics* metrics) {
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == addr.size()) {
    return InvalidArgumentError("--metrics-addr '" + addr + "': expected HOST:PORT, e.g. 127.0.0.1:9400 or 0.0.0.0:9400");
  }
  std::unique_ptr<MetricsEndpoint> ep(new MetricsEndpoint());
  ep->impl_ = std::make_unique<Impl>();
  try {
    ep->impl_->exposer = std::make_unique<prometheus::Exposer>(addr, /*num_threads=*/2);
  } catch (const std::exception& e) {
    return InvalidArgumentError("cannot serve metrics on " + addr + ": " + e.what() +
                                " (is the port in use, or the address not this machine's?)");
  }
  ep->impl_->exposer->RegisterCollectable(metrics->impl()->collectable());
  const std::vector<int> ports = ep->impl_->exposer->GetListeningPorts();
  ep->address_ = addr.substr(0, colon + 1) + (ports.empty() ? addr.substr(colon + 1) : std::to_string(ports[0]));
  return ep;
}

MetricsEndpoint::~MetricsEndpoint() = default;

}  // namespace holdfast
