// CheckpointWriter: asynchronous, sharded, verified checkpoint saves for one rank.
//
// The training loop calls Save(step, buffers). Save lays out the shard, copies
// the small buffers into one pre-allocated host staging buffer (allocated at
// Reserve() or the first save, reused after, grown only if the state grows) and
// hands the rest to a background thread owned by the writer. That thread first
// "stages": it copies the buffers marked BufferView::defer_copy into the
// staging buffer and computes the shard's XXH3-64 in the same pass, while the
// training loop goes on with the next step's forward and backward. Then it
// writes the shard file through Storage in large chunks (starting writeback as
// it goes), fsyncs it, renames it into place and hands it to a second thread,
// the committer, which publishes "<size> <xxh3>" under
// "ckpt/<step>/shard/<rank>" in the Store. Rank 0's committer waits for every
// rank's key, writes MANIFEST.json last (temporary name, fsync file, rename,
// fsync folder) and then publishes "ckpt/<step>/outcome"; other ranks wait for
// that outcome, so every rank reports the same commit. Rank 0 then prunes old
// checkpoints (RetentionPolicy). Commits run in step order, one at a time. The
// staging buffer is free again as soon as the shard is written, so a Store
// that does not answer (the holdfastd hosting it SIGSTOPped) holds up commits —
// up to kMaxPendingCommits written steps — and never the next save's staging
// or the training loop.
//
// The staging fence: a deferred buffer must not change until its bytes are
// staged. The caller calls WaitStaged() before it next mutates such a buffer
// (the trainer: just before the optimizer update); it returns at once when
// staging is done, and otherwise blocks until it is. The time blocked there
// counts as training stall in the SaveOutcome.
//
// Memory is bounded by exactly one staging buffer (the size of the shard file):
// a save requested while another is in flight either waits for it (kWait; the
// training loop blocks, and the wait is logged) or is dropped (kSkip; logged and
// counted). A failed save (ENOSPC, EIO, a peer's failure, a commit timeout)
// never stops training: Save already returned, the failure arrives through the
// callback and TakeOutcomes(), the temporary file is removed, and no manifest
// is written. A killed process leaves at most a folder without a manifest,
// which loaders ignore and a later commit prunes.
//
// Each rank saves its own buffers; the writer does not know they may be slices.
// holdfast-train saves replicated state (parameters, AdamW moments) once per
// checkpoint, a slice per rank, and CheckpointLoader::RestoreNewest hands each
// resuming rank the parts of every shard it needs to assemble its state
// (docs/checkpoint-format.md).
//
// holdfast-train runs a second writer beside the disk one for its in-memory
// snapshots (trainer/memory_snapshots.h): root on tmpfs, its own Store
// namespace, the newest kept, routine lines at debug level (log_commits).
//
// A step is saved at most once per Store namespace (generation): the keys of a
// failed step are not reused. A step that already has a manifest is refused.
//
// Thread-safety: Save, Reserve and Flush serialise on an internal mutex and may
// be called from any thread (normally the training loop's); so may
// WaitStaged(). The callback runs on the commit thread and must
// not call Save, Flush or WaitStaged. newest_committed_step(), TakeOutcomes()
// and skipped_saves() are safe from any thread. The destructor lets the save
// in flight finish this rank's part (stage, write and publish its shard) but
// abandons a commit still waiting for another rank, which then fails: a rank
// exits because a peer died, and that peer will never publish. Flush() first
// to keep a commit (the trainer does, on every exit that is not a failure).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/format.h"
#include "checkpoint/storage.h"
#include "common/status.h"
#include "common/store.h"

namespace holdfast {

// One named piece of a rank's state: contiguous host memory, not owned.
struct BufferView {
  std::string name;
  const void* data = nullptr;
  size_t size = 0;
  // false: copied before Save returns; the caller may reuse the memory at once.
  // true: copied later by the writer's thread; the caller keeps these bytes
  // unchanged and alive until WaitStaged() or Flush() returns (or the writer is
  // destroyed). For large state that only changes at a known point.
  bool defer_copy = false;
  // For deferred memory that is still being filled asynchronously (the
  // trainer's device→host copies into pinned memory): the writer's thread calls
  // it before reading the bytes and reads them once it returns OK; an error
  // fails this save (training goes on). Empty = the bytes are ready.
  std::function<Status()> ready = nullptr;
};

// What Save does when the previous save is still being written.
enum class InFlightPolicy {
  kWait,  // block the caller until the background write finishes, then stage
  kSkip,  // drop this save and return kSkipped at once
};
const char* InFlightPolicyName(InFlightPolicy policy);

// Which committed checkpoints survive pruning: the newest keep_last, every
// step that is a multiple of keep_every (0 = none), the newest step that is a
// multiple of keep_newest_every (0 = none; in a root without rank 0's
// manifests, the newest such folder), and always the newest.
// Folders without a manifest older than the newest commit are removed too.
struct RetentionPolicy {
  int keep_last = 3;
  int64_t keep_every = 0;
  int64_t keep_newest_every = 0;
};

struct CheckpointWriterOptions {
  std::string root;  // checkpoints go to root/step-<12 digits>/
  int rank = 0;
  int world_size = 1;
  std::string layout;       // recorded in the manifest, e.g. "dp=8"
  std::string config_hash;  // recorded in the manifest
  InFlightPolicy policy = InFlightPolicy::kWait;
  RetentionPolicy retention;
  // Rendezvous for the commit; required when world_size > 1, unused otherwise.
  std::shared_ptr<Store> store;
  // How long rank 0 waits for all shards, and other ranks for the outcome.
  std::chrono::milliseconds commit_timeout{std::chrono::minutes(10)};
  // A wait for a peer's key goes in Gets of at most this long, so that a
  // writer being destroyed (the process exiting: a peer died) abandons it
  // within one slice; shorter = a faster exit, more store requests while a
  // peer is slow (one per slice per waiting rank).
  std::chrono::milliseconds peer_wait_slice{100};
  // Not owned; must outlive the writer. nullptr = PosixStorage::Default().
  Storage* storage = nullptr;
  // Bytes per write(2). Large writes keep the per-call overhead (and, on a
  // contended CPU, the number of times the writer is descheduled) low.
  size_t write_chunk_bytes = 64u << 20;
  // Start writeback of each chunk as soon as it is written (StartWriteback),
  // instead of leaving it all to the final fsync.
  bool start_writeback = true;
  // Log each commit, skip and retention removal at info level; false: at
  // debug level (holdfast-train's memory snapshots, taken every step). Failures
  // are logged either way.
  bool log_commits = true;
  // What the log lines call a save ("checkpoint", "memory snapshot").
  std::string log_name = "checkpoint";
  // Apply the retention to root after each commit on this rank too (rank 0
  // always does): for a root that is not rank 0's, such as the memory
  // snapshot folder of a node without rank 0, where no manifest is written
  // and every folder older than the newest commit is a step gone by.
  bool prune_own_root = false;
  // Run the writer's two threads (staging, write, commit, pruning) at
  // SCHED_IDLE: they take only CPU time that no other thread of the node
  // wants, so they never preempt the training loop (holdfast-train's memory
  // snapshots, taken every step on nodes whose cores may all train). While a
  // caller waits on them (the staging fence, a Save behind the one in flight,
  // Flush) they run at normal priority until their current job ends, so a node
  // busy with other work cannot starve a training loop that waits.
  bool idle_priority = false;
};

enum class SaveDecision { kQueued, kSkipped };

// The end of one save, as the callback and TakeOutcomes() report it.
struct SaveOutcome {
  int64_t step = -1;
  Status status;             // OK = committed (the manifest is durable)
  uint64_t shard_bytes = 0;  // this rank's shard file
  // Training stall: Save's time in the caller (waiting + copying the eager
  // buffers) plus the time WaitStaged() blocked on this save's staging.
  double stall_seconds = 0;
  double fence_seconds = 0;  // the WaitStaged() part of stall_seconds
  double stage_seconds = 0;  // background: deferred copy + XXH3 of the staged shard
  double write_seconds = 0;  // background: shard write + fsync + rename + folder fsync
  double total_seconds = 0;  // from Save's return to commit (or failure)
  bool committed() const { return status.ok(); }
};

// Removes step folder `dir` the way retention does: its manifest first (made
// durable), so that a crash part way leaves a folder loaders ignore, then
// every file in it, then the folder. `storage` is
// not owned; nullptr = PosixStorage::Default().
Status RemoveStepDir(const std::string& dir, Storage* storage = nullptr);

class CheckpointWriter {
 public:
  using Callback = std::function<void(const SaveOutcome&)>;

  // Validates options, reads the newest manifest under root (the parent of the
  // first save) and starts the background thread.
  static Result<std::unique_ptr<CheckpointWriter>> Create(CheckpointWriterOptions options,
                                                          Callback callback = nullptr);
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Allocates (and touches) a staging buffer of at least `bytes`, so the first
  // Save does not pay for page faults. Waits for a save in flight.
  Status Reserve(size_t bytes);

  // Stages the buffers (the eager ones now, those with defer_copy on the
  // background thread) and hands them to the background thread. Errors are only
  // about the request itself (bad names, negative step); storage failures come
  // later as a SaveOutcome. `manifest_metrics` go into the manifest rank 0
  // commits (Manifest::metrics; the trainer's newest eval metrics).
  Result<SaveDecision> Save(int64_t step, const std::vector<BufferView>& buffers,
                            std::map<std::string, double> manifest_metrics = {});

  // The staging fence: returns once no deferred buffer of any queued save
  // remains to be copied, so the caller may mutate them. Cheap when nothing is
  // pending (one atomic load). Staging never fails (storage errors come later).
  void WaitStaged();

  // Waits until no save is in flight, its commit included; returns the status
  // of the last save that finished (OK if none did). For a final checkpoint
  // before exit.
  Status Flush();

  // Newest step this writer saw committed (or found at Create); -1 if none.
  int64_t newest_committed_step() const { return newest_committed_.load(); }
  // Outcomes not taken yet, oldest first (at most the last 64 are kept).
  std::vector<SaveOutcome> TakeOutcomes();
  int64_t skipped_saves() const { return skipped_.load(); }
  size_t staging_capacity() const;

 private:
  // A buffer the background thread copies into staging[offset, offset + size).
  struct DeferredCopy {
    const uint8_t* src = nullptr;  // not owned; the caller keeps it until staged
    uint64_t offset = 0;
    uint64_t size = 0;
    std::function<Status()> ready = nullptr;  // BufferView::ready
  };
  struct Job {
    int64_t step = 0;
    ShardHeader header;
    std::vector<DeferredCopy> deferred;  // ascending offsets
    std::map<std::string, double> metrics;  // Manifest::metrics (rank 0 writes them)
    double stall_seconds = 0;
    std::chrono::steady_clock::time_point handed_over;
  };

  // A written shard (or the error that stopped it) waiting for its commit.
  struct PendingCommit {
    Status written;     // OK: the shard is durable, with checksum xxh3
    uint64_t xxh3 = 0;
    std::map<std::string, double> metrics;
    SaveOutcome outcome;  // step, shard size, timings of staging and writing
    std::chrono::steady_clock::time_point handed_over;
  };

  CheckpointWriter(CheckpointWriterOptions options, Callback callback);
  // The writer thread: stages and writes each job's shard, then queues its commit.
  void ThreadMain();
  PendingCommit Write(const Job& job);
  // The commit thread: publishes each written shard and agrees on the commit
  // through the Store, in step order, so that a Store that does not answer
  // (its holdfastd SIGSTOPped) holds up commits, never the next save's staging.
  void CommitMain();
  SaveOutcome Finish(const PendingCommit& commit);
  // Copies the deferred buffers into staging and hashes the whole shard; then
  // opens the fence. Returns the shard's XXH3-64 and the seconds the fence
  // blocked the caller; an error when a deferred buffer's ready() failed (the
  // fence opens either way).
  Result<uint64_t> Stage(const Job& job, double* fence_seconds);
  // Writes this rank's staged shard.
  Status WriteShard(const Job& job, const std::string& dir);
  Status Commit(const PendingCommit& commit, const std::string& dir);
  // Store Get of another rank's key for up to commit_timeout; fails at once
  // when the destructor has begun (see the thread-safety note above).
  Result<std::vector<uint8_t>> AwaitPeerKey(const std::string& key);
  Status WriteManifest(const std::string& dir, const Manifest& manifest);
  void Prune(int64_t newest);
  void EnsureStaging(size_t bytes);  // caller holds save_mu_, writer idle
  void WaitIdle(std::unique_lock<std::mutex>* lock);       // no shard being staged or written
  void WaitCommitted(std::unique_lock<std::mutex>* lock);  // ... and no commit queued or running
  size_t PendingCommits() const { return commits_.size() + (committing_ ? 1 : 0); }  // caller holds mu_
  // options_.idle_priority: both threads to normal priority while a caller
  // waits on them; each lowers itself again once its job is done (LowerAgain).
  void BoostWhileWaited();
  void LowerAgain(std::atomic<bool>* boosted);

  const CheckpointWriterOptions options_;
  Storage* const storage_;  // not owned
  const Callback callback_;

  std::mutex save_mu_;  // serialises Save/Reserve/Flush callers
  // The staging buffer: written by the Save caller while idle_, read by the
  // background thread while a job runs; the handover goes through mu_.
  std::unique_ptr<uint8_t[]> staging_;
  size_t staging_capacity_ = 0;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;           // a job arrived or stopping
  std::condition_variable idle_cv_;           // a job finished
  std::condition_variable staged_cv_;         // staging_pending_ became false
  std::optional<Job> job_;                    // guarded by mu_; set = being staged or written
  std::condition_variable commit_cv_;         // a commit was queued, or the writer is gone
  std::deque<PendingCommit> commits_;         // guarded by mu_; written, not yet committing; oldest first
  bool committing_ = false;                   // guarded by mu_; the commit thread works on one
  bool writer_done_ = false;                  // guarded by mu_; the writer thread was joined
  // Written steps that may wait for their commit at once; a save beyond this
  // waits (kWait) or is skipped (kSkip) like one behind a shard being written.
  static constexpr size_t kMaxPendingCommits = 8;
  // Set by Save when the job has deferred copies, cleared by the background
  // thread once staged (under mu_; atomic so that WaitStaged's fast path is a load).
  std::atomic<bool> staging_pending_{false};
  // When WaitStaged began blocking on the pending staging; guarded by mu_.
  std::optional<std::chrono::steady_clock::time_point> fence_waiting_since_;
  bool stop_ = false;                         // guarded by mu_
  Status last_status_;                        // guarded by mu_
  std::vector<SaveOutcome> outcomes_;         // guarded by mu_
  std::optional<int64_t> parent_step_;        // commit thread only (after Create)
  std::atomic<int64_t> newest_committed_{-1};
  std::atomic<int64_t> skipped_{0};
  // options_.idle_priority: the thread runs at normal priority for a waiter.
  std::atomic<bool> writer_boosted_{false};
  std::atomic<bool> committer_boosted_{false};
  std::thread thread_;         // the writer
  std::thread commit_thread_;  // the committer
};

}  // namespace holdfast
