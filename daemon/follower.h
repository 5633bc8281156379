// Follower: holdfastd on every node but the leader's. It finds the leader
// (through the Scheduler), joins it over TCP (docs/cluster-protocol.md), runs
// its pre-launch checks and reports them in its hello, then does what the
// leader says — start a generation's ranks on this node, stop them, signal
// them, kill a hang's culprits — and reports progress, rank exits and health
// changes back. It decides nothing about the run: every decision is the
// leader's (daemon/run_controller.h). Losing the leader stops its ranks.
//
// Thread-safety: loop thread only.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "common/time_source.h"
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
  // `io`, `scheduler` and `clock` are not owned and must outlive the Follower.
  Follower(boost::asio::io_context* io, FollowerOptions options, Scheduler* scheduler, const TimeSource* clock);
  ~Follower();
  Status Start();
  int exit_code() const;

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace holdfast
