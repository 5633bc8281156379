// The state the crash helper saves at each step, and its check: the bytes of a
// rank's buffers are a function of (step, rank), so the test can tell that a
// loaded checkpoint holds exactly what was saved at its step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_writer.h"

namespace holdfast {

struct CrashState {
  CrashState(int64_t step, int rank) {
    meta = "{\"step\": " + std::to_string(step) + ", \"rank\": " + std::to_string(rank) + "}";
    params.resize(2048 + 16 * rank);
    for (size_t i = 0; i < params.size(); ++i) params[i] = static_cast<uint8_t>(step * 31 + rank * 7 + i);
    rng.assign(64, static_cast<uint8_t>(step ^ 0x5a));
  }
  std::vector<BufferView> Views() const {
    return {{"meta", meta.data(), meta.size()},
            {"params", params.data(), params.size()},
            {"rng", rng.data(), rng.size()}};
  }
  std::string meta;
  std::vector<uint8_t> params;
  std::vector<uint8_t> rng;
};

}  // namespace holdfast
