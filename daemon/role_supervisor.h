// RoleSupervisor: the leading holdfastd's role processes — every [[roles]]
// entry of the job file (JobConfig::roles) as `count` OS processes beside the
// learner's ranks (RankGroup), on the leading node.
//
// Each process gets the launch contract (common/launch_contract.h):
// HOLDFAST_ROLE, HOLDFAST_ROLE_INDEX, HOLDFAST_ROLE_COUNT, its own
// HOLDFAST_PROGRESS_PATH, HOLDFAST_RUN_ID, HOLDFAST_RUN_DIR, the store address
// and HOLDFAST_NODE_ADDR; its log is RUN_DIR/logs/aA-role-NAME-I.log (appended
// to across restarts, each start with a header line).
//
// What happens when one ends or hangs is the role policy's decision
// (daemon/role_policy.h), carried out here:
//   restart = "alone"    only that process restarts (SIGKILL first when hung),
//                        after the backoff, each restart a role_crash /
//                        role_hang event in lineage; the learner is untouched.
//                        A spent budget or bad input stops the run through
//                        Hooks::learner (a RoleIncident of kind kRoleFailed).
//   restart = "learner"  Hooks::learner gets the incident (kCrash / kHang);
//                        the process is restarted with the learner's next
//                        generation (StartLearnerScoped).
// When the learner's ranks restart, "alone" processes keep running (their pids
// stay); "learner" ones are stopped and started with the ranks
// (SignalLearnerScoped, StartLearnerScoped). At the end of the run every
// process gets SIGTERM, then SIGKILL (Supervisor::Finish).
//
// The daemon reaps every child in one place (RankGroup::Reap) and hands the
// ones that are not ranks to OnExit. Time comes from the injected TimeSource;
// restarts and hang checks happen on OnTick (every poll).
//
// Thread-safety: none; owned by the daemon's event-loop thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/run_files.h"
#include "common/time_source.h"
#include "daemon/control_protocol.h"
#include "daemon/job_config.h"
#include "daemon/rank_process.h"
#include "daemon/role_policy.h"
#include "daemon/run_controller.h"
#include "daemon/run_recorder.h"

namespace holdfast {

// RUN_DIR/logs/aA-role-NAME-I.log (common/run_files.h RoleLogPath) and the
// role process's progress record, PROGRESS_DIR/holdfast-RUN-aA-role-NAME-I.rec
// (ProgressRecordPrefix: removed with the ranks' at the end of the run).
std::string RoleProgressPath(const std::string& progress_dir, const std::string& run_id, int attempt,
                             const std::string& role, int index);

class RoleSupervisor {
 public:
  struct Context {
    std::string run_id;
    int attempt = 0;
    std::string run_dir;     // made absolute for HOLDFAST_RUN_DIR
    std::string store_addr;  // host:port of the rendezvous store
    std::string node_addr;   // this node's reachable address
    std::string host;        // this node's host name
    int node = 0;
  };
  struct Hooks {
    // A RoleIncident for the learner's RunController (run_controller.h).
    std::function<void(const RoleIncident&)> learner;
  };

  // `job`, `clock` and `recorder` are not owned and must outlive this.
  RoleSupervisor(const JobConfig* job, const TimeSource* clock, RunRecorder* recorder, Hooks hooks);
  ~RoleSupervisor();

  bool empty() const { return slots_.empty(); }
  // Starts every restart = "alone" process. An error (a command that cannot
  // be executed, a log that cannot be opened) names the role; processes
  // already started stay (the run's end stops them).
  Status StartAlone(const Context& context);
  // The learner's generation `generation` starts: (re)starts every
  // restart = "learner" process (one still alive from the last generation is
  // killed first). An error names the role.
  Status StartLearnerScoped(int generation);
  // The learner's ranks are being stopped: the same signal for every
  // restart = "learner" process.
  void SignalLearnerScoped(int sig);

  // The learner's ranks were judged hung while every one waits for input
  // (RunController via RunActions::BlameRolesForStall). The role processes
  // BlameRolesForLearnerStall (role_policy.h) names are handled as hung
  // (SIGKILL, then restarted per their restart scope, recorded as role_hang);
  // `learner_doing` ("in data of step 4") goes into the summary. Returns how
  // many were named: 0 means the learner itself hangs.
  // `learner_timeout_s` is the learner's allowance that ran out (evidence).
  int BlameLearnerStall(double learner_stalled_s, double learner_timeout_s, const std::string& learner_doing);

  // A reaped child: true when it was one of the role processes.
  bool OnExit(pid_t pid, int wstatus);
  // Every poll: hang checks and restarts that are due.
  void OnTick();

  // ---- the end of the run ----
  // No more restarts from now on; then `sig` (and SIGCONT) to every process.
  void StopAll(int sig);
  bool AnyAlive() const;
  // Reaps role processes that have exited (WNOHANG, by pid); for the end of
  // the run, when the daemon's SIGCHLD handling has stopped.
  void ReapExited();

  // For `runctl status`, in role (file) order, then index.
  std::vector<RoleStatus> Statuses(int64_t now_ns) const;

 private:
  enum class State { kRunning, kRestarting, kFinished, kFailed, kStopped };
  struct Slot {
    const RoleConfig* role = nullptr;  // points into job_->roles
    int index = 0;
    State state = State::kStopped;
    std::unique_ptr<RankProcess> proc;
    int starts = 0;
    int restarts = 0;
    int failures_without_progress = 0;
    int64_t restart_due_ns = 0;  // kRestarting: when to start it again
    bool awaiting_exit = false;  // kRestarting: killed (hung), its exit not yet reaped
    bool expected_exit = false;  // we signalled it (learner restart, run end): its exit is no incident
    std::optional<RoleHangWatch> hang;
  };
  Status StartSlot(Slot* slot);
  // An exit or a hang of a running process: asks the policy, records, acts.
  // `stall`: it was named for the learner's stall (BlameLearnerStall).
  struct LearnerStall {
    double waited_s = 0;
    std::string doing;
  };
  void Failed(Slot* slot, bool hung, int wstatus, const RoleHangWatch::Verdict* verdict,
              const LearnerStall* stall = nullptr);
  RankView ViewOf(const Slot& slot) const;
  static const char* StateName(State s);

  const JobConfig* job_;      // not owned
  const TimeSource* clock_;   // not owned
  RunRecorder* recorder_;     // not owned
  Hooks hooks_;
  Context ctx_;
  int generation_ = 0;
  bool stopping_ = false;     // the run is ending: no restarts
  std::vector<Slot> slots_;
  // Processes replaced while still alive (a restart = "learner" process that
  // outlived its generation): killed, reaped when they go.
  std::vector<std::unique_ptr<RankProcess>> retired_;
};

}  // namespace holdfast
