#include "health/node_checks.h"

#include <sstream>
#include <thread>

#include "health/gpu_checks.h"
#include "health/infiniband.h"
#include "health/nvml.h"

namespace holdfast::health {

Result<uint32_t> ParseCheckClasses(const std::string& text) {
  uint32_t classes = 0;
  std::stringstream ss(text);
  std::string word;
  while (std::getline(ss, word, ',')) {
    if (word == "host") classes |= kClassHost;
    else if (word == "ib") classes |= kClassIb;
    else if (word == "gpu") classes |= kClassGpu;
    else if (word == "nccl") classes |= kClassNccl;
    else if (word == "all") classes |= kClassAll;
    else return InvalidArgumentError("--checks: unknown check class '" + word + "' (known: host, ib, gpu, nccl, all)");
  }
  if (classes == 0) return InvalidArgumentError("--checks: name at least one of host, ib, gpu, nccl");
  return classes;
}

std::vector<CheckResult> RunNodeChecks(const NodeCheckOptions& o) {
  std::vector<CheckResult> out;
  RealDiskProbe real_disk;
  DiskProbe* disk = o.disk != nullptr ? o.disk : &real_disk;
  const HealthConfig& c = o.config;
  auto starting = [&](const char* name) {
    if (o.on_check != nullptr) o.on_check(name);
  };

  if (o.classes & kClassHost) {
    starting("host.memory");
    out.push_back(CheckFreeMemory(o.paths.meminfo, c));
    starting("host.devices");
    out.push_back(CheckRequiredDevices(c, o.paths));
    starting("host.mounts");
    out.push_back(CheckRequiredMounts(c, o.paths));
    starting("host.checkpoint_space");
    out.push_back(CheckCheckpointSpace(c, disk));
    if (o.suite == Suite::kPreLaunch) {
      starting("host.checkpoint_write");
      out.push_back(CheckCheckpointWrite(c, disk));
    }
    starting("host.cpu_allreduce");
    out.push_back(CheckCpuAllreduce(c));
  }

  if (o.classes & kClassIb) {
    starting("ib.ports");
    auto ports = ReadIbPorts(o.paths.sysfs_root, c.ib_devices);
    for (CheckResult& r : CheckIbPorts(ports, c)) out.push_back(std::move(r));
    if (o.suite == Suite::kPreLaunch && c.ib_sample_seconds > 0 && ports.ok()) {
      std::this_thread::sleep_for(std::chrono::duration<double>(c.ib_sample_seconds));
      auto again = ReadIbPorts(o.paths.sysfs_root, c.ib_devices);
      if (again.ok()) {
        for (CheckResult& r : CheckIbCounterDeltas(*ports, *again, c.ib_sample_seconds, c)) out.push_back(std::move(r));
      } else {
        out.push_back(Fail("ib.port_missing", "", "InfiniBand ports vanished while sampling: " +
                                                      again.status().message(),
                           {"unreadable", "readable", o.paths.sysfs_root}, Action::kDrainNode));
      }
    }
  }

  if (o.classes & kClassGpu) {
    starting("gpu.nvml");
    auto nvml = OpenNvml(o.paths.nvml_library);
    Result<Nvml*> handle = nvml.ok() ? Result<Nvml*>(nvml->get()) : Result<Nvml*>(nvml.status());
    for (CheckResult& r : CheckGpusWithNvml(handle, c)) out.push_back(std::move(r));
    starting("gpu.xid");
    KernelLogReader log(o.paths.kernel_log);
    auto text = log.Read();
    if (!text.ok()) {
      out.push_back(Skipped("gpu.xid", "", "cannot read Xid events: " + text.status().message()));
    } else {
      for (CheckResult r : CheckXidEvents(ParseXidEvents(*text), o.paths.kernel_log)) {
        // The log reaches back to boot: an Xid that only asked to restart the
        // application belongs to a job that is gone, and is not the node's fault.
        if (r.status == CheckStatus::kFail && r.action <= Action::kRestart) {
          r.status = CheckStatus::kWarn;
          r.action = Action::kNone;
          r.message += " (earlier job)";
        }
        out.push_back(std::move(r));
      }
    }
  }
  return out;
}

}  // namespace holdfast::health
