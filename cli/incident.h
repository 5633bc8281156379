// The incident write-up (`runctl incident RUN [N]`): one incident of a run as
// a document to paste into a postmortem — title, summary, timeline, impact,
// evidence, actions taken, Slurm jobs, nodes, runbook, and the questions the
// record leaves open. Everything comes from the run's lineage as
// cli/run_data.h LoadRunData reads it for `runctl report`: the same records,
// the same time account (cli/report.h AccountTime) and the same triage text
// (cli/format.h PrintTriage), so the write-up, the report and `runctl triage`
// cannot disagree. docs/incident.md has the fields, the JSON keys and the
// formulas.
//
// BuildIncidentWriteUp() is pure (records in, a value out);
// PrintIncidentMarkdown() and IncidentJson() render the same value.
//
// Thread-safety: plain values and pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "cli/report.h"
#include "cli/timeline.h"
#include "lineage/incident.h"
#include "lineage/lineage_db.h"

namespace holdfast {

// The incidents of a run, oldest first (the numbers `runctl incident RUN N`
// and the report's incident list use: 1 is the first).
std::vector<const EventRecord*> IncidentsOf(const ReportData& d);

// What the incident cost (docs/incident.md, "Impact").
struct IncidentImpact {
  // The incident stopped the ranks: it ended its generation (or none was
  // running). false: training went on (a failed save), and it cost nothing here.
  bool stopped_training = true;
  std::optional<int64_t> last_progress_ms;  // the failed generation's last step report (or its start)
  std::optional<int64_t> last_step;
  double detection_s = 0;  // last step report -> the incident
  bool resumed = false;    // a later generation trained again
  std::optional<int64_t> resumed_ms;  // that generation's start
  std::optional<int> resumed_attempt;
  std::optional<int> resumed_generation;
  int64_t resumed_from_step = 0;  // the checkpoint step it restored
  // Incident -> resumed (not resumed: -> the run's end, or now while it runs).
  double downtime_s = 0;
  double between_attempts_s = 0;  // of the downtime: no attempt running (a requeue's queue)
  int64_t redone_from = 0;        // steps (redone_from, redone_to] were computed again
  int64_t redone_to = 0;
  double redone_s = 0;
  double step_ms = 0;
  std::string step_ms_source;  // "metrics.jsonl median", "lineage estimate", ""
  double lost_s = 0;           // detection + downtime + redone
  int world_size = 0;
  double rank_hours = 0;       // lost_s x world_size / 3600
  std::optional<int> gpus;     // ranks on a GPU in the failed attempt; unset: not recorded
  std::optional<double> gpu_hours;  // lost_s x gpus / 3600, when gpus > 0
  // It came while an earlier incident that ended its generation was being
  // handled (a node lost while the ranks stopped): that one holds the impact
  // (its number); this one's is left at 0.
  std::optional<int> counted_with;
};

struct IncidentWriteUp {
  int number = 0;  // 1-based, of `count`
  int count = 0;
  RunRecord run;
  EventRecord event;
  IncidentEvidence evidence;  // parsed; empty when it did not parse (evidence_error says why)
  std::string evidence_error;
  std::vector<int> culprits;
  std::string log_path;  // the culprit's log (cli/format.h CulpritLogPath); "" none
  std::string title;
  std::string summary;
  std::vector<TimelineItem> timeline;  // the failed generation's start to the resumed one's
  IncidentImpact impact;
  std::string triage;                // `runctl triage`'s text of this incident (every evidence block)
  std::vector<EventRecord> actions;  // the incident's own decision, then every action up to the resume
  std::optional<AttemptRecord> attempt;          // the attempt it happened in
  std::optional<AttemptRecord> resumed_attempt;  // the attempt training resumed in, when another
  std::vector<std::string> slurm_job_ids;        // of those attempts, each once
  std::string credited_host;                     // the event's node: the host it counts against; "" none
  std::vector<std::string> culprit_hosts;
  std::vector<std::string> excluded;  // hosts a requeue or reshard after it left out
  std::vector<std::string> drained;
  std::string runbook;       // "runbooks/crash.md"
  std::string runbook_path;  // the file on this machine (cli/runbook_path.h); "" when not found
  std::vector<std::string> open_questions;
  // Every incident of the run, oldest first (for "the others").
  struct Ref {
    int number = 0;
    int64_t time_ms = 0;
    std::string kind;
    std::string summary;
  };
  std::vector<Ref> incidents;
};

// Incident `number` (1-based) of `d`; `number` must be in [1, IncidentsOf(d).size()].
IncidentWriteUp BuildIncidentWriteUp(const ReportData& d, int number, const std::string& runbooks_dir);

// The Markdown document (docs/incident.md shows one).
void PrintIncidentMarkdown(std::ostream& os, const IncidentWriteUp& w);
// The same fields as one JSON object (stable keys: docs/incident.md).
nlohmann::json IncidentJson(const IncidentWriteUp& w);

}  // namespace holdfast
