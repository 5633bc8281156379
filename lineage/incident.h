// Incident evidence and runbooks: what holdfastd writes into an event's
// `evidence_json` and `runbook` columns (lineage_db.h EventRecord), and what
// `runctl triage` reads back — typed here, in one place, so that the writer
// and the reader cannot drift apart key by key.
//
// IncidentEvidence is the JSON object of a crash, hang, checkpoint
// failure or straggler: who, where, what every rank was doing (from its
// shared-memory progress record), how the culprit ended, the tail of its log.
// The JSON keys are the ones holdfastd has always written, so files written by
// older daemons read back; ParseIncidentEvidence() takes any of them, missing
// keys included, and fails (without throwing) only on a key of the wrong type.
//
// Thread-safety: plain values and pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "lineage/lineage_db.h"
#include "lineage/stacks.h"

namespace holdfast {

// (The runbook of each event kind: lineage/event_kind.h RunbookFor.)

// ---- evidence ----

// One entry of a rank's ring of recent collectives ("recent_collectives").
struct CollectiveEvidence {
  uint64_t seq = 0;  // 1-based, per rank
  std::string kind;  // "allreduce", "broadcast", ... (common/progress_record.h)
  uint64_t bytes = 0;
  bool done = false;
};

// A rank's pace while it ran (straggler evidence; daemon/straggler.h RankPace).
struct PaceEvidence {
  double steps_per_s = 0;
  double step_ms_p50 = 0;
  double step_ms_p99 = 0;
  double compute_ms_p50 = 0;
  double wait_ms_p50 = 0;
};

// One rank at the moment of the incident. The progress-record fields (step
// through ring) come from the rank's shared-memory record and are present only
// when it had reported (record_valid); an unset optional is a key the file did
// not have.
struct RankEvidence {
  int rank = -1;
  int node = -1;          // index of its node in the allocation; -1 unknown
  std::string host;       // its node's host name; "" in files from before it was kept
  int64_t pid = 0;        // 0 unknown (never started)
  bool alive = true;
  std::string proc_state;  // /proc state letter: R, S, D, T, t, Z, ? ; "" unknown
  bool record_valid = false;  // absent in a file: true when it has progress fields
  bool record_torn = false;   // the record was mid-update when read
  std::optional<int64_t> step;  // completed optimiser steps
  std::string phase;            // "forward", "collective", ... ; "" unknown
  std::optional<double> phase_age_s;
  std::optional<double> heartbeat_age_s;
  std::optional<uint64_t> collectives_issued;
  std::optional<uint64_t> collectives_done;
  uint64_t waiting_on = 0;  // seq of the collective it waits in; 0 none
  std::optional<double> last_step_ms;
  std::optional<int64_t> checkpoint_step;  // newest commit it saw; -1 none
  std::vector<CollectiveEvidence> ring;    // "recent_collectives", oldest first
  std::optional<PaceEvidence> pace;        // straggler evidence only
};

// One rank's report of a failed checkpoint save ("reports").
struct SaveFailureEvidence {
  std::optional<int> rank;
  std::string host;  // key "node"
  std::string error;
  uint64_t missed_failures = 0;  // earlier failures it could not report one by one
};

// The evidence of one event (lineage/event_kind.h EvidenceType says which
// fields each kind sets):
//   hang:              culprits, stalled_s, timeout_s, allowance, ranks, stacks
//   crash:             rank, exit_status, exit_code, signal, log_tail, ranks
//   checkpoint_failed: rank, step, newest_committed_step, reports
//   straggler:         rank, ratio, held_s, ranks (with pace)
//   role_crash:        role, role_index, exit_status .. log_tail, ranks (the
//                      role process, its "rank" being its index in the role)
//   role_hang:         role, role_index, stalled_s, timeout_s, allowance
//                      ("hang_s" or "startup"), ranks (the role process)
//   checkpoint_corrupt: step, path, reason, newest_good_step
//   reshard:           world_size_before, world_size_after, left, joined, nodes
//   requeue:           left (the hosts it excluded), reason ("failure" or "preemption")
//   lineage_delayed:   locked_s, held_records
//   preempt (a warning's plan): step, lead_time_s, save_s, step_allowance_s,
//                      margin_s, save_in_s
// Other kinds' evidence (health reports) has keys this does not model; they
// are ignored on reading.
struct IncidentEvidence {
  std::vector<int> culprits;  // the rank(s) that held everyone up (hang)
  // The rank it is about: the one that ended (crash), whose save failed first
  // (checkpoint_failed), the straggler.
  std::optional<int> rank;

  // How the rank ended (crash).
  std::string exit_status;        // "killed by signal 9 (SIGKILL)"; key "status"
  std::optional<int> exit_code;   // -1 when it did not exit
  std::optional<int> signal;      // 0 when not signalled
  std::vector<std::string> log_tail;  // its last log lines, oldest first

  // Why it counts as a hang.
  std::optional<double> stalled_s;  // no step for this long
  std::optional<double> timeout_s;  // the allowance that applied
  std::string allowance;            // "startup", "step", "checkpoint", "eval"; role_hang: "hang_s", "startup", "learner_stall"

  // checkpoint_failed.
  std::optional<int64_t> step;
  std::optional<int64_t> newest_committed_step;  // -1 none
  std::vector<SaveFailureEvidence> reports;

  // straggler.
  std::optional<double> ratio;   // its compute time over the others' median
  std::optional<double> held_s;  // how long the ratio held

  // A role process's incident ([[roles]] of the job file): its role's name
  // and its index in the role ("" and unset for the learner's ranks).
  std::string role;
  std::optional<int> role_index;

  // checkpoint_corrupt: the folder, what is wrong with it, the step the ranks fell back to (-1 none).
  std::string path;
  std::string reason;
  std::optional<int64_t> newest_good_step;

  // reshard: the world size before and after, the hosts that left and joined, the nodes it goes on with.
  std::optional<int> world_size_before;
  std::optional<int> world_size_after;
  std::vector<std::string> left;
  std::vector<std::string> joined;
  std::vector<std::string> nodes;

  // lineage_delayed: how long lineage.db was locked, how many records waited.
  std::optional<double> locked_s;
  std::optional<uint64_t> held_records;

  // preempt, the scheduler's warning (daemon/preempt_plan.h; `step` above:
  // the newest step when it came): its lead time,
  // the save estimate (unset: none measured), the two steps' allowance, the
  // margin, and how long the ranks trained on before the stop (0: at once).
  std::optional<double> lead_time_s;
  std::optional<double> save_s;
  std::optional<double> step_allowance_s;
  std::optional<double> margin_s;
  std::optional<double> save_in_s;

  std::vector<RankEvidence> ranks;  // every rank, by rank

  // hang: the hung processes' stacks, captured before they were stopped
  // (daemon/stack_capture.h), folded (lineage/stacks.h); key "stacks".
  StackEvidence stacks;
};

// The incident's culprit ranks: the evidence's list (a hang), else its
// "rank", else the event's rank.
std::vector<int> Culprits(const EventRecord& e, const IncidentEvidence& ev);

// The hosts of the culprit ranks, as the evidence's rank records name them,
// each once in culprit order ("" hosts left out).
std::vector<std::string> CulpritHosts(const EventRecord& e, const IncidentEvidence& ev);

// A JSON object (no whitespace, keys sorted as holdfastd has always written
// them). Unset optionals, empty strings and empty lists are left out, except
// that a rank's record fields are all written when record_valid. Invalid UTF-8
// in log lines is replaced (U+FFFD), never an error.
std::string ToJson(const IncidentEvidence& evidence);

// Reads what ToJson or any earlier holdfastd wrote. Missing keys are left at
// their defaults and unknown keys ignored; empty text is empty evidence. Not
// JSON, not an object, or a known key of the wrong type is kInvalidArgument
// naming the key ("evidence: ranks[2].step: expected an integer, got string").
// Never throws.
Result<IncidentEvidence> ParseIncidentEvidence(std::string_view json);

}  // namespace holdfast
