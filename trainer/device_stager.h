// DeviceStager: a checkpoint's device-resident state, staged to host memory
// without stalling training.
//
// The trainer's flat parameters and AdamW moments live on the GPU. A save
// queues asynchronous device→host copies of this rank's slice into one pinned
// host buffer, reused from save to save (grown only when the state grows), on a
// copy stream ordered after the compute work queued so far; it returns at once
// with views of that buffer whose ready() blocks until the copies landed. The
// checkpoint writer calls ready() on its own thread, then copies and writes as
// for host state. Before the optimizer next changes that memory, the trainer
// calls FenceBeforeUpdate(): later device work waits for the copies on the
// device, and the host does not wait at all. The forward and backward of the
// next step run while the copies do.
//
// CopyEngine is the seam to CUDA (gpu.h's MakeCopyEngine: a copy stream, two
// events, cudaHostAlloc); tests drive the staging logic with a host engine.
// No LibTorch, no CUDA headers. One training thread calls Stage and
// FenceBeforeUpdate; ready() may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/train_state.h"

namespace holdfast {

class CopyEngine {
 public:
  virtual ~CopyEngine() = default;
  // Queues a copy of `bytes` from device memory `src` into host memory `dst`,
  // ordered after all compute work queued so far; returns at once.
  virtual Status CopyToHostAsync(void* dst, const void* src, size_t bytes) = 0;
  // Marks the end of the copies queued since the last call.
  virtual Status RecordCopiesDone() = 0;
  // Blocks the calling thread until the recorded copies have landed.
  virtual Status WaitCopiesDone() = 0;
  // Makes device work queued from now on wait for the recorded copies; does
  // not block the host.
  virtual Status FenceCompute() = 0;
  // Page-locked host memory (fast, truly asynchronous copies).
  virtual Result<void*> AllocHost(size_t bytes) = 0;
  virtual void FreeHost(void* p) = 0;
};

class DeviceStager {
 public:
  struct Piece {
    std::string name;
    const void* device = nullptr;  // device memory, unchanged until FenceBeforeUpdate
    size_t bytes = 0;
  };

  explicit DeviceStager(std::unique_ptr<CopyEngine> engine);
  ~DeviceStager();
  DeviceStager(const DeviceStager&) = delete;
  DeviceStager& operator=(const DeviceStager&) = delete;

  // Queues the copies and returns one view per piece (in order) into the host
  // buffer, each with a ready() that waits for them. The caller guarantees that
  // nobody reads the previous Stage's views any more (the writer's WaitStaged).
  Result<std::vector<StateView>> Stage(const std::vector<Piece>& pieces);

  // Call before the staged device memory changes. Cheap when nothing is pending.
  Status FenceBeforeUpdate();

  size_t capacity() const { return capacity_; }
  int64_t stages() const { return stages_; }
  int64_t allocations() const { return allocations_; }

 private:
  std::unique_ptr<CopyEngine> engine_;
  void* host_ = nullptr;  // pinned, capacity_ bytes, engine_->AllocHost
  size_t capacity_ = 0;
  bool fence_pending_ = false;
  int64_t stages_ = 0;
  int64_t allocations_ = 0;
};

}  // namespace holdfast
