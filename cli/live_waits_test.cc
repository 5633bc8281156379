// runctl's waits (checkpoint, stop and resume --wait) against a scripted
// daemon on a fake clock: what each reports when what it waits for happens,
// when the daemon goes away, and when its deadline passes. No daemon process
// and no real sleeping: the fake clock only moves when a wait sleeps on it.
#include "cli/live_waits.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>

namespace holdfast {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// A DaemonClient whose answers the test scripts, one function per op.
class ScriptedDaemon : public DaemonClient {
 public:
  using AnswerFn = std::function<Reply<std::string>()>;
  ScriptedDaemon() : DaemonClient("/nonexistent/run") {}

  Reply<std::string> Call(const std::string& op, const std::string&, milliseconds) const override {
    ++calls_[op];
    auto it = answers_.find(op);
    if (it == answers_.end()) return Reply<std::string>::Failed(UnavailableError("no daemon is listening"));
    return it->second();
  }
  void Answer(const std::string& op, AnswerFn a) { answers_[op] = std::move(a); }
  int calls(const std::string& op) const { return calls_[op]; }

 private:
  std::map<std::string, AnswerFn> answers_;
  mutable std::map<std::string, int> calls_;
};

Reply<std::string> StatusWith(const RunStatus& st) { return Reply<std::string>::Answer(EncodeStatusResult(st)); }

RunStatus Checkpointed(std::optional<int64_t> step) {
  RunStatus st;
  st.run_id = "r1";
  st.state = "running";
  st.last_checkpoint_step = step;
  return st;
}

RunStatus Ranks(int64_t step0, int64_t step1, const std::string& state = "running") {
  RunStatus st;
  st.run_id = "r1";
  st.state = "running";
  NodeStatus n;
  for (int64_t step : {step0, step1}) {
    RankStatus r;
    r.rank = static_cast<int>(n.ranks.size());
    r.state = state;
    r.step = step;
    n.ranks.push_back(r);
  }
  st.nodes.push_back(n);
  return st;
}

RunRecord Row(RunState state, const std::string& cause = "") {
  RunRecord r;
  r.run_id = "r1";
  r.state = state;
  r.cause = cause;
  return r;
}

// ---- checkpoint --wait ----

TEST(CheckpointWaitTest, EndsAtTheFirstCommitAtOrAfterTheRequestedStep) {
  ScriptedDaemon daemon;
  FakeClock clock;
  daemon.Answer(control_op::kStatus, [&] { return StatusWith(Checkpointed(clock.sleeps() < 3 ? 100 : 140)); });
  int ticks = 0;
  Result<Waited> w = WaitForCheckpointCommit(daemon, 140, milliseconds(600'000), &clock, [&] { ++ticks; });
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->step, 140);
  EXPECT_EQ(w->waited, milliseconds(750));
  EXPECT_EQ(ticks, 3);  // the live line redrawn between looks
}

TEST(CheckpointWaitTest, ADaemonThatStopsAnsweringEndsTheWaitSayingWhereToLook) {
  ScriptedDaemon daemon;
  FakeClock clock;
  daemon.Answer(control_op::kStatus, [&] {
    if (clock.sleeps() < 2) return StatusWith(Checkpointed(100));
    return Reply<std::string>::Failed(UnavailableError("no daemon is listening on /r/holdfastd.sock"));
  });
  Result<Waited> w = WaitForCheckpointCommit(daemon, 140, milliseconds(600'000), &clock, nullptr);
  EXPECT_EQ(w.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(w.status().message(),
            "holdfastd stopped answering before the checkpoint committed: `runctl lineage` tells whether it did");
}

TEST(CheckpointWaitTest, GivesUpAtItsTimeoutWithAdvice) {
  ScriptedDaemon daemon;
  FakeClock clock;
  daemon.Answer(control_op::kStatus, [] { return StatusWith(Checkpointed(std::nullopt)); });
  Result<Waited> w = WaitForCheckpointCommit(daemon, -1, seconds(10), &clock, nullptr);
  EXPECT_EQ(w.status().code(), StatusCode::kTimeout);
  EXPECT_EQ(w.status().message(),
            "no checkpoint committed within 10s (a large state takes a while; a failed save is in `runctl "
            "lineage`): wait longer with --timeout");
  EXPECT_EQ(clock.slept(), seconds(10));
}

TEST(CheckpointWaitTest, ARefusedOrUnreadableStatusIsLookedAtAgain) {
  ScriptedDaemon daemon;
  FakeClock clock;
  daemon.Answer(control_op::kStatus, [&] {
    if (clock.sleeps() == 0) return Reply<std::string>::Refused("Unavailable", UnavailableError("busy"));
    if (clock.sleeps() == 1) return Reply<std::string>::Answer("{\"run_id\":\"r1\"}");
    return StatusWith(Checkpointed(5));
  });
  Result<Waited> w = WaitForCheckpointCommit(daemon, 5, seconds(10), &clock, nullptr);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->step, 5);
}

// ---- stop --wait ----

StopWaitSpec StopSpec(std::function<Result<RunRecord>()> read_run, const std::string& run_id = "r1") {
  StopWaitSpec spec;
  spec.run_id = run_id;
  spec.run_dir = "/runs/a";
  spec.read_run = std::move(read_run);
  spec.timeout = seconds(600);
  return spec;
}

TEST(StopWaitTest, EndsWithTheRunsRowOnceLineageRecordsItsEnd) {
  ScriptedDaemon daemon;
  FakeClock clock;
  daemon.Answer(control_op::kPing, [] { return Reply<std::string>::Answer("{}"); });
  Result<StopSeen> seen = WaitForStop(daemon, StopSpec([&]() -> Result<RunRecord> {
    return Row(clock.sleeps() < 4 ? RunState::kRunning : RunState::kStopped, "stopped on request");
  }), &clock, nullptr);
  ASSERT_TRUE(seen.ok()) << seen.status().ToString();
  ASSERT_TRUE(seen->run.has_value());
  EXPECT_EQ(seen->run->state, RunState::kStopped);
  EXPECT_EQ(clock.slept(), seconds(1));
}

TEST(StopWaitTest, ADaemonThatExitedWithNoRecordOfTheRunEndsTheWaitWithoutAnOutcome) {
  ScriptedDaemon daemon;  // no ping answer: nothing listens
  FakeClock clock;
  Result<StopSeen> seen = WaitForStop(daemon, StopSpec(nullptr, ""), &clock, nullptr);
  ASSERT_TRUE(seen.ok()) << seen.status().ToString();
  EXPECT_FALSE(seen->run.has_value());
  EXPECT_EQ(clock.sleeps(), 0);
}

TEST(StopWaitTest, ADaemonGoneWhileLineageStillSaysRunningIsAFailureNamingItsLog) {
  ScriptedDaemon daemon;
  FakeClock clock;
  daemon.Answer(control_op::kPing, [&] {
    if (clock.sleeps() < 2) return Reply<std::string>::Answer("{}");
    return Reply<std::string>::Failed(UnavailableError("no daemon is listening"));
  });
  Result<StopSeen> seen =
      WaitForStop(daemon, StopSpec([]() -> Result<RunRecord> { return Row(RunState::kRunning); }), &clock, nullptr);
  EXPECT_EQ(seen.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(seen.status().message(),
            "holdfastd in /runs/a stopped answering, but /runs/a/lineage.db still records run r1 as running: the "
            "daemon ended without recording how (see /runs/a/holdfastd.log; `runctl status r1`)");
  // Gone from the third look on, given kDaemonGoneGrace before the verdict.
  EXPECT_EQ(clock.slept(), milliseconds(500) + kDaemonGoneGrace);
}

TEST(StopWaitTest, ABusyOrRefusingDaemonIsStillStoppingUntilTheTimeout) {
  ScriptedDaemon daemon;
  FakeClock clock;
  daemon.Answer(control_op::kPing, [&] {
    if (clock.sleeps() % 2 == 0) return Reply<std::string>::Failed(TimeoutError("did not answer 'ping'"));
    return Reply<std::string>::Refused("FailedPrecondition", FailedPreconditionError("stopping"));
  });
  StopWaitSpec spec = StopSpec([]() -> Result<RunRecord> { return Row(RunState::kRunning); });
  spec.timeout = seconds(30);
  Result<StopSeen> seen = WaitForStop(daemon, spec, &clock, nullptr);
  EXPECT_EQ(seen.status().code(), StatusCode::kTimeout);
  EXPECT_EQ(seen.status().message(),
            "run r1 is still running after 30s (holdfastd is still stopping it: a large checkpoint takes a while); "
            "`runctl status` to follow, or wait longer with --timeout");
  EXPECT_EQ(clock.slept(), seconds(30));
}

TEST(StopWaitTest, ABusyLineageIsReadAgainAndABrokenOneEndsTheWait) {
  ScriptedDaemon daemon;
  FakeClock clock;
  daemon.Answer(control_op::kPing, [] { return Reply<std::string>::Answer("{}"); });
  Result<StopSeen> seen = WaitForStop(daemon, StopSpec([&]() -> Result<RunRecord> {
    if (clock.sleeps() < 2) return UnavailableError("database is locked");
    return CorruptionError("lineage.db: file is not a database");
  }), &clock, nullptr);
  EXPECT_EQ(seen.status().message(), "lineage.db: file is not a database");
  EXPECT_NE(seen.status().code(), StatusCode::kTimeout);
  EXPECT_NE(seen.status().code(), StatusCode::kUnavailable);
}

// ---- resume --wait ----

TEST(ResumeWaitTest, EndsOnceEveryRankRunsPastTheStepItWasFirstSeenAt) {
  ScriptedDaemon daemon;
  FakeClock clock;
  daemon.Answer(control_op::kStatus, [&] {
    if (clock.sleeps() == 0) return Reply<std::string>::Failed(UnavailableError("not yet listening"));
    if (clock.sleeps() == 1) return StatusWith(Ranks(50, 50, "starting"));
    if (clock.sleeps() < 4) return StatusWith(Ranks(50, 50));
    return StatusWith(Ranks(52, 51));
  });
  Result<Waited> w = WaitForTraining(daemon, [] { return Result<RunRecord>(Row(RunState::kRunning)); }, "/r/log",
                                     seconds(600), &clock, nullptr);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->step, 51);  // the slowest rank
  EXPECT_EQ(w->waited, seconds(1));
}

TEST(ResumeWaitTest, ARunThatEndsBeforeItTrainsIsAFailureNamingTheLog) {
  ScriptedDaemon daemon;
  FakeClock clock;
  Result<Waited> w = WaitForTraining(
      daemon, [] { return Result<RunRecord>(Row(RunState::kFailed, "restart budget exhausted")); }, "/r/holdfastd.log",
      seconds(600), &clock, nullptr);
  EXPECT_EQ(w.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(w.status().message(),
            "the resumed run ended before it trained (failed: restart budget exhausted); see /r/holdfastd.log");
  // Lineage's "ended" is believed only after the grace (it may be the previous attempt's end).
  EXPECT_GT(clock.slept(), kResumeEndedGrace);
  EXPECT_LE(clock.slept(), kResumeEndedGrace + kLiveWaitPoll);
}

TEST(ResumeWaitTest, GivesUpAtItsTimeout) {
  ScriptedDaemon daemon;
  FakeClock clock;
  daemon.Answer(control_op::kStatus, [] { return StatusWith(Ranks(50, 50)); });
  Result<Waited> w = WaitForTraining(daemon, [] { return Result<RunRecord>(Row(RunState::kRunning)); }, "/r/log",
                                     seconds(20), &clock, nullptr);
  EXPECT_EQ(w.status().code(), StatusCode::kTimeout);
  EXPECT_EQ(w.status().message(),
            "the resumed run has not completed a step within 20s; follow it with `runctl status` or /r/log");
  EXPECT_EQ(daemon.calls(control_op::kStatus), 81);  // at once, then every 250 ms for 20 s
}

}  // namespace
}  // namespace holdfast
