// holdfast-train's side of the in-memory snapshot tier (docs/memory-snapshots.md).
//
// Under a holdfastd whose job file sets recovery.memory_budget_mb, every rank
// is told a folder on tmpfs that the daemon owns (HOLDFAST_SNAPSHOT_DIR), its
// share of the budget and how often to snapshot (common/launch_contract.h).
// The rank then saves its state there every `every` steps with a second
// CheckpointWriter: the same shard files, manifest, checksums and commit
// protocol as a disk checkpoint, in a store namespace of its own, keeping only
// the newest committed snapshot (and, in a run of several nodes, the newest
// of the steps the daemon replicates: docs/memory-snapshots.md). On a (re)start the rank restores from the
// newest snapshot every rank holds and that verifies
// (CheckpointLoader::RestoreNewest on that folder) before it looks at the disk.
//
// The budget: a rank holds at most kSnapshotsHeld of its shards on tmpfs at
// once (the newest committed one and the next being written; one more, the
// newest replicated step, in a run of several nodes: SnapshotsHeld), so a
// snapshot fits when that many times its shard size is within the rank's share. The
// ranks agree (AgreeOnSnapshots): snapshots are taken by all ranks or by none,
// since a commit needs every rank's shard.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "checkpoint/checkpoint_writer.h"
#include "common/status.h"
#include "common/store.h"

namespace holdfast {

// The store namespace of the snapshot writer's commits and of the restore
// from memory: a step is then saved at most once per tier and generation.
inline constexpr const char* kSnapshotStorePrefix = "snap";
inline constexpr int kSnapshotsHeld = 2;
// The snapshot writer's CheckpointWriterOptions::peer_wait_slice: a rank
// whose peer died exits (and the restart starts) at most this long after its
// step failed, instead of the disk writer's 100 ms; the price is up to 40
// store Gets a second per rank while a peer is slow to publish its shard.
inline constexpr std::chrono::milliseconds kSnapshotPeerWaitSlice{25};

struct SnapshotTierConfig {
  std::string dir;            // HOLDFAST_SNAPSHOT_DIR
  uint64_t budget_bytes = 0;  // HOLDFAST_SNAPSHOT_BUDGET_BYTES: this rank's share of the node's budget
  int64_t every = 1;          // HOLDFAST_SNAPSHOT_EVERY
  // This rank clears the older snapshots of its node's folder after each
  // commit: local rank 0 of a node without rank 0 (rank 0 clears its own).
  bool prune_here = false;
  // HOLDFAST_SNAPSHOT_REPLICA_EVERY: in a run of several nodes the daemon
  // replicates the snapshots of steps that are multiples of it, so the newest
  // of them is kept too; 0 = not replicated.
  int64_t replica_every = 0;
};

// The tier as the supervisor set it up, read through `env` (getenv):
// nullopt when HOLDFAST_SNAPSHOT_DIR is unset or empty; kInvalidArgument
// naming the variable when a number is malformed or out of range.
Result<std::optional<SnapshotTierConfig>> SnapshotTierFromEnvironment(
    const std::function<const char*(const char*)>& env);

// How many of its snapshots a rank holds at once: kSnapshotsHeld, and one
// more in a run of several nodes where the newest replicated step is not
// always the newest (replica_every > every).
int SnapshotsHeld(const SnapshotTierConfig& tier);

// OK when `held` snapshots of `shard_bytes` fit in `budget_bytes`; else
// kResourceExhausted with the numbers and what to do.
Status CheckSnapshotBudget(uint64_t shard_bytes, uint64_t budget_bytes, int held = kSnapshotsHeld);

// Every rank's CheckSnapshotBudget verdict made one: rank 0 gathers them
// through `store` (not owned; may be null with one rank) and publishes the
// decision, OK when every rank's is, else the first refusal naming its rank.
// An error reaching the others (timeout) is returned as the decision too:
// a rank that cannot tell takes no snapshots.
Status AgreeOnSnapshots(const Status& mine, int rank, int world, Store* store, std::chrono::milliseconds timeout);

// The snapshot writer's options, from the disk writer's (rank, world, layout,
// config hash, commit timeout): root = the tier's folder, the store under
// kSnapshotStorePrefix, only the newest snapshot kept, saves waiting for the
// one in flight (every rank must save every due step), routine lines at debug.
// Give it a store client of its own (holdfast-train does): a client
// serialises its requests, and the per-step commits' parked Gets would
// otherwise delay the disk writer's commits on a shared one.
CheckpointWriterOptions SnapshotWriterOptions(const SnapshotTierConfig& tier, const CheckpointWriterOptions& disk);

// Removes the snapshot folders of steps after `step` (-1: all) in `dir`: a
// timeline the restore did not continue (a step that every rank did not
// hold, or one that failed its checksum). One rank per node calls it, before
// the first step, when no rank of the node can be saving. Failures are logged.
void RemoveSnapshotsAfter(const std::string& dir, int64_t step);

}  // namespace holdfast
