// Supervisor: holdfastd's heart. Launches the ranks of one run on this node,
// hosts their rendezvous store, watches their progress records, detects
// crashes and hangs, triages them, stops every rank and restarts generation
// g+1 from the newest committed checkpoint within a restart budget, and
// records all of it in the run's lineage.db. Serves the control socket that
// `runctl` talks to.
//
// Threading (Envoy style): one event-loop thread (the io_context's) owns all
// state; signals arrive through asio::signal_set, timers through steady_timer.
// Nothing here blocks the loop for long: waitpid is WNOHANG, progress records
// are plain memory reads, SQLite writes are small transactions.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "common/status.h"
#include "daemon/job_config.h"

namespace boost::asio {
class io_context;
}

namespace holdfast {

struct SupervisorOptions {
  std::string run_dir;
  JobConfig job;
  std::string resume_run;     // continue this run (id, prefix or "latest") as a new attempt
  int64_t from_step = -1;     // with resume_run: the checkpoint step to start from
  std::string store_host = "127.0.0.1";
  // Several daemons form one run: node 0 leads (store, lineage, control
  // socket, every decision), nodes 1..nodes-1 follow over TCP.
  int nodes = 1;
  int node_id = 0;
  std::string leader_addr;     // followers: host:port of the leader's cluster port
  uint16_t cluster_port = 0;   // leader: 0 = any free port; written to RUN_DIR/cluster.addr
};

class Supervisor {
 public:
  // `io` is not owned and must outlive the Supervisor.
  Supervisor(boost::asio::io_context* io, SupervisorOptions options);
  ~Supervisor();

  // Opens lineage, finds or creates the run, starts the store and the control
  // socket and launches generation 0. Errors here are the daemon's exit.
  Status Start();

  // The exit code once the loop has returned (see daemon/main.cc).
  int exit_code() const;

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace holdfast
