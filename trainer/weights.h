// Initial and reference weights from disk (train.init_from, dpo.reference):
// a holdfast-params-v1 dump (DIR/params.json + DIR/params.bin, what
// Trainer::DumpParams and --dump-final write) or a holdfast-train checkpoint
// (a step folder, or a checkpoint root: its newest step that verifies, every
// shard checksummed). Parameters are matched by name and shape; a missing,
// extra or misshapen one is an error naming the file and the parameter.
//
// Includes LibTorch (trainer/*.cc only). Thread-safety: a pure function of
// the files; the tensors written are the caller's.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "common/status.h"

namespace holdfast {

// Copies the weights at `path` into `params` (name, tensor on any device).
// Returns a one-line description of what was loaded ("checkpoint step 40 of
// DIR", "params dump DIR"). A parameter whose name starts with `may_lack`
// (non-empty) may be absent there and keeps its value: a reward model's head
// ("reward_head.") over a language model's weights; the description says so.
Result<std::string> LoadWeights(const std::string& path,
                                const std::vector<std::pair<std::string, torch::Tensor>>& params,
                                const std::string& may_lack = "");

}  // namespace holdfast
