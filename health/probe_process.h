// Runs holdfast-health-gpu (the CUDA/NCCL probes) as a child process and reads
// its JSON results, so that the CUDA, cuBLAS and NCCL libraries never load into
// holdfast-health itself and a GPU fault or hang ends the child, not the caller.
// What the child's end says becomes a result too: not startable -> skipped
// ("gpu.probe"), killed by a signal or past the timeout -> fail.
//
// Thread-safety: reentrant; forks (the child only execs).
#pragma once

#include <string>
#include <vector>

#include "health/check.h"

namespace holdfast::health {

// `argv[0]` is the program's path. Waits at most `timeout_s`; the child is
// SIGKILLed when it runs over or when the caller dies.
std::vector<CheckResult> RunProbeProcess(const std::vector<std::string>& argv, double timeout_s);

// <directory of /proc/self/exe>/<name>: where the probe program is installed.
std::string SiblingProgram(const std::string& name);

}  // namespace holdfast::health
