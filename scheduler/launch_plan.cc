#include "scheduler/launch_plan.h"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <set>

namespace holdfast {
namespace {

std::string Trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
  return s.substr(b, e - b);
}

bool AllDigits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

}  // namespace

std::vector<RankPlacement> LaunchPlan::ForNode(int node) const {
  std::vector<RankPlacement> out;
  for (const RankPlacement& r : ranks) {
    if (r.node == node) out.push_back(r);
  }
  return out;
}

const RankPlacement* LaunchPlan::ForRank(int rank) const {
  if (rank < 0 || static_cast<size_t>(rank) >= ranks.size()) return nullptr;
  return &ranks[static_cast<size_t>(rank)];
}

std::string LaunchPlan::HostOf(int rank) const {
  const RankPlacement* r = ForRank(rank);
  return r == nullptr ? std::string() : r->host;
}

Result<LaunchPlan> MakeLaunchPlan(const Allocation& alloc, int nproc_per_node, const std::vector<int>& devices) {
  if (alloc.nodes.empty()) return InvalidArgumentError("cannot plan a launch: the allocation has no nodes");
  const int nodes = static_cast<int>(alloc.nodes.size());
  std::vector<int> all(static_cast<size_t>(nodes));
  for (int node = 0; node < static_cast<int>(nodes); ++node) all[static_cast<size_t>(node)] = node;
  return MakeLaunchPlan(alloc, nproc_per_node, devices, all);
}

Result<LaunchPlan> MakeLaunchPlan(const Allocation& alloc, int nproc_per_node, const std::vector<int>& devices,
                                  const std::vector<int>& active) {
  if (alloc.nodes.empty()) return InvalidArgumentError("cannot plan a launch: the allocation has no nodes");
  if (active.empty()) return InvalidArgumentError("cannot plan a launch on no nodes");
  if (nproc_per_node < 1) {
    return InvalidArgumentError("nproc_per_node must be at least 1, got " + std::to_string(nproc_per_node));
  }
  for (size_t i = 0; i < active.size(); ++i) {
    if (active[i] < 0 || static_cast<size_t>(active[i]) >= alloc.nodes.size()) {
      return InvalidArgumentError("node " + std::to_string(active[i]) + " is not in the allocation of " +
                                  std::to_string(alloc.nodes.size()) + " nodes");
    }
    if (std::find(active.begin(), active.begin() + static_cast<std::ptrdiff_t>(i), active[i]) !=
        active.begin() + static_cast<std::ptrdiff_t>(i)) {
      return InvalidArgumentError("node " + std::to_string(active[i]) + " is listed twice");
    }
  }
  const long long nodes = static_cast<long long>(active.size());
  if (nodes * nproc_per_node > INT_MAX) {
    return InvalidArgumentError(std::to_string(nodes) + " nodes x " + std::to_string(nproc_per_node) +
                                " ranks per node is more ranks than a world can hold");
  }
  if (!devices.empty() && static_cast<size_t>(nproc_per_node) > devices.size()) {
    return InvalidArgumentError(
        std::to_string(nproc_per_node) + " ranks per node ([job] nproc) need one GPU each but this node sees " +
        std::to_string(devices.size()) + " (CUDA_VISIBLE_DEVICES): set nproc to at most " +
        std::to_string(devices.size()) + " or make more GPUs visible (ranks never share a GPU: NCCL refuses it)");
  }
  LaunchPlan plan;
  plan.nproc_per_node = nproc_per_node;
  plan.world_size = static_cast<int>(nodes) * nproc_per_node;
  plan.ranks.reserve(static_cast<size_t>(plan.world_size));
  for (int i = 0; i < static_cast<int>(nodes); ++i) {
    const int node = active[static_cast<size_t>(i)];
    for (int local = 0; local < nproc_per_node; ++local) {
      RankPlacement r;
      r.global_rank = i * nproc_per_node + local;
      r.local_rank = local;
      r.node = node;
      r.host = alloc.nodes[static_cast<size_t>(node)].host;
      r.device = devices.empty() ? -1 : devices[static_cast<size_t>(local) % devices.size()];
      plan.ranks.push_back(std::move(r));
    }
  }
  return plan;
}

Result<std::vector<int>> ParseVisibleDevices(const char* cuda_visible_devices) {
  if (cuda_visible_devices == nullptr) {
    return NotFoundError("CUDA_VISIBLE_DEVICES is not set: which GPUs this node may use is unknown");
  }
  const std::string text(cuda_visible_devices);
  std::vector<int> out;
  if (Trim(text).empty()) return out;
  std::set<std::string> seen;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    const std::string raw = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const std::string entry = Trim(raw);
    const std::string where = "CUDA_VISIBLE_DEVICES='" + text + "': ";
    if (entry == "-1") break;  // CUDA stops enumerating at an invalid index; "-1" is the idiom for none
    if (entry.empty()) {
      return InvalidArgumentError(where + "empty entry at position " + std::to_string(out.size()) +
                                  ": list device indexes or UUIDs separated by single commas, e.g. '0,1,3'");
    }
    const bool uuid = entry.rfind("GPU-", 0) == 0 || entry.rfind("MIG-", 0) == 0;
    if (!uuid && !(AllDigits(entry) && entry.size() <= 6)) {
      return InvalidArgumentError(where + "'" + entry +
                                  "' is neither a device index (0, 1, ...) nor a UUID (GPU-..., MIG-...)");
    }
    if (uuid && entry.size() <= 4) return InvalidArgumentError(where + "'" + entry + "' is a UUID prefix with no id");
    const std::string key = uuid ? entry : std::to_string(std::stoi(entry));
    if (!seen.insert(key).second) {
      return InvalidArgumentError(where + "'" + entry + "' is listed twice: list each device once");
    }
    out.push_back(static_cast<int>(out.size()));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace holdfast
