// RunMetrics: the run as Prometheus metrics (docs/metrics.md), built with
// prometheus-cpp from a plain snapshot of what the leading holdfastd already
// knows at each poll — every rank's progress record, the controller's
// generation and restarts, the recorder's incidents and checkpoints, the
// health results. It keeps what one snapshot cannot say (counters, step-time
// summaries, when a step was first reached) and derives the rest; it never
// reaches into the daemon, so a test feeds it snapshots with an injected clock.
//
// Two ways out, both off unless configured: MetricsEndpoint serves
// GET /metrics over HTTP (prometheus::Exposer), and WriteMetricsTextfile
// writes the exposition for node_exporter's textfile collector (a temporary
// file renamed over the old one, so a scrape never reads half a file).
//
// prometheus-cpp stays behind this header. Built without it (no
// prometheus-cpp-dev), the same API compiles to stubs: RunMetrics collects
// nothing and MetricsEndpoint::Start says why it cannot serve.
//
// Thread-safety: Update() from one thread (the daemon's event loop);
// Exposition() and the endpoint's scrapes from any thread at once
// (prometheus-cpp's metrics and families lock).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace holdfast {

// One rank as the daemon sees it at one poll.
struct RankSample {
  int rank = 0;
  std::string host;
  bool alive = false;
  bool has_progress = false;  // its progress record is valid (a job without one: false)
  int64_t step = 0;           // completed optimiser steps
  std::optional<double> last_step_s;  // duration of its latest step
  std::optional<double> tokens_per_s; // only when the job reports it; else no metric
  bool in_checkpoint = false;  // in the checkpoint phase (staging/committing: training waits)
};

// One health check's latest result on one host.
struct HealthSample {
  std::string host;
  std::string check;    // "host.checkpoint_disk"
  std::string subject;  // "/ckpt", "gpu 3"; may be empty
  int status = 0;       // 0 pass, 1 warn, 2 fail (skipped checks are left out)
};

// What the daemon knows at one poll. Counts are cumulative for this daemon.
struct MetricsSnapshot {
  int64_t now_ns = 0;  // monotonic
  std::string run_id;
  std::string state;   // the controller's state name: "running", "restarting", ...
  int attempt = 0;
  int generation = 0;
  int world_size = 0;
  int restarts = 0;        // restarts in place so far (this attempt)
  int restart_budget = 0;
  std::vector<RankSample> ranks;
  std::map<std::string, int64_t> incidents;  // incident kind -> count so far
  int64_t checkpoint_step = -1;              // newest committed (-1 none)
  std::optional<int64_t> checkpoint_bytes;   // its size on disk, when known
  std::vector<HealthSample> health;
};

class RunMetrics {
 public:
  RunMetrics();
  ~RunMetrics();
  RunMetrics(const RunMetrics&) = delete;
  RunMetrics& operator=(const RunMetrics&) = delete;

  // Folds in the next poll's snapshot (snapshots come in time order).
  void Update(const MetricsSnapshot& snapshot);
  // The text exposition format (version 0.0.4) of every metric.
  std::string Exposition() const;

  class Impl;
  Impl* impl() const { return impl_.get(); }

 private:
  std::unique_ptr<Impl> impl_;
};

// Whether this holdfastd was built with prometheus-cpp.
bool MetricsAvailable();

// Writes `text` to `path` atomically: PATH.tmp.PID beside it, then rename.
Status WriteMetricsTextfile(const std::string& path, const std::string& text);

// GET http://ADDR/metrics, served by prometheus-cpp's civetweb threads.
class MetricsEndpoint {
 public:
  // `addr` is "HOST:PORT" (PORT 0: any free one); `metrics` is not owned and
  // must outlive the endpoint. kInvalidArgument when it cannot listen there.
  static Result<std::unique_ptr<MetricsEndpoint>> Start(const std::string& addr, RunMetrics* metrics);
  ~MetricsEndpoint();
  // "HOST:PORT" with the port actually bound.
  const std::string& address() const { return address_; }

  class Impl;

 private:
  MetricsEndpoint() = default;
  std::unique_ptr<Impl> impl_;
  std::string address_;
};

}  // namespace holdfast
