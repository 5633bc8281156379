#include "checkpoint/checkpoint_loader.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <functional>

namespace holdfast {
namespace {

std::string StepsKey() { return "restore/steps"; }
// The prefix of a step's verdict keys: "<prefix>done" (ranks that gave
// theirs), "<prefix>failures" (how many failed), "<prefix>failure/<k>" ("<rank>
// <code> <message>"), "<prefix>all" (set by the last rank).
std::string VerdictKey(int64_t step) { return "restore/" + std::to_string(step) + "/"; }
std::vector<uint8_t> Bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }
std::string Text(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

// A Status as "<code number> <message>" ("ok" when OK), for the Store.
std::string EncodeStatus(const Status& s) {
  if (s.ok()) return "ok";
  return std::to_string(static_cast<int>(s.code())) + " " + s.message();
}
Status DecodeStatus(const std::string& text) {
  if (text == "ok") return Status::Ok();
  char* end = nullptr;
  const long code = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != ' ' || code <= static_cast<long>(StatusCode::kOk) ||
      code > static_cast<long>(StatusCode::kInternal)) {
    return UnavailableError("unreadable verdict '" + text + "'");
  }
  return Status(static_cast<StatusCode>(code), std::string(end + 1));
}

OverlappedReadOptions ReadOptions(const LoadOptions& o) {
  OverlappedReadOptions r;
  r.chunk_bytes = std::max<size_t>(o.read_chunk_bytes, 4096);
  r.threads = o.read_threads;
  r.lead = std::max(4, 2 * o.read_threads);
  return r;
}

}  // namespace

bool LoadedShard::IsRead(size_t i) const {
  return i < header.entries.size() && (bytes != nullptr || (i < pieces.size() && pieces[i] != nullptr));
}

Result<ConstBufferView> LoadedShard::Find(const std::string& name) const {
  std::string names;
  for (size_t i = 0; i < header.entries.size(); ++i) {
    const ShardEntry& e = header.entries[i];
    if (e.name == name) {
      if (!IsRead(i)) {
        return FailedPreconditionError("checkpoint " + dir + " rank " + std::to_string(header.rank) + ": buffer '" +
                                       name + "' was not read by this process");
      }
      return Buffers()[i];
    }
    names += (names.empty() ? "" : ", ") + e.name;
  }
  return NotFoundError("checkpoint " + dir + " rank " + std::to_string(header.rank) + " has no buffer '" + name +
                       "' (it has: " + names + ")");
}

std::vector<ConstBufferView> LoadedShard::Buffers() const {
  std::vector<ConstBufferView> out;
  for (size_t i = 0; i < header.entries.size(); ++i) {
    const ShardEntry& e = header.entries[i];
    const uint8_t* data = nullptr;
    if (bytes != nullptr) {
      data = bytes.get() + e.offset;
    } else if (i < pieces.size()) {
      data = pieces[i].get();
    }
    out.push_back({e.name, data, static_cast<size_t>(e.size)});
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

Status CheckpointLoader::ReadAndCheck(const std::string& path, const ManifestShard& want, const LoadOptions& options,
                                      std::unique_ptr<uint8_t[]>* keep) const {
  {
    HF_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> file, storage_->OpenReadable(path));
    if (file->size() != want.size) {
      return CorruptionError(path + " is " + std::to_string(file->size()) + " bytes, the manifest says " +
                             std::to_string(want.size));
    }
    if (options.drop_cache) file->DropCache();
  }
  // Memory for the bytes only now that the file has the size the manifest claims.
  uint8_t* dst = nullptr;
  if (keep != nullptr) {
    keep->reset(new uint8_t[want.size]);
    dst = keep->get();
  }
  Xxh3Stream sum;
  const Status s = ReadOverlapped(storage_, path, 0, want.size, dst, ReadOptions(options),
                                  [&sum](const uint8_t* p, size_t n) { sum.Update(p, n); });
  const uint64_t got = sum.Digest();
  HF_RETURN_IF_ERROR(s);
  if (got != want.xxh3) {
    return CorruptionError(path + ": checksum mismatch (xxh3 " + HexU64(got) + ", manifest says " +
                           HexU64(want.xxh3) + ")");
  }
  return Status::Ok();
}

const char* InspectDepthName(InspectDepth depth) {
  switch (depth) {
    case InspectDepth::kManifest: return "manifest";
    case InspectDepth::kSizes: return "sizes";
    case InspectDepth::kChecksums: return "checksums";
  }
  return "?";
}

std::optional<std::string> CheckpointLoader::CorruptReason(const std::string& dir) const {
  auto marker = storage_->OpenReadable(dir + "/" + kCorruptMarkerFileName);
  if (!marker.ok()) return std::nullopt;
  std::string text(static_cast<size_t>(std::min<uint64_t>((*marker)->size(), 4096)), '\0');
  if (!text.empty() && !(*marker)->ReadAt(0, text.size(), text.data()).ok()) text.clear();
  return text.substr(0, text.find_first_of("\r\n"));
}

Result<Manifest> CheckpointLoader::Inspect(int64_t step, InspectDepth depth, const LoadOptions& options) const {
  const std::string dir = StepDir(step);
  // A trainer that found the step corrupt marked it: it never loads again.
  if (const std::optional<std::string> why = CorruptReason(dir)) {
    return CorruptionError(dir + " is marked corrupt by a trainer" + (why->empty() ? "" : ": " + *why));
  }
  HF_ASSIGN_OR_RETURN(Manifest m, ReadManifest(step));
  if (depth == InspectDepth::kManifest) return m;
  for (const ManifestShard& shard : m.shards) {
    const std::string path = dir + "/" + shard.file;
    if (depth == InspectDepth::kChecksums) {
      HF_RETURN_IF_ERROR(ReadAndCheck(path, shard, options, nullptr));
      continue;
    }
    auto file = storage_->OpenReadable(path);
    if (!file.ok()) {
      if (file.status().code() == StatusCode::kNotFound) {
        return NotFoundError(dir + ": shard " + shard.file + " is missing (pruned, or the save was damaged)");
      }
      return file.status().WithContext(path);
    }
    if ((*file)->size() != shard.size) {
      return CorruptionError(dir + ": shard " + shard.file + " is " + std::to_string((*file)->size()) +
                             " bytes, the manifest says " + std::to_string(shard.size) + " (truncated or damaged)");
    }
  }
  return m;
}

Result<Manifest> CheckpointLoader::Verify(int64_t step, const LoadOptions& options) const {
  return Inspect(step, InspectDepth::kChecksums, options);
}

Result<Manifest> CheckpointLoader::ReadManifestFor(int64_t step, const LoadOptions& options) const {
  HF_ASSIGN_OR_RETURN(Manifest m, ReadManifest(step));
  if (options.expected_world_size > 0 && m.world_size != options.expected_world_size) {
    return FailedPreconditionError(StepDir(step) + " was saved by " + std::to_string(m.world_size) +
                                   " ranks, this run has " + std::to_string(options.expected_world_size));
  }
  return m;
}

namespace {

Status CheckHeaderAgainstManifest(const std::string& path, const ShardHeader& h, int64_t step, int rank,
                                  const Manifest& m) {
  if (h.step != step || h.rank != rank || h.world_size != m.world_size || h.file_size != m.shards[rank].size) {
    return CorruptionError(path + ": header (step " + std::to_string(h.step) + ", rank " + std::to_string(h.rank) +
                           " of " + std::to_string(h.world_size) + ") does not match its manifest");
  }
  return Status::Ok();
}

}  // namespace

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
  HF_RETURN_IF_ERROR(CheckHeaderAgainstManifest(path, out.header, step, rank, m));
  return out;
}

Result<LoadedShard> CheckpointLoader::ReadShardPart(int64_t step, const Manifest& m, int rank,
                                                    const std::vector<std::string>& names,
                                                    const LoadOptions& options) const {
  LoadedShard out;
  out.dir = StepDir(step);
  out.manifest = m;
  const ManifestShard& mine = m.shards[rank];
  const std::string path = out.dir + "/" + mine.file;
  HF_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> file, storage_->OpenReadable(path));
  if (file->size() != mine.size) {
    return CorruptionError(path + " is " + std::to_string(file->size()) + " bytes, the manifest says " +
                           std::to_string(mine.size));
  }
  if (options.drop_cache) file->DropCache();
  // The fixed part says how long the header is; the header's own checksum
  // covers the buffer table (the rest of the file is checksummed by the rank
  // that verifies this shard).
  uint8_t fixed[kShardFixedHeaderSize];
  const size_t fixed_n = static_cast<size_t>(std::min<uint64_t>(sizeof(fixed), mine.size));
  HF_RETURN_IF_ERROR(file->ReadAt(0, fixed_n, fixed));
  Result<uint32_t> header_size = PeekShardHeaderSize(fixed, fixed_n);
  if (!header_size.ok()) return header_size.status().WithContext(path);
  std::vector<uint8_t> head(static_cast<size_t>(std::min<uint64_t>(*header_size, mine.size)));
  HF_RETURN_IF_ERROR(file->ReadAt(0, head.size(), head.data()));
  Result<ShardHeader> header = ParseShardHeader(head.data(), head.size(), mine.size);
  if (!header.ok()) return header.status().WithContext(path);
  out.header = std::move(header).value();
  HF_RETURN_IF_ERROR(CheckHeaderAgainstManifest(path, out.header, step, rank, m));
  out.pieces.resize(out.header.entries.size());
  HF_RETURN_IF_ERROR(ReadBuffers(&out, names, options, /*required=*/false));
  return out;
}

Status CheckpointLoader::ReadBuffers(LoadedShard* shard, const std::vector<std::string>& names,
                                     const LoadOptions& options, bool required) const {
  const std::string path = shard->dir + "/" + shard->manifest.shards[shard->header.rank].file;
  for (const std::string& name : names) {
    size_t i = 0;
    while (i < shard->header.entries.size() && shard->header.entries[i].name != name) ++i;
    if (i == shard->header.entries.size()) {
      if (!required) continue;
      return CorruptionError(path + " has no buffer '" + name + "'");
    }
    if (shard->IsRead(i)) continue;
    const ShardEntry& e = shard->header.entries[i];
    std::unique_ptr<uint8_t[]> piece(new uint8_t[std::max<uint64_t>(e.size, 1)]);
    // Nothing to checksum here (the verifying rank does): read on this thread.
    OverlappedReadOptions plain = ReadOptions(options);
    plain.threads = 0;
    HF_RETURN_IF_ERROR(ReadOverlapped(storage_, path, e.offset, e.size, piece.get(), plain, nullptr));
    shard->pieces[i] = std::move(piece);
  }
  return Status::Ok();
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

int CheckpointLoader::VerifyingRank(int shard, int saved_world, int world_size) {
  HF_CHECK(saved_world >= 1 && world_size >= 1 && shard >= 0 && shard < saved_world);
  return static_cast<int>(static_cast<int64_t>(shard) * world_size / saved_world);
}

Result<LoadedCheckpoint> CheckpointLoader::RestoreHere(int64_t step, const RestoreOptions& options,
                                                       const RestorePlanner& plan) const {
  LoadedCheckpoint out;
  out.dir = StepDir(step);
  HF_ASSIGN_OR_RETURN(out.manifest, ReadManifest(step));
  const int saved = out.manifest.world_size;
  auto mine = [&](int s) { return VerifyingRank(s, saved, options.world_size) == options.rank; };
  // In rank order, each shard held only once it was read (a manifest's world
  // size is only a claim until its files are there).
  for (int s = 0; s < saved; ++s) {
    HF_ASSIGN_OR_RETURN(LoadedShard shard, mine(s) ? ReadShard(step, out.manifest, s, options.load)
                                                   : ReadShardPart(step, out.manifest, s, options.preview_buffers,
                                                                   options.load));
    out.shards.push_back(std::move(shard));
  }
  if (plan) {
    Result<std::vector<std::vector<std::string>>> want = plan(out);
    if (!want.ok()) return want.status().WithContext(out.dir);
    if (want->size() != static_cast<size_t>(saved)) {
      return InternalError("the restore plan names buffers for " + std::to_string(want->size()) + " shards, " +
                           out.dir + " has " + std::to_string(saved));
    }
    for (int s = 0; s < saved; ++s) {
      if (mine(s)) continue;
      HF_RETURN_IF_ERROR(ReadBuffers(&out.shards[s], (*want)[s], options.load, /*required=*/true));
    }
  }
  return out;
}

Status CheckpointLoader::Agree(int64_t step, const Status& mine, const RestoreOptions& options,
                               Status* verdict) const {
  if (options.world_size <= 1) {
    *verdict = mine;
    return Status::Ok();
  }
  if (options.store == nullptr) {
    return InvalidArgumentError("a restore by " + std::to_string(options.world_size) + " ranks needs a store");
  }
  // O(world) store requests in all, not world^2: a failing rank files its
  // failure under the next number of a counter, every rank counts itself done
  // after that, and the last one to do so opens the gate everyone waits at;
  // then each reads the (usually no) failures filed.
  Store& store = *options.store;
  const std::string key = VerdictKey(step);
  const std::string where = "checkpoint step " + std::to_string(step) + ": ";
  if (!mine.ok()) {
    HF_ASSIGN_OR_RETURN(int64_t k, store.Add(key + "failures", 1));
    HF_RETURN_IF_ERROR(
        store.Set(key + "failure/" + std::to_string(k), Bytes(std::to_string(options.rank) + " " + EncodeStatus(mine)))
            .WithContext(where + "publishing this rank's verdict"));
  }
  HF_ASSIGN_OR_RETURN(int64_t done, store.Add(key + "done", 1));
  if (done == options.world_size) HF_RETURN_IF_ERROR(store.Set(key + "all", Bytes("done")));
  HF_RETURN_IF_ERROR(store.Wait({key + "all"}, options.peer_timeout).WithContext(where + "waiting for every rank's verdict"));
  HF_ASSIGN_OR_RETURN(int64_t failures, store.Add(key + "failures", 0));
  // The lowest rank's failure, a corruption first (so that it is set aside).
  int best_rank = -1;
  Status best;
  for (int64_t k = 1; k <= failures; ++k) {
    HF_ASSIGN_OR_RETURN(std::vector<uint8_t> value, store.Get(key + "failure/" + std::to_string(k), options.peer_timeout));
    const std::string text = Text(value);
    char* end = nullptr;
    const long rank = std::strtol(text.c_str(), &end, 10);
    Status theirs = *end == ' ' ? DecodeStatus(end + 1) : UnavailableError("unreadable verdict '" + text + "'");
    if (theirs.ok()) theirs = UnavailableError("unreadable verdict '" + text + "'");
    const bool corrupt = theirs.code() == StatusCode::kCorruption;
    const bool best_corrupt = best_rank >= 0 && best.code() == StatusCode::kCorruption;
    if (best_rank < 0 || (corrupt && !best_corrupt) || (corrupt == best_corrupt && rank < best_rank)) {
      best_rank = static_cast<int>(rank);
      best = Status(theirs.code(), "rank " + std::to_string(rank) + ": " + theirs.message());
    }
  }
  *verdict = best;
  return Status::Ok();
}

Result<LoadedCheckpoint> CheckpointLoader::Restore(int64_t step, const RestoreOptions& options,
                                                   const RestorePlanner& plan) const {
  Result<LoadedCheckpoint> here = RestoreHere(step, options, plan);
  Status verdict;
  HF_RETURN_IF_ERROR(Agree(step, here.status(), options, &verdict));
  if (!verdict.ok()) return verdict;
  return here;
}

void CheckpointLoader::ReportSkipped(int64_t step, const Status& reason,
                                     std::vector<SkippedCheckpoint>* skipped) const {
  spdlog::warn("checkpoint: skipping step {}: {}", step, reason.ToString());
  if (skipped != nullptr) skipped->push_back({step, StepDir(step), reason});
}

Result<LoadedCheckpoint> CheckpointLoader::RestoreNewest(const RestoreOptions& options, const RestorePlanner& plan,
                                                         std::vector<SkippedCheckpoint>* skipped) const {
  // Rank 0's list of step folders is everyone's, so that all ranks try the
  // same steps in the same order whatever each of them sees.
  Result<std::vector<int64_t>> steps = std::vector<int64_t>{};
  if (options.world_size > 1 && options.rank != 0) {
    if (options.store == nullptr) {
      return InvalidArgumentError("a restore by " + std::to_string(options.world_size) + " ranks needs a store");
    }
    HF_ASSIGN_OR_RETURN(std::vector<uint8_t> value, options.store->Get(StepsKey(), options.peer_timeout));
    const std::string text = Text(value);
    if (text.rfind("steps", 0) == 0) {
      std::vector<int64_t> list;
      const char* p = text.c_str() + 5;
      char* end = nullptr;
      for (long long v = std::strtoll(p, &end, 10); end != p; v = std::strtoll(p, &end, 10)) {
        list.push_back(v);
        p = end;
      }
      steps = std::move(list);
    } else {
      const Status failed = DecodeStatus(text);
      steps = failed.ok() ? UnavailableError("rank 0 published no list of steps: '" + text + "'") : failed;
    }
  } else {
    steps = ListSteps();
    if (options.world_size > 1) {
      if (options.store == nullptr) {
        return InvalidArgumentError("a restore by " + std::to_string(options.world_size) + " ranks needs a store");
      }
      std::string text = "steps";
      if (steps.ok()) {
        for (int64_t step : *steps) text += " " + std::to_string(step);
      } else {
        text = EncodeStatus(steps.status());
      }
      HF_RETURN_IF_ERROR(options.store->Set(StepsKey(), Bytes(text)).WithContext("publishing the steps to restore"));
    }
  }
  if (!steps.ok()) {
    if (steps.status().code() == StatusCode::kNotFound) {
      return NotFoundError("no checkpoint to resume from: " + steps.status().message());
    }
    return steps.status();
  }
  for (int64_t step : *steps) {
    Result<LoadedCheckpoint> here = RestoreHere(step, options, plan);
    Status verdict;
    HF_RETURN_IF_ERROR(Agree(step, here.status(), options, &verdict));
    if (verdict.ok()) return here;
    // A sound checkpoint this run cannot take (the planner's kFailedPrecondition:
    // another layout): the older ones would be refused alike, and passing over
    // them all would start the run again from step 0.
    if (verdict.code() == StatusCode::kFailedPrecondition) return verdict;
    ReportSkipped(step, verdict, skipped);
  }
  return NotFoundError("no checkpoint under " + root_ + " verifies (" + std::to_string(steps->size()) +
                       " step folders tried)");
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
    ReportSkipped(step, loaded.status(), skipped);
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
