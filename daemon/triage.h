// Hang detection and triage: the supervisor's judgement, as pure functions of
// what it observed (progress records, process states, exits) and an injected
// clock, so that every verdict is testable without processes or sleeps.
//
// HangDetector: a startup allowance, then a timeout adapted from observed step
// times (max(hang_min_s, hang_factor x p99)), with separate allowances while a
// rank checkpoints or evaluates; a rank in job-control stop (SIGSTOP) for
// stopped_hang_s is hung at once (allowance "stopped"). Triage: names the
// culprit rank(s) and what they and the others were doing, in words for on-call.
//
// Thread-safety: none; owned by the daemon's event-loop thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "common/rank_progress.h"
#include "daemon/job_config.h"
#include "lineage/incident.h"

namespace holdfast {

class HangDetector {
 public:
  explicit HangDetector(const SuperviseConfig& config) : config_(config) {}

  // A new generation of ranks starts: progress clocks restart, history stays.
  void StartGeneration(int64_t now_ns, int world_size);

  struct Verdict {
    bool hung = false;
    double stalled_s = 0;  // since the least advanced rank last completed a step
    double timeout_s = 0;  // the allowance that applied
    std::string allowance;  // "startup", "step", "checkpoint", "eval", "stopped"; "none" when progress is unknown
    std::vector<int> stopped;  // allowance "stopped": the ranks in job-control stop that long
    // false while no rank has attached a writer to its progress record (a job
    // that does not use the progress module): there is nothing to judge a hang
    // by, so none is declared; crashes are still seen.
    bool progress_known = true;
  };
  Verdict Observe(int64_t now_ns, const std::vector<RankView>& ranks);

  // The stall was someone else's (a role process the learner waits on was
  // named): every rank's progress clock restarts at `now_ns`; step history
  // and the startup state stay.
  void Excuse(int64_t now_ns);

  // p99 of the recent step times (0 when none observed yet).
  double P99StepSeconds() const;
  size_t samples() const { return step_seconds_.size(); }

 private:
  // The "stopped" verdict: a rank in job-control stop for stopped_hang_s.
  bool ObserveStopped(int64_t now_ns, const std::vector<RankView>& ranks, Verdict* v);

  SuperviseConfig config_;
  std::vector<int64_t> last_step_;
  std::vector<int64_t> last_progress_ns_;
  std::vector<bool> stepped_;  // has completed a step in this generation
  std::vector<int64_t> stopped_since_ns_;  // first seen in job-control stop (T); 0 = not stopped
  std::deque<double> step_seconds_;  // recent step times, newest last
};

// What triage found, as the recorder records it (RunRecorder::Record fills in
// the runbook from the event kind's row of lineage/event_kind.h).
struct TriageReport {
  std::string event = event_kind::kCrash;  // the lineage event kind: crash, hang, role_crash, ...
  std::vector<int> culprits;               // ranks
  std::string summary;                     // one line for on-call
  IncidentEvidence evidence;               // per-rank records, exit status, log tail
};

// What the supervisor saw of one rank, as lineage keeps it.
RankEvidence RankEvidenceOf(int64_t now_ns, const RankView& r);

// "0-2,5" style list of ranks.
std::string RankList(std::vector<int> ranks);

// A hang: which rank(s) held everyone up, and how.
TriageReport TriageHang(int64_t now_ns, const std::vector<RankView>& ranks, const HangDetector::Verdict& verdict);

// A rank ended while the others ran. `wstatus` as from waitpid.
TriageReport TriageExit(int64_t now_ns, const std::vector<RankView>& ranks, int rank, int wstatus,
                    const std::vector<std::string>& log_tail);

// A role process ([[roles]] of the job file) that exited, or that its
// RoleHangWatch (daemon/role_policy.h) found hung.
struct RoleTrouble {
  std::string role;
  int index = 0;
  bool hung = false;
  int wstatus = 0;         // !hung: as from waitpid
  double silent_s = 0;     // hung: no heartbeat or step for this long
  double timeout_s = 0;    // hung: the allowance that applied
  bool attached = true;    // hung: whether it ever attached a progress writer
  // hung: > 0 when it was named because the learner has waited this long for
  // what it produces (RoleSupervisor::BlameLearnerStall); learner_doing says
  // where the learner waits ("in data of step 4").
  double learner_waited_s = 0;
  std::string learner_doing;
  std::vector<std::string> log_tail;
};
// Kind role_crash or role_hang; no culprit ranks (the evidence's role and
// role_index name the process, its "ranks" hold it with rank = its index).
// `process.rank` is the process's index in its role.
TriageReport TriageRole(int64_t now_ns, const RankView& process, const RoleTrouble& trouble);

// "exited with code 1" / "killed by signal 9 (SIGKILL)".
std::string DescribeWaitStatus(int wstatus);

}  // namespace holdfast
