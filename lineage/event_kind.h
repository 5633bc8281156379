// Event kinds: the one table of what holdfastd records in lineage's event
// table — each kind, whether it reports something that went wrong (an
// incident: runctl status's "last incident", the incident column, the
// metrics' incident counters) or an action taken, its on-call guide under
// runbooks/, and which evidence it carries (lineage/incident.h
// IncidentEvidence). IsIncidentKind and RunbookFor read this table and
// nothing else, so the kinds, their runbooks and their incident flag cannot
// drift apart (Slurm's slurm_errno.c habit: one table for codes and texts).
//
// The kind column is free text: a newer daemon may write kinds this build
// does not know; they are not incidents and have no runbook here.
//
// Thread-safety: constants and pure functions.
#pragma once

#include <string_view>

namespace holdfast {

// Event kinds in use.
namespace event_kind {
inline constexpr const char kCrash[] = "crash";
inline constexpr const char kHang[] = "hang";
inline constexpr const char kHealth[] = "health";
inline constexpr const char kPreempt[] = "preempt";
inline constexpr const char kNodeLost[] = "node_lost";
inline constexpr const char kCheckpointFailed[] = "checkpoint_failed";
inline constexpr const char kCheckpointCorrupt[] = "checkpoint_corrupt";
inline constexpr const char kBudgetExhausted[] = "budget_exhausted";
inline constexpr const char kDaemonRestart[] = "daemon_restart";
inline constexpr const char kStraggler[] = "straggler";                    // a rank computing far slower than the others
inline constexpr const char kStragglerRecovered[] = "straggler_recovered";  // an action-free note
// A rank that reported its peers' work done (their final step, their stop's
// checkpoint) but did not exit within exit_grace_s of their clean exit: it was
// terminated, and the generation ended as its peers did (not an incident).
inline constexpr const char kExitStuck[] = "exit_stuck";
// A generation's ranks passed memory snapshots over (a checksum that failed,
// a step not every rank held) and restored an older step: not an incident
// (the restore is correct), a note of the steps redone and of damaged memory.
inline constexpr const char kSnapshotPassedOver[] = "snapshot_passed_over";
inline constexpr const char kLineageDelayed[] = "lineage_delayed";  // records held while lineage.db was locked
inline constexpr const char kRestart[] = "restart";    // an action, not an incident
inline constexpr const char kRequeue[] = "requeue";    // an action
inline constexpr const char kResume[] = "resume";      // an action
inline constexpr const char kStop[] = "stop";          // an action
inline constexpr const char kReshard[] = "reshard";    // an action: an elastic run goes on with other nodes
// A role process ([[roles]] of the job file, not a learner rank) exited or
// hung; the event's evidence names the role and index, its action whether it
// was restarted alone or with the learner.
inline constexpr const char kRoleCrash[] = "role_crash";
inline constexpr const char kRoleHang[] = "role_hang";
}  // namespace event_kind

// What an event's evidence_json holds (the fields of IncidentEvidence each sets).
enum class EvidenceType {
  kNone,            // no evidence ({})
  kRanks,           // crash, hang, role_crash, role_hang, exit_stuck: every rank's record, how the culprit ended
  kHealthReport,    // health: the report of health/report.h (its own keys)
  kSaveFailure,     // checkpoint_failed: step, rank, newest_committed_step, reports
  kCorruptCheckpoint,  // checkpoint_corrupt: step, path, reason, newest_good_step
  kStraggler,       // straggler, straggler_recovered: rank, ratio, held_s, ranks (with pace)
  kReshard,         // reshard: world_size_before/after, left, joined, nodes
  kRequeue,         // requeue (made): left (the hosts it excluded), reason ("failure" or "preemption")
  kLineageDelayed,  // lineage_delayed: locked_s, held_records
  kPreemptPlan,     // preempt at a warning: step, lead_time_s, save_s, step_allowance_s, margin_s, save_in_s
};

struct EventKindInfo {
  const char* kind;     // event_kind::*
  bool is_incident;     // something went wrong (not an action taken)
  const char* runbook;  // path under the source tree (runctl prints the file: cli/runbook_path.h); "" if none
  EvidenceType evidence;
  // An event of this kind whose node is set counts against that host: the
  // recovery policy's per-host history (daemon/recovery_policy.h) and the
  // cross-run host history's credited incidents (common/host_history.h).
  bool counts_against_host = false;
};

// Every kind of event_kind above, once (incident_test checks both ways).
//  - A rank that could not start because of bad input is recorded as a crash.
//  - A health incident names the runbook of the check that failed
//    (health/check.h CheckResult::runbook); the one here is for a decision
//    that names no check.
//  - A daemon stopped by a signal records a stop with the crash runbook; an
//    operator's stop has none.
//  - A requeue that could not be made has the requeue runbook; a requeue done
//    and a drain on the way out have none (the run goes on).
inline constexpr EventKindInfo kEventKinds[] = {
    {event_kind::kCrash, true, "runbooks/crash.md", EvidenceType::kRanks, true},
    {event_kind::kHang, true, "runbooks/hang.md", EvidenceType::kRanks, true},
    {event_kind::kHealth, true, "runbooks/health-host.md", EvidenceType::kHealthReport, true},
    {event_kind::kPreempt, true, "runbooks/preempted.md", EvidenceType::kPreemptPlan},
    {event_kind::kNodeLost, true, "runbooks/crash.md", EvidenceType::kNone, true},
    {event_kind::kCheckpointFailed, true, "runbooks/checkpoint-failed.md", EvidenceType::kSaveFailure},
    {event_kind::kCheckpointCorrupt, true, "runbooks/checkpoint-failed.md", EvidenceType::kCorruptCheckpoint},
    {event_kind::kBudgetExhausted, true, "runbooks/restart-budget.md", EvidenceType::kNone},
    {event_kind::kDaemonRestart, true, "runbooks/crash.md", EvidenceType::kNone},
    {event_kind::kStraggler, false, "runbooks/straggler.md", EvidenceType::kStraggler},
    {event_kind::kStragglerRecovered, false, "runbooks/straggler.md", EvidenceType::kStraggler},
    {event_kind::kExitStuck, false, "runbooks/hang.md", EvidenceType::kRanks},
    {event_kind::kSnapshotPassedOver, false, "runbooks/memory-snapshots.md", EvidenceType::kNone},
    {event_kind::kLineageDelayed, false, "runbooks/lineage-locked.md", EvidenceType::kLineageDelayed},
    {event_kind::kRestart, false, "", EvidenceType::kNone},
    {event_kind::kRequeue, false, "runbooks/requeue-failed.md", EvidenceType::kRequeue},
    {event_kind::kResume, false, "", EvidenceType::kNone},
    {event_kind::kStop, false, "", EvidenceType::kNone},
    {event_kind::kReshard, false, "runbooks/elastic.md", EvidenceType::kReshard},
    {event_kind::kRoleCrash, true, "runbooks/roles.md", EvidenceType::kRanks},
    {event_kind::kRoleHang, true, "runbooks/roles.md", EvidenceType::kRanks},
};

// The row of `kind`; nullptr for a kind this build does not know.
const EventKindInfo* FindEventKind(std::string_view kind);

// Whether an event of this kind with its node set counts against that host
// (crash, hang, node_lost, health).
bool CountsAgainstHost(std::string_view kind);

// Whether an event kind reports something that went wrong (as opposed to an
// action taken); LineageDb::LastIncident() returns only these.
bool IsIncidentKind(std::string_view kind);

// The runbook for an event kind ("runbooks/hang.md"), "" when it has none or
// the kind is unknown (a newer daemon's). Never null; points at static storage.
const char* RunbookFor(std::string_view kind);

}  // namespace holdfast
