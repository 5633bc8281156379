// MappedFile: a whole file mapped read-only into memory (RAII).
//
// The datasets read their files through this: the page cache holds the data
// once for every rank on a node, and a sample costs a few loads, not a read().
// The mapping is MAP_PRIVATE | PROT_READ and is unmapped on destruction. The
// file must not be truncated while it is mapped (the kernel answers a read past
// the new end with SIGBUS); data files are written once and then only read.
//
// Thread-safety: immutable after Open except Advise; data() may be read from
// any number of threads. Move-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace holdfast {

class MappedFile {
 public:
  // How the caller will read the bytes; passed to madvise (a hint only).
  enum class Access { kSequential, kRandom };

  // Maps `path`. A missing file is kNotFound, a directory or other non-regular
  // file is kInvalidArgument, other OS failures kIoError; every message names
  // the path. An empty file maps to data() == nullptr, size() == 0.
  static Result<MappedFile> Open(const std::string& path, Access access);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  // Changes the read-ahead hint (e.g. sequential for a validation scan, then random).
  void Advise(Access access) const;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  void Unmap();

  std::string path_;
  const uint8_t* data_ = nullptr;  // owned mapping of size_ bytes; nullptr when empty
  size_t size_ = 0;
};

}  // namespace holdfast
