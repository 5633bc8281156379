// Exit codes of holdfast-train: the launch contract's (common/launch_contract.h),
// under the trainer's names. Documented in README.md ("Exit codes").
#pragma once

#include "common/launch_contract.h"

namespace holdfast {

inline constexpr int kExitOk = kRankExitOk;
inline constexpr int kExitFailed = kRankExitFailed;
inline constexpr int kExitUsage = kRankExitUsage;
inline constexpr int kExitPreempted = kRankExitPreempted;

}  // namespace holdfast
