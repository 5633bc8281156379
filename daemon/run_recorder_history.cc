// RunRecorder's histories: the run's own — what the recovery policy's blame
// rules and bounds read back from lineage (daemon/recovery_policy.h
// RunHistory) — and the cross-run host history its incidents are published
// into (common/host_history.h).
#include "daemon/run_recorder.h"

#include <algorithm>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "common/host_history.h"
#include "lineage/event_kind.h"

namespace holdfast {

std::optional<FailureRecord> CrashFailureOf(const IncidentEvidence& ev, const std::string& host, int attempt) {
  if (!ev.rank) return std::nullopt;
  FailureRecord f;
  f.host = host;
  f.exit_code = ev.exit_code.value_or(-1);
  f.signal = ev.signal.value_or(0);
  f.attempt = attempt;
  for (const RankEvidence& r : ev.ranks) {
    if (r.rank != *ev.rank) continue;
    if (r.record_valid && r.step) f.step = *r.step + 1;  // the step it was in
    if (!r.host.empty()) f.host = r.host;                // where it ran, whatever the event credits
  }
  return f;
}

IncidentEvidence RequeueEvidence(const std::vector<std::string>& excluded, bool after_failure) {
  IncidentEvidence ev;
  ev.left = excluded;
  ev.reason = after_failure ? "failure" : "preemption";
  return ev;
}

std::map<std::string, int> RunRecorder::HostIncidents() {
  std::map<std::string, int> out;
  auto events = db_->Events(run_id_, 0);
  if (!events.ok()) return out;
  for (const EventRecord& e : *events) {
    if (!e.node.empty() && CountsAgainstHost(e.kind)) ++out[e.node];
  }
  return out;
}

std::vector<RunRecorder::HistoryHost> RunRecorder::HistoryHostsOf(const EventRecord& ev,
                                                                  const IncidentEvidence& evidence) const {
  std::vector<HistoryHost> hosts;
  if (history_dir_.empty() || !CountsAgainstHost(ev.kind)) return hosts;
  if (!ev.node.empty()) {
    hosts.push_back({ev.node, true});
    return hosts;
  }
  // Credited to no host (all ranks stalled, the job's own failure): each culprit's host was involved.
  for (const std::string& h : CulpritHosts(ev, evidence)) hosts.push_back({h, false});
  return hosts;
}

void RunRecorder::PublishHistory(const EventRecord& ev, int64_t id, const std::vector<HistoryHost>& hosts) {
  HostIncident i;
  i.time_ms = ev.time_ms;
  i.kind = ev.kind;
  i.run_id = ev.run_id;
  i.run_name = opts_.job->name;
  i.run_dir = std::filesystem::absolute(opts_.run_dir).lexically_normal().string();
  i.event_id = id;
  i.attempt = ev.attempt;
  i.generation = ev.generation;
  i.rank = ev.rank;
  i.slurm_job_id = opts_.allocation.job_id;
  i.summary = ev.summary;
  i.action = ev.action;
  for (const HistoryHost& h : hosts) {
    i.host = h.host;
    i.credited = h.credited;
    if (Status s = PublishHostIncident(history_dir_, i); !s.ok()) {
      // Once per daemon: the record is for people; the run goes on.
      if (!history_warned_) {
        spdlog::warn("{} (the run goes on; [lineage] history_dir or host_history = false to silence this)",
                     s.message());
      }
      history_warned_ = true;
    }
  }
}

RunHistory RunRecorder::History() {
  RunHistory out;
  auto events = db_->Events(run_id_, 0);
  if (!events.ok()) return out;
  for (const EventRecord& e : *events) {
    if (e.kind != event_kind::kCrash && e.kind != event_kind::kRequeue) continue;
    Result<IncidentEvidence> ev = ParseIncidentEvidence(e.evidence_json);
    if (!ev.ok()) continue;
    if (e.kind == event_kind::kCrash) {
      if (std::optional<FailureRecord> f = CrashFailureOf(*ev, e.node, e.attempt.value_or(0))) {
        out.failures.push_back(*f);
      }
      continue;
    }
    if (ev->reason != "failure") continue;  // a preemption's, or a requeue that could not be made
    ++out.requeues;
    for (const std::string& h : ev->left) {
      if (std::find(out.excluded_hosts.begin(), out.excluded_hosts.end(), h) == out.excluded_hosts.end()) {
        out.excluded_hosts.push_back(h);
      }
    }
  }
  return out;
}

}  // namespace holdfast
