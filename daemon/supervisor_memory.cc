// Supervisor::Impl's part in the memory snapshots of a run of several nodes
// (docs/memory-snapshots.md, "Several nodes"): the replica service, the
// restore plan and the gather that a generation's launch waits for.
#include <spdlog/spdlog.h>

#include "daemon/supervisor_impl.h"

namespace holdfast {

namespace asio = boost::asio;

void Supervisor::Impl::StartMemoryReplicas() {
  replicas_ = StartReplicas(snapshots_ != nullptr && alloc_.nodes.size() > 1, job_.recovery,
                            snapshots_ ? snapshots_->path() : "", alloc_.this_node, alloc_.self().addr, opts_.run_dir,
                            *key_);
  if (replicas_) {
    std::map<int, std::string> hosts;
    for (size_t n = 0; n < alloc_.nodes.size(); ++n) hosts[static_cast<int>(n)] = alloc_.nodes[n].host;
    restore_ = std::make_unique<MemoryRestore>(opts_.run_dir, *key_, std::move(hosts));
  }
}

void Supervisor::Impl::StopMemoryReplicas() {
  if (replicas_) replicas_->Stop();
  if (snapshots_) snapshots_->Remove();
}

int64_t Supervisor::Impl::NewestMemorySnapshot() const {
  if (!restore_) return snapshots_ ? NewestSnapshotStep(snapshots_->path()) : -1;
  std::vector<int> live = members_.joined_nodes();
  live.push_back(alloc_.this_node);
  std::optional<MemoryRestorePlan> plan = restore_->Plan(live);
  return plan ? plan->step : -1;
}

Status Supervisor::Impl::LaunchGeneration(int generation, int64_t resume_step) {
  members_.ClearViews();
  // A daemon that died on this machine (a lost node's, where nodes share a
  // machine) holds memory that nothing reads any more: the plan takes only
  // live nodes' copies. Free it now rather than at the next daemon's start.
  if (snapshots_) SweepDeadSnapshotDirs(job_.recovery.memory_dir);
  if (replicas_) replicas_->SetLocalFiles(LocalSnapshotFiles(members_.world(), members_.plan().ForNode(alloc_.this_node)));
  if (!restore_ || !restore_->last_plan() || resume_step >= 0) return LaunchNow(generation, resume_step);
  // Several nodes from memory: every node of the generation makes the step
  // whole in its own folder first, so that each rank's restore finds it all.
  const MemoryRestorePlan plan = *restore_->last_plan();
  std::vector<int> nodes;
  for (int n : members_.joined_nodes()) {
    if (!members_.plan().ForNode(n).empty()) nodes.push_back(n);
  }
  nodes.push_back(alloc_.this_node);
  spdlog::info("generation {}: memory snapshot step {} is made whole on {} node(s) before the ranks start{}", generation,
               plan.step, nodes.size(), plan.note.empty() ? "" : " (" + plan.note + ")");
  std::weak_ptr<Impl> weak = shared_from_this();
  restore_->Gather(plan, nodes, [weak, &io = io_, generation, resume_step, step = plan.step](Status gathered) {
    asio::post(io, [weak, generation, resume_step, step, gathered] {
      auto self = weak.lock();
      if (!self || self->finished_ || self->controller_->generation() != generation) return;
      if (!gathered.ok()) {
        spdlog::warn("memory snapshot step {} could not be made whole on every node ({}): the ranks restore from the "
                     "disk", step, gathered.ToString());
      }
      if (Status s = self->LaunchNow(generation, resume_step); !s.ok()) spdlog::error("{}", s.ToString());
    });
  });
  return Status::Ok();
}

}  // namespace holdfast
