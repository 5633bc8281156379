// MemoryStorage: a Storage whose files are strings in memory, for the fuzz
// targets (which hand each input to the CheckpointLoader and must not touch the
// disk per input). Only what the loader uses is modelled: files written whole,
// read at offsets, listed by folder; a folder exists while a file lies under
// it. Not a test double for durability (Sync and SyncDir do nothing).
//
// Thread-safety: none; one fuzz input at a time.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/storage.h"

namespace holdfast {

class MemoryStorage final : public Storage {
 public:
  void Put(const std::string& path, std::string bytes) { files_[path] = std::move(bytes); }

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    files_[path].clear();
    return std::unique_ptr<WritableFile>(new Writable(&files_[path]));
  }
  Result<std::unique_ptr<ReadableFile>> OpenReadable(const std::string& path) override {
    auto it = files_.find(path);
    if (it == files_.end()) return NotFoundError("open " + path + ": No such file or directory");
    return std::unique_ptr<ReadableFile>(new Readable(it->second));
  }
  Status Rename(const std::string& from, const std::string& to) override {
    auto it = files_.find(from);
    if (it == files_.end()) return NotFoundError("rename " + from + ": No such file or directory");
    std::string bytes = std::move(it->second);
    files_.erase(it);
    files_[to] = std::move(bytes);
    return Status::Ok();
  }
  Status Unlink(const std::string& path) override {
    files_.erase(path);
    return Status::Ok();
  }
  Status MakeDir(const std::string&) override { return Status::Ok(); }
  Status RemoveDir(const std::string&) override { return Status::Ok(); }
  Status SyncDir(const std::string&) override { return Status::Ok(); }
  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    const std::string prefix = path + "/";
    std::vector<std::string> names;
    for (const auto& [file, bytes] : files_) {
      if (file.compare(0, prefix.size(), prefix) != 0) continue;
      const std::string name = file.substr(prefix.size(), file.find('/', prefix.size()) - prefix.size());
      if (names.empty() || names.back() != name) names.push_back(name);
    }
    if (names.empty()) return NotFoundError("list " + path + ": No such file or directory");
    return names;
  }
  Result<bool> Exists(const std::string& path) override {
    if (files_.count(path) != 0) return true;
    Result<std::vector<std::string>> listed = ListDir(path);
    return listed.ok();
  }

 private:
  class Writable final : public WritableFile {
   public:
    explicit Writable(std::string* bytes) : bytes_(bytes) {}
    Status Append(const void* data, size_t n) override {
      bytes_->append(static_cast<const char*>(data), n);
      return Status::Ok();
    }
    Status Sync() override { return Status::Ok(); }
    Status Close() override { return Status::Ok(); }

   private:
    std::string* bytes_;  // owned by the storage's map
  };
  class Readable final : public ReadableFile {
   public:
    explicit Readable(std::string bytes) : bytes_(std::move(bytes)) {}
    uint64_t size() const override { return bytes_.size(); }
    Status ReadAt(uint64_t offset, size_t n, void* dst) override {
      if (offset > bytes_.size() || n > bytes_.size() - offset) return CorruptionError("read past the end of file");
      bytes_.copy(static_cast<char*>(dst), n, offset);
      return Status::Ok();
    }

   private:
    std::string bytes_;
  };

  std::map<std::string, std::string> files_;  // path -> contents
};

}  // namespace holdfast
