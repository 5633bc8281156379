// The incident write-up built from the run's record (rendering:
// incident_render.cc).
#include "cli/incident.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "cli/format.h"
#include "cli/runbook_path.h"

namespace holdfast {
namespace {

const AttemptRecord* FindAttempt(const ReportData& d, const std::optional<int>& attempt) {
  if (!attempt) return nullptr;
  for (const AttemptRecord& a : d.attempts) {
    if (a.attempt == *attempt) return &a;
  }
  return nullptr;
}

const GenerationRecord* FindGeneration(const ReportData& d, const std::optional<int>& attempt,
                                       const std::optional<int>& generation) {
  if (!attempt || !generation) return nullptr;
  for (const GenerationRecord& g : d.generations) {
    if (g.attempt == *attempt && g.generation == *generation) return &g;
  }
  return nullptr;
}

// The first generation started after write `seq`: where training went on.
const GenerationRecord* FirstGenerationAfter(const ReportData& d, int64_t seq) {
  const GenerationRecord* best = nullptr;
  for (const GenerationRecord& g : d.generations) {
    if (g.seq > seq && (best == nullptr || g.seq < best->seq)) best = &g;
  }
  return best;
}

void AddOnce(std::vector<std::string>* v, const std::string& s) {
  if (!s.empty() && std::find(v->begin(), v->end(), s) == v->end()) v->push_back(s);
}

IncidentImpact ImpactOf(const ReportData& d, const EventRecord& e, const IncidentEvidence& ev,
                        const std::vector<const EventRecord*>& incidents) {
  IncidentImpact im;
  im.world_size = d.run.world_size;
  im.step_ms = d.time.step_ms;
  im.step_ms_source = d.time.step_ms_source;
  const AttemptRecord* a = FindAttempt(d, e.attempt);
  if (a != nullptr) im.gpus = a->gpus;
  const GenerationRecord* g = FindGeneration(d, e.attempt, e.generation);
  if (g != nullptr) {
    im.last_progress_ms = std::max(g->started_ms, g->last_step_ms.value_or(g->started_ms));
    im.last_step = g->last_step.value_or(g->start_step);
  }
  const LossRecord* loss = nullptr;
  for (const LossRecord& l : d.time.losses) {
    if (l.incident_id == e.id) loss = &l;
  }
  if (g != nullptr && loss == nullptr) {
    // It did not end its generation: training went on after it (a failed
    // save), or it came while the incident that ended it was being handled.
    im.stopped_training = false;
    for (const LossRecord& l : d.time.losses) {
      if (l.attempt != g->attempt || l.generation != g->generation || !l.incident_id) continue;
      for (size_t i = 0; i < incidents.size(); ++i) {
        if (incidents[i]->id == *l.incident_id && incidents[i]->seq < e.seq) im.counted_with = static_cast<int>(i + 1);
      }
    }
    return im;
  }
  const GenerationRecord* next = FirstGenerationAfter(d, e.seq);
  if (next != nullptr) {
    im.resumed = true;
    im.resumed_ms = next->started_ms;
    im.resumed_attempt = next->attempt;
    im.resumed_generation = next->generation;
    im.resumed_from_step = next->start_step;
  }
  if (loss != nullptr) {
    im.detection_s = loss->detection_s;
    // A hang: its last progress is the stall before it (AccountTime's detection), not the generation's last report.
    if (ev.stalled_s && im.last_progress_ms) im.last_progress_ms = e.time_ms - std::llround(im.detection_s * 1000);
    im.redone_from = loss->redone_from;
    im.redone_to = loss->redone_to;
    im.redone_s = loss->redone_s;
  }
  const int64_t end_ms = next != nullptr ? next->started_ms : d.run.ended_ms.value_or(d.generated_ms);
  im.downtime_s = static_cast<double>(std::max<int64_t>(0, end_ms - e.time_ms)) / 1000.0;
  if (next != nullptr && a != nullptr && next->attempt != a->attempt && a->ended_ms) {
    if (const AttemptRecord* na = FindAttempt(d, next->attempt)) {
      im.between_attempts_s = static_cast<double>(std::max<int64_t>(0, na->started_ms - *a->ended_ms)) / 1000.0;
    }
  }
  im.lost_s = im.detection_s + im.downtime_s + im.redone_s;
  im.rank_hours = im.lost_s * im.world_size / 3600.0;
  if (im.gpus && *im.gpus > 0) im.gpu_hours = im.lost_s * *im.gpus / 3600.0;
  return im;
}

// The failed generation's start to the resumed one's start (else to the next
// incident, else the end): every record in between, except the checkpoints
// the generation committed before the incident other than the one training
// resumed from; with a line for the ranks' last step report before it.
std::vector<TimelineItem> TimelineOf(const ReportData& d, const EventRecord& e, const IncidentImpact& im,
                                     const std::vector<const EventRecord*>& incidents) {
  int64_t from = e.seq;
  if (const GenerationRecord* g = FindGeneration(d, e.attempt, e.generation)) {
    from = g->seq;
  } else if (const AttemptRecord* a = FindAttempt(d, e.attempt)) {
    from = a->seq;
  }
  int64_t to = std::numeric_limits<int64_t>::max();
  const GenerationRecord* next = im.resumed ? FirstGenerationAfter(d, e.seq) : nullptr;
  if (next != nullptr) {
    to = next->seq;
  } else {
    for (const EventRecord* other : incidents) {
      if (other->seq > e.seq) to = std::min(to, other->seq - 1);
    }
  }
  std::optional<int64_t> restored;  // the seq of the commit training resumed from
  for (const CheckpointRecord& k : d.checkpoints) {
    if (im.resumed && k.step == im.resumed_from_step && k.seq < e.seq) restored = k.seq;
  }
  std::vector<TimelineItem> out;
  for (TimelineItem& i : TimelineItems(d.attempts, d.generations, d.checkpoints, d.events)) {
    const bool restore_point = restored && i.order == TimelineItem::kCheckpoint && i.seq == *restored;
    if (!restore_point && (i.seq < from || i.seq > to)) continue;
    if (!restore_point && i.order == TimelineItem::kCheckpoint && i.seq < e.seq) continue;
    // (A step report written at the generation's end, after the incident, is not "before it".)
    if (i.order == TimelineItem::kEvent && i.tie == e.id && im.last_progress_ms && im.last_step &&
        *im.last_progress_ms <= e.time_ms) {
      out.push_back({e.seq, *im.last_progress_ms, TimelineItem::kEvent, 0, i.att, i.gen,
                     "the ranks' last progress before it (step " + std::to_string(*im.last_step) + ")"});
    }
    out.push_back(std::move(i));
  }
  return out;
}

// What lineage does not know about this incident, as questions for the postmortem.
std::vector<std::string> OpenQuestions(const IncidentWriteUp& w) {
  std::vector<std::string> q;
  const EventRecord& e = w.event;
  const IncidentEvidence& ev = w.evidence;
  const std::string culprit = w.culprits.empty() ? std::string("the culprit") : "rank " + std::to_string(w.culprits[0]);
  const std::string where = w.credited_host.empty() ? (w.culprit_hosts.empty() ? std::string("its node")
                                                                                : w.culprit_hosts[0])
                                                    : w.credited_host;
  if (!w.evidence_error.empty()) q.push_back("The evidence could not be read (" + w.evidence_error + "): which holdfastd wrote it?");
  if (e.kind == event_kind::kCrash && ev.signal.value_or(0) == 9) {
    q.push_back("Who sent SIGKILL to " + culprit + "? Lineage records the signal, not its sender: the kernel's OOM "
                "killer (`journalctl -k | grep -i oom` on " + where + "), an operator or a script.");
  } else if (e.kind == event_kind::kCrash && ev.signal.value_or(0) > 0) {
    q.push_back("No core dump or stack of the crash is in lineage: is there a core on " + where +
                " (`coredumpctl list`)?");
  } else if (e.kind == event_kind::kCrash && ev.exit_code.value_or(0) > 0) {
    q.push_back(culprit + " exited with code " + std::to_string(*ev.exit_code) +
                ": what does its log say (" + (w.log_path.empty() ? "the log's last lines above" : w.log_path) +
                ")? Is it the job's own error?");
  }
  if (e.kind == event_kind::kHang && ev.stacks.groups.empty()) {
    q.push_back("No stack of the hung processes was captured ([supervise] stack_timeout_s = 0, the stack tool "
                "missing, or the capture ran out of time): where were they?");
  }
  if (CountsAgainstHost(e.kind) && w.credited_host.empty()) {
    q.push_back("No host was credited: the evidence names no single host (all ranks stalled, or the same failure on "
                "every host). Was the fabric, the storage or the job at fault?");
  }
  if (e.kind == event_kind::kNodeLost && !w.credited_host.empty()) {
    q.push_back("Why did " + w.credited_host + "'s holdfastd go silent? Lineage has nothing from it after " +
                FormatTime(e.time_ms) + ": the node's own logs (journalctl, the BMC) say.");
  }
  if (!w.excluded.empty() && w.drained.empty()) {
    q.push_back("The requeue excluded " + Join(w.excluded, ", ") + " from this job only: is it healthy for others? "
                "(`runctl node HOST`, `runctl health` there; lineage records only the drains holdfastd made)");
  }
  if (w.impact.stopped_training && !w.impact.resumed) {
    q.push_back("Training has not resumed after it (the run is " + StateAndCause(RunStateName(w.run.state), w.run.cause) +
                "): what does it need to go on (`runctl resume`)?");
  }
  if (w.impact.resumed && w.impact.step_ms_source == "lineage estimate") {
    q.push_back("The redone steps are costed with lineage's estimate of the step time (no metrics.jsonl was found; it "
                "includes start-up, so it errs long): `runctl report --metrics FILE` has the measured one.");
  }
  if (!w.impact.gpus) q.push_back("Whether the ranks had GPUs is not recorded (lineage from before schema 7): GPU-hours unknown.");
  return q;
}

std::string SummaryOf(const IncidentWriteUp& w) {
  const IncidentImpact& im = w.impact;
  std::string s = FormatTime(w.event.time_ms) + ": " + w.event.summary + ".";
  if (!w.event.action.empty()) s += " holdfastd: " + w.event.action + ".";
  if (im.counted_with) {
    return s + " Its cost is counted with incident " + std::to_string(*im.counted_with) + ", which ended the generation.";
  }
  if (!im.stopped_training) return s + " Training went on: it did not stop the ranks.";
  if (im.resumed) {
    s += " Training resumed from step " + std::to_string(im.resumed_from_step) + ", " + FormatDuration(im.downtime_s) +
         " later (attempt " + std::to_string(*im.resumed_attempt) + ", generation " +
         std::to_string(*im.resumed_generation) + ")";
    s += im.redone_to > im.redone_from ? "; " + std::to_string(im.redone_to - im.redone_from) + " steps were computed again."
                                       : ".";
  } else {
    s += " Training has not resumed.";
  }
  s += " Time lost: " + FormatDuration(im.lost_s) + " x " + std::to_string(im.world_size) + " ranks = " +
       FormatHours(im.rank_hours) + " rank-hours";
  if (im.gpu_hours) s += " (" + FormatHours(*im.gpu_hours) + " GPU-hours)";
  return s + ".";
}

}  // namespace

std::vector<const EventRecord*> IncidentsOf(const ReportData& d) {
  std::vector<const EventRecord*> out;
  for (const EventRecord& e : d.events) {
    if (e.incident) out.push_back(&e);
  }
  return out;
}

IncidentWriteUp BuildIncidentWriteUp(const ReportData& d, int number, const std::string& runbooks_dir) {
  const std::vector<const EventRecord*> incidents = IncidentsOf(d);
  IncidentWriteUp w;
  w.number = number;
  w.count = static_cast<int>(incidents.size());
  w.run = d.run;
  w.event = *incidents.at(static_cast<size_t>(number - 1));
  const EventRecord& e = w.event;
  for (size_t i = 0; i < incidents.size(); ++i) {
    w.incidents.push_back({static_cast<int>(i + 1), incidents[i]->time_ms, incidents[i]->kind, incidents[i]->summary});
  }
  Result<IncidentEvidence> parsed = ParseIncidentEvidence(e.evidence_json);
  if (parsed.ok()) {
    w.evidence = std::move(parsed).value();
  } else {
    w.evidence_error = parsed.status().message();
  }
  w.culprits = Culprits(e, w.evidence);
  w.log_path = CulpritLogPath(d.run, e, w.evidence);
  w.impact = ImpactOf(d, e, w.evidence, incidents);
  w.timeline = TimelineOf(d, e, w.impact, incidents);
  if (auto it = d.triage.find(e.id); it != d.triage.end()) w.triage = it->second;

  // Actions: its own decision, then what was done until training resumed (or the next incident).
  w.actions.push_back(e);
  const int64_t to = w.timeline.empty() ? e.seq : w.timeline.back().seq;
  for (const EventRecord& x : d.events) {
    if (x.seq <= e.seq || x.seq > to || x.incident) continue;
    w.actions.push_back(x);
    if (x.action == "drain") AddOnce(&w.drained, x.node);
    if (x.kind == event_kind::kRequeue || x.kind == event_kind::kReshard) {
      if (Result<IncidentEvidence> ev = ParseIncidentEvidence(x.evidence_json); ev.ok()) {
        for (const std::string& h : ev->left) AddOnce(&w.excluded, h);
      }
    }
  }
  if (const AttemptRecord* a = FindAttempt(d, e.attempt)) w.attempt = *a;
  if (w.impact.resumed && w.impact.resumed_attempt != e.attempt) {
    if (const AttemptRecord* a = FindAttempt(d, w.impact.resumed_attempt)) w.resumed_attempt = *a;
  }
  if (w.attempt) AddOnce(&w.slurm_job_ids, w.attempt->slurm_job_id);
  if (w.resumed_attempt) AddOnce(&w.slurm_job_ids, w.resumed_attempt->slurm_job_id);
  w.credited_host = e.node;
  w.culprit_hosts = CulpritHosts(e, w.evidence);
  w.runbook = e.runbook.empty() ? DefaultRunbook(e.kind) : e.runbook;
  if (!w.runbook.empty()) {
    const std::string file = RunbookFile(runbooks_dir, w.runbook);
    if (file != w.runbook) w.runbook_path = file;
  }
  std::string who;
  if (w.culprits.size() == 1) who = " of rank " + std::to_string(w.culprits[0]);
  if (w.culprits.size() > 1) who = " of " + std::to_string(w.culprits.size()) + " ranks";
  const std::string host = !w.credited_host.empty() ? w.credited_host
                           : w.culprit_hosts.size() == 1 ? w.culprit_hosts[0] : std::string();
  w.title = "Incident " + std::to_string(number) + " of run " + d.run.run_id + " (" + d.run.name + "): " + e.kind +
            who + (host.empty() ? "" : " on " + host);
  w.summary = SummaryOf(w);
  w.open_questions = OpenQuestions(w);
  return w;
}

}  // namespace holdfast
