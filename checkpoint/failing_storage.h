// FailingStorage: a test double that makes the disk fail the way the kernel does.
//
// It wraps a real Storage (LevelDB's ErrorEnv idea) and passes every call
// through until an armed fault fires:
//   - FailWritesAfter(budget, err): writes succeed until `budget` bytes have been
//     written in total; the write that crosses it stores the bytes that fit (a
//     short write, as write(2) does on a full disk) and then fails with `err`
//     (ENOSPC, EDQUOT, EIO); every later write fails with `err` at once.
//   - FailNthWrite(n, err): the n-th Append call (1-based) fails with nothing
//     written, and so does every one after it.
//   - FailSync(err): every fsync of a file fails with `err` (EIO after writeback
//     errors).
// Clear() disarms everything, as when an operator frees space.
//
// Thread-safety: as Storage; the counters are guarded by one mutex, so the
// checkpoint writer's background thread and the test thread may both use it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "checkpoint/storage.h"

namespace holdfast {

class FailingStorage final : public Storage {
 public:
  // `base` is not owned and must outlive this object.
  explicit FailingStorage(Storage* base);

  void FailWritesAfter(uint64_t budget_bytes, int err);
  void FailNthWrite(int64_t n, int err);
  void FailSync(int err);
  void Clear();

  // How many faults have fired since construction.
  int64_t faults_injected() const;
  // Total bytes written through this storage.
  uint64_t bytes_written() const;

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  Result<std::unique_ptr<ReadableFile>> OpenReadable(const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status Unlink(const std::string& path) override;
  Status MakeDir(const std::string& path) override;
  Status RemoveDir(const std::string& path) override;
  Status SyncDir(const std::string& path) override;
  Result<std::vector<std::string>> ListDir(const std::string& path) override;
  Result<bool> Exists(const std::string& path) override;

 private:
  friend class FailingWritableFile;
  // Decides how many of n bytes a write may store; returns the errno to report
  // after storing them (0 = none).
  int AdmitWrite(size_t n, size_t* allowed);
  int AdmitSync();

  Storage* const base_;
  mutable std::mutex mu_;
  bool budget_armed_ = false;     // guarded by mu_
  uint64_t budget_bytes_ = 0;     // guarded by mu_
  int budget_err_ = 0;            // guarded by mu_
  int64_t fail_nth_write_ = 0;    // guarded by mu_; 0 = off
  int nth_write_err_ = 0;         // guarded by mu_
  int sync_err_ = 0;              // guarded by mu_; 0 = off
  int64_t writes_ = 0;            // guarded by mu_
  uint64_t bytes_written_ = 0;    // guarded by mu_
  int64_t faults_ = 0;            // guarded by mu_
};

}  // namespace holdfast
