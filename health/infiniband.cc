#include "health/infiniband.h"

#include <dirent.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace holdfast::health {
namespace {

// Reads a small sysfs attribute; trailing newline removed.
Result<std::string> ReadAttr(const std::string& path) {
  std::ifstream in(path);
  if (!in) return ErrnoError("open " + path, errno);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

Result<std::vector<std::string>> ListDir(const std::string& path) {
  DIR* d = opendir(path.c_str());
  if (d == nullptr) return ErrnoError("list " + path, errno);
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// "4: ACTIVE" -> (4, "ACTIVE").
void ParseCodedState(const std::string& text, int* code, std::string* name) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos) {
    *code = 0;
    *name = text;
    return;
  }
  *code = std::atoi(text.substr(0, colon).c_str());
  size_t start = colon + 1;
  while (start < text.size() && text[start] == ' ') ++start;
  *name = text.substr(start);
}

Result<IbPort> ReadPort(const std::string& root, const std::string& device, const std::string& port_name) {
  IbPort p;
  p.device = device;
  p.port = std::atoi(port_name.c_str());
  p.path = root + "/class/infiniband/" + device + "/ports/" + port_name;
  HF_ASSIGN_OR_RETURN(std::string state, ReadAttr(p.path + "/state"));
  ParseCodedState(state, &p.state_code, &p.state);
  auto phys = ReadAttr(p.path + "/phys_state");
  if (phys.ok()) {
    int code = 0;
    ParseCodedState(*phys, &code, &p.phys_state);
  }
  auto rate = ReadAttr(p.path + "/rate");
  if (rate.ok()) {
    p.rate = *rate;
    p.rate_gbps = std::strtod(p.rate.c_str(), nullptr);
  }
  auto layer = ReadAttr(p.path + "/link_layer");
  if (layer.ok()) p.link_layer = *layer;
  for (const std::string& c : IbErrorCounters()) {
    auto v = ReadAttr(p.path + "/counters/" + c);
    if (v.ok()) p.counters[c] = std::strtoull(v->c_str(), nullptr, 10);
  }
  return p;
}

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

const std::vector<std::string>& IbErrorCounters() {
  static const std::vector<std::string> kCounters = {
      "link_downed",
      "link_error_recovery",
      "symbol_error",
      "port_rcv_errors",
      "port_rcv_remote_physical_errors",
      "local_link_integrity_errors",
      "excessive_buffer_overrun_errors",
      "port_xmit_discards",
  };
  return kCounters;
}

Result<std::vector<IbPort>> ReadIbPorts(const std::string& sysfs_root, const std::vector<std::string>& devices) {
  const std::string class_dir = sysfs_root + "/class/infiniband";
  HF_ASSIGN_OR_RETURN(std::vector<std::string> found, ListDir(class_dir));
  std::vector<std::string> wanted = devices.empty() ? found : devices;
  std::vector<IbPort> ports;
  for (const std::string& dev : wanted) {
    if (std::find(found.begin(), found.end(), dev) == found.end()) {
      return NotFoundError("HCA " + dev + " not found under " + class_dir + " (present: " +
                           (found.empty() ? "none" : Join(found)) + ")");
    }
    HF_ASSIGN_OR_RETURN(std::vector<std::string> port_names, ListDir(class_dir + "/" + dev + "/ports"));
    for (const std::string& pn : port_names) {
      HF_ASSIGN_OR_RETURN(IbPort p, ReadPort(sysfs_root, dev, pn));
      ports.push_back(std::move(p));
    }
  }
  std::sort(ports.begin(), ports.end(),
            [](const IbPort& a, const IbPort& b) { return std::tie(a.device, a.port) < std::tie(b.device, b.port); });
  return ports;
}

std::vector<CheckResult> CheckIbPorts(const Result<std::vector<IbPort>>& read, const HealthConfig& config) {
  std::vector<CheckResult> out;
  if (!read.ok()) {
    if (config.expected_ib_ports > 0 || !config.ib_devices.empty()) {
      const std::string threshold = config.expected_ib_ports > 0
                                        ? ">= " + std::to_string(config.expected_ib_ports) + " ports"
                                        : "HCAs " + Join(config.ib_devices);
      out.push_back(Fail("ib.port_count", "", "InfiniBand ports expected but not readable: " + read.status().message(),
                         {"0 ports", threshold, "sysfs class/infiniband"}, Action::kDrainNode));
    } else {
      out.push_back(Skipped("ib.ports", "", "no InfiniBand/RoCE device on this node (" + read.status().message() + ")"));
    }
    return out;
  }
  const std::vector<IbPort>& ports = *read;
  if (config.expected_ib_ports > 0) {
    const std::string measured = std::to_string(ports.size()) + " ports";
    const std::string threshold = ">= " + std::to_string(config.expected_ib_ports);
    if (static_cast<int>(ports.size()) < config.expected_ib_ports) {
      out.push_back(Fail("ib.port_count", "", "found " + measured + ", expected " + threshold +
                                                  ": an HCA is missing (driver or hardware)",
                         {measured, threshold, config.ib_devices.empty() ? "sysfs class/infiniband" : Join(config.ib_devices)},
                         Action::kDrainNode));
    } else {
      out.push_back(Pass("ib.port_count", "", measured, {measured, threshold, "sysfs class/infiniband"}));
    }
  }
  if (ports.empty() && config.expected_ib_ports == 0) {
    out.push_back(Skipped("ib.ports", "", "no InfiniBand/RoCE ports on this node"));
  }
  for (const IbPort& p : ports) {
    const std::string state_text = std::to_string(p.state_code) + ": " + p.state +
                                   (p.phys_state.empty() ? "" : " (" + p.phys_state + ")");
    if (p.state != "ACTIVE") {
      out.push_back(Fail("ib.port_state", p.Id(),
                         "port is " + p.state + (p.phys_state.empty() ? "" : ", physical " + p.phys_state) +
                             ": link down (cable, transceiver or switch port); the job cannot use this node",
                         {p.state, "ACTIVE", p.path + "/state"}, Action::kExcludeNode));
    } else {
      out.push_back(Pass("ib.port_state", p.Id(), "ACTIVE", {state_text, "ACTIVE", p.path + "/state"}));
    }
    if (config.ib_rate_gbps_min > 0 && p.state == "ACTIVE") {
      const std::string threshold = ">= " + FormatNumber(config.ib_rate_gbps_min) + " Gb/sec";
      if (p.rate_gbps < config.ib_rate_gbps_min) {
        out.push_back(Fail("ib.port_rate", p.Id(),
                           "link trained at " + p.rate + ", below " + threshold +
                               ": degraded width or speed (reseat or replace the cable)",
                           {p.rate, threshold, p.path + "/rate"}, Action::kExcludeNode));
      } else {
        out.push_back(Pass("ib.port_rate", p.Id(), p.rate, {p.rate, threshold, p.path + "/rate"}));
      }
    }
  }
  return out;
}

std::vector<CheckResult> CheckIbCounterDeltas(const std::vector<IbPort>& before, const std::vector<IbPort>& after,
                                              double seconds, const HealthConfig& config) {
  std::vector<CheckResult> out;
  const double minutes = std::max(seconds, 1e-3) / 60.0;
  const std::string window = FormatNumber(seconds) + " s";
  for (const IbPort& old : before) {
    auto it = std::find_if(after.begin(), after.end(), [&](const IbPort& p) { return p.Id() == old.Id(); });
    if (it == after.end()) {
      out.push_back(Fail("ib.port_missing", old.Id(), "port disappeared from sysfs: HCA reset or driver unloaded",
                         {"absent", "present", old.path}, Action::kDrainNode));
    }
  }
  for (const IbPort& now : after) {
    auto it = std::find_if(before.begin(), before.end(), [&](const IbPort& p) { return p.Id() == now.Id(); });
    if (it == before.end()) continue;  // new port: no baseline yet
    std::map<std::string, uint64_t> delta;
    for (const auto& [name, value] : now.counters) {
      auto prev = it->counters.find(name);
      if (prev == it->counters.end()) continue;
      delta[name] = value >= prev->second ? value - prev->second : value;  // cleared: count from zero
    }
    const std::string src = now.path + "/counters";
    std::string summary;
    for (const auto& [name, d] : delta) {
      if (d > 0) summary += (summary.empty() ? "" : ", ") + name + " +" + std::to_string(d);
    }
    bool problem = false;
    if (delta["link_downed"] > static_cast<uint64_t>(config.ib_link_downed_max)) {
      problem = true;
      out.push_back(Fail("ib.link_downed", now.Id(),
                         "link went down " + std::to_string(delta["link_downed"]) + " times in " + window +
                             ": flapping link (cable, transceiver or switch port)",
                         {"+" + std::to_string(delta["link_downed"]) + " in " + window,
                          "<= " + std::to_string(config.ib_link_downed_max), src + "/link_downed"},
                         Action::kExcludeNode));
    }
    if (delta["link_error_recovery"] > static_cast<uint64_t>(config.ib_link_recovery_max)) {
      problem = true;
      out.push_back(Warn("ib.link_error_recovery", now.Id(),
                         "link retrained " + std::to_string(delta["link_error_recovery"]) + " times in " + window +
                             ": marginal link, expect link_downed next",
                         {"+" + std::to_string(delta["link_error_recovery"]) + " in " + window,
                          "<= " + std::to_string(config.ib_link_recovery_max), src + "/link_error_recovery"}));
    }
    uint64_t errors = 0;
    std::string error_names;
    for (const char* c : {"symbol_error", "port_rcv_errors", "port_rcv_remote_physical_errors",
                          "local_link_integrity_errors", "excessive_buffer_overrun_errors"}) {
      if (delta[c] > 0) {
        errors += delta[c];
        error_names += (error_names.empty() ? "" : ", ") + std::string(c) + " +" + std::to_string(delta[c]);
      }
    }
    const double per_min = static_cast<double>(errors) / minutes;
    if (config.ib_error_fail_per_min > 0 && per_min > config.ib_error_fail_per_min) {
      problem = true;
      out.push_back(Fail("ib.error_rate", now.Id(),
                         "link errors at " + FormatNumber(per_min) + "/min (" + error_names +
                             "): bad cable or transceiver, traffic is being retried",
                         {FormatNumber(per_min) + "/min over " + window,
                          "<= " + FormatNumber(config.ib_error_fail_per_min) + "/min", src},
                         Action::kExcludeNode));
    } else if (errors > 0 && per_min > config.ib_error_warn_per_min) {
      problem = true;
      out.push_back(Warn("ib.error_rate", now.Id(),
                         "link errors at " + FormatNumber(per_min) + "/min (" + error_names +
                             "): marginal cable or transceiver",
                         {FormatNumber(per_min) + "/min over " + window,
                          "<= " + FormatNumber(config.ib_error_warn_per_min) + "/min", src}));
    }
    const double discards_per_min = static_cast<double>(delta["port_xmit_discards"]) / minutes;
    if (delta["port_xmit_discards"] > 0 && discards_per_min > config.ib_xmit_discards_warn_per_min) {
      problem = true;
      out.push_back(Warn("ib.xmit_discards", now.Id(),
                         "port discarded " + FormatNumber(discards_per_min) +
                             " packets/min: fabric congestion or a peer not draining",
                         {FormatNumber(discards_per_min) + "/min over " + window,
                          "<= " + FormatNumber(config.ib_xmit_discards_warn_per_min) + "/min",
                          src + "/port_xmit_discards"}));
    }
    if (!problem) {
      out.push_back(Pass("ib.counters", now.Id(), summary.empty() ? "no error counter moved" : "within thresholds",
                         {summary.empty() ? "no change in " + window : summary + " in " + window,
                          "see [health] ib_*", src}));
    }
  }
  return out;
}

}  // namespace holdfast::health
