// Stacks of hung processes, as a hang's evidence keeps them (the "stacks" key
// of lineage/incident.h IncidentEvidence): what holdfastd captured from each
// rank before stopping it (daemon/stack_capture.h), folded so that identical
// stacks are stored and shown once with the ranks that share them, and the
// text `runctl triage` prints for them.
//
// A stack is one thread's frames, innermost first: "native" ones from eu-stack
// (function names, "?? (libfoo.so)" where a frame has no symbol) and "python"
// ones from the holdfast module's faulthandler dump ("sleep_here (job.py:12)").
// The folded form is bounded whatever the run's size: frames per stack, bytes
// per frame, groups and total bytes are capped (StackLimits); what was cut is
// counted, never silently lost.
//
// Thread-safety: plain values and pure functions; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace holdfast {

// One thread's stack as captured from one rank.
struct ThreadStack {
  std::string kind = "native";       // "native" or "python"
  bool main_thread = false;          // the process's main thread (native: TID = PID; python: where the handler ran)
  std::vector<std::string> frames;   // innermost first
  bool cut = false;                  // more frames than were kept
};

// What the capture got from one rank: its threads' stacks, and notes on what
// it could not get ("python stack not available: the process is stopped ...").
struct RankStacks {
  int rank = -1;
  std::vector<ThreadStack> threads;
  std::vector<std::string> notes;
};

// Identical stacks of several ranks, stored once.
struct StackGroup {
  std::string kind = "native";
  bool main_thread = false;
  std::vector<int> ranks;           // sorted, each once
  uint32_t threads = 0;             // threads with this stack, over those ranks
  std::vector<std::string> frames;  // innermost first
  bool cut = false;                 // frames were cut (StackLimits::max_frames or the capture's own limit)
};

struct StackNote {
  int rank = -1;  // -1: about no one rank (the ranks on other nodes)
  std::string note;
};

struct StackEvidence {
  double limit_s = 0;   // the capture's time limit (supervise.stack_timeout_s)
  double took_s = 0;    // how long the capture delayed recovery
  std::vector<StackGroup> groups;  // main-thread groups first, then by ranks sharing them (most first)
  std::vector<StackNote> notes;    // by rank
  uint32_t dropped_threads = 0;    // stacks left out to keep the evidence bounded
  bool empty() const { return groups.empty() && notes.empty() && limit_s == 0; }
};

struct StackLimits {
  size_t max_frames = 32;        // per stack
  size_t max_frame_chars = 200;  // per frame (long C++ signatures)
  size_t max_groups = 64;
  size_t max_bytes = 64 * 1024;  // frames' text over all groups
};

// Folds the ranks' stacks: identical (kind, main thread, frames) become one
// group. Groups beyond the limits are dropped (counted in dropped_threads).
StackEvidence FoldStacks(const std::vector<RankStacks>& ranks, const StackLimits& limits = {});

// The lines `runctl triage` prints for a hang's stacks (none when the
// evidence has none): a heading, each main-thread group as "N ranks (list):"
// then its frames, the culprits' groups first and a group that differs from
// the most common one marked as the outlier; other threads as one count line;
// the notes. `culprits` are the incident's culprit ranks.
std::vector<std::string> RenderStacks(const StackEvidence& stacks, const std::vector<int>& culprits);

// The "stacks" value of the evidence JSON, and back (the same rules as
// ParseIncidentEvidence: unknown keys ignored, a known key of the wrong type is
// kInvalidArgument naming it). Never throw.
std::string StacksToJson(const StackEvidence& stacks);
Result<StackEvidence> ParseStacksJson(std::string_view json);

}  // namespace holdfast
