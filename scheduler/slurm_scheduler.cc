#include "scheduler/slurm_scheduler.h"

#include "common/atomic_file.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>
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
  std::string out = std::string(kRequeueRequestTag) + " job=" + std::to_string(r.job_id) +
                    " uid=" + std::to_string(r.uid) + " restart=" + std::to_string(r.restart);
  if (!r.run_id.empty()) out += " run=" + r.run_id;
  if (!r.exclude.empty()) out += " exclude=" + Join(r.exclude, ",");
  return out;
}

namespace {

// The comment's last ';'-separated part without surrounding spaces, and where it starts.
std::string LastCommentPart(const std::string& comment, size_t* start = nullptr) {
  const size_t semi = comment.rfind(';');
  const size_t from = semi == std::string::npos ? 0 : semi + 1;
  if (start != nullptr) *start = semi == std::string::npos ? 0 : semi;
  std::string part = comment.substr(from);
  const size_t b = part.find_first_not_of(" \t");
  const size_t e = part.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : part.substr(b, e - b + 1);
}

bool IsTagged(const std::string& part) {
  const std::string tag = kRequeueRequestTag;
  return part.rfind(tag, 0) == 0 && (part.size() == tag.size() || part[tag.size()] == ' ' || part[tag.size()] == '\t');
}

// A decimal number of at most 10 digits, no sign, that fits `max`.
bool ParseCount(const std::string& text, uint64_t max, uint64_t* out) {
  if (text.empty() || text.size() > 10) return false;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > max) return false;
  *out = v;
  return true;
}

// Node names and run ids: letters, digits, '.', '_', '-' (and ':' in run ids), 1..128 characters.
bool IsName(const std::string& text, bool allow_colon) {
  if (text.empty() || text.size() > 128) return false;
  return std::all_of(text.begin(), text.end(), [&](unsigned char c) {
    return std::isalnum(c) != 0 || c == '.' || c == '_' || c == '-' || (allow_colon && c == ':');
  });
}

}  // namespace

Result<std::optional<RequeueRequest>> ReadRequeueRequest(const std::string& comment) {
  const std::string part = LastCommentPart(comment);
  if (!IsTagged(part)) return std::optional<RequeueRequest>();
  auto bad = [](const std::string& why) { return InvalidArgumentError("malformed requeue request: " + why); };
  if (part.size() > kMaxRequeueRequestBytes) {
    return bad(std::to_string(part.size()) + " bytes, more than " + std::to_string(kMaxRequeueRequestBytes));
  }
  std::istringstream in(part.substr(std::string(kRequeueRequestTag).size()));
  RequeueRequest r;
  std::set<std::string> seen;
  std::string word;
  while (in >> word) {
    const size_t eq = word.find('=');
    const std::string key = word.substr(0, eq), value = eq == std::string::npos ? "" : word.substr(eq + 1);
    if (eq == std::string::npos || (key != "job" && key != "uid" && key != "restart" && key != "run" && key != "exclude")) {
      return bad("'" + word.substr(0, 40) + "' is not one of job=, uid=, restart=, run=, exclude=");
    }
    if (!seen.insert(key).second) return bad(key + "= given twice");
    uint64_t n = 0;
    if (key == "job") {
      if (!ParseCount(value, 0xfffffffeu, &n) || n == 0) return bad("job='" + value.substr(0, 40) + "' is not a job id");
      r.job_id = static_cast<uint32_t>(n);
    } else if (key == "uid") {
      if (!ParseCount(value, 0xfffffffeu, &n)) return bad("uid='" + value.substr(0, 40) + "' is not a uid");
      r.uid = static_cast<uint32_t>(n);
    } else if (key == "restart") {
      if (!ParseCount(value, 0xffff, &n)) return bad("restart='" + value.substr(0, 40) + "' is not a restart count");
      r.restart = static_cast<int>(n);
    } else if (key == "run") {
      if (!IsName(value, true)) return bad("run='" + value.substr(0, 40) + "' is not a run id");
      r.run_id = value;
    } else {
      std::stringstream hosts(value);
      std::string h;
      while (std::getline(hosts, h, ',')) {
        if (!IsName(h, false)) return bad("exclude= holds '" + h.substr(0, 40) + "', not a node name");
        if (std::find(r.exclude.begin(), r.exclude.end(), h) == r.exclude.end()) r.exclude.push_back(h);
      }
      if (r.exclude.empty() || value.back() == ',') return bad("exclude='" + value.substr(0, 40) + "' names no node");
      if (r.exclude.size() > kMaxRequeueExcludedHosts) {
        return bad(std::to_string(r.exclude.size()) + " nodes to exclude, more than " +
                   std::to_string(kMaxRequeueExcludedHosts));
      }
    }
  }
  for (const char* key : {"job", "uid", "restart"}) {
    if (seen.count(key) == 0) {
      return bad(std::string("no ") + key + "= (every request names its job, owner and attempt; written by hand, "
                 "or by a holdfastd older than this epilog?)");
    }
  }
  return std::optional<RequeueRequest>(r);
}

std::string StripRequeueRequest(const std::string& comment) {
  size_t start = 0;
  if (!IsTagged(LastCommentPart(comment, &start))) return comment;
  return comment.substr(0, start);
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
  a.scheduler = SchedulerKind::kSlurm;
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
  // The time limit, for the lead time of a warning signal (answered without
  // an RPC: the controller may be the thing that is down).
  auto info = client_.LoadJob(job_id_);
  if (info.ok() && info->has_time_limit()) end_time_ = info->end_time;
  leader_ = a.leader();
  if (a.leader()) {
    // For `runctl resume` once slurmctld has forgotten this job.
    auto script = info.ok() && info->batch ? client_.BatchScript(job_id_) : Result<std::string>(info.status());
    // Its --signal, which libslurm's job record does not carry: the script's
    // #SBATCH line (one given on the sbatch command line instead is not seen).
    if (auto w = script.ok() ? ScriptWarnSignal(*script) : std::nullopt) warning_ = *w;
    Status saved = script.ok() ? SaveSubmission(SavedSubmissionPath(options_.run_dir),
                                                SubmissionFromJob(*info, *script, ResubmitEnvironment(environ)))
                               : script.status();
    if (!saved.ok()) spdlog::warn("cannot save job {}'s submission for a later resume: {}", job, saved.message());
  }
  spdlog::info("slurm job {} (restart {}): node {} of {} ({}, {}); {}", job, restart_count_, a.this_node,
               names.size(), a.self().host, a.self().addr,
               may_drain_ ? "may drain nodes" : "may not drain nodes (not root or SlurmUser): drains become exclusions");
  return a;
}

Status SlurmScheduler::PublishLeader(const std::string& addr) {
  return WriteFileAtomically(leader_file(),
                             addr + ' ' + std::to_string(job_id_) + ' ' + std::to_string(restart_count_) + '\n');
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
  // A second requeue would fail, and a resubmission would run twice.
  if (job.being_requeued()) {
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
  // Bound to this job, its owner and this attempt: the epilog acts on nothing else.
  RequeueRequest req;
  req.job_id = job_id_;
  req.uid = job.user_id;
  req.restart = job.restart_count;
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

SlurmSubmission SubmissionFromJob(const SlurmJob& job, const std::string& script, std::vector<std::string> environment) {
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
  sub.exc_nodes = job.exc_nodes;
  sub.environment = std::move(environment);
  return sub;
}

Status SlurmScheduler::Resubmit(const SlurmJob& job, const std::vector<std::string>& exclude) {
  if (!job.batch) {
    return FailedPreconditionError("job " + std::to_string(job_id_) +
                                   " is not a batch job (salloc/srun): there is no script to resubmit; submit with sbatch");
  }
  HF_ASSIGN_OR_RETURN(std::string script, client_.BatchScript(job_id_));
  SlurmSubmission sub = SubmissionFromJob(job, script, ResubmitEnvironment(environ));
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

bool IsJobsWarning(double lead_time_s, const std::optional<WarnSignal>& script_warning) {
  return lead_time_s >= 0 && script_warning && script_warning->sig == SIGUSR1 &&
         lead_time_s <= script_warning->time_s + kWarningEarlyS;
}

std::optional<SignalMeaning> SlurmScheduler::ExplainSignal(int sig) {
  if (sig != SIGTERM && sig != SIGUSR1) return std::nullopt;
  SignalMeaning m;
  m.preemption = true;
  const std::string id = "job " + std::to_string(job_id_);
  const std::time_t now = std::time(nullptr);
  if (sig == SIGUSR1) {
    // No RPC: a warning must be acted on at once, controller or not.
    if (end_time_ > 0) m.lead_time_s = static_cast<double>(end_time_ - now);
    // Not the job's own warning: a stop now. A follower decides nothing: its
    // ranks wait for the leader whenever there is a lead time (daemon/follower.cc).
    m.warning = m.lead_time_s >= 0 && (!leader_ || IsJobsWarning(m.lead_time_s, warning_));
    std::string why = "Slurm's warning signal (SIGUSR1) to " + id;
    if (m.lead_time_s > 0) {
      why += " with " + std::to_string(static_cast<int64_t>(m.lead_time_s)) + " s left before its time limit";
    }
    if (m.lead_time_s >= 0 && !m.warning) {
      why += warning_ ? " (long before its --signal warning, due " + std::to_string(warning_->time_s) + " s before it)"
                      : " (its batch script sets no #SBATCH --signal warning)";
    }
    m.why = why + ": checkpoint, requeue, resume";
    return m;
  }
  SlurmClient quick(SlurmClient::RetryPolicy{0.2, 1, 3});
  auto job = quick.LoadJob(job_id_);
  const bool limited = job.ok() && job->has_time_limit() && job->end_time > 0;
  auto conf = quick.LoadConfig();
  m.lead_time_s = conf.ok() ? conf->kill_wait_s : SlurmConfig{}.kill_wait_s;  // SIGTERM -> SIGKILL
  if (!job.ok()) {
    m.why = "SIGTERM from Slurm to " + id + " (its state could not be read: " + job.status().message() + ")";
  } else if (job->being_requeued()) {
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

std::string SavedSubmissionPath(const std::string& run_dir) { return run_dir + "/slurm-job.json"; }

Status SaveSubmission(const std::string& path, const SlurmSubmission& j) {
  nlohmann::json o = {{"script", j.script},       {"name", j.name},
                      {"partition", j.partition}, {"account", j.account},
                      {"qos", j.qos},             {"work_dir", j.work_dir},
                      {"std_out", j.std_out},     {"std_err", j.std_err},
                      {"std_in", j.std_in},       {"comment", j.comment},
                      {"exc_nodes", j.exc_nodes}, {"tres_per_node", j.tres_per_node},
                      {"environment", j.environment}, {"num_nodes", j.num_nodes},
                      {"num_tasks", j.num_tasks}, {"ntasks_per_node", j.ntasks_per_node},
                      {"cpus_per_task", j.cpus_per_task}, {"pn_min_memory", j.pn_min_memory},
                      {"time_limit_min", j.time_limit_min}, {"requeue", j.requeue},
                      {"warn_signal", j.warn_signal}, {"warn_time_s", j.warn_time_s},
                      {"warn_batch_only", j.warn_batch_only}};
  // The submitter's environment (tokens and all): owner-only (docs/cli.md, "Secrets").
  return WriteFileAtomically(path, o.dump(1) + '\n', 0600);
}

Result<SlurmSubmission> LoadSubmission(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError(path + " does not exist: no Slurm job of this run saved its submission");
  nlohmann::json o = nlohmann::json::parse(in, nullptr, false);
  if (!o.is_object() || !o.contains("script") || !o["script"].is_string()) {
    return CorruptionError(path + " is not a saved Slurm submission (JSON with a \"script\"): remove it and sbatch the "
                           "run's script again");
  }
  SlurmSubmission j;
  try {
    j.script = o.value("script", "");
    j.name = o.value("name", "");
    j.partition = o.value("partition", "");
    j.account = o.value("account", "");
    j.qos = o.value("qos", "");
    j.work_dir = o.value("work_dir", "");
    j.std_out = o.value("std_out", "");
    j.std_err = o.value("std_err", "");
    j.std_in = o.value("std_in", "");
    j.comment = o.value("comment", "");
    j.exc_nodes = o.value("exc_nodes", "");
    j.tres_per_node = o.value("tres_per_node", "");
    j.environment = o.value("environment", std::vector<std::string>{});
    j.num_nodes = o.value("num_nodes", 0u);
    j.num_tasks = o.value("num_tasks", 0u);
    j.ntasks_per_node = o.value("ntasks_per_node", static_cast<uint16_t>(0));
    j.cpus_per_task = o.value("cpus_per_task", static_cast<uint16_t>(0));
    j.pn_min_memory = o.value("pn_min_memory", static_cast<uint64_t>(0));
    j.time_limit_min = o.value("time_limit_min", 0u);
    j.requeue = o.value("requeue", true);
    j.warn_signal = o.value("warn_signal", 0);
    j.warn_time_s = o.value("warn_time_s", 0);
    j.warn_batch_only = o.value("warn_batch_only", false);
  } catch (const nlohmann::json::exception& e) {
    return CorruptionError(path + ": " + e.what() + ": remove it and sbatch the run's script again");
  }
  return j;
}

Result<std::string> ResumeSlurmRun(const std::string& run_dir, const std::string& run_id,
                                   const std::string& last_job_id, std::optional<int64_t> from_step) {
  SlurmClient slurm(SlurmClient::RetryPolicy{0.5, 2, 20});
  if (!last_job_id.empty()) {
    auto job = slurm.LoadJob(static_cast<uint32_t>(std::strtoul(last_job_id.c_str(), nullptr, 10)));
    if (job.ok() && (job->running() || job->completing)) {
      return FailedPreconditionError("job " + last_job_id + " of run " + run_id + " is " + job->state +
                                     (job->completing ? " (completing)" : "") +
                                     ": it is the run's live attempt; `runctl stop` it first");
    }
    if (job.ok() && job->pending()) {
      if (from_step) {
        return FailedPreconditionError("job " + last_job_id + " is queued to continue run " + run_id +
                                       " from its newest checkpoint; to pick step " + std::to_string(*from_step) +
                                       " cancel it first (scancel " + last_job_id + ")");
      }
      SlurmJobUpdate u;
      u.begin_now = true;
      u.release = job->priority == 0;
      HF_RETURN_IF_ERROR(slurm.UpdateJob(job->job_id, u));
      return "job " + last_job_id + " was queued (" + job->reason + "): " + (u.release ? "released it and " : "") +
             "set it to start now; it continues run " + run_id + " from its newest checkpoint";
    }
  }
  HF_ASSIGN_OR_RETURN(SlurmSubmission sub, LoadSubmission(SavedSubmissionPath(run_dir)));
  sub.environment.push_back("HOLDFAST_RESUME=" + run_id);
  if (from_step) sub.environment.push_back("HOLDFAST_FROM_STEP=" + std::to_string(*from_step));
  sub.comment = StripRequeueRequest(sub.comment);
  HF_ASSIGN_OR_RETURN(uint32_t id, slurm.Submit(sub));
  return "submitted job " + std::to_string(id) + " (" + (sub.name.empty() ? "the run's script" : sub.name) +
         ") to resume run " + run_id + " from " +
         (from_step ? "step " + std::to_string(*from_step) : std::string("its newest committed checkpoint"));
}

}  // namespace holdfast
