#include "cli/timeline.h"

#include <algorithm>

#include "cli/format.h"
#include "cli/report.h"

namespace holdfast {

std::vector<TimelineItem> TimelineItems(const std::vector<AttemptRecord>& attempts,
                                        const std::vector<GenerationRecord>& gens,
                                        const std::vector<CheckpointRecord>& ckpts,
                                        const std::vector<EventRecord>& events) {
  using I = TimelineItem;
  std::vector<TimelineItem> items;
  auto opt = [](const std::optional<int>& v) { return v ? std::to_string(*v) : std::string("-"); };
  for (const AttemptRecord& a : attempts) {
    std::string how = a.resumed_from_step
                          ? "resumed from step " + std::to_string(*a.resumed_from_step)
                          : std::string("fresh start");
    if (a.parent_attempt) how += ", after attempt " + std::to_string(*a.parent_attempt);
    if (!a.slurm_job_id.empty()) how += ", slurm job " + a.slurm_job_id;
    if (a.restart_count > 0) how += ", requeue #" + std::to_string(a.restart_count);
    if (!a.nodes.empty()) how += ", nodes " + Join(a.nodes, ",");
    items.push_back({a.seq, a.started_ms, I::kAttemptStart, 0, std::to_string(a.attempt), "-",
                     "attempt " + std::to_string(a.attempt) + " started: " + how});
    if (a.ended_ms) {
      items.push_back({a.ended_seq.value_or(a.seq), *a.ended_ms, I::kAttemptEnd, 0, std::to_string(a.attempt),
                       "-",
                       "attempt " + std::to_string(a.attempt) + " ended " +
                           StateAndCause(RunStateName(a.state), a.cause)});
    }
  }
  for (const GenerationRecord& g : gens) {
    std::string a = std::to_string(g.attempt), n = std::to_string(g.generation);
    items.push_back({g.seq, g.started_ms, I::kGenerationStart, 0, a, n,
                     "generation " + n + " started from step " + std::to_string(g.start_step) +
                         (g.restore_tier.empty() || g.restore_tier == "none"
                              ? ""
                              : " (" + RestoreTierText(g.restore_tier) + ")") +
                         (g.mesh.empty() ? "" : " as " + g.mesh)});
    if (g.ended_ms) {
      // Older daemons left last_step unset when no step came before the end:
      // then it ended where it started.
      items.push_back({g.ended_seq.value_or(g.seq), *g.ended_ms, I::kGenerationEnd, 0, a, n,
                       "generation " + n + " ended " + RunStateName(g.state) + " at step " +
                           std::to_string(g.last_step.value_or(g.start_step)) +
                           (g.cause.empty() ? "" : ": " + g.cause)});
    }
  }
  for (const CheckpointRecord& k : ckpts) {
    items.push_back({k.seq, k.committed_ms, I::kCheckpoint, k.step, opt(k.attempt), opt(k.generation),
                     "checkpoint step " + std::to_string(k.step) + " committed (" +
                         FormatBytes(k.bytes) + ", world " + std::to_string(k.world_size) +
                         ") " + (k.owner == CheckpointOwner::kJob && k.path.empty() ? "(the job reported no path)" : k.path) +
                         (k.owner == CheckpointOwner::kJob ? " [job's own]" : "")});
    if (k.state != CheckpointState::kCommitted) {
      items.push_back({k.state_seq.value_or(k.seq), k.state_ms.value_or(k.committed_ms), I::kCheckpoint, k.step,
                       opt(k.attempt), opt(k.generation),
                       "checkpoint step " + std::to_string(k.step) + " marked " +
                           CheckpointStateName(k.state) +
                           (k.reason.empty() ? "" : ": " + k.reason)});
    }
  }
  for (const EventRecord& e : events) {
    std::string who;
    if (e.rank) who += "rank " + std::to_string(*e.rank);
    if (!e.node.empty()) who += (who.empty() ? "" : " on ") + NodeLabel(e.node);
    std::string text = (e.incident ? "[" + e.kind + "] " : e.kind + ": ") +
                       (who.empty() ? "" : who + ": ") + e.summary;
    if (!e.action.empty()) text += " -> " + e.action;
    if (e.incident) {
      std::string rb = e.runbook.empty() ? DefaultRunbook(e.kind) : e.runbook;
      if (!rb.empty()) text += " (" + rb + ")";
    }
    items.push_back({e.seq, e.time_ms, I::kEvent, e.id, opt(e.attempt), opt(e.generation), text});
  }
  std::stable_sort(items.begin(), items.end(), [](const TimelineItem& a, const TimelineItem& b) {
    if (a.seq != b.seq) return a.seq < b.seq;
    if (a.order != b.order) return a.order < b.order;
    return a.tie < b.tie;
  });
  return items;
}

}  // namespace holdfast
