#include "daemon/rank_group.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <signal.h>
#include <sys/wait.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <spdlog/spdlog.h>

#include "common/launch_contract.h"
#include "common/peer_auth.h"

namespace holdfast {
namespace {

// The network interface that holds `addr` (an IPv4 or IPv6 literal); "" when
// none does. PyTorch's Gloo binds where the host name resolves unless
// GLOO_SOCKET_IFNAME names an interface — on a node whose name resolves to
// loopback, its peers on other nodes could never connect.
std::string InterfaceHolding(const std::string& addr) {
  in_addr v4{};
  in6_addr v6{};
  const bool is_v4 = ::inet_pton(AF_INET, addr.c_str(), &v4) == 1;
  const bool is_v6 = !is_v4 && ::inet_pton(AF_INET6, addr.c_str(), &v6) == 1;
  if (!is_v4 && !is_v6) return "";
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  std::string name;
  for (ifaddrs* i = list; i != nullptr && name.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    if (is_v4 && i->ifa_addr->sa_family == AF_INET &&
        reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == v4.s_addr) {
      name = i->ifa_name;
    } else if (is_v6 && i->ifa_addr->sa_family == AF_INET6 &&
               std::memcmp(&reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, &v6, sizeof v6) == 0) {
      name = i->ifa_name;
    }
  }
  ::freeifaddrs(list);
  return name;
}

}  // namespace


std::string ProgressRecordPrefix(const std::string& run_id) { return "holdfast-" + run_id + "-"; }

std::string ProgressRecordPath(const std::string& progress_dir, const std::string& run_id, int attempt,
                               int generation, int rank) {
  return progress_dir + "/" + ProgressRecordPrefix(run_id) + "a" + std::to_string(attempt) + "-g" +
         std::to_string(generation) + "-r" + std::to_string(rank) + ".rec";
}

int RemoveProgressRecords(const std::string& progress_dir, const std::string& run_id, const std::vector<int>* ranks) {
  int n = 0;
  std::error_code ec;
  const std::string prefix = ProgressRecordPrefix(run_id);
  auto selected = [ranks](const std::string& name) {
    if (ranks == nullptr) return true;
    for (int r : *ranks) {
      for (const std::string& suffix : {"-r" + std::to_string(r) + ".rec", "-r" + std::to_string(r) + ".rec.pystack"}) {
        if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
          return true;
        }
      }
    }
    return false;
  };
  for (const auto& e : std::filesystem::directory_iterator(progress_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && selected(name) && std::filesystem::remove(e.path(), ec)) ++n;
  }
  return n;
}

Status RankGroup::Launch(const GenerationSpec& spec, const std::vector<RankPlacement>& placements) {
  ranks_.clear();
  generation_ = spec.generation;
  attempt_ = spec.attempt;
  if (!placements.empty()) node_ = placements.front().node;
  const std::string master_addr = spec.store_addr.substr(0, spec.store_addr.rfind(':'));
  const std::string gloo_ifname = InterfaceHolding(spec.node_addr);
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(run_dir_, ec);
  const std::string run_dir_abs = ec ? run_dir_ : abs.lexically_normal().string();
  const std::string progress_dir = std::filesystem::absolute(job_->supervise.progress_dir, ec).lexically_normal().string();
  for (const RankPlacement& p : placements) {
    RankSpawn s;
    s.rank = p.global_rank;
    s.argv = job_->command;
    s.workdir = job_->workdir;
    s.env = job_->env;
    s.log_path = RankLogPath(run_dir_, spec.attempt, spec.generation, p.global_rank);
    s.progress_path =
        ProgressRecordPath(job_->supervise.progress_dir, spec.run_id, spec.attempt, spec.generation, p.global_rank);
    s.env[kEnvRank] = std::to_string(p.global_rank);
    s.env[kEnvLocalRank] = std::to_string(p.local_rank);
    s.env[kEnvWorldSize] = std::to_string(spec.world_size);
    s.env[kEnvStoreAddr] = spec.store_addr;
    s.env[kEnvStoreKeyFile] = RunKeyPath(run_dir_abs);
    s.env[kEnvGeneration] = std::to_string(spec.generation);
    s.env[kEnvProgressPath] = s.progress_path;
    s.env[kEnvRunId] = spec.run_id;
    s.env[kEnvNode] = std::to_string(p.node);
    s.env[kEnvHost] = p.host;
    s.env[kEnvNodeAddr] = spec.node_addr;
    s.env[kEnvDevice] = std::to_string(p.device);
    s.env[kEnvRole] = kRoleLearner;
    s.env[kEnvRunDir] = run_dir_abs;
    if (spec.resume_step >= 0) s.env[kEnvResumeFromStep] = std::to_string(spec.resume_step);
    if (!snapshot_dir_.empty()) {  // the node's budget, shared evenly by its ranks
      s.env[kEnvSnapshotDir] = snapshot_dir_;
      s.env[kEnvSnapshotBudgetBytes] =
          std::to_string((static_cast<uint64_t>(job_->recovery.memory_budget_mb) << 20) / placements.size());
      s.env[kEnvSnapshotEvery] = std::to_string(job_->recovery.snapshot_every);
      if (replicated_) s.env[kEnvSnapshotReplicaEvery] = std::to_string(job_->recovery.replica_step());
    }
    // torchrun's contract, for PyTorch jobs.
    s.env["RANK"] = std::to_string(p.global_rank);
    s.env["LOCAL_RANK"] = std::to_string(p.local_rank);
    s.env["WORLD_SIZE"] = std::to_string(spec.world_size);
    s.env["LOCAL_WORLD_SIZE"] = std::to_string(placements.size());
    s.env["GROUP_RANK"] = std::to_string(p.node);
    s.env["MASTER_ADDR"] = master_addr;
    s.env["MASTER_PORT"] = std::to_string(spec.master_port);
    // PyTorch's Gloo on the node's own address, unless the job or its environment names an interface.
    if (!gloo_ifname.empty() && s.env.count("GLOO_SOCKET_IFNAME") == 0 && std::getenv("GLOO_SOCKET_IFNAME") == nullptr) {
      s.env["GLOO_SOCKET_IFNAME"] = gloo_ifname;
    }
    // Every rank log says whose it is: a log copied out of the run dir still names its run.
    const std::string header = "holdfastd: run " + spec.run_id + " attempt " + std::to_string(spec.attempt) +
                               " generation " + std::to_string(spec.generation) + ": rank " +
                               std::to_string(p.global_rank) + " of " + std::to_string(spec.world_size) + " (local " +
                               std::to_string(p.local_rank) + ") on " + p.host + ", device " + std::to_string(p.device);
    if (spares_.size() > 0) {
      SpareAssignment a;
      a.log_path = RankLogPath(run_dir_abs, spec.attempt, spec.generation, p.global_rank);
      a.env = s.env;
      a.env[kEnvProgressPath] =
          ProgressRecordPath(progress_dir, spec.run_id, spec.attempt, spec.generation, p.global_rank);
      if (auto warm = spares_.Assign(p.global_rank, a, a.env[kEnvProgressPath], header)) {
        ranks_.push_back(std::move(warm));
        continue;
      }
    }
    {
      std::ofstream log(s.log_path, std::ios::app);
      log << header << "\n";
    }
    auto proc = RankProcess::Start(s);
    if (!proc.ok()) return proc.status().WithContext("start rank " + std::to_string(p.global_rank));
    ranks_.push_back(std::move(proc).value());
  }
  return Status::Ok();
}

std::vector<ReapedRank> RankGroup::Reap(std::vector<std::pair<pid_t, int>>* others) {
  std::vector<ReapedRank> out;
  for (;;) {
    int wstatus = 0;
    const pid_t pid = waitpid(-1, &wstatus, WNOHANG);
    if (pid <= 0) break;
    if (spares_.OnExit(pid, wstatus)) continue;
    bool ours = false;
    for (auto& r : ranks_) {
      if (r->pid() == pid && r->alive()) {
        ours = true;
        r->SetExited(wstatus);
        spdlog::info("rank {} (pid {}) {}", r->rank(), r->pid(), DescribeWaitStatus(wstatus));
        out.push_back({r->rank(), wstatus, r->LogTail(20)});
      }
    }
    if (!ours && others != nullptr) others->emplace_back(pid, wstatus);
  }
  return out;
}

void RankGroup::TopUpSpares() {
  if (!job_->recovery.warm_spares || ranks_.empty()) return;
  for (const auto& r : ranks_) {
    if (!r->alive()) return;
    const RankProgress p = r->Progress();
    if (!p.attached() || p.last_step_ns == 0) return;  // still starting or restoring
  }
  spares_.TopUp(static_cast<int>(ranks_.size()), attempt_, node_);
}

void RankGroup::SignalAll(int sig) {
  for (const auto& r : ranks_) {
    if (r->alive()) r->Signal(sig);
  }
}

void RankGroup::Kill(const std::vector<int>& ranks) {
  for (const auto& r : ranks_) {
    if (!r->alive()) continue;
    bool hit = ranks.empty();
    for (int x : ranks) hit = hit || x == r->rank();
    if (hit) r->Signal(SIGKILL);
  }
}

bool RankGroup::AnyAlive() const {
  for (const auto& r : ranks_) {
    if (r->alive()) return true;
  }
  return false;
}

std::vector<int> RankGroup::ranks() const {
  std::vector<int> out;
  for (const auto& r : ranks_) out.push_back(r->rank());
  return out;
}

std::vector<RankView> RankGroup::Views(int node, const std::string& host) const {
  std::vector<RankView> views;
  for (const auto& r : ranks_) {
    RankView v;
    v.rank = r->rank();
    v.node = node;
    v.host = host;
    v.pid = r->pid();
    v.alive = r->alive();
    v.proc_state = r->State();
    v.progress = r->Progress();
    views.push_back(std::move(v));
  }
  return views;
}

}  // namespace holdfast
