#include "scheduler/local_scheduler.h"

#include "common/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <thread>
#include <utility>

namespace holdfast {
namespace {

constexpr std::chrono::milliseconds kLeaderPollInterval{50};

bool HasSpace(const std::string& s) {
  for (char c : s) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') return true;
  }
  return false;
}

// "host:port" or "[v6]:port" -> host. kInvalidArgument otherwise.
Result<std::string> HostOfHostPort(const std::string& flag, const std::string& hp) {
  std::string host, port;
  if (!hp.empty() && hp[0] == '[') {
    const size_t close = hp.find(']');
    if (close != std::string::npos && close + 1 < hp.size() && hp[close + 1] == ':') {
      host = hp.substr(1, close - 1);
      port = hp.substr(close + 2);
    }
  } else {
    const size_t colon = hp.rfind(':');
    if (colon != std::string::npos) {
      host = hp.substr(0, colon);
      port = hp.substr(colon + 1);
    }
  }
  bool port_ok = !port.empty() && port.size() <= 5;
  for (char c : port) port_ok = port_ok && c >= '0' && c <= '9';
  if (port_ok) port_ok = std::stoi(port) >= 1 && std::stoi(port) <= 65535;
  if (host.empty() || !port_ok || HasSpace(hp)) {
    return InvalidArgumentError(flag + " '" + hp +
                                "' is not host:port (e.g. 10.0.0.5:29400, gpu-a17:29400, [::1]:29400)");
  }
  return host;
}

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

Result<std::string> MachineHostName() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return ErrnoError("gethostname", errno);
  std::string name(buf);
  if (name.empty()) return IoError("gethostname returned an empty name: pass --host NAME");
  return name;
}

std::string Quote(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
  if (t.size() > 80) t = t.substr(0, 80) + "...";
  return "'" + t + "'";
}

// Reads a whole small file. kNotFound when it does not exist.
Result<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoError("open " + path, errno == 0 ? ENOENT : errno);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string UtcNow() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// ---- StartDetachedDaemon's pieces ----

// Which step of the detached start failed (sent back through the pipe).
enum ChildStage : int { kStageSetsid = 1, kStageFork = 2, kStageStdio = 3, kStageExec = 4 };
struct ChildError {
  int stage;
  int err;
};

// Moves `fd` above 0-2 (so that dup2 onto 0-2 in the child cannot clobber
// it) and keeps it close-on-exec. Returns -1 (errno set) on failure.
int AboveStdio(int fd) {
  if (fd < 0 || fd > 2) return fd;
  const int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  const int saved = errno;
  close(fd);
  errno = saved;
  return moved;
}

void CloseIfOpen(int fd) {
  if (fd >= 0) close(fd);
}

// Child side: async-signal-safe calls only from here on.
void ReportAndExit(int fd, int stage, int err) {
  ChildError e{stage, err};
  ssize_t n;
  do {
    n = write(fd, &e, sizeof(e));
  } while (n < 0 && errno == EINTR);
  _exit(127);
}

}  // namespace

// ---- process stamps ----

Result<uint64_t> ProcessStartTime(int pid) {
  if (pid <= 0) return NotFoundError("no process " + std::to_string(pid));
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  Result<std::string> stat = ReadSmallFile(path);
  if (!stat.ok()) return NotFoundError("no process " + std::to_string(pid) + " (" + stat.status().message() + ")");
  // "PID (COMM) STATE ..." — COMM may hold spaces and parentheses: fields
  // are counted from the last ')'. STATE is field 3, starttime field 22.
  const size_t paren = stat->rfind(')');
  if (paren == std::string::npos) return InternalError(path + ": unexpected format: " + Quote(*stat));
  std::istringstream fields(stat->substr(paren + 1));
  std::string state, field;
  fields >> state;
  for (int i = 4; i < 22 && fields >> field; ++i) {
  }
  uint64_t start_time = 0;
  if (state.empty() || !(fields >> start_time)) {
    return InternalError(path + ": unexpected format: " + Quote(*stat));
  }
  if (state == "Z" || state == "X" || state == "x") {
    return NotFoundError("process " + std::to_string(pid) + " has exited (a zombie, not yet reaped)");
  }
  return start_time;
}

std::string FormatLeaderStamp(const LeaderStamp& stamp) {
  return stamp.addr + " " + std::to_string(stamp.pid) + " " + std::to_string(stamp.start_time) +
         (stamp.machine.empty() ? "" : " " + stamp.machine) + "\n";
}

Result<LeaderStamp> ParseLeaderStamp(const std::string& text) {
  std::istringstream in(text);
  LeaderStamp s;
  std::string extra;
  if (!(in >> s.addr >> s.pid >> s.start_time) || s.pid <= 0 || ((in >> s.machine) && (in >> extra))) {
    return InvalidArgumentError(Quote(text) + " is not 'ADDR PID STARTTIME [MACHINE]'");
  }
  return s;
}

std::string WhyLeaderStampIsStale(const LeaderStamp& stamp) {
  Result<std::string> here = MachineHostName();
  if (!stamp.machine.empty() && here.ok() && *here != stamp.machine) return "";  // another machine's
  Result<uint64_t> start = ProcessStartTime(stamp.pid);
  if (start.ok() && *start == stamp.start_time) return "";
  return "it names " + stamp.addr + " of pid " + std::to_string(stamp.pid) + ", " +
         (start.ok() ? "now a different process (that leader exited and its pid was reused)"
                     : "which is not running (a leader that has exited)");
}

bool LeaderStampIsLive(const LeaderStamp& stamp) { return WhyLeaderStampIsStale(stamp).empty(); }

// ---- StartDetachedDaemon ----

Status StartDetachedDaemon(const std::string& daemon_path, const std::vector<std::string>& args,
                           const std::string& log_path) {
  if (daemon_path.empty()) return InvalidArgumentError("no program to start: the daemon path is empty");
  // Everything the children need is prepared here: after fork() in a
  // multi-threaded process only async-signal-safe calls are allowed.
  std::vector<std::string> argv_store;
  argv_store.push_back(daemon_path);
  argv_store.insert(argv_store.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_store) argv.push_back(a.data());
  argv.push_back(nullptr);

  int log_fd = AboveStdio(open(log_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644));
  if (log_fd < 0) return ErrnoError("cannot open the log " + log_path, errno);
  int null_fd = AboveStdio(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (null_fd < 0) {
    const int err = errno;
    close(log_fd);
    return ErrnoError("open /dev/null", err);
  }
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    const int err = errno;
    close(log_fd);
    close(null_fd);
    return ErrnoError("pipe", err);
  }
  const int err_read = AboveStdio(pipe_fds[0]);
  const int err_write = AboveStdio(pipe_fds[1]);
  if (err_read < 0 || err_write < 0) {
    const int err = errno;
    for (int fd : {log_fd, null_fd, err_read, err_write}) CloseIfOpen(fd);
    return ErrnoError("pipe", err);
  }
  struct rlimit nofile {};
  int max_fd = 65536;
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY &&
      nofile.rlim_cur < static_cast<rlim_t>(max_fd)) {
    max_fd = static_cast<int>(nofile.rlim_cur);
  }
  sigset_t empty_mask;
  sigemptyset(&empty_mask);
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);

  const pid_t child = fork();
  if (child < 0) {
    const int err = errno;
    for (int fd : {log_fd, null_fd, err_read, err_write}) close(fd);
    return ErrnoError("fork", err);
  }
  if (child == 0) {
    // First child: a new session (no controlling terminal, out of the
    // caller's process group, so the caller's Ctrl-C or killpg misses it),
    // then fork again and exit so the program is nobody's child here.
    if (setsid() < 0) ReportAndExit(err_write, kStageSetsid, errno);
    const pid_t grandchild = fork();
    if (grandchild < 0) ReportAndExit(err_write, kStageFork, errno);
    if (grandchild > 0) _exit(0);
    // Grandchild: the program's process.
    sigprocmask(SIG_SETMASK, &empty_mask, nullptr);
    for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &default_action, nullptr);  // SIGKILL etc. fail: fine
    if (dup2(null_fd, 0) < 0 || dup2(log_fd, 1) < 0 || dup2(log_fd, 2) < 0) {
      ReportAndExit(err_write, kStageStdio, errno);
    }
    // Nothing but 0-2 crosses exec: a relaunched daemon must not hold this
    // daemon's lock file or sockets. The error pipe is already close-on-exec.
    bool marked = false;
#if defined(SYS_close_range)
    marked = syscall(SYS_close_range, 3U, ~0U, 4U /* CLOSE_RANGE_CLOEXEC */) == 0;
#endif
    if (!marked) {
      for (int fd = 3; fd < max_fd; ++fd) fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    execv(daemon_path.c_str(), argv.data());
    ReportAndExit(err_write, kStageExec, errno);
  }

  close(err_write);
  close(log_fd);
  close(null_fd);
  int wstatus = 0;
  while (waitpid(child, &wstatus, 0) < 0 && errno == EINTR) {
  }
  // ECHILD is fine: a SIGCHLD handler elsewhere may have reaped the first
  // child. The pipe below tells what happened either way.
  ChildError e{0, 0};
  ssize_t n;
  do {
    n = read(err_read, &e, sizeof(e));
  } while (n < 0 && errno == EINTR);
  const int read_err = errno;
  close(err_read);
  if (n == 0) return Status::Ok();  // every copy of the write end closed: exec succeeded
  if (n != static_cast<ssize_t>(sizeof(e))) {
    return InternalError("starting " + daemon_path + ": lost track of the detached process (" +
                         (n < 0 ? ErrnoError("read", read_err).message() : std::string("short read")) + ")");
  }
  switch (e.stage) {
    case kStageSetsid: return ErrnoError("starting " + daemon_path + ": setsid", e.err);
    case kStageFork: return ErrnoError("starting " + daemon_path + ": fork", e.err);
    case kStageStdio: return ErrnoError("starting " + daemon_path + ": redirecting output to " + log_path, e.err);
    default: return ErrnoError("cannot execute " + daemon_path, e.err);
  }
}

// ---- LocalScheduler ----

LocalScheduler::LocalScheduler(LocalSchedulerOptions options) : options_(std::move(options)) {}

SchedulerCapabilities LocalScheduler::capabilities() const {
  SchedulerCapabilities caps;
  // A local machine has no queue: the recovery policy must not choose a
  // requeue here (a lost node or a preemption would relaunch in a loop).
  // Requeue() still works as the detached relaunch `runctl resume` uses.
  caps.requeue = false;
  caps.exclude_hosts = false;
  caps.drain = false;
  return caps;
}

Result<Allocation> LocalScheduler::Discover() {
  const LocalSchedulerOptions& o = options_;
  if (o.run_dir.empty()) {
    return InvalidArgumentError("--run-dir is required: the local scheduler keeps the leader's address "
                                "(cluster.addr) and the relaunch log there");
  }
  if (o.nodes < 1) return InvalidArgumentError("--nodes must be at least 1, got " + std::to_string(o.nodes));
  if (o.node_id < 0 || o.node_id >= o.nodes) {
    return InvalidArgumentError("--node-id " + std::to_string(o.node_id) + " must be in 0.." +
                                std::to_string(o.nodes - 1) + " for --nodes " + std::to_string(o.nodes) +
                                " (node 0 leads)");
  }
  std::string leader_host;
  if (!o.leader.empty()) {
    HF_ASSIGN_OR_RETURN(leader_host, HostOfHostPort("--leader", o.leader));
  }
  if (HasSpace(o.host)) return InvalidArgumentError("--host " + Quote(o.host) + " must not contain spaces");
  if (HasSpace(o.addr)) return InvalidArgumentError("--addr " + Quote(o.addr) + " must not contain spaces");

  std::string machine;
  HF_ASSIGN_OR_RETURN(machine, MachineHostName());
  Allocation alloc;
  alloc.scheduler = SchedulerKind::kLocal;
  alloc.this_node = o.node_id;
  alloc.nodes.resize(static_cast<size_t>(o.nodes));
  for (int k = 0; k < o.nodes; ++k) {
    alloc.nodes[static_cast<size_t>(k)].host = o.nodes == 1 ? machine : machine + "-n" + std::to_string(k);
  }
  if (!o.host.empty()) {
    for (int k = 0; k < o.nodes; ++k) {
      if (k != o.node_id && alloc.nodes[static_cast<size_t>(k)].host == o.host) {
        return InvalidArgumentError("--host " + o.host + " is also the name of node " + std::to_string(k) +
                                    " (the local scheduler names the nodes it is not told about "
                                    "<hostname>-n<k>): choose another --host");
      }
    }
    alloc.nodes[static_cast<size_t>(o.node_id)].host = o.host;
  }

  const bool all_local = o.nodes == 1 || (o.host.empty() && (leader_host.empty() || IsLoopback(leader_host)));
  std::string self_addr = o.addr;
  if (self_addr.empty()) {
    if (!all_local) {
      return InvalidArgumentError(
          "node " + std::to_string(o.node_id) + " of " + std::to_string(o.nodes) +
          ": --addr is required when the nodes are on different machines (--host or a non-loopback --leader "
          "was given): pass the address the other nodes reach this one on, e.g. --addr 10.0.0.5");
    }
    self_addr = "127.0.0.1";
  }
  for (int k = 0; k < o.nodes; ++k) {
    NodeInfo& n = alloc.nodes[static_cast<size_t>(k)];
    if (k == o.node_id) {
      n.addr = self_addr;
    } else if (all_local) {
      n.addr = "127.0.0.1";
    } else if (k == 0) {
      n.addr = leader_host;  // "" when not given: learnt from cluster.addr
    }
  }
  return alloc;
}

Status LocalScheduler::PublishLeader(const std::string& addr) {
  if (addr.empty() || HasSpace(addr)) {
    return InvalidArgumentError("leader address " + Quote(addr) + " must be a non-empty host:port without spaces");
  }
  LeaderStamp stamp;
  stamp.addr = addr;
  stamp.pid = static_cast<int>(getpid());
  HF_ASSIGN_OR_RETURN(stamp.start_time, ProcessStartTime(stamp.pid));
  HF_ASSIGN_OR_RETURN(stamp.machine, MachineHostName());
  const std::string text = FormatLeaderStamp(stamp);
  const std::string path = leader_file();
  return WriteFileAtomically(path, text).WithContext("cannot publish the leader's address");
}

void LocalScheduler::WithdrawLeader() {
  const std::string path = leader_file();
  Result<std::string> text = ReadSmallFile(path);
  if (!text.ok()) return;
  Result<LeaderStamp> stamp = ParseLeaderStamp(*text);
  if (!stamp.ok() || stamp->pid != static_cast<int>(getpid())) return;
  Result<uint64_t> mine = ProcessStartTime(stamp->pid);
  // Another leader may rename its own file in between the read and the
  // unlink; that leader's followers would then wait until it publishes again
  // or time out. Leaders of one run directory do not overlap (the lineage
  // lock), so this window is not worth a lock file.
  if (mine.ok() && *mine == stamp->start_time) unlink(path.c_str());
}

Result<std::string> LocalScheduler::FindLeader(std::chrono::milliseconds timeout) {
  if (!options_.leader.empty()) return options_.leader;
  const std::string path = leader_file();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string seen;
  for (;;) {
    Result<std::string> text = ReadSmallFile(path);
    if (!text.ok()) {
      seen = text.status().code() == StatusCode::kNotFound ? "the file does not exist"
                                                            : "it cannot be read: " + text.status().message();
    } else {
      Result<LeaderStamp> stamp = ParseLeaderStamp(*text);
      if (!stamp.ok()) {
        seen = "it holds " + Quote(*text) + ", not 'ADDR PID STARTTIME' and the leader's machine";
      } else {
        seen = WhyLeaderStampIsStale(*stamp);
        if (seen.empty()) return stamp->addr;
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(kLeaderPollInterval, deadline - now));
  }
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%.1f", static_cast<double>(timeout.count()) / 1000.0);
  return TimeoutError("no live leader published its address in " + path + " within " + secs + " s (" + seen +
                      "): start the node-0 holdfastd with the same --run-dir (shared by every node), or give "
                      "--leader host:port");
}

Status LocalScheduler::Requeue(const std::string& run_id, const std::vector<std::string>& exclude_hosts,
                               const std::string& reason) {
  if (!exclude_hosts.empty()) {
    std::string hosts;
    for (const std::string& h : exclude_hosts) hosts += (hosts.empty() ? "" : ", ") + h;
    return FailedPreconditionError("the local scheduler cannot exclude hosts (asked to exclude " + hosts +
                                   "): a local relaunch runs on this machine again; run under Slurm to keep "
                                   "hosts out of the next allocation");
  }
  if (run_id.empty()) return InvalidArgumentError("relaunch: no run id to resume");
  if (options_.run_dir.empty()) return InvalidArgumentError("relaunch: --run-dir is required");
  const std::string log_dir = options_.run_dir + "/logs";
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  if (ec) return IoError("cannot relaunch holdfastd for run " + run_id + ": create " + log_dir + ": " + ec.message());
  const std::string log = relaunch_log();
  {
    std::ofstream out(log, std::ios::app);
    out << "=== " << UtcNow() << " relaunching " << options_.daemon_path << " to resume run " << run_id
        << (reason.empty() ? std::string() : ": " + reason) << "\n";
  }
  std::vector<std::string> args = {"--run-dir", options_.run_dir, "--resume", run_id, "--wait-for-lock"};
  if (options_.nodes > 1) {
    // This node again, under the same names. No --leader: the relaunched
    // leader listens on a new port, and followers find it through the
    // stamped cluster.addr (the old leader's line reads as dead).
    args.insert(args.end(),
                {"--nodes", std::to_string(options_.nodes), "--node-id", std::to_string(options_.node_id)});
    if (!options_.host.empty()) args.insert(args.end(), {"--host", options_.host});
    if (!options_.addr.empty()) args.insert(args.end(), {"--addr", options_.addr});
  }
  return StartDetachedDaemon(options_.daemon_path, args, log)
      .WithContext("cannot relaunch holdfastd for run " + run_id);
}

Status LocalScheduler::Drain(const std::string& host, const std::string& reason) {
  return FailedPreconditionError("the local scheduler cannot drain hosts; " + host +
                                 " stays in use: take it out of service by hand (or run under Slurm, where "
                                 "holdfastd drains through slurmctld)" +
                                 (reason.empty() ? std::string() : " — reason: " + reason));
}

}  // namespace holdfast
