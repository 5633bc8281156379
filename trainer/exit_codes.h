// Exit codes of holdfast-train: what the supervisor (and a person) acts on.
// Documented in README.md ("Exit codes").
#pragma once

namespace holdfast {

inline constexpr int kExitOk = 0;
// A runtime failure: a peer died or timed out, a checkpoint could not be read.
inline constexpr int kExitFailed = 1;
// Bad input: config, flag or data file; the message says what to fix. Retrying will not help.
inline constexpr int kExitUsage = 2;
// Stopped on SIGTERM/SIGUSR1 after committing a checkpoint of the last completed
// step (EX_TEMPFAIL): rerun the same command to resume.
inline constexpr int kExitPreempted = 75;

}  // namespace holdfast
