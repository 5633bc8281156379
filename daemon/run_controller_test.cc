// The supervisor's state machine on a fake clock: every path from an
// incident to a decision, with a recording RunActions and a real lineage.db
// (daemon/run_controller_fixture.h). The end of a generation whose ranks do
// not all exit: run_controller_exit_test.cc.
#include <signal.h>

#include <algorithm>

#include <gtest/gtest.h>

#include "daemon/run_controller_fixture.h"

namespace holdfast {
namespace {

TEST_F(RunControllerTest, ACrashStopsEveryRankAndRestartsInPlaceWhenTheTimerFires) {
  Make();
  controller_->Launch();
  ASSERT_EQ(actions_.launches.size(), 1u);
  Train(5);
  controller_->OnRankExit(RankExit{3, Killed(SIGKILL), "", {"last words"}}, Views(5));
  EXPECT_EQ(controller_->state(), RunController::State::kStopping);
  ASSERT_EQ(actions_.terminated.size(), 1u);
  EXPECT_NE(actions_.terminated[0].find("rank 3 killed by signal 9 (SIGKILL)"), std::string::npos);
  EXPECT_DOUBLE_EQ(actions_.armed.at(ControllerTimer::kKillGrace), 3.0) << "a crash gets the short TERM grace";
  ExitAll(Killed(SIGTERM), 5);
  EXPECT_EQ(controller_->state(), RunController::State::kBackoff);
  EXPECT_EQ(actions_.armed.count(ControllerTimer::kKillGrace), 0u);
  EXPECT_DOUBLE_EQ(actions_.armed.at(ControllerTimer::kRestart), 0.0) << "a generation that trained restarts at once";
  controller_->OnTimer(ControllerTimer::kRestart);
  ASSERT_EQ(actions_.launches.size(), 2u);
  EXPECT_EQ(actions_.launches[1].first, 1);
  EXPECT_EQ(controller_->restarts_used(), 1);
  const auto events = Events();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().kind, "crash");
  EXPECT_EQ(events.back().node, "host-b") << "incidents name the node's host";
  EXPECT_EQ(events.back().rank, 3);
  EXPECT_EQ(events.back().action,
            "stopped all ranks; restart generation 1 from the start [recovery: restart in place now (restart 1 of 2): "
            "crash on host-b]");
}

TEST_F(RunControllerTest, ARestartFromAMemorySnapshotStartsAtItsStep) {
  Make();
  controller_->Launch();
  Train(5);
  actions_.memory_snapshot = 4;
  controller_->OnRankExit(RankExit{3, Killed(SIGKILL), "", {}}, Views(5));
  ExitAll(Killed(SIGTERM), 5);
  controller_->OnTimer(ControllerTimer::kRestart);
  ASSERT_EQ(actions_.launches.size(), 2u);
  EXPECT_NE(Events().back().action.find("generation 1 from step 4 (memory snapshot)"), std::string::npos);
}

TEST_F(RunControllerTest, GenerationsThatFailBeforeAStepBackOffExponentially) {
  Make();
  job_.supervise.restart_budget = 5;
  Make();
  controller_->Launch();
  std::vector<double> backoffs;
  for (int i = 0; i < 3; ++i) {
    controller_->OnRankExit(RankExit{0, Exited(1), "", {}}, Views(0));
    ExitAll(Killed(SIGTERM), 0);
    backoffs.push_back(actions_.armed.at(ControllerTimer::kRestart));
    controller_->OnTimer(ControllerTimer::kRestart);
  }
  EXPECT_EQ(backoffs, (std::vector<double>{0.5, 1.0, 2.0}));
}

// Every rank waits for input (a GRPO learner waiting for groups): the role
// processes are asked first; when one is named, the learner is no culprit and
// keeps running, and its stall clock starts again.
TEST_F(RunControllerTest, ALearnerStalledInDataAsksTheRolesFirstAndKeepsRunningWhenOneIsNamed) {
  Make();
  controller_->Launch();
  Train(3);
  actions_.roles_to_blame = 1;
  for (int i = 0; i < 6; ++i) {
    clock_.Advance(1.0);
    controller_->OnTick(Views(3, Phase::kData));
  }
  ASSERT_EQ(actions_.stalls.size(), 1u) << "asked once, when the hang allowance (5 s) ran out";
  EXPECT_GT(actions_.stalls[0].first, 5.0);
  EXPECT_EQ(actions_.stalls[0].second, "in data of step 4");
  EXPECT_EQ(controller_->state(), RunController::State::kRunning);
  EXPECT_TRUE(actions_.kills.empty());
  EXPECT_TRUE(actions_.terminated.empty());
  for (const EventRecord& e : Events()) EXPECT_NE(e.kind, "hang") << e.summary;
  // Still waiting, and now no role process is to blame: the learner's own hang.
  actions_.roles_to_blame = 0;
  for (int i = 0; i < 7 && controller_->state() == RunController::State::kRunning; ++i) {
    clock_.Advance(1.0);
    controller_->OnTick(Views(3, Phase::kData));
  }
  EXPECT_EQ(actions_.stalls.size(), 2u);
  EXPECT_EQ(controller_->state(), RunController::State::kStopping);
  EXPECT_EQ(Events().back().kind, "hang");
}

TEST_F(RunControllerTest, ALearnerHungInACollectiveDoesNotAskTheRoles) {
  Make();
  controller_->Launch();
  Train(3);
  actions_.roles_to_blame = 1;
  for (int i = 0; i < 8 && controller_->state() == RunController::State::kRunning; ++i) {
    clock_.Advance(1.0);
    controller_->OnTick(Views(3, Phase::kCollective));
  }
  EXPECT_TRUE(actions_.stalls.empty());
  EXPECT_EQ(controller_->state(), RunController::State::kStopping);
}

TEST_F(RunControllerTest, ASilentRankIsAHangItsCulpritIsKilledAtOnce) {
  Make();
  controller_->Launch();
  Train(3);
  // Ranks 0,1,3 keep their heartbeat but wait in allreduce #7; rank 2 never enters it.
  for (int i = 0; i < 12 && controller_->state() == RunController::State::kRunning; ++i) {
    clock_.Advance(1.0);
    std::vector<RankView> v = Views(3, Phase::kCollective);
    for (RankView& r : v) {
      r.progress.step_started_ns = clock_.MonotonicNs() - static_cast<int64_t>((i + 1) * 1e9);
      r.progress.collectives_issued = 7;
      r.progress.collectives_done = 6;
      r.progress.waiting_on = 7;
      r.progress.collective_kind = CollectiveKind::kAllreduce;
    }
    v[2].progress.phase = Phase::kForward;
    v[2].progress.collectives_issued = 6;
    v[2].progress.waiting_on = 0;
    controller_->OnTick(v);
  }
  ASSERT_EQ(controller_->state(), RunController::State::kStopping);
  ASSERT_EQ(actions_.kills.size(), 1u);
  EXPECT_EQ(actions_.kills[0], std::vector<int>{2});
  const auto events = Events();
  EXPECT_EQ(events.back().kind, "hang");
  EXPECT_EQ(events.back().rank, 2);
  EXPECT_EQ(events.back().node, "host-b");
}

TEST_F(RunControllerTest, ASpentBudgetStopsTheRunWithACause) {
  job_.supervise.restart_budget = 0;
  Make();
  controller_->Launch();
  Train(2);
  controller_->OnRankExit(RankExit{0, Killed(SIGABRT), "", {}}, Views(2));
  ExitAll(Killed(SIGTERM), 2);
  EXPECT_EQ(actions_.finished, kDaemonExitFailed);
  EXPECT_EQ(Run().state, RunState::kFailed);
  EXPECT_NE(Run().cause.find("restart budget of 0 exhausted; last incident: rank 0 killed by signal 6 (SIGABRT)"),
            std::string::npos)
      << Run().cause;
  EXPECT_EQ(Events().back().kind, "budget_exhausted");
}

TEST_F(RunControllerTest, BadFlagsAndUnexecutableCommandsAreNeverRestarted) {
  Make();
  controller_->Launch();
  controller_->OnRankExit(RankExit{1, Exited(kRankExitUsage), "", {"error: unknown flag --lr"}}, Views(0));
  ExitAll(Killed(SIGTERM), 0);
  EXPECT_EQ(actions_.launches.size(), 1u);
  EXPECT_EQ(actions_.finished, kDaemonExitUsage);
  EXPECT_NE(Run().cause.find("a restart cannot help"), std::string::npos) << Run().cause;
}

TEST_F(RunControllerTest, ACommandThatCannotBeExecutedIsBadInput) {
  Make();
  actions_.launch_error = InvalidArgumentError("holdfastd cannot execute '/no/such': No such file or directory");
  controller_->Launch();
  EXPECT_EQ(actions_.launches.size(), 1u);
  EXPECT_EQ(actions_.finished, kDaemonExitUsage);
  EXPECT_NE(Run().cause.find("cannot execute '/no/such'"), std::string::npos) << Run().cause;
}

TEST_F(RunControllerTest, AnOperatorStopGivesTheRanksTheCheckpointAllowanceAndEndsStopped) {
  Make();
  controller_->Launch();
  Train(4);
  controller_->OnStopRequest(IncidentKind::kStopRequest, "stopped with runctl");
  EXPECT_DOUBLE_EQ(actions_.armed.at(ControllerTimer::kKillGrace), 300.0);
  EXPECT_EQ(actions_.graces, std::vector<double>{300.0}) << "followers wait as long before their own SIGKILL";
  ExitAll(Exited(kRankExitPreempted), 4);
  EXPECT_EQ(actions_.finished, kDaemonExitPreempted) << "every rank committed a final checkpoint";
  EXPECT_EQ(Run().state, RunState::kStopped) << "an operator's stop is 'stopped', not 'preempted'";
  EXPECT_EQ(Events().back().kind, "stop");
}

TEST_F(RunControllerTest, TheSchedulersWarningCheckpointsAndEndsPreemptedWithoutAQueue) {
  Make();
  controller_->Launch();
  Train(4);
  controller_->OnStopRequest(IncidentKind::kPreemption, "the scheduler's warning signal (SIGUSR1)");
  EXPECT_DOUBLE_EQ(actions_.armed.at(ControllerTimer::kKillGrace), 300.0) << "time to commit a checkpoint";
  ExitAll(Exited(kRankExitPreempted), 4);
  EXPECT_TRUE(actions_.requeued.empty()) << "a local machine has no queue";
  EXPECT_EQ(actions_.finished, kDaemonExitPreempted);
  EXPECT_EQ(Run().state, RunState::kPreempted);
  EXPECT_EQ(Events().back().kind, "preempt");
}

TEST_F(RunControllerTest, TheSchedulersWarningRequeuesWhereThereIsAQueue) {
  Make(SchedulerCapabilities{true, true, false});
  controller_->Launch();
  Train(4);
  controller_->OnStopRequest(IncidentKind::kPreemption, "the scheduler's warning signal (SIGUSR1)");
  ExitAll(Exited(kRankExitPreempted), 4);
  ASSERT_EQ(actions_.requeued.size(), 1u);
  EXPECT_TRUE(actions_.requeued[0].empty()) << "nothing to exclude: no node is at fault";
  EXPECT_EQ(actions_.finished, kDaemonExitPreempted);
  EXPECT_EQ(Run().state, RunState::kPreempted) << "resumable by the requeued job";
}

TEST_F(RunControllerTest, SighupStopsTheRunAndSaysSo) {
  Make();
  controller_->Launch();
  Train(2);
  controller_->OnStopRequest(IncidentKind::kDaemonSignal, "holdfastd received SIGHUP (its terminal closed)");
  ExitAll(Killed(SIGKILL), 2);
  EXPECT_EQ(actions_.finished, kDaemonExitStopped);
  EXPECT_EQ(Run().state, RunState::kStopped);
  EXPECT_NE(Run().cause.find("SIGHUP"), std::string::npos);
}

TEST_F(RunControllerTest, ALostNodeEndsALocalRunAndIsRequeuedAwayUnderAScheduler) {
  Make();
  controller_->Launch();
  Train(2);
  controller_->OnNodeLost("host-b", {2, 3}, "connection reset");
  ExitAll(Killed(SIGTERM), 2);
  EXPECT_EQ(actions_.finished, kDaemonExitFailed);
  EXPECT_EQ(Events().back().kind, "node_lost");
  EXPECT_EQ(Events().back().node, "host-b");

  SchedulerCapabilities slurm{true, true, false};
  RunControllerTest::TearDown();
  actions_ = RecordingActions();
  Make(slurm);
  controller_->Launch();
  Train(2);
  controller_->OnNodeLost("host-b", {2, 3}, "connection reset");
  ExitAll(Killed(SIGTERM), 2);
  ASSERT_EQ(actions_.requeued.size(), 1u);
  EXPECT_EQ(actions_.requeued[0], std::vector<std::string>{"host-b"});
  EXPECT_EQ(actions_.finished, kDaemonExitPreempted);
}

// An elastic run (min_nodes 1) loses host-b: no requeue, no restart counted;
// the next generation runs on host-a alone (world 4 -> 2), lineage has the
// reshard with its world sizes, and a later loss of the last node stops it.
TEST_F(RunControllerTest, AnElasticRunGoesOnWithoutALostNode) {
  Make(SchedulerCapabilities{true, true, false}, /*min_nodes=*/1);
  controller_->Launch();
  Train(4);
  controller_->OnNodeLost("host-b", {2, 3}, "connection reset");
  ExitAll(Killed(SIGTERM), 4);
  ASSERT_EQ(actions_.reshapes.size(), 1u);
  EXPECT_EQ(actions_.reshapes[0], std::vector<std::string>{"host-b"});
  EXPECT_TRUE(actions_.requeued.empty());
  EXPECT_EQ(actions_.finished, -1);
  EXPECT_EQ(controller_->world_size(), 2);
  EXPECT_EQ(controller_->restarts_used(), 0);
  ASSERT_EQ(actions_.armed.count(ControllerTimer::kRestart), 1u);
  EXPECT_EQ(actions_.armed[ControllerTimer::kRestart], 0);
  controller_->OnTimer(ControllerTimer::kRestart);
  ASSERT_EQ(actions_.launches.size(), 2u);
  EXPECT_EQ(controller_->state(), RunController::State::kRunning);
  const auto events = Events();
  const auto reshard = std::find_if(events.begin(), events.end(), [](const EventRecord& e) { return e.kind == "reshard"; });
  ASSERT_NE(reshard, events.end());
  EXPECT_NE(reshard->summary.find("world size 4 -> 2: without host-b"), std::string::npos) << reshard->summary;
  EXPECT_NE(reshard->evidence_json.find("\"world_size_after\":2"), std::string::npos) << reshard->evidence_json;
  EXPECT_EQ(reshard->runbook, "runbooks/elastic.md");
  const auto lost = std::find_if(events.begin(), events.end(), [](const EventRecord& e) { return e.kind == "node_lost"; });
  ASSERT_NE(lost, events.end());
  EXPECT_NE(lost->action.find("continue without host-b on 1 of 2 nodes"), std::string::npos) << lost->action;
  // The last node cannot leave: below min_nodes the old rule requeues.
  controller_->OnNodeLost("host-a", {0, 1}, "connection reset");
  for (int r = 0; r < 2; ++r) controller_->OnRankExit(RankExit{r, Killed(SIGTERM), "", {}}, Views(4));
  ASSERT_EQ(actions_.requeued.size(), 1u);
  EXPECT_EQ(actions_.finished, kDaemonExitPreempted);
}

// Slurm requeues a job whose node stopped answering (SIGTERM: a preemption to
// the daemon) before the daemons find that node lost: the lost node is still
// recorded, and the requeue excludes it (found by bench/soak_slurm.py).
TEST_F(RunControllerTest, ANodeLostWhileStoppingForAPreemptionIsRecordedAndExcluded) {
  Make(SchedulerCapabilities{true, true, false});
  controller_->Launch();
  Train(4);
  controller_->OnStopRequest(IncidentKind::kPreemption, "Slurm is requeueing job 7: SIGTERM");
  controller_->OnRankExit(RankExit{0, Exited(kRankExitPreempted), "", {}}, Views(4));
  controller_->OnRankExit(RankExit{1, Exited(kRankExitPreempted), "", {}}, Views(4));
  controller_->OnNodeLost("host-b", {2, 3}, "no answer from the peer for 10 s");
  ASSERT_EQ(actions_.requeued.size(), 1u);
  EXPECT_EQ(actions_.requeued[0], std::vector<std::string>{"host-b"});
  EXPECT_EQ(actions_.finished, kDaemonExitPreempted);
  const auto events = Events();
  const auto lost = std::find_if(events.begin(), events.end(), [](const EventRecord& e) { return e.kind == "node_lost"; });
  ASSERT_NE(lost, events.end());
  EXPECT_EQ(lost->node, "host-b");
  EXPECT_NE(lost->summary.find("no answer from the peer for 10 s"), std::string::npos) << lost->summary;
  EXPECT_NE(lost->action.find("already stopping"), std::string::npos) << lost->action;
  EXPECT_NE(lost->action.find("the requeue excludes host-b"), std::string::npos) << lost->action;
}

TEST_F(RunControllerTest, AHealthDrainRequestDrainsAndRequeuesWhereTheSchedulerMay) {
  Make(SchedulerCapabilities{true, true, true});
  controller_->Launch();
  Train(2);
  health::Decision d;
  d.action = health::Action::kDrainNode;
  d.reason = "gpu.ecc: 12 uncorrectable errors";
  controller_->OnHealth(d, "host-a", "periodic");
  ExitAll(Killed(SIGTERM), 2);
  EXPECT_EQ(actions_.drained, std::vector<std::string>{"host-a"});
  ASSERT_EQ(actions_.requeued.size(), 1u);
  EXPECT_EQ(actions_.requeued[0], std::vector<std::string>{"host-a"});
}

TEST_F(RunControllerTest, APrelaunchExclusionWithoutASchedulerNeverLaunches) {
  Make();
  health::Decision d;
  d.action = health::Action::kExcludeNode;
  d.reason = "host.checkpoint_space: 0.1 GB free";
  controller_->OnHealth(d, "host-a", "pre-launch");
  EXPECT_EQ(actions_.finished, kDaemonExitFailed);
  controller_->Launch();
  EXPECT_TRUE(actions_.launches.empty());
  EXPECT_NE(Run().cause.find("host.checkpoint_space"), std::string::npos) << Run().cause;
}

TEST_F(RunControllerTest, ARepeatedHostIsExcludedWhenTheSchedulerCan) {
  Make(SchedulerCapabilities{true, true, false});
  controller_->Launch();
  Train(2);
  controller_->OnRankExit(RankExit{2, Killed(SIGSEGV), "", {}}, Views(2));
  ExitAll(Killed(SIGTERM), 2);
  controller_->OnTimer(ControllerTimer::kRestart);
  Train(3);
  controller_->OnRankExit(RankExit{3, Killed(SIGSEGV), "", {}}, Views(3));
  ExitAll(Killed(SIGTERM), 3);
  ASSERT_EQ(actions_.requeued.size(), 1u) << "host-b failed twice";
  EXPECT_EQ(actions_.requeued[0], std::vector<std::string>{"host-b"});
  // Lineage has it as the bounds and the job-failure rule read it back.
  const RunHistory h = recorder_->History();
  EXPECT_EQ(h.requeues, 1);
  EXPECT_EQ(h.excluded_hosts, std::vector<std::string>{"host-b"});
  ASSERT_EQ(h.failures.size(), 2u);
  EXPECT_EQ(h.failures[0].host, "host-b");
  EXPECT_EQ(h.failures[0].step, 3);  // in step 3, after 2 completed
  EXPECT_EQ(h.failures[0].signal, SIGSEGV);
  EXPECT_EQ(h.failures[1].step, 4);
}

// Blame (daemon/recovery_policy.h): every rank entered allreduce #7 and none
// completed it. No rank stands out, so no host is credited: the event names no
// node, and a second such hang restarts in place instead of excluding rank 0's host.
TEST_F(RunControllerTest, AnAllRanksCollectiveHangCreditsNoHostAndExcludesNone) {
  Make(SchedulerCapabilities{true, true, false});
  controller_->Launch();
  for (int hang = 0; hang < 2; ++hang) {
    Train(3);
    for (int i = 0; i < 12 && controller_->state() == RunController::State::kRunning; ++i) {
      clock_.Advance(1.0);
      std::vector<RankView> v = Views(3, Phase::kCollective);
      for (RankView& r : v) {
        r.progress.step_started_ns = clock_.MonotonicNs() - static_cast<int64_t>((i + 1) * 1e9);
        r.progress.collectives_issued = 7;
        r.progress.collectives_done = 6;
        r.progress.waiting_on = 7;
        r.progress.collective_kind = CollectiveKind::kAllreduce;
      }
      controller_->OnTick(v);
    }
    ASSERT_EQ(controller_->state(), RunController::State::kStopping) << "hang " << hang;
    EXPECT_EQ(Events().back().kind, "hang");
    EXPECT_EQ(Events().back().node, "") << "no host is credited with an all-ranks hang";
    ExitAll(Killed(SIGTERM), 3);
    ASSERT_EQ(controller_->state(), RunController::State::kBackoff) << Events().back().action;
    controller_->OnTimer(ControllerTimer::kRestart);
  }
  EXPECT_TRUE(actions_.requeued.empty());
  EXPECT_EQ(controller_->restarts_used(), 2);
}

// The same failure at the same step on another host is the job's: stop, no exclusion.
TEST_F(RunControllerTest, ACrashAtTheSameStepOnAnotherHostStopsTheRunAsTheJobs) {
  Make(SchedulerCapabilities{true, true, false});
  controller_->Launch();
  Train(4);
  controller_->OnRankExit(RankExit{0, Exited(1), "", {}}, Views(4));  // host-a, in step 5
  ExitAll(Killed(SIGTERM), 4);
  controller_->OnTimer(ControllerTimer::kRestart);
  Train(4);
  controller_->OnRankExit(RankExit{2, Exited(1), "", {}}, Views(4));  // host-b, in step 5
  ExitAll(Killed(SIGTERM), 4);
  EXPECT_TRUE(actions_.requeued.empty());
  EXPECT_EQ(actions_.finished, kDaemonExitFailed);
  EXPECT_EQ(Run().state, RunState::kFailed);
  EXPECT_EQ(Run().cause.rfind("the job fails at step 5 wherever it runs: exit code 1 at step 5 on host-b, as on "
                              "host-a (attempt 1); no host is excluded",
                              0),
            0u)
      << Run().cause;
  const EventRecord last = Events().back();
  EXPECT_EQ(last.kind, "crash");
  EXPECT_EQ(last.node, "") << "the job's failure counts against no host";
  EXPECT_EQ(last.runbook, "runbooks/job-failure.md");
}

// A bound reached: the requeue a repeated host would get becomes a stop naming it.
TEST_F(RunControllerTest, MaxRequeuesStopsTheRunAndTheCauseNamesIt) {
  job_.supervise.max_requeues = 0;
  Make(SchedulerCapabilities{true, true, false});
  controller_->Launch();
  Train(2);
  controller_->OnRankExit(RankExit{2, Killed(SIGSEGV), "", {}}, Views(2));
  ExitAll(Killed(SIGTERM), 2);
  controller_->OnTimer(ControllerTimer::kRestart);
  Train(3);
  controller_->OnRankExit(RankExit{3, Killed(SIGSEGV), "", {}}, Views(3));
  ExitAll(Killed(SIGTERM), 3);
  EXPECT_TRUE(actions_.requeued.empty());
  EXPECT_EQ(actions_.finished, kDaemonExitFailed);
  EXPECT_EQ(Run().cause.rfind("max_requeues reached (0 of 0 requeues after failures used): crash on host-b", 0), 0u)
      << Run().cause;
  EXPECT_EQ(Events().back().runbook, "runbooks/recovery-bounds.md");
}

TEST_F(RunControllerTest, AllRanksFinishingEndsTheRunSucceeded) {
  Make();
  controller_->Launch();
  Train(3);
  ExitAll(Exited(0), 3);
  EXPECT_EQ(actions_.finished, kDaemonExitOk);
  EXPECT_EQ(Run().state, RunState::kSucceeded);
}

}  // namespace
}  // namespace holdfast
