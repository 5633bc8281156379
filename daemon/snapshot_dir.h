// SnapshotDir: the folder on tmpfs where one holdfastd's ranks keep their
// in-memory snapshots (docs/memory-snapshots.md), owned by that daemon.
//
// The daemon creates MEMORY_DIR/holdfast-snap-RUN-PID/ when it starts a run
// with recovery.memory_budget_mb > 0, hands its path to its ranks
// (HOLDFAST_SNAPSHOT_DIR, common/launch_contract.h), and removes it when the
// SnapshotDir is destroyed or Remove()d (the run ends). Because the folder
// belongs to the daemon, not to a rank, it survives the death of any rank:
// that is what lets a restarted rank resume from memory.
//
// A daemon that dies (SIGKILL, OOM) cannot remove its folder, so ownership is
// judged by the kernel, as for RunLock: the owner holds an exclusive flock on
// the folder's "owner.lock" for its whole life (O_CLOEXEC: ranks never inherit
// it), and the kernel drops it when the owner dies. SweepDeadSnapshotDirs
// removes every holdfast-snap-* folder whose lock it can take: each daemon
// calls it before it creates its own, so a dead daemon's snapshots leave
// /dev/shm when the next daemon on the machine starts. The folder is made
// under a dot-name and renamed into place once locked, so a sweep never sees
// a folder whose owner has not locked it yet.
//
// Thread-safety: none needed; owned by the daemon's event-loop thread. The
// free function is safe from any thread.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "daemon/job_config.h"

namespace holdfast {

inline constexpr const char* kSnapshotDirPrefix = "holdfast-snap-";

class SnapshotDir {
 public:
  // Creates and locks memory_dir/holdfast-snap-RUN-PID (mode 0700). Errors
  // name the folder and say what to do (memory_dir missing, not writable).
  static Result<std::unique_ptr<SnapshotDir>> Create(const std::string& memory_dir, const std::string& run_id);
  ~SnapshotDir();  // Remove()
  SnapshotDir(const SnapshotDir&) = delete;
  SnapshotDir& operator=(const SnapshotDir&) = delete;

  const std::string& path() const { return path_; }
  // Removes the folder and everything in it, then lets the lock go. Logged
  // when it fails; idempotent.
  void Remove();

 private:
  SnapshotDir(std::string path, int lock_fd) : path_(std::move(path)), lock_fd_(lock_fd) {}
  std::string path_;
  int lock_fd_ = -1;  // holds the flock; -1 once removed
};

// Removes the holdfast-snap-* folders in memory_dir whose owner is gone (the
// lock is free); folders of live daemons, and ones this user may not remove,
// stay. Returns how many were removed.
int SweepDeadSnapshotDirs(const std::string& memory_dir);

// The newest step in a snapshot folder whose manifest is committed and whose
// shards are all there with their sizes (InspectDepth::kSizes); -1 if none.
int64_t NewestSnapshotStep(const std::string& dir);

// What a daemon does at start (leader and follower alike): sweeps the dead
// daemons' folders in recovery.memory_dir (logged), then, when the tier is on,
// creates its own; nullptr when it is off. In a run of several nodes each
// folder holds its own ranks' shards: the replicas (daemon/replica_service.h)
// and the leader's gather (daemon/memory_restore.h) make a restore possible.
Result<std::unique_ptr<SnapshotDir>> OpenSnapshotDir(const RecoveryConfig& recovery, const std::string& run_id,
                                                     size_t nodes);

}  // namespace holdfast
