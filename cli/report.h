// The run report (`runctl report`): one self-contained HTML file (inline CSS
// and SVG, no script, no network) that shows a run's loss and step time, the
// timeline of its attempts, generations, incidents and checkpoints, where its
// wall time went, and the triage of every incident.
//
// Everything here is pure: AccountTime() turns lineage records (and, when
// known, the median step time from metrics.jsonl) into the time breakdown,
// and RenderReportHtml() turns a ReportData into the page. commands.cc reads
// lineage.db and metrics.jsonl and fills the ReportData; the formulas are
// written down in docs/report.md.
//
// Thread-safety: plain values and pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <istream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lineage/lineage_db.h"

namespace holdfast {

// "2025-01-01 12:00:05Z" (UTC); "-" for 0 or less.
std::string FormatTime(int64_t unix_ms);
// A generation's restore tier as people read it: "memory snapshot", "disk
// checkpoint", "a fresh start"; any other text as it is.
std::string RestoreTierText(const std::string& tier);
// With the milliseconds: "2025-01-01 12:00:05.123Z"; `iso`: "2025-01-01T12:00:05.123Z".
std::string FormatTimeMs(int64_t unix_ms, bool iso = false);
// "4.2s", "3m07s", "2h05m"; negative is 0.
std::string FormatDuration(double seconds);

// One line of the trainer's metrics.jsonl.
struct MetricPoint {
  int64_t step = 0;
  double loss = 0;
  double step_ms = 0;
  std::optional<int64_t> time_ms;  // absent in files from older trainers
  // The line before it in the file was the step before (one process ran
  // both); false for a generation's first step after a restart.
  bool follows_previous = true;
};

// Reads metrics.jsonl. A step written more than once (redone after a restart)
// keeps its last line: that is the one the final model descends from. Lines
// that are not JSON objects with a numeric step are skipped (a torn last line
// of a killed trainer). Sorted by step.
std::vector<MetricPoint> ParseMetricsJsonl(std::istream& in);

// Median of the points' step_ms; unset when there are none.
std::optional<double> MedianStepMs(const std::vector<MetricPoint>& points);

// Where one failure's time went (docs/report.md has the formulas).
struct LossRecord {
  int attempt = 0;
  int generation = 0;           // the generation that failed
  std::optional<int64_t> incident_id;  // the incident that ended it (the last before its end), when one was recorded
  double detection_s = 0;       // its last step report -> the incident
  double restart_s = 0;         // the incident (or its end) -> the next generation's start
  int64_t redone_from = 0;      // steps (redone_from, redone_to] were computed again
  int64_t redone_to = 0;
  double redone_s = 0;          // (redone_to - redone_from) x the step time
};

struct TimeAccount {
  double wall_s = 0;        // sum over attempts of their duration (now for a running one)
  double between_attempts_s = 0;  // gaps between attempts: not running at all (queued, stopped)
  double detection_s = 0;
  double restart_s = 0;
  double redone_s = 0;
  double checkpoint_stall_s = 0;  // 0 without metrics (unknown)
  double lost_s = 0;        // the four above
  double effective_s = 0;   // wall_s - lost_s, never negative
  double step_ms = 0;       // the step time used for redone steps; 0 when unknown
  std::string step_ms_source;  // "metrics.jsonl median" or "lineage estimate" or ""
  std::vector<LossRecord> losses;  // one per generation that was followed by another
  // step -> its stall (step_ms over the median), for checkpoints with a metrics line.
  std::map<int64_t, double> checkpoint_stall_ms;
};

// The breakdown of a run's time from its lineage. `metrics` may be empty
// (then the step time is estimated from the generations' step reports and
// checkpoint stalls are unknown). `now_ms` ends what still runs.
TimeAccount AccountTime(const std::vector<AttemptRecord>& attempts,
                        const std::vector<GenerationRecord>& generations,
                        const std::vector<CheckpointRecord>& checkpoints,
                        const std::vector<EventRecord>& events,
                        const std::vector<MetricPoint>& metrics, int64_t now_ms);

struct ReportData {
  RunRecord run;
  std::vector<AttemptRecord> attempts;
  std::vector<GenerationRecord> generations;
  std::vector<CheckpointRecord> checkpoints;
  std::vector<EventRecord> events;  // oldest first (seq)
  std::vector<MetricPoint> metrics;
  std::string metrics_source;  // the file read, or why there is none
  std::string metrics_file;    // the file read; "" when none was found
  std::map<int64_t, std::string> triage;  // event id -> `runctl triage` text of that incident
  TimeAccount time;
  int64_t generated_ms = 0;
};

// The whole page. Every piece of text from the data is HTML-escaped.
std::string RenderReportHtml(const ReportData& data);

// Escapes & < > " ' for HTML text and attribute values.
std::string HtmlEscape(const std::string& text);

}  // namespace holdfast
