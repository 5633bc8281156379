// LocalScheduler: the embedded default — no Slurm, the nodes are holdfastd
// processes started by hand (or by a test) on this machine or on machines the
// operator names. Everything it knows comes from flags (LocalSchedulerOptions)
// and from the run directory:
//
//   Discover()       the allocation, from --nodes/--node-id/--host/--addr
//   PublishLeader()  writes RUN_DIR/cluster.addr (see "cluster.addr" below)
//   FindLeader()     --leader, or the live leader's line in RUN_DIR/cluster.addr
//   Requeue()        a local relaunch: a detached `holdfastd --run-dir RUN_DIR
//                    --resume RUN_ID --wait-for-lock` (StartDetachedDaemon)
//   Drain()          kFailedPrecondition: a local machine has no queue to leave
//
// Host names. Node k is named
//   nodes == 1:  gethostname()
//   nodes  > 1:  "<gethostname()>-n<k>"  (several daemons on one machine are
//                distinct hosts, so the recovery policy's per-host history
//                means something)
// and --host replaces the name of this node only. The local scheduler cannot
// know the real names of the other nodes: they keep the default rule's name
// (for the daemon's bookkeeping this only has to be unique and stable).
//
// Addresses. --addr is this node's address (bound and advertised). Without it,
// 127.0.0.1 when every node is on this machine — nodes == 1, or no --host was
// given and --leader (if any) is a loopback address — and an InvalidArgument
// error otherwise (multi-node code never guesses 127.0.0.1). The other nodes'
// addresses are 127.0.0.1 when all are local, the --leader host for node 0,
// and "" (unknown; learnt when they join the leader) otherwise.
//
// cluster.addr. One line, "ADDR PID STARTTIME\n": the leader's cluster
// address ("host:port"), its pid, and that pid's start time (field 22 of
// /proc/PID/stat, clock ticks since boot). A reader accepts the address only
// while that pid is running (not a zombie) with that same start time, so a
// dead leader's file, or one whose pid has been reused, is ignored. The check
// needs the leader's pid namespace: followers on another machine sharing the
// run directory cannot use it and must be given --leader.
//
// Thread-safety: like every Scheduler, used from one thread (the daemon's
// event loop); the free functions are thread-safe. FindLeader blocks, polling
// every 50 ms, for up to its timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "scheduler/scheduler.h"

namespace holdfast {

struct LocalSchedulerOptions {
  std::string run_dir;  // --run-dir: shared by the nodes of a run on one machine
  int nodes = 1;        // --nodes
  int node_id = 0;      // --node-id: 0 leads
  std::string leader;   // --leader host:port (followers; optional: default RUN_DIR/cluster.addr)
  std::string host;     // --host: this node's name; default: the naming rule above
  std::string addr;     // --addr: this node's address to bind and advertise; default: see above
  // The program Requeue starts. holdfastd relaunches itself; runctl (a
  // different binary) sets the path of holdfastd.
  std::string daemon_path = "/proc/self/exe";
};

class LocalScheduler : public Scheduler {
 public:
  explicit LocalScheduler(LocalSchedulerOptions options);

  const char* name() const override { return "local"; }
  // requeue (a local relaunch), no exclude_hosts, no drain.
  SchedulerCapabilities capabilities() const override;

  // kInvalidArgument, with the flag to fix, for: --nodes < 1, --node-id < 0 or
  // >= --nodes, an empty --run-dir, a --leader that is not host:port, a --host
  // or --addr with spaces, a --host equal to another node's name, or a
  // multi-machine run (see "Addresses") without --addr. kIoError when the
  // machine's host name cannot be read.
  Result<Allocation> Discover() override;

  // Writes RUN_DIR/cluster.addr atomically (a temporary file renamed over it).
  Status PublishLeader(const std::string& addr) override;
  // Removes RUN_DIR/cluster.addr when it still names this process.
  void WithdrawLeader() override;
  // --leader when given; else waits for a live leader in RUN_DIR/cluster.addr.
  Result<std::string> FindLeader(std::chrono::milliseconds timeout) override;

  // Starts a detached `DAEMON --run-dir RUN_DIR --resume RUN_ID
  // --wait-for-lock` (output appended to RUN_DIR/logs/holdfastd-relaunch.log,
  // `reason` written there first) and returns once it has been exec'd. It
  // relaunches this node only; when nodes > 1 the arguments go on with
  // `--nodes N --node-id K` and the --host/--addr this node was given, but
  // never --leader (followers find the relaunched leader in cluster.addr).
  // kFailedPrecondition when `exclude_hosts` is not empty.
  Status Requeue(const std::string& run_id, const std::vector<std::string>& exclude_hosts,
                 const std::string& reason) override;
  // Always kFailedPrecondition.
  Status Drain(const std::string& host, const std::string& reason) override;

  std::string leader_file() const { return options_.run_dir + "/cluster.addr"; }
  std::string relaunch_log() const { return options_.run_dir + "/logs/holdfastd-relaunch.log"; }

 private:
  LocalSchedulerOptions options_;
};

// Starts `daemon_path args...` detached from the caller: in a new session,
// not the caller's child (double fork), stdin /dev/null, stdout and stderr
// appended to `log_path`, signal mask and dispositions reset, no inherited
// file descriptors besides 0-2 (a relaunched daemon must not keep this one's
// locks or sockets), the caller's environment and working directory. Returns
// once the program has been exec'd; an exec failure (missing file, not
// executable) comes back as a Status naming the path, from the exec itself
// through a close-on-exec pipe. Does not wait for the program to finish.
// Safe to call from a multi-threaded process (the children only make
// async-signal-safe calls).
Status StartDetachedDaemon(const std::string& daemon_path, const std::vector<std::string>& args,
                           const std::string& log_path);

// The start time of process `pid` (field 22 of /proc/PID/stat). kNotFound when
// no such process runs — including a zombie (exited, not yet reaped).
Result<uint64_t> ProcessStartTime(int pid);

// One cluster.addr line, parsed.
struct LeaderStamp {
  std::string addr;
  int pid = 0;
  uint64_t start_time = 0;
  std::string machine;  // gethostname() of the leader's machine; "" = unknown (an older stamp)
};
std::string FormatLeaderStamp(const LeaderStamp& stamp);  // "ADDR PID STARTTIME MACHINE\n"
// kInvalidArgument when `text` is not one "ADDR PID STARTTIME [MACHINE]" line.
Result<LeaderStamp> ParseLeaderStamp(const std::string& text);
// "" when the stamp may be used: its process runs with the stamped start time,
// or it was written on another machine (a pid there cannot be checked from
// here; a follower that cannot connect reads the file again). Otherwise why
// it is stale, in words.
std::string WhyLeaderStampIsStale(const LeaderStamp& stamp);
bool LeaderStampIsLive(const LeaderStamp& stamp);

}  // namespace holdfast
