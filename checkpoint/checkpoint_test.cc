// CheckpointWriter + CheckpointLoader against real files in a temporary folder.
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "checkpoint/checkpoint_loader.h"
#include "checkpoint/checkpoint_writer.h"
#include "checkpoint/failing_storage.h"
#include "common/memory_store.h"
#include "tests/support/subprocess.h"
#include "spdlog/spdlog.h"

namespace holdfast {
namespace {

// One temporary folder per test, removed after it (HOLDFAST_KEEP_TEST_DIRS keeps it).
class TempDir : public testing::TempDir {
 public:
  TempDir() : testing::TempDir("ckpt_test") {}
};

// A rank's state whose bytes depend on (step, rank), so a test can tell which
// checkpoint it got back.
struct State {
  State(int64_t step, int rank, size_t n_params = 1000) {
    meta = "{\"step\": " + std::to_string(step) + ", \"rank\": " + std::to_string(rank) + "}";
    params.resize(n_params + rank * 3);
    for (size_t i = 0; i < params.size(); ++i) params[i] = static_cast<float>(step * 1000 + rank + i);
    moments.assign(77, static_cast<uint8_t>(step + rank));
  }
  std::vector<BufferView> Views() const {
    return {{"meta", meta.data(), meta.size()},
            {"params", params.data(), params.size() * sizeof(float)},
            {"adam.exp_avg", moments.data(), moments.size()}};
  }
  std::string meta;
  std::vector<float> params;
  std::vector<uint8_t> moments;
};

void ExpectState(const LoadedShard& shard, int64_t step, int rank, size_t n_params = 1000) {
  State want(step, rank, n_params);
  EXPECT_EQ(shard.manifest.step, step);
  EXPECT_EQ(shard.header.rank, rank);
  std::vector<BufferView> views = want.Views();
  for (const BufferView& v : views) {
    Result<ConstBufferView> got = shard.Find(v.name);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->size, v.size) << v.name;
    EXPECT_EQ(std::memcmp(got->data, v.data, v.size), 0) << v.name;
  }
}

std::unique_ptr<CheckpointWriter> MakeWriter(const std::string& root, Storage* storage = nullptr,
                                             CheckpointWriter::Callback cb = nullptr) {
  CheckpointWriterOptions o;
  o.root = root;
  o.storage = storage;
  o.config_hash = "cfg";
  o.layout = "dp=1";
  Result<std::unique_ptr<CheckpointWriter>> w = CheckpointWriter::Create(o, std::move(cb));
  HF_CHECK_MSG(w.ok(), w.status().ToString());
  return std::move(w).value();
}

Status SaveAndFlush(CheckpointWriter* w, int64_t step, int rank = 0, size_t n_params = 1000) {
  State s(step, rank, n_params);
  Result<SaveDecision> d = w->Save(step, s.Views());
  if (!d.ok()) return d.status();
  return w->Flush();
}

std::vector<std::string> FilesIn(const std::string& dir) {
  Result<std::vector<std::string>> names = PosixStorage::Default()->ListDir(dir);
  if (!names.ok()) return {};
  std::set<std::string> sorted(names->begin(), names->end());
  return std::vector<std::string>(sorted.begin(), sorted.end());
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(CheckpointTest, SaveThenLoadNewestReturnsTheSameBytes) {
  TempDir tmp;
  std::vector<SaveOutcome> seen;
  auto w = MakeWriter(tmp.path(), nullptr, [&](const SaveOutcome& o) { seen.push_back(o); });
  EXPECT_EQ(w->newest_committed_step(), -1);
  ASSERT_TRUE(SaveAndFlush(w.get(), 10).ok());
  ASSERT_TRUE(SaveAndFlush(w.get(), 20).ok());
  EXPECT_EQ(w->newest_committed_step(), 20);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_TRUE(seen[1].committed());
  EXPECT_EQ(w->TakeOutcomes().size(), 2u);

  CheckpointLoader loader(tmp.path());
  std::vector<SkippedCheckpoint> skipped;
  Result<LoadedShard> got = loader.LoadNewest(0, {}, &skipped);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(skipped.empty());
  ExpectState(*got, 20, 0);
  EXPECT_EQ(got->manifest.parent_step, 10);
  EXPECT_EQ(got->manifest.config_hash, "cfg");
  EXPECT_EQ(FilesIn(got->dir), (std::vector<std::string>{"MANIFEST.json", "shard-00000-of-00001.bin"}));

  // A new writer on the same folder continues the lineage.
  w.reset();
  auto w2 = MakeWriter(tmp.path());
  EXPECT_EQ(w2->newest_committed_step(), 20);
  ASSERT_TRUE(SaveAndFlush(w2.get(), 30).ok());
  EXPECT_EQ(loader.ReadManifest(30)->parent_step, 20);
}

TEST(CheckpointTest, TwoRanksCommitOneManifestThroughTheStore) {
  TempDir tmp;
  auto store = std::make_shared<InMemoryStore>();
  std::vector<std::unique_ptr<CheckpointWriter>> writers;
  for (int r = 0; r < 2; ++r) {
    CheckpointWriterOptions o;
    o.root = tmp.path();
    o.rank = r;
    o.world_size = 2;
    o.store = store;
    o.commit_timeout = std::chrono::seconds(30);
    writers.push_back(std::move(CheckpointWriter::Create(o)).value());
  }
  State s0(5, 0), s1(5, 1);
  ASSERT_TRUE(writers[1]->Save(5, s1.Views()).ok());
  ASSERT_TRUE(writers[0]->Save(5, s0.Views()).ok());
  EXPECT_TRUE(writers[0]->Flush().ok());
  EXPECT_TRUE(writers[1]->Flush().ok());
  EXPECT_EQ(writers[1]->newest_committed_step(), 5);

  CheckpointLoader loader(tmp.path());
  for (int r = 0; r < 2; ++r) {
    LoadOptions lo;
    lo.expected_world_size = 2;
    Result<LoadedShard> got = loader.LoadNewest(r, lo);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ExpectState(*got, 5, r);
  }
  // A run with another world size does not resume from it.
  LoadOptions other_world;
  other_world.expected_world_size = 4;
  EXPECT_EQ(loader.LoadNewest(0, other_world).status().code(), StatusCode::kNotFound);
}

// Rank 1 writing to a root of its own (a memory snapshot folder on another
// node): with prune_own_root it keeps only the newest committed step there,
// even a step with a manifest copied in (a restore's), and nothing of it
// when it is off.
TEST(CheckpointTest, ARankWithARootOfItsOwnPrunesItWhenAsked) {
  for (bool prune : {true, false}) {
    TempDir zero, one;
    auto store = std::make_shared<InMemoryStore>();
    std::vector<std::unique_ptr<CheckpointWriter>> writers;
    for (int r = 0; r < 2; ++r) {
      CheckpointWriterOptions o;
      o.root = r == 0 ? zero.path() : one.path();
      o.rank = r;
      o.world_size = 2;
      o.store = std::make_shared<PrefixStore>(prune ? "p" : "n", store);
      o.retention.keep_last = 1;
      o.prune_own_root = prune;
      o.commit_timeout = std::chrono::seconds(30);
      writers.push_back(std::move(CheckpointWriter::Create(o)).value());
    }
    std::filesystem::create_directories(one.path() + "/" + StepDirName(1));
    WriteFile(one.path() + "/" + StepDirName(1) + "/" + kManifestFileName, "a restore's manifest");
    for (int64_t step : {2, 3, 4}) {
      State s0(step, 0), s1(step, 1);
      ASSERT_TRUE(writers[1]->Save(step, s1.Views()).ok());
      ASSERT_TRUE(writers[0]->Save(step, s0.Views()).ok());
      ASSERT_TRUE(writers[0]->Flush().ok());
      ASSERT_TRUE(writers[1]->Flush().ok());
    }
    const std::vector<std::string> want =
        prune ? std::vector<std::string>{StepDirName(4)}
              : std::vector<std::string>{StepDirName(1), StepDirName(2), StepDirName(3), StepDirName(4)};
    EXPECT_EQ(FilesIn(one.path()), want) << "prune_own_root = " << prune;
    EXPECT_EQ(FilesIn(zero.path()), (std::vector<std::string>{StepDirName(4)}));
  }
}

TEST(CheckpointTest, AFailedRankMeansNoManifestAndEveryRankHearsOfIt) {
  TempDir tmp;
  auto store = std::make_shared<InMemoryStore>();
  FailingStorage failing(PosixStorage::Default());
  failing.FailNthWrite(1, EIO);
  std::vector<std::unique_ptr<CheckpointWriter>> writers;
  for (int r = 0; r < 2; ++r) {
    CheckpointWriterOptions o;
    o.root = tmp.path();
    o.rank = r;
    o.world_size = 2;
    o.store = store;
    o.storage = r == 1 ? static_cast<Storage*>(&failing) : nullptr;
    writers.push_back(std::move(CheckpointWriter::Create(o)).value());
  }
  State s0(8, 0), s1(8, 1);
  ASSERT_TRUE(writers[1]->Save(8, s1.Views()).ok());
  ASSERT_TRUE(writers[0]->Save(8, s0.Views()).ok());
  Status st1 = writers[1]->Flush();
  Status st0 = writers[0]->Flush();
  EXPECT_EQ(st1.code(), StatusCode::kIoError) << st1.ToString();
  EXPECT_EQ(st0.code(), StatusCode::kUnavailable) << st0.ToString();
  EXPECT_NE(st0.message().find("rank 1 failed"), std::string::npos) << st0.ToString();
  EXPECT_EQ(writers[0]->newest_committed_step(), -1);
  EXPECT_EQ(FilesIn(tmp.path() + "/" + StepDirName(8)), (std::vector<std::string>{"shard-00000-of-00002.bin"}));
}

// Rank 0's own write fails (a full disk): the other ranks hear at once that
// rank 0 will not commit, rather than waiting out commit_timeout.
TEST(CheckpointTest, ARank0WriteFailureIsHeardByTheOthersWithoutWaitingOutTheTimeout) {
  TempDir tmp;
  auto store = std::make_shared<InMemoryStore>();
  FailingStorage failing(PosixStorage::Default());
  failing.FailNthWrite(1, ENOSPC);
  std::vector<std::unique_ptr<CheckpointWriter>> writers;
  for (int r = 0; r < 2; ++r) {
    CheckpointWriterOptions o;
    o.root = tmp.path();
    o.rank = r;
    o.world_size = 2;
    o.store = store;
    o.commit_timeout = std::chrono::seconds(3600);  // the bug waited this out
    o.storage = r == 0 ? static_cast<Storage*>(&failing) : nullptr;
    writers.push_back(std::move(CheckpointWriter::Create(o)).value());
  }
  State s0(8, 0), s1(8, 1);
  ASSERT_TRUE(writers[0]->Save(8, s0.Views()).ok());
  ASSERT_TRUE(writers[1]->Save(8, s1.Views()).ok());
  Status st0 = writers[0]->Flush();
  Status st1 = writers[1]->Flush();
  EXPECT_NE(st0.message().find("No space left"), std::string::npos) << st0.ToString();
  EXPECT_EQ(st1.code(), StatusCode::kUnavailable) << st1.ToString();
  EXPECT_NE(st1.message().find("rank 0 failed to write its shard"), std::string::npos) << st1.ToString();
  EXPECT_EQ(writers[1]->newest_committed_step(), -1);
}

// A peer SIGKILLed before it published its shard never will: a rank exiting
// for that reason gives up the commit at once instead of joining a writer that
// waits out commit_timeout (it took the supervisor's SIGKILL to end it).
TEST(CheckpointTest, DestroyingAWriterAbandonsACommitWaitingForADeadPeer) {
  for (int rank : {0, 1}) {
    TempDir tmp;
    auto store = std::make_shared<InMemoryStore>();
    std::promise<SaveOutcome> outcome;
    CheckpointWriterOptions o;
    o.root = tmp.path();
    o.rank = rank;
    o.world_size = 2;
    o.store = store;
    o.commit_timeout = std::chrono::minutes(10);  // long enough that a test waiting it out fails by timing out
    auto w = std::move(CheckpointWriter::Create(o, [&](const SaveOutcome& out) { outcome.set_value(out); })).value();
    State s(5, rank);
    ASSERT_TRUE(w->Save(5, s.Views()).ok());
    // Published: the writer has gone on to wait for the other rank, which never saves.
    ASSERT_TRUE(store->Get("ckpt/5/shard/" + std::to_string(rank), std::chrono::seconds(30)).ok());
    w.reset();
    SaveOutcome got = outcome.get_future().get();
    EXPECT_EQ(got.status.code(), StatusCode::kFailedPrecondition) << got.status.ToString();
    EXPECT_NE(got.status.message().find(rank == 0 ? "rank 1's shard" : "rank 0 to commit"), std::string::npos)
        << got.status.ToString();
    EXPECT_EQ(FilesIn(tmp.path() + "/" + StepDirName(5)), (std::vector<std::string>{ShardFileName(rank, 2)}));
  }
}

TEST(CheckpointTest, FlippingAnyByteFallsBackToThePreviousCheckpoint) {
  TempDir tmp;
  auto w = MakeWriter(tmp.path());
  // Small buffers: every byte of both files gets flipped.
  ASSERT_TRUE(SaveAndFlush(w.get(), 1, 0, 16).ok());
  ASSERT_TRUE(SaveAndFlush(w.get(), 2, 0, 16).ok());
  CheckpointLoader loader(tmp.path());
  const std::string dir = loader.StepDir(2);
  spdlog::set_level(spdlog::level::err);  // thousands of expected "skipping step 2" warnings
  for (const std::string& name : {std::string("MANIFEST.json"), ShardFileName(0, 1)}) {
    const std::string path = dir + "/" + name;
    const std::string good = ReadFile(path);
    ASSERT_GT(good.size(), 200u);
    for (size_t i = 0; i < good.size(); ++i) {
      std::string bad = good;
      bad[i] ^= 0x20;
      WriteFile(path, bad);
      std::vector<SkippedCheckpoint> skipped;
      Result<LoadedShard> got = loader.LoadNewest(0, {}, &skipped);
      ASSERT_TRUE(got.ok()) << name << " byte " << i << ": " << got.status().ToString();
      ASSERT_EQ(got->manifest.step, 1) << name << " byte " << i << " went undetected";
      ASSERT_EQ(skipped.size(), 1u);
      EXPECT_EQ(skipped[0].step, 2);
      EXPECT_EQ(skipped[0].reason.code(), StatusCode::kCorruption) << skipped[0].reason.ToString();
    }
    WriteFile(path, good);
  }
  spdlog::set_level(spdlog::level::info);
  // Truncation and a missing shard are caught too.
  const std::string shard = dir + "/" + ShardFileName(0, 1);
  const std::string good = ReadFile(shard);
  WriteFile(shard, good.substr(0, good.size() - 1));
  EXPECT_EQ(loader.LoadNewest(0)->manifest.step, 1);
  std::remove(shard.c_str());
  EXPECT_EQ(loader.LoadNewest(0)->manifest.step, 1);
  ExpectState(*loader.LoadNewest(0), 1, 0, 16);
}

TEST(CheckpointTest, AFolderWithoutManifestIsNotACheckpoint) {
  TempDir tmp;
  auto w = MakeWriter(tmp.path());
  ASSERT_TRUE(SaveAndFlush(w.get(), 1).ok());
  const std::string partial = tmp.path() + "/" + StepDirName(2);
  ASSERT_TRUE(PosixStorage::Default()->MakeDir(partial).ok());
  WriteFile(partial + "/" + ShardFileName(0, 1), "half a shard");
  WriteFile(partial + "/MANIFEST.json.tmp", "{\"step\": 2");
  std::vector<SkippedCheckpoint> skipped;
  Result<LoadedShard> got = CheckpointLoader(tmp.path()).LoadNewest(0, {}, &skipped);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->manifest.step, 1);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].reason.code(), StatusCode::kNotFound);
  EXPECT_NE(skipped[0].reason.message().find("did not finish"), std::string::npos);
}

TEST(CheckpointTest, NoSpaceDuringASaveIsReportedAndTheNextSaveWorks) {
  TempDir tmp;
  FailingStorage disk(PosixStorage::Default());
  std::vector<SaveOutcome> seen;
  auto w = MakeWriter(tmp.path(), &disk, [&](const SaveOutcome& o) { seen.push_back(o); });
  ASSERT_TRUE(SaveAndFlush(w.get(), 1).ok());

  disk.FailWritesAfter(1000, ENOSPC);  // the shard is ~4.2 KB: a short write, then ENOSPC
  State s(2, 0);
  Result<SaveDecision> d = w->Save(2, s.Views());
  ASSERT_TRUE(d.ok());  // the training loop never sees storage errors from Save
  EXPECT_EQ(*d, SaveDecision::kQueued);
  Status st = w->Flush();
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
  EXPECT_NE(st.message().find("No space left on device"), std::string::npos) << st.ToString();
  EXPECT_GE(disk.faults_injected(), 1);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_FALSE(seen[1].committed());
  EXPECT_EQ(w->newest_committed_step(), 1);
  // No manifest, and the partial file is gone.
  EXPECT_TRUE(FilesIn(tmp.path() + "/" + StepDirName(2)).empty());
  EXPECT_EQ(CheckpointLoader(tmp.path()).LoadNewest(0)->manifest.step, 1);

  disk.Clear();  // space freed
  ASSERT_TRUE(SaveAndFlush(w.get(), 3).ok());
  EXPECT_EQ(w->newest_committed_step(), 3);
  EXPECT_EQ(CheckpointLoader(tmp.path()).ReadManifest(3)->parent_step, 1);
}

TEST(CheckpointTest, FsyncErrorMeansNoManifest) {
  TempDir tmp;
  FailingStorage disk(PosixStorage::Default());
  auto w = MakeWriter(tmp.path(), &disk);
  disk.FailSync(EIO);
  Status st = SaveAndFlush(w.get(), 4);
  EXPECT_EQ(st.code(), StatusCode::kIoError) << st.ToString();
  EXPECT_NE(st.message().find("fsync"), std::string::npos);
  EXPECT_TRUE(FilesIn(tmp.path() + "/" + StepDirName(4)).empty());
  EXPECT_EQ(CheckpointLoader(tmp.path()).LoadNewest(0).status().code(), StatusCode::kNotFound);
}

// Holds every write until released, so a test can have a save in flight.
class GatedStorage final : public Storage {
 public:
  explicit GatedStorage(Storage* base) : base_(base), released_(gate_.get_future().share()) {}
  void Release() { gate_.set_value(); }

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    released_.wait();
    return base_->NewWritableFile(path);
  }
  Result<std::unique_ptr<ReadableFile>> OpenReadable(const std::string& p) override { return base_->OpenReadable(p); }
  Status Rename(const std::string& a, const std::string& b) override { return base_->Rename(a, b); }
  Status Unlink(const std::string& p) override { return base_->Unlink(p); }
  Status MakeDir(const std::string& p) override { return base_->MakeDir(p); }
  Status RemoveDir(const std::string& p) override { return base_->RemoveDir(p); }
  Status SyncDir(const std::string& p) override { return base_->SyncDir(p); }
  Result<std::vector<std::string>> ListDir(const std::string& p) override { return base_->ListDir(p); }
  Result<bool> Exists(const std::string& p) override { return base_->Exists(p); }

 private:
  Storage* base_;
  std::promise<void> gate_;
  std::shared_future<void> released_;
};

// A Store that stops answering while Close()d, as a TcpStore does while the
// holdfastd hosting it is SIGSTOPped: every call blocks until Open().
class FrozenStore final : public Store {
 public:
  void Close() {
    std::lock_guard<std::mutex> l(mu_);
    open_ = false;
  }
  void Open() {
    {
      std::lock_guard<std::mutex> l(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  Status Set(const std::string& key, const std::vector<uint8_t>& value) override {
    Gate();
    return base_.Set(key, value);
  }
  Result<std::vector<uint8_t>> Get(const std::string& key, std::chrono::milliseconds timeout) override {
    Gate();
    return base_.Get(key, timeout);
  }
  Result<int64_t> Add(const std::string& key, int64_t delta) override {
    Gate();
    return base_.Add(key, delta);
  }
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    Gate();
    return base_.Wait(keys, timeout);
  }
  Result<bool> Check(const std::string& key) override {
    Gate();
    return base_.Check(key);
  }
  Status Delete(const std::string& key) override {
    Gate();
    return base_.Delete(key);
  }

 private:
  void Gate() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [this] { return open_; });
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  InMemoryStore base_;
};

// The training loop's saves must not wait on the Store: a frozen Store (its
// holdfastd SIGSTOPped) holds up the commits, not the next saves, and every
// step written meanwhile commits, in order, once the Store answers again.
TEST(CheckpointTest, AStoreThatStopsAnsweringHoldsUpCommitsNotSaves) {
  TempDir tmp;
  auto store = std::make_shared<FrozenStore>();
  std::vector<std::unique_ptr<CheckpointWriter>> writers;
  for (int r = 0; r < 2; ++r) {
    CheckpointWriterOptions o;
    o.root = tmp.path();
    o.rank = r;
    o.world_size = 2;
    o.store = store;
    o.commit_timeout = std::chrono::seconds(60);
    writers.push_back(std::move(CheckpointWriter::Create(o)).value());
  }
  store->Close();
  std::vector<State> states;
  for (int64_t step : {1, 2, 3}) {
    for (int r = 0; r < 2; ++r) states.emplace_back(step, r);
  }
  // Each Save returns (kWait would block here if it waited for the commit
  // before it; the test would never get past this loop).
  for (int64_t step : {1, 2, 3}) {
    for (int r = 0; r < 2; ++r) {
      Result<SaveDecision> d = writers[r]->Save(step, states[(step - 1) * 2 + r].Views());
      ASSERT_TRUE(d.ok()) << d.status().ToString();
      EXPECT_EQ(*d, SaveDecision::kQueued) << "step " << step << " rank " << r;
    }
  }
  EXPECT_EQ(writers[0]->newest_committed_step(), -1) << "nothing commits while the store is frozen";
  store->Open();
  for (auto& w : writers) EXPECT_TRUE(w->Flush().ok());
  EXPECT_EQ(writers[0]->newest_committed_step(), 3);
  EXPECT_EQ(writers[1]->newest_committed_step(), 3);
  CheckpointLoader loader(tmp.path());
  for (int64_t step : {1, 2, 3}) {
    Result<Manifest> m = loader.Inspect(step, InspectDepth::kChecksums);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    if (step > 1) {
      ASSERT_TRUE(m->parent_step.has_value());
      EXPECT_EQ(*m->parent_step, step - 1) << "commits ran in step order";
    }
  }
}

TEST(CheckpointTest, SkipPolicyDropsASaveRequestedWhileOneIsInFlight) {
  TempDir tmp;
  GatedStorage disk(PosixStorage::Default());
  CheckpointWriterOptions o;
  o.root = tmp.path();
  o.storage = &disk;
  o.policy = InFlightPolicy::kSkip;
  auto w = std::move(CheckpointWriter::Create(o)).value();
  State s1(1, 0), s2(2, 0);
  EXPECT_EQ(*w->Save(1, s1.Views()), SaveDecision::kQueued);
  EXPECT_EQ(*w->Save(2, s2.Views()), SaveDecision::kSkipped);  // step 1 cannot finish before Release
  EXPECT_EQ(w->skipped_saves(), 1);
  disk.Release();
  EXPECT_TRUE(w->Flush().ok());
  EXPECT_EQ(w->newest_committed_step(), 1);
  Result<std::vector<int64_t>> steps = CheckpointLoader(tmp.path()).ListSteps();
  EXPECT_EQ(*steps, std::vector<int64_t>{1});
}

TEST(CheckpointTest, WaitPolicyStagesTheNextSaveAfterTheOneInFlight) {
  TempDir tmp;
  GatedStorage disk(PosixStorage::Default());
  auto w = MakeWriter(tmp.path(), &disk);  // kWait is the default
  State s1(1, 0), s2(2, 0);
  EXPECT_EQ(*w->Save(1, s1.Views()), SaveDecision::kQueued);
  std::thread second([&] { EXPECT_EQ(*w->Save(2, s2.Views()), SaveDecision::kQueued); });
  disk.Release();
  second.join();
  EXPECT_TRUE(w->Flush().ok());
  EXPECT_EQ(w->skipped_saves(), 0);
  CheckpointLoader loader(tmp.path());
  ExpectState(*loader.Load(1, 0), 1, 0);
  ExpectState(*loader.Load(2, 0), 2, 0);
}

// A rank's state with one large buffer that the writer copies after Save
// returns (defer_copy), as the trainer's parameters and moments are.
struct DeferredState {
  explicit DeferredState(size_t n_floats) : meta("{\"step\": 7}"), params(n_floats) {
    for (size_t i = 0; i < params.size(); ++i) params[i] = static_cast<float>(i) * 0.5f;
  }
  std::vector<BufferView> Views() const {
    BufferView p{"params", params.data(), params.size() * sizeof(float)};
    p.defer_copy = true;
    return {{"meta", meta.data(), meta.size()}, p};
  }
  std::string meta;
  std::vector<float> params;
};

void ExpectSavedBytes(const std::string& root, int64_t step, const DeferredState& want) {
  Result<LoadedShard> got = CheckpointLoader(root).Load(step, 0);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  for (const BufferView& v : want.Views()) {
    Result<ConstBufferView> b = got->Find(v.name);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    ASSERT_EQ(b->size, v.size) << v.name;
    EXPECT_EQ(std::memcmp(b->data, v.data, v.size), 0) << v.name << " differs from its bytes at Save time";
  }
}

TEST(CheckpointTest, DeferredSaveCapturesTheBytesAsTheyWereAtSave) {
  TempDir tmp;
  GatedStorage disk(PosixStorage::Default());  // the shard is written only after every mutation below
  auto w = MakeWriter(tmp.path(), &disk);
  DeferredState live((5u << 20) / sizeof(float) + 3);  // spans several staging chunks, odd size
  const DeferredState at_save = live;
  ASSERT_EQ(*w->Save(7, live.Views()), SaveDecision::kQueued);
  live.meta = "{\"step\": 8}";  // eager buffers may be reused as soon as Save returns
  w->WaitStaged();                // the fence: only now may the deferred buffer change
  std::fill(live.params.begin(), live.params.end(), -1.0f);
  disk.Release();
  ASSERT_TRUE(w->Flush().ok());
  ExpectSavedBytes(tmp.path(), 7, at_save);
}

TEST(CheckpointTest, WaitStagedReturnsOnlyAfterTheDeferredCopy) {
  TempDir tmp;
  GatedStorage disk(PosixStorage::Default());
  auto w = MakeWriter(tmp.path(), &disk);
  DeferredState live((64u << 20) / sizeof(float));
  const DeferredState at_save = live;
  for (int round = 0; round < 3; ++round) {
    const int64_t step = 10 + round;
    if (round > 0) {
      live = at_save;
      ASSERT_TRUE(w->Flush().ok());
    }
    ASSERT_EQ(*w->Save(step, live.Views()), SaveDecision::kQueued);
    w->WaitStaged();
    // Mutate the tail first: the copy runs front to back, so had WaitStaged
    // returned early, the tail would be overwritten before it was copied.
    live.params.back() = -2.0f;
    std::fill(live.params.begin(), live.params.end(), -1.0f);
    if (round == 0) disk.Release();
  }
  ASSERT_TRUE(w->Flush().ok());
  for (int64_t step = 10; step < 13; ++step) ExpectSavedBytes(tmp.path(), step, at_save);
}

// Device state arrives in pinned host memory by an asynchronous copy: the
// writer reads it only once ready() says the copy is done.
TEST(CheckpointTest, DeferredBytesAreReadOnlyAfterReady) {
  TempDir tmp;
  auto w = MakeWriter(tmp.path(), nullptr);
  DeferredState want(1u << 20);
  DeferredState pinned(1u << 20);
  std::fill(pinned.params.begin(), pinned.params.end(), -1.0f);  // the copy has not landed yet
  std::promise<void> landed;
  std::thread copy_engine;
  std::vector<BufferView> views = pinned.Views();
  views[1].ready = [&] {
    // The "copy" lands on another thread while the writer waits here.
    copy_engine = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      pinned.params = want.params;
      landed.set_value();
    });
    landed.get_future().wait();
    return Status::Ok();
  };
  ASSERT_EQ(*w->Save(7, views), SaveDecision::kQueued);
  ASSERT_TRUE(w->Flush().ok());
  copy_engine.join();
  ExpectSavedBytes(tmp.path(), 7, want);
}

TEST(CheckpointTest, AFailedDeviceCopyFailsOnlyThatSave) {
  TempDir tmp;
  auto w = MakeWriter(tmp.path(), nullptr);
  DeferredState state(1u << 16);
  std::vector<BufferView> views = state.Views();
  views[1].ready = [] { return InternalError("cudaEventSynchronize: CUDA error cudaErrorLaunchFailure"); };
  ASSERT_EQ(*w->Save(3, views), SaveDecision::kQueued);
  w->WaitStaged();  // the fence opens although staging failed
  Status s = w->Flush();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cudaErrorLaunchFailure"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("device state"), std::string::npos) << s.ToString();
  EXPECT_FALSE(std::filesystem::exists(tmp.path() + "/" + StepDirName(3) + "/" + kManifestFileName));
  // The next save, with the bytes ready, commits.
  ASSERT_EQ(*w->Save(4, state.Views()), SaveDecision::kQueued);
  EXPECT_TRUE(w->Flush().ok());
  ExpectSavedBytes(tmp.path(), 4, state);
}

TEST(CheckpointTest, AFailingDiskStillOpensTheStagingFence) {
  TempDir tmp;
  FailingStorage disk(PosixStorage::Default());
  disk.FailSync(EIO);
  auto w = MakeWriter(tmp.path(), &disk);
  DeferredState live(1000);
  ASSERT_EQ(*w->Save(3, live.Views()), SaveDecision::kQueued);
  w->WaitStaged();  // returns: staging does not depend on the disk
  EXPECT_EQ(w->Flush().code(), StatusCode::kIoError);
  std::vector<SaveOutcome> outcomes = w->TakeOutcomes();
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_FALSE(outcomes[0].committed());
  EXPECT_TRUE(FilesIn(tmp.path() + "/" + StepDirName(3)).empty());
}

TEST(CheckpointTest, SkipPolicyKeepsTheDeferredSaveInFlight) {
  TempDir tmp;
  GatedStorage disk(PosixStorage::Default());
  CheckpointWriterOptions o;
  o.root = tmp.path();
  o.storage = &disk;
  o.policy = InFlightPolicy::kSkip;
  auto w = std::move(CheckpointWriter::Create(o)).value();
  DeferredState first(1000), second(1000);
  second.params.assign(second.params.size(), 9.0f);
  const DeferredState at_save = first;
  ASSERT_EQ(*w->Save(1, first.Views()), SaveDecision::kQueued);
  EXPECT_EQ(*w->Save(2, second.Views()), SaveDecision::kSkipped);
  w->WaitStaged();
  first.params.assign(first.params.size(), -1.0f);
  disk.Release();
  ASSERT_TRUE(w->Flush().ok());
  ExpectSavedBytes(tmp.path(), 1, at_save);
  EXPECT_EQ(*CheckpointLoader(tmp.path()).ListSteps(), std::vector<int64_t>{1});
}

TEST(CheckpointTest, RetentionKeepsTheLastKAndEveryNth) {
  TempDir tmp;
  CheckpointWriterOptions o;
  o.root = tmp.path();
  o.retention.keep_last = 2;
  o.retention.keep_every = 4;
  auto w = std::move(CheckpointWriter::Create(o)).value();
  for (int64_t step = 1; step <= 5; ++step) ASSERT_TRUE(SaveAndFlush(w.get(), step).ok());
  // A save of step 6 that died (no manifest), and one from an older attempt ahead of us.
  ASSERT_TRUE(PosixStorage::Default()->MakeDir(tmp.path() + "/" + StepDirName(6)).ok());
  WriteFile(tmp.path() + "/" + StepDirName(6) + "/" + ShardFileName(0, 1) + ".tmp", "x");
  ASSERT_TRUE(PosixStorage::Default()->MakeDir(tmp.path() + "/" + StepDirName(100)).ok());
  for (int64_t step = 7; step <= 9; ++step) ASSERT_TRUE(SaveAndFlush(w.get(), step).ok());
  Result<std::vector<int64_t>> steps = CheckpointLoader(tmp.path()).ListSteps();
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(*steps, (std::vector<int64_t>{100, 9, 8, 4}));
  ExpectState(*CheckpointLoader(tmp.path()).LoadNewest(0), 9, 0);
}

// The memory tier of a run of several nodes: the newest snapshot and the
// newest of the replicated steps (multiples of 5), which the daemon hard-links
// for its push; older multiples go.
TEST(CheckpointTest, RetentionKeepsTheNewestMultipleOfKeepNewestEvery) {
  TempDir tmp;
  CheckpointWriterOptions o;
  o.root = tmp.path();
  o.retention.keep_last = 1;
  o.retention.keep_newest_every = 5;
  auto w = std::move(CheckpointWriter::Create(o)).value();
  for (int64_t step = 1; step <= 4; ++step) ASSERT_TRUE(SaveAndFlush(w.get(), step).ok());
  EXPECT_EQ(*CheckpointLoader(tmp.path()).ListSteps(), std::vector<int64_t>{4}) << "no multiple yet";
  for (int64_t step = 5; step <= 13; ++step) ASSERT_TRUE(SaveAndFlush(w.get(), step).ok());
  EXPECT_EQ(*CheckpointLoader(tmp.path()).ListSteps(), (std::vector<int64_t>{13, 10}));
  ASSERT_TRUE(SaveAndFlush(w.get(), 15).ok());
  EXPECT_EQ(*CheckpointLoader(tmp.path()).ListSteps(), std::vector<int64_t>{15}) << "the newest is the multiple";
  o.retention.keep_newest_every = -1;
  EXPECT_EQ(CheckpointWriter::Create(o).status().code(), StatusCode::kInvalidArgument);
}

TEST(CheckpointTest, ACommittedStepIsNeverOverwritten) {
  TempDir tmp;
  auto w = MakeWriter(tmp.path());
  ASSERT_TRUE(SaveAndFlush(w.get(), 1).ok());
  State other(2, 0);  // different bytes under the same step number
  ASSERT_TRUE(w->Save(1, other.Views()).ok());
  EXPECT_EQ(w->Flush().code(), StatusCode::kFailedPrecondition);
  ExpectState(*CheckpointLoader(tmp.path()).LoadNewest(0), 1, 0);
}

// Memory snapshots every step (idle_priority): the writer's threads take
// only CPU time nothing else wants, until the training loop waits on them at
// the staging fence; then they run at normal priority until that save's job
// is done, and drop back for the next one. ready() runs on the writer thread,
// so it sees the policy the staging runs at.
TEST(CheckpointTest, AnIdlePriorityWriterRunsAtNormalPriorityOnlyWhileTheLoopWaitsOnIt) {
  TempDir tmp;
  CheckpointWriterOptions o;
  o.root = tmp.path();
  o.idle_priority = true;
  auto w = std::move(CheckpointWriter::Create(o)).value();
  std::vector<float> params(1000, 1.0f);
  // One save whose ready() reports the policy staging began at; with
  // `until_raised` it then waits (60 s at most) to be raised to SCHED_OTHER.
  auto save = [&](int64_t step, bool until_raised, std::promise<int>* began) {
    BufferView b{"params", params.data(), params.size() * sizeof(float)};
    b.defer_copy = true;
    b.ready = [began, until_raised]() -> Status {
      began->set_value(sched_getscheduler(0));
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (until_raised && sched_getscheduler(0) != SCHED_OTHER) {
        if (std::chrono::steady_clock::now() > deadline) {
          return TimeoutError("the staging thread was never raised to normal priority");
        }
        std::this_thread::yield();
      }
      return Status::Ok();
    };
    return w->Save(step, {b});
  };
  // Nobody waits on the writer: it stages at SCHED_IDLE. (Its policy is read
  // before Flush, which raises it while it waits.)
  std::promise<int> first;
  ASSERT_EQ(*save(1, false, &first), SaveDecision::kQueued);
  EXPECT_EQ(first.get_future().get(), SCHED_IDLE);
  ASSERT_TRUE(w->Flush().ok());
  // The training loop's fence: staging cannot finish until WaitStaged raises it.
  std::promise<int> second;
  ASSERT_EQ(*save(2, true, &second), SaveDecision::kQueued);
  w->WaitStaged();
  ASSERT_TRUE(w->Flush().ok());
  // Lowered again once the job it was raised for is done.
  std::promise<int> third;
  ASSERT_EQ(*save(3, false, &third), SaveDecision::kQueued);
  EXPECT_EQ(third.get_future().get(), SCHED_IDLE) << "the writer stayed raised after the save the loop waited on";
  ASSERT_TRUE(w->Flush().ok());
  EXPECT_EQ(CheckpointLoader(tmp.path()).LoadNewest(0)->manifest.step, 3);
}

TEST(CheckpointTest, BadRequestsAreRefusedAtSave) {
  TempDir tmp;
  auto w = MakeWriter(tmp.path());
  int x = 0;
  EXPECT_EQ(w->Save(1, {{"a", &x, 4}, {"a", &x, 4}}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w->Save(-1, {{"a", &x, 4}}).status().code(), StatusCode::kInvalidArgument);
  CheckpointWriterOptions o;
  o.root = tmp.path();
  o.world_size = 2;
  EXPECT_EQ(CheckpointWriter::Create(o).status().code(), StatusCode::kInvalidArgument);  // no store
}

}  // namespace
}  // namespace holdfast
