#include "daemon/cluster_membership.h"

#include <algorithm>
#include <utility>

#include "daemon/ring_delta.h"

namespace holdfast {

namespace {

bool Contains(const std::vector<int>& nodes, int n) { return std::find(nodes.begin(), nodes.end(), n) != nodes.end(); }

void Erase(std::vector<int>* nodes, int n) { nodes->erase(std::remove(nodes->begin(), nodes->end(), n), nodes->end()); }

}  // namespace

const char* LostNodeName(ClusterMembership::LostNode lost) {
  switch (lost) {
    case ClusterMembership::LostNode::kActive: return "active";
    case ClusterMembership::LostNode::kSpare: return "spare";
    case ClusterMembership::LostNode::kFormer: return "former";
  }
  return "?";
}

ClusterMembership::ClusterMembership(Allocation allocation, int nproc) : alloc_(std::move(allocation)), nproc_(nproc) {}

Status ClusterMembership::Init(int min_nodes, int max_nodes, std::vector<int> devices) {
  devices_ = std::move(devices);
  // The leader always trains (it hosts the store); up to max_nodes train, the rest stand by.
  const size_t train_nodes = max_nodes > 0 ? std::min<size_t>(static_cast<size_t>(max_nodes), alloc_.nodes.size())
                                           : alloc_.nodes.size();
  active_.clear();
  spares_.clear();
  for (size_t n = 0; n < alloc_.nodes.size(); ++n) {
    (n < train_nodes ? active_ : spares_).push_back(static_cast<int>(n));
  }
  if (min_nodes > static_cast<int>(train_nodes)) {
    return InvalidArgumentError("job.min_nodes = " + std::to_string(min_nodes) + " but only " +
                                std::to_string(train_nodes) + " node(s) train in this allocation of " +
                                std::to_string(alloc_.nodes.size()) + ": lower min_nodes or ask for more nodes");
  }
  HF_ASSIGN_OR_RETURN(plan_, MakeLaunchPlan(alloc_, nproc_, devices_, active_));
  return Status::Ok();
}

std::vector<std::string> ClusterMembership::HostsOf(const std::vector<int>& nodes) const {
  std::vector<std::string> out;
  for (int n : nodes) out.push_back(HostOf(n));
  return out;
}

int ClusterMembership::NodeOf(const std::string& host) const {
  for (size_t n = 0; n < alloc_.nodes.size(); ++n) {
    if (alloc_.nodes[n].host == host) return static_cast<int>(n);
  }
  return -1;
}

std::vector<int> ClusterMembership::RanksOf(int node) const {
  std::vector<int> ranks;
  for (const RankPlacement& p : plan_.ForNode(node)) ranks.push_back(p.global_rank);
  return ranks;
}

std::string ClusterMembership::CheckHello(const HelloMsg& hello, bool run_over, bool run_started) const {
  const int n = hello.node;
  if (run_over) return "the run is over";
  if (n <= 0 || n >= static_cast<int>(alloc_.nodes.size())) return "node " + std::to_string(n) + " is out of range";
  if (joined(n)) return "node " + std::to_string(n) + " has already joined";
  if (hello.nproc != nproc_) return "nproc " + std::to_string(hello.nproc) + " differs from the leader's";
  if (run_started) return "the run has started without it";
  return "";
}

void ClusterMembership::Join(int node, int64_t now_ns) {
  followers_[node].clear();
  heard_ns_[node] = now_ns;
}

void ClusterMembership::Heard(int node, int64_t now_ns) {
  if (joined(node)) heard_ns_[node] = now_ns;
}

void ClusterMembership::SetViews(int node, std::vector<RankView> views) {
  if (!joined(node)) return;
  MergeRings(followers_[node], &views);  // rings sent as deltas (daemon/ring_delta.h)
  followers_[node] = std::move(views);
}

void ClusterMembership::ClearViews() {
  for (auto& [n, views] : followers_) views.clear();
}

ClusterMembership::LostNode ClusterMembership::Lose(int node) {
  followers_.erase(node);
  heard_ns_.erase(node);
  if (Contains(active_, node)) return LostNode::kActive;
  if (!Contains(spares_, node)) return LostNode::kFormer;
  Erase(&spares_, node);
  return LostNode::kSpare;
}

std::vector<int> ClusterMembership::joined_nodes() const {
  std::vector<int> out;
  for (const auto& [n, views] : followers_) out.push_back(n);
  return out;
}

Result<int> ClusterMembership::Reshape(const std::vector<std::string>& leaving,
                                       const std::vector<std::string>& joining) {
  std::vector<int> active = active_, spares = spares_;
  for (const std::string& h : leaving) {
    const int n = NodeOf(h);
    if (n == 0) return FailedPreconditionError("the leading node " + h + " cannot leave: it hosts the run's store");
    Erase(&active, n);
    Erase(&spares, n);
  }
  for (const std::string& h : joining) {
    const int n = NodeOf(h);
    if (n < 0 || !Contains(spares, n)) return FailedPreconditionError(h + " is not a spare node of this run");
    Erase(&spares, n);
    active.push_back(n);
  }
  HF_ASSIGN_OR_RETURN(LaunchPlan plan, MakeLaunchPlan(alloc_, nproc_, devices_, active));
  plan_ = std::move(plan);
  active_ = std::move(active);
  spares_ = std::move(spares);
  return plan_.world_size;
}

std::vector<RankView> ClusterMembership::Merge(std::vector<RankView> local, int64_t now_ns) const {
  size_t n = local.size();
  for (const auto& [node, f] : followers_) n += f.size();
  local.reserve(n);
  for (const auto& [node, f] : followers_) {
    const auto heard = heard_ns_.find(node);
    const double age = heard == heard_ns_.end() ? 0 : static_cast<double>(now_ns - heard->second) / 1e9;
    for (const RankView& v : f) {
      local.push_back(v);
      local.back().report_age_s = age;
    }
  }
  // Nodes hold consecutive ranks in node order (scheduler/launch_plan.h) unless
  // an elastic reshape moved them: usually sorted already.
  auto by_rank = [](const RankView& a, const RankView& b) { return a.rank < b.rank; };
  if (!std::is_sorted(local.begin(), local.end(), by_rank)) std::sort(local.begin(), local.end(), by_rank);
  return local;
}

}  // namespace holdfast
