#include "daemon/daemon_signals.h"

#include <signal.h>
#include <string.h>

namespace holdfast {
namespace {

constexpr int kCaught[] = {SIGCHLD, SIGTERM, SIGINT, SIGUSR1, SIGHUP, SIGQUIT, SIGUSR2,
                           SIGALRM, SIGVTALRM, SIGPROF, SIGXCPU, SIGXFSZ, SIGPWR};

}  // namespace

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

DaemonSignalMeaning MeaningOf(int sig) {
  const std::string name = SignalName(sig);
  switch (sig) {
    case SIGTERM:
    case SIGINT:
      return {IncidentKind::kStopRequest, "stopped by " + name + " to holdfastd"};
    case SIGUSR1:
      return {IncidentKind::kPreemption, "the scheduler's warning signal (" + name + "): checkpoint and stop"};
    case SIGHUP:
      return {IncidentKind::kDaemonSignal,
              "holdfastd received SIGHUP (its terminal or session closed): stopped the run; start holdfastd with "
              "nohup or setsid, or under Slurm"};
    default:
      return {IncidentKind::kDaemonSignal, "holdfastd received " + name + ": stopped the run"};
  }
}

void DaemonSignals::Start(std::function<void(int)> on_signal) {
  on_signal_ = std::move(on_signal);
  ::signal(SIGPIPE, SIG_IGN);
  for (int sig : kCaught) {
    boost::system::error_code ec;
    set_.add(sig, ec);
  }
  Wait();
}

void DaemonSignals::Stop() {
  stopped_ = true;
  boost::system::error_code ec;
  set_.cancel(ec);
}

void DaemonSignals::Wait() {
  set_.async_wait([this](const boost::system::error_code& e, int sig) {
    if (e || stopped_) return;
    on_signal_(sig);
    if (!stopped_) Wait();
  });
}

}  // namespace holdfast
