// The end of a generation whose ranks do not all exit (supervise.exit_grace_s,
// docs/job-contract.md): a rank that did its cleanly exited peers' work but
// sits in its teardown is ended and the generation ends as they did; one that
// did not is judged by the hang rules. On the fake clock of
// daemon/run_controller_fixture.h.
#include <signal.h>

#include <algorithm>

#include <gtest/gtest.h>

#include "daemon/run_controller_fixture.h"

namespace holdfast {
namespace {

// Every rank at `step` having committed `checkpoint`; the ranks in `exited` are gone.
std::vector<RankView> Finishing(std::vector<RankView> v, int64_t checkpoint, const std::vector<int>& exited) {
  for (RankView& r : v) {
    r.progress.checkpoint_step = checkpoint;
    r.alive = std::find(exited.begin(), exited.end(), r.rank) == exited.end();
  }
  return v;
}

TEST_F(RunControllerTest, ARankThatFinishedTheLastStepButDoesNotExitIsEndedAfterTheExitGraceAndTheRunSucceeds) {
  job_.supervise.exit_grace_s = 30;
  Make();
  controller_->Launch();
  Train(10);
  for (int r = 0; r < 3; ++r) {
    controller_->OnRankExit(RankExit{r, Exited(0), "", {}}, Finishing(Views(10), 10, {0, 1, 2}));
  }
  // Rank 3 did step 10 too and sits in its teardown: past the 5 s hang allowance, it is no hang.
  for (int t = 0; t < 29; ++t) {
    clock_.Advance(1.0);
    controller_->OnTick(Finishing(Views(10), 10, {0, 1, 2}));
  }
  EXPECT_EQ(controller_->state(), RunController::State::kRunning);
  EXPECT_TRUE(actions_.terminated.empty()) << "29 s of the 30 s exit grace";
  clock_.Advance(1.5);
  controller_->OnTick(Finishing(Views(10), 10, {0, 1, 2}));
  ASSERT_EQ(actions_.terminated.size(), 1u);
  EXPECT_DOUBLE_EQ(actions_.graces.at(0), 3.0) << "term_grace_s, not the checkpoint allowance";
  EXPECT_DOUBLE_EQ(actions_.armed.at(ControllerTimer::kKillGrace), 3.0);
  const auto events = Events();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().kind, "exit_stuck");
  EXPECT_EQ(events.back().rank, 3);
  EXPECT_EQ(events.back().node, "host-b");
  EXPECT_EQ(events.back().summary,
            "rank 3 completed step 10 but did not exit 30.5 s after rank 0 exited 0 (stuck in its teardown: "
            "destroy_process_group, an atexit hook, a thread)");
  // It ignores SIGTERM (stuck in C code): SIGKILL when the grace runs out, and the run still succeeds.
  controller_->OnTimer(ControllerTimer::kKillGrace);
  ASSERT_EQ(actions_.kills.size(), 1u);
  EXPECT_TRUE(actions_.kills[0].empty()) << "every live rank";
  controller_->OnRankExit(RankExit{3, Killed(SIGKILL), "", {}}, Finishing(Views(10), 10, {0, 1, 2, 3}));
  EXPECT_EQ(actions_.finished, kDaemonExitOk);
  EXPECT_EQ(Run().state, RunState::kSucceeded);
  for (const EventRecord& e : Events()) EXPECT_NE(e.kind, "crash") << e.summary;
  EXPECT_EQ(controller_->restarts_used(), 0);
}

TEST_F(RunControllerTest, ARankBehindItsCleanlyExitedPeersIsStillJudgedByTheHangRules) {
  job_.supervise.exit_grace_s = 30;
  Make();
  controller_->Launch();
  Train(8);
  auto views = [&] {
    auto v = Finishing(Views(10), -1, {0, 1, 2});
    v[3].progress.step = 8;  // two steps short of what its peers finished
    return v;
  };
  for (int r = 0; r < 3; ++r) controller_->OnRankExit(RankExit{r, Exited(0), "", {}}, views());
  for (int t = 0; t < 10 && controller_->state() == RunController::State::kRunning; ++t) {
    clock_.Advance(1.0);
    controller_->OnTick(views());
  }
  EXPECT_EQ(controller_->state(), RunController::State::kStopping) << "a hang, within the 5 s allowance";
  const auto events = Events();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().kind, "hang");
  EXPECT_EQ(events.back().rank, 3);
}

TEST_F(RunControllerTest, AStopsLastRankOutAfterItsCommitIsEndedAfterTheExitGraceNotTheCheckpointAllowance) {
  job_.supervise.exit_grace_s = 30;
  Make();
  controller_->Launch();
  Train(4);
  controller_->OnStopRequest(IncidentKind::kStopRequest, "stopped with runctl");
  EXPECT_DOUBLE_EQ(actions_.armed.at(ControllerTimer::kKillGrace), 300.0);
  for (int r = 0; r < 3; ++r) {
    controller_->OnRankExit(RankExit{r, Exited(kRankExitPreempted), "", {}}, Finishing(Views(4), 4, {0, 1, 2}));
  }
  clock_.Advance(31.0);
  controller_->OnTick(Finishing(Views(4), 4, {0, 1, 2}));
  ASSERT_EQ(actions_.terminated.size(), 2u);
  EXPECT_DOUBLE_EQ(actions_.armed.at(ControllerTimer::kKillGrace), 3.0) << "no longer the 300 s allowance";
  EXPECT_EQ(Events().back().kind, "exit_stuck");
  EXPECT_NE(Events().back().summary.find("rank 3 committed the checkpoint of step 4"), std::string::npos)
      << Events().back().summary;
  controller_->OnTimer(ControllerTimer::kKillGrace);
  controller_->OnRankExit(RankExit{3, Killed(SIGKILL), "", {}}, Finishing(Views(4), 4, {0, 1, 2, 3}));
  EXPECT_EQ(actions_.finished, kDaemonExitPreempted) << "rank 3 had committed step 4 with the others";
  EXPECT_EQ(Run().state, RunState::kStopped);
}

TEST_F(RunControllerTest, APeerStillSavingAfterAnExitWithAnOlderCheckpointIsGivenTheWholeAllowance) {
  job_.supervise.exit_grace_s = 30;
  Make();
  controller_->Launch();
  Train(4);
  controller_->OnStopRequest(IncidentKind::kStopRequest, "stopped with runctl");
  // Rank 0's save of step 4 failed: it exits 75 with step 2's checkpoint, and rank 3 still saves step 4.
  auto views = [&](const std::vector<int>& exited) {
    auto v = Finishing(Views(4, Phase::kCheckpoint), 2, exited);
    return v;
  };
  controller_->OnRankExit(RankExit{0, Exited(kRankExitPreempted), "", {}}, views({0}));
  for (int t = 0; t < 60; ++t) {
    clock_.Advance(1.0);
    controller_->OnTick(views({0}));
  }
  EXPECT_EQ(actions_.terminated.size(), 1u) << "only the stop's own TERM";
  EXPECT_DOUBLE_EQ(actions_.armed.at(ControllerTimer::kKillGrace), 300.0);
  for (const EventRecord& e : Events()) EXPECT_NE(e.kind, "exit_stuck") << e.summary;
}

TEST_F(RunControllerTest, ExitGraceZeroWaitsForTheHangRules) {
  job_.supervise.exit_grace_s = 0;
  Make();
  controller_->Launch();
  Train(10);
  for (int r = 0; r < 3; ++r) {
    controller_->OnRankExit(RankExit{r, Exited(0), "", {}}, Finishing(Views(10), 10, {0, 1, 2}));
  }
  for (int t = 0; t < 10 && controller_->state() == RunController::State::kRunning; ++t) {
    clock_.Advance(1.0);
    auto v = Finishing(Views(10), 10, {0, 1, 2});
    v[3].progress.heartbeat_ns = 1;
    v[3].progress.step_started_ns = 1;
    controller_->OnTick(v);
  }
  EXPECT_EQ(Events().back().kind, "hang") << "no exit grace: the step allowance decides";
  EXPECT_EQ(Events().back().rank, 3) << "not a rank that exited: " << Events().back().summary;
}

}  // namespace
}  // namespace holdfast
