// What runctl reads of a recorded run for more than one command: the run's
// whole record for `runctl report` and `runctl incident` (lineage's records,
// its trainer's metrics.jsonl, the triage text of every incident, where its
// time went), and the one-line summary of each run `runctl runs` lists (also
// for every run under a root, `runctl runs --all`). Read-only: lineage.db is
// opened read-only and nothing is written.
//
// Thread-safety: none needed; runctl is single-threaded.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/command_support.h"
#include "cli/report.h"
#include "lineage/lineage_db.h"

namespace holdfast {

// Where the run's trainer wrote metrics.jsonl, read from the job config the
// run was launched with (lineage's config_text): the ranks' command's
// `--metrics P`, `--set output.dir=D`, `--set output.metrics=M`, and
// `--config F`'s [output] when not overridden. Relative paths are the ranks'
// (holdfastd's working directory, which lineage does not record), so they are
// tried against the current directory, the run directory and its parents.
// Returns the first that exists, or "" with *looked listing what was tried.
std::string FindMetrics(const RunRecord& run, std::vector<std::string>* looked);

// Fills `d` with everything lineage holds of `l.run` (read through `l.db`),
// the metrics of `metrics_path` (empty: FindMetrics), each incident's
// `runctl triage` text and the time account. On failure prints the error and
// returns its exit code; else kRunctlOk.
int LoadRunData(const CliContext& c, const RunLookup& l, const std::string& metrics_path, ReportData* d);

// One row of `runctl runs`: the run, its attempts and where its time went,
// from lineage alone (no metrics.jsonl: listing many runs stays quick, so the
// step time is lineage's estimate and checkpoint stalls are not counted).
struct RunSummary {
  RunRecord run;
  size_t attempts = 0;
  TimeAccount time;
};
Result<std::vector<RunSummary>> SummariseRuns(LineageDb& db, int limit, int64_t now_ms);
// RunJson with "attempts", "effective_s" and "wall_s".
nlohmann::json RunSummaryJson(const RunSummary& s);
// RUN, NAME, STATE, ATTEMPTS, LAST STEP, EFFECTIVE, STARTED, CAUSE.
std::vector<std::string> RunSummaryHeaders();
std::vector<std::string> RunSummaryCells(const RunSummary& s);

}  // namespace holdfast
