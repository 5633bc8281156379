#include "trainer/data/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace holdfast {

Result<MappedFile> MappedFile::Open(const std::string& path, Access access) {
  // O_NONBLOCK so that a FIFO named by mistake is rejected below instead of
  // blocking until a writer appears; it changes nothing for regular files.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const Status error = ErrnoError("open " + path, errno);
    return Status(error.code(), error.message() + "; check data.path and the file's permissions");
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoError("stat " + path, err);
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return InvalidArgumentError(path + ": is a directory; data.path must name a file");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgumentError(path +
                                ": is not a regular file (a pipe, socket or device?); "
                                "data.path must name a regular file");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {  // mmap rejects length 0; an empty file is reported by the caller
    ::close(fd);
    return MappedFile(path, nullptr, 0);
  }
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps its own reference to the file
  if (addr == MAP_FAILED) return ErrnoError("mmap " + path, err);
  MappedFile file(path, static_cast<const uint8_t*>(addr), size);
  file.Advise(access);
  return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Unmap();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() { Unmap(); }

void MappedFile::Advise(Access access) const {
  if (data_ == nullptr) return;
  // Advice only: a failure changes speed, never results, so it is ignored.
  (void)::madvise(const_cast<uint8_t*>(data_), size_,
                  access == Access::kRandom ? MADV_RANDOM : MADV_SEQUENTIAL);
}

void MappedFile::Unmap() {
  if (data_ != nullptr) {
    ::munmap(const_cast<uint8_t*>(data_), size_);
    data_ = nullptr;
    size_ = 0;
  }
}

}  // namespace holdfast
