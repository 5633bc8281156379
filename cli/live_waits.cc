#include "cli/live_waits.h"

#include <algorithm>
#include <climits>

namespace holdfast {

namespace {

std::string WholeSeconds(std::chrono::milliseconds d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(d).count());
}

std::chrono::nanoseconds Since(Clock* clock, int64_t t0_ns) {
  return std::chrono::nanoseconds(clock->MonotonicNs() - t0_ns);
}

// WaitUntil's spec for runctl's waits; `what` names it in WaitUntil's own
// timeout error, which each wait replaces by its own advice.
WaitSpec LiveSpec(std::string what, std::chrono::milliseconds timeout) {
  WaitSpec spec;
  spec.what = std::move(what);
  spec.timeout = timeout;
  spec.poll = kLiveWaitPoll;
  return spec;
}

// The slowest rank's step when every rank of `st` runs; unset otherwise.
std::optional<int64_t> SlowestRunningStep(const RunStatus& st) {
  if (st.nodes.empty()) return std::nullopt;
  bool running = true;
  int64_t slowest = INT64_MAX;
  for (const NodeStatus& n : st.nodes) {
    for (const RankStatus& r : n.ranks) {
      running = running && r.state == "running";
      slowest = std::min(slowest, r.step);
    }
  }
  if (!running || slowest == INT64_MAX) return std::nullopt;
  return slowest;
}

}  // namespace

Result<Waited> WaitForCheckpointCommit(const DaemonClient& daemon, int64_t requested,
                                       std::chrono::milliseconds timeout, Clock* clock, const WaitTick& tick) {
  const int64_t t0 = clock->MonotonicNs();
  int64_t committed = -1;
  const WaitLook look = [&](const WaitProgress&) -> Result<bool> {
    Reply<StatusAnswer> st = daemon.GetStatus();
    if (st.unreachable()) {
      return UnavailableError(
          "holdfastd stopped answering before the checkpoint committed: `runctl lineage` tells whether it did");
    }
    if (st.ok() && st->status.ok() && st->status->last_checkpoint_step &&
        *st->status->last_checkpoint_step >= requested) {
      committed = *st->status->last_checkpoint_step;
      return true;
    }
    if (tick) tick();
    return false;
  };
  const Status s = WaitUntil(look, LiveSpec("the checkpoint to commit", timeout), clock);
  if (s.code() == StatusCode::kTimeout) {
    return TimeoutError("no checkpoint committed within " + WholeSeconds(timeout) +
                        "s (a large state takes a while; a failed save is in `runctl lineage`): wait longer with "
                        "--timeout");
  }
  if (!s.ok()) return s;
  return Waited{committed, Since(clock, t0)};
}

Result<StopSeen> WaitForStop(const DaemonClient& daemon, const StopWaitSpec& spec, Clock* clock,
                             const WaitTick& tick) {
  const std::string which = spec.run_id.empty() ? std::string("its run") : "run " + spec.run_id;
  const std::string db_path = spec.run_dir + "/lineage.db";
  std::optional<StopSeen> seen;
  bool gone = false;       // the daemon did not answer the last ping
  int64_t gone_since = 0;  // since when (monotonic ns), while `gone`
  const WaitLook look = [&](const WaitProgress& progress) -> Result<bool> {
    bool recorded = false;  // lineage.db holds the run (and says it still runs)
    if (!spec.run_id.empty()) {
      Result<RunRecord> run = spec.read_run();
      if (run.ok() && run->state != RunState::kRunning) {
        seen = StopSeen{*run};
        return true;
      }
      const StatusCode code = run.status().code();
      recorded = run.ok() || code == StatusCode::kUnavailable;
      // A busy file is a writer mid-commit: look again. Anything else is final.
      if (!run.ok() && code != StatusCode::kUnavailable && code != StatusCode::kNotFound) {
        return Status(StatusCode::kFailedPrecondition, run.status().message());
      }
    }
    const int64_t now = clock->MonotonicNs();
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(progress.left);
    Reply<PingAnswer> alive = daemon.Ping(std::min(spec.ping_timeout, std::max(left, std::chrono::milliseconds(100))));
    if (alive.ok() || alive.refused() || alive.status().code() == StatusCode::kTimeout) {
      gone = false;  // answering, or too busy to: still stopping
    } else if (!gone) {
      gone = true;
      gone_since = now;
    }
    if (gone && !recorded) {
      seen = StopSeen{};  // nothing to read the outcome from: the daemon's exit is all there is
      return true;
    }
    if (gone && std::chrono::nanoseconds(now - gone_since) >= kDaemonGoneGrace) {
      return FailedPreconditionError("holdfastd in " + spec.run_dir + " stopped answering, but " + db_path +
                                     " still records run " + spec.run_id +
                                     " as running: the daemon ended without recording how (see " + spec.run_dir +
                                     "/holdfastd.log; `runctl status " + spec.run_id + "`)");
    }
    if (tick) tick();
    return false;
  };
  const Status s = WaitUntil(look, LiveSpec(which + " to stop", spec.timeout), clock);
  if (s.code() == StatusCode::kTimeout) {
    return TimeoutError(which + " is still running after " + WholeSeconds(spec.timeout) +
                        "s (holdfastd is still stopping it: a large checkpoint takes a while); "
                        "`runctl status` to follow, or wait longer with --timeout");
  }
  if (!s.ok()) return s;
  return *seen;
}

Result<Waited> WaitForTraining(const DaemonClient& daemon, const ReadRunFn& read_run, const std::string& log,
                               std::chrono::milliseconds timeout, Clock* clock, const WaitTick& tick) {
  const int64_t t0 = clock->MonotonicNs();
  std::optional<int64_t> first_seen;
  int64_t trained = 0;
  const WaitLook look = [&](const WaitProgress& progress) -> Result<bool> {
    Reply<StatusAnswer> st = daemon.GetStatus();
    if (st.ok() && st->status.ok()) {
      if (std::optional<int64_t> slowest = SlowestRunningStep(*st->status)) {
        if (!first_seen) first_seen = slowest;
        if (*slowest > *first_seen) {
          trained = *slowest;
          return true;
        }
      }
    }
    Result<RunRecord> run = read_run();
    if (progress.elapsed > kResumeEndedGrace && run.ok() && run->state != RunState::kRunning) {
      return FailedPreconditionError("the resumed run ended before it trained (" +
                                     std::string(RunStateName(run->state)) +
                                     (run->cause.empty() ? "" : ": " + run->cause) + "); see " + log);
    }
    if (tick) tick();
    return false;
  };
  const Status s = WaitUntil(look, LiveSpec("the resumed run to train", timeout), clock);
  if (s.code() == StatusCode::kTimeout) {
    return TimeoutError("the resumed run has not completed a step within " + WholeSeconds(timeout) +
                        "s; follow it with `runctl status` or " + log);
  }
  if (!s.ok()) return s;
  return Waited{trained, Since(clock, t0)};
}

}  // namespace holdfast
