// RankProcess: one supervised rank as an OS process.
//
// Started with fork+exec so that the child can ask the kernel to kill it when
// the supervisor dies (PR_SET_PDEATHSIG): a rank never outlives the daemon
// that watches it, so a restarted daemon never meets a stale rank. stdout and
// stderr go to the rank's log file, whose tail is evidence in triage.
//
// Start returns only once the command has been exec'd: a command that cannot
// be executed, a workdir that cannot be entered or a log that cannot be opened
// is an error Status naming what to fix (the failed child already reaped),
// never a rank that "crashes" with exit 127 and spends the restart budget.
// The child inherits only fds 0, 1 and 2: every other descriptor of the daemon
// (its listening sockets, the run lock, sqlite) is closed on exec, whether or
// not its owner asked for close-on-exec.
//
// Thread-safety: none; owned by the daemon's event-loop thread. Start forks:
// call it from a single-threaded daemon (the child between fork and exec
// makes only async-signal-safe calls, but other threads' fds may be inherited
// until exec).
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/proc_state.h"
#include "common/progress_record.h"
#include "common/rank_progress.h"
#include "common/status.h"

namespace holdfast {

struct RankSpawn {
  int rank = 0;
  std::vector<std::string> argv;           // argv[0] is a path (relative to workdir), not searched in PATH
  std::map<std::string, std::string> env;  // added to (and overriding) the daemon's environment
  std::string workdir;                     // "" = the daemon's
  std::string log_path;
  std::string progress_path;  // "" = none yet (a warm spare: AssignRank creates it)
  // An fd of the daemon's that the child keeps across exec (a warm spare's
  // end of its socketpair: daemon/spare_pool.h); -1 = none.
  int inherit_fd = -1;
};

class RankProcess {
 public:
  // Forks and execs the rank, waiting only until the exec has happened.
  // Errors (the rank did not start; no child is left behind):
  //   kInvalidArgument  argv is empty, argv[0] cannot be executed, or the
  //                     workdir cannot be entered: a job.toml fault, e.g.
  //                     "holdfastd cannot execute '/x/y': No such file or
  //                     directory — fix [job] command in job.toml"; the same
  //                     line is appended to the rank log;
  //   errno-derived     the rank log cannot be opened (message names the path);
  //   whatever CreateProgressFile returns.
  static Result<std::unique_ptr<RankProcess>> Start(const RankSpawn& spawn);
  ~RankProcess() = default;

  int rank() const { return rank_; }
  pid_t pid() const { return pid_; }
  bool alive() const { return !exited_; }
  int wait_status() const { return wstatus_; }
  const std::string& log_path() const { return log_path_; }

  // A warm spare becomes rank `rank` (daemon/spare_pool.h): its progress
  // record is created (as Start does) and its log is the rank's from now on.
  Status AssignRank(int rank, const std::string& log_path, const std::string& progress_path);
  // Marks the process reaped with this waitpid status.
  void SetExited(int wstatus) {
    exited_ = true;
    wstatus_ = wstatus;
  }
  void Signal(int sig) const;
  // State letter from /proc/<pid>/stat ('?' when gone).
  // /proc state now (kUnknown once exited).
  ProcState State() const;
  RankProgress Progress() const;
  // Last `lines` lines of the log file.
  std::vector<std::string> LogTail(size_t lines) const;

 private:
  int rank_ = 0;
  pid_t pid_ = -1;
  bool exited_ = false;
  int wstatus_ = 0;
  std::string log_path_;
  std::unique_ptr<ProgressReader> progress_;
};

// (What an exit means — clean, bad input, not executed, a crash — is decided
// in one place: daemon/recovery_policy.h ClassifyExit.)

// Exposed for tests: the fd sweep the forked child runs before exec.
namespace rank_process_internal {

enum class FdSweep {
  kAuto,        // close_range(CLOSE_RANGE_CLOEXEC) (Linux >= 5.11), else the fallbacks below
  kProcSelfFd,  // mark each fd listed in /proc/self/fd, else kEveryFd
  kEveryFd,     // mark every fd number below fd_limit
};

// Marks every open fd >= lowest_fd close-on-exec (they close at exec, so the
// exec-error pipe, itself close-on-exec, stays usable until then).
// Async-signal-safe: raw syscalls and a stack buffer, no allocation.
// fd_limit (RLIMIT_NOFILE, read before fork) bounds the last-resort sweep.
void MarkCloseOnExecFrom(int lowest_fd, int fd_limit, FdSweep how);

}  // namespace rank_process_internal
}  // namespace holdfast
