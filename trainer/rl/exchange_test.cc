// The exchange directory's files and rules, and the replay buffer's verdicts:
// what keeps a GRPO run from losing a group, training on one twice, or
// training on one from a policy that no longer exists.
#include "trainer/rl/exchange.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "trainer/rl/params_dump.h"
#include "trainer/rl/replay_buffer.h"

namespace holdfast::rl {
namespace {

namespace fs = std::filesystem;

class ExchangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("hf-exchange-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
    ASSERT_TRUE(PrepareExchange(dir_).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

RolloutGroup MakeGroup(uint64_t q, int64_t version, int n = 2) {
  RolloutGroup g;
  g.q = q;
  g.version = version;
  g.worker = static_cast<int>(q % 2);
  g.task = "add2";
  g.prompt = {'1', '+', '2', '='};
  for (int i = 0; i < n; ++i) {
    RolloutSample s;
    s.tokens = {'3', '\n'};
    s.logprobs = {-0.25f, -1.0f / 3.0f};
    s.reward = i == 0 ? 1.0 : 0.0;
    s.stopped = true;
    g.samples.push_back(s);
  }
  return g;
}

TEST_F(ExchangeTest, AGroupRoundTripsExactlyThroughItsFile) {
  const RolloutGroup g = MakeGroup(42, 7);
  ASSERT_TRUE(WriteGroup(dir_, g).ok());
  auto listed = ListGroups(dir_);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(*listed, std::vector<uint64_t>{42});
  auto back = ReadGroup(RolloutPath(dir_, 42));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->q, 42u);
  EXPECT_EQ(back->version, 7);
  ASSERT_EQ(back->samples.size(), 2u);
  EXPECT_EQ(back->samples[0].tokens, g.samples[0].tokens);
  // Behaviour log-probs come back bit for bit (the importance ratio reads them).
  EXPECT_EQ(back->samples[0].logprobs, g.samples[0].logprobs);
  EXPECT_EQ(back->samples[0].reward, 1.0);
}

TEST_F(ExchangeTest, ABrokenGroupFileIsACorruptionNamingTheFieldAndTemporaryFilesAreNotListed) {
  std::ofstream(RolloutPath(dir_, 3)) << "{\"format\":\"holdfast-rollout-v1\",\"q\":3}";
  std::ofstream(RolloutPath(dir_, 4) + ".tmp.123") << "partial";
  auto g = ReadGroup(RolloutPath(dir_, 3));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kCorruption);
  EXPECT_NE(g.status().message().find("'version'"), std::string::npos) << g.status().message();
  auto listed = ListGroups(dir_);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(*listed, std::vector<uint64_t>{3});
  RolloutGroup bad = MakeGroup(5, 1);
  bad.samples[1].logprobs.pop_back();
  auto parsed = GroupFromJson(GroupToJson(bad), "x");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("2 tokens but 1 logprobs"), std::string::npos);
}

TEST_F(ExchangeTest, ADemandRoundTrips) {
  Demand d;
  d.version = 3;
  d.upto = 40;
  d.consumed_below = 24;
  d.buffered = {24, 27};
  d.prompts_per_step = 8;
  d.max_staleness = 1;
  d.group_size = 4;
  d.task = "add2";
  d.learner_epoch = 99;
  ASSERT_TRUE(WriteDemand(dir_, d).ok());
  auto back = ReadDemand(dir_);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->buffered, d.buffered);
  EXPECT_EQ(back->upto, 40u);
  EXPECT_EQ(back->learner_epoch, 99);
}

TEST(PlanWorkTest, AWorkerMakesOnlyItsOwnMissingPromptsFreshEnough) {
  Demand d;
  d.version = 2;
  d.prompts_per_step = 4;
  d.max_staleness = 1;
  d.consumed_below = 8;  // steps 0 and 1 trained
  d.upto = 16;           // steps 2 and 3 wanted
  d.buffered = {9};
  auto none = [](uint64_t) { return false; };
  // Worker 1 of 2: odd prompts from 8 on, without 9 (buffered).
  EXPECT_EQ(PlanWork(d, 1, 2, 2, none, 10), (std::vector<uint64_t>{11, 13, 15}));
  // A file for 11 exists: not made again.
  EXPECT_EQ(PlanWork(d, 1, 2, 2, [](uint64_t q) { return q == 11; }, 10), (std::vector<uint64_t>{13, 15}));
  // Holding version 1, step 3's prompts (12..15) would be 2 steps stale: not yet.
  EXPECT_EQ(PlanWork(d, 0, 2, 1, none, 10), (std::vector<uint64_t>{8, 10}));
  // Synchronous: only the demanded step, with its own version.
  d.max_staleness = 0;
  d.upto = 12;
  EXPECT_EQ(PlanWork(d, 0, 2, 2, none, 10), (std::vector<uint64_t>{8, 10}));
  EXPECT_TRUE(PlanWork(d, 0, 2, 1, none, 10).empty());
  EXPECT_EQ(PlanWork(d, 0, 2, 2, none, 1), (std::vector<uint64_t>{8}));
}

TEST(ReplayBufferTest, EveryGroupIsTakenOnceAndOnlyWhenAskedFreshAndOfThisTimeline) {
  ReplayBuffer b(/*prompts_per_step=*/2, /*group_size=*/2, /*max_staleness=*/1, "add2");
  std::string why;
  EXPECT_EQ(b.Offer(MakeGroup(0, 0), 0, 4, &why), ReplayBuffer::Verdict::kAccepted);
  EXPECT_EQ(b.Offer(MakeGroup(0, 0), 0, 4, &why), ReplayBuffer::Verdict::kDuplicate);
  EXPECT_EQ(b.Offer(MakeGroup(4, 0), 0, 4, &why), ReplayBuffer::Verdict::kNotAsked);
  EXPECT_EQ(b.Offer(MakeGroup(1, 1), 0, 4, &why), ReplayBuffer::Verdict::kFromALostTimeline);
  EXPECT_NE(why.find("no longer exists"), std::string::npos) << why;
  EXPECT_EQ(b.Offer(MakeGroup(1, 0, 3), 0, 4, &why), ReplayBuffer::Verdict::kMalformed);
  EXPECT_FALSE(b.HasStep(0));
  EXPECT_EQ(b.Missing(0), std::vector<uint64_t>{1});
  EXPECT_EQ(b.Offer(MakeGroup(1, 0), 0, 4, &why), ReplayBuffer::Verdict::kAccepted);
  EXPECT_EQ(b.Offer(MakeGroup(2, 0), 0, 4, &why), ReplayBuffer::Verdict::kAccepted);  // step 1, 1 stale: ok
  ASSERT_TRUE(b.HasStep(0));
  auto step0 = b.TakeStep(0);
  ASSERT_EQ(step0.size(), 2u);
  EXPECT_EQ(step0[0].q, 0u);
  EXPECT_EQ(step0[1].q, 1u);
  EXPECT_EQ(b.consumed_below(), 2u);
  EXPECT_EQ(b.Offer(MakeGroup(1, 0), 1, 6, &why), ReplayBuffer::Verdict::kConsumed);
  // Step 2's prompt 4 from version 0 is 2 steps stale; the bound is 1.
  EXPECT_EQ(b.Offer(MakeGroup(4, 0), 1, 6, &why), ReplayBuffer::Verdict::kTooStale);
  EXPECT_EQ(b.buffered(), std::set<uint64_t>{2});
}

TEST(ReplayBufferTest, ItsCheckpointedFormRestoresTheSameBufferAndRefusesOtherSettings) {
  ReplayBuffer b(2, 2, 1, "add2");
  std::string why;
  b.SetConsumedBelow(2);
  ASSERT_EQ(b.Offer(MakeGroup(3, 1), 1, 6, &why), ReplayBuffer::Verdict::kAccepted);
  const std::string saved = b.Serialize();
  ReplayBuffer back(2, 2, 1, "add2");
  ASSERT_TRUE(back.Restore(saved, "ckpt").ok());
  EXPECT_EQ(back.consumed_below(), 2u);
  EXPECT_EQ(back.buffered(), std::set<uint64_t>{3});
  EXPECT_EQ(back.Serialize(), saved);
  ReplayBuffer other(4, 2, 1, "add2");
  Status s = other.Restore(saved, "ckpt");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("rl.prompts_per_step 2"), std::string::npos) << s.message();
  EXPECT_EQ(other.Restore("{not json", "ckpt").code(), StatusCode::kCorruption);
}

TEST_F(ExchangeTest, WeightsVersionsArePublishedWholeAndARolledBackLearnerRemovesTheLostOnes) {
  ParamsDump dump;
  const float w[6] = {1, 2, 3, 4, 5, 6};
  dump.Add("wte.weight", {2, 3}, w, 6);
  dump.Add("ln_f.weight", {3}, w + 3, 3);
  for (int64_t v : {3, 4, 5, 6}) ASSERT_TRUE(WriteParamsDumpAtomically(dump, WeightsDir(dir_, v)).ok());
  ASSERT_TRUE(CommitLatestVersion(dir_, 6, 2).ok());
  EXPECT_EQ(*ReadLatestVersion(dir_), 6);
  EXPECT_FALSE(fs::exists(WeightsDir(dir_, 4)));  // older than the 2 kept
  EXPECT_TRUE(fs::exists(WeightsDir(dir_, 5)));
  // The learner resumed from the checkpoint of step 5: version 6 is of a lost step.
  ASSERT_TRUE(CommitLatestVersion(dir_, 5, 2).ok());
  EXPECT_EQ(*ReadLatestVersion(dir_), 5);
  EXPECT_FALSE(fs::exists(WeightsDir(dir_, 6)));
  auto back = ReadParamsDump(WeightsDir(dir_, 5));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_NE(back->Find("ln_f.weight"), nullptr);
  EXPECT_EQ(back->data[back->Find("ln_f.weight")->offset + 2], 6.0f);
  EXPECT_EQ(ReadParamsDump(WeightsDir(dir_, 9)).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace holdfast::rl
