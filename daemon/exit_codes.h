// Exit codes of holdfastd (README.md, "Exit codes").
#pragma once

namespace holdfast {

inline constexpr int kDaemonExitOk = 0;         // the run finished
inline constexpr int kDaemonExitFailed = 1;     // the run failed: budget spent, a node lost, a failed requeue
inline constexpr int kDaemonExitUsage = 2;      // bad flags, job config, run directory, or bad input at a rank (never restarted)
inline constexpr int kDaemonExitStopped = 3;    // stopped on request without a final checkpoint
inline constexpr int kDaemonExitPreempted = 75; // stopped after the ranks committed a checkpoint: resume later

}  // namespace holdfast
