// What the daemon takes for the newest committed checkpoint, on real step
// folders written by the checkpoint library's writer-side format.
#include "daemon/checkpoint_tracker.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "checkpoint/format.h"
#include "tests/support/subprocess.h"

namespace holdfast {
namespace {

using testing::TempDir;

// A step folder in the real layout: one shard per rank and a manifest last.
void WriteStep(const std::string& root, int64_t step, int world, size_t shard_bytes) {
  const std::filesystem::path dir = std::filesystem::path(root) / StepDirName(step);
  std::filesystem::create_directories(dir);
  Manifest m;
  m.step = step;
  m.world_size = world;
  for (int r = 0; r < world; ++r) {
    ManifestShard s;
    s.rank = r;
    s.file = ShardFileName(r, world);
    s.size = shard_bytes;
    std::ofstream(dir / s.file, std::ios::binary) << std::string(shard_bytes, static_cast<char>('a' + r));
    m.shards.push_back(s);
  }
  std::ofstream(dir / kManifestFileName, std::ios::binary) << EncodeManifest(m);
}

TEST(CheckpointTrackerTest, TheRootIsAbsoluteAndRelativeToTheWorkdir) {
  JobConfig job;
  EXPECT_EQ(CheckpointRoot(job), "");
  job.checkpoint_dir = "ck";
  job.workdir = "/data/run7";
  EXPECT_EQ(CheckpointRoot(job), "/data/run7/ck");
  job.checkpoint_dir = "/scratch/ck";
  EXPECT_EQ(CheckpointRoot(job), "/scratch/ck");
}

TEST(CheckpointTrackerTest, TheNewestStepWhoseShardsAreAllThereWins) {
  TempDir dir("tracker");
  CheckpointTracker t(dir.path());
  EXPECT_EQ(t.NewestVerified(), -1);
  WriteStep(dir.path(), 10, 2, 64);
  WriteStep(dir.path(), 20, 2, 64);
  WriteStep(dir.path(), 30, 2, 64);
  EXPECT_EQ(t.NewestVerified(), 30);

  // Step 30 loses a shard (pruned half-way, or never written): the trainer would skip it.
  std::filesystem::remove(dir / (StepDirName(30) + "/" + ShardFileName(1, 2)));
  EXPECT_EQ(t.NewestVerified(), 20);
  EXPECT_NE(t.Verify(30).message().find(ShardFileName(1, 2)), std::string::npos) << t.Verify(30).message();

  // Step 20's shard is truncated: skipped too, with the sizes in the reason.
  std::filesystem::resize_file(dir / (StepDirName(20) + "/" + ShardFileName(0, 2)), 10);
  EXPECT_EQ(t.NewestVerified(), 10);
  EXPECT_NE(t.Verify(20).message().find("is 10 bytes, the manifest says 64"), std::string::npos)
      << t.Verify(20).message();

  // A damaged manifest does not count either.
  std::ofstream(dir / (StepDirName(10) + "/" + kManifestFileName), std::ios::app) << "x";
  EXPECT_EQ(t.NewestVerified(), -1);
  EXPECT_EQ(t.StepsOnDisk(), (std::vector<int64_t>{30, 20, 10})) << "on disk, whatever their state";
}

// A trainer that found step 20 corrupt while resuming (a flipped byte the
// daemon's size check cannot see) marks it: never resumed from again, and the
// reason is what it wrote.
TEST(CheckpointTrackerTest, AStepATrainerMarkedCorruptIsNeverChosen) {
  TempDir dir("tracker");
  CheckpointTracker t(dir.path());
  WriteStep(dir.path(), 10, 2, 64);
  WriteStep(dir.path(), 20, 2, 64);
  EXPECT_EQ(t.CorruptMark(20), "");
  std::ofstream(dir / (StepDirName(20) + "/" + kCorruptMarkerFileName)) << "shard-00001-of-00002.bin: checksum mismatch\n";
  EXPECT_EQ(t.CorruptMark(20), "shard-00001-of-00002.bin: checksum mismatch");
  EXPECT_EQ(t.NewestVerified(), 10);
  EXPECT_NE(t.Verify(20).message().find("checksum mismatch"), std::string::npos) << t.Verify(20).message();
  ASSERT_EQ(t.CorruptFolders().size(), 1u);

  // Moved aside, as the trainer does next: not a step any more, still a corrupt folder.
  std::filesystem::rename(dir / StepDirName(20), dir / (StepDirName(20) + kCorruptDirSuffix));
  EXPECT_EQ(t.StepsOnDisk(), (std::vector<int64_t>{10}));
  auto folders = t.CorruptFolders();
  ASSERT_EQ(folders.size(), 1u);
  EXPECT_EQ(folders[0].step, 20);
  EXPECT_EQ(folders[0].reason, "shard-00001-of-00002.bin: checksum mismatch");
  EXPECT_EQ(ParseCorruptStepDirName("step-000000000020.corrupt.2"), 20);
  EXPECT_EQ(ParseCorruptStepDirName("step-000000000020.corrupt.x"), -1);
  EXPECT_EQ(ParseCorruptStepDirName("step-000000000020"), -1);
}

}  // namespace
}  // namespace holdfast
