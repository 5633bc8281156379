// The incident write-up as Markdown and as JSON: the same fields, from one
// IncidentWriteUp (cli/incident.h).
#include <algorithm>
#include <cstdio>

#include "cli/format.h"
#include "cli/incident.h"

namespace holdfast {
namespace {

using json = nlohmann::json;

// A table cell: one line, '|' escaped.
std::string Cell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else if (c == '\n' || c == '\r') out += ' ';
    else out += c;
  }
  return out;
}

void Row(std::ostream& os, std::initializer_list<std::string> cells) {
  os << "|";
  for (const std::string& c : cells) os << " " << Cell(c) << " |";
  os << "\n";
}

// A fence longer than any run of backticks in `text`.
std::string Fence(const std::string& text) {
  size_t longest = 0, run = 0;
  for (char c : text) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  return std::string(std::max<size_t>(3, longest + 1), '`');
}

std::string OrNone(const std::vector<std::string>& v) { return v.empty() ? "none" : Join(v, ", "); }

std::string AttemptText(const AttemptRecord& a) {
  std::string s = "attempt " + std::to_string(a.attempt);
  if (!a.slurm_job_id.empty()) s += ", Slurm " + SlurmJobText(a.slurm_job_id, a.restart_count, a.nodes);
  else if (!a.nodes.empty()) s += " on " + Join(a.nodes, ",");
  return s;
}

std::string GpuText(const IncidentImpact& im) {
  if (!im.gpus) return "unknown (lineage from before schema 7 does not record the GPUs)";
  if (*im.gpus == 0) return "none: the ranks ran on the CPU";
  return FormatDuration(im.lost_s) + " x " + std::to_string(*im.gpus) + " GPUs = " + FormatHours(*im.gpu_hours);
}

void PrintImpact(std::ostream& os, const IncidentWriteUp& w) {
  const IncidentImpact& im = w.impact;
  os << "## Impact\n\n";
  if (im.counted_with) {
    os << "Counted with incident " << *im.counted_with << ", which ended generation "
       << (w.event.generation ? std::to_string(*w.event.generation) : "-") << " of attempt "
       << (w.event.attempt ? std::to_string(*w.event.attempt) : "-") << " (`runctl incident " << w.run.run_id << " "
       << *im.counted_with << "`).\n\n";
    return;
  }
  if (!im.stopped_training) {
    os << "None: training went on (the incident did not stop the ranks).\n\n";
    return;
  }
  os << "| | |\n| --- | --- |\n";
  if (im.last_progress_ms) {
    const std::string at = FormatTimeMs(*im.last_progress_ms);
    Row(os, {"detection", FormatDuration(im.detection_s) +
                              (w.evidence.stalled_s ? " (the stall: no step completed since " + at + ")"
                               : *im.last_progress_ms <= w.event.time_ms
                                   ? " (the ranks' last step report, at " + at + " -> the incident)"
                                   : std::string(" (seen at once: the ranks reported progress until it)"))});
  }
  const std::string resumed =
      im.resumed ? "generation " + std::to_string(*im.resumed_generation) + " of attempt " +
                       std::to_string(*im.resumed_attempt) + " started from step " +
                       std::to_string(im.resumed_from_step) + " at " + FormatTimeMs(*im.resumed_ms)
                 : std::string("not resumed: to the run's end, or now");
  Row(os, {"downtime", FormatDuration(im.downtime_s) + " (the incident -> " + resumed + ")"});
  if (im.resumed && im.resumed_attempt != w.event.attempt) {
    Row(os, {"of which between attempts", FormatDuration(im.between_attempts_s) +
                                               " (no attempt running: the requeue, the queue, the new job's start)"});
  }
  if (im.resumed) {
    char redo[160];
    std::snprintf(redo, sizeof(redo), "%lld (steps %lld-%lld) x %.0f ms = %s",
                  static_cast<long long>(im.redone_to - im.redone_from), static_cast<long long>(im.redone_from + 1),
                  static_cast<long long>(im.redone_to), im.step_ms, FormatDuration(im.redone_s).c_str());
    Row(os, {"redone steps", im.redone_to > im.redone_from
                                 ? std::string(redo) + " (step time: " +
                                       (im.step_ms_source.empty() ? "unknown" : im.step_ms_source) + ")"
                                 : std::string("none")});
  }
  Row(os, {"time lost", FormatDuration(im.lost_s)});
  Row(os, {"rank-hours", FormatDuration(im.lost_s) + " x " + std::to_string(im.world_size) + " ranks = " +
                             FormatHours(im.rank_hours)});
  Row(os, {"GPU-hours", GpuText(im)});
  os << "\n";
}

void PrintNodes(std::ostream& os, const IncidentWriteUp& w) {
  os << "## Nodes\n\n";
  os << "- credited: "
     << (w.credited_host.empty() ? "none (no host is blamed for it)"
                                 : w.credited_host + " (the evidence names it: it counts against " + w.credited_host +
                                       ", `runctl node " + w.credited_host + "`)")
     << "\n";
  os << "- culprits' hosts: " << OrNone(w.culprit_hosts) << "\n";
  if (w.attempt) os << "- the attempt's nodes: " << OrNone(w.attempt->nodes) << "\n";
  os << "- excluded afterwards: " << OrNone(w.excluded) << "\n";
  os << "- drained: " << OrNone(w.drained) << "\n";
  if (w.resumed_attempt) os << "- training resumed on: " << OrNone(w.resumed_attempt->nodes) << "\n";
  os << "\n";
}

void PrintSlurm(std::ostream& os, const IncidentWriteUp& w) {
  os << "## Slurm\n\n";
  if (w.slurm_job_ids.empty()) {
    os << "Not a Slurm run (scheduler " << SchedulerKindName(w.run.scheduler) << ").\n\n";
    return;
  }
  os << "| attempt | job | restart | nodes | state |\n| --- | --- | --- | --- | --- |\n";
  for (const std::optional<AttemptRecord>* a : {&w.attempt, &w.resumed_attempt}) {
    if (!a->has_value()) continue;
    const AttemptRecord& r = **a;
    Row(os, {std::to_string(r.attempt), r.slurm_job_id, std::to_string(r.restart_count), Join(r.nodes, ","),
             StateAndCause(RunStateName(r.state), r.cause)});
  }
  os << "\n";
}

json AttemptOrNull(const std::optional<AttemptRecord>& a) { return a ? AttemptJson(*a) : json(nullptr); }

json TimelineJson(const std::vector<TimelineItem>& items) {
  json out = json::array();
  for (const TimelineItem& i : items) {
    out.push_back({{"time_ms", i.t}, {"time", FormatTimeMs(i.t, true)}, {"attempt", i.att}, {"generation", i.gen},
                   {"text", i.text}});
  }
  return out;
}

json ImpactJson(const IncidentImpact& im) {
  return {{"stopped_training", im.stopped_training},
          {"counted_with", OptJson(im.counted_with)},
          {"last_progress_ms", OptJson(im.last_progress_ms)},
          {"last_step", OptJson(im.last_step)},
          {"detection_s", im.detection_s},
          {"resumed", im.resumed},
          {"resumed_ms", OptJson(im.resumed_ms)},
          {"resumed_attempt", OptJson(im.resumed_attempt)},
          {"resumed_generation", OptJson(im.resumed_generation)},
          {"resumed_from_step", im.resumed ? json(im.resumed_from_step) : json(nullptr)},
          {"downtime_s", im.downtime_s},
          {"between_attempts_s", im.between_attempts_s},
          {"redone_from", im.redone_from},
          {"redone_to", im.redone_to},
          {"redone_steps", im.redone_to - im.redone_from},
          {"redone_s", im.redone_s},
          {"step_ms", im.step_ms},
          {"step_ms_source", im.step_ms_source},
          {"lost_s", im.lost_s},
          {"world_size", im.world_size},
          {"rank_hours", im.rank_hours},
          {"gpus", OptJson(im.gpus)},
          {"gpu_hours", OptJson(im.gpu_hours)}};
}

}  // namespace

void PrintIncidentMarkdown(std::ostream& os, const IncidentWriteUp& w) {
  const EventRecord& e = w.event;
  os << "# " << w.title << "\n\n" << w.summary << "\n\n";
  os << "| | |\n| --- | --- |\n";
  Row(os, {"run", w.run.run_id + " (" + w.run.name + "): " + StateAndCause(RunStateName(w.run.state), w.run.cause)});
  Row(os, {"run directory", w.run.run_dir});
  std::string where;
  if (e.attempt) where += "attempt " + std::to_string(*e.attempt);
  if (e.generation) where += ", generation " + std::to_string(*e.generation);
  Row(os, {"incident", std::to_string(w.number) + " of " + std::to_string(w.count) + ": " + e.kind + " at " +
                           FormatTimeMs(e.time_ms) + (where.empty() ? "" : " (" + where + ")") + "; lineage event " +
                           std::to_string(e.id)});
  std::vector<std::string> ranks;
  for (int r : w.culprits) ranks.push_back(std::to_string(r));
  Row(os, {"culprit", ranks.empty() ? "none named" : (ranks.size() == 1 ? "rank " : "ranks ") + Join(ranks, ", ")});
  if (!w.log_path.empty()) Row(os, {"log", w.log_path});
  Row(os, {"node credited", w.credited_host.empty() ? "none" : w.credited_host});
  if (w.attempt) Row(os, {"attempt", AttemptText(*w.attempt)});
  if (w.resumed_attempt) Row(os, {"resumed in", AttemptText(*w.resumed_attempt)});
  Row(os, {"runbook", w.runbook.empty() ? "none" : BaseName(w.runbook) + " (" +
                                                       (w.runbook_path.empty() ? w.runbook : w.runbook_path) + ")"});
  os << "\n## Timeline (UTC)\n\n| time | attempt | generation | what |\n| --- | --- | --- | --- |\n";
  for (const TimelineItem& i : w.timeline) Row(os, {FormatTimeMs(i.t), i.att, i.gen, i.text});
  os << "\n";
  PrintImpact(os, w);
  os << "## Evidence\n\nAs `runctl triage` shows it";
  os << (w.evidence.stacks.groups.empty() ? "" : " (with the hung processes' stacks)") << ":\n\n";
  const std::string fence = Fence(w.triage);
  os << fence << "text\n" << w.triage << (w.triage.empty() || w.triage.back() == '\n' ? "" : "\n") << fence << "\n\n";
  os << "## Actions taken\n\n| time | event | what | action |\n| --- | --- | --- | --- |\n";
  for (const EventRecord& a : w.actions) {
    Row(os, {FormatTimeMs(a.time_ms), a.kind + (a.node.empty() ? "" : " (" + a.node + ")"), a.summary,
             a.action.empty() ? "-" : a.action});
  }
  os << "\n";
  PrintSlurm(os, w);
  PrintNodes(os, w);
  os << "## Runbook\n\n"
     << (w.runbook.empty() ? "None for '" + e.kind + "'."
                           : "`" + w.runbook + "`" + (w.runbook_path.empty() ? "" : ": " + w.runbook_path))
     << "\n\n## Open questions\n\n";
  if (w.open_questions.empty()) os << "None that lineage can tell.\n";
  for (const std::string& q : w.open_questions) os << "- " << q << "\n";
  if (w.count > 1) {
    os << "\n## The run's incidents\n\n| # | time | kind | summary |\n| --- | --- | --- | --- |\n";
    for (const IncidentWriteUp::Ref& r : w.incidents) {
      Row(os, {std::to_string(r.number) + (r.number == w.number ? " (this)" : ""), FormatTimeMs(r.time_ms), r.kind,
               r.summary});
    }
    os << "\n`runctl incident " << w.run.run_id << " N` writes up incident N.\n";
  }
}

json IncidentJson(const IncidentWriteUp& w) {
  json incident = EventJson(w.event);
  incident["culprits"] = w.culprits;
  incident["log_path"] = w.log_path.empty() ? json(nullptr) : json(w.log_path);
  json actions = json::array();
  for (const EventRecord& a : w.actions) {
    json j = EventJson(a);
    j.erase("evidence");  // the incident's is under "incident"; an action's adds nothing a person reads
    j["time"] = FormatTimeMs(a.time_ms, true);
    actions.push_back(std::move(j));
  }
  json others = json::array();
  for (const IncidentWriteUp::Ref& r : w.incidents) {
    others.push_back({{"number", r.number}, {"time_ms", r.time_ms}, {"kind", r.kind}, {"summary", r.summary}});
  }
  return {{"version", 1},
          {"number", w.number},
          {"count", w.count},
          {"title", w.title},
          {"summary", w.summary},
          {"run", RunJson(w.run)},
          {"incident", std::move(incident)},
          {"time", FormatTimeMs(w.event.time_ms, true)},
          {"timeline", TimelineJson(w.timeline)},
          {"impact", ImpactJson(w.impact)},
          {"evidence_error", w.evidence_error.empty() ? json(nullptr) : json(w.evidence_error)},
          {"triage", w.triage},
          {"actions", std::move(actions)},
          {"slurm", {{"job_ids", w.slurm_job_ids},
                     {"attempt", AttemptOrNull(w.attempt)},
                     {"resumed_attempt", AttemptOrNull(w.resumed_attempt)}}},
          {"nodes", {{"credited", w.credited_host.empty() ? json(nullptr) : json(w.credited_host)},
                     {"culprit_hosts", w.culprit_hosts},
                     {"attempt_nodes", w.attempt ? json(w.attempt->nodes) : json::array()},
                     {"excluded", w.excluded},
                     {"drained", w.drained},
                     {"resumed_on", w.resumed_attempt ? json(w.resumed_attempt->nodes)
                                                      : (w.attempt && w.impact.resumed ? json(w.attempt->nodes)
                                                                                       : json::array())}}},
          {"runbook", {{"file", w.runbook.empty() ? json(nullptr) : json(w.runbook)},
                       {"path", w.runbook_path.empty() ? json(nullptr) : json(w.runbook_path)}}},
          {"open_questions", w.open_questions},
          {"incidents", std::move(others)}};
}

}  // namespace holdfast
