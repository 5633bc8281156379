#include "daemon/role_policy.h"

#include <signal.h>

#include <gtest/gtest.h>

namespace holdfast {
namespace {

constexpr int64_t kSec = 1'000'000'000;

int Exited(int code) { return code << 8; }
int Killed(int sig) { return sig; }

RoleFailureInput Alone(int wstatus, int used = 0, int budget = 3) {
  RoleFailureInput in;
  in.restart = RoleRestart::kAlone;
  in.wstatus = wstatus;
  in.restarts_used = used;
  in.restart_budget = budget;
  in.failures_without_progress = 1;
  in.backoff_initial_s = 0.5;
  in.backoff_max_s = 3;
  return in;
}

TEST(RolePolicyTest, ExitZeroIsFinishedAndNotRestarted) {
  const RoleDecision d = DecideRoleFailure(Alone(Exited(0)));
  EXPECT_EQ(d.action, RoleAction::kFinished);
  RoleFailureInput learner = Alone(Exited(0));
  learner.restart = RoleRestart::kLearner;
  EXPECT_EQ(DecideRoleFailure(learner).action, RoleAction::kFinished);
}

TEST(RolePolicyTest, ACrashOrASignalRestartsThatProcessAloneWithTheRanksBackoff) {
  for (int ws : {Exited(1), Killed(SIGKILL), Killed(SIGSEGV), Exited(75)}) {
    const RoleDecision d = DecideRoleFailure(Alone(ws, /*used=*/1));
    EXPECT_EQ(d.action, RoleAction::kRestartAlone) << ws;
    EXPECT_DOUBLE_EQ(d.backoff_s, 0.5);
    EXPECT_EQ(d.reason, "restart alone after 0.50 s (restart 2 of 3)");
  }
  RoleFailureInput progressed = Alone(Killed(SIGKILL));
  progressed.failures_without_progress = 0;  // it had completed steps: no wait
  EXPECT_DOUBLE_EQ(DecideRoleFailure(progressed).backoff_s, 0);
  EXPECT_EQ(DecideRoleFailure(progressed).reason, "restart alone now (restart 1 of 3)");
  RoleFailureInput repeated = Alone(Killed(SIGKILL));
  repeated.failures_without_progress = 3;  // 0.5 * 2^2 = 2
  EXPECT_DOUBLE_EQ(DecideRoleFailure(repeated).backoff_s, 2.0);
  repeated.failures_without_progress = 10;  // capped
  EXPECT_DOUBLE_EQ(DecideRoleFailure(repeated).backoff_s, 3.0);
}

TEST(RolePolicyTest, AHangRestartsAloneWhateverTheStatus) {
  RoleFailureInput in = Alone(Exited(0));
  in.hung = true;
  EXPECT_EQ(DecideRoleFailure(in).action, RoleAction::kRestartAlone);
}

TEST(RolePolicyTest, ASpentBudgetStopsTheRun) {
  const RoleDecision d = DecideRoleFailure(Alone(Killed(SIGKILL), /*used=*/3, /*budget=*/3));
  EXPECT_EQ(d.action, RoleAction::kStopRun);
  EXPECT_TRUE(d.budget_exhausted);
  EXPECT_EQ(d.reason, "stop the run: the role's restart budget is spent (3 of 3 restarts used)");
  EXPECT_EQ(DecideRoleFailure(Alone(Killed(SIGKILL), 0, 0)).action, RoleAction::kStopRun);
}

TEST(RolePolicyTest, BadInputStopsTheRunWithoutARestart) {
  for (int code : {2, 126, 127}) {
    const RoleDecision d = DecideRoleFailure(Alone(Exited(code)));
    EXPECT_EQ(d.action, RoleAction::kStopRun) << code;
    EXPECT_TRUE(d.bad_input);
    EXPECT_FALSE(d.budget_exhausted);
  }
}

TEST(RolePolicyTest, ALearnerScopedRoleRestartsTheLearner) {
  RoleFailureInput in = Alone(Killed(SIGKILL), /*used=*/100, /*budget=*/0);  // its own budget plays no part
  in.restart = RoleRestart::kLearner;
  EXPECT_EQ(DecideRoleFailure(in).action, RoleAction::kRestartLearner);
  in.hung = true;
  EXPECT_EQ(DecideRoleFailure(in).action, RoleAction::kRestartLearner);
}

RankProgress Record(int64_t heartbeat, int64_t step, Phase phase = Phase::kForward) {
  RankProgress p;
  p.valid = true;
  p.writer_pid = 42;
  p.heartbeat_ns = heartbeat;
  p.step = step;
  p.phase = phase;
  return p;
}

TEST(RoleHangWatchTest, NoHeartbeatOrStepForHangSecondsIsAHang) {
  RoleHangWatch w(/*hang_s=*/2, /*startup_allowance_s=*/10, /*started_ns=*/0);
  EXPECT_FALSE(w.Observe(1 * kSec, Record(100, 0)).hung);  // attached at t=1
  EXPECT_FALSE(w.Observe(2 * kSec, Record(200, 1)).hung);  // a step at t=2
  EXPECT_FALSE(w.Observe(3 * kSec, Record(200, 1)).hung);
  const RoleHangWatch::Verdict v = w.Observe(4 * kSec, Record(200, 1));
  EXPECT_TRUE(v.hung);
  EXPECT_DOUBLE_EQ(v.silent_s, 2.0);
  EXPECT_DOUBLE_EQ(v.timeout_s, 2.0);
  EXPECT_TRUE(v.attached);
}

TEST(RoleHangWatchTest, AHeartbeatWithoutAStepIsActivity) {
  RoleHangWatch w(2, 10, 0);
  for (int t = 1; t < 20; ++t) EXPECT_FALSE(w.Observe(t * kSec, Record(t * 100, 5)).hung) << t;
}

TEST(RoleHangWatchTest, BeforeItsRecordIsWrittenTheStartupAllowanceApplies) {
  RoleHangWatch w(2, 10, 0);
  RankProgress none;  // never attached
  none.valid = true;
  EXPECT_FALSE(w.Observe(9 * kSec, none).hung);
  const RoleHangWatch::Verdict v = w.Observe(10 * kSec, none);
  EXPECT_TRUE(v.hung);
  EXPECT_FALSE(v.attached);
  EXPECT_DOUBLE_EQ(v.timeout_s, 10.0);
  // Attaching late is activity: the hang_s clock starts there.
  RoleHangWatch late(2, 10, 0);
  EXPECT_FALSE(late.Observe(8 * kSec, Record(1, 0)).hung);
  EXPECT_FALSE(late.Observe(9 * kSec, Record(1, 0)).hung);
  EXPECT_TRUE(late.Observe(10 * kSec, Record(1, 0)).hung);
}

TEST(RoleHangWatchTest, HangSZeroNeverJudges) {
  RoleHangWatch w(0, 10, 0);
  EXPECT_FALSE(w.Observe(1000 * kSec, Record(1, 0)).hung);
  EXPECT_FALSE(w.Observe(2000 * kSec, RankProgress{}).hung);
}


// ---- a learner stalled in `data`: which role process does it wait on ----

RoleStallObservation Role(bool stopped, double silent_s, bool attached = true, bool running = true) {
  RoleStallObservation o;
  o.running = running;
  o.stopped = stopped;
  o.attached = attached;
  o.silent_s = silent_s;
  return o;
}

TEST(RolePolicyTest, AStoppedRoleProcessIsTheCulpritOfALearnerStallWhateverItsSilence) {
  // workers beat while they retry; the reward service is stopped (SIGSTOP) but was beating 1 s ago
  const std::vector<RoleStallObservation> roles = {Role(false, 0.1), Role(false, 25), Role(true, 1.0)};
  EXPECT_EQ(BlameRolesForLearnerStall(roles, 120), (std::vector<size_t>{2}));
  // several stopped: all of them, and a silent one is not added beside them
  const std::vector<RoleStallObservation> two = {Role(true, 3), Role(false, 500), Role(true, 0)};
  EXPECT_EQ(BlameRolesForLearnerStall(two, 120), (std::vector<size_t>{0, 2}));
}

TEST(RolePolicyTest, ARoleProcessSilentForTheWholeStallIsTheCulprit) {
  const std::vector<RoleStallObservation> roles = {Role(false, 30), Role(false, 121), Role(false, 119.9)};
  EXPECT_EQ(BlameRolesForLearnerStall(roles, 120), (std::vector<size_t>{1}));
}

TEST(RolePolicyTest, NoRoleToBlameLeavesTheStallTheLearners) {
  // every role process moved during the stall
  EXPECT_TRUE(BlameRolesForLearnerStall({Role(false, 5), Role(false, 60)}, 120).empty());
  // one without a progress record cannot be judged; a dead or restarting one is not running
  EXPECT_TRUE(BlameRolesForLearnerStall({Role(false, 1000, /*attached=*/false)}, 120).empty());
  EXPECT_TRUE(BlameRolesForLearnerStall({Role(true, 1000, true, /*running=*/false)}, 120).empty());
  EXPECT_TRUE(BlameRolesForLearnerStall({}, 120).empty());
}

}  // namespace
}  // namespace holdfast
