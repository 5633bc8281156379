#include "trainer/memory_snapshots.h"

#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "checkpoint/checkpoint_loader.h"
#include "common/launch_contract.h"
#include "common/memory_store.h"
#include "tests/support/subprocess.h"

namespace holdfast {
namespace {

using Env = std::map<std::string, std::string>;

Result<std::optional<SnapshotTierConfig>> FromEnv(const Env& env) {
  return SnapshotTierFromEnvironment([&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(MemorySnapshotsTest, TheTierIsWhatTheSupervisorSetAndBadValuesAreNamed) {
  auto off = FromEnv({});
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->has_value());
  auto on = FromEnv({{kEnvSnapshotDir, "/dev/shm/holdfast-snap-r-1"},
                     {kEnvSnapshotBudgetBytes, "1048576"},
                     {kEnvSnapshotEvery, "3"}});
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  ASSERT_TRUE(on->has_value());
  EXPECT_EQ((*on)->dir, "/dev/shm/holdfast-snap-r-1");
  EXPECT_EQ((*on)->budget_bytes, 1048576u);
  EXPECT_EQ((*on)->every, 3);
  EXPECT_EQ((*on)->replica_every, 0) << "one node: nothing replicated";
  auto ring = FromEnv({{kEnvSnapshotDir, "/d"}, {kEnvSnapshotBudgetBytes, "1"}, {kEnvSnapshotReplicaEvery, "30"}});
  ASSERT_TRUE(ring.ok()) << ring.status().ToString();
  EXPECT_EQ((*ring)->replica_every, 30);
  EXPECT_EQ(SnapshotWriterOptions(**ring, CheckpointWriterOptions{}).retention.keep_newest_every, 30);
  EXPECT_EQ(SnapshotsHeld(**ring), 3) << "the newest replicated step is a third snapshot";
  EXPECT_EQ(SnapshotsHeld(**on), 2);
  Status three = CheckSnapshotBudget(4u << 20, 10u << 20, SnapshotsHeld(**ring));
  ASSERT_FALSE(three.ok());
  EXPECT_NE(three.message().find("3 of them (the newest, the one being written and the newest replicated step) need "
                                 "12.0 MiB"),
            std::string::npos)
      << three.message();
  auto no_ring = FromEnv({{kEnvSnapshotDir, "/d"}, {kEnvSnapshotBudgetBytes, "1"}, {kEnvSnapshotReplicaEvery, "-3"}});
  ASSERT_FALSE(no_ring.ok());
  EXPECT_NE(no_ring.status().message().find(kEnvSnapshotReplicaEvery), std::string::npos);
  auto bad = FromEnv({{kEnvSnapshotDir, "/d"}, {kEnvSnapshotBudgetBytes, "12MB"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("HOLDFAST_SNAPSHOT_BUDGET_BYTES='12MB' is not a whole number"),
            std::string::npos)
      << bad.status().message();
  auto zero = FromEnv({{kEnvSnapshotDir, "/d"}, {kEnvSnapshotBudgetBytes, "1"}, {kEnvSnapshotEvery, "0"}});
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find(kEnvSnapshotEvery), std::string::npos);
  auto half = FromEnv({{kEnvSnapshotDir, "/d"}});
  ASSERT_FALSE(half.ok());
  EXPECT_NE(half.status().message().find("recovery.memory_budget_mb"), std::string::npos);
}

TEST(MemorySnapshotsTest, ASnapshotFitsWhenTwoOfItFitTheBudgetAndARefusalGivesTheNumbers) {
  EXPECT_TRUE(CheckSnapshotBudget(5u << 20, 10u << 20).ok());
  Status refused = CheckSnapshotBudget(6u << 20, 10u << 20);
  ASSERT_EQ(refused.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("a snapshot of this rank is 6.0 MiB and 2 of them"), std::string::npos)
      << refused.message();
  EXPECT_NE(refused.message().find("need 12.0 MiB, more than this rank's 10.0 MiB"), std::string::npos)
      << refused.message();
}

// Snapshots are taken by every rank or by none: one rank over its budget turns them off for all.
TEST(MemorySnapshotsTest, TheRanksAgreeOnOneDecision) {
  for (int refusing : {-1, 0, 2}) {
    InMemoryStore store;
    std::vector<Status> got(3);
    std::vector<std::thread> ranks;
    for (int r = 0; r < 3; ++r) {
      ranks.emplace_back([&, r] {
        Status mine = r == refusing ? CheckSnapshotBudget(8u << 20, 1u << 20) : Status::Ok();
        got[r] = AgreeOnSnapshots(mine, r, 3, &store, std::chrono::seconds(60));
      });
    }
    for (auto& t : ranks) t.join();
    for (int r = 0; r < 3; ++r) {
      if (refusing < 0) {
        EXPECT_TRUE(got[r].ok()) << got[r].ToString();
      } else {
        EXPECT_EQ(got[r].code(), StatusCode::kResourceExhausted) << "rank " << r << ": " << got[r].ToString();
        EXPECT_NE(got[r].message().find("rank " + std::to_string(refusing) + ": a snapshot of this rank"),
                  std::string::npos)
            << got[r].message();
      }
    }
  }
}

TEST(MemorySnapshotsTest, SnapshotsAfterTheResumedStepAreRemoved) {
  testing::TempDir dir("memory_snapshots");
  for (int64_t step : {6, 7, 8}) {
    std::filesystem::create_directories(dir / StepDirName(step));
    testing::WriteFile(dir / StepDirName(step) + "/" + kManifestFileName, "{}");
    testing::WriteFile(dir / StepDirName(step) + "/shard-00000-of-00002.bin", "x");
  }
  RemoveSnapshotsAfter(dir.path(), 7);
  auto steps = CheckpointLoader(dir.path()).ListSteps();
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(*steps, (std::vector<int64_t>{7, 6}));
  RemoveSnapshotsAfter(dir.path(), -1);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

}  // namespace
}  // namespace holdfast
