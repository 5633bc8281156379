#include "checkpoint/storage.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace holdfast {
namespace {

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  Status Append(const void* data, size_t n) override {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return ErrnoError("write " + path_, errno);
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return Status::Ok();
  }

  void StartWriteback(uint64_t offset, uint64_t n) override {
    (void)::sync_file_range(fd_, static_cast<off64_t>(offset), static_cast<off64_t>(n), SYNC_FILE_RANGE_WRITE);
  }

  Status Sync() override {
    if (::fsync(fd_) != 0) return ErrnoError("fsync " + path_, errno);
    return Status::Ok();
  }

  Status Close() override {
    if (fd_ < 0) return Status::Ok();
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return ErrnoError("close " + path_, errno);
    return Status::Ok();
  }

 private:
  std::string path_;
  int fd_;  // -1 once closed
};

class PosixReadableFile final : public ReadableFile {
 public:
  PosixReadableFile(std::string path, int fd, uint64_t size) : path_(std::move(path)), fd_(fd), size_(size) {}
  ~PosixReadableFile() override { ::close(fd_); }

  uint64_t size() const override { return size_; }

  Status ReadAt(uint64_t offset, size_t n, void* dst) override {
    char* p = static_cast<char*>(dst);
    while (n > 0) {
      ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(offset));
      if (r < 0) {
        if (errno == EINTR) continue;
        return ErrnoError("read " + path_, errno);
      }
      if (r == 0) {
        return CorruptionError("read " + path_ + ": file ends at byte " + std::to_string(offset) +
                               ", " + std::to_string(n) + " bytes short");
      }
      p += r;
      n -= static_cast<size_t>(r);
      offset += static_cast<uint64_t>(r);
    }
    return Status::Ok();
  }

  void DropCache() override { (void)::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED); }

 private:
  std::string path_;
  int fd_;
  uint64_t size_;
};

}  // namespace

PosixStorage* PosixStorage::Default() {
  static PosixStorage* storage = new PosixStorage();
  return storage;
}

Result<std::unique_ptr<WritableFile>> PosixStorage::NewWritableFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("open " + path + " for writing", errno);
  return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
}

Result<std::unique_ptr<ReadableFile>> PosixStorage::OpenReadable(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open " + path, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoError("stat " + path, err);
  }
  return std::unique_ptr<ReadableFile>(new PosixReadableFile(path, fd, static_cast<uint64_t>(st.st_size)));
}

Status PosixStorage::Rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) return ErrnoError("rename " + from + " to " + to, errno);
  return Status::Ok();
}

Status PosixStorage::Unlink(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoError("unlink " + path, errno);
  return Status::Ok();
}

Status PosixStorage::MakeDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoError("mkdir " + path, errno);
  return Status::Ok();
}

Status PosixStorage::RemoveDir(const std::string& path) {
  if (::rmdir(path.c_str()) != 0 && errno != ENOENT) return ErrnoError("rmdir " + path, errno);
  return Status::Ok();
}

Status PosixStorage::SyncDir(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open directory " + path, errno);
  Status s;
  if (::fsync(fd) != 0) s = ErrnoError("fsync directory " + path, errno);
  ::close(fd);
  return s;
}

Result<std::vector<std::string>> PosixStorage::ListDir(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return ErrnoError("opendir " + path, errno);
  std::vector<std::string> names;
  errno = 0;
  while (struct dirent* e = ::readdir(dir)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
    errno = 0;
  }
  int err = errno;
  ::closedir(dir);
  if (err != 0) return ErrnoError("readdir " + path, err);
  return names;
}

Result<bool> PosixStorage::Exists(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) return true;
  if (errno == ENOENT) return false;
  return ErrnoError("stat " + path, errno);
}

Result<std::string> MoveStepDirAside(const std::string& dir, const std::string& suffix) {
  for (int k = 1; k < 1000; ++k) {
    const std::string to = dir + suffix + (k == 1 ? "" : "." + std::to_string(k));
    struct stat st {};
    if (::lstat(to.c_str(), &st) == 0) continue;
    if (::rename(dir.c_str(), to.c_str()) != 0) return ErrnoError("rename " + dir + " to " + to, errno);
    return to;
  }
  return ResourceExhaustedError(dir + suffix + ": 999 folders of that name already set aside; remove some");
}

}  // namespace holdfast
