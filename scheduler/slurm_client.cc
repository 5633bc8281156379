#include "scheduler/slurm_client.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <functional>
#include <mutex>
#include <regex>
#include <thread>

#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#include <spdlog/spdlog.h>

namespace holdfast {
namespace {

std::string Str(const char* s) { return s ? std::string(s) : std::string(); }
// libslurm takes char* for strings it does not modify.
char* Mut(const std::string& s) { return s.empty() ? nullptr : const_cast<char*>(s.c_str()); }

const char* BaseStateName(uint32_t state) {
  switch (state & JOB_STATE_BASE) {
    case JOB_PENDING: return "PENDING";
    case JOB_RUNNING: return "RUNNING";
    case JOB_SUSPENDED: return "SUSPENDED";
    case JOB_COMPLETE: return "COMPLETED";
    case JOB_CANCELLED: return "CANCELLED";
    case JOB_FAILED: return "FAILED";
    case JOB_TIMEOUT: return "TIMEOUT";
    case JOB_NODE_FAIL: return "NODE_FAIL";
    case JOB_PREEMPTED: return "PREEMPTED";
    case JOB_BOOT_FAIL: return "BOOT_FAIL";
    case JOB_DEADLINE: return "DEADLINE";
    case JOB_OOM: return "OUT_OF_MEMORY";
    default: return "UNKNOWN";
  }
}

}  // namespace

// Exported by libslurm 22.05 but not declared in its public headers.
extern "C" char* slurm_job_reason_string(enum job_state_reason inx);

bool IsSlurmCommunicationError(int e) {
  return e == SLURM_COMMUNICATIONS_CONNECTION_ERROR || e == SLURM_COMMUNICATIONS_SEND_ERROR ||
         e == SLURM_COMMUNICATIONS_RECEIVE_ERROR || e == SLURM_COMMUNICATIONS_SHUTDOWN_ERROR ||
         e == SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR || e == SLURMCTLD_COMMUNICATIONS_SEND_ERROR ||
         e == SLURMCTLD_COMMUNICATIONS_RECEIVE_ERROR || e == SLURMCTLD_COMMUNICATIONS_SHUTDOWN_ERROR ||
         e == SLURM_PROTOCOL_SOCKET_IMPL_TIMEOUT || e == SLURM_PROTOCOL_SOCKET_IMPL_ZERO_RECV_LENGTH ||
         e == ESLURM_IN_STANDBY_MODE || e == ECONNREFUSED || e == ECONNRESET || e == ETIMEDOUT ||
         e == EHOSTUNREACH || e == ENETUNREACH;
}

Status SlurmError(const std::string& what, int e) {
  const std::string msg = what + ": " + Str(slurm_strerror(e)) + " (slurm error " + std::to_string(e) + ")";
  if (IsSlurmCommunicationError(e)) return UnavailableError(msg + "; is slurmctld running? (`scontrol ping`)");
  if (e == ESLURM_ACCESS_DENIED || e == ESLURM_USER_ID_MISSING || e == EPERM) return {StatusCode::kFailedPrecondition, msg};
  if (e == ESLURM_INVALID_JOB_ID || e == ESLURM_INVALID_NODE_NAME) return NotFoundError(msg);
  return FailedPreconditionError(msg);
}

namespace {

// Runs `rpc` (returns a Slurm error number, 0 on success), retrying
// communication errors with backoff until the policy's deadline.
Status InitOnce();

Status Call(const SlurmClient::RetryPolicy& retry, int* rpcs, const std::string& what, const std::function<int()>& rpc) {
  if (Status init = InitOnce(); !init.ok()) return init.WithContext(what);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(retry.deadline_s);
  double wait = retry.initial_s;
  for (int attempt = 1;; ++attempt) {
    ++*rpcs;
    const int e = rpc();
    if (e == 0) return Status::Ok();
    if (!IsSlurmCommunicationError(e) || std::chrono::steady_clock::now() + std::chrono::duration<double>(wait) > deadline) {
      Status s = SlurmError(what, e);
      if (attempt > 1) s = s.WithContext("after " + std::to_string(attempt) + " tries");
      return s;
    }
    spdlog::warn("{}: {} (try {}); retrying in {:.1f} s", what, Str(slurm_strerror(e)), attempt, wait);
    std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    wait = std::min(retry.max_s, wait * 2);
  }
}

int ErrnoOf(int rc) {
  if (rc == SLURM_SUCCESS) return 0;
  const int e = slurm_get_errno();
  return e != 0 ? e : SLURM_ERROR;
}

}  // namespace

namespace {

// slurm_init() exits the process when it finds no configuration, so look first:
// SLURM_CONF, the default path, or the copy a configless slurmd keeps.
Status InitOnce() {
  static std::once_flag once;
  static Status result;
  std::call_once(once, [] {
    const char* env = std::getenv("SLURM_CONF");
    const std::vector<std::string> candidates =
        env && *env ? std::vector<std::string>{env}
                    : std::vector<std::string>{"/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf",
                                               "/run/slurm/conf/slurm.conf"};
    for (const std::string& c : candidates) {
      if (access(c.c_str(), R_OK) == 0) {
        slurm_init(nullptr);
        return;
      }
    }
    result = FailedPreconditionError(
        "no Slurm configuration to read (" +
        std::string(env && *env ? "SLURM_CONF=" + std::string(env) + " is not readable"
                                : "no /etc/slurm/slurm.conf and SLURM_CONF is unset") +
        "): run on a node of the cluster, or set SLURM_CONF");
  });
  return result;
}

}  // namespace

SlurmClient::SlurmClient(RetryPolicy retry) : retry_(retry) {}

Result<SlurmJob> SlurmClient::LoadJob(uint32_t job_id) const {
  job_info_msg_t* msg = nullptr;
  Status s = Call(retry_, &rpcs_, "load job " + std::to_string(job_id),
                  [&] { return ErrnoOf(slurm_load_job(&msg, job_id, SHOW_ALL | SHOW_DETAIL)); });
  if (!s.ok()) return s;
  if (msg == nullptr || msg->record_count == 0) {
    if (msg) slurm_free_job_info_msg(msg);
    return NotFoundError("load job " + std::to_string(job_id) + ": slurmctld does not know it");
  }
  const slurm_job_info_t& j = msg->job_array[0];
  SlurmJob out;
  out.job_id = j.job_id;
  out.state = BaseStateName(j.job_state);
  out.completing = (j.job_state & JOB_COMPLETING) != 0;
  out.requeue_pending = (j.job_state & (JOB_REQUEUE | JOB_REQUEUE_HOLD)) != 0;
  // Reason= as scontrol prints it: slurmctld's description where it set one
  // (a job held after a failed Prolog has state_reason JobHeldUser and the
  // description "launch failed requeued held"), spaces as '_'.
  if (j.state_desc != nullptr && *j.state_desc != '\0') {
    out.reason = j.state_desc;
    std::replace_if(out.reason.begin(), out.reason.end(), [](unsigned char c) { return std::isspace(c) != 0; }, '_');
  } else {
    out.reason = Str(slurm_job_reason_string(static_cast<enum job_state_reason>(j.state_reason)));
  }
  out.restart_count = j.restart_cnt;
  out.batch = j.batch_flag != 0;
  out.requeue_allowed = j.requeue != 0;
  if (j.nodes != nullptr && *j.nodes != '\0') {
    auto nodes = ExpandSlurmHostlist(j.nodes);
    if (nodes.ok()) out.nodes = *nodes;
  }
  out.exc_nodes = Str(j.exc_nodes);
  out.comment = Str(j.comment);
  out.name = Str(j.name);
  out.partition = Str(j.partition);
  out.account = Str(j.account);
  out.qos = Str(j.qos);
  out.work_dir = Str(j.work_dir);
  out.std_out = Str(j.std_out);
  out.std_err = Str(j.std_err);
  out.std_in = Str(j.std_in);
  out.command = Str(j.command);
  out.tres_per_node = Str(j.tres_per_node);
  out.num_nodes = j.num_nodes;
  out.num_tasks = j.num_tasks;
  out.ntasks_per_node = j.ntasks_per_node;
  out.cpus_per_task = j.cpus_per_task;
  out.pn_min_memory = j.pn_min_memory;
  out.time_limit_min = j.time_limit;
  out.priority = j.priority;
  out.user_id = j.user_id;
  out.group_id = j.group_id;
  out.start_time = j.start_time;
  out.end_time = j.end_time;
  slurm_free_job_info_msg(msg);
  return out;
}

Result<SlurmConfig> SlurmClient::LoadConfig() const {
  slurm_conf_t* conf = nullptr;
  Status s = Call(retry_, &rpcs_, "load the controller's configuration",
                  [&] { return ErrnoOf(slurm_load_ctl_conf(static_cast<time_t>(0), &conf)); });
  if (!s.ok()) return s;
  SlurmConfig out;
  out.cluster_name = Str(conf->cluster_name);
  out.epilog_slurmctld = Str(conf->epilog_slurmctld);
  out.prolog = Str(conf->prolog);
  out.prolog_flags_alloc = (conf->prolog_flags & PROLOG_FLAG_ALLOC) != 0;
  out.kill_wait_s = conf->kill_wait;
  out.slurm_user_id = conf->slurm_user_id;
  slurm_free_ctl_conf(conf);
  return out;
}

Result<std::map<std::string, std::string>> SlurmClient::NodeAddrs() const {
  node_info_msg_t* msg = nullptr;
  Status s = Call(retry_, &rpcs_, "load the node table", [&] { return ErrnoOf(slurm_load_node(0, &msg, SHOW_ALL)); });
  if (!s.ok()) return s;
  std::map<std::string, std::string> out;
  for (uint32_t i = 0; i < msg->record_count; ++i) {
    const node_info_t& n = msg->node_array[i];
    if (n.name == nullptr) continue;
    out[n.name] = n.node_addr ? n.node_addr : n.name;
  }
  slurm_free_node_info_msg(msg);
  return out;
}

Status SlurmClient::Requeue(uint32_t job_id) const {
  return Call(retry_, &rpcs_, "requeue job " + std::to_string(job_id), [&] { return ErrnoOf(slurm_requeue(job_id, 0)); });
}

Status SlurmClient::UpdateJob(uint32_t job_id, const SlurmJobUpdate& u) const {
  job_desc_msg_t d;
  slurm_init_job_desc_msg(&d);
  d.job_id = job_id;
  std::string exc = u.exc_nodes.value_or(""), comment = u.comment.value_or("");
  if (u.exc_nodes) d.exc_nodes = const_cast<char*>(exc.c_str());  // "" clears the list
  if (u.comment) d.comment = const_cast<char*>(comment.c_str());
  if (u.begin_now) d.begin_time = std::time(nullptr);
  if (u.release) d.priority = INFINITE;
  return Call(retry_, &rpcs_, "update job " + std::to_string(job_id), [&] { return ErrnoOf(slurm_update_job(&d)); });
}

Status SlurmClient::SetNodeDrained(const std::string& node, bool drain, const std::string& reason) const {
  update_node_msg_t m;
  slurm_init_update_node_msg(&m);
  m.node_names = Mut(node);
  m.node_state = drain ? NODE_STATE_DRAIN : NODE_RESUME;
  std::string r = reason;
  if (drain) {
    m.reason = Mut(r);
    m.reason_uid = getuid();
  }
  return Call(retry_, &rpcs_, std::string(drain ? "drain" : "resume") + " node " + node,
              [&] { return ErrnoOf(slurm_update_node(&m)); });
}

Status SlurmClient::Signal(uint32_t job_id, int sig, bool batch_only) const {
  return Call(retry_, &rpcs_, "signal job " + std::to_string(job_id) + " with " + std::to_string(sig),
              [&] { return ErrnoOf(slurm_kill_job(job_id, static_cast<uint16_t>(sig), batch_only ? KILL_JOB_BATCH : 0)); });
}

Result<std::string> SlurmClient::BatchScript(uint32_t job_id) const {
  char* buf = nullptr;
  size_t len = 0;
  FILE* out = open_memstream(&buf, &len);
  if (out == nullptr) return ErrnoError("open_memstream", errno);
  Status s = Call(retry_, &rpcs_, "read the batch script of job " + std::to_string(job_id), [&] {
    std::rewind(out);
    return ErrnoOf(slurm_job_batch_script(out, job_id));
  });
  std::fclose(out);
  std::string script = s.ok() && buf ? std::string(buf, len) : std::string();
  std::free(buf);
  if (!s.ok()) return s;
  return script;
}

Result<uint32_t> SlurmClient::Submit(const SlurmSubmission& j) const {
  job_desc_msg_t d;
  slurm_init_job_desc_msg(&d);
  d.script = Mut(j.script);
  d.name = Mut(j.name);
  d.partition = Mut(j.partition);
  d.account = Mut(j.account);
  d.qos = Mut(j.qos);
  d.work_dir = Mut(j.work_dir);
  d.std_out = Mut(j.std_out);
  d.std_err = Mut(j.std_err);
  d.std_in = Mut(j.std_in);
  d.comment = Mut(j.comment);
  d.exc_nodes = Mut(j.exc_nodes);
  d.dependency = Mut(j.dependency);
  d.tres_per_node = Mut(j.tres_per_node);
  std::vector<char*> env;
  for (const std::string& kv : j.environment) env.push_back(const_cast<char*>(kv.c_str()));
  env.push_back(nullptr);
  d.environment = env.data();
  d.env_size = static_cast<uint32_t>(j.environment.size());
  if (j.num_nodes) d.min_nodes = d.max_nodes = j.num_nodes;
  if (j.num_tasks) d.num_tasks = j.num_tasks;
  if (j.ntasks_per_node) d.ntasks_per_node = j.ntasks_per_node;
  if (j.cpus_per_task) d.cpus_per_task = j.cpus_per_task;
  if (j.pn_min_memory) d.pn_min_memory = j.pn_min_memory;
  if (j.time_limit_min) d.time_limit = j.time_limit_min;
  d.requeue = j.requeue ? 1 : 0;
  if (j.warn_signal > 0) {
    d.warn_signal = static_cast<uint16_t>(j.warn_signal);
    d.warn_time = static_cast<uint16_t>(j.warn_time_s);
    if (j.warn_batch_only) d.warn_flags = KILL_JOB_BATCH;
  }
  d.user_id = getuid();
  d.group_id = getgid();
  submit_response_msg_t* resp = nullptr;
  Status s = Call(retry_, &rpcs_, "submit job " + j.name, [&] { return ErrnoOf(slurm_submit_batch_job(&d, &resp)); });
  if (!s.ok()) return s;
  const uint32_t id = resp ? resp->job_id : 0;
  if (resp) slurm_free_submit_response_response_msg(resp);
  if (id == 0) return FailedPreconditionError("submit job " + j.name + ": slurmctld returned no job id");
  return id;
}

Result<std::vector<std::string>> ExpandSlurmHostlist(const std::string& expr) {
  hostlist_t hl = slurm_hostlist_create(expr.c_str());
  if (hl == nullptr) return InvalidArgumentError("'" + expr + "' is not a Slurm host list (e.g. n[1-3],gpu7)");
  std::vector<std::string> out;
  while (char* h = slurm_hostlist_shift(hl)) {
    out.emplace_back(h);
    std::free(h);
  }
  slurm_hostlist_destroy(hl);
  return out;
}

std::string CompressSlurmHostlist(const std::vector<std::string>& hosts) {
  if (hosts.empty()) return "";
  std::string joined;
  for (const std::string& h : hosts) joined += (joined.empty() ? "" : ",") + h;
  hostlist_t hl = slurm_hostlist_create(joined.c_str());
  if (hl == nullptr) return joined;
  std::vector<char> buf(joined.size() + 64);
  const ssize_t n = slurm_hostlist_ranged_string(hl, buf.size(), buf.data());
  std::string out = n >= 0 ? std::string(buf.data()) : joined;
  slurm_hostlist_destroy(hl);
  return out;
}

int ParseSignal(const std::string& text) {
  if (text.empty()) return 0;
  if (std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    const int n = std::atoi(text.c_str());
    return n > 0 && n < NSIG ? n : 0;
  }
  std::string name = text;
  if (name.rfind("SIG", 0) == 0) name = name.substr(3);
  for (int sig = 1; sig < NSIG; ++sig) {
    const char* abbrev = sigabbrev_np(sig);
    if (abbrev && name == abbrev) return sig;
  }
  return 0;
}

std::optional<WarnSignal> ScriptWarnSignal(const std::string& script) {
  static const std::regex line(R"(^#SBATCH[ \t]+--signal[= \t]+(?:([RB]):)?([A-Za-z0-9]+)(?:@([0-9]+))?)",
                               std::regex::multiline);
  std::smatch m;
  if (!std::regex_search(script, m, line)) return std::nullopt;
  WarnSignal w;
  w.batch_only = m[1].matched && m[1].str() == "B";
  w.sig = ParseSignal(m[2].str());
  if (w.sig == 0) return std::nullopt;
  if (m[3].matched) w.time_s = std::atoi(m[3].str().c_str());
  return w;
}

}  // namespace holdfast
