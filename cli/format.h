// runctl's words and tables (internal to runctl's commands): how sizes,
// nodes, lists and absent values read, the table layout, the --json
// projections of lineage records (stable keys: docs/control-protocol.md and
// README "runctl"), and the two long texts shared by more than one command —
// the live status of a run and the triage of one incident (`runctl triage`
// and every incident of `runctl report`). Durations and times are
// cli/report.h's FormatDuration and FormatTime.
//
// Thread-safety: pure functions and plain values; safe from any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "daemon/control_protocol.h"
#include "lineage/incident.h"
#include "lineage/lineage_db.h"

namespace holdfast {

// Rank- or GPU-hours: "0.0056", "0.000059", "12.3", "4210" (never an exponent).
std::string FormatHours(double hours);
// "512 B", "1.5 KiB", ... "2.0 TiB".
std::string FormatBytes(int64_t b);
// holdfastd names nodes by their index ("0", "1"): those read "node 0"; a
// name that says what it is (a hostname, "node0") stays as it is.
std::string NodeLabel(const std::string& node);
std::string Join(const std::vector<std::string>& v, const char* sep);
// "SIGKILL" for the common signals; nullptr for the others.
const char* SignalName(int sig);
// The runbook file for an event kind, when the event does not name one.
std::string DefaultRunbook(const std::string& kind);
// The part of a path after its last '/'.
std::string BaseName(const std::string& path);
// `word` as one shell word, for a command line runctl prints for a person to
// paste: as it is when it holds only characters no shell treats specially
// ("runs/r1"), else in single quotes ('/tmp/hf long/run', a ' as '\'').
std::string ShellWord(const std::string& word);
// "failed: budget exhausted"; just the state when there is no cause.
std::string StateAndCause(const std::string& state, const std::string& cause);
// "job 42 (restart 1) on n1,n3": a Slurm attempt, live or recorded. The
// restart count shows even when 0, so a first run is told from a requeue.
std::string SlurmJobText(const std::string& job_id, int restart_count, const std::vector<std::string>& hosts);

template <typename T>
nlohmann::json OptJson(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

template <typename T>
std::string OptText(const std::optional<T>& v) {
  return v ? std::to_string(*v) : "-";
}

// Columns padded to their widest cell; the last column is not padded.
class Table {
 public:
  explicit Table(std::vector<std::string> headers) { rows_.push_back(std::move(headers)); }
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void Print(std::ostream& os) const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

// The --json objects of lineage's records.
nlohmann::json RunJson(const RunRecord& r);
nlohmann::json AttemptJson(const AttemptRecord& a);
nlohmann::json GenerationJson(const GenerationRecord& g);
nlohmann::json CheckpointJson(const CheckpointRecord& k);
// Its evidence parsed (as text when it is not JSON), its runbook defaulted.
nlohmann::json EventJson(const EventRecord& e);

// `runctl status`'s text of a live daemon's status: the run, then its ranks
// summarised by state and node with only those that are not healthy listed
// (cli/rank_summary.h); `sel` (--all, --rank, --node) shows full rows instead.
void PrintLiveStatus(std::ostream& os, const RunStatus& s, const RankSelection& sel = {});

// "rank 1 on gpu-a17, pid 6101: forward at step 140 (for 5m13s), 9000 issued,
// heartbeat 5m13s ago, process stopped": one rank at an incident.
std::string DescribeRankEvidence(const RankEvidence& r);

// (Culprits: lineage/incident.h.)
// The culprit's log file (common/run_files.h): RUN_DIR/logs/aA-gG-rankR.log
// of the event's attempt and generation, or a role process's; "" when the
// event names no rank or no generation.
std::string CulpritLogPath(const RunRecord& run, const EventRecord& e, const IncidentEvidence& ev);

// `runctl triage`'s text for one incident of `run` (the report shows the
// same text for each of its incidents). It opens with what on-call acts on —
// the incident, culprit, exit or stall, the culprit's log file, action and
// runbook, in at most 10 lines — then the evidence blocks: save errors, the
// log's last lines, the other ranks folded by state (`sel.all`: a line each).
// The runbook is named as its file in `runbooks_dir` (cli/runbook_path.h
// RunbookDir; "": as recorded).
void PrintTriage(std::ostream& os, const RunRecord& run, const EventRecord& e, const std::string& runbooks_dir,
                 const RankSelection& sel = {});

}  // namespace holdfast
