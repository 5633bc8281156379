// GPU checks that need only the driver: device count, memory errors (ECC,
// retired pages, row remapping), NVML's recovery action, and Xid events from
// the kernel log. No CUDA: NVML comes through the dlopen seam (health/nvml.h),
// so the daemon may run these in process. The CUDA/NCCL probes (memory test,
// GEMM, all-reduce) are in health/gpu_probes.h, a separate target.
//
// Thread-safety: the functions are reentrant given a Nvml used by one thread;
// a KernelLogReader belongs to one thread.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "health/check.h"
#include "health/config.h"
#include "health/nvml.h"

namespace holdfast::health {

// All driver-level GPU checks. `nvml` is OpenNvml's outcome (not owned): when
// it failed, "gpu.count" fails if GPUs are expected (the driver is missing on a
// GPU node) and every other check is skipped with the reason.
std::vector<CheckResult> CheckGpusWithNvml(const Result<Nvml*>& nvml, const HealthConfig& config);

// One Xid event: "NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus."
struct XidEvent {
  int xid = 0;
  std::string pci;   // "0000:3b:00"
  std::string line;  // the log line, for evidence
};

// The Xid lines in kernel log text (dmesg or /dev/kmsg records).
std::vector<XidEvent> ParseXidEvents(const std::string& log_text);

// "gpu.xid" results for `events`: what each Xid means (NVIDIA's Xid catalog)
// and the action it asks for; one pass when there are none. `source` names
// where the log came from.
std::vector<CheckResult> CheckXidEvents(const std::vector<XidEvent>& events, const std::string& source);

// Reads a kernel log incrementally and without blocking: /dev/kmsg (one record
// per read, EAGAIN at the end) or a plain file (tests, saved dmesg). Each Read
// returns what arrived since the previous one.
class KernelLogReader {
 public:
  explicit KernelLogReader(std::string path);
  ~KernelLogReader();
  KernelLogReader(const KernelLogReader&) = delete;
  KernelLogReader& operator=(const KernelLogReader&) = delete;

  // New text since the last call; an error when the log cannot be opened
  // (reading /dev/kmsg needs CAP_SYSLOG where kernel.dmesg_restrict=1).
  Result<std::string> Read();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;  // owned; opened on first Read
};

}  // namespace holdfast::health
