#include "daemon/triage.h"

#include <signal.h>

#include <limits>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace holdfast {
namespace {

constexpr int64_t kSec = 1000000000LL;

RankView Rank(int rank, int64_t step, Phase phase, int64_t phase_started_ns, uint64_t issued, uint64_t waiting_on = 0,
              char state = 'S') {  // the /proc letter, as tests read best
  RankView v;
  v.rank = rank;
  v.pid = 1000 + rank;
  v.proc_state = ProcStateFromLetter(state);
  v.progress.valid = true;
  v.progress.writer_pid = 1000 + rank;  // a writer is attached
  v.progress.step = step;
  v.progress.phase = phase;
  v.progress.phase_started_ns = phase_started_ns;
  v.progress.collectives_issued = issued;
  v.progress.waiting_on = waiting_on;
  v.progress.collective_kind = CollectiveKind::kAllreduce;
  v.progress.last_step_ns = kSec / 4;
  return v;
}

SuperviseConfig Config() {
  SuperviseConfig c;
  c.startup_timeout_s = 60;
  c.hang_factor = 5;
  c.hang_min_s = 5;
  c.checkpoint_allowance_s = 120;
  return c;
}

// Feeds `steps` steps of `step_s` seconds each to all ranks; returns the time after them.
int64_t RunSteps(HangDetector* d, int world, int64_t t, int first, int steps, double step_s, bool* any_hang) {
  for (int s = first; s < first + steps; ++s) {
    t += static_cast<int64_t>(step_s * kSec);
    std::vector<RankView> ranks;
    for (int r = 0; r < world; ++r) {
      RankView v = Rank(r, s, Phase::kForward, t, 0);
      v.progress.last_step_ns = static_cast<int64_t>(step_s * kSec);
      ranks.push_back(v);
    }
    *any_hang = *any_hang || d->Observe(t, ranks).hung;
  }
  return t;
}

TEST(HangDetectorTest, StartupGetsItsOwnAllowance) {
  HangDetector d(Config());
  d.StartGeneration(0, 2);
  std::vector<RankView> ranks = {Rank(0, 0, Phase::kStarting, 0, 0), Rank(1, 0, Phase::kStarting, 0, 0)};
  EXPECT_FALSE(d.Observe(59 * kSec, ranks).hung);
  auto v = d.Observe(61 * kSec, ranks);
  EXPECT_TRUE(v.hung);
  EXPECT_EQ(v.allowance, "startup");
}

TEST(HangDetectorTest, AJobThatWritesNoProgressIsNeverCalledHung) {
  HangDetector d(Config());
  d.StartGeneration(0, 2);
  std::vector<RankView> silent = {Rank(0, 0, Phase::kStarting, 0, 0), Rank(1, 0, Phase::kStarting, 0, 0)};
  for (RankView& r : silent) r.progress.writer_pid = 0;  // the daemon's fresh record: no writer attached
  auto v = d.Observe(3600 * kSec, silent);
  EXPECT_FALSE(v.hung) << "an hour without a step means nothing when nobody writes progress";
  EXPECT_FALSE(v.progress_known);
  EXPECT_EQ(v.allowance, "none");
  // One rank attaching a writer (the module imported) arms the detector for all.
  silent[1].progress.writer_pid = 4242;
  auto armed = d.Observe(3601 * kSec, silent);
  EXPECT_TRUE(armed.progress_known);
  EXPECT_TRUE(armed.hung);
  EXPECT_EQ(armed.allowance, "startup");
}

TEST(HangDetectorTest, TimeoutFollowsObservedStepTimesAndIgnoresJitter) {
  HangDetector d(Config());
  d.StartGeneration(0, 2);
  bool hang = false;
  // Jittery but moving steps: 1 s and 3 s alternating. No false alarm.
  int64_t t = 0;
  for (int i = 0; i < 20; ++i) t = RunSteps(&d, 2, t, i + 1, 1, i % 2 ? 3.0 : 1.0, &hang);
  EXPECT_FALSE(hang);
  EXPECT_DOUBLE_EQ(d.P99StepSeconds(), 3.0);
  // Now nobody steps: hung after 5 x p99 = 15 s, not before.
  std::vector<RankView> stuck = {Rank(0, 20, Phase::kCollective, t, 40, 40), Rank(1, 20, Phase::kBackward, t, 39)};
  EXPECT_FALSE(d.Observe(t + 14 * kSec, stuck).hung);
  auto v = d.Observe(t + 16 * kSec, stuck);
  EXPECT_TRUE(v.hung);
  EXPECT_EQ(v.allowance, "step");
  EXPECT_DOUBLE_EQ(v.timeout_s, 15.0);
}

TEST(HangDetectorTest, FastStepsStillGetTheMinimumAndCheckpointsTheirAllowance) {
  HangDetector d(Config());
  d.StartGeneration(0, 1);
  bool hang = false;
  int64_t t = RunSteps(&d, 1, 0, 1, 10, 0.1, &hang);
  std::vector<RankView> r = {Rank(0, 10, Phase::kForward, t, 0)};
  EXPECT_FALSE(d.Observe(t + 4 * kSec, r).hung);
  EXPECT_TRUE(d.Observe(t + 6 * kSec, r).hung);
  std::vector<RankView> ck = {Rank(0, 10, Phase::kCheckpoint, t, 0)};
  auto v = d.Observe(t + 60 * kSec, ck);
  EXPECT_FALSE(v.hung);
  EXPECT_EQ(v.allowance, "checkpoint");
  // Stopped (SIGSTOP) while checkpointing: no checkpoint allowance.
  std::vector<RankView> stopped = {Rank(0, 10, Phase::kCheckpoint, t, 0, 0, 'T')};
  auto sv = d.Observe(t + 60 * kSec, stopped);
  EXPECT_TRUE(sv.hung);
  EXPECT_EQ(sv.allowance, "step");
}

// A SIGSTOPped rank (T) is hung once it has been stopped for stopped_hang_s,
// not when the step or start-up allowance runs out (issue 25, must-show 5).
TEST(HangDetectorTest, ARankInJobControlStopIsHungAfterStoppedHangS) {
  SuperviseConfig c = Config();
  c.stopped_hang_s = 1.0;
  HangDetector d(c);
  d.StartGeneration(0, 3);
  const int64_t t = 10 * kSec;  // still in start-up: a 60 s allowance
  auto ranks = [&](char state1) {
    return std::vector<RankView>{Rank(0, 0, Phase::kStarting, 0, 0), Rank(1, 0, Phase::kForward, 0, 0, 0, state1),
                                 Rank(2, 0, Phase::kStarting, 0, 0)};
  };
  EXPECT_FALSE(d.Observe(t, ranks('T')).hung) << "first seen stopped";
  EXPECT_FALSE(d.Observe(t + kSec * 9 / 10, ranks('T')).hung) << "stopped 0.9 s";
  auto v = d.Observe(t + kSec * 12 / 10, ranks('T'));
  EXPECT_TRUE(v.hung);
  EXPECT_EQ(v.allowance, "stopped");
  EXPECT_DOUBLE_EQ(v.timeout_s, 1.0);
  EXPECT_EQ(v.stopped, std::vector<int>{1});
  EXPECT_GE(v.stalled_s, 1.2);
}

TEST(HangDetectorTest, ATracedRankOrAContinuedOneIsNotHungByBeingStopped) {
  SuperviseConfig c = Config();
  c.stopped_hang_s = 1.0;
  HangDetector d(c);
  d.StartGeneration(0, 2);
  // Under gdb -p or py-spy (t): on-call is looking at it; the usual allowance applies.
  for (int s = 0; s <= 30; ++s) {
    auto v = d.Observe(s * kSec, {Rank(0, 0, Phase::kStarting, 0, 0), Rank(1, 0, Phase::kStarting, 0, 0, 0, 't')});
    ASSERT_FALSE(v.hung) << "traced for " << s << " s";
  }
  // Stopped, continued, stopped again: the stop counts from the second stop.
  const int64_t t = 40 * kSec;
  auto at = [&](int64_t now, char state) {
    return d.Observe(now, {Rank(0, 0, Phase::kStarting, 0, 0), Rank(1, 0, Phase::kStarting, 0, 0, 0, state)});
  };
  EXPECT_FALSE(at(t, 'T').hung);
  EXPECT_FALSE(at(t + kSec * 8 / 10, 'R').hung);
  EXPECT_FALSE(at(t + kSec, 'T').hung);
  EXPECT_FALSE(at(t + kSec * 19 / 10, 'T').hung) << "0.9 s since the second stop";
  EXPECT_TRUE(at(t + kSec * 21 / 10, 'T').hung);
}

TEST(HangDetectorTest, StoppedHangSZeroLeavesAStoppedRankToTheAllowance) {
  SuperviseConfig c = Config();
  c.stopped_hang_s = 0;
  HangDetector d(c);
  d.StartGeneration(0, 1);
  EXPECT_FALSE(d.Observe(0, {Rank(0, 0, Phase::kStarting, 0, 0, 0, 'T')}).hung);
  EXPECT_FALSE(d.Observe(59 * kSec, {Rank(0, 0, Phase::kStarting, 0, 0, 0, 'T')}).hung);
  auto v = d.Observe(61 * kSec, {Rank(0, 0, Phase::kStarting, 0, 0, 0, 'T')});
  EXPECT_TRUE(v.hung);
  EXPECT_EQ(v.allowance, "startup");
}

// Stopped inside allreduce #15 while the others still compute toward it (a
// long step): the stopped rank is the culprit, not the ranks that "never
// entered" #15 yet.
TEST(TriageTest, AStoppedVerdictNamesTheStoppedRankEvenBeforeTheOthersReachTheCollective) {
  const int64_t now = 100 * kSec;
  std::vector<RankView> ranks = {Rank(0, 7, Phase::kForward, now - 2 * kSec, 14),
                                 Rank(1, 7, Phase::kCollective, now - kSec * 13 / 10, 15, 15, 'T'),
                                 Rank(2, 7, Phase::kForward, now - 2 * kSec, 14)};
  HangDetector::Verdict v;
  v.hung = true;
  v.stalled_s = 1.3;
  v.timeout_s = 1;
  v.allowance = "stopped";
  v.stopped = {1};
  TriageReport inc = TriageHang(now, ranks, v);
  EXPECT_EQ(inc.culprits, std::vector<int>{1});
  EXPECT_EQ(inc.summary,
            "rank 1 in allreduce #15 of step 8 for 1.3 s, process stopped (SIGSTOP?); ranks 0,2 not in a collective "
            "(no step for 1.3 s; stopped allowance 1.0 s)");
  // The others already in it: the collective they wait in is named, folded.
  ranks[0] = Rank(0, 7, Phase::kCollective, now - kSec, 15, 15);
  ranks.push_back(Rank(3, 7, Phase::kCollective, now - kSec / 2, 15, 15));
  inc = TriageHang(now, ranks, v);
  EXPECT_EQ(inc.culprits, std::vector<int>{1});
  EXPECT_NE(inc.summary.find("process stopped (SIGSTOP?); ranks 0,3 waiting in allreduce #15 for 1.0 s; rank 2 not in "
                             "a collective (no step"),
            std::string::npos)
      << inc.summary;
}

// Tensor parallel, tp 2 x dp 2: rank 1 spins in compute; its tp peer rank 0
// waits in the group's allreduce #235, while the other group (ranks 2, 3),
// which needs neither, went on to the gradient reduce-scatter #239. The
// culprit is who never entered the oldest collective waited in, not every
// rank behind the newest (which named rank 0 too).
TEST(TriageTest, WithGroupsTheOldestCollectiveWaitedInNamesTheCulprit) {
  const int64_t now = 100 * kSec;
  std::vector<RankView> ranks = {
      Rank(0, 13, Phase::kCollective, now - 6 * kSec, 235, 235),
      Rank(1, 13, Phase::kForward, now - 6 * kSec, 234),
      Rank(2, 13, Phase::kCollective, now - 5 * kSec, 239, 239),
      Rank(3, 13, Phase::kCollective, now - 5 * kSec, 239, 239),
  };
  ranks[2].progress.collective_kind = ranks[3].progress.collective_kind = CollectiveKind::kReduceScatter;
  HangDetector::Verdict v;
  v.hung = true;
  v.stalled_s = 6;
  v.timeout_s = 5;
  v.allowance = "step";
  TriageReport inc = TriageHang(now, ranks, v);
  EXPECT_EQ(inc.culprits, std::vector<int>{1});
  EXPECT_EQ(inc.summary,
            "rank 1 never entered allreduce #235 (in forward of step 14 for 6.0 s); rank 0 waiting in it for 6.0 s; "
            "ranks 2-3 waiting in collectives up to reduce_scatter #239 (no step for 6.0 s; step allowance 5.0 s)");
}

TEST(TriageTest, NamesTheRankThatNeverEnteredTheCollective) {
  const int64_t now = 100 * kSec;
  std::vector<RankView> ranks = {
      Rank(0, 1286, Phase::kCollective, now - 41 * kSec, 1287, 1287),
      Rank(1, 1286, Phase::kCollective, now - 41 * kSec, 1287, 1287),
      Rank(2, 1286, Phase::kCollective, now - 40 * kSec, 1287, 1287),
      Rank(3, 1286, Phase::kBackward, now - 43 * kSec, 1286),
  };
  HangDetector::Verdict v;
  v.hung = true;
  v.stalled_s = 43;
  v.timeout_s = 5;
  v.allowance = "step";
  TriageReport inc = TriageHang(now, ranks, v);
  EXPECT_EQ(inc.event, "hang");
  EXPECT_EQ(inc.culprits, std::vector<int>{3});
  EXPECT_NE(inc.summary.find("rank 3 never entered allreduce #1287 (in backward of step 1287 for 43.0 s)"),
            std::string::npos)
      << inc.summary;
  EXPECT_NE(inc.summary.find("ranks 0-2 waiting in it for 41.0 s"), std::string::npos) << inc.summary;
  auto ev = nlohmann::json::parse(ToJson(inc.evidence));
  EXPECT_EQ(ev["ranks"].size(), 4u);
  EXPECT_EQ(ev["culprits"][0], 3);
  EXPECT_STREQ(RunbookFor(inc.event), "runbooks/hang.md");
}

TEST(TriageTest, AStoppedProcessIsNamedWhenNobodyIsInACollective) {
  const int64_t now = 100 * kSec;
  std::vector<RankView> ranks = {Rank(0, 7, Phase::kForward, now - 9 * kSec, 14),
                                 Rank(1, 7, Phase::kForward, now - 9 * kSec, 14, 0, 'T')};
  HangDetector::Verdict v;
  v.stalled_s = 9;
  v.timeout_s = 5;
  v.allowance = "step";
  TriageReport inc = TriageHang(now, ranks, v);
  EXPECT_EQ(inc.culprits, std::vector<int>{1});
  EXPECT_NE(inc.summary.find("process stopped"), std::string::npos) << inc.summary;
}

TEST(TriageTest, AStoppedRankInsideTheCollectiveIsTheCulprit) {
  const int64_t now = 100 * kSec;
  std::vector<RankView> ranks = {Rank(0, 7, Phase::kCollective, now - 6 * kSec, 15, 15),
                                 Rank(1, 7, Phase::kCollective, now - 6 * kSec, 15, 15, 'T')};
  HangDetector::Verdict v;
  v.stalled_s = 6;
  v.timeout_s = 5;
  v.allowance = "step";
  TriageReport inc = TriageHang(now, ranks, v);
  EXPECT_EQ(inc.culprits, std::vector<int>{1});
  EXPECT_NE(inc.summary.find("rank 1 in allreduce #15 of step 8 for 6.0 s, process stopped"), std::string::npos)
      << inc.summary;
  EXPECT_NE(inc.summary.find("rank 0 waiting in allreduce #15"), std::string::npos) << inc.summary;
}

// A follower cut off from the network: its last report (5.5 s old) has its
// rank inside the allreduce like the others. The silent node is the culprit,
// not every rank (found by bench/soak_slurm.py).
TEST(TriageTest, ANodeThatStoppedReportingIsTheCulprit) {
  const int64_t now = 100 * kSec;
  std::vector<RankView> ranks = {Rank(0, 7, Phase::kCollective, now - 6 * kSec, 15, 15),
                                 Rank(1, 7, Phase::kCollective, now - 6 * kSec, 15, 15)};
  ranks[0].host = "n2";
  ranks[1].host = "n3";
  ranks[1].report_age_s = 5.5;
  HangDetector::Verdict v;
  v.stalled_s = 6;
  v.timeout_s = 5;
  v.allowance = "step";
  TriageReport inc = TriageHang(now, ranks, v);
  EXPECT_EQ(inc.culprits, std::vector<int>{1});
  EXPECT_NE(inc.summary.find("n3 has sent nothing for 5.5 s (cut off from the network, or its holdfastd is stuck); "
                             "rank 1 last reported in allreduce #15 of step 8"),
            std::string::npos)
      << inc.summary;
  EXPECT_NE(inc.summary.find("rank 0 waiting in allreduce #15"), std::string::npos) << inc.summary;
  // A report a moment old is not silence: every rank entered, none is stopped.
  ranks[1].report_age_s = 0.3;
  inc = TriageHang(now, ranks, v);
  EXPECT_EQ(inc.culprits, (std::vector<int>{0, 1}));
  EXPECT_NE(inc.summary.find("all ranks entered allreduce #15"), std::string::npos) << inc.summary;
}

TEST(TriageTest, CrashNamesRankSignalPhaseAndKeepsTheLogTail) {
  std::vector<RankView> ranks = {Rank(0, 36, Phase::kCollective, 0, 80, 80), Rank(1, 36, Phase::kBackward, 0, 79)};
  const int wstatus = SIGKILL;  // as waitpid reports a SIGKILL death
  TriageReport inc = TriageExit(10 * kSec, ranks, 1, wstatus, {"step 36 ...", "boom"});
  EXPECT_EQ(inc.event, "crash");
  EXPECT_EQ(inc.summary, "rank 1 killed by signal 9 (SIGKILL) in backward of step 37");
  auto ev = nlohmann::json::parse(ToJson(inc.evidence));
  EXPECT_EQ(ev["signal"], 9);
  EXPECT_EQ(ev["log_tail"][1], "boom");
}

TEST(TriageTest, RecordsHoldingExtremeValuesAreTriagedWithoutOverflow) {
  // A record is the job's to write. Found by daemon/fuzz/progress_record_fuzz.cc
  // (UBSan: signed overflow in the step after INT64_MAX, and in the wait since
  // a phase start near INT64_MIN).
  const int64_t now = 100 * kSec;
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  std::vector<RankView> ranks = {Rank(0, 7, Phase::kCollective, std::numeric_limits<int64_t>::min() + 1, 15, 15),
                                 Rank(1, kMax, Phase::kForward, now - 6 * kSec, 14)};
  HangDetector::Verdict v;
  v.stalled_s = 6;
  v.timeout_s = 5;
  v.allowance = "step";
  TriageReport hang = TriageHang(now, ranks, v);
  EXPECT_EQ(hang.culprits, std::vector<int>{1});
  EXPECT_NE(hang.summary.find("rank 1 never entered allreduce #15 (in forward of step after 9223372036854775807"),
            std::string::npos)
      << hang.summary;
  EXPECT_NE(hang.summary.find("rank 0 waiting in it for 0.0 s"), std::string::npos) << hang.summary;
  TriageReport crash = TriageExit(now, ranks, 1, SIGKILL, {});
  EXPECT_EQ(crash.summary, "rank 1 killed by signal 9 (SIGKILL) in forward of step after 9223372036854775807");
}

TEST(TriageTest, RankListCompressesRanges) {
  EXPECT_EQ(RankList({5, 0, 1, 2, 7, 8}), "0-2,5,7-8");
  EXPECT_EQ(RankList({3}), "3");
}

TEST(TriageRoleTest, ACrashedRoleProcessIsNamedByRoleAndIndex) {
  const RankView p = Rank(1, 41, Phase::kForward, 0, 0);
  RoleTrouble t;
  t.role = "rollout";
  t.index = 1;
  t.wstatus = SIGKILL;
  t.log_tail = {"generating prompt 77"};
  const TriageReport inc = TriageRole(10 * kSec, p, t);
  EXPECT_EQ(inc.event, "role_crash");
  EXPECT_TRUE(inc.culprits.empty()) << "a role process is not a rank";
  EXPECT_EQ(inc.summary, "role rollout[1] killed by signal 9 (SIGKILL) in forward at step 41 (pid 1001)");
  EXPECT_STREQ(RunbookFor(inc.event), "runbooks/roles.md");
  auto ev = nlohmann::json::parse(ToJson(inc.evidence));
  EXPECT_EQ(ev["role"], "rollout");
  EXPECT_EQ(ev["role_index"], 1);
  EXPECT_EQ(ev["signal"], 9);
  EXPECT_EQ(ev["log_tail"][0], "generating prompt 77");
  EXPECT_EQ(ev["ranks"][0]["step"], 41);
}

TEST(TriageRoleTest, AHungRoleProcessSaysForHowLongAndWhy) {
  RoleTrouble t;
  t.role = "reward";
  t.hung = true;
  t.silent_s = 61.04;
  t.timeout_s = 60;
  const TriageReport stopped = TriageRole(10 * kSec, Rank(0, 7, Phase::kData, 0, 0, 0, 'T'), t);
  EXPECT_EQ(stopped.event, "role_hang");
  EXPECT_EQ(stopped.summary,
            "role reward[0] hung: no heartbeat or step for 61.0 s (hang_s 60.0) in data at step 7, process stopped "
            "(SIGSTOP?) (pid 1000)");
  auto ev = nlohmann::json::parse(ToJson(stopped.evidence));
  EXPECT_EQ(ev["allowance"], "hang_s");
  EXPECT_DOUBLE_EQ(ev["stalled_s"].get<double>(), 61.04);
  t.attached = false;
  RankView silent = Rank(0, 0, Phase::kStarting, 0, 0);
  silent.progress.writer_pid = 0;  // never attached a writer
  const TriageReport never = TriageRole(10 * kSec, silent, t);
  EXPECT_EQ(never.summary, "role reward[0] hung: no progress record written within 60.0 s of its start (pid 1000)");
  EXPECT_EQ(nlohmann::json::parse(ToJson(never.evidence))["allowance"], "startup");
}

}  // namespace
}  // namespace holdfast
