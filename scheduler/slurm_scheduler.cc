#include "scheduler/slurm_scheduler.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <spdlog/spdlog.h>

extern char** environ;

namespace holdfast {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string Join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

// An IP literal for `addr`: itself when it is one, else its first IPv4 (then IPv6) address.
Result<std::string> Resolve(const std::string& node, const std::string& addr) {
  unsigned char buf[sizeof(in6_addr)];
  if (inet_pton(AF_INET, addr.c_str(), buf) == 1 || inet_pton(AF_INET6, addr.c_str(), buf) == 1) return addr;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(addr.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    return InvalidArgumentError("node " + node + ": its NodeAddr '" + addr + "' does not resolve (" + gai_strerror(rc) +
                                "): fix NodeAddr in slurm.conf or give holdfastd --addr");
  }
  std::string out;
  for (int family : {AF_INET, AF_INET6}) {
    for (addrinfo* a = res; a != nullptr && out.empty(); a = a->ai_next) {
      if (a->ai_family != family) continue;
      char text[INET6_ADDRSTRLEN] = {};
      const void* src = family == AF_INET ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr)
                                          : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr);
      if (inet_ntop(family, src, text, sizeof(text))) out = text;
    }
  }
  freeaddrinfo(res);
  if (out.empty()) return InvalidArgumentError("node " + node + ": NodeAddr '" + addr + "' has no IP address");
  return out;
}

}  // namespace

const char* RequeuePathName(RequeuePath p) {
  switch (p) {
    case RequeuePath::kAuto: return "auto";
    case RequeuePath::kEpilog: return "epilog";
    case RequeuePath::kResubmit: return "resubmit";
  }
  return "auto";
}

Result<RequeuePath> ParseRequeuePath(const std::string& text) {
  if (text == "auto") return RequeuePath::kAuto;
  if (text == "epilog") return RequeuePath::kEpilog;
  if (text == "resubmit") return RequeuePath::kResubmit;
  return InvalidArgumentError("requeue path '" + text + "' is not one of auto, epilog, resubmit");
}

std::string FormatRequeueRequest(const RequeueRequest& r) {
  std::string out = kRequeueRequestTag;
  if (!r.exclude.empty()) out += " exclude=" + Join(r.exclude, ",");
  if (!r.run_id.empty()) out += " run=" + r.run_id;
  return out;
}

std::optional<RequeueRequest> ParseRequeueRequest(const std::string& comment) {
  const size_t semi = comment.rfind(';');
  std::string part = semi == std::string::npos ? comment : comment.substr(semi + 1);
  while (!part.empty() && part.front() == ' ') part.erase(part.begin());
  if (part.rfind(kRequeueRequestTag, 0) != 0) return std::nullopt;
  std::istringstream in(part.substr(std::string(kRequeueRequestTag).size()));
  RequeueRequest r;
  std::string word;
  while (in >> word) {
    if (word.rfind("exclude=", 0) == 0) {
      std::stringstream hosts(word.substr(8));
      std::string h;
      while (std::getline(hosts, h, ',')) {
        if (!h.empty()) r.exclude.push_back(h);
      }
    } else if (word.rfind("run=", 0) == 0) {
      r.run_id = word.substr(4);
    }
  }
  return r;
}

std::string StripRequeueRequest(const std::string& comment) {
  if (!ParseRequeueRequest(comment)) return comment;
  const size_t semi = comment.rfind(';');
  return semi == std::string::npos ? std::string() : comment.substr(0, semi);
}

std::vector<std::string> ResubmitEnvironment(char** env) {
  std::vector<std::string> out;
  for (char** e = env; e != nullptr && *e != nullptr; ++e) {
    const std::string kv = *e;
    if (kv.rfind("SLURM_CONF=", 0) == 0) {
      out.push_back(kv);
      continue;
    }
    if (kv.rfind("SLURM_", 0) == 0 || kv.rfind("SLURMD_", 0) == 0) continue;
    // A resume request (runctl resume) was for the job that carried it.
    if (kv.rfind("HOLDFAST_RESUME=", 0) == 0 || kv.rfind("HOLDFAST_FROM_STEP=", 0) == 0) continue;
    out.push_back(kv);
  }
  return out;
}

SlurmScheduler::SlurmScheduler(SlurmSchedulerOptions options)
    : options_(std::move(options)),
      client_(SlurmClient::RetryPolicy{0.5, 5, options_.rpc_deadline_s}) {}

SchedulerCapabilities SlurmScheduler::capabilities() const {
  SchedulerCapabilities c;
  c.requeue = true;
  c.exclude_hosts = true;
  c.drain = may_drain_;
  return c;
}

Result<Allocation> SlurmScheduler::Discover() {
  const std::string job = Env("SLURM_JOB_ID");
  if (job.empty()) {
    return InvalidArgumentError(
        "--scheduler slurm: SLURM_JOB_ID is not set, so this is not a Slurm job: start holdfastd with srun inside an "
        "sbatch script (examples/slurm/holdfast.sbatch), or use --scheduler local");
  }
  job_id_ = static_cast<uint32_t>(std::strtoul(job.c_str(), nullptr, 10));
  const std::string step_tasks = Env("SLURM_STEP_NUM_TASKS"), step_nodes = Env("SLURM_STEP_NUM_NODES");
  if (!step_tasks.empty() && !step_nodes.empty() && step_tasks != step_nodes) {
    return InvalidArgumentError("this srun step runs " + step_tasks + " tasks on " + step_nodes +
                                " nodes: run one holdfastd per node (srun --ntasks-per-node=1 holdfastd ...); "
                                "holdfastd starts the node's ranks itself");
  }
  std::string list = Env("SLURM_STEP_NODELIST");
  if (list.empty()) list = Env("SLURM_JOB_NODELIST");
  if (list.empty()) list = Env("SLURM_NODELIST");
  if (list.empty()) return InvalidArgumentError("job " + job + ": SLURM_JOB_NODELIST is not set: start holdfastd with srun");
  HF_ASSIGN_OR_RETURN(std::vector<std::string> names, ExpandSlurmHostlist(list));
  if (names.empty()) return InvalidArgumentError("job " + job + ": node list '" + list + "' is empty");
  Allocation a;
  a.scheduler = "slurm";
  a.job_id = job;
  restart_count_ = std::atoi(Env("SLURM_RESTART_COUNT").c_str());
  a.restart_count = restart_count_;
  const std::string me = Env("SLURMD_NODENAME");
  auto it = std::find(names.begin(), names.end(), me);
  if (it != names.end()) {
    a.this_node = static_cast<int>(it - names.begin());
  } else {
    const std::string id = Env("SLURM_NODEID");
    if (id.empty()) return InvalidArgumentError("job " + job + ": neither SLURMD_NODENAME nor SLURM_NODEID is set");
    a.this_node = std::atoi(id.c_str());
    if (a.this_node < 0 || a.this_node >= static_cast<int>(names.size())) {
      return InvalidArgumentError("job " + job + ": SLURM_NODEID " + id + " is outside the node list " + list);
    }
  }
  HF_ASSIGN_OR_RETURN(auto addrs, client_.NodeAddrs());
  for (size_t i = 0; i < names.size(); ++i) {
    NodeInfo n;
    n.host = names[i];
    if (static_cast<int>(i) == a.this_node && !options_.addr.empty()) {
      n.addr = options_.addr;
    } else {
      auto found = addrs.find(names[i]);
      const std::string addr = found == addrs.end() ? names[i] : found->second;
      HF_ASSIGN_OR_RETURN(n.addr, Resolve(names[i], addr));
    }
    a.nodes.push_back(n);
  }
  auto conf = client_.LoadConfig();
  if (conf.ok()) may_drain_ = getuid() == 0 || getuid() == conf->slurm_user_id;
  spdlog::info("slurm job {} (restart {}): node {} of {} ({}, {}); {}", job, restart_count_, a.this_node,
               names.size(), a.self().host, a.self().addr,
               may_drain_ ? "may drain nodes" : "may not drain nodes (not root or SlurmUser): drains become exclusions");
  return a;
}

Status SlurmScheduler::PublishLeader(const std::string& addr) {
  const std::string path = leader_file(), tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << addr << ' ' << job_id_ << ' ' << restart_count_ << '\n';
    out.flush();
    if (!out) return IoError("write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return IoError("rename " + tmp + " to " + path + ": " + ec.message());
  return Status::Ok();
}

void SlurmScheduler::WithdrawLeader() {
  std::ifstream in(leader_file());
  std::string addr;
  uint32_t job = 0;
  int restart = -1;
  if (in >> addr >> job >> restart && job == job_id_ && restart == restart_count_) {
    std::error_code ec;
    std::filesystem::remove(leader_file(), ec);
  }
}

Result<std::string> SlurmScheduler::FindLeader(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string seen = "the file does not exist";
  for (;;) {
    std::ifstream in(leader_file());
    std::string addr;
    uint32_t job = 0;
    int restart = -1;
    if (in >> addr >> job >> restart) {
      if (job == job_id_ && restart == restart_count_) return addr;
      seen = "it names job " + std::to_string(job) + " restart " + std::to_string(restart) + ", not job " +
             std::to_string(job_id_) + " restart " + std::to_string(restart_count_);
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return TimeoutError("the leader of job " + std::to_string(job_id_) + " did not publish its address in " +
                      leader_file() + " (" + seen + "): is the run directory shared by every node of the job?");
}

Status SlurmScheduler::Requeue(const std::string& run_id, const std::vector<std::string>& exclude,
                               const std::string& reason) {
  last_requeue_.clear();
  HF_ASSIGN_OR_RETURN(SlurmJob job, client_.LoadJob(job_id_));
  // Slurm is putting the job back itself (scontrol requeue, a preemption with
  // PreemptMode=REQUEUE): the job is completing with no end time, or already
  // pending. A second requeue would fail, and a resubmission would run twice.
  if (job.pending() || job.requeue_pending || (job.completing && job.end_time == 0)) {
    last_requeue_ = "Slurm is already requeueing job " + std::to_string(job_id_) + " (state " + job.state +
                    (job.completing ? "+COMPLETING" : "") + ")" +
                    (exclude.empty() ? "" : "; " + Join(exclude, ",") + " could not be excluded");
    return Status::Ok();
  }
  RequeuePath path = options_.requeue_path;
  if (path == RequeuePath::kAuto) {
    auto conf = client_.LoadConfig();
    path = conf.ok() && conf->epilog_slurmctld.find("holdfast-slurmctld-epilog") != std::string::npos
               ? RequeuePath::kEpilog
               : RequeuePath::kResubmit;
  }
  spdlog::info("requeue job {} by {}{}: {}", job_id_, RequeuePathName(path),
               exclude.empty() ? "" : " excluding " + Join(exclude, ","), reason);
  if (path == RequeuePath::kEpilog) {
    Status s = RequeueByEpilog(job, run_id, exclude);
    if (s.ok() || options_.requeue_path == RequeuePath::kEpilog) return s;
    spdlog::warn("{}; resubmitting instead", s.message());
  }
  return Resubmit(job, exclude);
}

Status SlurmScheduler::RequeueByEpilog(const SlurmJob& job, const std::string& run_id,
                                       const std::vector<std::string>& exclude) {
  if (!job.batch) {
    return FailedPreconditionError("job " + std::to_string(job_id_) +
                                   " is not a batch job (salloc/srun), which Slurm cannot requeue: submit it with sbatch");
  }
  RequeueRequest req;
  req.exclude = exclude;
  req.run_id = run_id;
  const std::string base = StripRequeueRequest(job.comment);
  HF_RETURN_IF_ERROR(client_.UpdateJob(
      job_id_, SlurmJobUpdate{std::nullopt, (base.empty() ? "" : base + "; ") + FormatRequeueRequest(req)}));
  HF_RETURN_IF_ERROR(client_.Requeue(job_id_));
  last_requeue_ = "requeued job " + std::to_string(job_id_) + "; holdfast-slurmctld-epilog " +
                  (exclude.empty() ? std::string("starts it at once") : "excludes " + Join(exclude, ",") + " and starts it at once");
  return Status::Ok();
}

Status SlurmScheduler::Resubmit(const SlurmJob& job, const std::vector<std::string>& exclude) {
  if (!job.batch) {
    return FailedPreconditionError("job " + std::to_string(job_id_) +
                                   " is not a batch job (salloc/srun): there is no script to resubmit; submit with sbatch");
  }
  HF_ASSIGN_OR_RETURN(std::string script, client_.BatchScript(job_id_));
  SlurmSubmission sub;
  sub.script = script;
  sub.name = job.name;
  sub.partition = job.partition;
  sub.account = job.account;
  sub.qos = job.qos;
  sub.work_dir = job.work_dir;
  sub.std_out = job.std_out;
  sub.std_err = job.std_err;
  sub.std_in = job.std_in;
  sub.comment = StripRequeueRequest(job.comment);
  sub.tres_per_node = job.tres_per_node;
  sub.num_nodes = job.num_nodes;
  sub.num_tasks = job.num_tasks;
  sub.ntasks_per_node = job.ntasks_per_node == UINT16_MAX ? 0 : job.ntasks_per_node;
  sub.cpus_per_task = job.cpus_per_task == UINT16_MAX ? 0 : job.cpus_per_task;
  sub.pn_min_memory = job.pn_min_memory;
  sub.time_limit_min = job.time_limit_min;
  sub.requeue = job.requeue_allowed;
  if (auto w = ScriptWarnSignal(script)) {
    sub.warn_signal = w->sig;
    sub.warn_time_s = w->time_s;
    sub.warn_batch_only = w->batch_only;
  }
  std::vector<std::string> excluded;
  if (!job.exc_nodes.empty()) {
    auto prior = ExpandSlurmHostlist(job.exc_nodes);
    if (prior.ok()) excluded = *prior;
  }
  for (const std::string& h : exclude) {
    if (std::find(excluded.begin(), excluded.end(), h) == excluded.end()) excluded.push_back(h);
  }
  sub.exc_nodes = Join(excluded, ",");
  sub.dependency = "afterany:" + std::to_string(job_id_);
  sub.environment = ResubmitEnvironment(environ);
  HF_ASSIGN_OR_RETURN(uint32_t next, client_.Submit(sub));
  last_requeue_ = "submitted job " + std::to_string(next) + (excluded.empty() ? "" : " excluding " + sub.exc_nodes) +
                  " to continue once job " + std::to_string(job_id_) + " ends";
  return Status::Ok();
}

Status SlurmScheduler::Drain(const std::string& host, const std::string& reason) {
  if (!may_drain_) {
    return FailedPreconditionError("only root or SlurmUser may drain node " + host + " (holdfastd runs as uid " +
                                   std::to_string(getuid()) + "): it is excluded from the requeued job instead");
  }
  std::string r = "holdfast: " + reason;
  if (r.size() > 200) r = r.substr(0, 197) + "...";
  return client_.SetNodeDrained(host, true, r);
}

std::optional<SignalMeaning> SlurmScheduler::ExplainSignal(int sig) {
  if (sig != SIGTERM && sig != SIGUSR1) return std::nullopt;
  SlurmClient quick(SlurmClient::RetryPolicy{0.2, 1, 3});
  auto job = quick.LoadJob(job_id_);
  SignalMeaning m;
  m.preemption = true;
  const std::string id = "job " + std::to_string(job_id_);
  const std::time_t now = std::time(nullptr);
  const bool limited = job.ok() && job->time_limit_min != 0 && job->time_limit_min != UINT32_MAX && job->end_time > 0;
  if (limited) m.lead_time_s = static_cast<double>(job->end_time - now);
  if (sig == SIGUSR1) {
    m.why = "Slurm's warning signal (SIGUSR1) to " + id +
            (limited && m.lead_time_s > 0 ? " with " + std::to_string(static_cast<int64_t>(m.lead_time_s)) +
                                                 " s left before its time limit"
                                           : "") +
            ": checkpoint, requeue, resume";
    return m;
  }
  auto conf = quick.LoadConfig();
  m.lead_time_s = conf.ok() ? conf->kill_wait_s : SlurmConfig{}.kill_wait_s;  // SIGTERM -> SIGKILL
  if (!job.ok()) {
    m.why = "SIGTERM from Slurm to " + id + " (its state could not be read: " + job.status().message() + ")";
  } else if (job->requeue_pending) {
    m.why = "Slurm is requeueing " + id + " (scontrol requeue or preemption): SIGTERM";
  } else if (job->state == "CANCELLED") {
    m.preemption = false;
    m.why = id + " was cancelled (scancel): SIGTERM from Slurm";
  } else if (job->state == "TIMEOUT" || (limited && job->end_time <= now + 1)) {
    m.why = id + " reached its time limit: SIGTERM from Slurm";
  } else if (job->state == "PREEMPTED") {
    m.why = id + " was preempted: SIGTERM from Slurm";
  } else {
    m.why = "SIGTERM from Slurm to " + id + " (state " + job->state + "): a preemption, time limit or node shutdown";
  }
  return m;
}

}  // namespace holdfast
