// CheckpointLoader: finds the newest checkpoint that verifies and returns one
// rank's buffers from it (Load, LoadNewest), or every rank's (LoadAll,
// LoadNewestAll).
//
// Step folders are tried newest first. A folder counts only when its manifest
// parses and its own checksum holds, its world size is the one expected, and
// every shard has the manifest's size and XXH3-64 (LoadOptions::
// verify_all_shards; on by default so that every rank, verifying the same bytes,
// picks the same step). Each folder passed over is reported with the reason
// (SkippedCheckpoint) and logged; a damaged checkpoint therefore costs one
// step back, never a crash loop.
//
// LoadAll / LoadNewestAll are for state that the ranks split between them
// (holdfast-train saves each replicated parameter/moment byte once, a slice per
// rank; docs/checkpoint-format.md): every shard is read and checksummed exactly
// once, into memory that the result keeps, so the caller can assemble the
// whole from all slices. A caller-supplied CheckpointValidator looks at the
// verified contents (slices that do not fit together, say); a checkpoint it
// rejects is skipped like a corrupt one. The library itself still does not
// interpret buffers.
//
// Thread-safety: a CheckpointLoader has no mutable state; it may be used from
// several threads at once if its Storage may.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/format.h"
#include "checkpoint/storage.h"
#include "common/status.h"

namespace holdfast {

struct LoadOptions {
  // Read and checksum every rank's shard, not only the one returned.
  bool verify_all_shards = true;
  // Skip checkpoints of another world size (0 = accept any).
  int expected_world_size = 0;
  size_t read_chunk_bytes = 8u << 20;
  // Drop each file's cached pages before reading it (benchmarks).
  bool drop_cache = false;
};

struct SkippedCheckpoint {
  int64_t step = -1;
  std::string dir;
  Status reason;
};

// A read-only view into a LoadedShard's bytes.
struct ConstBufferView {
  std::string name;
  const uint8_t* data = nullptr;  // owned by the LoadedShard
  size_t size = 0;
};

// One rank's shard of a verified checkpoint. Owns its bytes; move-only.
struct LoadedShard {
  Manifest manifest;
  std::string dir;
  ShardHeader header;
  std::unique_ptr<uint8_t[]> bytes;  // the whole shard file, header.file_size bytes

  // The buffer called name; kNotFound lists the names there are.
  Result<ConstBufferView> Find(const std::string& name) const;
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

class CheckpointLoader {
 public:
  // `storage` is not owned; nullptr = PosixStorage::Default().
  explicit CheckpointLoader(std::string root, Storage* storage = nullptr);

  // Step folders under root (committed or not), newest first. kNotFound when
  // root does not exist.
  Result<std::vector<int64_t>> ListSteps() const;
  // Reads the manifest of step and checks its own checksum only.
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

  std::string StepDir(int64_t step) const;

 private:
  // The manifest of step, checked against options.expected_world_size.
  Result<Manifest> ReadManifestFor(int64_t step, const LoadOptions& options) const;
  // Reads and checks rank's shard of a verified manifest into memory.
  Result<LoadedShard> ReadShard(int64_t step, const Manifest& m, int rank, const LoadOptions& options) const;
  // Tries step folders newest first with try_load; logs and reports the ones passed over.
  template <typename T>
  Result<T> Newest(const std::function<Result<T>(int64_t)>& try_load,
                   std::vector<SkippedCheckpoint>* skipped) const;

  // Reads path fully, checks size and checksum against the manifest entry;
  // into *keep (not owned; allocated once the file's size matches the
  // manifest's, which is only a claim) if given, else through a scratch buffer.
  Status ReadAndCheck(const std::string& path, const ManifestShard& want, const LoadOptions& options,
                      std::unique_ptr<uint8_t[]>* keep) const;

  const std::string root_;
  Storage* const storage_;  // not owned
};

}  // namespace holdfast
