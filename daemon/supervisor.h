// Supervisor: the leading holdfastd of a run (node 0; the only one when the
// run has one node). It wires the parts together and carries out what the
// RunController decides:
//
//   RunController  (run_controller.h)   the state machine; asks the recovery policy
//   RunRecorder    (run_recorder.h)     lineage.db: attempts, generations, events, checkpoints
//   RankGroup      (rank_group.h)       this node's ranks as processes
//   followers      (cluster_protocol.h) the other nodes' daemons, over TCP
//   ControlServer  (control_server.h)   runctl's socket
//   HealthWatch    (health_watch.h)     this node's health checks
//   Scheduler      (scheduler/)         the allocation, requeue, drain
//   MetricsReporter (metrics_reporter.h) Prometheus metrics: /metrics, a textfile
//   ClusterMembership (cluster_membership.h) active and spare nodes, the plan,
//                  hello checks, lost nodes, the followers' views
//   ControlHandler (control_handler.h)  who may do what on the control socket
//
// The followers' side is daemon/follower.h. Both run on one asio event loop
// (Envoy style): signals through asio::signal_set, timers from the injected
// TimerFactory (common/timer.h; AsioTimerFactory in holdfastd), the time from
// the injected TimeSource, nothing blocks the loop for long — so a whole
// Supervisor runs in a unit test on a fake clock (daemon/supervisor_test.cc).
//
// Thread-safety: loop thread only.
#pragma once

#include <cstdint>
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

struct SupervisorOptions {
  std::string run_dir;
  JobConfig job;
  std::string resume_run;   // continue this run (id, prefix or "latest") as a new attempt
  int64_t from_step = -1;   // with resume_run: the checkpoint step to start from
  Allocation allocation;    // from the scheduler; allocation.leader() is true here
  uint16_t cluster_port = 0;  // 0 = any free port
  // The TCP port runctl on other nodes reaches the leader on (0 = any free
  // port), when munged runs here (docs/control-protocol.md, "Trust").
  uint16_t control_port = 0;
  // Prometheus metrics (daemon/metrics.h, docs/metrics.md), each off when "":
  std::string metrics_addr;      // serve GET /metrics on HOST:PORT
  std::string metrics_textfile;  // rewrite this node_exporter textfile every poll
};

class Supervisor {
 public:
  // `io`, `scheduler`, `clock` and `timers` are not owned and must outlive the
  // Supervisor; `timers` makes timers that fire on `io`'s thread (holdfastd:
  // AsioTimerFactory over `io`; tests: FakeTimerFactory over a FakeTimeSource).
  Supervisor(boost::asio::io_context* io, SupervisorOptions options, Scheduler* scheduler, const TimeSource* clock,
             TimerFactory* timers);
  ~Supervisor();

  // Opens lineage, finds or creates the run, starts the store, the control
  // socket and the cluster port, runs the pre-launch checks and launches
  // generation 0 (or waits for the followers). An error is the daemon's exit.
  Status Start();
  // The exit code once the loop has returned (README, "Exit codes").
  int exit_code() const;

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace holdfast
