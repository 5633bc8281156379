#include "checkpoint/checkpoint_loader.h"

#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <algorithm>
#include <functional>

namespace holdfast {

Result<ConstBufferView> LoadedShard::Find(const std::string& name) const {
  std::string names;
  for (const ShardEntry& e : header.entries) {
    if (e.name == name) return ConstBufferView{e.name, bytes.get() + e.offset, static_cast<size_t>(e.size)};
    names += (names.empty() ? "" : ", ") + e.name;
  }
  return NotFoundError("checkpoint " + dir + " rank " + std::to_string(header.rank) + " has no buffer '" + name +
                       "' (it has: " + names + ")");
}

std::vector<ConstBufferView> LoadedShard::Buffers() const {
  std::vector<ConstBufferView> out;
  for (const ShardEntry& e : header.entries) {
    out.push_back({e.name, bytes.get() + e.offset, static_cast<size_t>(e.size)});
  }
  return out;
}

CheckpointLoader::CheckpointLoader(std::string root, Storage* storage)
    : root_(std::move(root)), storage_(storage != nullptr ? storage : PosixStorage::Default()) {}

std::string CheckpointLoader::StepDir(int64_t step) const { return root_ + "/" + StepDirName(step); }

Result<std::vector<int64_t>> CheckpointLoader::ListSteps() const {
  HF_ASSIGN_OR_RETURN(std::vector<std::string> names, storage_->ListDir(root_));
  std::vector<int64_t> steps;
  for (const std::string& name : names) {
    int64_t step = ParseStepDirName(name);
    if (step >= 0) steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end(), std::greater<int64_t>());
  return steps;
}

Result<Manifest> CheckpointLoader::ReadManifest(int64_t step) const {
  const std::string path = StepDir(step) + "/" + kManifestFileName;
  Result<std::unique_ptr<ReadableFile>> file = storage_->OpenReadable(path);
  if (!file.ok()) {
    if (file.status().code() == StatusCode::kNotFound) {
      return NotFoundError(path + " does not exist: the save of this step did not finish (or is in progress)");
    }
    return file.status();
  }
  const uint64_t size = (*file)->size();
  if (size > (16u << 20)) return CorruptionError(path + ": implausibly large manifest (" + std::to_string(size) + " bytes)");
  std::string text(static_cast<size_t>(size), '\0');
  HF_RETURN_IF_ERROR((*file)->ReadAt(0, text.size(), text.data()));
  Result<Manifest> m = ParseManifest(text);
  if (!m.ok()) return m.status().WithContext(path);
  if (m->step != step) {
    return CorruptionError(path + ": manifest says step " + std::to_string(m->step) + " but lives in " +
                           StepDirName(step));
  }
  return m;
}

Status CheckpointLoader::ReadAndCheck(const std::string& path, const ManifestShard& want,
                                      const LoadOptions& options, std::unique_ptr<uint8_t[]>* keep) const {
  HF_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> file, storage_->OpenReadable(path));
  if (file->size() != want.size) {
    return CorruptionError(path + " is " + std::to_string(file->size()) + " bytes, the manifest says " +
                           std::to_string(want.size));
  }
  if (options.drop_cache) file->DropCache();
  const size_t chunk = std::max<size_t>(options.read_chunk_bytes, 4096);
  // Memory for the bytes only now that the file has the size the manifest claims.
  std::unique_ptr<uint8_t[]> scratch;
  uint8_t* dst = nullptr;
  if (keep != nullptr) {
    keep->reset(new uint8_t[want.size]);
    dst = keep->get();
  } else {
    scratch.reset(new uint8_t[std::min<uint64_t>(chunk, want.size) + 1]);
  }
  XXH3_state_t* state = XXH3_createState();
  HF_CHECK(state != nullptr);
  XXH3_64bits_reset(state);
  Status s;
  for (uint64_t off = 0; off < want.size && s.ok(); off += chunk) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, want.size - off));
    uint8_t* p = dst != nullptr ? dst + off : scratch.get();
    s = file->ReadAt(off, n, p);
    if (s.ok()) XXH3_64bits_update(state, p, n);
  }
  const uint64_t got = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  HF_RETURN_IF_ERROR(s);
  if (got != want.xxh3) {
    return CorruptionError(path + ": checksum mismatch (xxh3 " + HexU64(got) + ", manifest says " +
                           HexU64(want.xxh3) + ")");
  }
  return Status::Ok();
}

Result<Manifest> CheckpointLoader::Verify(int64_t step, const LoadOptions& options) const {
  HF_ASSIGN_OR_RETURN(Manifest m, ReadManifest(step));
  for (const ManifestShard& shard : m.shards) {
    HF_RETURN_IF_ERROR(ReadAndCheck(StepDir(step) + "/" + shard.file, shard, options, nullptr));
  }
  return m;
}

Result<Manifest> CheckpointLoader::ReadManifestFor(int64_t step, const LoadOptions& options) const {
  HF_ASSIGN_OR_RETURN(Manifest m, ReadManifest(step));
  if (options.expected_world_size > 0 && m.world_size != options.expected_world_size) {
    return FailedPreconditionError(StepDir(step) + " was saved by " + std::to_string(m.world_size) +
                                   " ranks, this run has " + std::to_string(options.expected_world_size));
  }
  return m;
}

Result<LoadedShard> CheckpointLoader::ReadShard(int64_t step, const Manifest& m, int rank,
                                                const LoadOptions& options) const {
  LoadedShard out;
  out.dir = StepDir(step);
  out.manifest = m;
  const ManifestShard& mine = m.shards[rank];
  const std::string path = out.dir + "/" + mine.file;
  HF_RETURN_IF_ERROR(ReadAndCheck(path, mine, options, &out.bytes));
  Result<ShardHeader> header = ParseShardHeader(out.bytes.get(), mine.size, mine.size);
  if (!header.ok()) return header.status().WithContext(path);
  out.header = std::move(header).value();
  if (out.header.step != step || out.header.rank != rank || out.header.world_size != m.world_size ||
      out.header.file_size != mine.size) {
    return CorruptionError(path + ": header (step " + std::to_string(out.header.step) + ", rank " +
                           std::to_string(out.header.rank) + " of " + std::to_string(out.header.world_size) +
                           ") does not match its manifest");
  }
  return out;
}

Result<LoadedShard> CheckpointLoader::Load(int64_t step, int rank, const LoadOptions& options) const {
  HF_ASSIGN_OR_RETURN(Manifest m, ReadManifestFor(step, options));
  if (rank < 0 || rank >= m.world_size) {
    return FailedPreconditionError(StepDir(step) + " has no shard for rank " + std::to_string(rank) +
                                   " (world size " + std::to_string(m.world_size) + ")");
  }
  if (options.verify_all_shards) {
    for (const ManifestShard& shard : m.shards) {
      if (shard.rank == rank) continue;
      HF_RETURN_IF_ERROR(ReadAndCheck(StepDir(step) + "/" + shard.file, shard, options, nullptr));
    }
  }
  return ReadShard(step, m, rank, options);
}

Result<LoadedCheckpoint> CheckpointLoader::LoadAll(int64_t step, const LoadOptions& options,
                                                   const CheckpointValidator& validate) const {
  LoadedCheckpoint out;
  out.dir = StepDir(step);
  HF_ASSIGN_OR_RETURN(out.manifest, ReadManifestFor(step, options));
  out.shards.reserve(out.manifest.shards.size());
  for (int rank = 0; rank < out.manifest.world_size; ++rank) {
    HF_ASSIGN_OR_RETURN(LoadedShard shard, ReadShard(step, out.manifest, rank, options));
    out.shards.push_back(std::move(shard));
  }
  if (validate) HF_RETURN_IF_ERROR(validate(out).WithContext(out.dir));
  return out;
}

template <typename T>
Result<T> CheckpointLoader::Newest(const std::function<Result<T>(int64_t)>& try_load,
                                   std::vector<SkippedCheckpoint>* skipped) const {
  Result<std::vector<int64_t>> steps = ListSteps();
  if (!steps.ok()) {
    if (steps.status().code() == StatusCode::kNotFound) {
      return NotFoundError("no checkpoint to resume from: " + steps.status().message());
    }
    return steps.status();
  }
  for (int64_t step : *steps) {
    Result<T> loaded = try_load(step);
    if (loaded.ok()) return loaded;
    spdlog::warn("checkpoint: skipping step {}: {}", step, loaded.status().ToString());
    if (skipped != nullptr) skipped->push_back({step, StepDir(step), loaded.status()});
  }
  return NotFoundError("no checkpoint under " + root_ + " verifies (" + std::to_string(steps->size()) +
                       " step folders tried)");
}

Result<LoadedShard> CheckpointLoader::LoadNewest(int rank, const LoadOptions& options,
                                                 std::vector<SkippedCheckpoint>* skipped) const {
  return Newest<LoadedShard>([&](int64_t step) { return Load(step, rank, options); }, skipped);
}

Result<LoadedCheckpoint> CheckpointLoader::LoadNewestAll(const LoadOptions& options,
                                                         std::vector<SkippedCheckpoint>* skipped,
                                                         const CheckpointValidator& validate) const {
  return Newest<LoadedCheckpoint>([&](int64_t step) { return LoadAll(step, options, validate); }, skipped);
}

}  // namespace holdfast
