// HealthConfig: the thresholds every health check compares against, the
// policy's knobs, and the filesystem roots the checks read (injectable so that
// fixture trees in the kernel's real layout drive the tests).
//
// Thresholds come from the [health] section of a TOML file (the daemon's
// job.toml or a file of its own); other sections are ignored so the same file
// can carry the rest of the job. Errors name the file, line and key:
//   "job.toml:12: key 'health.expected_gpus' must be between 0 and 64, got -1"
// Every key, its default and meaning: docs/health.md.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "health/check.h"

namespace holdfast::health {

// Where the checks read the machine. Tests point these at fixture trees.
struct HostPaths {
  std::string sysfs_root = "/sys";           // <root>/class/infiniband/<dev>/ports/<n>/...
  std::string meminfo = "/proc/meminfo";
  std::string mounts = "/proc/self/mounts";
  std::string dev_root = "/dev";             // "/dev/x" in required_devices is read as <dev_root>/x
  std::string kernel_log = "/dev/kmsg";      // Xid events ("NVRM: Xid (PCI:...): 79, ...")
  std::string nvml_library = "libnvidia-ml.so.1";
};

struct PolicyConfig {
  Action on_warn = Action::kNone;     // what a warning asks for
  Action on_skipped = Action::kNone;  // what a check that could not run asks for
  // Per check name ("ib.port_state"): replaces the action a failing check suggests.
  std::map<std::string, Action> fail_actions;
};

// What the Prolog does with a host the cross-run host history flags
// (health/history_check.h).
enum class HistoryAction { kOff = 0, kWarn, kRefuse };
const char* HistoryActionName(HistoryAction action);  // "off", "warn", "refuse"

struct HealthConfig {
  // GPU (0 turns a threshold off: the value is measured and reported, nothing compared).
  int expected_gpus = 0;                 // 0: the count is not checked
  int64_t gpu_uncorrected_ecc_max = 0;   // volatile uncorrected ECC errors tolerated
  int64_t gpu_retired_pages_max = 60;    // retired pages (SBE + DBE) before the GPU needs RMA
  int64_t memtest_mb = 512;              // per GPU; 0 skips the memory test
  double gemm_tflops_min = 0;            // per GPU, dense BF16 with FP32 accumulate
  int64_t gemm_size = 8192;              // m = n = k
  double nccl_busbw_gbps_min = 0;        // all-reduce bus bandwidth across local GPUs
  int64_t nccl_bytes = 256LL << 20;      // message size of the all-reduce
  double gpu_probe_timeout_s = 600;      // holdfast-health-gpu is killed after this (a hung GPU fails)

  // InfiniBand / RoCE ports under <sysfs_root>/class/infiniband.
  std::vector<std::string> ib_devices;   // only these HCAs ("mlx5_0"); empty: all found
  int expected_ib_ports = 0;             // 0: the count is not checked (and no HCA is fine)
  double ib_rate_gbps_min = 0;           // 0: rate not checked
  int64_t ib_link_downed_max = 0;        // link_downed rises tolerated per interval before fail
  int64_t ib_link_recovery_max = 0;      // link_error_recovery rises per interval before warn
  double ib_error_warn_per_min = 10;     // symbol/rcv/integrity/overrun errors per minute: warn
  double ib_error_fail_per_min = 0;      // ... fail (0: never fails on rate alone)
  double ib_xmit_discards_warn_per_min = 1000;  // congestion discards per minute: warn
  double ib_sample_seconds = 0;          // one-shot runs: sample counters twice this far apart

  // Host.
  double min_free_memory_gb = 1;         // MemAvailable in /proc/meminfo
  std::string checkpoint_dir;            // empty: the disk checks are skipped
  double checkpoint_min_free_gb = 10;    // free space below this fails
  int64_t checkpoint_write_mb = 64;      // write + fsync this much to measure; 0 skips
  double checkpoint_write_warn_mbps = 100;
  double checkpoint_write_fail_mbps = 10;
  std::vector<std::string> required_devices;  // "/dev/infiniband/uverbs0", "/dev/nvidiactl"
  std::vector<std::string> required_mounts;   // mount points: "/scratch", "/home"
  int64_t cpu_allreduce_elements = 1 << 20;   // uint64 elements exchanged between 2 processes
  double cpu_allreduce_timeout_s = 10;

  // The host's record across runs (health/history_check.h; holdfast-health only).
  std::string history_dir;                        // the host history (common/host_history.h)
  HistoryAction history_action = HistoryAction::kOff;
  int history_runs = 3;                           // flagged: credited in this many runs ...
  double history_window_days = 7;                 // ... within this many days

  PolicyConfig policy;
};

// Reads the [health] section (with [health.policy] and [health.fail_actions])
// of a TOML file. A file without the section gives the defaults.
Result<HealthConfig> LoadHealthConfig(const std::string& path);
// Every key of [health] and [health.policy] ("health.expected_gpus", ...) as
// the loader reads them ("health.policy" and "health.fail_actions" name the
// sub-tables); docs/job-file.md must list each.
std::vector<std::string> HealthConfigKeys();
// The same from TOML text; `source` names it in errors.
Result<HealthConfig> ParseHealthConfig(const std::string& toml_text, const std::string& source);

}  // namespace holdfast::health
