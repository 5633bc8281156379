// ProcState: what the kernel says a process is doing (/proc/<pid>/stat's
// state letter), as one value. Every "is this process stopped?" in the
// project asks IsStopped; the letter itself is read only here, by the wire
// codec (daemon/cluster_rank_view.cc) and in lineage evidence (a letter, for
// compatibility with recorded runs).
//
// Thread-safety: pure functions; ReadProcState reads /proc.
#pragma once

#include <sys/types.h>

namespace holdfast {

enum class ProcState {
  kUnknown,   // not read (yet), or a letter this build does not know
  kRunning,   // R
  kSleeping,  // S, I (idle kernel thread)
  kDiskWait,  // D: uninterruptible I/O
  kStopped,   // T: SIGSTOP (or SIGTSTP ...)
  kTraced,    // t: stopped by a tracer (gdb, py-spy --native)
  kZombie,    // Z: exited, not reaped
  kGone,      // X/x, or no such process
};

ProcState ProcStateFromLetter(char letter);
// The /proc letter ('?' for kUnknown, 'X' for kGone).
char ProcStateLetter(ProcState state);
// kStopped or kTraced: it can do nothing until continued.
inline bool IsStopped(ProcState s) { return s == ProcState::kStopped || s == ProcState::kTraced; }
// What on-call reads beside a rank ("process stopped (SIGSTOP?)"); nullptr
// for the states that say nothing unusual (running, sleeping, unknown).
const char* ProcStateWords(ProcState state);
// /proc/<pid>/stat now; kGone when the process does not exist.
ProcState ReadProcState(pid_t pid);

}  // namespace holdfast
