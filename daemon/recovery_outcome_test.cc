// What the recovery policy decides besides the action: what an exit means,
// how a stopped run ends, and what an incident arriving mid-decision does.
#include "daemon/recovery_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/recovery_policy_test_util.h"

namespace holdfast {
namespace {

using namespace recovery_test;  // NOLINT: the suite's axes

// ---- exits: one row per class, from the waitpid status and the launcher's exec error ----

int ExitStatus(int code) { return (code & 0xff) << 8; }  // as waitpid reports exit(code)
int SignalStatus(int sig) { return sig & 0x7f; }          // as waitpid reports death by `sig`

TEST(ClassifyExit, EveryExitHasOneClass) {
  struct Row {
    int wstatus;
    const char* exec_error;
    ExitClass want;
  };
  const Row rows[] = {
      {ExitStatus(0), "", ExitClass::kClean},
      {ExitStatus(75), "", ExitClass::kCheckpointed},
      {ExitStatus(2), "", ExitClass::kBadInput},
      {ExitStatus(126), "", ExitClass::kNotExecuted},  // found, not executable (sh -c, srun)
      {ExitStatus(127), "", ExitClass::kNotExecuted},  // not found
      {ExitStatus(0), "execvp ./train: No such file or directory", ExitClass::kNotExecuted},
      {ExitStatus(1), "", ExitClass::kCrash},
      {ExitStatus(3), "", ExitClass::kCrash},
      {ExitStatus(137), "", ExitClass::kCrash},  // a wrapper reporting a SIGKILLed child
      {ExitStatus(255), "", ExitClass::kCrash},
      {SignalStatus(9), "", ExitClass::kCrash},
      {SignalStatus(11), "", ExitClass::kCrash},
      {SignalStatus(15), "", ExitClass::kCrash},  // TERM without a checkpoint exit: not a clean stop
      {SignalStatus(6) | 0x80, "", ExitClass::kCrash},  // core dumped
  };
  for (const Row& r : rows) {
    EXPECT_EQ(ClassifyExit(r.wstatus, r.exec_error), r.want)
        << "wstatus " << r.wstatus << " exec_error '" << r.exec_error << "': got "
        << ExitClassName(ClassifyExit(r.wstatus, r.exec_error)) << ", want " << ExitClassName(r.want);
  }
  EXPECT_TRUE(ExitedWithCode(ExitStatus(75), 75));
  EXPECT_FALSE(ExitedWithCode(SignalStatus(9), 0));
  EXPECT_TRUE(IsExecFailureStatus(ExitStatus(127)));
  EXPECT_FALSE(IsExecFailureStatus(SignalStatus(9)));
}

TEST(EndOfStoppedRun, StateAndExitCodeFollowTheCause) {
  struct Row {
    K cause;
    StopOutcome decided;
    bool committed;
    StopOutcome outcome;
    int exit_code;
  };
  const Row rows[] = {
      {K::kStopRequest, StopOutcome::kStopped, false, StopOutcome::kStopped, 3},
      {K::kStopRequest, StopOutcome::kStopped, true, StopOutcome::kStopped, 75},  // resumable from the final save
      {K::kDaemonSignal, StopOutcome::kStopped, false, StopOutcome::kStopped, 3},
      {K::kDaemonSignal, StopOutcome::kStopped, true, StopOutcome::kStopped, 75},
      {K::kPreemption, StopOutcome::kPreempted, false, StopOutcome::kPreempted, 75},
      {K::kPreemption, StopOutcome::kPreempted, true, StopOutcome::kPreempted, 75},
      {K::kBadInput, StopOutcome::kFailed, false, StopOutcome::kFailed, 2},
      {K::kRoleFailed, StopOutcome::kFailed, true, StopOutcome::kFailed, 1},
      {K::kCrash, StopOutcome::kFailed, false, StopOutcome::kFailed, 1},
      {K::kHang, StopOutcome::kFailed, false, StopOutcome::kFailed, 1},
      {K::kNodeLost, StopOutcome::kFailed, false, StopOutcome::kFailed, 1},
      {K::kHealth, StopOutcome::kFailed, false, StopOutcome::kFailed, 1},
  };
  for (const Row& r : rows) {
    const RunEnd end = EndOfStoppedRun(r.cause, r.decided, r.committed);
    EXPECT_EQ(static_cast<int>(end.outcome), static_cast<int>(r.outcome)) << IncidentKindName(r.cause);
    EXPECT_EQ(end.exit_code, r.exit_code) << IncidentKindName(r.cause) << " committed " << r.committed;
  }
  EXPECT_TRUE(RanksCommitted({ExitClass::kCheckpointed, ExitClass::kClean}));
  EXPECT_FALSE(RanksCommitted({ExitClass::kCheckpointed, ExitClass::kCrash}));
  EXPECT_FALSE(RanksCommitted({}));
}

// ---- incidents arriving while a decision is carried out ----

TEST(RedecideFor, AnIncidentWhileStoppingIsDecidedAgainOnlyWhereThePlanCannotStand) {
  RecoveryDecision restart;
  restart.action = RecoveryAction::kRestartInPlace;
  RecoveryDecision without;
  without.action = RecoveryAction::kContinueWithout;
  RecoveryDecision requeue;
  requeue.action = RecoveryAction::kRequeueExcluding;
  RecoveryDecision drain;
  drain.action = RecoveryAction::kDrainAndRequeue;
  RecoveryDecision stop;
  stop.action = RecoveryAction::kStop;
  RecoveryDecision stop_checkpoint = stop;
  stop_checkpoint.checkpoint_first = true;
  using P = ControllerPhase;
  using R = Redecision;
  const health::Action kRestartHealth = health::Action::kRestart;
  const health::Action kDrainHealth = health::Action::kDrainNode;
  struct Row {
    K incoming;
    health::Action health;
    bool from_role;
    P phase;
    const RecoveryDecision* pending;
    R want;
  };
  const Row rows[] = {
      // A node lost while running is decided; while stopping, it depends on the plan.
      {K::kNodeLost, kNoHealth, false, P::kRunning, nullptr, R::kDecide},
      {K::kNodeLost, kNoHealth, false, P::kStopping, &restart, R::kDecide},
      {K::kNodeLost, kNoHealth, false, P::kStopping, &without, R::kDecideWithPending},
      {K::kNodeLost, kNoHealth, false, P::kStopping, &requeue, R::kJoinPendingRequeue},
      {K::kNodeLost, kNoHealth, false, P::kStopping, &drain, R::kJoinPendingRequeue},
      {K::kNodeLost, kNoHealth, false, P::kStopping, &stop, R::kRecordOnly},
      {K::kNodeLost, kNoHealth, false, P::kStopping, nullptr, R::kRecordOnly},
      {K::kNodeLost, kNoHealth, false, P::kBackoff, &restart, R::kDecide},
      // A health finding while stopping, or a restart asked for while nothing runs: nothing to do.
      {K::kHealth, kRestartHealth, false, P::kStopping, &restart, R::kIgnore},
      {K::kHealth, kDrainHealth, false, P::kStopping, &restart, R::kIgnore},
      {K::kHealth, kRestartHealth, false, P::kIdle, nullptr, R::kIgnore},
      {K::kHealth, kRestartHealth, false, P::kBackoff, &restart, R::kIgnore},
      {K::kHealth, kDrainHealth, false, P::kBackoff, &restart, R::kDecide},  // the node must go before the restart
      {K::kHealth, kDrainHealth, false, P::kIdle, nullptr, R::kDecide},      // a prelaunch finding
      {K::kHealth, kRestartHealth, false, P::kRunning, nullptr, R::kDecide},
      // An operator's stop overrides a pending restart; a second stop changes nothing.
      {K::kStopRequest, kNoHealth, false, P::kStopping, &restart, R::kDecide},
      {K::kStopRequest, kNoHealth, false, P::kStopping, &stop_checkpoint, R::kIgnore},
      {K::kPreemption, kNoHealth, false, P::kStopping, &stop_checkpoint, R::kIgnore},
      {K::kDaemonSignal, kNoHealth, false, P::kBackoff, &restart, R::kDecide},
      {K::kStopRequest, kNoHealth, false, P::kRunning, nullptr, R::kDecide},
      // A role process: a failed role overrides a restart; its crash restarts with the learner group.
      {K::kRoleFailed, kNoHealth, true, P::kStopping, &restart, R::kDecide},
      {K::kRoleFailed, kNoHealth, true, P::kStopping, &stop_checkpoint, R::kRecordOnly},
      {K::kRoleFailed, kNoHealth, true, P::kBackoff, &restart, R::kDecide},
      {K::kCrash, kNoHealth, true, P::kRunning, nullptr, R::kDecide},
      {K::kCrash, kNoHealth, true, P::kBackoff, &restart, R::kRecordOnly},
      {K::kHang, kNoHealth, true, P::kStopping, &restart, R::kRecordOnly},
      {K::kHang, kNoHealth, true, P::kStopping, &stop, R::kRecordOnly},
      // A rank's own crash or hang is seen while running only.
      {K::kCrash, kNoHealth, false, P::kRunning, nullptr, R::kDecide},
      {K::kHang, kNoHealth, false, P::kRunning, nullptr, R::kDecide},
  };
  for (const Row& r : rows) {
    const R got = RedecideFor(r.incoming, r.health, r.from_role, r.phase, r.pending);
    EXPECT_EQ(got, r.want) << IncidentKindName(r.incoming) << (r.from_role ? " (role)" : "") << " in phase "
                           << static_cast<int>(r.phase) << " with "
                           << (r.pending ? RecoveryActionName(r.pending->action) : "nothing") << " pending: got "
                           << RedecisionName(got) << ", want " << RedecisionName(r.want);
  }
}

}  // namespace
}  // namespace holdfast
