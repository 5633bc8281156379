// CheckResumeStep for a job's own checkpoints (CheckpointOwner::kJob): any
// file or folder the job reported, resumable while committed and on disk.
#include "daemon/resume_point.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "tests/support/subprocess.h"

namespace holdfast {
namespace {

CheckpointRecord JobCheckpoint(int64_t step, std::string path) {
  CheckpointRecord c;
  c.run_id = "r-1";
  c.step = step;
  c.path = std::move(path);
  c.owner = CheckpointOwner::kJob;
  c.seq = step;
  return c;
}

TEST(ResumePointTest, AJobsOwnCheckpointIsResumableWhileItsPathIsThere) {
  testing::TempDir dir("resume_point");
  const std::string file = dir / "ckpt-10.pt";
  std::ofstream(file) << "state";
  std::filesystem::create_directories(dir / "ckpt-20");  // a folder is fine too
  const std::vector<CheckpointRecord> rows = {JobCheckpoint(10, file), JobCheckpoint(20, dir / "ckpt-20"),
                                              JobCheckpoint(30, dir / "ckpt-30.pt"), JobCheckpoint(40, "")};
  const std::string run_dir = dir.path();
  EXPECT_TRUE(CheckResumeStep("r-1", rows, 10, run_dir).ok());
  EXPECT_TRUE(CheckResumeStep("r-1", rows, 20, run_dir).ok());
  const Status gone = CheckResumeStep("r-1", rows, 30, run_dir);
  EXPECT_EQ(gone.code(), StatusCode::kNotFound);
  EXPECT_NE(gone.message().find("ckpt-30.pt is gone"), std::string::npos) << gone.message();
  EXPECT_NE(gone.message().find("steps it can resume from: 10, 20"), std::string::npos) << gone.message();
  const Status no_path = CheckResumeStep("r-1", rows, 40, run_dir);
  EXPECT_NE(no_path.message().find("the job reported no path"), std::string::npos) << no_path.message();
}

TEST(ResumePointTest, AFencedJobCheckpointIsRefusedEvenWhenItsFileIsThere) {
  testing::TempDir dir("resume_point");
  const std::string file = dir / "ckpt-10.pt";
  std::ofstream(file) << "state";
  CheckpointRecord c = JobCheckpoint(10, file);
  c.state = CheckpointState::kFenced;
  c.reason = "resumed from 5";
  const Status s = CheckResumeStep("r-1", {c}, 10, dir.path());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("marked fenced"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace holdfast
