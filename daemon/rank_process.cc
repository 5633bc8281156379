#include "daemon/rank_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>

#if __has_include(<linux/close_range.h>)
#include <linux/close_range.h>
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

extern char** environ;

namespace holdfast {
namespace rank_process_internal {
namespace {

void MarkCloseOnExec(int fd) {
  const int flags = fcntl(fd, F_GETFD);
  if (flags >= 0 && (flags & FD_CLOEXEC) == 0) (void)fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

// Parses a /proc/self/fd entry name; -1 for "." and "..".
int ParseFd(const char* name) {
  if (*name == '\0') return -1;
  int fd = 0;
  for (const char* p = name; *p != '\0'; ++p) {
    if (*p < '0' || *p > '9' || fd > 100000000) return -1;
    fd = fd * 10 + (*p - '0');
  }
  return fd;
}

// Returns false when /proc/self/fd cannot be read to the end.
bool MarkListedFds(int lowest_fd) {
  const int dir = ::open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return false;
  alignas(8) char buf[4096];
  bool complete = false;
  for (;;) {
    const long n = syscall(SYS_getdents64, dir, buf, sizeof(buf));
    if (n == 0) {
      complete = true;
      break;
    }
    if (n < 0) break;
    for (long off = 0; off < n;) {
      unsigned short reclen = 0;
      std::memcpy(&reclen, buf + off + offsetof(struct dirent64, d_reclen), sizeof(reclen));
      const int fd = ParseFd(buf + off + offsetof(struct dirent64, d_name));
      // Marking changes no fd-table entry, so the listing stays valid.
      if (fd >= lowest_fd && fd != dir) MarkCloseOnExec(fd);
      if (reclen == 0) break;
      off += reclen;
    }
  }
  ::close(dir);
  return complete;
}

}  // namespace

void MarkCloseOnExecFrom(int lowest_fd, int fd_limit, FdSweep how) {
#ifdef SYS_close_range
  if (how == FdSweep::kAuto &&
      syscall(SYS_close_range, static_cast<unsigned>(lowest_fd), ~0U, CLOSE_RANGE_CLOEXEC) == 0) {
    return;
  }
#endif
  // ENOSYS (Linux < 5.9) or EINVAL (< 5.11, no CLOEXEC flag): walk the fds.
  if (how != FdSweep::kEveryFd && MarkListedFds(lowest_fd)) return;
  for (int fd = lowest_fd; fd < fd_limit; ++fd) MarkCloseOnExec(fd);
}

}  // namespace rank_process_internal

namespace {

// What the child writes to the exec-error pipe before it exits. Nothing
// arrives (EOF: the pipe closed on exec) when the command started.
enum ChildStage : int32_t { kStageChdir = 1, kStageExec = 2 };
struct ChildError {
  int32_t stage;
  int32_t err;
};

[[noreturn]] void ChildFail(int pipe_fd, ChildStage stage, int err) {
  const ChildError e{stage, err};
  ssize_t w;
  do {
    w = ::write(pipe_fd, &e, sizeof(e));  // 8 bytes < PIPE_BUF: all or nothing
  } while (w < 0 && errno == EINTR);
  _exit(127);  // as a shell would, should anyone only see the status
}

bool IsRelative(const std::string& path) { return path.empty() || path[0] != '/'; }

// Why execve failed, in the terms of what to change.
std::string ExecFailureMessage(const RankSpawn& spawn, int err) {
  const std::string& cmd = spawn.argv[0];
  const bool in_workdir = IsRelative(cmd) && !spawn.workdir.empty();
  const std::string path = in_workdir ? spawn.workdir + "/" + cmd : cmd;
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  std::string hint;
  if (err == ENOENT && exists) {
    hint = " (the file exists: its #! interpreter or ELF loader is missing)";
  } else if (err == ENOENT && cmd.find('/') == std::string::npos) {
    hint = " (the command is not looked up in PATH: give its path)";
  } else if (err == EACCES && exists && S_ISDIR(st.st_mode)) {
    hint = " (it is a directory)";
  } else if (err == EACCES) {
    hint = " (not executable: chmod +x it, or move it off a noexec mount)";
  } else if (err == ENOEXEC) {
    hint = " (not a program and no #! line)";
  }
  return "holdfastd cannot execute '" + cmd + "'" + (in_workdir ? " in workdir '" + spawn.workdir + "'" : "") + ": " +
         std::strerror(err) + hint + " — fix [job] command in job.toml";
}

std::string ChdirFailureMessage(const RankSpawn& spawn, int err) {
  return "holdfastd cannot enter the job's workdir '" + spawn.workdir + "': " + std::strerror(err) +
         " — fix [job] workdir in job.toml";
}

void AppendLine(int fd, const std::string& line) {
  const std::string text = line + "\n";
  (void)!::write(fd, text.data(), text.size());
}

}  // namespace

Result<std::unique_ptr<RankProcess>> RankProcess::Start(const RankSpawn& spawn) {
  if (spawn.argv.empty() || spawn.argv[0].empty()) {
    return InvalidArgumentError("rank command is empty — fix [job] command in job.toml");
  }
  if (!spawn.progress_path.empty()) HF_RETURN_IF_ERROR(CreateProgressFile(spawn.progress_path, spawn.rank));
  const int log_fd = ::open(spawn.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    const Status s = ErrnoError("holdfastd cannot open the rank log '" + spawn.log_path + "'", errno);
    return Status(s.code(), s.message() + " — check that the run directory is writable and has space");
  }

  // Everything the child needs is built before fork: after it, only
  // async-signal-safe calls.
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr) env[std::string(*e, static_cast<size_t>(eq - *e))] = eq + 1;
  }
  for (const auto& [k, v] : spawn.env) env[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<char*> argv;
  for (const auto& a : spawn.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  struct rlimit nofile {};
  int fd_limit = 65536;
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY) {
    fd_limit = static_cast<int>(std::min<rlim_t>(nofile.rlim_cur, 1 << 20));
  }

  // The child reports a failure before exec through this pipe; a successful
  // exec closes the child's end (O_CLOEXEC), so the parent reads EOF.
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    const int err = errno;
    ::close(log_fd);
    return ErrnoError("create the exec-error pipe for rank " + std::to_string(spawn.rank), err);
  }

  pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    ::close(log_fd);
    ::close(err_pipe[0]);
    ::close(err_pipe[1]);
    return ErrnoError("fork rank " + std::to_string(spawn.rank), err);
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the daemon died before we got here
    // Signals the daemon blocks or handles must be default in the rank, but
    // SIGUSR1: a scheduler's warning (Slurm's --signal) reaches every process
    // of the job step, and it is the daemon's to act on (it may use the lead
    // time, then stops the ranks with SIGTERM: docs/job-contract.md). A rank
    // that keeps it ignored trains on; SIGUSR1's default would kill it.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig : {SIGTERM, SIGINT, SIGCHLD, SIGUSR2, SIGPIPE, SIGHUP}) signal(sig, SIG_DFL);
    signal(SIGUSR1, SIG_IGN);
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    // The daemon's other fds (listening sockets from Asio, which does not
    // ask for close-on-exec; the run lock; sqlite) must not live on in the
    // rank: a rank holding the control socket keeps its port bound after the
    // daemon dies.
    rank_process_internal::MarkCloseOnExecFrom(3, fd_limit, rank_process_internal::FdSweep::kAuto);
    if (spawn.inherit_fd >= 0) (void)fcntl(spawn.inherit_fd, F_SETFD, 0);  // kept across exec
    if (!spawn.workdir.empty() && chdir(spawn.workdir.c_str()) != 0) ChildFail(err_pipe[1], kStageChdir, errno);
    execve(argv[0], argv.data(), envp.data());
    ChildFail(err_pipe[1], kStageExec, errno);
  }
  ::close(err_pipe[1]);
  ChildError child_error{};
  size_t got = 0;
  while (got < sizeof(child_error)) {
    const ssize_t n = ::read(err_pipe[0], reinterpret_cast<char*>(&child_error) + got, sizeof(child_error) - got);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;  // EOF: exec'd
    }
  }
  ::close(err_pipe[0]);
  if (got == sizeof(child_error)) {
    // The child is exiting (or has): reap it here so that it neither lingers
    // as a zombie nor reaches the supervisor's waitpid as a "crashed" rank.
    int wstatus = 0;
    while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
    const std::string msg = child_error.stage == kStageChdir ? ChdirFailureMessage(spawn, child_error.err)
                                                             : ExecFailureMessage(spawn, child_error.err);
    AppendLine(log_fd, msg);  // the rank log tells the same story
    ::close(log_fd);
    return InvalidArgumentError(msg);
  }
  ::close(log_fd);
  auto proc = std::unique_ptr<RankProcess>(new RankProcess());
  proc->rank_ = spawn.rank;
  proc->pid_ = pid;
  proc->log_path_ = spawn.log_path;
  if (!spawn.progress_path.empty()) {
    auto reader = ProgressReader::Open(spawn.progress_path);
    if (reader.ok()) proc->progress_ = std::move(reader).value();
  }
  return proc;
}

Status RankProcess::AssignRank(int rank, const std::string& log_path, const std::string& progress_path) {
  HF_RETURN_IF_ERROR(CreateProgressFile(progress_path, rank));
  rank_ = rank;
  log_path_ = log_path;
  auto reader = ProgressReader::Open(progress_path);
  if (reader.ok()) progress_ = std::move(reader).value();
  return Status::Ok();
}

void RankProcess::Signal(int sig) const {
  if (!exited_ && pid_ > 0) ::kill(pid_, sig);
}

ProcState RankProcess::State() const { return exited_ ? ProcState::kUnknown : ReadProcState(pid_); }

RankProgress RankProcess::Progress() const {
  if (progress_ == nullptr) return RankProgress{};
  return DecodeProgress(progress_->Read());
}

std::vector<std::string> RankProcess::LogTail(size_t lines) const {
  std::ifstream in(log_path_, std::ios::binary);
  if (!in) return {};
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff start = std::max<std::streamoff>(0, size - 16384);
  in.seekg(start);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> all;
  std::istringstream ss(text);
  std::string line;
  while (std::getline(ss, line)) all.push_back(line);
  if (start > 0 && !all.empty()) all.erase(all.begin());  // a partial first line
  if (all.size() > lines) all.erase(all.begin(), all.end() - static_cast<std::ptrdiff_t>(lines));
  return all;
}

}  // namespace holdfast
