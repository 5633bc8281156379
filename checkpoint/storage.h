// Storage: the seam between the checkpoint code and the file system.
//
// Every byte the checkpoint library writes or reads goes through this small
// interface (open/write/fsync/rename/unlink/mkdir/readdir/read), in the manner
// of LevelDB's Env, so that tests can wrap it and make the disk fail the way the
// kernel does (FailingStorage in checkpoint/failing_storage.h: a short write,
// then ENOSPC). PosixStorage is the real one; errno becomes a Status only via
// ErrnoError, so messages read "write /ckpt/step-000000000010/shard-...: No
// space left on device".
//
// Thread-safety: a Storage may be used from several threads at once. A
// WritableFile or ReadableFile is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace holdfast {

// A file opened for writing from offset 0 (created or truncated).
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Writes all n bytes or returns the error that stopped it (the bytes before the
  // error may be in the file, as after a short write(2)).
  virtual Status Append(const void* data, size_t n) = 0;
  // Asks the kernel to start writing [offset, offset + n) to the device now
  // (sync_file_range), so that the disk works while later bytes are still being
  // appended and Sync has little left to do. Only a hint: durability still
  // comes from Sync alone. Default: nothing.
  virtual void StartWriteback(uint64_t offset, uint64_t n) {
    (void)offset;
    (void)n;
  }
  // fsync(2): the bytes appended so far are durable once this returns OK.
  virtual Status Sync() = 0;
  // close(2). Also done (errors ignored) by the destructor.
  virtual Status Close() = 0;
};

// A file opened for reading at explicit offsets.
class ReadableFile {
 public:
  virtual ~ReadableFile() = default;
  virtual uint64_t size() const = 0;
  // Reads exactly n bytes at offset into dst (not owned); kCorruption when the
  // file ends first (a truncated file is damaged data, not an I/O fault).
  virtual Status ReadAt(uint64_t offset, size_t n, void* dst) = 0;
  // Tells the kernel the cached pages are no longer needed (benchmarks use it
  // to measure reads from the device, not from the page cache). Best effort.
  virtual void DropCache() {}
};

class Storage {
 public:
  virtual ~Storage() = default;

  virtual Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) = 0;
  virtual Result<std::unique_ptr<ReadableFile>> OpenReadable(const std::string& path) = 0;
  // rename(2): atomically replaces `to`.
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  // unlink(2); OK when the file did not exist.
  virtual Status Unlink(const std::string& path) = 0;
  // mkdir(2); OK when the directory exists already.
  virtual Status MakeDir(const std::string& path) = 0;
  // rmdir(2) of an empty directory; OK when it did not exist.
  virtual Status RemoveDir(const std::string& path) = 0;
  // fsync(2) of a directory, so that entries created or renamed in it are durable.
  virtual Status SyncDir(const std::string& path) = 0;
  // Names in a directory, without "." and "..", in no particular order.
  virtual Result<std::vector<std::string>> ListDir(const std::string& path) = 0;
  // Whether path exists (any kind of file).
  virtual Result<bool> Exists(const std::string& path) = 0;
};

// The real file system through POSIX calls. Stateless.
class PosixStorage final : public Storage {
 public:
  // A process-wide instance; never destroyed.
  static PosixStorage* Default();

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  Result<std::unique_ptr<ReadableFile>> OpenReadable(const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status Unlink(const std::string& path) override;
  Status MakeDir(const std::string& path) override;
  Status RemoveDir(const std::string& path) override;
  Status SyncDir(const std::string& path) override;
  Result<std::vector<std::string>> ListDir(const std::string& path) override;
  Result<bool> Exists(const std::string& path) override;
};

// Renames step folder `dir` to "<dir><suffix>", or "<dir><suffix>.K" for the
// first free K (2, 3, ...) when that exists: a folder set aside (corrupt,
// fenced) is kept, never overwritten. Returns the new path.
Result<std::string> MoveStepDirAside(const std::string& dir, const std::string& suffix);

}  // namespace holdfast
