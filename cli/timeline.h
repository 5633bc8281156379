// The timeline of a run as `runctl lineage` prints it and `runctl incident`
// cuts from it: lineage's attempts, generations, checkpoints and events as
// one list of lines in the order they were written (lineage's seq: a wall
// clock that stepped back does not reorder it).
//
// Thread-safety: a pure function; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lineage/lineage_db.h"

namespace holdfast {

// One line of the timeline.
struct TimelineItem {
  // What one line is: what one write recorded at once (ending a generation
  // and its attempt) goes starts, then what happens inside them, then ends.
  enum Order : int { kAttemptStart = 0, kGenerationStart, kCheckpoint, kEvent, kGenerationEnd, kAttemptEnd };
  int64_t seq;  // lineage's write order
  int64_t t;    // its time, unix ms
  int order;    // an Order
  int64_t tie;  // kEvent: the event id; kCheckpoint: the step
  std::string att, gen, text;  // attempt and generation ("-": none), what happened
};

// Every record of the run, in write order.
std::vector<TimelineItem> TimelineItems(const std::vector<AttemptRecord>& attempts,
                                        const std::vector<GenerationRecord>& gens,
                                        const std::vector<CheckpointRecord>& ckpts,
                                        const std::vector<EventRecord>& events);

}  // namespace holdfast
