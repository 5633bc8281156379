// The policy's weights between processes: a Gpt's parameters as a ParamsDump
// (what the GRPO learner publishes by version) and back into a Gpt (what a
// rollout worker loads). LibTorch-free header; the module is only forward
// declared.
//
// Thread-safety: the caller owns the model (one thread).
#pragma once

#include <string>

#include "common/status.h"
#include "trainer/rl/params_dump.h"

namespace holdfast {
class Gpt;  // trainer/model.h
}

namespace holdfast::rl {

// The model's parameters in registration order (Trainer::DumpParams's order),
// copied to host floats.
ParamsDump DumpModel(Gpt& model);
// Copies a dump into the model by name. Every parameter must be present with
// its shape, and nothing else: a mismatch names the tensor and `source`.
Status LoadModel(const ParamsDump& dump, Gpt& model, const std::string& source);

}  // namespace holdfast::rl
