// CheckpointLoader::LoadAll / LoadNewestAll: every rank's shard of a
// checkpoint, each read once, and caller validation that skips a checkpoint
// like a corrupt one. Real files in a temporary folder.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>

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

// Saves step from `world` ranks, rank r holding 100 + r floats and its own meta.
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
  for (int r = 0; r < world; ++r) {
    std::vector<BufferView> views = {{"meta", metas[r].data(), metas[r].size()},
                                     {"params", slices[r].data(), slices[r].size() * sizeof(float), true}};
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

}  // namespace
}  // namespace holdfast
