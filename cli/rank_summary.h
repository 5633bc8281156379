// How runctl shows a run of many ranks (internal to runctl's commands): each
// rank's condition (healthy, or what is wrong with it), the summary by state
// and by node that `runctl status` opens with, the list of the ranks that are
// not healthy, the --rank/--node/--all selection, the other ranks of a triage
// folded by what they were doing ("510 ranks waiting in allreduce #9001 ..."),
// and the run's health behind `runctl status`'s exit code. The same words come
// from the daemon's live status (RankStatus) and from an incident's recorded
// evidence (RankEvidence): both become RankRows first.
//
// Everything printed here is bounded whatever the world size: a status of 512
// ranks on 64 nodes with a few bad ones stays under 40 lines
// (cli/rank_summary_test.cc).
//
// Thread-safety: pure functions and plain values; safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/status.h"
#include "daemon/control_protocol.h"
#include "lineage/incident.h"
#include "lineage/lineage_db.h"

namespace holdfast {

// One rank as status and triage show it.
struct RankRow {
  int rank = -1;
  int node = -1;       // index of its node; -1 unknown
  std::string host;    // its node's host name; "" unknown
  int64_t pid = 0;
  // "running", "stopped (SIGSTOP)", "stopped (traced)", "exited",
  // "killed by signal 9 (SIGKILL)", "exited with code 1", ...
  std::string state;
  bool attached = true;  // it writes a progress record (false: the job has no progress module, or not yet)
  std::optional<int64_t> step;
  std::string phase;                     // "forward", "collective", ...; "" unknown
  std::optional<double> phase_age_s;     // evidence only
  std::optional<double> heartbeat_age_s;
  // Live, a follower's rank: how old the leader's view of it is (its step is
  // as of then); 0 for the leader's own ranks and in evidence.
  double report_age_s = 0;
  std::optional<double> steps_per_s;     // live: its pace, once the daemon has one
  uint64_t waiting_on = 0;               // the collective it waits in; 0 none
  std::string waiting_kind;              // "allreduce", ...; "" unknown
  std::string waiting_group;             // live: "dp", "tp", ... the collective's group; "" unknown
  uint64_t waiting_group_seq = 0;        // live: its number in that group
  bool culprit = false;                  // the incident names it
  std::string proc_words;                // evidence: "in uninterruptible I/O (D)" ... beside a stopped process
};

// The live status's ranks, node by node.
std::vector<RankRow> RankRows(const RunStatus& s);
// An incident's ranks, `culprits` marked.
std::vector<RankRow> RankRows(const IncidentEvidence& ev, const std::vector<int>& culprits);

// Its node as runctl names it: the host, else "node N".
std::string NodeName(const RankRow& r);
// "0-7,9,12-15": sorted, runs folded; past `max_parts` runs, "... (N ranks)".
std::string RankList(std::vector<int> ranks, size_t max_parts = 8);

// What the rows of one run say about each other: the newest step any rank
// reached, the run's pace (the fastest rank's steps per second; 0 unknown) and
// the rank the daemon reports as straggling (its slowest rank while the ratio
// holds at straggler_factor).
//
// A rank lags when it is 2 or more steps behind the newest beyond what the age
// of its view explains: a follower's ranks are as of its last report, and the
// run moves on by pace × report age steps meanwhile (at 50 steps/s a report
// 50 ms old is 2.5 steps behind and healthy). A view that old with no pace yet
// tells nothing either way, so such a rank is not called lagging.
struct RankContext {
  std::optional<int64_t> newest_step;
  double steps_per_s = 0;
  std::optional<int> straggler;
};
RankContext ContextOf(const std::vector<RankRow>& rows, const RunStatus* live = nullptr);

// "" for a healthy rank; else what is wrong, e.g. "stopped (SIGSTOP)",
// "killed by signal 9 (SIGKILL)", "no progress record", "lagging 3 steps",
// "straggling", "culprit".
std::string Condition(const RankRow& r, const RankContext& ctx);

// `runctl status`'s default view of the ranks: one line by state ("512 ranks
// on 64 nodes: 511 running at step 1234, 1 stopped (SIGSTOP)"), the
// collectives ranks wait in, the nodes that are not healthy, and the ranks
// that are not healthy (a row each while few, else folded by condition).
void PrintRankSummary(std::ostream& os, const std::vector<RankRow>& rows, const RankContext& ctx);

// --rank "3,5,8-11" -> {3,5,8,9,10,11}; kInvalidArgument says what is wrong.
Result<std::vector<int>> ParseRankList(const std::string& text);
// Whether `r` is one --rank/--node asks for (--all: every rank).
bool Selected(const RankSelection& sel, const RankRow& r);
// kInvalidArgument when --rank names a rank the run does not have, or --node
// a node it does not have (the message lists what it has).
Status CheckSelection(const RankSelection& sel, const std::vector<RankRow>& rows);

// Triage's other ranks (not the culprits) folded by what they were doing at
// the incident, `time_ms` (the incident's time, for "since"): a group of more
// than two ranks is one line ("510 ranks waiting in allreduce #9001 at step
// 140 since 2025-01-01 11:55:07Z (for 5m02s..5m12s): ranks 0,2-511 on 64
// nodes"), a smaller one a line per rank as `describe` words it.
std::vector<std::string> FoldOtherRanks(const IncidentEvidence& ev, const std::vector<int>& culprits,
                                        int64_t time_ms, std::string (*describe)(const RankEvidence&));

// The run's health, behind `runctl status`'s exit code (kExitCodesHelp).
enum class RunHealth { kTraining, kSucceeded, kHung, kFailed, kStopped };
const char* RunHealthName(RunHealth h);  // "training", "succeeded", "hung", "failed", "stopped"
// Live: hung while a rank or a role process is stopped (SIGSTOP, a tracer) or the daemon stops
// or restarts the ranks after a hang; once the daemon has finished, the run's
// state in lineage (`recorded`; training when there is none); else training.
RunHealth LiveHealth(const RunStatus& s, const std::optional<RunState>& recorded);
// From lineage: running -> training, succeeded, failed, stopped and preempted -> stopped.
RunHealth RecordedHealth(RunState state);
// training, succeeded -> 0; hung -> 6; failed -> 7; stopped -> 8.
int ExitForHealth(RunHealth h);

}  // namespace holdfast
