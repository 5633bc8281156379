// Cost of the daemon's periodic health poll and of the prolog suite, on a
// fixture sysfs tree with 8 HCAs (a typical 8-GPU node's rail-optimised
// fabric) and a real checkpoint directory. Prints medians; asserts nothing.
//   ninja health_monitor_bench && health/health_monitor_bench [CHECKPOINT_DIR]
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "health/monitor.h"
#include "health/node_checks.h"

using namespace holdfast::health;
using Clock = std::chrono::steady_clock;

namespace {

void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path) << text << "\n"; }

std::string MakeTree(int hcas) {
  char tmpl[] = "/tmp/holdfast-bench-sysfs-XXXXXX";
  const std::string root = mkdtemp(tmpl);
  for (int h = 0; h < hcas; ++h) {
    const std::string port = root + "/class/infiniband/mlx5_" + std::to_string(h) + "/ports/1";
    std::filesystem::create_directories(port + "/counters");
    WriteFile(port + "/state", "4: ACTIVE");
    WriteFile(port + "/phys_state", "5: LinkUp");
    WriteFile(port + "/rate", "400 Gb/sec (4X NDR)");
    WriteFile(port + "/link_layer", "InfiniBand");
    for (const std::string& c : IbErrorCounters()) WriteFile(port + "/counters/" + c, "0");
  }
  return root;
}

double MedianUs(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const std::string root = MakeTree(8);
  HealthConfig config;
  config.checkpoint_dir = argc > 1 ? argv[1] : "/tmp";
  HostPaths paths;
  paths.sysfs_root = root;
  paths.kernel_log = root + "/kmsg";
  WriteFile(paths.kernel_log, "");

  HealthMonitor monitor(config, paths);
  std::vector<double> polls;
  for (int i = 0; i < 2000; ++i) {
    const auto t0 = Clock::now();
    auto r = monitor.Poll(t0);
    polls.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (WorstStatus(r.results) != CheckStatus::kPass) std::fprintf(stderr, "unexpected non-pass\n");
  }

  NodeCheckOptions o;
  o.suite = Suite::kProlog;
  o.config = config;
  o.paths = paths;
  o.paths.nvml_library = "libnvidia-ml.so.1";
  std::vector<double> prologs;
  for (int i = 0; i < 21; ++i) {
    const auto t0 = Clock::now();
    RunNodeChecks(o);
    prologs.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::printf("HealthMonitor::Poll, 8 HCAs + statvfs + kernel log: median %.0f us (2000 polls)\n", MedianUs(polls));
  std::printf("RunNodeChecks(kProlog) in process, no GPU driver: median %.1f ms (21 runs)\n",
              MedianUs(prologs) / 1000.0);
  std::filesystem::remove_all(root);
  return 0;
}
