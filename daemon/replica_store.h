// ReplicaStore: the copies of memory snapshots kept in one node's snapshot
// folder (daemon/snapshot_dir.h), and the file work of the replica protocol
// (daemon/replica_wire.h) on them. Three kinds of copy live there:
//
//   SNAP/step-S/              the trainer's own folder (its ranks' shards; on
//                             the node of rank 0 also MANIFEST.json)
//   SNAP/held/step-S/         this node's files of a step it replicates, hard
//                             links to the trainer's, so that the trainer's
//                             retention (newest snapshot only) cannot take a
//                             step away while the peer still needs it
//   SNAP/replica-K/step-S/    node K's files of step S, pushed by node K
//
// Each keeps its newest `keep` steps. Being inside the SnapshotDir, all of it
// goes with the folder when the run ends, and with the dead-daemon sweep
// when a daemon is killed. A push is written under a dot-name and renamed
// into place only once every file has the size and XXH3 it was sent with.
//
// Gather(S) makes SNAP/step-S whole before a generation's ranks start: the
// manifest first (from here or a peer; its own checksum holds), then every
// shard it lists, each checked against the manifest's size and XXH3 — a copy
// here (the trainer's, held, a replica) when one verifies, else one fetched
// from a peer — and removes the step folders after S (a timeline that ended).
//
// Thread-safety: the methods touch only the file system and may be called
// from several threads at once for different steps/origins; the replica
// service (daemon/replica_service.h) serialises pushes of one origin.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/replica_wire.h"

namespace holdfast {

class ReplicaStore {
 public:
  // Downloads one file of step `step` from `holder` into `dest` (a new file);
  // the store checks its bytes afterwards.
  using Fetcher = std::function<Status(const ReplicaHolder& holder, int64_t step, const std::string& name,
                                       const std::string& dest)>;

  // `root`: the SnapshotDir's path; `node`: this node's index; a push
  // larger than `budget_bytes` is refused.
  ReplicaStore(std::string root, int node, uint64_t budget_bytes, int keep = 2)
      : root_(std::move(root)), node_(node), budget_bytes_(budget_bytes), keep_(keep) {}

  const std::string& root() const { return root_; }
  int node() const { return node_; }

  // Every copy here, with its files' names and sizes (not their checksums).
  std::vector<SnapshotCopy> Inventory() const;
  // Where a copy's file is; kNotFound when it is not there.
  Result<std::string> PathOf(CopyKind kind, int origin, int64_t step, const std::string& name) const;

  // The trainer's steps (newest first) whose folder has every one of `names`
  // (renamed into place, so written whole).
  std::vector<int64_t> CompleteLocalSteps(const std::vector<std::string>& names) const;
  // Hard-links the trainer's files `names` of `step` into held/step-S and
  // drops the held steps beyond the newest `keep`. OK when already held.
  Status Hold(int64_t step, const std::vector<std::string>& names);
  std::vector<int64_t> HeldSteps() const;  // newest first

  // A push from node `origin`: checks it (sizes within the budget, names)
  // and makes the folder its files are written into; nothing else is made.
  Result<std::string> BeginPush(int origin, int64_t step, const std::vector<ReplicaFile>& files) const;
  // Renames a verified push into replica-K/step-S and drops that origin's
  // steps beyond the newest `keep`.
  Status CommitPush(const std::string& incoming, int origin, int64_t step);
  void AbortPush(const std::string& incoming) const;

  // Makes step `step` whole here (see the file comment). `files` names the
  // peers holding each file; `fetch` downloads from one. Returns a note of
  // where the files that were not here already came from ("" when all were).
  Result<std::string> Gather(int64_t step, const std::vector<GatherFile>& files, const Fetcher& fetch);

 private:
  std::string CopyDir(CopyKind kind, int origin, int64_t step) const;
  // When the copy `from` on this node has `size` and `xxh3`, hard-links it
  // to `target` (nothing to do when it is the target) and says true; false
  // when it is not there or does not verify (logged).
  Result<bool> TryLocal(const std::string& from, const std::string& target, uint64_t size, uint64_t xxh3) const;
  void RemoveStepsAfter(int64_t step) const;

  const std::string root_;
  const int node_;
  const uint64_t budget_bytes_;
  const int keep_;
};

// The XXH3-64 and size of a file, read whole.
Result<std::pair<uint64_t, uint64_t>> FileXxh3(const std::string& path);

}  // namespace holdfast
