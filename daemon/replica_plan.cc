#include "daemon/replica_plan.h"

#include <algorithm>
#include <set>

#include "checkpoint/format.h"

namespace holdfast {
namespace {

int KindOrder(CopyKind k) { return k == CopyKind::kLocal ? 0 : k == CopyKind::kHeld ? 1 : 2; }

std::string NodeName(int node, const std::map<int, std::string>& hosts) {
  auto it = hosts.find(node);
  return "node " + std::to_string(node) + (it == hosts.end() ? "" : " (" + it->second + ")");
}

}  // namespace

std::optional<MemoryRestorePlan> PlanMemoryRestore(const std::vector<NodeInventory>& live,
                                                   const std::map<int, std::string>& hosts) {
  // step -> file name -> holders
  std::map<int64_t, std::map<std::string, std::vector<ReplicaHolder>>, std::greater<int64_t>> files;
  std::set<int> live_nodes;
  for (const NodeInventory& inv : live) {
    live_nodes.insert(inv.node);
    for (const SnapshotCopy& c : inv.copies) {
      for (const ReplicaFile& f : c.files) {
        files[c.step][f.name].push_back(ReplicaHolder{inv.addr, inv.node, c.kind, c.origin});
      }
    }
  }
  for (auto& [step, names] : files) {
    if (names.count(kManifestFileName) == 0) continue;
    std::map<int, int> shards_of_world;  // W -> shards of it held
    for (const auto& [name, holders] : names) {
      int r = 0, w = 0;
      if (ParseShardName(name, &r, &w)) ++shards_of_world[w];
    }
    int world = 0;
    for (const auto& [w, n] : shards_of_world) {
      if (n == w) world = w;
    }
    if (world == 0) continue;
    MemoryRestorePlan plan;
    plan.step = step;
    std::map<int, std::set<int>> from_replica;  // gone origin -> nodes holding its replica
    std::vector<std::string> order = {kManifestFileName};
    for (int r = 0; r < world; ++r) order.push_back(ShardFileName(r, world));
    for (const std::string& name : order) {
      std::vector<ReplicaHolder> holders = names[name];
      std::stable_sort(holders.begin(), holders.end(), [](const ReplicaHolder& a, const ReplicaHolder& b) {
        return KindOrder(a.kind) < KindOrder(b.kind);
      });
      bool origin_live = false;
      for (const ReplicaHolder& h : holders) origin_live = origin_live || live_nodes.count(h.origin) > 0;
      if (!origin_live) {
        for (const ReplicaHolder& h : holders) from_replica[h.origin].insert(h.node);
      }
      plan.files.push_back(GatherFile{name, std::move(holders)});
    }
    for (const auto& [origin, at] : from_replica) {
      std::string on;
      for (int n : at) on += (on.empty() ? "" : " or ") + NodeName(n, hosts);
      plan.note += (plan.note.empty() ? "" : "; ") + NodeName(origin, hosts) + "'s shards from the replica on " + on;
    }
    return plan;
  }
  return std::nullopt;
}

}  // namespace holdfast
