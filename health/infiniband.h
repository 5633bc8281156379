// InfiniBand / RoCE port checks from sysfs, in the kernel's layout:
//   <sysfs_root>/class/infiniband/<hca>/ports/<n>/state        "4: ACTIVE"
//                                               /phys_state   "5: LinkUp"
//                                               /rate         "200 Gb/sec (4X HDR)"
//                                               /link_layer   "InfiniBand" | "Ethernet"
//                                               /counters/<name>  decimal
// (the same attributes libibverbs' ibv_query_port reports; reading sysfs needs
// no library and no privilege). A port snapshot is a handful of small files, so
// a poll is cheap enough for the daemon's event loop.
//
// Counters watched (IBA PortCounters): link_downed and link_error_recovery
// (a flapping or retraining link), symbol_error, port_rcv_errors,
// port_rcv_remote_physical_errors, local_link_integrity_errors,
// excessive_buffer_overrun_errors (a bad cable/transceiver), port_xmit_discards
// (congestion, or a peer not draining).
//
// Thread-safety: pure functions over values; reading touches only the files named.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "health/check.h"
#include "health/config.h"

namespace holdfast::health {

// The error counters this module reads, in the order reports list them.
const std::vector<std::string>& IbErrorCounters();

struct IbPort {
  std::string device;  // "mlx5_0"
  int port = 0;        // 1-based
  std::string path;    // <root>/class/infiniband/mlx5_0/ports/1
  int state_code = 0;  // 4
  std::string state;   // "ACTIVE"
  std::string phys_state;  // "LinkUp"
  std::string rate;        // "200 Gb/sec (4X HDR)"
  double rate_gbps = 0;    // 200
  std::string link_layer;  // "InfiniBand"
  std::map<std::string, uint64_t> counters;  // those of IbErrorCounters() that exist

  std::string Id() const { return device + "/" + std::to_string(port); }
};

// Reads every port of every HCA (or only `devices` when not empty), sorted by
// device and port. NotFound when <root>/class/infiniband does not exist; a
// named device that is missing is NotFound too.
Result<std::vector<IbPort>> ReadIbPorts(const std::string& sysfs_root, const std::vector<std::string>& devices);

// State, rate and port count against the thresholds; one result per port
// ("ib.port_state", "ib.port_rate") plus "ib.port_count" when
// expected_ib_ports > 0. `read` is ReadIbPorts' outcome: NotFound becomes
// skipped (fail when ports are expected).
std::vector<CheckResult> CheckIbPorts(const Result<std::vector<IbPort>>& read, const HealthConfig& config);

// Counter changes between two snapshots taken `seconds` apart: "ib.link_downed"
// (fail), "ib.link_error_recovery" (warn), "ib.error_rate" (warn/fail),
// "ib.xmit_discards" (warn), and "ib.port_missing" (fail) for a port that has
// gone. Only ports whose counters moved past a threshold produce a result,
// plus one "ib.counters" pass per port with the deltas as evidence.
// A counter that went down (cleared by perfquery -R) counts from zero.
std::vector<CheckResult> CheckIbCounterDeltas(const std::vector<IbPort>& before, const std::vector<IbPort>& after,
                                              double seconds, const HealthConfig& config);

}  // namespace holdfast::health
