// holdfast-health: the node health checks as a program of their own, so that a
// GPU fault during a probe takes down this process and not the daemon. Also
// Slurm's Prolog:
//
//   holdfast-health --prolog            fast subset; exit 1 drains the node
//   holdfast-health [--checks host,ib,gpu,nccl] [--json] [--config job.toml]
//
// Exit codes (docs/health.md):
//   0  no check failed (passes, warnings and skipped checks)
//   1  at least one check failed (or the run hung past --timeout); with
//      --prolog, stdout holds one line of <= 100 characters for Slurm's Reason
//   2  usage or configuration error (also non-zero: under Slurm the node
//      drains, and the reason says the configuration is at fault)
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "health/check.h"
#include "health/config.h"
#include "health/node_checks.h"
#include "health/policy.h"
#include "health/probe_process.h"
#include "health/report.h"

namespace {

constexpr int kExitHealthy = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

// Written by the SIGALRM handler with write(2) only.
char g_timeout_message[160];

void OnTimeout(int) {
  ssize_t ignored = write(STDOUT_FILENO, g_timeout_message, std::strlen(g_timeout_message));
  (void)ignored;
  _exit(kExitFailed);
}

int UsageError(bool prolog, const std::string& message) {
  std::cerr << "holdfast-health: " << message << "\n";
  if (prolog) {
    std::string reason;
    for (char c : "holdfast: health config error: " + message) {
      if (c == '\n' || c == '\t') reason += ' ';
      else if (c >= 0x20 && c < 0x7f && c != '"' && c != '\'') reason += c;
    }
    std::cout << reason.substr(0, 100) << "\n";
  }
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace holdfast::health;
  CLI::App app{"holdfast-health: node health checks (GPU, NCCL, InfiniBand, host); also the Slurm Prolog"};
  bool prolog = false, json = false;
  std::string checks = "all", config_path, checkpoint_dir;
  double timeout_s = 0;
  HostPaths paths;
  app.add_flag("--prolog", prolog,
               "fast subset for Slurm's Prolog: exit 1 on a failed check and print a one-line drain reason");
  auto* json_opt = app.add_flag("--json", json, "print the results as JSON instead of a table");
  app.add_option("--checks", checks, "comma-separated classes: host, ib, gpu, nccl, all");
  app.add_option("--config", config_path, "TOML file with a [health] section (thresholds, policy)");
  app.add_option("--checkpoint-dir", checkpoint_dir, "checkpoint directory to check (overrides health.checkpoint_dir)");
  app.add_option("--sysfs-root", paths.sysfs_root, "root of sysfs (fixtures for tests)");
  app.add_option("--meminfo", paths.meminfo, "meminfo file to read");
  app.add_option("--mounts", paths.mounts, "mount table to read");
  app.add_option("--dev-root", paths.dev_root, "where /dev/... paths in health.required_devices are looked up");
  app.add_option("--kernel-log", paths.kernel_log, "kernel log with NVRM Xid lines (/dev/kmsg or a dmesg file)");
  app.add_option("--nvml-library", paths.nvml_library, "libnvidia-ml to dlopen");
  std::string gpu_probe = SiblingProgram("holdfast-health-gpu");
  app.add_option("--gpu-probe", gpu_probe, "the CUDA/NCCL probe program (default: next to this one)");
  app.add_option("--timeout", timeout_s, "give up after this many seconds and fail (0: no limit)")
      ->check(CLI::NonNegativeNumber);
  app.get_option("--prolog")->excludes(json_opt);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }

  HealthConfig config;
  if (!config_path.empty()) {
    auto loaded = LoadHealthConfig(config_path);
    if (!loaded.ok()) return UsageError(prolog, loaded.status().message());
    config = *loaded;
  }
  if (!checkpoint_dir.empty()) config.checkpoint_dir = checkpoint_dir;
  auto classes = ParseCheckClasses(checks);
  if (!classes.ok()) return UsageError(prolog, classes.status().message());

  if (timeout_s > 0) {
    std::snprintf(g_timeout_message, sizeof(g_timeout_message),
                  "holdfast: health checks hung for %.0f s (GPU, driver or filesystem not responding)\n", timeout_s);
    signal(SIGALRM, OnTimeout);
    alarm(static_cast<unsigned>(timeout_s + 0.999));
  }

  NodeCheckOptions options;
  options.suite = prolog ? Suite::kProlog : Suite::kPreLaunch;
  options.classes = *classes;
  options.config = config;
  options.paths = paths;
  std::vector<CheckResult> results = RunNodeChecks(options);
  // The CUDA/NCCL probes run in a child that alone loads CUDA (not in the Prolog: too slow).
  const bool gpu = (*classes & kClassGpu) != 0, nccl = (*classes & kClassNccl) != 0;
  if (!prolog && (gpu || nccl)) {
    std::vector<std::string> probe = {gpu_probe, "--checks", gpu && nccl ? "gpu,nccl" : gpu ? "gpu" : "nccl"};
    if (!config_path.empty()) probe.insert(probe.end(), {"--config", config_path});
    for (CheckResult& r : RunProbeProcess(probe, config.gpu_probe_timeout_s)) results.push_back(std::move(r));
  }
  alarm(0);

  const Decision decision = Decide(results, config.policy);
  const bool failed = WorstStatus(results) == CheckStatus::kFail;
  if (json) {
    std::cout << ReportToJson(results, decision) << "\n";
  } else if (prolog) {
    std::cerr << FormatTable(results);
    if (failed) std::cout << DrainReason(results) << "\n";
  } else {
    std::cout << FormatTable(results) << "\ndecision: " << ActionName(decision.action)
              << (decision.reason.empty() ? "" : " (" + decision.reason + ")") << "\n";
  }
  return failed ? kExitFailed : kExitHealthy;
}
