#include "trainer/device_stager.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <new>
#include <numeric>
#include <thread>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>

#include "checkpoint/checkpoint_loader.h"
#include "checkpoint/checkpoint_writer.h"

namespace holdfast {
namespace {

// A copy engine on host memory that behaves like a CUDA copy stream: copies
// run later, on their own thread, in order; the fence makes "device" work wait.
class ThreadCopyEngine final : public CopyEngine {
 public:
  ~ThreadCopyEngine() override {
    (void)WaitCopiesDone();
    if (worker_.joinable()) worker_.join();
  }
  Status CopyToHostAsync(void* dst, const void* src, size_t bytes) override {
    if (fail_copies_) return InternalError("cudaMemcpyAsync: CUDA error cudaErrorIllegalAddress");
    copied_bytes_ += bytes;
    queued_.push_back({dst, src, bytes});
    return Status::Ok();
  }
  Status RecordCopiesDone() override {
    if (worker_.joinable()) worker_.join();
    std::vector<Copy> batch;
    batch.swap(queued_);
    {
      std::lock_guard<std::mutex> l(mu_);
      done_ = false;
    }
    worker_ = std::thread([this, batch] {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the copy takes a while
      for (const Copy& c : batch) std::memcpy(c.dst, c.src, c.bytes);
      std::lock_guard<std::mutex> l(mu_);
      done_ = true;
      cv_.notify_all();
    });
    return Status::Ok();
  }
  Status WaitCopiesDone() override {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [this] { return done_; });
    ++waits_;
    return fail_wait_ ? InternalError("cudaEventSynchronize: CUDA error cudaErrorLaunchFailure") : Status::Ok();
  }
  Status FenceCompute() override {
    ++fences_;
    // The device would wait; here the "device work" is the test's own mutation, so wait on the host.
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [this] { return done_; });
    return Status::Ok();
  }
  Result<void*> AllocHost(size_t bytes) override {
    ++allocs_;
    return ::operator new(bytes, std::align_val_t(4096));  // page-aligned, as cudaHostAlloc
  }
  void FreeHost(void* p) override { ::operator delete(p, std::align_val_t(4096)); }

  struct Copy {
    void* dst;
    const void* src;
    size_t bytes;
  };
  std::vector<Copy> queued_;
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = true;
  int fences_ = 0;
  int allocs_ = 0;
  int waits_ = 0;
  size_t copied_bytes_ = 0;  // device -> host, all copies queued
  bool fail_copies_ = false;
  bool fail_wait_ = false;
};

struct DeviceState {
  std::vector<float> params, m, v;
  explicit DeviceState(size_t n) : params(n), m(n), v(n) {
    std::iota(params.begin(), params.end(), 1.0f);
    std::iota(m.begin(), m.end(), -5.0f);
    std::iota(v.begin(), v.end(), 0.25f);
  }
  std::vector<DeviceStager::Piece> Pieces() const {
    return {{"params", params.data(), params.size() * 4},
            {"optim.exp_avg", m.data(), m.size() * 4},
            {"optim.exp_avg_sq", v.data(), v.size() * 4}};
  }
  void Update(float by) {  // what AdamW would do to the device memory
    for (auto* b : {&params, &m, &v}) {
      for (float& x : *b) x += by;
    }
  }
};

TEST(DeviceStagerTest, ViewsHoldTheDeviceBytesOnceReady) {
  auto engine = std::make_unique<ThreadCopyEngine>();
  ThreadCopyEngine* e = engine.get();
  DeviceStager stager(std::move(engine));
  DeviceState dev(1000);
  auto views = stager.Stage(dev.Pieces());
  ASSERT_TRUE(views.ok()) << views.status().ToString();
  ASSERT_EQ(views->size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const StateView& v = (*views)[i];
    ASSERT_TRUE(v.ready);
    ASSERT_TRUE(v.ready().ok());
    EXPECT_EQ(v.size, 4000u);
    EXPECT_EQ(std::memcmp(v.data, dev.Pieces()[i].device, v.size), 0) << v.name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data) % 256, 0u) << "pieces start aligned";
  }
  EXPECT_EQ(e->waits_, 3);
}

TEST(DeviceStagerTest, OneBufferReusedAndGrownOnlyWhenTheStateGrows) {
  auto engine = std::make_unique<ThreadCopyEngine>();
  ThreadCopyEngine* e = engine.get();
  DeviceStager stager(std::move(engine));
  DeviceState small(1000), big(5000);
  const uint8_t* first = nullptr;
  for (int i = 0; i < 3; ++i) {
    auto views = stager.Stage(small.Pieces());
    ASSERT_TRUE(views.ok());
    ASSERT_TRUE((*views)[0].ready().ok());
    if (first == nullptr) first = (*views)[0].data;
    EXPECT_EQ((*views)[0].data, first) << "the pinned buffer is reused";
    ASSERT_TRUE(stager.FenceBeforeUpdate().ok());
  }
  EXPECT_EQ(e->allocs_, 1);
  auto grown = stager.Stage(big.Pieces());
  ASSERT_TRUE(grown.ok());
  ASSERT_TRUE((*grown)[2].ready().ok());
  EXPECT_EQ(std::memcmp((*grown)[2].data, big.v.data(), big.v.size() * 4), 0);
  EXPECT_EQ(e->allocs_, 2);
  EXPECT_EQ(stager.allocations(), 2);
  EXPECT_GE(stager.capacity(), 3 * 5000 * 4u);
}

TEST(DeviceStagerTest, TheFenceIsOncePerStageAndNeverBlocksWithoutOne) {
  auto engine = std::make_unique<ThreadCopyEngine>();
  ThreadCopyEngine* e = engine.get();
  DeviceStager stager(std::move(engine));
  ASSERT_TRUE(stager.FenceBeforeUpdate().ok());
  EXPECT_EQ(e->fences_, 0) << "no save, no fence: steps without a checkpoint pay nothing";
  DeviceState dev(100);
  ASSERT_TRUE(stager.Stage(dev.Pieces()).ok());
  ASSERT_TRUE(stager.FenceBeforeUpdate().ok());
  ASSERT_TRUE(stager.FenceBeforeUpdate().ok());
  EXPECT_EQ(e->fences_, 1);
}

TEST(DeviceStagerTest, CopyErrorsReachTheCaller) {
  auto engine = std::make_unique<ThreadCopyEngine>();
  ThreadCopyEngine* e = engine.get();
  DeviceStager stager(std::move(engine));
  DeviceState dev(100);
  e->fail_copies_ = true;
  auto views = stager.Stage(dev.Pieces());
  ASSERT_FALSE(views.ok());
  EXPECT_NE(views.status().message().find("'params'"), std::string::npos) << views.status().ToString();
  e->fail_copies_ = false;
  e->fail_wait_ = true;
  auto late = stager.Stage(dev.Pieces());
  ASSERT_TRUE(late.ok());
  Status s = (*late)[0].ready();
  EXPECT_NE(s.message().find("cudaErrorLaunchFailure"), std::string::npos) << s.ToString();
}

// Through the checkpoint writer, as holdfast-train saves GPU state: the bytes
// committed are those of the step that was staged, although the "device"
// memory is updated right after the fence, while the writer is still busy.
TEST(DeviceStagerTest, CommittedCheckpointHoldsTheStagedStep) {
  const std::string root = testing::TempDir() + "/stager_ckpt_" + std::to_string(::getpid());
  std::filesystem::remove_all(root);
  CheckpointWriterOptions o;
  o.root = root;
  auto writer = CheckpointWriter::Create(o);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  DeviceStager stager(std::make_unique<ThreadCopyEngine>());
  DeviceState dev((3u << 20) / 4 + 7);  // several staging chunks
  for (int64_t step = 1; step <= 3; ++step) {
    const DeviceState at_save = dev;
    (*writer)->WaitStaged();  // the trainer's rule: the previous views are no longer read
    auto views = stager.Stage(dev.Pieces());
    ASSERT_TRUE(views.ok());
    std::vector<BufferView> buffers;
    const std::string meta = "{\"step\": " + std::to_string(step) + "}";
    buffers.push_back({"meta", meta.data(), meta.size()});
    for (const StateView& v : *views) {
      BufferView b{v.name, v.data, v.size};
      b.defer_copy = true;
      b.ready = v.ready;
      buffers.push_back(std::move(b));
    }
    ASSERT_EQ(*(*writer)->Save(step, buffers), SaveDecision::kQueued);
    ASSERT_TRUE(stager.FenceBeforeUpdate().ok());
    dev.Update(1000.0f);  // the next optimizer update
    ASSERT_TRUE((*writer)->Flush().ok());
    Result<LoadedShard> shard = CheckpointLoader(root).Load(step, 0);
    ASSERT_TRUE(shard.ok()) << shard.status().ToString();
    for (const auto& piece : at_save.Pieces()) {
      Result<ConstBufferView> b = shard->Find(piece.name);
      ASSERT_TRUE(b.ok());
      ASSERT_EQ(b->size, piece.bytes);
      EXPECT_EQ(std::memcmp(b->data, piece.device, piece.bytes), 0) << piece.name << " of step " << step;
    }
  }
  std::filesystem::remove_all(root);
}

// The memory snapshot tier (docs/memory-snapshots.md) on a GPU: a step that is
// both a snapshot and a disk checkpoint is staged once — one device -> host
// copy of the state into the pinned buffer — and both writers save from it;
// each committed shard holds the staged step.
TEST(DeviceStagerTest, ASnapshotAndADiskCheckpointOfAStepShareOnePinnedCopy) {
  const std::string root = testing::TempDir() + "/stager_two_" + std::to_string(::getpid());
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  std::unique_ptr<CheckpointWriter> writers[2];
  for (int i = 0; i < 2; ++i) {
    CheckpointWriterOptions o;
    o.root = root + (i == 0 ? "/disk" : "/memory");
    auto w = CheckpointWriter::Create(o);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    writers[i] = std::move(w).value();
  }
  auto engine = std::make_unique<ThreadCopyEngine>();
  ThreadCopyEngine* e = engine.get();
  DeviceStager stager(std::move(engine));
  DeviceState dev((1u << 20) / 4 + 3);
  size_t state_bytes = 0;
  for (const auto& piece : dev.Pieces()) state_bytes += piece.bytes;
  for (int64_t step = 1; step <= 3; ++step) {
    const DeviceState at_save = dev;
    for (auto& w : writers) w->WaitStaged();
    auto views = stager.Stage(dev.Pieces());  // once per step, as holdfast-train's StateViews
    ASSERT_TRUE(views.ok());
    std::vector<BufferView> buffers;
    const std::string meta = "{\"step\": " + std::to_string(step) + "}";
    buffers.push_back({"meta", meta.data(), meta.size()});
    for (const StateView& v : *views) {
      BufferView b{v.name, v.data, v.size};
      b.defer_copy = true;
      b.ready = v.ready;
      buffers.push_back(std::move(b));
    }
    for (auto& w : writers) ASSERT_EQ(*w->Save(step, buffers), SaveDecision::kQueued);
    ASSERT_TRUE(stager.FenceBeforeUpdate().ok());
    dev.Update(1000.0f);
    for (auto& w : writers) {
      Status flushed = w->Flush();
      ASSERT_TRUE(flushed.ok()) << flushed.ToString();
    }
    EXPECT_EQ(e->copied_bytes_, state_bytes * static_cast<size_t>(step)) << "one device copy per step, not per writer";
    for (const char* tier : {"/disk", "/memory"}) {
      Result<LoadedShard> shard = CheckpointLoader(root + tier).Load(step, 0);
      ASSERT_TRUE(shard.ok()) << shard.status().ToString();
      for (const auto& piece : at_save.Pieces()) {
        Result<ConstBufferView> b = shard->Find(piece.name);
        ASSERT_TRUE(b.ok());
        EXPECT_EQ(std::memcmp(b->data, piece.device, piece.bytes), 0) << tier << " " << piece.name << " " << step;
      }
    }
  }
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace holdfast
