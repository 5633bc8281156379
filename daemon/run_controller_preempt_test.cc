// The scheduler's warning on a fake clock (daemon/preempt_plan.h): with a
// measured save and step time and enough lead the ranks train on and stop
// when the deadline fires; without them, or with too little lead, at once; a
// SIGTERM at the limit, an operator's stop or a second warning while they
// train on stops them at once. A recording RunActions and a real lineage.db.
#include <signal.h>

#include <algorithm>

#include <gtest/gtest.h>

#include "common/launch_contract.h"
#include "daemon/exit_codes.h"
#include "daemon/preempt_plan.h"
#include "daemon/run_controller_fixture.h"
#include "lineage/incident.h"
#include "tests/support/subprocess.h"

namespace holdfast {
namespace {

constexpr char kWarning[] = "Slurm's warning signal (SIGUSR1) to job 7 with 120 s left before its time limit";

// The shared fixture (daemon/run_controller_fixture.h) under a scheduler that
// requeues (Slurm's caps), launched, with one-second steps the controller can
// time (last_step_ns) and a committed checkpoint step of the test's choosing.
class PreemptWarningTest : public RunControllerTest {
 protected:
  PreemptWarningTest() {
    job_.supervise.restart_budget = 3;
    job_.supervise.backoff_initial_s = 0.25;
    job_.supervise.backoff_max_s = 30;
    job_.supervise.preempt_margin_s = 15;
  }

  void Make() {
    RunControllerTest::Make(SchedulerCapabilities{true, true, false});
    controller_->Launch();
  }

  std::vector<RankView> Views(int64_t step, Phase phase = Phase::kForward) const {
    std::vector<RankView> v = RunControllerTest::Views(step, phase);
    for (RankView& r : v) {
      r.progress.last_step_ns = 1'000'000'000;  // Train's one-second steps (the p99 step time)
      r.progress.checkpoint_step = committed_;
    }
    return v;
  }

  // Steps step_+1 .. step_+n, one second apart.
  void Train(int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      clock_.Advance(1.0);
      controller_->OnTick(Views(++step_));
    }
  }

  // A checkpoint of the current step, committed `seconds` after the poll that
  // saw the step done: measured as 1 s more (from the last poll that saw a
  // rank short of the step, a step earlier).
  void Save(double seconds) {
    controller_->OnTick(Views(step_, Phase::kCheckpoint));
    clock_.Advance(seconds);
    committed_ = step_;
    controller_->OnTick(Views(step_));
  }

  void ExitAll(int wstatus) {
    for (int r = 0; r < 4; ++r) {
      if (controller_->exits().count(r) == 0) controller_->OnRankExit(RankExit{r, wstatus, "", {}}, Views(step_));
    }
  }

  // The first preempt event: what was decided at the warning.
  std::pair<EventRecord, IncidentEvidence> Plan() {
    const auto events = Events();
    const auto it = std::find_if(events.begin(), events.end(), [](const EventRecord& e) { return e.kind == "preempt"; });
    EXPECT_NE(it, events.end());
    if (it == events.end()) return {};
    auto ev = ParseIncidentEvidence(it->evidence_json);
    EXPECT_TRUE(ev.ok()) << it->evidence_json;
    return {*it, ev.ok() ? *ev : IncidentEvidence{}};
  }
  bool DeadlineArmed() const { return actions_.armed.count(ControllerTimer::kPreemptDeadline) > 0; }

  int64_t step_ = 0;
  int64_t committed_ = -1;
};

TEST(PreemptPlanTest, TheSaveStartsSaveTwoStepsAndTheMarginBeforeTheLimit) {
  const PreemptPlan p = PlanPreemptStop({120, 4, 1, 15});
  EXPECT_TRUE(p.defer);
  EXPECT_DOUBLE_EQ(p.step_allowance_s, 2);
  EXPECT_DOUBLE_EQ(p.save_before_limit_s, 21);
  EXPECT_DOUBLE_EQ(p.save_in_s, 99);
  EXPECT_EQ(p.reason, "train on for 99.0 s, then checkpoint and stop 21.0 s before the time limit (lead 120.0 s; "
                      "measured save 4.0 s + two steps 2.0 s + margin 15.0 s)");
  EXPECT_FALSE(PlanPreemptStop({-1, 4, 1, 15}).defer);
  EXPECT_FALSE(PlanPreemptStop({120, -1, 1, 15}).defer);
  EXPECT_FALSE(PlanPreemptStop({120, 4, 0, 15}).defer);
  EXPECT_FALSE(PlanPreemptStop({21.5, 4, 1, 15}).defer) << "half a second to gain is not worth it";
  EXPECT_TRUE(PlanPreemptStop({22, 4, 1, 15}).defer);
}

// An asynchronous save leaves phase `checkpoint` as soon as its state is
// staged: no poll sees it. The save of step 5 committing while the ranks are
// at step 8 is measured from the last poll that saw them short of step 5.
TEST_F(PreemptWarningTest, AnAsynchronousSaveNoPollSawIsMeasuredFromTheStepItSaves) {
  Make();
  Train(5);
  EXPECT_LT(controller_->measured_save_s(), 0) << "nothing saved yet";
  Train(3);
  clock_.Advance(0.5);
  committed_ = 5;
  controller_->OnTick(Views(step_));
  // Step 4 was last seen at t=4, the commit at t=8.5.
  EXPECT_DOUBLE_EQ(controller_->measured_save_s(), 4.5);
  Train(2);
  EXPECT_DOUBLE_EQ(controller_->measured_save_s(), 4.5) << "the longest save of the attempt, measured once";
}

TEST_F(PreemptWarningTest, WithAMeasuredSaveTheRanksTrainOnAndStopWhenTheDeadlineFires) {
  Make();
  Train(5);
  Save(4.0);
  Train(3);
  ASSERT_DOUBLE_EQ(controller_->measured_save_s(), 5.0);
  controller_->OnPreemptionWarning(kWarning, 120);
  EXPECT_TRUE(actions_.terminated.empty()) << "the ranks train on";
  EXPECT_EQ(controller_->state(), RunController::State::kRunning);
  EXPECT_TRUE(controller_->preemption_deferred());
  ASSERT_TRUE(DeadlineArmed());
  // 120 s lead - (5 s save + 2 x 1 s steps + 15 s margin)
  EXPECT_DOUBLE_EQ(actions_.armed.at(ControllerTimer::kPreemptDeadline), 98.0);
  const auto [event, ev] = Plan();
  EXPECT_EQ(event.summary, kWarning);
  EXPECT_EQ(event.action.rfind("train on for 98.0 s, then checkpoint and stop 22.0 s before the time limit", 0), 0u)
      << event.action;
  EXPECT_EQ(ev.lead_time_s, 120.0);
  EXPECT_EQ(ev.save_s, 5.0);
  EXPECT_EQ(ev.step_allowance_s, 2.0);
  EXPECT_EQ(ev.margin_s, 15.0);
  EXPECT_EQ(ev.save_in_s, 98.0);
  EXPECT_EQ(ev.step, 8) << "the newest step when the warning came";

  Train(90);  // the steps the warning would have cost
  EXPECT_TRUE(actions_.terminated.empty());
  controller_->OnTimer(ControllerTimer::kPreemptDeadline);
  ASSERT_EQ(actions_.terminated.size(), 1u);
  EXPECT_NE(actions_.terminated[0].find("trained on for 98.0 s after the warning"), std::string::npos)
      << actions_.terminated[0];
  EXPECT_DOUBLE_EQ(actions_.graces[0], 300.0) << "the checkpoint allowance, as for any preemption";
  ExitAll(kRankExitPreempted << 8);
  ASSERT_EQ(actions_.requeued.size(), 1u);
  EXPECT_EQ(actions_.finished, kDaemonExitPreempted);
  EXPECT_EQ(Run().state, RunState::kPreempted);
}

TEST_F(PreemptWarningTest, WithoutAMeasuredSaveTheRanksStopAtOnceAndLineageSaysWhy) {
  Make();
  Train(5);
  controller_->OnPreemptionWarning(kWarning, 120);
  ASSERT_EQ(actions_.terminated.size(), 1u);
  EXPECT_FALSE(DeadlineArmed());
  EXPECT_EQ(controller_->state(), RunController::State::kStopping);
  const auto [event, ev] = Plan();
  EXPECT_EQ(event.action.rfind("checkpoint and stop now: no checkpoint save measured in this attempt yet", 0), 0u)
      << event.action;
  EXPECT_EQ(ev.lead_time_s, 120.0);
  EXPECT_FALSE(ev.save_s.has_value());
  EXPECT_EQ(ev.save_in_s, 0.0);
}

TEST_F(PreemptWarningTest, WithoutALeadTimeTheRanksStopAtOnce) {
  Make();
  Train(5);
  Save(1.0);
  controller_->OnPreemptionWarning("Slurm's warning signal (SIGUSR1) to job 7", -1);
  ASSERT_EQ(actions_.terminated.size(), 1u);
  EXPECT_FALSE(DeadlineArmed());
  const auto [event, ev] = Plan();
  EXPECT_NE(event.action.find("the scheduler gave no lead time"), std::string::npos) << event.action;
  EXPECT_FALSE(ev.lead_time_s.has_value());
}

TEST_F(PreemptWarningTest, TooLittleLeadToTrainStopsAtOnce) {
  Make();
  Train(5);
  Save(4.0);
  controller_->OnPreemptionWarning(kWarning, 21);  // needs 22 s
  ASSERT_EQ(actions_.terminated.size(), 1u);
  EXPECT_FALSE(DeadlineArmed());
  const auto [event, ev] = Plan();
  EXPECT_NE(event.action.find("the lead time (21.0 s) leaves nothing to train: the save needs 22.0 s"),
            std::string::npos)
      << event.action;
  EXPECT_EQ(event.action.find("may not commit"), std::string::npos) << "21 s is still more than the save";
}

TEST_F(PreemptWarningTest, ALeadShorterThanTheSaveStopsAtOnceAndSaysWhatToDo) {
  Make();
  Train(5);
  Save(4.0);
  controller_->OnPreemptionWarning(kWarning, 4);  // the save takes 5 s
  ASSERT_EQ(actions_.terminated.size(), 1u);
  EXPECT_NE(Plan().first.action.find("the final checkpoint may not commit: give the job more warning"),
            std::string::npos);
}

// Slurm's SIGTERM at the limit (KillWait left) while the ranks train on: now.
TEST_F(PreemptWarningTest, ASigtermAtTheLimitWhileTrainingOnStopsAtOnce) {
  Make();
  Train(5);
  Save(2.0);
  controller_->OnPreemptionWarning(kWarning, 120);
  ASSERT_TRUE(DeadlineArmed());
  Train(10);
  controller_->OnStopRequest(IncidentKind::kPreemption, "job 7 reached its time limit: SIGTERM from Slurm");
  ASSERT_EQ(actions_.terminated.size(), 1u);
  EXPECT_FALSE(DeadlineArmed()) << "the deadline is cancelled";
  EXPECT_FALSE(controller_->preemption_deferred());
  controller_->OnTimer(ControllerTimer::kPreemptDeadline);  // a timer already queued does nothing
  EXPECT_EQ(actions_.terminated.size(), 1u);
  ExitAll(kRankExitPreempted << 8);
  ASSERT_EQ(actions_.requeued.size(), 1u);
  EXPECT_EQ(Run().state, RunState::kPreempted);
}

TEST_F(PreemptWarningTest, AnOperatorsStopWhileTrainingOnStopsAtOnceAndEndsStopped) {
  Make();
  Train(5);
  Save(2.0);
  controller_->OnPreemptionWarning(kWarning, 120);
  ASSERT_TRUE(DeadlineArmed());
  controller_->OnStopRequest(IncidentKind::kStopRequest, "stopped with runctl");
  ASSERT_EQ(actions_.terminated.size(), 1u);
  EXPECT_FALSE(DeadlineArmed());
  ExitAll(kRankExitPreempted << 8);
  EXPECT_TRUE(actions_.requeued.empty()) << "an operator's stop is not requeued";
  EXPECT_EQ(Run().state, RunState::kStopped);
}

TEST_F(PreemptWarningTest, ASecondWarningWhileTrainingOnStopsAtOnce) {
  Make();
  Train(5);
  Save(2.0);
  controller_->OnPreemptionWarning(kWarning, 120);
  ASSERT_TRUE(DeadlineArmed());
  Train(3);
  controller_->OnPreemptionWarning(kWarning, 117);
  ASSERT_EQ(actions_.terminated.size(), 1u);
  EXPECT_FALSE(DeadlineArmed());
}

// A crash while the ranks train on restarts them as usual; the deadline still
// stands and stops the next generation.
TEST_F(PreemptWarningTest, ACrashWhileTrainingOnRestartsAndTheDeadlineStillStopsTheRun) {
  job_.supervise.restart_budget = 2;
  Make();
  Train(5);
  Save(2.0);
  controller_->OnPreemptionWarning(kWarning, 120);
  ASSERT_TRUE(DeadlineArmed());
  controller_->OnRankExit(RankExit{3, SIGSEGV, "", {}}, Views(step_));
  ExitAll(SIGTERM);
  ASSERT_EQ(controller_->state(), RunController::State::kBackoff);
  controller_->OnTimer(ControllerTimer::kRestart);
  ASSERT_EQ(actions_.launches.size(), 2u);
  EXPECT_TRUE(DeadlineArmed());
  Train(3);
  controller_->OnTimer(ControllerTimer::kPreemptDeadline);
  ASSERT_EQ(actions_.terminated.size(), 2u) << "the crash's stop, then the deadline's";
  ExitAll(kRankExitPreempted << 8);
  ASSERT_EQ(actions_.requeued.size(), 1u);
  EXPECT_EQ(Run().state, RunState::kPreempted);
}

}  // namespace
}  // namespace holdfast
