#include "daemon/snapshot_dir.h"

#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "tests/support/subprocess.h"

namespace holdfast {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

TEST(SnapshotDirTest, TheOwnersFolderLivesUntilRemovedAndASweepLeavesItAlone) {
  TempDir shm("snapshot_dir");
  std::string path;
  {
    auto dir = SnapshotDir::Create(shm.path(), "r1");
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
    path = (*dir)->path();
    EXPECT_EQ(path, shm.path() + "/holdfast-snap-r1-" + std::to_string(getpid()));
    EXPECT_TRUE(fs::is_directory(path));
    std::ofstream(path + "/shard") << "bytes";
    EXPECT_EQ(SweepDeadSnapshotDirs(shm.path()), 0) << "the owner is alive";
    EXPECT_TRUE(fs::exists(path + "/shard"));
  }
  EXPECT_FALSE(fs::exists(path)) << "the owner removes its folder";
  EXPECT_TRUE(fs::is_empty(shm.path()));
}

// A daemon SIGKILLed while it held snapshots leaves its folder with an
// unlocked owner.lock: the next daemon's sweep removes it, and nothing else.
TEST(SnapshotDirTest, ASweepRemovesTheFoldersOfOwnersThatAreGone) {
  TempDir shm("snapshot_dir");
  const std::string dead = shm.path() + "/holdfast-snap-r0-999999";
  fs::create_directories(dead + "/step-000000000007");
  std::ofstream(dead + "/owner.lock") << "";
  std::ofstream(dead + "/step-000000000007/shard") << "bytes";
  fs::create_directories(shm.path() + "/holdfast-r0-a1-g0-r0.rec.d");  // not a snapshot folder: another prefix
  auto live = SnapshotDir::Create(shm.path(), "r2");
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  EXPECT_EQ(SweepDeadSnapshotDirs(shm.path()), 1);
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::is_directory((*live)->path()));
  EXPECT_TRUE(fs::is_directory(shm.path() + "/holdfast-r0-a1-g0-r0.rec.d"));
}

// At start: the sweep always; a folder only with a budget, and only on one node.
TEST(SnapshotDirTest, ADaemonOpensAFolderOnlyWhenTheTierIsOnOfOneNodeOrSeveral) {
  TempDir shm("snapshot_dir");
  const std::string dead = shm.path() + "/holdfast-snap-r0-999999";
  fs::create_directories(dead);
  std::ofstream(dead + "/owner.lock") << "";
  RecoveryConfig recovery;
  recovery.memory_dir = shm.path();
  auto off = OpenSnapshotDir(recovery, "r3", 1);
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_EQ(*off, nullptr);
  EXPECT_FALSE(fs::exists(dead)) << "swept even with the tier off";
  recovery.memory_budget_mb = 16;
  {
    // Several nodes: each node's folder holds its own ranks' shards (and replicas, daemon/replica_store.h).
    auto several = OpenSnapshotDir(recovery, "r3", 2);
    ASSERT_TRUE(several.ok()) << several.status().ToString();
    ASSERT_NE(*several, nullptr);
  }
  EXPECT_TRUE(fs::is_empty(shm.path()));
  auto on = OpenSnapshotDir(recovery, "r3", 1);
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  ASSERT_NE(*on, nullptr);
  EXPECT_TRUE(fs::is_directory((*on)->path()));
}

TEST(SnapshotDirTest, AMemoryDirThatIsNotThereIsRefusedSayingWhatToDo) {
  auto dir = SnapshotDir::Create("/nonexistent/shm", "r1");
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("recovery.memory_budget_mb = 0"), std::string::npos)
      << dir.status().message();
}

}  // namespace
}  // namespace holdfast
