// Follower: holdfastd on every node but the leader's. It finds the leader
// (through the Scheduler), joins it over TCP (docs/cluster-protocol.md) —
// proving it holds the run's key, RUN_DIR/cluster.key, and checking that the
// leader does too (common/peer_auth.h) — runs
// its pre-launch checks and reports them in its hello, then does what the
// leader says — start a generation's ranks on this node, stop them, signal
// them, kill a hang's culprits — and reports progress, rank exits and health
// changes back. It decides nothing about the run: every decision is the
// leader's (daemon/run_controller.h). Losing the leader stops its ranks.
// Its timers (poll, kill grace, connect retry) come from the injected
// TimerFactory, so it runs in a unit test on a fake clock
// (daemon/follower_test.cc).
//
// Thread-safety: loop thread only.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "common/time_source.h"
#include "common/timer.h"
#include "daemon/job_config.h"
#include "scheduler/scheduler.h"

namespace boost::asio {
class io_context;
}

namespace holdfast {

struct FollowerOptions {
  std::string run_dir;
  JobConfig job;
  Allocation allocation;  // allocation.this_node > 0
};

class Follower {
 public:
  // `io`, `scheduler`, `clock` and `timers` are not owned and must outlive the
  // Follower; `timers` makes timers that fire on `io`'s thread (as for the Supervisor).
  Follower(boost::asio::io_context* io, FollowerOptions options, Scheduler* scheduler, const TimeSource* clock,
           TimerFactory* timers);
  ~Follower();
  Status Start();
  int exit_code() const;

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace holdfast
