// Stack capture: before holdfastd stops the ranks of a hang, it reads the
// stack of every hung process on its node — the first thing an engineer
// would attach gdb or py-spy for — and keeps them, folded, in the hang's
// evidence (lineage/stacks.h; `runctl triage` shows them).
//
// Native stacks: elfutils' eu-stack (Debian package elfutils; the job file's
// supervise.stack_tool) run as a child process per rank, all at once, with
// `-p PID`. It attaches with ptrace, which works on a SIGSTOPped process too
// (eu-stack's detach can leave it running — seen under load — so a process
// that was stopped is stopped again) and needs ptrace permission: holdfastd is
// the ranks' parent, which Yama's ptrace_scope 1 allows (docs/progress-record.md).
//
// Python stacks: a rank whose holdfast module registered faulthandler
// (common/python/holdfast/_stacks.py) writes a marker line into
// PROGRESS_PATH.pystack naming its pid and signal; the capture sends that
// signal to the process's main thread first and reads the dump faulthandler
// appends. A stopped process cannot run its handler: then only its native
// stack is there, and a note says why.
//
// Bounded: CaptureStacks returns within config.timeout_s + kStackKillGraceS
// whatever the tools do — a capture still running at the limit is killed
// (its whole process group) and noted as timed out. It blocks the calling
// (event-loop) thread for that long at most; recovery is delayed by no more.
//
// Thread-safety: the functions hold no state; CaptureStacks reaps only its
// own children (by pid), so it must not run while another thread reaps any
// child (waitpid(-1)): holdfastd reaps on the same loop thread.
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/proc_state.h"
#include "common/rank_progress.h"
#include "lineage/stacks.h"

namespace holdfast {

// After the limit, the killed captures get this long to be reaped.
inline constexpr double kStackKillGraceS = 1.0;
// Where a rank's Python stacks go: its progress record's path plus this.
inline constexpr const char* kPythonStackSuffix = ".pystack";

struct StackCaptureConfig {
  std::string tool = "eu-stack";  // a path, or a name looked up in PATH
  double timeout_s = 10;          // 0 = capture nothing
  size_t max_frames = 32;         // per thread
};

// One process to read.
struct StackTarget {
  int rank = 0;
  pid_t pid = 0;
  ProcState state = ProcState::kUnknown;
  std::string python_stack_path;  // "" = none (PROGRESS_PATH.pystack otherwise; it may not exist)
};

// Reads every target's stacks at once; returns one RankStacks per target
// (stacks, or notes saying what could not be read and why). `took_s` (when
// not null) gets how long it took.
std::vector<RankStacks> CaptureStacks(const std::vector<StackTarget>& targets, const StackCaptureConfig& config,
                                      double* took_s = nullptr);

// The hang's stacks as evidence: the live ranks of `views` on node
// `this_node` are captured (a rank's writer process when its record names
// another pid than the one holdfastd started), the others get one note; then
// folded. `progress_path_of(rank)` is the rank's progress record path ("" unknown).
StackEvidence CaptureHungStacks(const std::vector<RankView>& views, int this_node,
                                const std::function<std::string(int rank)>& progress_path_of,
                                const StackCaptureConfig& config);

// ---- parsers (pure; exposed for tests) ----

// eu-stack's output (`-m`): one ThreadStack per "TID n:" block, innermost
// first; the thread with TID = `pid` is the main thread. Frames are function
// names (symbol versions dropped), "?? (module)" when there is none. A thread
// with more than `max_frames` frames is cut.
std::vector<ThreadStack> ParseEuStack(std::string_view output, pid_t pid, size_t max_frames);

// One faulthandler dump (Python's "Thread 0x... (most recent call first):"
// blocks): frames "function (file.py:line)", innermost first; the "Current
// thread" — the main thread, as the signal is sent to it — is the main thread.
std::vector<ThreadStack> ParseFaulthandler(std::string_view dump);

// The marker line the holdfast module writes first into its .pystack file:
// "holdfast-pystack pid=1234 signal=41".
struct PythonStackMarker {
  pid_t pid = 0;
  int signal = 0;
};
std::optional<PythonStackMarker> ParsePythonStackMarker(std::string_view first_line);

}  // namespace holdfast
