// RunMetrics without prometheus-cpp (prometheus-cpp-dev not installed at
// configure time): nothing is collected, and asking for an endpoint says why.
#include "daemon/metrics.h"

namespace holdfast {

class RunMetrics::Impl {};

RunMetrics::RunMetrics() : impl_(std::make_unique<Impl>()) {}
RunMetrics::~RunMetrics() = default;
void RunMetrics::Update(const MetricsSnapshot&) {}
std::string RunMetrics::Exposition() const { return ""; }

bool MetricsAvailable() { return false; }

class MetricsEndpoint::Impl {};

Result<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(const std::string&, RunMetrics*) {
  return FailedPreconditionError(
      "this holdfastd was built without prometheus-cpp, so it cannot export metrics (install prometheus-cpp-dev "
      "and rebuild)");
}

MetricsEndpoint::~MetricsEndpoint() = default;

}  // namespace holdfast
