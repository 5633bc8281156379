#include "daemon/spare_pool.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <spdlog/spdlog.h>

#include "common/launch_contract.h"
#include "common/run_files.h"
#include "daemon/triage.h"

namespace holdfast {

SparePool::~SparePool() { KillAll(); }

void SparePool::TopUp(int count, int attempt, int node) {
  while (size() > count) {  // fewer local ranks than before (a reshaped run)
    spdlog::info("warm spare (pid {}) released: this node runs {} rank(s) now", spares_.back().proc->pid(), count);
    Drop(spares_.size() - 1, 0);
  }
  while (!stopped_ && size() < count) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      spdlog::warn("warm spares: socketpair: {}; restarts start cold until the next try", std::strerror(errno));
      return;
    }
    RankSpawn s;
    s.rank = -1;
    s.argv = job_->command;
    s.workdir = job_->workdir;
    s.env = job_->env;
    s.env[kEnvSpareFd] = std::to_string(sv[1]);
    s.log_path = SpareLogPath(run_dir_, attempt, node, next_id_++);
    s.inherit_fd = sv[1];
    Result<std::unique_ptr<RankProcess>> proc = RankProcess::Start(s);
    ::close(sv[1]);
    if (!proc.ok()) {
      ::close(sv[0]);
      stopped_ = true;  // the same command would fail the same way
      spdlog::warn("warm spares OFF for this daemon: {}; restarts start cold", proc.status().ToString());
      return;
    }
    spdlog::info("warm spare started (pid {}, log {})", (*proc)->pid(), s.log_path);
    spares_.push_back(Spare{std::move(proc).value(), sv[0], s.log_path});
  }
}

std::unique_ptr<RankProcess> SparePool::Assign(int rank, const SpareAssignment& a, const std::string& progress_path,
                                              const std::string& header) {
  Result<std::string> text = EncodeSpareAssignment(a);
  if (!text.ok()) {
    spdlog::warn("rank {} starts cold: {}", rank, text.status().ToString());
    return nullptr;
  }
  while (!spares_.empty()) {
    Spare& s = spares_.front();
    if (Status st = s.proc->AssignRank(rank, a.log_path, progress_path); !st.ok()) {
      spdlog::warn("rank {} starts cold: {}", rank, st.ToString());
      return nullptr;  // a cold start needs the same record: it reports the error
    }
    {
      std::ofstream log(a.log_path, std::ios::app);
      log << header << "; from warm spare pid " << s.proc->pid() << " (its start-up: " << s.log_path << ")\n";
    }
    // One write into an empty socket buffer: all of it or an error (the
    // spare is gone: EPIPE/ECONNRESET). Never blocks.
    const ssize_t n = ::send(s.fd, text->data(), text->size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n == static_cast<ssize_t>(text->size())) {
      std::unique_ptr<RankProcess> proc = std::move(s.proc);
      spdlog::info("rank {}: warm spare pid {} assigned (no cold start)", rank, proc->pid());
      ::close(s.fd);
      spares_.erase(spares_.begin());
      failures_ = 0;
      return proc;
    }
    spdlog::warn("warm spare (pid {}) could not take rank {} ({}): killed; trying the next", s.proc->pid(), rank,
                 n < 0 ? std::strerror(errno) : "a short write");
    Drop(0, SIGKILL);
  }
  return nullptr;
}

bool SparePool::OnExit(pid_t pid, int wstatus) {
  if (auto d = std::find(dropped_.begin(), dropped_.end(), pid); d != dropped_.end()) {
    dropped_.erase(d);
    return true;
  }
  for (size_t i = 0; i < spares_.size(); ++i) {
    if (spares_[i].proc->pid() != pid) continue;
    spares_[i].proc->SetExited(wstatus);
    ++failures_;
    if (failures_ >= kMaxSpareFailures) stopped_ = true;
    spdlog::warn("warm spare (pid {}) {} while waiting (see {}); {}", pid, DescribeWaitStatus(wstatus),
                 spares_[i].log_path,
                 stopped_ ? "warm spares OFF for this daemon after " + std::to_string(failures_) +
                                " in a row: restarts start cold"
                          : "another is started after the generation's next step");
    ::close(spares_[i].fd);
    spares_.erase(spares_.begin() + static_cast<std::ptrdiff_t>(i));
    return true;
  }
  return false;
}

void SparePool::Drop(size_t i, int sig) {
  Spare& s = spares_[i];
  if (sig != 0) s.proc->Signal(sig);
  ::close(s.fd);  // EOF: a waiting spare exits 0 ("released")
  dropped_.push_back(s.proc->pid());
  spares_.erase(spares_.begin() + static_cast<std::ptrdiff_t>(i));
}

void SparePool::KillAll() {
  while (!spares_.empty()) Drop(spares_.size() - 1, SIGKILL);
  for (pid_t pid : dropped_) ::kill(pid, SIGKILL);
  // Reaped here, but never waited on for long: one stuck in uninterruptible
  // I/O dies when the daemon exits (PR_SET_PDEATHSIG) and is reaped by init.
  for (int tries = 0; !dropped_.empty() && tries < 200; ++tries) {
    for (size_t i = 0; i < dropped_.size();) {
      const pid_t r = ::waitpid(dropped_[i], nullptr, WNOHANG);
      if (r == dropped_[i] || (r < 0 && errno == ECHILD)) {
        dropped_.erase(dropped_.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    if (!dropped_.empty()) ::usleep(10000);
  }
  if (!dropped_.empty()) spdlog::warn("{} warm spare(s) not reaped after SIGKILL: left to PR_SET_PDEATHSIG", dropped_.size());
  dropped_.clear();
}

std::vector<pid_t> SparePool::pids() const {
  std::vector<pid_t> out;
  for (const Spare& s : spares_) out.push_back(s.proc->pid());
  return out;
}

}  // namespace holdfast
