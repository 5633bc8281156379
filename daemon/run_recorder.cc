#include "daemon/run_recorder.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>

#include <spdlog/spdlog.h>

#include "checkpoint/format.h"
#include "checkpoint/storage.h"
#include "common/atomic_file.h"
#include "common/host_history.h"
#include "common/secrets.h"
#include "daemon/resume_point.h"
#include "daemon/run_dir.h"
#include "health/report.h"
#include "lineage/incident.h"

namespace holdfast {
namespace {

// The record's checkpoint error text, bounded by its field and made valid
// UTF-8: any job may write the record, and the text goes into JSON.
void Warn(const Status& s) {
  if (!s.ok()) spdlog::warn("lineage: {}", s.ToString());
}

}  // namespace

RunRecorder::RunRecorder(const RecorderOptions& options, const TimeSource* clock)
    : opts_(options), clock_(clock), tracker_(CheckpointRoot(*options.job)), job_reports_(options.run_dir) {}

Result<std::unique_ptr<RunRecorder>> RunRecorder::Open(const RecorderOptions& options, const TimeSource* clock) {
  std::unique_ptr<RunRecorder> r(new RunRecorder(options, clock));
  HF_RETURN_IF_ERROR(r->OpenRun());
  return r;
}

Result<std::optional<RunRecord>> RunRecorder::RunToContinue(std::string* kind) {
  std::optional<RunRecord> existing;
  if (!opts_.resume_run.empty()) {
    auto r = db_->FindRun(opts_.resume_run);
    if (!r.ok()) return r.status().WithContext("resume " + opts_.resume_run);
    existing = *r;
    *kind = event_kind::kResume;
  } else if (opts_.allocation.scheduler == SchedulerKind::kSlurm) {
    // Under Slurm the run directory is the run: a requeued or rerun job finds
    // its run by job id, whatever its last attempt ended as; a new submission
    // continues the directory's newest run unless that one succeeded.
    HF_ASSIGN_OR_RETURN(std::optional<RunRecord> found, RunOfSlurmJob(opts_.allocation.job_id));
    if (!found) {
      auto r = db_->LatestRun();
      if (r.ok() && r->state != RunState::kSucceeded) found = *r;
      if (!r.ok() && r.status().code() != StatusCode::kNotFound) return r.status();
    }
    if (found) {
      existing = *found;
      *kind = found->state == RunState::kRunning ? event_kind::kDaemonRestart : event_kind::kResume;
    }
  } else {
    auto r = db_->LatestRun();
    if (r.ok() && (r->state == RunState::kRunning || r->state == RunState::kPreempted)) {
      existing = *r;  // an unfinished run in this directory: this daemon continues it
      *kind = r->state == RunState::kRunning ? event_kind::kDaemonRestart : event_kind::kResume;
    } else if (!r.ok() && r.status().code() != StatusCode::kNotFound) {
      return r.status();
    }
  }
  return existing;
}

Status RunRecorder::OpenRun() {
  const JobConfig& job = *opts_.job;
  LineageOptions lo;
  lo.journal_mode = job.journal_mode;
  lo.clock = [c = clock_] { return c->UnixMs(); };
  HF_ASSIGN_OR_RETURN(db_, LineageDb::Open(opts_.run_dir + "/lineage.db", lo));
  if (job.host_history) {
    history_dir_ = job.history_dir.empty() ? DefaultHistoryDir(opts_.run_dir)
                                           : std::filesystem::absolute(job.history_dir).lexically_normal().string();
  }
  std::string kind;
  HF_ASSIGN_OR_RETURN(const std::optional<RunRecord> existing, RunToContinue(&kind));
  const std::vector<std::string> hosts = opts_.allocation.hosts();
  if (existing.has_value()) {
    run_id_ = existing->run_id;
  } else {
    RunRecord run;
    run.name = job.name;
    run.owner_uid = static_cast<int64_t>(getuid());
    run.run_dir = std::filesystem::absolute(opts_.run_dir).string();
    run.config_path = job.source;
    // Lineage is for reading: secret-looking [job.env] values are redacted there (common/secrets.h);
    // the whole job file, for `holdfastd --resume` once the original is gone, is kept owner-only.
    run.config_text = RedactJobText(job.text);
    run.world_size = opts_.world_size;
    run.nodes = hosts;
    run.scheduler = opts_.allocation.scheduler;
    run.slurm_job_id = opts_.allocation.job_id;
    HF_ASSIGN_OR_RETURN(run_id_, db_->CreateRun(run));
    if (run.config_text != job.text) {
      const std::string copy = JobCopyPath(opts_.run_dir, run_id_);
      if (Status s = WriteFileAtomically(copy, job.text, 0600); !s.ok()) {
        spdlog::warn("{}: a resume without the original job file will get the redacted values", s.ToString());
      }
    }
  }
  auto recorded = db_->Checkpoints(run_id_);
  if (existing.has_value() && opts_.from_step >= 0) {
    // The same check as `runctl resume --from-step`, before anything changes:
    // a step that cannot be resumed from must not cost an attempt and a
    // restart, nor silently train from another step.
    if (!recorded.ok()) return recorded.status();
    HF_RETURN_IF_ERROR(CheckResumeStep(run_id_, *recorded, opts_.from_step, opts_.run_dir));
  }
  int64_t newest_step = -1;
  int newest_world = 0;  // who saved the checkpoint a resumed attempt starts from
  if (recorded.ok()) {
    for (const CheckpointRecord& c : *recorded) {
      if (c.state == CheckpointState::kCommitted && c.step > newest_step) {
        newest_step = c.step;
        newest_world = c.world_size;
      }
      if (c.state == CheckpointState::kCommitted) recorded_steps_.insert(c.step);
      if (c.owner == CheckpointOwner::kJob) {
        if (c.state == CheckpointState::kCommitted) job_owned_[c.step] = c.path;
        else job_owned_.erase(c.step);
      }
      if (c.state == CheckpointState::kCorrupt) corrupt_seen_.insert(std::to_string(c.step) + "\n" + c.reason);
    }
  }
  AttemptStart as;
  as.nodes = hosts;
  as.slurm_job_id = opts_.allocation.job_id;
  as.restart_count = opts_.allocation.restart_count;
  as.gpus = opts_.gpus;
  if (opts_.from_step >= 0) {
    as.resumed_from_step = opts_.from_step;
    requested_start_step_ = opts_.from_step;
  } else if (existing.has_value()) {
    if (const int64_t newest = NewestCommittedStep(); newest >= 0) as.resumed_from_step = newest;
  }
  HF_ASSIGN_OR_RETURN(attempt_, db_->StartAttempt(run_id_, as));
  job_reports_.Refresh();  // what earlier attempts reported: history (and what a resume fences off)
  std::vector<int64_t> fenced;
  if (existing.has_value() && opts_.from_step >= 0) {
    HF_ASSIGN_OR_RETURN(fenced, FenceLaterThan(opts_.from_step));
  }
  last_committed_step_ = existing.has_value() ? NewestCommittedStep() : -1;
  // From here on a write never holds up supervision for long (see Write).
  db_->SetBusyTimeout(kBusyWaitMs);
  if (existing.has_value()) {
    const std::string from = as.resumed_from_step ? "step " + std::to_string(*as.resumed_from_step) : "the start";
    std::string summary = kind == event_kind::kDaemonRestart
                              ? "holdfastd restarted while the run was running (the previous daemon died); continuing"
                              : "run resumed as a new attempt";
    if (opts_.allocation.scheduler == SchedulerKind::kSlurm) {
      summary += " (Slurm job " + opts_.allocation.job_id + ", restart " +
                 std::to_string(opts_.allocation.restart_count) + ", previous attempt " + RunStateName(existing->state) + ")";
    }
    std::string action = "attempt " + std::to_string(attempt_) + " from " + from;
    if (!fenced.empty()) {
      std::string steps;
      for (int64_t s : fenced) steps += (steps.empty() ? "" : ", ") + std::to_string(s);
      action += "; later checkpoints " + steps + " of the abandoned timeline fenced off (kept on disk as step-N" +
                kFencedDirSuffix + ", never resumed from)";
    }
    Record(kind, std::move(summary), std::move(action));
    if (opts_.from_step < 0 && newest_step >= 0 && newest_world > 0 && newest_world != opts_.world_size) {
      // A requeue (or a resume) with another number of nodes: the trainer
      // reshards the checkpoint, keeping the global batch (or refuses).
      IncidentEvidence ev;
      ev.world_size_before = newest_world;
      ev.world_size_after = opts_.world_size;
      Record(event_kind::kReshard,
             "world size " + std::to_string(newest_world) + " -> " + std::to_string(opts_.world_size) +
                 ": checkpoint " + std::to_string(newest_step) + " was saved by " + std::to_string(newest_world) +
                 " ranks, attempt " + std::to_string(attempt_) + " has " + std::to_string(opts_.world_size),
             "the trainer reshards checkpoint " + std::to_string(newest_step) + " to " +
                 std::to_string(opts_.world_size) + " ranks, keeping its global batch",
             ev);
    }
  }
  RecordPruned();
  spdlog::info("run {} attempt {} in {} ({} ranks: {})", run_id_, attempt_, opts_.run_dir, opts_.world_size,
               job.command.front());
  return Status::Ok();
}

Result<std::optional<RunRecord>> RunRecorder::RunOfSlurmJob(const std::string& job_id) {
  HF_ASSIGN_OR_RETURN(std::vector<RunRecord> runs, db_->ListRuns(0));
  for (const RunRecord& run : runs) {
    HF_ASSIGN_OR_RETURN(std::vector<AttemptRecord> attempts, db_->Attempts(run.run_id));
    for (const AttemptRecord& a : attempts) {
      if (a.slurm_job_id == job_id) return std::optional<RunRecord>(run);
    }
  }
  return std::optional<RunRecord>();
}

void RunRecorder::Record(const std::string& kind, std::string summary, std::string action,
                         const IncidentEvidence& evidence, const EventContext& at) {
  EventRecord ev;
  ev.run_id = run_id_;
  ev.kind = kind;
  ev.attempt = attempt_;
  if (generation_ >= 0) ev.generation = generation_;
  ev.node = at.host;
  ev.rank = at.rank;
  ev.summary = std::move(summary);
  ev.action = std::move(action);
  ev.evidence_json = at.report_json.empty() ? ToJson(evidence) : at.report_json;
  ev.runbook = at.runbook ? *at.runbook : RunbookFor(at.runbook_of.empty() ? kind : at.runbook_of);
  std::vector<HistoryHost> hosts = HistoryHostsOf(ev, evidence);
  RecordEvent(std::move(ev), std::move(hosts));
}

void RunRecorder::RecordEvent(EventRecord ev, std::vector<HistoryHost> hosts) {
  ev.time_ms = clock_->UnixMs();  // when it happened, even if written later
  if (IsIncidentKind(ev.kind)) {
    last_incident_ = IncidentSummary{ev.kind, ev.summary, ev.time_ms, ev.action, ev.runbook};
    ++incident_counts_[ev.kind];
  }
  const std::string what = "event " + ev.kind + ": " + ev.summary;
  if (hosts.empty()) {
    Write(what, [ev = std::move(ev)](LineageDb& db) { return db.RecordEvent(ev).status(); });
    return;
  }
  // The host history's files name the event: published once lineage has it.
  Write(what, [this, ev = std::move(ev), hosts = std::move(hosts)](LineageDb& db) {
    HF_ASSIGN_OR_RETURN(const int64_t id, db.RecordEvent(ev));
    PublishHistory(ev, id, hosts);
    return Status::Ok();
  });
}

int64_t RunRecorder::NewestCommittedStep() {
  int64_t newest = tracker_.enabled() ? tracker_.NewestVerified() : -1;
  for (auto it = job_owned_.rbegin(); it != job_owned_.rend() && it->first > newest; ++it) {
    std::error_code ec;
    if (it->second.empty() || std::filesystem::exists(std::filesystem::symlink_status(it->second, ec))) {
      newest = it->first;  // the job's own: its path is there (or it reported none)
      break;
    }
  }
  return tracker_.enabled() || !job_owned_.empty() ? newest : last_committed_step_;
}

bool RunRecorder::TrainerOwns() {
  trainer_format_seen_ = trainer_format_seen_ || (tracker_.enabled() && !tracker_.StepsOnDisk().empty());
  return trainer_format_seen_;
}

void RunRecorder::ObserveCheckpoints(const std::vector<RankView>& views, int world_size) {
  RecordCheckpointFailures(views);
  // A trainer marks a corrupt checkpoint while it restores, before its phase
  // leaves "starting": look at the folders from the start of a generation until
  // a poll that finds every rank past that, not on every poll of a long run.
  if (corrupt_scan_due_) {
    RecordCorrupt();
    bool started = static_cast<int>(views.size()) >= world_size;
    for (const RankView& v : views) {
      started = started && v.progress.valid && v.progress.phase != Phase::kStarting;
    }
    if (started) corrupt_scan_due_ = false;
  }
  int64_t committed = INT64_MAX;
  for (const RankView& v : views) {
    committed = std::min<int64_t>(committed, v.progress.valid ? v.progress.checkpoint_step : -1);
  }
  if (static_cast<int>(views.size()) < world_size || committed == INT64_MAX || committed <= last_committed_step_) {
    return;
  }
  // Every step committed since the last look, not only the newest: two saves
  // can complete between two polls.
  job_reports_.Refresh();  // only when a commit is seen: a listing, not one per poll
  std::vector<int64_t> steps = job_reports_.FreshSteps(last_committed_step_, committed);
  for (int64_t s : tracker_.StepsOnDisk()) {
    if (s > last_committed_step_ && s < committed && tracker_.Verify(s).ok()) steps.push_back(s);
  }
  steps.push_back(committed);
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  for (int64_t s : steps) RecordCommitted(s, world_size);
  last_committed_step_ = committed;
  RecordPruned();
}

void RunRecorder::RecordCommitted(int64_t step, int world_size) {
  if (recorded_steps_.count(step) != 0) return;
  CheckpointRecord c;
  c.run_id = run_id_;
  c.step = step;
  c.world_size = world_size;
  c.attempt = attempt_;
  c.generation = generation_;
  const std::optional<std::string> reported = job_reports_.PathOf(step);
  if (reported || (tracker_.enabled() && !TrainerOwns())) {
    // The job's own checkpoint: where it said, as big as it is there.
    c.owner = CheckpointOwner::kJob;
    c.path = reported.value_or("");
    c.bytes = reported ? PathBytes(*reported) : 0;
    job_owned_[step] = c.path;
  } else if (tracker_.enabled()) {
    c.path = tracker_.StepDir(step);
    c.bytes = tracker_.StepBytes(step);
    c.metrics = tracker_.Metrics(step);
  }
  c.committed_ms = clock_->UnixMs();
  Write("checkpoint step " + std::to_string(step) + " committed", [c](LineageDb& db) { return db.RecordCheckpoint(c); });
  recorded_steps_.insert(step);
}

Result<std::vector<int64_t>> RunRecorder::FenceLaterThan(int64_t step) {
  // Later steps on disk (one may be committed but not yet recorded) and
  // later steps lineage calls committed (recorded_steps_, read at open).
  std::set<int64_t> later(recorded_steps_.upper_bound(step), recorded_steps_.end());
  const std::set<int64_t> committed_rows = later;
  for (int64_t s : tracker_.StepsOnDisk()) {
    if (s > step) later.insert(s);
  }
  for (int64_t s : job_reports_.StepsAfter(step)) later.insert(s);  // the job's own, recorded or not
  std::set<std::string> kept;  // paths of the job's steps the resume keeps: never moved
  for (auto it = job_owned_.begin(); it != job_owned_.end() && it->first <= step; ++it) {
    if (!it->second.empty()) kept.insert(it->second);
  }
  std::vector<int64_t> out;
  for (int64_t s : later) {
    std::string where = "no longer on disk";
    const auto owned = job_owned_.find(s);
    const std::string job_path = owned != job_owned_.end() ? owned->second : job_reports_.PathOf(s).value_or("");
    std::error_code ec;
    if (owned != job_owned_.end() || !job_path.empty()) {  // the job's own (nothing to move when it is gone)
      if (kept.count(job_path) != 0) {
        where = job_path + " left in place: a step the resume keeps has the same path";
      } else if (std::filesystem::exists(std::filesystem::symlink_status(job_path, ec))) {
        HF_ASSIGN_OR_RETURN(where, MoveStepDirAside(job_path, kFencedDirSuffix));
        spdlog::warn("the job's checkpoint of step {} is later than the resume's step {}: moved to {} (the abandoned "
                     "timeline; kept as evidence, never resumed from)", s, step, where);
      }
    } else if (tracker_.enabled() && std::filesystem::exists(tracker_.StepDir(s))) {
      HF_ASSIGN_OR_RETURN(where, MoveStepDirAside(tracker_.StepDir(s), kFencedDirSuffix));
      spdlog::warn("checkpoint step {} is later than the resume's step {}: moved to {} (the abandoned timeline; "
                   "kept as evidence, never resumed from)", s, step, where);
    }
    if (committed_rows.count(s) != 0) {
      HF_RETURN_IF_ERROR(db_->MarkCheckpoint(
          run_id_, s, CheckpointState::kFenced,
          "a later step of the timeline that attempt " + std::to_string(attempt_) + " abandoned by resuming from step " +
              std::to_string(step) + " (" + where + ")"));
    }
    recorded_steps_.erase(s);
    job_owned_.erase(s);
    out.push_back(s);
  }
  return out;
}

void RunRecorder::RecordPruned() {
  if (!tracker_.enabled()) return;
  const std::vector<int64_t> on_disk = tracker_.StepsOnDisk();
  const std::set<int64_t> present(on_disk.begin(), on_disk.end());
  for (auto it = recorded_steps_.begin(); it != recorded_steps_.end();) {
    if (present.count(*it) != 0 || job_owned_.count(*it) != 0) {  // the daemon never calls the job's files pruned
      ++it;
      continue;
    }
    Write("checkpoint step " + std::to_string(*it) + " pruned",
          [run = run_id_, step = *it, why = "no longer on disk (" + tracker_.StepDir(*it) +
                                           "): pruned by the trainer or removed"](LineageDb& db) {
            return db.MarkCheckpoint(run, step, CheckpointState::kPruned, why);
          });
    it = recorded_steps_.erase(it);
  }
}

void RunRecorder::RecordCorrupt() {
  if (!tracker_.enabled()) return;
  // Every folder on disk, not only steps in lineage: a rank can die between
  // committing a step and the daemon's next look.
  for (const CheckpointTracker::CorruptFolder& f : tracker_.CorruptFolders()) {
    // One report per corruption: the same folder is seen marked in place,
    // then moved aside; the reason (shard, checksums) tells two apart.
    if (!corrupt_seen_.insert(std::to_string(f.step) + "\n" + f.reason).second) continue;
    const int64_t step = f.step;
    const std::string reason = f.reason;
    if (recorded_steps_.count(step) == 0) RecordCommitted(step, opts_.world_size);  // it was committed
    recorded_steps_.erase(step);
    spdlog::error("CHECKPOINT CORRUPT: step {}: {}", step, reason);
    Write("checkpoint step " + std::to_string(step) + " corrupt", [run = run_id_, step, reason](LineageDb& db) {
      return db.MarkCheckpoint(run, step, CheckpointState::kCorrupt, reason);
    });
    int64_t newest = -1;  // what the ranks fell back to: the newest older step that checks out
    for (int64_t s : tracker_.StepsOnDisk()) {
      if (s < step && tracker_.Verify(s).ok()) {
        newest = s;
        break;
      }
    }
    IncidentEvidence ev;
    ev.step = step;
    ev.path = f.dir;
    ev.reason = reason;
    ev.newest_good_step = newest;
    Record(event_kind::kCheckpointCorrupt, "checkpoint step " + std::to_string(step) + " is corrupt: " + reason,
           "the ranks skipped it and resumed from " +
               (newest >= 0 ? "step " + std::to_string(newest) : std::string("the start")) +
               "; it is never resumed from; its files stay as evidence in " + f.dir,
           ev);
  }
}

void RunRecorder::RecordCheckpointFailures(const std::vector<RankView>& views) {
  if (failures_generation_ != generation_) {
    failures_generation_ = generation_;
    failures_seen_.clear();
    failed_steps_recorded_.clear();
  }
  // Every rank reports the outcome of the same save (checkpoint/checkpoint_writer.h),
  // so one event per failed step, carrying each reporting rank's text.
  struct Report {
    int rank;
    std::string host;
    uint64_t missed;  // earlier failures of this rank not seen one by one
    std::string error;
  };
  std::map<int64_t, std::vector<Report>> by_step;
  for (const RankView& v : views) {  // sorted by rank
    if (!v.progress.valid || v.progress.torn) continue;  // read again on the next tick
    const RankProgress& p = v.progress;
    uint64_t& seen = failures_seen_[v.rank];
    if (p.checkpoint_failures <= seen) continue;
    by_step[p.checkpoint_failed_step].push_back({v.rank, v.host, p.checkpoint_failures - seen - 1, p.checkpoint_error});
    seen = p.checkpoint_failures;
  }
  for (const auto& [step, reports] : by_step) {
    for (const Report& r : reports) {
      spdlog::warn("CHECKPOINT FAILED: step {} on rank {} (training goes on): {}", step, r.rank, r.error);
    }
    if (!failed_steps_recorded_.insert(step).second) continue;  // a rank reporting it late
    // Name the rank whose own write failed: the others report only that a peer's did.
    const Report& first = *std::find_if(reports.begin(), reports.end(), [&](const Report& r) {
      return r.error.find(" failed to write its shard") == std::string::npos || &r == &reports.back();
    });
    IncidentEvidence ev;
    ev.step = step;
    ev.rank = first.rank;
    ev.newest_committed_step = last_committed_step_;
    uint64_t missed = 0;
    for (const Report& r : reports) {
      ev.reports.push_back(SaveFailureEvidence{r.rank, r.host, r.error, r.missed});
      missed = std::max(missed, r.missed);
    }
    const std::string newest = last_committed_step_ >= 0 ? std::to_string(last_committed_step_) : "none";
    std::string summary = "checkpoint step " + std::to_string(step) + " failed on rank " + std::to_string(first.rank) +
                          (reports.size() > 1 ? " and " + std::to_string(reports.size() - 1) + " other(s)" : "") +
                          ": " + first.error;
    if (missed > 0) summary += " (" + std::to_string(missed) + " earlier failure(s) not seen one by one)";
    Record(event_kind::kCheckpointFailed, std::move(summary),
           "training continues; step " + std::to_string(step) + " not committed (newest committed: " + newest + ")",
           ev, EventContext{first.host, first.rank, std::nullopt, "", ""});
  }
}

void RunRecorder::RecordHealth(const std::vector<health::CheckResult>& results, const std::string& host) {
  for (const health::CheckResult& r : results) {
    HealthResultRecord h;
    h.run_id = run_id_;
    h.node = host;
    h.check = r.subject.empty() ? r.name : r.name + " " + r.subject;
    h.status = r.status == health::CheckStatus::kPass   ? HealthStatus::kPass
               : r.status == health::CheckStatus::kWarn ? HealthStatus::kWarn
               : r.status == health::CheckStatus::kFail ? HealthStatus::kFail
                                                        : HealthStatus::kSkipped;
    h.source = r.evidence.source;
    h.evidence_json = health::ResultToJson(r);
    h.suggested_action = health::ActionName(r.action);
    h.time_ms = clock_->UnixMs();
    Write("health " + h.check, [h](LineageDb& db) { return db.RecordHealthResult(h).status(); });
  }
}

void RunRecorder::EndAttempt(RunState state, const std::string& cause) {
  Write("attempt " + std::to_string(attempt_) + " end", [run = run_id_, a = attempt_, state, cause](LineageDb& db) {
    return db.EndAttempt(run, a, state, cause);
  });
  attempt_ended_ = true;
  FlushBeforeExit();  // a requeue ends this daemon next
}

void RunRecorder::EndRun(RunState state, const std::string& cause) {
  RecordPruned();  // the trainer prunes after its last commit
  if (!attempt_ended_) {
    Write("attempt " + std::to_string(attempt_) + " end", [run = run_id_, a = attempt_, state, cause](LineageDb& db) {
      return db.EndAttempt(run, a, state, cause);
    });
  }
  Write("run end", [run = run_id_, state, cause](LineageDb& db) { return db.EndRun(run, state, cause); });
  FlushBeforeExit();
}

void RunRecorder::Write(std::string what, std::function<Status(LineageDb&)> write) {
  if (held_.empty()) {
    Status s = write(*db_);
    if (s.code() != StatusCode::kUnavailable) {
      Warn(s);
      return;
    }
    locked_since_ns_ = clock_->MonotonicNs();
    held_total_ = 0;
    spdlog::warn("lineage.db is locked by another process ({}): holding records in memory and writing them, in "
                 "order, once it is free; training is not affected",
                 s.message());
  }
  held_.push_back({std::move(what), std::move(write)});
  ++held_total_;
}

void RunRecorder::Flush() {
  if (held_.empty()) return;
  while (!held_.empty()) {
    Status s = held_.front().write(*db_);
    if (s.code() == StatusCode::kUnavailable) return;  // still locked: next poll
    Warn(s);
    held_.pop_front();
  }
  const double locked_s = static_cast<double>(clock_->MonotonicNs() - locked_since_ns_) / 1e9;
  spdlog::info("lineage.db is free again after {:.1f} s; {} held record(s) written", locked_s, held_total_);
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%.1f", locked_s);
  IncidentEvidence ev;
  ev.locked_s = locked_s;
  ev.held_records = held_total_;
  Record(event_kind::kLineageDelayed,
         "lineage.db was locked by another process for " + std::string(secs) + " s; " + std::to_string(held_total_) +
             " record(s) were held in memory and written in order",
         "none needed; keep long transactions (sqlite3 shells, backups) off a running run's lineage.db", ev);
}

void RunRecorder::FlushBeforeExit() {
  // Real time, not the injected clock: this waits for another process.
  const TimeSource* real = RealTimeSource::Get();
  const int64_t deadline_ns = real->MonotonicNs() + int64_t{kExitWaitMs} * 1'000'000;
  if (!held_.empty()) {
    spdlog::warn("lineage.db is still locked; waiting up to {} s to write {} held record(s)", kExitWaitMs / 1000,
                 held_.size());
  }
  while (!held_.empty() && real->MonotonicNs() < deadline_ns) {
    Flush();
    if (!held_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  for (const HeldWrite& h : held_) {
    spdlog::error("lineage: NOT RECORDED (lineage.db locked for more than {} s at exit): {}", kExitWaitMs / 1000,
                  h.what);
  }
  held_.clear();
}

}  // namespace holdfast
