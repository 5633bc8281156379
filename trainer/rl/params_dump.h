// ParamsDump: named float32 tensors in the "holdfast-params-v1" layout
// (DIR/params.json: {"format", "dtype", "tensors": [{name, shape, offset,
// numel}]}, DIR/params.bin: the tensors' bytes, little endian, at those byte
// offsets) — what Trainer::DumpParams writes and tests/reference reads from
// Python. Here without LibTorch: the GRPO learner publishes its policy in this
// layout (WriteParamsDumpAtomically, from a background thread) and the rollout
// workers read it back (ReadParamsDump).
//
// Plain data; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace holdfast::rl {

struct ParamsDump {
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    int64_t offset = 0;  // in floats, into data
    int64_t numel = 0;
  };
  std::vector<Tensor> tensors;
  std::vector<float> data;

  // Appends a tensor's floats (copied).
  void Add(std::string name, std::vector<int64_t> shape, const float* values, int64_t numel);
  const Tensor* Find(const std::string& name) const;
};

// Writes DIR/params.json and DIR/params.bin into DIR.tmp.PID, then renames the
// folder to DIR: a reader sees the whole folder or none. DIR must not exist
// (an existing one is replaced: a version rewritten by a learner that resumed).
Status WriteParamsDumpAtomically(const ParamsDump& dump, const std::string& dir);

// Reads and checks a dump (format, offsets and sizes within params.bin); a
// missing folder is kNotFound, a malformed one kCorruption naming the file.
Result<ParamsDump> ReadParamsDump(const std::string& dir);

// The dump's params.json text (its index), and the reverse: a dump from an
// index and its floats, checked as ReadParamsDump checks files (kCorruption
// naming `source`). The weights wire (weights_wire.h) sends these two.
std::string ParamsDumpIndex(const ParamsDump& dump);
Result<ParamsDump> ParseParamsDump(const std::string& index_text, std::vector<float> data, const std::string& source);

}  // namespace holdfast::rl
