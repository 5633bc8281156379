// holdfast-health: the node health checks as a program of their own, so that a
// GPU fault during a probe takes down this process and not the daemon. Also
// Slurm's Prolog:
//
//   holdfast-health --prolog            fast subset; exit 1 drains the node
//   holdfast-health [--checks host,ib,gpu,nccl] [--json] [--config job.toml]
//   ... --history-dir DIR --history-action warn|refuse: also this host's
//       record across runs (health/history_check.h)
//
// Exit codes (docs/health.md):
//   0  no check failed (passes, warnings and skipped checks)
//   1  at least one check failed (or one hung past --timeout: the line names
//      it); with --prolog, stdout holds one line of <= 100 characters for
//      Slurm's Reason
//   2  usage or configuration error (also non-zero: under Slurm the node
//      drains, and the reason says the configuration is at fault)
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "common/program_cli.h"
#include "health/check.h"
#include "health/config.h"
#include "health/history_check.h"
#include "health/node_checks.h"
#include "health/policy.h"
#include "health/probe_process.h"
#include "health/report.h"

namespace {

constexpr int kExitHealthy = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

// --timeout: the check under way (a string literal, set by RunNodeChecks'
// on_check) and the end of the line, read by the SIGALRM handler, which writes
// with write(2) only: "holdfast: host.memory hung: no answer in 30 s (...)".
std::atomic<const char*> g_current_check{"startup"};
static_assert(std::atomic<const char*>::is_always_lock_free, "read in a signal handler");
char g_timeout_tail[96];

void OnCheck(const char* name) { g_current_check.store(name); }

void WriteOut(const char* text) {
  ssize_t ignored = write(STDOUT_FILENO, text, std::strlen(text));
  (void)ignored;
}

void OnTimeout(int) {
  WriteOut("holdfast: ");
  WriteOut(g_current_check.load());
  WriteOut(g_timeout_tail);
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

// The host the history is read for: --history-host, else Slurm's name of this
// node (SLURMD_NODENAME, set for the Prolog), else the hostname.
std::string HistoryHost(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* slurm = std::getenv("SLURMD_NODENAME"); slurm != nullptr && *slurm != '\0') return slurm;
  char host[HOST_NAME_MAX + 1] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

// The history flags, each over its [health] key when given.
struct HistoryFlags {
  std::string dir, action, host;
  int runs = 0;
  double window_days = 0;
};

void AddHistoryFlags(CLI::App& app, HistoryFlags& h) {
  app.add_option("--history-dir", h.dir, "the cross-run host history (health.history_dir; runctl runs --all's "
                                         "ROOT/.holdfast/hosts)");
  app.add_option("--history-action", h.action, "off, warn or refuse a host flagged there (health.history_action; "
                                               "refuse: exit 1, the drain reason naming its runs)")
      ->check(CLI::IsMember({"off", "warn", "refuse"}));
  app.add_option("--history-runs", h.runs, "flagged: credited with incidents in this many runs (health.history_runs, 3)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--history-window-days", h.window_days,
                 "... within this many days (health.history_window_days, 7)")
      ->check(CLI::Range(0.001, 3650.0));
  app.add_option("--history-host", h.host, "the host to look up (default $SLURMD_NODENAME, else the hostname)");
}

void ApplyHistoryFlags(const HistoryFlags& h, holdfast::health::HealthConfig* c) {
  using holdfast::health::HistoryAction;
  if (!h.dir.empty()) c->history_dir = h.dir;
  if (h.action == "off") c->history_action = HistoryAction::kOff;
  if (h.action == "warn") c->history_action = HistoryAction::kWarn;
  if (h.action == "refuse") c->history_action = HistoryAction::kRefuse;
  if (h.runs > 0) c->history_runs = h.runs;
  if (h.window_days > 0) c->history_window_days = h.window_days;
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
  app.add_option("-c,--config", config_path, "TOML file with a [health] section, e.g. the job file (thresholds, policy)");
  app.add_option("--checkpoint-dir", checkpoint_dir, "checkpoint directory to check (overrides health.checkpoint_dir)");
  app.add_option("--sysfs-root", paths.sysfs_root, "root of sysfs (fixtures for tests)");
  app.add_option("--meminfo", paths.meminfo, "meminfo file to read");
  app.add_option("--mounts", paths.mounts, "mount table to read");
  app.add_option("--dev-root", paths.dev_root, "where /dev/... paths in health.required_devices are looked up");
  app.add_option("--kernel-log", paths.kernel_log, "kernel log with NVRM Xid lines (/dev/kmsg or a dmesg file)");
  app.add_option("--nvml-library", paths.nvml_library, "libnvidia-ml to dlopen");
  std::string gpu_probe = SiblingProgram("holdfast-health-gpu");
  app.add_option("--gpu-probe", gpu_probe, "the CUDA/NCCL probe program (default: next to this one)");
  app.add_option("--timeout", timeout_s,
                 "fail after this many seconds, naming the check that hung (0: no limit; the Prolog wrapper passes "
                 "HOLDFAST_PROLOG_TIMEOUT)")
      ->check(CLI::NonNegativeNumber);
  HistoryFlags history;
  AddHistoryFlags(app, history);
  app.get_option("--prolog")->excludes(json_opt);
  holdfast::AddProgramConventions(
      app, "holdfast-health", holdfast::kBuiltAgainstNothing,
      holdfast::ExitCodesHelp({{kExitHealthy, "no check failed (passes, warnings and skipped checks)"},
                               {kExitFailed, "a check failed, or the checks hung past --timeout; with --prolog "
                                             "stdout holds the one-line drain reason"},
                               {kExitUsage, "bad flags or health config (under Slurm the node drains too)"}}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return holdfast::HandleParseError(app, e, "holdfast-health", argc, argv, kExitUsage);
  }

  HealthConfig config;
  if (!config_path.empty()) {
    auto loaded = LoadHealthConfig(config_path);
    if (!loaded.ok()) return UsageError(prolog, loaded.status().message());
    config = *loaded;
  }
  if (!checkpoint_dir.empty()) config.checkpoint_dir = checkpoint_dir;
  ApplyHistoryFlags(history, &config);
  auto classes = ParseCheckClasses(checks);
  if (!classes.ok()) return UsageError(prolog, classes.status().message());

  if (timeout_s > 0) {
    // One line of at most 100 characters (Slurm's Reason) with the longest check name.
    std::snprintf(g_timeout_tail, sizeof(g_timeout_tail), " hung: no answer in %g s (driver or file system stuck)\n",
                  std::ceil(timeout_s));
    signal(SIGALRM, OnTimeout);
    alarm(static_cast<unsigned>(std::ceil(timeout_s)));
  }

  NodeCheckOptions options;
  options.suite = prolog ? Suite::kProlog : Suite::kPreLaunch;
  options.classes = *classes;
  options.config = config;
  options.paths = paths;
  options.on_check = OnCheck;
  std::vector<CheckResult> results = RunNodeChecks(options);
  if (config.history_action != HistoryAction::kOff) {
    const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch()).count();
    results.push_back(CheckHostHistory(config, HistoryHost(history.host), now_ms));
  }
  // The CUDA/NCCL probes run in a child that alone loads CUDA (not in the Prolog: too slow).
  const bool gpu = (*classes & kClassGpu) != 0, nccl = (*classes & kClassNccl) != 0;
  if (!prolog && (gpu || nccl)) {
    std::vector<std::string> probe = {gpu_probe, "--checks", gpu && nccl ? "gpu,nccl" : gpu ? "gpu" : "nccl"};
    if (!config_path.empty()) probe.insert(probe.end(), {"--config", config_path});
    OnCheck("gpu.probe");
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
