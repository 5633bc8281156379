// MetricsReporter: the run as Prometheus metrics (daemon/metrics.h,
// docs/metrics.md), for the Supervisor. It owns the RunMetrics, the /metrics
// endpoint and the node_exporter textfile, and what only metrics need: the
// latest status of every health check on every host and the size of the
// newest checkpoint (sized once per new step). The Supervisor hands it the
// run's facts each poll (a MetricsSnapshot with the run-level fields filled
// in, and the ranks' views); the reporter adds the rest and publishes.
//
// Nothing here is on when neither an address nor a textfile is configured:
// enabled() is false and Start/Update do nothing, so the Supervisor skips
// gathering the facts.
//
// Thread-safety: loop thread only (the endpoint serves from its own thread
// through RunMetrics, which is thread-safe).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "common/rank_progress.h"
#include "common/status.h"
#include "daemon/job_config.h"
#include "daemon/metrics.h"
#include "health/check.h"

namespace holdfast {

class MetricsReporter {
 public:
  // `job` is not owned and must outlive the reporter; `addr` ("HOST:PORT")
  // and `textfile` are each off when "".
  MetricsReporter(const JobConfig* job, std::string addr, std::string textfile);
  ~MetricsReporter();

  bool enabled() const { return !addr_.empty() || !textfile_.empty(); }
  // Starts serving / writes the textfile once, so that a path that cannot be
  // written is a configuration error now rather than a warning every poll.
  // FailedPrecondition when this build has no prometheus-cpp.
  Status Start(MetricsSnapshot run, const std::vector<RankView>& views);
  // Every poll (and once when the run ends).
  void Update(MetricsSnapshot run, const std::vector<RankView>& views);
  // Health results as they arrive, for every host (skipped checks are dropped).
  void RecordHealth(const std::vector<health::CheckResult>& results, const std::string& host);

  // `run` completed with the ranks, every incident kind (from zero), the
  // checkpoint's size and the health states.
  MetricsSnapshot Snapshot(MetricsSnapshot run, const std::vector<RankView>& views);

 private:
  const JobConfig* job_;  // not owned
  const std::string addr_;
  const std::string textfile_;
  std::unique_ptr<RunMetrics> metrics_;  // null until Start
  std::unique_ptr<MetricsEndpoint> endpoint_;
  bool textfile_failing_ = false;  // warned once until a write succeeds again
  // (host, check, subject) -> latest status, 0 pass, 1 warn, 2 fail.
  std::map<std::tuple<std::string, std::string, std::string>, int> health_states_;
  int64_t checkpoint_step_ = -1;
  std::optional<int64_t> checkpoint_bytes_;
};

}  // namespace holdfast
