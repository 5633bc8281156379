// The recovery policy: one pure, deterministic function from what went wrong
// (the incident, the implicated hosts' history in this run, the health
// policy's decision, the restart budget, what the scheduler can do) to the
// one thing holdfastd does about it:
//
//   restart in place (after a backoff)   the node is fine; the budget allows
//   requeue excluding hosts              a host is implicated again, or lost, or
//                                        its health asks to leave the job
//   drain and requeue                    a health check asks for a drain and
//                                        the scheduler may drain
//   continue without hosts               an elastic run (min_nodes): the hosts
//                                        leave, spares take their place, and the
//                                        run goes on from its newest checkpoint
//                                        on at least min_nodes nodes
//   stop, with a cause                   budget spent, bad input, an operator's
//                                        stop, or nothing else is possible
//
// Every decision to restart or stop a run is taken here and nowhere else; the
// supervisor carries it out and lineage records it with `reason`. Like
// health/policy.h: no clock, no state, no I/O — same input, same output —
// so the whole table is a unit test (daemon/recovery_policy_test.cc).
//
// The rules, by incident ("ex" = caps.requeue && caps.exclude_hosts):
//
//   bad_input             stop, failed — the same input would fail again
//   role_failed           stop after a checkpoint, failed — the learner is
//                         fine, a role process is not (daemon/role_policy.h)
//   stop_request,         stop after a checkpoint, stopped
//   daemon_signal
//   preemption            requeue (no exclusions) after a checkpoint, preempted;
//                         without caps.requeue: stop after a checkpoint, preempted
//   crash, hang,          a repeated host (earlier incidents >= repeat_threshold)
//   health/restart        and ex: requeue excluding the repeated hosts only;
//                         else restart in place while restarts_used <
//                         restart_budget (the reason says when a repeated host
//                         could not be kept out); else stop, failed,
//                         budget_exhausted
//   node_lost             ex: requeue excluding the lost hosts; caps.requeue:
//                         requeue without exclusions; else stop, failed
//   health/exclude_node   ex: requeue excluding the hosts; else stop, failed
//   health/drain_node     drain + ex: drain and requeue excluding the hosts;
//                         ex: requeue excluding (could not be drained); else
//                         stop, failed
//
// Blame (CreditedHosts): which hosts an incident counts against, in this
// run's history (host_incidents, the event's node) and for the repeat rule
// above. Only evidence that names a host credits it:
//   crash, bad_input      the host of the rank that ended
//   hang                  the culprits' host, when every culprit is on that one
//                         host and they are not every rank (all_ranks): a hang
//                         whose culprits span several hosts, or every rank
//                         ("all ranks entered collective #N, none completed"),
//                         credits no host — nothing tells one host from another
//   node_lost, health     the hosts lost / whose check failed
//   anything else         none
// The repeat rule looks only at credited hosts: an uncredited hang restarts in
// place (budget permitting) and can never exclude a host.
//
// The job's own failure (before the rules above): a crash is "the same
// failure" as an earlier one (SameFailure) when both ranks were in the same
// step (completed steps + 1, from their progress records) and ended the same
// way (the same exit code, or the same signal other than SIGKILL and SIGTERM,
// which are sent from outside and tell nothing of the job). The same failure on a
// different host, earlier in this attempt or in an earlier attempt of the run,
// is the job's: stop, failed, bound "job_failure", reason "stop: the job fails
// at step N wherever it runs: ...", no host excluded, no host credited. A
// crash whose step is unknown (no progress record) never matches. Repeats on
// the same host are left to the repeat rule (a bad node fails where it is), so
// finding out costs at most one requeue: the host that failed twice leaves,
// and the next host's identical failure stops the run.
//
// Bounds (history, from lineage: every attempt of the run): a requeue chosen
// for a failure (anything but a preemption) when history.requeues >=
// max_requeues, or one that would bring the hosts excluded by this run's
// requeues to more than max_excluded_nodes, becomes stop, failed, with bound
// "max_requeues" / "max_excluded_nodes" and a reason naming the bound and what
// would have been done. Hosts an elastic run goes on without are bounded by
// min_nodes, not by these.
//
// Elastic runs (in.elastic.min_nodes > 0; job [job] min_nodes / max_nodes):
// before the rules above, a lost node (node_lost), a node a health check asks
// to leave (exclude_node, drain_node), or a repeated host of a crash or hang
// that would be excluded leaves the run in place when the nodes left —
// active minus leaving plus the spares that replace them, one spare per
// leaving host, in spare order — are at least min_nodes: kContinueWithout,
// exclude_hosts = the leaving hosts, replacement_hosts = the spares used,
// drain_hosts = the leaving hosts when a drain was asked for and caps.drain.
// It does not consume a restart (each one takes a node away, so they are
// bounded by the nodes). Leaving hosts that are not active are not counted.
// Preferred to a requeue: the run keeps training now instead of waiting in the
// queue for a full allocation; a later requeue brings the nodes back (the
// trainer reshards from the checkpoint both ways). Fewer than min_nodes left:
// the rules above, with "(min_nodes N: only M would be left)" in the reason.
//
// Where the brief left it open:
// - Only a restart in place consumes a restart, so the budget bounds restarts
//   in place only: a requeue (repeated host, lost node, health) is chosen even
//   with the budget spent. restarts_used >= restart_budget means spent.
// - A restart waits 0 s when failures_without_progress <= 0, else
//   min(backoff_max_s, backoff_initial_s * 2^(n-1)), never below 0.
// - repeat_threshold <= 0 makes every implicated host leave at its first
//   incident. Hosts are taken in input order, without repeats or empty names.
// - A requeue ends the attempt as kFailed, except after a preemption
//   (kPreempted). checkpoint_first only for operator stops, daemon signals,
//   preemptions and role failures: after a crash, hang, lost node or failed health check the
//   newest committed checkpoint is the one to resume from.
// - kHealth with health_action kNone is treated as kRestart. kHealth asking to
//   exclude or drain with no host named: requeue without exclusions where
//   caps.requeue, else stop, failed.
// - Drained hosts are always excluded too (drain_hosts == exclude_hosts).
// - `reason` starts with what is done ("restart in place", "requeue",
//   "drain", "stop"), names every implicated host, and counts the budget:
//   "(restart 2 of 3)" for a restart, "(1 of 3 restarts used)" otherwise.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "health/check.h"
#include "scheduler/scheduler.h"

namespace holdfast {

enum class IncidentKind {
  kCrash,       // a rank died: a signal, or a non-zero exit that is not one below
  kHang,        // no progress within the allowance (triage names the culprit)
  kBadInput,    // a rank exited 2 (config, flag, data) or could not be executed: the same input fails again
  kNodeLost,    // a node's holdfastd went away (its ranks died with it)
  kHealth,      // a health check failed; `health_action` is what the health policy asks
  kStopRequest, // an operator asked to stop: `runctl stop`, SIGTERM/SIGINT to holdfastd
  kDaemonSignal,// holdfastd received another fatal signal (SIGHUP, SIGQUIT, ...)
  kPreemption,  // the scheduler's warning signal or time limit, or ranks that checkpointed and stopped on their own
  kRoleFailed,  // a role process ([[roles]]) cannot go on: its role's restart budget is spent, or bad input
};
const char* IncidentKindName(IncidentKind kind);  // "crash", "hang", "bad_input", ...

enum class RecoveryAction { kRestartInPlace, kRequeueExcluding, kDrainAndRequeue, kStop, kContinueWithout };
// "restart", "requeue", "drain_requeue", "stop", "continue_without"
const char* RecoveryActionName(RecoveryAction action);

// How a stopped run ends (lineage's run state and holdfastd's exit code).
enum class StopOutcome {
  kFailed,     // exit 1
  kStopped,    // exit 3 — or kPreempted after all, when every rank committed a checkpoint before exiting
  kPreempted,  // exit 75: resume later
};

// One crash of a rank, as the job-failure rule compares them.
struct FailureRecord {
  std::string host;    // where the rank ran
  int64_t step = -1;   // the step it was in (completed steps + 1); -1 unknown (never matches)
  int exit_code = -1;  // its exit code; -1 when it did not exit (a signal)
  int signal = 0;      // the signal that ended it; 0 none
  int attempt = 0;     // the attempt of the run it happened in (1, 2, ...)
};
// The same failure: same known step, same exit code and same signal. The kind
// (crash) is implied: only crashes are kept as FailureRecords. A rank killed
// by SIGKILL or SIGTERM is never the same failure as another: those signals
// come from outside the process (the OOM killer, an operator, a scheduler).
bool SameFailure(const FailureRecord& a, const FailureRecord& b);
// "exit code 1" / "signal 6 (SIGABRT)".
std::string DescribeFailure(const FailureRecord& f);

// What this run did before, as lineage recorded it (every attempt, not
// counting the incident being decided).
struct RunHistory {
  std::vector<FailureRecord> failures;      // earlier crashes, oldest first
  int requeues = 0;                         // requeues after a failure (not after a preemption)
  std::vector<std::string> excluded_hosts;  // hosts those requeues excluded, without repeats
};

struct RecoveryInput {
  IncidentKind kind = IncidentKind::kCrash;
  // Hosts the incident implicates (a culprit rank's node, the lost node, the
  // node whose health failed). Empty: none in particular (e.g. a collective
  // timeout seen by every rank).
  std::vector<std::string> hosts;
  // kHang: the culprits are every rank (no rank stands out): credits no host.
  bool all_ranks = false;
  // kCrash: this crash, when the rank's step is known (the job-failure rule).
  std::optional<FailureRecord> failure;
  RunHistory history;
  int max_requeues = 5;        // [supervise] max_requeues
  int max_excluded_nodes = 3;  // [supervise] max_excluded_nodes
  // kHealth only: what the health policy decided (kNone never reaches here).
  health::Action health_action = health::Action::kNone;
  // Earlier incidents of this run (all attempts) per host, not counting this
  // one. A host implicated again (>= repeat_threshold earlier) should leave.
  std::map<std::string, int> host_incidents;
  int repeat_threshold = 1;
  // The restart budget of this attempt.
  int restarts_used = 0;
  int restart_budget = 3;
  // Consecutive generations that failed before completing a step, including
  // the one that just failed (0 when it made progress): drives the backoff.
  int failures_without_progress = 0;
  double backoff_initial_s = 0.25;
  double backoff_max_s = 30;
  SchedulerCapabilities caps;
  // Elastic runs: the hosts training now, the joined nodes standing by, and
  // the fewest nodes the run may train on (0 = not elastic).
  struct Elastic {
    std::vector<std::string> active;
    std::vector<std::string> spares;
    int min_nodes = 0;
  } elastic;
};

struct RecoveryDecision {
  RecoveryAction action = RecoveryAction::kStop;
  double backoff_s = 0;                     // kRestartInPlace: wait this long first
  bool consumes_restart = false;            // counts against the restart budget
  std::vector<std::string> exclude_hosts;   // kRequeueExcluding, kDrainAndRequeue
  std::vector<std::string> drain_hosts;     // kDrainAndRequeue; kContinueWithout (drained as they leave)
  std::vector<std::string> replacement_hosts;  // kContinueWithout: spares that take the leaving hosts' places
  // The ranks get the checkpoint allowance to commit a checkpoint before they
  // are killed (operator stops, preemption); otherwise the short TERM grace.
  bool checkpoint_first = false;
  StopOutcome outcome = StopOutcome::kFailed;  // kStop; also the attempt's end for a requeue
  bool budget_exhausted = false;           // kStop because the budget is spent
  // kStop because of a bound of the run: "job_failure" (the same failure on
  // another host), "max_requeues", "max_excluded_nodes"; "" otherwise.
  std::string bound;
  // The hosts this incident counts against (CreditedHosts): the event's node
  // when there is exactly one.
  std::vector<std::string> credited_hosts;
  // One line for lineage and the log: what is done and why, e.g.
  // "restart in place after 0.50 s (restart 2 of 3): crash on gpu-a17"
  // "requeue excluding gpu-a17: implicated in 2 incidents of this run"
  std::string reason;
};

RecoveryDecision DecideRecovery(const RecoveryInput& input);
// The hosts `input` counts against (see "Blame" above), without the
// job-failure rule (DecideRecovery credits none when it applies).
std::vector<std::string> CreditedHosts(const RecoveryInput& input);

// ---- how a process's exit reads ----

// What a rank's (or role process's) exit means, from its waitpid status and
// the launcher's exec error ("" when the command was executed). The exit codes
// are the launch contract's (common/launch_contract.h).
enum class ExitClass {
  kClean,        // exit 0: it finished
  kCheckpointed, // exit 75: it committed a checkpoint and stopped (a preemption it was told of)
  kBadInput,     // exit 2: bad config, flag or data — the same input fails again
  kNotExecuted,  // the command could not be executed: an exec error, or a shell's 126/127
  kCrash,        // a signal, or any other exit code
};
ExitClass ClassifyExit(int wstatus, const std::string& exec_error);
const char* ExitClassName(ExitClass c);  // "clean", "checkpointed", "bad_input", "not_executed", "crash"
// Whether `wstatus` (as from waitpid) is a normal exit with `code`.
bool ExitedWithCode(int wstatus, int code);
// A shell's "could not execute": exit 126 (found, not executable) or 127 (not
// found), which wrapper commands (`sh -c`, `env`, `srun`) report for their inner exec.
bool IsExecFailureStatus(int wstatus);

// ---- how a stopped run ends ----

// The run state lineage records and holdfastd's exit code (daemon/exit_codes.h).
struct RunEnd {
  StopOutcome outcome = StopOutcome::kFailed;
  int exit_code = 1;
};
// A run stopped for `cause` after the policy decided `decided` (kStop):
// - an operator's stop or a daemon signal: stopped, exit 3 — or exit 75 when
//   every rank committed a checkpoint on its way out (`ranks_committed`);
// - a preemption: preempted, exit 75 (resume later);
// - bad input: as decided (failed), exit 2;
// - anything else (role failed, budget spent, nothing possible): as decided, exit 1.
RunEnd EndOfStoppedRun(IncidentKind cause, StopOutcome decided, bool ranks_committed);
// Every rank exited with kClean or kCheckpointed: the ranks committed a
// checkpoint (or finished) before exiting.
bool RanksCommitted(const std::vector<ExitClass>& exits);

// ---- incidents that arrive while a decision is being carried out ----

// Where the controller stands when an incident arrives.
enum class ControllerPhase { kIdle, kRunning, kBackoff, kStopping };

enum class Redecision {
  kDecide,              // decide it afresh (DecideRecovery); any pending decision is dropped
  kDecideWithPending,   // decide afresh with the pending decision's leaving hosts added (one more node lost
                        // while an elastic run was going on without others)
  kJoinPendingRequeue,  // record it; the pending requeue excludes its hosts too
  kRecordOnly,          // record it; the pending decision stands
  kIgnore,              // nothing to do or record as an event
};
const char* RedecisionName(Redecision r);

// What to do with an incident of `incoming` kind in `phase`, with the
// decision being carried out (`pending`, nullptr when none):
//   node_lost      stopping: a pending restart in place or requeue-less stop
//                  cannot go on as planned -> decide (restart pending) /
//                  decide with pending (continue without) / join the pending
//                  requeue (requeue, drain and requeue) / record only (stop)
//   health         stopping: ignore (the finding is recorded with the health
//                  results); idle or backoff asking only for a restart:
//                  ignore (nothing runs to restart); else decide
//   stop_request,  stopping to checkpoint first already: ignore; else decide
//   preemption,    (an operator's stop overrides a pending restart)
//   daemon_signal
//   role_failed    decide (it overrides a pending restart); stopping to stop: record only
//   crash, hang    running: decide; a role's crash/hang (`from_role`) while
//   (from a role)  not running, or while stopping to stop: record only (the
//                  role restarts with the learner group)
// Any incident in kRunning, other than these, is decided.
Redecision RedecideFor(IncidentKind incoming, health::Action health_action, bool from_role, ControllerPhase phase,
                       const RecoveryDecision* pending);

}  // namespace holdfast
