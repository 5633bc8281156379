#include "health/gpu_checks.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <map>
#include <sstream>

namespace holdfast::health {
namespace {

struct XidMeaning {
  CheckStatus status;
  Action action;
  const char* meaning;
};

// From NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors, r580). Xids
// an application causes warn only; hardware and driver faults fail.
XidMeaning Meaning(int xid) {
  static const std::map<int, XidMeaning> kTable = {
      {13, {CheckStatus::kWarn, Action::kNone, "graphics engine exception (usually the application)"}},
      {31, {CheckStatus::kWarn, Action::kNone, "GPU memory page fault (usually the application)"}},
      {43, {CheckStatus::kWarn, Action::kNone, "GPU stopped processing (application fault)"}},
      {45, {CheckStatus::kWarn, Action::kNone, "preemptive cleanup after an earlier error"}},
      {48, {CheckStatus::kFail, Action::kExcludeNode, "double-bit ECC error: reset the GPU"}},
      {61, {CheckStatus::kFail, Action::kDrainNode, "internal micro-controller breakpoint/warning"}},
      {62, {CheckStatus::kFail, Action::kDrainNode, "internal micro-controller halt"}},
      {63, {CheckStatus::kWarn, Action::kNone, "ECC page retirement or row remap recorded"}},
      {64, {CheckStatus::kFail, Action::kDrainNode, "ECC page retirement or row remap failed: RMA"}},
      {74, {CheckStatus::kFail, Action::kExcludeNode, "NVLink error"}},
      {79, {CheckStatus::kFail, Action::kDrainNode, "GPU has fallen off the bus"}},
      {92, {CheckStatus::kWarn, Action::kNone, "high single-bit ECC error rate"}},
      {94, {CheckStatus::kFail, Action::kRestart, "contained ECC error: restart the application"}},
      {95, {CheckStatus::kFail, Action::kDrainNode, "uncontained ECC error: reset the GPU"}},
      {119, {CheckStatus::kFail, Action::kDrainNode, "GSP RPC timeout"}},
      {120, {CheckStatus::kFail, Action::kDrainNode, "GSP error"}},
      {140, {CheckStatus::kFail, Action::kDrainNode, "unrecovered ECC error"}},
  };
  auto it = kTable.find(xid);
  if (it != kTable.end()) return it->second;
  return {CheckStatus::kWarn, Action::kNone, "see NVIDIA's Xid catalog"};
}

std::string Gpu(int i) { return "gpu " + std::to_string(i); }

void CheckMemory(int i, const GpuMemoryErrors& e, const HealthConfig& config, const std::string& name,
                 std::vector<CheckResult>* out) {
  const std::string subject = Gpu(i);
  const std::string on = name.empty() ? "" : " on " + name;
  if (!e.ecc_supported) {
    out->push_back(Skipped("gpu.ecc", subject, "ECC not supported or disabled on this GPU"));
  } else {
    const std::string measured = std::to_string(e.volatile_uncorrected) + " uncorrected (volatile), " +
                                 std::to_string(e.aggregate_uncorrected) + " lifetime";
    const std::string threshold = "<= " + std::to_string(config.gpu_uncorrected_ecc_max) + " volatile";
    Evidence ev{measured, threshold, "nvmlDeviceGetTotalEccErrors" + on};
    if (e.volatile_uncorrected > static_cast<uint64_t>(config.gpu_uncorrected_ecc_max)) {
      out->push_back(Fail("gpu.ecc", subject,
                          "uncorrectable ECC errors since the driver loaded: reset the GPU before reuse", ev,
                          Action::kExcludeNode));
    } else {
      out->push_back(Pass("gpu.ecc", subject, measured, ev));
    }
  }
  if (e.remap_supported) {
    const std::string measured = std::to_string(e.remapped_uncorrectable) + " uncorrectable, " +
                                 std::to_string(e.remapped_correctable) + " correctable rows" +
                                 (e.remap_pending ? ", remap pending" : "") + (e.remap_failure ? ", FAILURE" : "");
    Evidence ev{measured, "no failure, none pending", "nvmlDeviceGetRemappedRows" + on};
    if (e.remap_failure) {
      out->push_back(Fail("gpu.row_remap", subject, "row remapping failed: the GPU has run out of spare rows (RMA)",
                          ev, Action::kDrainNode));
    } else if (e.remap_pending) {
      out->push_back(Fail("gpu.row_remap", subject, "a row remap waits for a GPU reset: reset before the next job",
                          ev, Action::kExcludeNode));
    } else {
      out->push_back(Pass("gpu.row_remap", subject, measured, ev));
    }
  } else if (e.retired_supported) {
    const uint64_t total = e.retired_sbe + e.retired_dbe;
    const std::string measured = std::to_string(e.retired_dbe) + " DBE + " + std::to_string(e.retired_sbe) +
                                 " SBE pages" + (e.retired_pending ? ", retirement pending" : "");
    Evidence ev{measured, "< " + std::to_string(config.gpu_retired_pages_max) + " pages, none pending",
                "nvmlDeviceGetRetiredPages" + on};
    if (total >= static_cast<uint64_t>(config.gpu_retired_pages_max)) {
      out->push_back(Fail("gpu.retired_pages", subject, "too many retired pages: the GPU needs replacing (RMA)", ev,
                          Action::kDrainNode));
    } else if (e.retired_pending) {
      out->push_back(Fail("gpu.retired_pages", subject, "a page retirement waits for a driver reload or reboot", ev,
                          Action::kExcludeNode));
    } else {
      out->push_back(Pass("gpu.retired_pages", subject, measured, ev));
    }
  } else {
    out->push_back(Skipped("gpu.row_remap", subject, "neither row remapping nor page retirement supported"));
  }
}

}  // namespace

std::vector<CheckResult> CheckGpusWithNvml(const Result<Nvml*>& nvml_or, const HealthConfig& config) {
  std::vector<CheckResult> out;
  const std::string expected = std::to_string(config.expected_gpus);
  if (!nvml_or.ok()) {
    const std::string reason = nvml_or.status().message();
    if (config.expected_gpus > 0) {
      out.push_back(Fail("gpu.count", "", "expected " + expected + " GPUs but the driver is unusable: " + reason,
                         {"no driver", "== " + expected, "NVML"}, Action::kDrainNode));
    } else {
      out.push_back(Skipped("gpu.count", "", reason));
    }
    out.push_back(Skipped("gpu.memory_errors", "", reason));
    out.push_back(Skipped("gpu.recovery_action", "", reason));
    return out;
  }
  Nvml* nvml = *nvml_or;
  auto count = nvml->DeviceCount();
  if (!count.ok()) {
    out.push_back(Fail("gpu.count", "", "cannot count GPUs: " + count.status().message(),
                       {"error", "== " + expected, "nvmlDeviceGetCount_v2"}, Action::kDrainNode));
    return out;
  }
  const std::string measured = std::to_string(*count) + " GPUs";
  if (config.expected_gpus > 0 && *count != config.expected_gpus) {
    out.push_back(Fail("gpu.count", "", "found " + measured + ", expected " + expected +
                                            ": a GPU has fallen off the bus or is not bound to the driver",
                       {std::to_string(*count) + "/" + expected, "== " + expected, "nvmlDeviceGetCount_v2"},
                       Action::kDrainNode));
  } else if (config.expected_gpus > 0) {
    out.push_back(Pass("gpu.count", "", measured, {measured, "== " + expected, "nvmlDeviceGetCount_v2"}));
  } else {
    out.push_back(Pass("gpu.count", "", measured + " (no expected count configured)",
                       {measured, "none (set health.expected_gpus)", "nvmlDeviceGetCount_v2"}));
  }
  for (int i = 0; i < *count; ++i) {
    auto name = nvml->DeviceName(i);
    const std::string n = name.ok() ? *name : "";
    auto mem = nvml->MemoryErrors(i);
    if (!mem.ok()) {
      out.push_back(Fail("gpu.memory_errors", Gpu(i), "cannot read memory error state: " + mem.status().message(),
                         {"error", "readable", "NVML"}, Action::kExcludeNode));
    } else {
      CheckMemory(i, *mem, config, n, &out);
    }
    auto action = nvml->RecoveryAction(i);
    if (!action.ok()) {
      out.push_back(Skipped("gpu.recovery_action", Gpu(i), action.status().message()));
      continue;
    }
    const std::string what = GpuRecoveryActionName(*action);
    Evidence ev{what, "NONE", "nvmlDeviceGetFieldValues(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)"};
    switch (static_cast<GpuRecoveryAction>(*action)) {
      case GpuRecoveryAction::kNone:
        out.push_back(Pass("gpu.recovery_action", Gpu(i), "driver asks for no recovery", ev));
        break;
      case GpuRecoveryAction::kGpuReset:
        out.push_back(Fail("gpu.recovery_action", Gpu(i), "driver asks for a GPU reset (nvidia-smi -r)", ev,
                           Action::kExcludeNode));
        break;
      case GpuRecoveryAction::kNodeReboot:
        out.push_back(Fail("gpu.recovery_action", Gpu(i), "driver asks for a node reboot", ev, Action::kDrainNode));
        break;
      case GpuRecoveryAction::kDrainP2p:
        out.push_back(Fail("gpu.recovery_action", Gpu(i), "driver asks to drain peer-to-peer traffic", ev,
                           Action::kDrainNode));
        break;
      case GpuRecoveryAction::kDrainAndReset:
        out.push_back(Fail("gpu.recovery_action", Gpu(i), "driver asks to drain the node and reset the GPU", ev,
                           Action::kDrainNode));
        break;
      default:
        out.push_back(Warn("gpu.recovery_action", Gpu(i), "unknown recovery action " + std::to_string(*action), ev));
    }
  }
  return out;
}

std::vector<XidEvent> ParseXidEvents(const std::string& log_text) {
  std::vector<XidEvent> events;
  std::istringstream in(log_text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t at = line.find("NVRM: Xid (");
    if (at == std::string::npos) continue;
    const size_t close = line.find("): ", at);
    if (close == std::string::npos) continue;
    XidEvent e;
    e.pci = line.substr(at + 11, close - at - 11);
    if (e.pci.rfind("PCI:", 0) == 0) e.pci = e.pci.substr(4);
    e.xid = std::atoi(line.c_str() + close + 3);
    if (e.xid <= 0) continue;
    e.line = line.substr(at);
    events.push_back(e);
  }
  return events;
}

std::vector<CheckResult> CheckXidEvents(const std::vector<XidEvent>& events, const std::string& source) {
  std::vector<CheckResult> out;
  if (events.empty()) {
    out.push_back(Pass("gpu.xid", "", "no Xid events", {"0 Xid events", "none", source}));
    return out;
  }
  // One result per (Xid, GPU): a burst of the same Xid is one problem.
  std::map<std::pair<int, std::string>, std::pair<int, const XidEvent*>> seen;
  for (const XidEvent& e : events) {
    auto& slot = seen[{e.xid, e.pci}];
    if (slot.first++ == 0) slot.second = &e;
  }
  for (const auto& [key, value] : seen) {
    const XidMeaning m = Meaning(key.first);
    const std::string measured = "Xid " + std::to_string(key.first) + " x" + std::to_string(value.first);
    Evidence ev{measured, "no hardware Xid", source + ": " + value.second->line.substr(0, 160)};
    const std::string msg = "Xid " + std::to_string(key.first) + ": " + m.meaning;
    const std::string subject = "pci " + key.second;
    if (m.status == CheckStatus::kFail) out.push_back(Fail("gpu.xid", subject, msg, ev, m.action));
    else out.push_back(Warn("gpu.xid", subject, msg, ev));
  }
  return out;
}

KernelLogReader::KernelLogReader(std::string path) : path_(std::move(path)) {}

KernelLogReader::~KernelLogReader() {
  if (fd_ >= 0) close(fd_);
}

Result<std::string> KernelLogReader::Read() {
  if (fd_ < 0) {
    fd_ = open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd_ < 0) return ErrnoError("open kernel log " + path_, errno);
  }
  std::string text;
  char buf[8192];  // a /dev/kmsg record is at most ~1 KiB; each read returns one
  for (;;) {
    ssize_t n = read(fd_, buf, sizeof(buf));
    if (n > 0) {
      text.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) break;                          // a plain file's end
    if (errno == EINTR) continue;
    if (errno == EAGAIN) break;                 // /dev/kmsg: no more records
    if (errno == EPIPE) continue;               // /dev/kmsg: records overwritten; skip ahead
    return ErrnoError("read kernel log " + path_, errno);
  }
  return text;
}

}  // namespace holdfast::health
