#include "trainer/faults.h"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include <gtest/gtest.h>

namespace holdfast {
namespace {

TEST(FaultsTest, InjectFaultReadsKindRankStepAndFactor) {
  auto f = ParseFault("slow@2:10:x3", "/out");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->kind, "slow");
  EXPECT_EQ(f->rank, 2);
  EXPECT_EQ(f->step, 10);
  EXPECT_EQ(f->factor, 3);
  EXPECT_EQ(f->marker, "/out/fault-slow-rank2-step10.fired");
  EXPECT_NE(ParseFault("hang@1:12:x3", "").status().message().find("only slow takes a factor"), std::string::npos);
  EXPECT_NE(ParseFault("boom@1:12", "").status().message().find("KIND must be"), std::string::npos);
  auto stop = ParseFault("stop@6:14", "");
  ASSERT_TRUE(stop.ok()) << stop.status().ToString();
  EXPECT_EQ(stop->kind, "stop");
  EXPECT_EQ(stop->rank, 6);
  EXPECT_EQ(stop->step, 14);
  EXPECT_NE(ParseFault("hang@1:0", "").status().message().find("STEP must be"), std::string::npos);
  // The job's own failure: exit 1 at a step.
  auto e = ParseFault("exit@1:8", "/out");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->kind, "exit");
  EXPECT_EQ(e->step, 8);
  EXPECT_NE(ParseFault("exit@1:8:x2", "").status().message().find("only slow takes a factor"), std::string::npos);
}

TEST(FaultsTest, DrillTextsAndWhatIsWrongWithBadOnes) {
  EXPECT_EQ(ParseDrill("hang\n")->kind, "hang");
  EXPECT_EQ(ParseDrill("crash")->kind, "crash");
  auto slow = ParseDrill("slow x4 30\n");
  ASSERT_TRUE(slow.ok());
  EXPECT_EQ(slow->factor, 4);
  EXPECT_EQ(slow->slow_steps, 30);
  EXPECT_NE(ParseDrill("slow 4 30").status().message().find("xF"), std::string::npos);
  EXPECT_NE(ParseDrill("slow x4").status().message().find("number of steps"), std::string::npos);
  EXPECT_NE(ParseDrill("hang now").status().message().find("takes nothing more"), std::string::npos);
  EXPECT_NE(ParseDrill("explode").status().message().find("unknown fault 'explode'"), std::string::npos);
}

TEST(FaultsTest, ADrillFileIsTakenOnceAndOnlyByItsRank) {
  const std::string dir = ::testing::TempDir() + "/drill-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/rank-1") << "slow x2 5\n";
  EXPECT_FALSE(TakeDrill(dir, 0, 7).has_value());
  auto f = TakeDrill(dir, 1, 7);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, "slow");
  EXPECT_EQ(f->rank, 1);
  EXPECT_EQ(f->step, 7);
  EXPECT_FALSE(TakeDrill(dir, 1, 8).has_value()) << "a drill fires once";
  EXPECT_TRUE(std::filesystem::exists(dir + "/rank-1.taken-7"));
  std::ofstream(dir + "/rank-1") << "nonsense\n";
  EXPECT_FALSE(TakeDrill(dir, 1, 9).has_value()) << "a bad drill is ignored, not fired";
  std::filesystem::remove_all(dir);
}

TEST(FaultsTest, ASlowdownForNStepsEnds) {
  Fault f;
  f.kind = "slow";
  f.factor = 3;
  f.slow_steps = 2;
  Slowdown s;
  s.BeforeStep(4);
  s.AfterStep(10, 2);  // 8 ms of compute
  EXPECT_EQ(s.sleep_ms, 0);
  s.Start(f, 1, 5);
  s.BeforeStep(5);
  EXPECT_EQ(s.sleep_ms, 16);  // (3 - 1) x 8
  s.slept_ms = 16;
  s.AfterStep(26, 2);  // compute is still 8 ms
  s.BeforeStep(6);
  EXPECT_EQ(s.sleep_ms, 16);
  s.AfterStep(26, 2);
  s.BeforeStep(7);
  EXPECT_FALSE(s.active);
  EXPECT_EQ(s.sleep_ms, 0);
}

// The hook the step loop calls: a slow drill sleeps in BeforeUpdate, (F-1)
// times the compute the step before measured, for its N steps.
TEST(FaultsTest, TheHookRunsADrillAtItsPoints) {
  const std::string dir = ::testing::TempDir() + "/hook-drill-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  std::vector<double> slept;
  FaultOptions o;
  o.rank = 1;
  o.drill_dir = dir;
  o.sleep = [&](double ms) { slept.push_back(ms); };
  auto hook = MakeFaultHook(o);
  ASSERT_TRUE(hook.ok()) << hook.status().ToString();
  FaultHook& h = **hook;
  h.BeforeStep(4);
  h.BeforeUpdate();
  h.AfterStep(10, 2);  // 8 ms of compute
  std::ofstream(dir + "/rank-1") << "slow x3 2\n";
  for (int64_t step = 5; step <= 7; ++step) {
    h.BeforeStep(step);
    h.BeforeUpdate();
    h.AfterStep(slept.empty() ? 10 : 10 + slept.back(), 2);
  }
  EXPECT_EQ(slept, (std::vector<double>{16, 16})) << "steps 5 and 6, not 7";
  EXPECT_TRUE(std::filesystem::exists(dir + "/rank-1.taken-5"));
  std::filesystem::remove_all(dir);
}

TEST(FaultsTest, AnInjectedSlowdownFiresOncePerRunAndOnlyOnItsRank) {
  const std::string out = ::testing::TempDir() + "/hook-inject-" + std::to_string(getpid());
  std::filesystem::create_directories(out);
  std::vector<double> slept;
  auto run = [&](int rank) {
    FaultOptions o;
    o.rank = rank;
    o.inject_fault = "slow@0:2:x2";
    o.out_dir = out;
    o.sleep = [&](double ms) { slept.push_back(ms); };
    auto hook = MakeFaultHook(o);
    EXPECT_TRUE(hook.ok()) << hook.status().ToString();
    for (int64_t step = 1; step <= 3; ++step) {
      const size_t before = slept.size();
      (*hook)->BeforeStep(step);
      (*hook)->BeforeUpdate();
      (*hook)->AfterStep(5 + (slept.size() > before ? slept.back() : 0), 0);  // 5 ms of compute
    }
  };
  run(1);
  EXPECT_TRUE(slept.empty()) << "another rank's fault";
  EXPECT_FALSE(std::filesystem::exists(out + "/fault-slow-rank0-step2.fired"));
  run(0);
  EXPECT_EQ(slept, (std::vector<double>{5, 5})) << "steps 2 and 3";
  EXPECT_TRUE(std::filesystem::exists(out + "/fault-slow-rank0-step2.fired"));
  slept.clear();
  run(0);  // a restarted generation
  EXPECT_TRUE(slept.empty()) << "the marker says it fired";
  std::filesystem::remove_all(out);
}

TEST(FaultsTest, TheHookOfNoFaultDoesNothingAndABadFaultIsRefused) {
  auto none = MakeFaultHook(FaultOptions{});
  ASSERT_TRUE(none.ok());
  (*none)->BeforeStep(1);
  (*none)->BeforeUpdate();
  (*none)->AfterStep(1, 0);
  FaultOptions bad;
  bad.inject_fault = "boom@1:2";
  EXPECT_EQ(MakeFaultHook(bad).status().code(), StatusCode::kInvalidArgument);
}

TEST(FaultsDeathTest, AnInjectedCrashAbortsAtItsStep) {
  const std::string out = ::testing::TempDir() + "/hook-crash-" + std::to_string(getpid());
  FaultOptions o;
  o.rank = 0;
  o.inject_fault = "crash@0:3";
  o.out_dir = out;
  auto hook = MakeFaultHook(o);
  ASSERT_TRUE(hook.ok());
  (*hook)->BeforeStep(2);
  EXPECT_EXIT((*hook)->BeforeStep(3), ::testing::KilledBySignal(SIGABRT), "");
  std::filesystem::remove_all(out);
}

}  // namespace
}  // namespace holdfast
