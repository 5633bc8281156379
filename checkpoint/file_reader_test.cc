// ReadOverlapped: every byte of the range arrives, in order, whatever the
// threads, chunk size and ring; a failing or short read is returned, never a
// hang or a crash. Real files in a temporary folder.
#include "checkpoint/file_reader.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"

namespace holdfast {
namespace {

class TempDir : public testing::TempDir {
 public:
  TempDir() : testing::TempDir("file_reader_test") {}
};

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  uint32_t x = 12345;
  for (char& c : s) {
    x = x * 1103515245u + 12345u;
    c = static_cast<char>(x >> 24);
  }
  return s;
}

std::string WriteTemp(const TempDir& dir, const std::string& bytes) {
  const std::string path = dir.path() + "/file.bin";
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  return path;
}

// Passes reads through, failing the ReadAt that starts at fail_at with EIO.
class FailingReads final : public Storage {
 public:
  explicit FailingReads(uint64_t fail_at) : fail_at_(fail_at) {}
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& p) override {
    return base_->NewWritableFile(p);
  }
  Result<std::unique_ptr<ReadableFile>> OpenReadable(const std::string& path) override {
    HF_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> file, base_->OpenReadable(path));
    return std::unique_ptr<ReadableFile>(new File(std::move(file), fail_at_));
  }
  Status Rename(const std::string& a, const std::string& b) override { return base_->Rename(a, b); }
  Status Unlink(const std::string& p) override { return base_->Unlink(p); }
  Status MakeDir(const std::string& p) override { return base_->MakeDir(p); }
  Status RemoveDir(const std::string& p) override { return base_->RemoveDir(p); }
  Status SyncDir(const std::string& p) override { return base_->SyncDir(p); }
  Result<std::vector<std::string>> ListDir(const std::string& p) override { return base_->ListDir(p); }
  Result<bool> Exists(const std::string& p) override { return base_->Exists(p); }

 private:
  class File final : public ReadableFile {
   public:
    File(std::unique_ptr<ReadableFile> base, uint64_t fail_at) : base_(std::move(base)), fail_at_(fail_at) {}
    uint64_t size() const override { return base_->size(); }
    Status ReadAt(uint64_t offset, size_t n, void* dst) override {
      if (offset == fail_at_) return ErrnoError("read file.bin", EIO);
      return base_->ReadAt(offset, n, dst);
    }

   private:
    std::unique_ptr<ReadableFile> base_;
    const uint64_t fail_at_;
  };
  Storage* const base_ = PosixStorage::Default();
  const uint64_t fail_at_;
};

TEST(FileReaderTest, EveryByteArrivesInOrderWhateverTheThreadsAndChunks) {
  TempDir tmp;
  const std::string bytes = Pattern(100000);
  const std::string path = WriteTemp(tmp, bytes);
  for (int threads : {0, 1, 3}) {
    for (size_t chunk : {size_t{1000}, size_t{4096}, size_t{65536}, size_t{1} << 20}) {
      for (bool keep : {true, false}) {
        SCOPED_TRACE("threads " + std::to_string(threads) + " chunk " + std::to_string(chunk) +
                     (keep ? " kept" : " ring"));
        OverlappedReadOptions o;
        o.threads = threads;
        o.chunk_bytes = chunk;
        o.lead = 2;  // raised to threads + 1
        const uint64_t offset = 777, n = bytes.size() - offset - 5;
        std::vector<uint8_t> dst(keep ? n : 0);
        std::string seen;
        Status s = ReadOverlapped(PosixStorage::Default(), path, offset, n, keep ? dst.data() : nullptr, o,
                                  [&](const uint8_t* p, size_t len) {
                                    if (keep) {
                                      EXPECT_EQ(p, dst.data() + seen.size());
                                    }
                                    seen.append(reinterpret_cast<const char*>(p), len);
                                  });
        ASSERT_TRUE(s.ok()) << s.ToString();
        EXPECT_TRUE(seen == bytes.substr(offset, n));
        if (keep) {
          EXPECT_TRUE(std::string(dst.begin(), dst.end()) == bytes.substr(offset, n));
        }
      }
    }
  }
}

TEST(FileReaderTest, AnEmptyRangeReadsNothing) {
  TempDir tmp;
  const std::string path = WriteTemp(tmp, "abc");
  int calls = 0;
  EXPECT_TRUE(ReadOverlapped(PosixStorage::Default(), path, 3, 0, nullptr, {}, [&](const uint8_t*, size_t) {
                ++calls;
              }).ok());
  EXPECT_EQ(calls, 0);
}

TEST(FileReaderTest, AFailingReadStopsTheReadersAndIsReturned) {
  TempDir tmp;
  const std::string bytes = Pattern(64 * 1024);
  const std::string path = WriteTemp(tmp, bytes);
  FailingReads storage(/*fail_at=*/5 * 4096);
  for (int threads : {0, 1, 4}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    OverlappedReadOptions o;
    o.threads = threads;
    o.chunk_bytes = 4096;
    size_t consumed = 0;
    Status s = ReadOverlapped(&storage, path, 0, bytes.size(), nullptr, o,
                              [&](const uint8_t*, size_t len) { consumed += len; });
    EXPECT_EQ(s.code(), StatusCode::kIoError) << s.ToString();
    EXPECT_NE(s.message().find("read file.bin"), std::string::npos) << s.ToString();
    EXPECT_LE(consumed, 5u * 4096) << "nothing after the failed chunk is consumed";
  }
}

TEST(FileReaderTest, AFileShorterThanTheRangeIsCorruptionAndAMissingOneNotFound) {
  TempDir tmp;
  const std::string path = WriteTemp(tmp, Pattern(10000));
  for (int threads : {0, 2}) {
    OverlappedReadOptions o;
    o.threads = threads;
    o.chunk_bytes = 4096;
    std::vector<uint8_t> dst(20000);
    Status s = ReadOverlapped(PosixStorage::Default(), path, 0, dst.size(), dst.data(), o, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
    EXPECT_NE(s.message().find("file ends at byte 10000"), std::string::npos) << s.ToString();
    s = ReadOverlapped(PosixStorage::Default(), tmp.path() + "/missing", 0, dst.size(), dst.data(), o, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  }
}

}  // namespace
}  // namespace holdfast
