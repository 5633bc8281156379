#include "trainer/progress_sink.h"

#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

namespace holdfast {
namespace {

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/" + name + "-" + std::to_string(getpid());
}

TEST(ProgressSinkTest, WithoutAPathNothingIsRecordedAndEveryCallIsAccepted) {
  auto sink = OpenProgressSink("", 3);
  ASSERT_TRUE(sink.ok()) << sink.status().ToString();
  ProgressSink& s = **sink;
  s.BeginStep();
  s.SetPhase(Phase::kForward);
  EXPECT_EQ(s.IssueCollective(CollectiveKind::kAllreduce, 12, {}), 0u);
  s.WaitCollective(0, CollectiveKind::kAllreduce);
  s.CollectiveDone(0);
  s.EndStep(1);
  s.SetCheckpointStep(1);
  s.RecordCheckpointFailure(2, "disk full");
  NoProgress().SetPhase(Phase::kDone);  // the shared one, likewise
}

TEST(ProgressSinkTest, WithAPathTheRecordSaysWhatTheSinkWasTold) {
  const std::string path = TempPath("progress-sink");
  ASSERT_TRUE(CreateProgressFile(path, 1).ok());
  {
    auto sink = OpenProgressSink(path, 1);
    ASSERT_TRUE(sink.ok()) << sink.status().ToString();
    ProgressSink& s = **sink;
    s.BeginStep();
    const uint64_t first = s.IssueCollective(CollectiveKind::kReduceScatter, 4096, {});
    const uint64_t second = s.IssueCollective(CollectiveKind::kAllreduce, 32, {});
    EXPECT_EQ(first, 1u);
    EXPECT_EQ(second, 2u);
    s.WaitCollective(second, CollectiveKind::kAllreduce);
    s.CollectiveDone(first);
    s.EndStep(7);
    s.SetCheckpointStep(6);
    s.RecordCheckpointFailure(7, "no space left on device");

    auto reader = ProgressReader::Open(path);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    const ProgressSnapshot p = (*reader)->Read();
    ASSERT_TRUE(p.valid);
    EXPECT_EQ(p.record.pid, getpid());
    EXPECT_EQ(p.record.rank, 1);
    EXPECT_EQ(p.record.step, 7);
    EXPECT_EQ(p.phase(), Phase::kCollective);
    EXPECT_EQ(p.record.waiting_on, 2u);
    EXPECT_EQ(p.record.collective_kind, static_cast<uint32_t>(CollectiveKind::kAllreduce));
    EXPECT_EQ(p.record.collectives_issued, 2u);
    EXPECT_EQ(p.record.collectives_done, 1u);
    EXPECT_EQ(p.record.ring[0].bytes, 4096u);
    EXPECT_NE(p.record.ring[0].completed_ns, 0);
    EXPECT_EQ(p.record.ring[1].completed_ns, 0);
    EXPECT_EQ(p.record.checkpoint_step, 6);
    EXPECT_EQ(p.record.checkpoint_failures, 1u);
    EXPECT_EQ(p.record.checkpoint_failed_step, 7);
    EXPECT_STREQ(p.record.checkpoint_error, "no space left on device");
  }
  unlink(path.c_str());
}

TEST(ProgressSinkTest, ARecordThatCannotBeOpenedIsAnError) {
  auto sink = OpenProgressSink("/nonexistent-dir/progress.0", 0);
  EXPECT_FALSE(sink.ok());
}

}  // namespace
}  // namespace holdfast
