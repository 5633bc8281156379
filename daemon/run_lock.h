// RunLock: at most one holdfastd supervises a run (per node) at a time.
//
// A second daemon, or `runctl resume`, on a run whose daemon is alive but not
// answering (SIGSTOPped, swapping, blocked on storage) must not take the run
// over: two supervisors would start two sets of ranks writing the same
// checkpoints and lineage. Liveness is therefore not judged by the socket but
// by the kernel: the holder keeps an exclusive lock on RUN_DIR/holdfastd.lock
// for its whole life, and the kernel drops it when the holder dies, however it
// dies (SIGKILL, OOM, node reboot for an NFS lock). No stale-pid guessing.
//
// The lock is an open-file-description lock (fcntl F_OFD_SETLK, Linux >= 3.15):
// flock's semantics (owned by the open file, not the process; conflicts even
// within one process; released when the last fd to it closes) plus a query
// (F_OFD_GETLK) that does not take the lock, so Holder() never makes a
// starting daemon fail. The fd is O_CLOEXEC so ranks never inherit it. The
// file holds the holder's pid, host and start time, for messages only; it is
// never unlinked or replaced (a new inode would be a second, free lock).
//
// Followers (--node-id N > 0) share the leader's run directory, so each node
// locks its own file: node 0 holdfastd.lock, node N holdfastd-nodeN.lock.
//
// Thread-safety: a RunLock is immutable after Acquire; the static functions
// are safe to call from any thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "common/status.h"

namespace holdfast {

class RunLock {
 public:
  // Takes the run's lock and records this process as its holder.
  // wait=false: if another process holds it, kFailedPrecondition:
  //   "another holdfastd (pid N on HOST, started T) is supervising RUN_DIR;
  //    stop it first (runctl stop), or use another --run-dir".
  // wait=true: blocks until the holder lets go (exits or is killed).
  // Other errors: the lock file cannot be opened (errno-derived), or its file
  // system cannot lock (kUnavailable; e.g. Lustre mounted without -o flock).
  static Result<std::unique_ptr<RunLock>> Acquire(const std::string& run_dir, bool wait, int node_id = 0);

  // Like Acquire(wait=false), retried until the holder lets go or `timeout`
  // has passed; then Acquire's refusal, saying how long it waited. For a
  // requeued Slurm job: Slurm requeues a job whose node stopped answering, and
  // that node's holdfastd, cut off the network, may still hold the run while
  // it gives up on its own requeue.
  static Result<std::unique_ptr<RunLock>> AcquireWithin(const std::string& run_dir, std::chrono::milliseconds timeout,
                                                        int node_id = 0);

  // The pid recorded by the process that now holds the run's lock, or nullopt
  // when nobody holds it (a leftover file from a dead holder says nothing).
  // The pid may belong to another host when the run dir is on shared storage;
  // 0 when the holder has locked but not yet written its pid (it is starting).
  // Does not take the lock.
  static std::optional<pid_t> Holder(const std::string& run_dir, int node_id = 0);

  // RUN_DIR/holdfastd.lock for node 0, RUN_DIR/holdfastd-nodeN.lock otherwise.
  static std::string LockPath(const std::string& run_dir, int node_id = 0);

  // Releases the lock (the kernel would on exit anyway).
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  RunLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}

  int fd_;  // owns the lock; O_CLOEXEC
  std::string path_;
};

}  // namespace holdfast
