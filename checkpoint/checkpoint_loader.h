// CheckpointLoader: finds the newest checkpoint that verifies and returns one
// rank's buffers from it (Load, LoadNewest), every rank's (LoadAll,
// LoadNewestAll), or, for one rank of a restoring world, just what that rank
// needs (Restore, RestoreNewest).
//
// Step folders are tried newest first. A folder counts only when its manifest
// parses and its own checksum holds, its world size is the one expected, and
// every shard has the manifest's size and XXH3-64. Each folder passed over is
// reported with the reason (SkippedCheckpoint) and logged; a damaged
// checkpoint therefore costs one step back, never a crash loop.
//
// Reading runs at the disk's speed: each file is read in large chunks by a
// reader thread while the calling thread checksums the chunks already read
// (ReadOverlapped, checkpoint/file_reader.h).
//
// Restore / RestoreNewest split a restore among the ranks of the world that
// resumes (of the checkpoint's world size or another), so that no rank reads
// or checksums the whole checkpoint: shard s is read whole and checksummed by
// one rank only, VerifyingRank(s); every rank reads the headers and the small
// "preview" buffers (meta) of all shards, asks the caller's RestorePlanner
// which other buffers it needs (holdfast-train: every shard's parameters, the
// moments of its own slice) and reads just those. Then each rank publishes its
// verdict on the step through the Store and waits for everyone's: a step is
// used only when every rank's verdict is OK, so every byte that any rank uses
// has been checksummed by one of them, and all ranks choose the same step (rank
// 0 publishes the list of candidates). A step any rank rejects is skipped by
// all with that rank's reason. The shard file format is unchanged; old
// checkpoints restore the same way.
//
// LoadAll / LoadNewestAll read and checksum every shard in this process,
// into memory that the result keeps. A caller-supplied CheckpointValidator
// looks at the verified contents (slices that do not fit together, say); a
// checkpoint it rejects is skipped like a corrupt one. The library itself
// still does not interpret buffers.
//
// Thread-safety: a CheckpointLoader has no mutable state; it may be used from
// several threads at once if its Storage may. Each call starts and joins its
// own reader threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/file_reader.h"
#include "checkpoint/format.h"
#include "checkpoint/storage.h"
#include "common/status.h"
#include "common/store.h"

namespace holdfast {

struct LoadOptions {
  // Read and checksum every rank's shard, not only the one returned.
  bool verify_all_shards = true;
  // Skip checkpoints of another world size (0 = accept any).
  int expected_world_size = 0;
  size_t read_chunk_bytes = 8u << 20;
  // Reader threads per file (OverlappedReadOptions::threads); 0 = the
  // calling thread reads and checksums in turn.
  int read_threads = 1;
  // Drop each file's cached pages before reading it (benchmarks).
  bool drop_cache = false;
};

// How far Inspect looks before it says a step can be loaded. Every answer to
// "can this checkpoint be loaded?" in the project is one of these three:
//   kManifest   not marked corrupt (kCorruptMarkerFileName), the manifest
//               parses, its own checksum holds and it names this step
//   kSizes      ... and every shard it names is on disk with its size: a
//               manifest beside a missing, truncated or half-pruned shard
//               fails (holdfastd's tracker, runctl resume --from-step)
//   kChecksums  ... and every shard's bytes have the manifest's XXH3 (the
//               trainer's loader; reads the whole checkpoint)
enum class InspectDepth { kManifest, kSizes, kChecksums };
const char* InspectDepthName(InspectDepth depth);  // "manifest", "sizes", "checksums"

struct SkippedCheckpoint {
  int64_t step = -1;
  std::string dir;
  Status reason;
};

// A read-only view into a LoadedShard's bytes.
struct ConstBufferView {
  std::string name;
  const uint8_t* data = nullptr;  // owned by the LoadedShard; null when the buffer was not read
  size_t size = 0;
};

// One rank's shard of a verified checkpoint, read whole or (a Restore of
// another rank's shard) in part. Owns its bytes; move-only.
struct LoadedShard {
  Manifest manifest;
  std::string dir;
  ShardHeader header;
  // The whole shard file, header.file_size bytes, when it was read whole
  // (and checksummed by this process); else null.
  std::unique_ptr<uint8_t[]> bytes;
  // When not read whole: pieces[i] holds header.entries[i]'s bytes if this
  // rank read that buffer, else null.
  std::vector<std::unique_ptr<uint8_t[]>> pieces;

  // Whether the buffer at header.entries[i] was read.
  bool IsRead(size_t i) const;
  // The buffer called name; kNotFound lists the names there are,
  // kFailedPrecondition when this rank did not read it.
  Result<ConstBufferView> Find(const std::string& name) const;
  // Every buffer, in file order; data is null for the ones not read.
  std::vector<ConstBufferView> Buffers() const;
};

// Every rank's shard of one verified checkpoint. Owns the bytes; move-only.
struct LoadedCheckpoint {
  Manifest manifest;
  std::string dir;
  std::vector<LoadedShard> shards;  // index = rank, world_size of them
};

// A check of a verified checkpoint's contents, supplied by whoever knows what
// the buffers mean. Non-OK = do not use this checkpoint; the message says why
// (name the shard, say what to do) and is reported like any corruption.
using CheckpointValidator = std::function<Status(const LoadedCheckpoint&)>;

// What one rank of a restore reads besides the shards it verifies, chosen from
// a preview of the checkpoint: the manifest, every shard's header and its
// RestoreOptions::preview_buffers (shards this rank verifies: all of it).
// Returns, for each shard (index = saved rank), the names of the buffers this
// rank needs. Non-OK rejects the checkpoint like a CheckpointValidator.
using RestorePlanner = std::function<Result<std::vector<std::vector<std::string>>>(const LoadedCheckpoint& preview)>;

struct RestoreOptions {
  // This process's place in the world that restores (which may differ from
  // the world that saved the checkpoint).
  int rank = 0;
  int world_size = 1;
  // Where the ranks publish and read their verdicts ("restore/..." keys; the
  // caller namespaces it per generation). Required when world_size > 1.
  std::shared_ptr<Store> store;
  // How long a rank waits for the others' verdicts (they read as much as it
  // does, so this is slack for a slow disk, not the whole read).
  std::chrono::milliseconds peer_timeout{std::chrono::minutes(10)};
  // Small buffers every rank reads from every shard before planning.
  std::vector<std::string> preview_buffers = {"meta"};
  // How to read (expected_world_size and verify_all_shards do not apply).
  LoadOptions load;
};

class CheckpointLoader {
 public:
  // `storage` is not owned; nullptr = PosixStorage::Default().
  explicit CheckpointLoader(std::string root, Storage* storage = nullptr);

  // Step folders under root (committed or not), newest first. kNotFound when
  // root does not exist.
  Result<std::vector<int64_t>> ListSteps() const;
  // Whether step can be loaded, looked at to `depth` (InspectDepth); the
  // manifest when it can, else why not (kNotFound: no manifest or a shard
  // missing; kCorruption: marked, damaged, truncated or a checksum mismatch).
  Result<Manifest> Inspect(int64_t step, InspectDepth depth, const LoadOptions& options = {}) const;
  // Reads the manifest of step and checks its own checksum only (no marker).
  Result<Manifest> ReadManifest(int64_t step) const;
  // Reads the manifest and checksums every shard (nothing kept).
  Result<Manifest> Verify(int64_t step, const LoadOptions& options = {}) const;
  // Verifies step and returns rank's shard.
  Result<LoadedShard> Load(int64_t step, int rank, const LoadOptions& options = {}) const;
  // The newest checkpoint that verifies, with rank's shard. `skipped` (not
  // owned, may be null) receives every newer folder passed over and why.
  // kNotFound when none verifies.
  Result<LoadedShard> LoadNewest(int rank, const LoadOptions& options = {},
                                 std::vector<SkippedCheckpoint>* skipped = nullptr) const;

  // Verifies step and returns every rank's shard, each read (and
  // checksummed) once; holds the whole checkpoint in memory. `validate` (may
  // be empty) runs last; its error is returned with the folder as context.
  // options.verify_all_shards is implied.
  Result<LoadedCheckpoint> LoadAll(int64_t step, const LoadOptions& options = {},
                                   const CheckpointValidator& validate = nullptr) const;
  // The newest checkpoint that verifies and passes `validate`, with every
  // rank's shard. `skipped` as for LoadNewest. kNotFound when none does.
  Result<LoadedCheckpoint> LoadNewestAll(const LoadOptions& options = {},
                                         std::vector<SkippedCheckpoint>* skipped = nullptr,
                                         const CheckpointValidator& validate = nullptr) const;

  // This rank's part of restoring step (the file comment): the shards it
  // verifies read whole, the other shards' headers, preview buffers and the
  // buffers `plan` (may be empty: none) names. Returns once every rank's
  // verdict is in: the checkpoint when all are OK, else the lowest rank's
  // failure (a corruption first). Every rank of options.world_size must call
  // it (or RestoreNewest) with the same step.
  Result<LoadedCheckpoint> Restore(int64_t step, const RestoreOptions& options,
                                   const RestorePlanner& plan = nullptr) const;
  // Restore of the newest step that every rank accepts; the candidates are
  // rank 0's step folders, newest first. `skipped` as for LoadNewest (every
  // rank reports the same). kNotFound when none is accepted; another error
  // when the ranks could not agree (a peer gone: no step is chosen). A
  // kFailedPrecondition from `plan` (this run cannot take a sound checkpoint:
  // another layout) is returned at once, not passed over: the run must not
  // start again from step 0 because its checkpoints are not for it.
  Result<LoadedCheckpoint> RestoreNewest(const RestoreOptions& options, const RestorePlanner& plan = nullptr,
                                         std::vector<SkippedCheckpoint>* skipped = nullptr) const;
  // The rank of a restoring world of `world_size` that reads and checksums
  // shard `shard` of a checkpoint saved by `saved_world` ranks:
  // floor(shard * world_size / saved_world), so the shards are spread evenly,
  // in order (each rank gets the shards whose slices start in its own when
  // slices are cut evenly), and every shard has one.
  static int VerifyingRank(int shard, int saved_world, int world_size);

  std::string StepDir(int64_t step) const;

  // The one reader of a corrupt marker (kCorruptMarkerFileName): the reason a
  // trainer wrote into folder `dir` (a step folder, or one moved aside) when
  // it found it corrupt — its first line ("" when it wrote none); nullopt when
  // `dir` is not marked.
  std::optional<std::string> CorruptReason(const std::string& dir) const;

 private:
  // The manifest of step, checked against options.expected_world_size.
  Result<Manifest> ReadManifestFor(int64_t step, const LoadOptions& options) const;
  // Reads rank's whole shard of a verified manifest into memory and checks it.
  Result<LoadedShard> ReadShard(int64_t step, const Manifest& m, int rank, const LoadOptions& options) const;
  // Reads rank's shard header (checked against the manifest) and the buffers
  // named in `names` (absent ones are skipped) without checksumming the file.
  Result<LoadedShard> ReadShardPart(int64_t step, const Manifest& m, int rank, const std::vector<std::string>& names,
                                    const LoadOptions& options) const;
  // Reads more buffers of a shard ReadShardPart began; a name the shard does
  // not have is skipped, or kCorruption when `required`.
  Status ReadBuffers(LoadedShard* shard, const std::vector<std::string>& names, const LoadOptions& options,
                     bool required) const;
  // This rank's own view of step (no exchange with the others).
  Result<LoadedCheckpoint> RestoreHere(int64_t step, const RestoreOptions& options, const RestorePlanner& plan) const;
  // Publishes this rank's verdict on step and gathers everyone's into
  // *verdict (OK when all are). An error when the ranks could not exchange
  // them (no step may be chosen then).
  Status Agree(int64_t step, const Status& mine, const RestoreOptions& options, Status* verdict) const;
  // Tries step folders newest first with try_load; logs and reports the ones passed over.
  template <typename T>
  Result<T> Newest(const std::function<Result<T>(int64_t)>& try_load,
                   std::vector<SkippedCheckpoint>* skipped) const;
  void ReportSkipped(int64_t step, const Status& reason, std::vector<SkippedCheckpoint>* skipped) const;

  // Reads path fully, checks size and checksum against the manifest entry;
  // into *keep (not owned; allocated once the file's size matches the
  // manifest's, which is only a claim) if given, else through scratch buffers.
  Status ReadAndCheck(const std::string& path, const ManifestShard& want, const LoadOptions& options,
                      std::unique_ptr<uint8_t[]>* keep) const;

  const std::string root_;
  Storage* const storage_;  // not owned
};

}  // namespace holdfast
