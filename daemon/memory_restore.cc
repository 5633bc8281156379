#include "daemon/memory_restore.h"

#include <spdlog/spdlog.h>

#include "checkpoint/format.h"

namespace holdfast {

MemoryRestore::~MemoryRestore() {
  if (gather_.joinable()) gather_.join();
}

std::optional<MemoryRestorePlan> MemoryRestore::Plan(const std::vector<int>& nodes) {
  const std::map<int, std::string> ports = ReadReplicaEndpoints(run_dir_);
  std::vector<NodeInventory> live;
  for (int n : nodes) {
    auto it = ports.find(n);
    if (it == ports.end()) continue;
    Result<std::vector<SnapshotCopy>> copies = RequestInventory(it->second, key_, kInventoryTimeout);
    if (!copies.ok()) {
      spdlog::warn("memory snapshots: node {} ({}) did not say what it holds: {}", n, it->second,
                   copies.status().ToString());
      continue;
    }
    live.push_back(NodeInventory{n, it->second, std::move(copies).value()});
  }
  last_ = PlanMemoryRestore(live, hosts_);
  return last_;
}

void MemoryRestore::Gather(const MemoryRestorePlan& plan, const std::vector<int>& nodes,
                           std::function<void(Status)> done) {
  if (gather_.joinable()) gather_.join();
  std::vector<std::pair<int, std::string>> targets;
  const std::map<int, std::string> ports = ReadReplicaEndpoints(run_dir_);
  for (int n : nodes) {
    auto it = ports.find(n);
    targets.emplace_back(n, it == ports.end() ? "" : it->second);
  }
  gather_ = std::thread([key = key_, plan, targets, done = std::move(done)] {
    std::vector<Status> results(targets.size());
    std::vector<std::thread> each;
    for (size_t i = 0; i < targets.size(); ++i) {
      each.emplace_back([&, i] {
        const auto& [node, addr] = targets[i];
        if (addr.empty()) {
          results[i] = NotFoundError("node " + std::to_string(node) + " publishes no replica port");
          return;
        }
        // The whole state may cross the network: a generous allowance per connection.
        Result<std::string> note = RequestGather(addr, key, plan.step, plan.files, std::chrono::minutes(10));
        results[i] = note.ok() ? Status::Ok() : note.status().WithContext("node " + std::to_string(node));
      });
    }
    for (std::thread& t : each) t.join();
    for (const Status& s : results) {
      if (!s.ok()) return done(s);
    }
    done(Status::Ok());
  });
}

std::unique_ptr<ReplicaService> StartReplicas(bool enabled, const RecoveryConfig& recovery, const std::string& root,
                                              int node, const std::string& addr, const std::string& run_dir,
                                              const RunKey& key) {
  if (!enabled) return nullptr;
  ReplicaServiceOptions o;
  o.root = root;
  o.node = node;
  o.bind_addr = addr;
  o.run_dir = run_dir;
  o.budget_bytes = static_cast<uint64_t>(recovery.memory_budget_mb) << 20;
  o.mb_per_s = static_cast<double>(recovery.replica_mb_per_s);
  o.every = recovery.replica_step();
  Result<std::unique_ptr<ReplicaService>> s = ReplicaService::Start(o, key);
  if (!s.ok()) {
    spdlog::error("memory snapshot replicas off on this node (its restarts may restore from disk): {}",
                  s.status().ToString());
    return nullptr;
  }
  return std::move(s).value();
}

std::vector<std::string> LocalSnapshotFiles(int world, const std::vector<RankPlacement>& ranks) {
  std::vector<std::string> out;
  for (const RankPlacement& p : ranks) {
    if (p.global_rank == 0) out.push_back(kManifestFileName);
    out.push_back(ShardFileName(p.global_rank, world));
  }
  return out;
}

}  // namespace holdfast
