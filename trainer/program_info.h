// What holdfast-train's and holdfast-rollout's --help and --version say about the program
// (common/program_cli.h): its exit codes (trainer/exit_codes.h) and the libraries it links.
#pragma once

#include <string>

#include "common/program_cli.h"
#include "trainer/exit_codes.h"

namespace holdfast {

inline std::string TrainerExitCodesHelp() {
  return ExitCodesHelp({{kExitOk, "finished (holdfast-rollout: also stopped by SIGTERM/SIGINT)"},
                        {kExitFailed, "a runtime failure: a peer died or timed out, a checkpoint could not be read"},
                        {kExitUsage, "bad flags, config or data: the same input fails again, so not restarted"},
                        {kExitPreempted, "stopped on SIGTERM/SIGUSR1 after committing a checkpoint: run again to resume"}});
}

inline unsigned TrainerBuiltAgainst() {
#ifdef HOLDFAST_TRAINER_CUDA
  return kBuiltAgainstLibTorch | kBuiltAgainstCuda | kBuiltAgainstNccl;
#else
  return kBuiltAgainstLibTorch;
#endif
}

}  // namespace holdfast
