// DaemonSignals: every signal that would otherwise end holdfastd silently,
// caught on the event loop (asio::signal_set) and given a meaning, so that
// the run's record stays true however the daemon is told to go:
//
//   SIGTERM, SIGINT                     an operator's stop: ranks checkpoint and stop
//   SIGUSR1                             the scheduler's warning (sbatch --signal=B:USR1@N):
//                                       checkpoint now and stop (or requeue)
//   SIGHUP, SIGQUIT, SIGUSR2, SIGALRM,  fatal by default: treated as a stop with the
//   SIGVTALRM, SIGPROF, SIGXCPU,        signal named in lineage (a closed terminal
//   SIGXFSZ, SIGPWR                     must not kill a run without a word)
//   SIGPIPE                             ignored (a vanished peer is an I/O error)
//   SIGCHLD                             a rank exited: reap
//
// What cannot be caught (SIGKILL, or the daemon's own crash) is found at the
// next start: the run still marked running becomes a daemon_restart, and the
// dead daemon's socket and progress records are removed.
//
// Thread-safety: loop thread only.
#pragma once

#include <functional>
#include <string>

#include <boost/asio.hpp>

#include "daemon/recovery_policy.h"

namespace holdfast {

struct DaemonSignalMeaning {
  IncidentKind kind = IncidentKind::kStopRequest;  // kStopRequest, kPreemption or kDaemonSignal
  std::string why;                                 // "holdfastd received SIGHUP (...)"
};
DaemonSignalMeaning MeaningOf(int sig);
std::string SignalName(int sig);  // "SIGHUP"

class DaemonSignals {
 public:
  explicit DaemonSignals(boost::asio::io_context& io) : set_(io) {}
  // Catches the signals above (and ignores SIGPIPE); `on_signal` runs on the loop.
  void Start(std::function<void(int sig)> on_signal);
  void Stop();

 private:
  void Wait();
  boost::asio::signal_set set_;
  std::function<void(int)> on_signal_;
  bool stopped_ = false;
};

}  // namespace holdfast
