// The waits of runctl's live commands — `checkpoint --wait`, `stop --wait`,
// `resume --wait` — each a WaitUntil (cli/waiter.h) over the daemon's answers
// (cli/daemon_client.h) and, where the outcome is recorded, the run's row in
// lineage.db. The clock is injected and lineage is read through a callback,
// so each wait is unit-tested on a fake clock with a scripted daemon: no
// daemon process, no sleep (cli/live_waits_test.cc).
//
// Errors carry the message runctl prints as it is, and their code says how
// runctl exits:
//   kTimeout      the deadline passed, what is awaited still not there (5);
//   kUnavailable  the daemon stopped answering (4);
//   anything else the wait ended in a way that is a failure (1).
//
// Thread-safety: each wait runs on the calling thread and shares nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "cli/daemon_client.h"
#include "cli/waiter.h"
#include "common/status.h"
#include "lineage/lineage_db.h"

namespace holdfast {

// Runs between looks (runctl redraws its live line on a terminal).
using WaitTick = std::function<void()>;
// The run's row as lineage.db holds it now; kUnavailable while the file is
// busy (a writer mid-commit), kNotFound while the run is not recorded.
using ReadRunFn = std::function<Result<RunRecord>()>;

// How often the waits look: stopping and saving take seconds to minutes, so
// a few looks a second cost nothing.
inline constexpr std::chrono::milliseconds kLiveWaitPoll{250};
// After the daemon stops answering, how long lineage.db may still say
// "running" (the daemon's last write may land just after its socket closes)
// before `stop --wait` calls it a daemon that died without recording an end.
inline constexpr std::chrono::milliseconds kDaemonGoneGrace{2000};
// `resume --wait` believes lineage's "the run ended" only after this long:
// before, the row may still be the previous attempt's end.
inline constexpr std::chrono::seconds kResumeEndedGrace{5};

struct Waited {
  int64_t step = 0;                     // the committed step / the step trained to
  std::chrono::nanoseconds waited{0};  // on the clock, from the first look
};

// Until the daemon reports a committed checkpoint at or after `requested`
// (-1: any): the ranks save after the step they all agree on, so the first
// commit at or after the requested step is this checkpoint.
Result<Waited> WaitForCheckpointCommit(const DaemonClient& daemon, int64_t requested,
                                       std::chrono::milliseconds timeout, Clock* clock, const WaitTick& tick);

// What `stop --wait` saw.
struct StopSeen {
  // The run's row once lineage no longer records it running; unset when the
  // daemon exited and lineage holds no record of the run (how it ended is
  // not known here).
  std::optional<RunRecord> run;
};

struct StopWaitSpec {
  std::string run_id;   // "": not known, only the daemon's exit can be seen
  std::string run_dir;  // for the messages
  ReadRunFn read_run;   // the row of run_id (unused when run_id is "")
  std::chrono::milliseconds timeout{0};
  std::chrono::milliseconds ping_timeout{5000};  // for each ping (at most what is left)
};

// Until lineage records the run ended, or the daemon has exited. A daemon
// that stopped answering for kDaemonGoneGrace while lineage still says
// "running" is a failure naming the daemon's log.
Result<StopSeen> WaitForStop(const DaemonClient& daemon, const StopWaitSpec& spec, Clock* clock,
                             const WaitTick& tick);

// Until the resumed ranks have restored and stepped: every rank running and
// the slowest one past the step it was first seen at. `read_run` tells a run
// that ended before it trained (a failure naming `log`).
Result<Waited> WaitForTraining(const DaemonClient& daemon, const ReadRunFn& read_run, const std::string& log,
                               std::chrono::milliseconds timeout, Clock* clock, const WaitTick& tick);

}  // namespace holdfast
