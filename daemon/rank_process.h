// RankProcess: one supervised rank as an OS process.
//
// Started with fork+exec so that the child can ask the kernel to kill it when
// the supervisor dies (PR_SET_PDEATHSIG): a rank never outlives the daemon
// that watches it, so a restarted daemon never meets a stale rank. stdout and
// stderr go to the rank's log file, whose tail is evidence in triage.
//
// Thread-safety: none; owned by the daemon's event-loop thread.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/progress_record.h"
#include "common/status.h"

namespace holdfast {

struct RankSpawn {
  int rank = 0;
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  // added to (and overriding) the daemon's environment
  std::string workdir;                     // "" = the daemon's
  std::string log_path;
  std::string progress_path;
};

class RankProcess {
 public:
  static Result<std::unique_ptr<RankProcess>> Start(const RankSpawn& spawn);
  ~RankProcess() = default;

  int rank() const { return rank_; }
  pid_t pid() const { return pid_; }
  bool alive() const { return !exited_; }
  int wait_status() const { return wstatus_; }
  const std::string& log_path() const { return log_path_; }

  // Marks the process reaped with this waitpid status.
  void SetExited(int wstatus) {
    exited_ = true;
    wstatus_ = wstatus;
  }
  void Signal(int sig) const;
  // State letter from /proc/<pid>/stat ('?' when gone).
  char ProcState() const;
  ProgressSnapshot Progress() const;
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

}  // namespace holdfast
