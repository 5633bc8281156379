// Host history: the incidents of every run, per host, across runs and jobs —
// what `runctl node HOST`, `runctl runs --all ROOT` and the Slurm Prolog
// (`holdfast-health --prolog --history-action`) read to see that a host keeps
// being implicated ("this host has hung three jobs this week").
//
// It is kept beside the runs, never in one shared SQLite database: SQLite's
// locking over NFS and Lustre is unreliable, and several jobs' leaders write
// at once. Each run's lineage.db keeps its one writer (its leader, under the
// run lock). For the cross-run view the leader also publishes, for each
// incident that names hosts, one small immutable JSON file per (incident,
// host) into that host's directory:
//
//   HISTORY_DIR/HOST/<time_ms, 16 digits>-<run id>-<event id>.json
//
// written in full (and fsynced) under a temporary name in the same directory,
// then renamed to its final name. rename(2) within one directory is atomic on
// a local file system, on NFS (one server-side operation) and on Lustre (one
// metadata-server operation), so a reader either sees the whole file or no
// file: there are no locks, no appends and no read-modify-write, and writers
// of different runs never touch the same file (the name holds the run and
// the event). Publishing the same event again renames an identical file over
// the old one. Readers list the directory and parse each *.json file;
// temporary names (*.json.tmp.PID, left by a writer that died mid-write) are
// not *.json and are never read; a file that does not parse is reported and
// skipped, never fatal. On NFS a new file may take the client's directory
// attribute cache (acdirmax, 60 s by default) to be listed: history is for
// days, not seconds.
//
// Directories are created on first use. A new one gets 0755 (less the umask),
// or, when its parent is sticky and world-writable (mode 1777, as an admin
// makes HISTORY_DIR for a cluster-wide history shared by every user), 1777
// too, so that every user's runs can publish there and none can remove
// another's files. docs/lineage.md ("Host history") has the layout and keys.
//
// The flag rule (JudgeHost): a host credited with incidents in at least
// HistoryRule::runs distinct runs within the last window_days is flagged.
// Only credited incidents count — those the recovery policy counted against
// the host on evidence naming it (lineage's event.node); a host that was
// merely involved (one of many culprits of an all-ranks hang, the host of a
// job's own failure) is recorded with credited = false and never counts.
//
// Thread-safety: plain values and functions of the file system; safe from
// any thread (a publish is one rename).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace holdfast {

inline constexpr int kHostHistoryVersion = 1;

// One (incident, host) of one run.
struct HostIncident {
  std::string host;
  // The recovery policy counted the incident against this host (lineage's
  // event.node); false: the host was only involved (a culprit's host).
  bool credited = false;
  int64_t time_ms = 0;  // the incident's time, unix ms (lineage's event.time_ms)
  std::string kind;     // lineage/event_kind.h
  std::string run_id;
  std::string run_name;
  std::string run_dir;
  int64_t event_id = 0;  // lineage's event.id in the run's lineage.db
  std::optional<int> attempt;
  std::optional<int> generation;
  std::optional<int> rank;
  std::string slurm_job_id;  // "" for a local run
  std::string summary;
  std::string action;
  // Read only (ReadHostHistory): the file it came from and that file's owner.
  std::string file;
  int64_t owner_uid = -1;
};

// kInvalidArgument unless `host` can be a directory name: not empty, at most
// 255 bytes, not "." or "..", no '/' and no byte below 0x20.
Status CheckHistoryHost(std::string_view host);

// "0001764650181123-r-20261202-2afa-7.json": sorts by time.
std::string HostIncidentFileName(const HostIncident& incident);

// RUN_DIR/../.holdfast/hosts: the history of the runs beside RUN_DIR
// (`runctl runs --all ROOT` reads ROOT/.holdfast/hosts). `run_dir` is made
// absolute first.
std::string DefaultHistoryDir(const std::string& run_dir);

// The JSON object of one file (stable keys, docs/lineage.md), and back.
// Parse: not JSON, not an object, a key of the wrong type, another version
// or a missing host, kind, run_id or time_ms is kInvalidArgument naming it.
std::string HostIncidentToJson(const HostIncident& incident);
Result<HostIncident> ParseHostIncident(std::string_view json);

// Writes HISTORY_DIR/HOST/<HostIncidentFileName> as described above,
// creating the directories. Text longer than 2000 bytes (summary, action) is
// cut; invalid UTF-8 is replaced.
Status PublishHostIncident(const std::string& history_dir, const HostIncident& incident);

// What one host's directory holds.
struct HostHistory {
  std::string host;
  std::vector<HostIncident> incidents;  // oldest first
  std::vector<std::string> skipped;     // "FILE: why" for each file that could not be read
};

// Every *.json file of HISTORY_DIR/HOST. A host without a directory has an
// empty history (ok); a directory that cannot be listed is an error. Files
// over 64 KiB, unreadable, not parsing, or naming another host are skipped
// with why.
Result<HostHistory> ReadHostHistory(const std::string& history_dir, const std::string& host);

// The hosts HISTORY_DIR has a directory for, sorted; none when it does not exist.
Result<std::vector<std::string>> HistoryHosts(const std::string& history_dir);

// The nearest DIR/.holdfast/hosts at or above `dir` (`dir`, its parent, ...,
// /), or "" when there is none: where `runctl node` looks by default.
std::string FindHistoryDir(const std::string& dir);

// When a host is flagged (docs/lineage.md; the Prolog's [health] history_runs
// and history_window_days, runctl's --history-runs and --history-window-days).
struct HistoryRule {
  int runs = 3;             // distinct runs with a credited incident ...
  double window_days = 7;   // ... within this many days before now
};
// kInvalidArgument naming the flag or key unless runs >= 1 and 0 < window_days <= 3650.
Status CheckHistoryRule(const HistoryRule& rule);

struct HostVerdict {
  bool flagged = false;
  int64_t window_start_ms = 0;
  // Distinct runs with a credited incident in the window, newest incident first.
  std::vector<std::string> runs;
  int credited = 0;  // credited incidents in the window
  int involved = 0;  // incidents in the window it was only involved in
};
HostVerdict JudgeHost(const HostHistory& history, const HistoryRule& rule, int64_t now_ms);

// "n2 was credited with incidents in 3 runs within 7 days (r-a, r-b, r-c)".
std::string VerdictText(const std::string& host, const HostVerdict& verdict, const HistoryRule& rule);

}  // namespace holdfast
