// TrainState: a rank's complete training state as named host byte buffers.
//
// This is the boundary between the trainer (which knows tensors) and the
// checkpoint layer (which knows bytes). Buffers:
//   "meta"             JSON: format, step, data cursor, config hash, world
//                      layout, optimiser step, determinism fingerprint
//   "params"           float32, the flat parameter buffer (layout in meta) —
//                      in a checkpoint shard, only this rank's slice of it
//                      (meta "slice": offset, count, total; see
//                      Trainer::StateViews and docs/checkpoint-format.md)
//   "optim.exp_avg"    float32, AdamW first moment, same layout and slice
//   "optim.exp_avg_sq" float32, AdamW second moment, same layout and slice
//   "rng.cpu"          LibTorch's default CPU generator state
// Plain data: copyable, no LibTorch, no threads.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace holdfast {

// A named buffer that someone else owns (the trainer's tensors, a loaded shard).
struct StateView {
  std::string name;
  const uint8_t* data = nullptr;  // not owned
  size_t size = 0;
  // Set when the bytes are still arriving (a device→host copy, DeviceStager):
  // call it, and read the bytes only after it returns OK. Empty = ready.
  std::function<Status()> ready = nullptr;
};

struct StateBuffer {
  std::string name;
  std::vector<uint8_t> bytes;
};

// An owning copy of a rank's state.
struct TrainState {
  std::vector<StateBuffer> buffers;

  const StateBuffer* Find(const std::string& name) const;
  uint64_t TotalBytes() const;
  // Views into this state's buffers, valid while it lives unchanged.
  std::vector<StateView> Views() const;
};

// The view called name in views, or nullptr.
const StateView* FindView(const std::vector<StateView>& views, const std::string& name);

// What determinism depends on. Two runs with equal fingerprints (and equal
// config hash) produce bit-identical parameters.
struct DeterminismFingerprint {
  std::string torch_version;
  std::string blas;  // the BLAS library actually loaded (resolved path)
  int threads = 0;
  int world_size = 0;
  int grad_accum = 0;
  int64_t bucket_bytes = 0;
  std::string backend;
  int zero_stage = 0;  // dist.zero_stage in effect (0 with one rank); the reduction order differs
  // "cpu", or the GPU and its software: gpu::DeviceInfo::Describe() (model,
  // compute capability, driver, CUDA runtime, cuBLAS).
  std::string device = "cpu";

  // Human-readable differences ("threads: checkpoint 2, now 1"); empty when equal.
  std::vector<std::string> Diff(const DeterminismFingerprint& now) const;
};

}  // namespace holdfast
