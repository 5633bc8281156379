#include "common/progress_record.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <gtest/gtest.h>

namespace holdfast {
namespace {

std::string TempPath(const char* tag) {
  return (std::filesystem::temp_directory_path() / (std::string("hf_progress_") + tag + "_" + std::to_string(getpid())))
      .string();
}

TEST(ProgressRecordTest, ReaderSeesWhatAnotherProcessWrote) {
  const std::string path = TempPath("xproc");
  ASSERT_TRUE(CreateProgressFile(path, 3).ok());
  auto reader = ProgressReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  ProgressSnapshot fresh = (*reader)->Read();
  EXPECT_TRUE(fresh.valid);
  EXPECT_EQ(fresh.phase(), Phase::kStarting);
  EXPECT_EQ(fresh.record.rank, 3);
  EXPECT_EQ(fresh.record.checkpoint_step, -1);

  pid_t child = fork();
  if (child == 0) {
    auto w = ProgressWriter::Open(path, 3);
    if (!w.ok()) _exit(1);
    (*w)->BeginStep();
    const uint64_t a = (*w)->IssueCollective(CollectiveKind::kAllreduce, 4096);
    (*w)->WaitCollective(a, CollectiveKind::kAllreduce);
    (*w)->CollectiveDone(a);
    (*w)->EndStep(1);
    (*w)->BeginStep();
    const uint64_t b = (*w)->IssueCollective(CollectiveKind::kAllreduce, 8192);
    (*w)->WaitCollective(b, CollectiveKind::kAllreduce);
    _exit(0);  // dies waiting in collective #2
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_EQ(WEXITSTATUS(status), 0);
  ProgressSnapshot s = (*reader)->Read();
  ASSERT_TRUE(s.valid);
  EXPECT_FALSE(s.torn);
  EXPECT_EQ(s.record.pid, child);
  EXPECT_EQ(s.record.step, 1);
  EXPECT_EQ(s.phase(), Phase::kCollective);
  EXPECT_EQ(s.record.waiting_on, 2u);
  EXPECT_EQ(s.record.collectives_issued, 2u);
  EXPECT_EQ(s.record.collectives_done, 1u);
  EXPECT_EQ(s.record.ring_head, 2u);
  EXPECT_EQ(s.record.ring[1].bytes, 8192u);
  EXPECT_EQ(s.record.ring[1].completed_ns, 0);
  EXPECT_GT(s.record.ring[0].completed_ns, 0);
  std::remove(path.c_str());
}

TEST(ProgressRecordTest, WriterFrozenMidUpdateIsReportedTorn) {
  const std::string path = TempPath("torn");
  auto w = ProgressWriter::Open(path, 0);
  ASSERT_TRUE(w.ok());
  (*w)->EndStep(7);
  auto reader = ProgressReader::Open(path);
  ASSERT_TRUE(reader.ok());
  // Simulate a writer stopped between the two halves of the sequence lock.
  {
    FILE* f = std::fopen(path.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    uint64_t odd = 101;
    std::fseek(f, offsetof(ProgressRecordLayout, seq), SEEK_SET);
    std::fwrite(&odd, sizeof(odd), 1, f);
    std::fclose(f);
  }
  ProgressSnapshot s = (*reader)->Read();
  EXPECT_TRUE(s.valid);
  EXPECT_TRUE(s.torn);
  EXPECT_EQ(s.record.step, 7);
  std::remove(path.c_str());
}

TEST(ProgressRecordTest, CheckpointFailuresReachTheReaderWithTheirText) {
  const std::string path = TempPath("ckfail");
  ASSERT_TRUE(CreateProgressFile(path, 1).ok());
  auto reader = ProgressReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  ProgressSnapshot fresh = (*reader)->Read();
  ASSERT_TRUE(fresh.valid);
  EXPECT_EQ(fresh.record.version, 4u);
  EXPECT_EQ(fresh.record.size, sizeof(ProgressRecordLayout));
  EXPECT_EQ(fresh.record.checkpoint_failures, 0u);
  EXPECT_EQ(fresh.record.checkpoint_failed_step, -1);
  EXPECT_EQ(fresh.record.checkpoint_error[0], '\0');

  // A long message whose cut point falls inside a two-byte UTF-8 character.
  std::string long_message = "open /ck/step-000000000020/shard.tmp: No space left on device; ";
  while (long_message.size() < kProgressErrorSize - 2) long_message += 'x';
  long_message += "\xC3\xA9 and more that does not fit";  // U+00E9 straddles byte 159
  pid_t child = fork();
  if (child == 0) {
    auto w = ProgressWriter::Open(path, 1);
    if (!w.ok()) _exit(1);
    (*w)->RecordCheckpointFailure(10, "mkdir /ck/step-000000000010: Not a directory");
    (*w)->SetCheckpointStep(15);
    (*w)->RecordCheckpointFailure(20, long_message);
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_EQ(WEXITSTATUS(status), 0);
  ProgressSnapshot s = (*reader)->Read();
  ASSERT_TRUE(s.valid);
  EXPECT_FALSE(s.torn);
  EXPECT_EQ(s.record.checkpoint_failures, 2u);
  EXPECT_EQ(s.record.checkpoint_failed_step, 20);
  EXPECT_EQ(s.record.checkpoint_step, 15);
  const size_t len = strnlen(s.record.checkpoint_error, kProgressErrorSize);
  ASSERT_LT(len, static_cast<size_t>(kProgressErrorSize)) << "the text must be NUL-terminated";
  const std::string text(s.record.checkpoint_error, len);
  // Cut before the split character, never through it; nothing of the earlier, shorter text remains.
  EXPECT_EQ(text, long_message.substr(0, kProgressErrorSize - 2));
  std::remove(path.c_str());
}

TEST(ProgressRecordTest, TheRestoreReachesTheReaderAndAnOlderWriterReadsAsUnreported) {
  const std::string path = TempPath("restore");
  ASSERT_TRUE(CreateProgressFile(path, 0).ok());
  auto reader = ProgressReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  ProgressSnapshot fresh = (*reader)->Read();
  ASSERT_TRUE(fresh.valid);
  EXPECT_EQ(fresh.record.restored_step, -1);
  EXPECT_EQ(fresh.record.restore_tier, static_cast<uint32_t>(RestoreTier::kUnreported));
  {
    auto w = ProgressWriter::Open(path, 0);
    ASSERT_TRUE(w.ok());
    (*w)->SetRestored(14, RestoreTier::kMemory, 2);
  }
  ProgressSnapshot s = (*reader)->Read();
  ASSERT_TRUE(s.valid);
  EXPECT_EQ(s.record.restored_step, 14);
  EXPECT_EQ(s.record.restore_tier, static_cast<uint32_t>(RestoreTier::kMemory));
  EXPECT_EQ(s.record.restore_skipped, 2u);

  // A version 2 writer (an older Python module) rewrites the header and leaves
  // the tail alone: its record is read, the restore as not reported.
  ProgressRecordLayout old = s.record;
  old.version = 2;
  old.size = offsetof(ProgressRecordLayout, restored_step);
  old.step = 30;
  FILE* f = std::fopen(path.c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fwrite(&old, sizeof(old), 1, f), 1u);
  std::fclose(f);
  ProgressSnapshot v2 = (*reader)->Read();
  ASSERT_TRUE(v2.valid);
  EXPECT_EQ(v2.record.step, 30);
  EXPECT_EQ(v2.record.restored_step, -1);
  EXPECT_EQ(v2.record.restore_tier, static_cast<uint32_t>(RestoreTier::kUnreported));

  // Another version is not read at all.
  old.version = 1;
  f = std::fopen(path.c_str(), "r+b");
  ASSERT_EQ(std::fwrite(&old, sizeof(old), 1, f), 1u);
  std::fclose(f);
  EXPECT_FALSE((*reader)->Read().valid);
  std::remove(path.c_str());
}

TEST(ProgressRecordTest, MissingOrForeignFileIsAnError) {
  EXPECT_EQ(ProgressReader::Open(TempPath("missing")).status().code(), StatusCode::kNotFound);
  const std::string path = TempPath("small");
  FILE* f = std::fopen(path.c_str(), "wb");
  std::fputs("not a record", f);
  std::fclose(f);
  EXPECT_EQ(ProgressReader::Open(path).status().code(), StatusCode::kInvalidArgument);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace holdfast
