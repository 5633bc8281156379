// CheckpointLoader::LoadAll / LoadNewestAll: every rank's shard of a
// checkpoint, each read once, and caller validation that skips a checkpoint
// like a corrupt one. Restore / RestoreNewest: the ranks of a restoring world
// (threads sharing an in-memory store) split the verification, read only what
// they need, and agree on the step. Real files in a temporary folder.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <set>
#include <thread>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>

#include "checkpoint/checkpoint_loader.h"
#include "checkpoint/checkpoint_writer.h"
#include "common/memory_store.h"
#include "tests/support/subprocess.h"

namespace holdfast {
namespace {

// One temporary folder per test, removed after it (HOLDFAST_KEEP_TEST_DIRS keeps it).
class TempDir : public testing::TempDir {
 public:
  TempDir() : testing::TempDir("ckpt_loader_test") {}
};

// Passes everything to PosixStorage and counts the bytes read from each file.
class CountingStorage final : public Storage {
 public:
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    return base_->NewWritableFile(path);
  }
  Result<std::unique_ptr<ReadableFile>> OpenReadable(const std::string& path) override {
    HF_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> file, base_->OpenReadable(path));
    return std::unique_ptr<ReadableFile>(new CountingFile(std::move(file), this, path));
  }
  Status Rename(const std::string& from, const std::string& to) override { return base_->Rename(from, to); }
  Status Unlink(const std::string& path) override { return base_->Unlink(path); }
  Status MakeDir(const std::string& path) override { return base_->MakeDir(path); }
  Status RemoveDir(const std::string& path) override { return base_->RemoveDir(path); }
  Status SyncDir(const std::string& path) override { return base_->SyncDir(path); }
  Result<std::vector<std::string>> ListDir(const std::string& path) override { return base_->ListDir(path); }
  Result<bool> Exists(const std::string& path) override { return base_->Exists(path); }

  std::map<std::string, uint64_t> bytes_read() const {
    std::lock_guard<std::mutex> lock(mu_);
    return bytes_read_;
  }

 private:
  class CountingFile final : public ReadableFile {
   public:
    CountingFile(std::unique_ptr<ReadableFile> base, CountingStorage* owner, std::string path)
        : base_(std::move(base)), owner_(owner), path_(std::move(path)) {}
    uint64_t size() const override { return base_->size(); }
    Status ReadAt(uint64_t offset, size_t n, void* dst) override {
      {
        std::lock_guard<std::mutex> lock(owner_->mu_);
        owner_->bytes_read_[path_] += n;
      }
      return base_->ReadAt(offset, n, dst);
    }

   private:
    std::unique_ptr<ReadableFile> base_;
    CountingStorage* const owner_;  // not owned
    const std::string path_;
  };

  Storage* const base_ = PosixStorage::Default();
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> bytes_read_;  // guarded by mu_
};

// Rank r's slice of a replicated buffer, tagged with the step.
std::vector<float> Slice(int64_t step, int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(step * 100000 + rank * 1000 + i);
  return v;
}

// Saves step from `world` ranks, rank r holding its own meta and two slices
// of 100 + r floats: "params" (Slice(step, r)) and "optim" (Slice(step + 1000, r)).
void SaveAllRanks(const std::string& root, int64_t step, int world) {
  auto store = std::make_shared<InMemoryStore>();
  std::vector<std::unique_ptr<CheckpointWriter>> writers;
  std::vector<std::string> metas;
  std::vector<std::vector<float>> slices;
  for (int r = 0; r < world; ++r) {
    CheckpointWriterOptions o;
    o.root = root;
    o.rank = r;
    o.world_size = world;
    o.layout = "dp=" + std::to_string(world);
    o.config_hash = "cfg";
    o.store = store;
    o.retention.keep_last = 100;
    auto w = CheckpointWriter::Create(o);
    HF_CHECK_MSG(w.ok(), w.status().ToString());
    writers.push_back(std::move(w).value());
    metas.push_back("{\"rank\": " + std::to_string(r) + "}");
    slices.push_back(Slice(step, r, 100 + r));
  }
  std::vector<std::vector<float>> moments;
  for (int r = 0; r < world; ++r) moments.push_back(Slice(step + 1000, r, 100 + r));
  for (int r = 0; r < world; ++r) {
    std::vector<BufferView> views = {{"meta", metas[r].data(), metas[r].size()},
                                     {"params", slices[r].data(), slices[r].size() * sizeof(float), true},
                                     {"optim", moments[r].data(), moments[r].size() * sizeof(float), true}};
    HF_CHECK(writers[r]->Save(step, views).ok());
  }
  for (auto& w : writers) HF_CHECK(w->Flush().ok());
}

TEST(CheckpointLoaderAllTest, LoadAllReturnsEveryRankReadingEachFileOnce) {
  TempDir tmp;
  SaveAllRanks(tmp.path(), 5, 3);
  CountingStorage storage;
  CheckpointLoader loader(tmp.path(), &storage);
  LoadOptions lo;
  lo.read_chunk_bytes = 4096;  // several reads per shard
  Result<LoadedCheckpoint> got = loader.LoadAll(5, lo);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->manifest.step, 5);
  ASSERT_EQ(got->shards.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    const LoadedShard& shard = got->shards[r];
    EXPECT_EQ(shard.header.rank, r);
    Result<ConstBufferView> meta = shard.Find("meta");
    ASSERT_TRUE(meta.ok());
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(meta->data), meta->size),
              "{\"rank\": " + std::to_string(r) + "}");
    Result<ConstBufferView> params = shard.Find("params");
    ASSERT_TRUE(params.ok());
    std::vector<float> want = Slice(5, r, 100 + r);
    ASSERT_EQ(params->size, want.size() * sizeof(float));
    EXPECT_EQ(std::memcmp(params->data, want.data(), params->size), 0) << "rank " << r;
  }
  // Every file was read exactly once, all of it.
  for (const ManifestShard& s : got->manifest.shards) {
    EXPECT_EQ(storage.bytes_read()[got->dir + "/" + s.file], s.size) << s.file;
  }
}

// Inspect is the one answer to "can this step be loaded", at three depths:
// each damage is found at the shallowest depth that can see it, never above.
TEST(CheckpointInspectTest, EachDepthSeesWhatItLooksAtAndNothingMore) {
  TempDir tmp;
  for (int64_t step : {1, 2, 3, 4}) SaveAllRanks(tmp.path(), step, 2);
  CheckpointLoader loader(tmp.path());
  const std::string shard1 = [&] { return loader.StepDir(2) + "/" + ShardFileName(1, 2); }();
  // Step 2: shard 1 truncated by one byte.
  std::filesystem::resize_file(shard1, std::filesystem::file_size(shard1) - 1);
  // Step 3: one byte of shard 0 flipped, size kept.
  {
    const std::string p = loader.StepDir(3) + "/" + ShardFileName(0, 2);
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(p) - 5));
    f.put('\x5a');
  }
  // Step 4: marked corrupt by a trainer.
  std::ofstream(loader.StepDir(4) + "/" + kCorruptMarkerFileName) << "shard 1: xxh3 mismatch\n";
  for (InspectDepth d : {InspectDepth::kManifest, InspectDepth::kSizes, InspectDepth::kChecksums}) {
    EXPECT_TRUE(loader.Inspect(1, d).ok()) << InspectDepthName(d);
    Result<Manifest> marked = loader.Inspect(4, d);
    ASSERT_FALSE(marked.ok()) << InspectDepthName(d);
    EXPECT_EQ(marked.status().code(), StatusCode::kCorruption);
    EXPECT_NE(marked.status().message().find("marked corrupt by a trainer: shard 1: xxh3 mismatch"), std::string::npos)
        << marked.status().message();
  }
  EXPECT_TRUE(loader.Inspect(2, InspectDepth::kManifest).ok());
  Result<Manifest> truncated = loader.Inspect(2, InspectDepth::kSizes);
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.status().message().find("truncated or damaged"), std::string::npos)
      << truncated.status().message();
  EXPECT_FALSE(loader.Inspect(2, InspectDepth::kChecksums).ok());
  EXPECT_TRUE(loader.Inspect(3, InspectDepth::kSizes).ok()) << "a flipped byte keeps the size";
  Result<Manifest> flipped = loader.Inspect(3, InspectDepth::kChecksums);
  ASSERT_FALSE(flipped.ok());
  EXPECT_NE(flipped.status().message().find("checksum mismatch"), std::string::npos) << flipped.status().message();
  // A missing shard is kNotFound at kSizes.
  std::filesystem::remove(loader.StepDir(1) + "/" + ShardFileName(0, 2));
  Result<Manifest> missing = loader.Inspect(1, InspectDepth::kSizes);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound) << missing.status().ToString();
}

TEST(CheckpointLoaderAllTest, ARejectedCheckpointIsSkippedForTheNewestThatPasses) {
  TempDir tmp;
  SaveAllRanks(tmp.path(), 1, 2);
  SaveAllRanks(tmp.path(), 2, 2);
  SaveAllRanks(tmp.path(), 3, 2);
  // Step 3 loses a byte of rank 1's shard: corrupt, skipped by the loader itself.
  {
    const std::string path = tmp.path() + "/step-000000000003/shard-00001-of-00002.bin";
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  CheckpointLoader loader(tmp.path());
  // Step 2 is rejected by the caller's check (as the trainer rejects slices that do not fit).
  CheckpointValidator validate = [](const LoadedCheckpoint& c) {
    if (c.manifest.step == 2) return CorruptionError("shard-00001-of-00002.bin: slice overlaps rank 0's");
    return Status::Ok();
  };
  std::vector<SkippedCheckpoint> skipped;
  Result<LoadedCheckpoint> got = loader.LoadNewestAll({}, &skipped, validate);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->manifest.step, 1);
  ASSERT_EQ(got->shards.size(), 2u);
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_EQ(skipped[0].step, 3);
  EXPECT_NE(skipped[0].reason.message().find("checksum mismatch"), std::string::npos) << skipped[0].reason.ToString();
  EXPECT_EQ(skipped[1].step, 2);
  EXPECT_EQ(skipped[1].reason.code(), StatusCode::kCorruption);
  EXPECT_NE(skipped[1].reason.message().find("step-000000000002: shard-00001-of-00002.bin: slice overlaps"),
            std::string::npos)
      << skipped[1].reason.ToString();

  // LoadAll of a chosen step applies the same check.
  EXPECT_EQ(loader.LoadAll(2, {}, validate).status().code(), StatusCode::kCorruption);
  EXPECT_TRUE(loader.LoadAll(2).ok());
  // Another world size is passed over; none left is kNotFound.
  LoadOptions other;
  other.expected_world_size = 4;
  EXPECT_EQ(loader.LoadNewestAll(other).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(loader.LoadAll(1, other).status().code(), StatusCode::kFailedPrecondition);
}

TEST(CheckpointLoaderAllTest, AManifestClaimingAHugeShardIsSkippedNotAllocated) {
  // A manifest rewritten with a valid checksum (a buggy writer, a hand edit)
  // claims a 1 PiB shard: the loader must find the file too small and fall
  // back to the previous checkpoint, not try to allocate the claim first.
  TempDir tmp;
  SaveAllRanks(tmp.path(), 1, 1);
  SaveAllRanks(tmp.path(), 2, 1);
  CheckpointLoader loader(tmp.path());
  Result<Manifest> m = loader.ReadManifest(2);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  m->shards[0].size = uint64_t{1} << 50;
  std::ofstream(tmp.path() + "/step-000000000002/" + kManifestFileName, std::ios::trunc) << EncodeManifest(*m);

  for (bool all : {false, true}) {
    std::vector<SkippedCheckpoint> skipped;
    const int64_t step = all ? (loader.LoadNewestAll({}, &skipped).ok() ? 1 : -1)
                             : (loader.LoadNewest(0, {}, &skipped).ok() ? 1 : -1);
    EXPECT_EQ(step, 1) << (all ? "LoadNewestAll" : "LoadNewest");
    ASSERT_EQ(skipped.size(), 1u);
    EXPECT_EQ(skipped[0].step, 2);
    EXPECT_NE(skipped[0].reason.message().find("the manifest says 1125899906842624"), std::string::npos)
        << skipped[0].reason.ToString();
  }
}

// --- Restore: a restoring world of ranks (threads) over one in-memory store.

// Passes everything to PosixStorage, except that it hides the step folders
// whose names contain `hide` (as if this rank's view of the file system lacked them).
class HidingStorage final : public Storage {
 public:
  explicit HidingStorage(std::string hide) : hide_(std::move(hide)) {}
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& p) override {
    return base_->NewWritableFile(p);
  }
  Result<std::unique_ptr<ReadableFile>> OpenReadable(const std::string& path) override {
    if (path.find(hide_) != std::string::npos) return NotFoundError("open " + path + ": hidden");
    return base_->OpenReadable(path);
  }
  Status Rename(const std::string& a, const std::string& b) override { return base_->Rename(a, b); }
  Status Unlink(const std::string& p) override { return base_->Unlink(p); }
  Status MakeDir(const std::string& p) override { return base_->MakeDir(p); }
  Status RemoveDir(const std::string& p) override { return base_->RemoveDir(p); }
  Status SyncDir(const std::string& p) override { return base_->SyncDir(p); }
  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    HF_ASSIGN_OR_RETURN(std::vector<std::string> names, base_->ListDir(path));
    std::vector<std::string> out;
    for (std::string& n : names) {
      if (n.find(hide_) == std::string::npos) out.push_back(std::move(n));
    }
    return out;
  }
  Result<bool> Exists(const std::string& p) override { return base_->Exists(p); }

 private:
  Storage* const base_ = PosixStorage::Default();
  const std::string hide_;
};

// What one rank of a restore got.
struct RankRestore {
  std::optional<Result<LoadedCheckpoint>> got;
  std::vector<SkippedCheckpoint> skipped;
  std::map<std::string, uint64_t> read;  // bytes this rank read, by file
};

// Every shard's "params" (what holdfast-train reads of the shards it does not verify).
RestorePlanner ParamsOfEveryShard() {
  return [](const LoadedCheckpoint& c) -> Result<std::vector<std::vector<std::string>>> {
    return std::vector<std::vector<std::string>>(c.shards.size(), {"params"});
  };
}

// Runs RestoreNewest (step < 0) or Restore(step) on ranks [0, ranks) of a
// world of `world` at once, each through its own storage (storage_for(rank),
// null = a CountingStorage) and planner (plan_for(rank)).
std::vector<RankRestore> RestoreOnRanks(
    const std::string& root, int world, int64_t step, const std::function<RestorePlanner(int)>& plan_for,
    int ranks = -1, const std::function<Storage*(int)>& storage_for = nullptr,
    std::chrono::milliseconds peer_timeout = std::chrono::seconds(60)) {
  if (ranks < 0) ranks = world;
  auto store = std::make_shared<InMemoryStore>();
  std::vector<RankRestore> out(ranks);
  std::vector<std::unique_ptr<CountingStorage>> counting(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      Storage* storage = storage_for ? storage_for(r) : nullptr;
      if (storage == nullptr) {
        counting[r] = std::make_unique<CountingStorage>();
        storage = counting[r].get();
      }
      CheckpointLoader loader(root, storage);
      RestoreOptions o;
      o.rank = r;
      o.world_size = world;
      o.store = store;
      o.peer_timeout = peer_timeout;
      o.load.read_chunk_bytes = 256;  // several reads per buffer
      out[r].got = step < 0 ? loader.RestoreNewest(o, plan_for(r), &out[r].skipped) : loader.Restore(step, o, plan_for(r));
      if (counting[r]) out[r].read = counting[r]->bytes_read();
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

std::string FileOf(const std::string& root, int64_t step, int rank, int world) {
  return root + "/" + StepDirName(step) + "/" + ShardFileName(rank, world);
}

uint64_t FileSizeOf(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  return static_cast<uint64_t>(f.tellg());
}

void ExpectParams(const LoadedShard& shard, int64_t step, int rank) {
  Result<ConstBufferView> params = shard.Find("params");
  ASSERT_TRUE(params.ok()) << params.status().ToString();
  const std::vector<float> want = Slice(step, rank, 100 + rank);
  ASSERT_EQ(params->size, want.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(params->data, want.data(), params->size), 0) << "rank " << rank;
}

void FlipByteAt(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  const char c = static_cast<char>(f.get());
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(c ^ 0x5a));
}

TEST(CheckpointRestoreTest, EachRankVerifiesItsOwnShardAndReadsOnlyTheParametersOfTheOthers) {
  TempDir tmp;
  SaveAllRanks(tmp.path(), 5, 3);
  std::vector<RankRestore> ranks = RestoreOnRanks(tmp.path(), 3, -1, [](int) { return ParamsOfEveryShard(); });
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_TRUE(ranks[r].got->ok()) << ranks[r].got->status().ToString();
    const LoadedCheckpoint& c = ranks[r].got->value();
    EXPECT_EQ(c.manifest.step, 5);
    EXPECT_TRUE(ranks[r].skipped.empty());
    ASSERT_EQ(c.shards.size(), 3u);
    for (int s = 0; s < 3; ++s) {
      SCOPED_TRACE("shard " + std::to_string(s));
      const LoadedShard& shard = c.shards[s];
      EXPECT_EQ(shard.header.rank, s);
      ExpectParams(shard, 5, s);
      Result<ConstBufferView> meta = shard.Find("meta");
      ASSERT_TRUE(meta.ok()) << meta.status().ToString();
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(meta->data), meta->size),
                "{\"rank\": " + std::to_string(s) + "}");
      const std::string path = FileOf(tmp.path(), 5, s, 3);
      if (s == r) {
        // Its own shard: read whole, once, and checksummed.
        EXPECT_NE(shard.bytes, nullptr);
        EXPECT_TRUE(shard.Find("optim").ok());
        EXPECT_EQ(ranks[r].read[path], FileSizeOf(path));
      } else {
        // Another rank's: the header, meta and params, not the moments.
        EXPECT_EQ(shard.bytes, nullptr);
        Result<ConstBufferView> optim = shard.Find("optim");
        EXPECT_EQ(optim.status().code(), StatusCode::kFailedPrecondition) << optim.status().ToString();
        const std::vector<ConstBufferView> all = shard.Buffers();
        ASSERT_EQ(all.size(), 3u);
        EXPECT_EQ(all[2].name, "optim");
        EXPECT_EQ(all[2].data, nullptr);
        EXPECT_EQ(all[2].size, (100u + s) * sizeof(float)) << "a buffer not read still has its size";
        EXPECT_EQ(ranks[r].read[path], kShardFixedHeaderSize + shard.header.header_size + all[0].size + all[1].size);
      }
    }
  }
}

TEST(CheckpointRestoreTest, ACorruptionOnlyOneRankCanSeeIsSkippedByEveryRank) {
  TempDir tmp;
  SaveAllRanks(tmp.path(), 1, 2);
  SaveAllRanks(tmp.path(), 2, 2);
  // A byte of rank 1's moments in step 2: only rank 1 reads them (it verifies its shard).
  const std::string path = FileOf(tmp.path(), 2, 1, 2);
  FlipByteAt(path, FileSizeOf(path) - 7);
  std::vector<RankRestore> ranks = RestoreOnRanks(tmp.path(), 2, -1, [](int) { return ParamsOfEveryShard(); });
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_TRUE(ranks[r].got->ok()) << ranks[r].got->status().ToString();
    EXPECT_EQ(ranks[r].got->value().manifest.step, 1);
    ExpectParams(ranks[r].got->value().shards[1], 1, 1);
    ASSERT_EQ(ranks[r].skipped.size(), 1u);
    const SkippedCheckpoint& s = ranks[r].skipped[0];
    EXPECT_EQ(s.step, 2);
    EXPECT_EQ(s.reason.code(), StatusCode::kCorruption) << s.reason.ToString();
    EXPECT_EQ(s.reason.message().rfind("rank 1: " + path + ": checksum mismatch", 0), 0u) << s.reason.ToString();
  }
  EXPECT_LT(ranks[0].read[path], FileSizeOf(path) - 100 * sizeof(float)) << "rank 0 never read those moments";
}

TEST(CheckpointRestoreTest, AStepOneRankRejectsIsSkippedByAllWithThatRanksReason) {
  TempDir tmp;
  SaveAllRanks(tmp.path(), 2, 2);
  SaveAllRanks(tmp.path(), 3, 2);
  auto plan_for = [](int rank) -> RestorePlanner {
    return [rank](const LoadedCheckpoint& c) -> Result<std::vector<std::vector<std::string>>> {
      if (rank == 1 && c.manifest.step == 3) return CorruptionError("slices overlap");
      return std::vector<std::vector<std::string>>(c.shards.size(), {"params"});
    };
  };
  std::vector<RankRestore> ranks = RestoreOnRanks(tmp.path(), 2, -1, plan_for);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(ranks[r].got->ok()) << ranks[r].got->status().ToString();
    EXPECT_EQ(ranks[r].got->value().manifest.step, 2);
    ASSERT_EQ(ranks[r].skipped.size(), 1u);
    EXPECT_EQ(ranks[r].skipped[0].step, 3);
    EXPECT_EQ(ranks[r].skipped[0].reason.code(), StatusCode::kCorruption);
    EXPECT_EQ(ranks[r].skipped[0].reason.message(), "rank 1: " + tmp.path() + "/step-000000000003: slices overlap");
  }
  // Restore of that step alone fails on every rank with the same reason.
  ranks = RestoreOnRanks(tmp.path(), 2, 3, plan_for);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ranks[r].got->status().code(), StatusCode::kCorruption);
    EXPECT_NE(ranks[r].got->status().message().find("slices overlap"), std::string::npos);
  }
}

TEST(CheckpointRestoreTest, EveryRankTriesRankZerosStepsSoAllChooseTheSameOne) {
  // Rank 1 does not see step 3 at all (another node's view, say): it still
  // takes part in deciding on it, so both pass it over and both use step 2.
  TempDir tmp;
  SaveAllRanks(tmp.path(), 2, 2);
  SaveAllRanks(tmp.path(), 3, 2);
  HidingStorage hide_step3(StepDirName(3));
  std::vector<RankRestore> ranks = RestoreOnRanks(
      tmp.path(), 2, -1, [](int) { return ParamsOfEveryShard(); }, 2,
      [&](int rank) -> Storage* { return rank == 1 ? &hide_step3 : nullptr; });
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_TRUE(ranks[r].got->ok()) << ranks[r].got->status().ToString();
    EXPECT_EQ(ranks[r].got->value().manifest.step, 2);
    ASSERT_EQ(ranks[r].skipped.size(), 1u);
    EXPECT_EQ(ranks[r].skipped[0].step, 3);
    EXPECT_EQ(ranks[r].skipped[0].reason.code(), StatusCode::kNotFound) << "not corrupt: not set aside";
    EXPECT_EQ(ranks[r].skipped[0].reason.message().rfind("rank 1: ", 0), 0u) << ranks[r].skipped[0].reason.ToString();
  }
}

TEST(CheckpointRestoreTest, AnotherWorldSizeSpreadsTheShardsOverTheRanks) {
  EXPECT_EQ(CheckpointLoader::VerifyingRank(0, 4, 2), 0);
  EXPECT_EQ(CheckpointLoader::VerifyingRank(1, 4, 2), 0);
  EXPECT_EQ(CheckpointLoader::VerifyingRank(2, 4, 2), 1);
  EXPECT_EQ(CheckpointLoader::VerifyingRank(3, 4, 2), 1);
  EXPECT_EQ(CheckpointLoader::VerifyingRank(0, 2, 3), 0);
  EXPECT_EQ(CheckpointLoader::VerifyingRank(1, 2, 3), 1);
  EXPECT_EQ(CheckpointLoader::VerifyingRank(2, 3, 1), 0);
  TempDir tmp;
  SaveAllRanks(tmp.path(), 7, 4);
  SaveAllRanks(tmp.path() + "/two", 7, 2);
  struct Case {
    std::string root;
    int saved, world;
  };
  for (const Case& c : {Case{tmp.path(), 4, 2}, Case{tmp.path(), 4, 3}, Case{tmp.path() + "/two", 2, 3},
                        Case{tmp.path() + "/two", 2, 1}}) {
    SCOPED_TRACE(std::to_string(c.saved) + " -> " + std::to_string(c.world));
    std::vector<RankRestore> ranks = RestoreOnRanks(c.root, c.world, -1, [](int) { return ParamsOfEveryShard(); });
    std::vector<int> verified_by(c.saved, 0);
    for (int r = 0; r < c.world; ++r) {
      ASSERT_TRUE(ranks[r].got->ok()) << ranks[r].got->status().ToString();
      const LoadedCheckpoint& got = ranks[r].got->value();
      ASSERT_EQ(got.shards.size(), static_cast<size_t>(c.saved));
      for (int s = 0; s < c.saved; ++s) {
        ExpectParams(got.shards[s], 7, s);
        const bool whole = got.shards[s].bytes != nullptr;
        EXPECT_EQ(whole, CheckpointLoader::VerifyingRank(s, c.saved, c.world) == r) << "shard " << s;
        verified_by[s] += whole ? 1 : 0;
      }
    }
    for (int s = 0; s < c.saved; ++s) EXPECT_EQ(verified_by[s], 1) << "shard " << s << " checksummed once";
  }
}

TEST(CheckpointRestoreTest, ARankThatNeverAnswersFailsTheRestoreInsteadOfSkipping) {
  TempDir tmp;
  SaveAllRanks(tmp.path(), 1, 2);
  // Only rank 0 of 2 runs: its wait for rank 1's verdict ends after peer_timeout.
  std::vector<RankRestore> ranks = RestoreOnRanks(
      tmp.path(), 2, -1, [](int) { return ParamsOfEveryShard(); }, 1, nullptr, std::chrono::milliseconds(50));
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_EQ(ranks[0].got->status().code(), StatusCode::kTimeout) << ranks[0].got->status().ToString();
  EXPECT_NE(ranks[0].got->status().message().find("waiting for every rank's verdict"), std::string::npos)
      << ranks[0].got->status().ToString();
  EXPECT_TRUE(ranks[0].skipped.empty()) << "no step is passed over on one rank's say";

  // A world of several ranks needs a store; one rank needs none.
  CheckpointLoader loader(tmp.path());
  RestoreOptions o;
  o.world_size = 2;
  EXPECT_EQ(loader.RestoreNewest(o).status().code(), StatusCode::kInvalidArgument);
  o.world_size = 1;
  Result<LoadedCheckpoint> alone = loader.RestoreNewest(o);
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  for (const LoadedShard& shard : alone->shards) EXPECT_NE(shard.bytes, nullptr);
  // No folder at all: kNotFound on every rank (a fresh start).
  ranks = RestoreOnRanks(tmp.path() + "/none", 2, -1, [](int) { return ParamsOfEveryShard(); });
  for (const RankRestore& r : ranks) EXPECT_EQ(r.got->status().code(), StatusCode::kNotFound);
}

TEST(CheckpointRestoreTest, ATruncatedShardOfAnotherRankIsAClearErrorForEveryRank) {
  TempDir tmp;
  SaveAllRanks(tmp.path(), 1, 2);
  SaveAllRanks(tmp.path(), 2, 2);
  const std::string path = FileOf(tmp.path(), 2, 1, 2);
  ASSERT_EQ(::truncate(path.c_str(), 30), 0);
  std::vector<RankRestore> ranks = RestoreOnRanks(tmp.path(), 2, -1, [](int) { return ParamsOfEveryShard(); });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(ranks[r].got->ok()) << ranks[r].got->status().ToString();
    EXPECT_EQ(ranks[r].got->value().manifest.step, 1);
    ASSERT_EQ(ranks[r].skipped.size(), 1u);
    EXPECT_EQ(ranks[r].skipped[0].reason.code(), StatusCode::kCorruption);
    EXPECT_NE(ranks[r].skipped[0].reason.message().find(path + " is 30 bytes, the manifest says"), std::string::npos)
        << ranks[r].skipped[0].reason.ToString();
  }
}

}  // namespace
}  // namespace holdfast
