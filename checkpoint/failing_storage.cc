#include "checkpoint/failing_storage.h"

#include <algorithm>

namespace holdfast {

class FailingWritableFile final : public WritableFile {
 public:
  FailingWritableFile(std::string path, std::unique_ptr<WritableFile> base, FailingStorage* owner)
      : path_(std::move(path)), base_(std::move(base)), owner_(owner) {}

  Status Append(const void* data, size_t n) override {
    size_t allowed = 0;
    int err = owner_->AdmitWrite(n, &allowed);
    if (allowed > 0) HF_RETURN_IF_ERROR(base_->Append(data, allowed));
    if (err != 0) return ErrnoError("write " + path_, err);
    return Status::Ok();
  }
  Status Sync() override {
    if (int err = owner_->AdmitSync(); err != 0) return ErrnoError("fsync " + path_, err);
    return base_->Sync();
  }
  void StartWriteback(uint64_t offset, uint64_t n) override { base_->StartWriteback(offset, n); }
  Status Close() override { return base_->Close(); }

 private:
  std::string path_;
  std::unique_ptr<WritableFile> base_;
  FailingStorage* owner_;  // not owned
};

FailingStorage::FailingStorage(Storage* base) : base_(base) {}

void FailingStorage::FailWritesAfter(uint64_t budget_bytes, int err) {
  std::lock_guard<std::mutex> l(mu_);
  budget_armed_ = true;
  budget_bytes_ = budget_bytes;
  budget_err_ = err;
}

void FailingStorage::FailNthWrite(int64_t n, int err) {
  std::lock_guard<std::mutex> l(mu_);
  fail_nth_write_ = writes_ + n;
  nth_write_err_ = err;
}

void FailingStorage::FailSync(int err) {
  std::lock_guard<std::mutex> l(mu_);
  sync_err_ = err;
}

void FailingStorage::Clear() {
  std::lock_guard<std::mutex> l(mu_);
  budget_armed_ = false;
  fail_nth_write_ = 0;
  sync_err_ = 0;
}

int64_t FailingStorage::faults_injected() const {
  std::lock_guard<std::mutex> l(mu_);
  return faults_;
}

uint64_t FailingStorage::bytes_written() const {
  std::lock_guard<std::mutex> l(mu_);
  return bytes_written_;
}

int FailingStorage::AdmitWrite(size_t n, size_t* allowed) {
  std::lock_guard<std::mutex> l(mu_);
  ++writes_;
  *allowed = n;
  int err = 0;
  if (fail_nth_write_ > 0 && writes_ >= fail_nth_write_) {
    *allowed = 0;
    err = nth_write_err_;
  }
  if (budget_armed_) {
    uint64_t left = budget_bytes_;
    if (*allowed > left) {
      *allowed = static_cast<size_t>(left);
      err = budget_err_;
    }
    budget_bytes_ -= *allowed;
  }
  bytes_written_ += *allowed;
  if (err != 0) ++faults_;
  return err;
}

int FailingStorage::AdmitSync() {
  std::lock_guard<std::mutex> l(mu_);
  if (sync_err_ != 0) ++faults_;
  return sync_err_;
}

Result<std::unique_ptr<WritableFile>> FailingStorage::NewWritableFile(const std::string& path) {
  HF_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> base, base_->NewWritableFile(path));
  return std::unique_ptr<WritableFile>(new FailingWritableFile(path, std::move(base), this));
}
Result<std::unique_ptr<ReadableFile>> FailingStorage::OpenReadable(const std::string& path) {
  return base_->OpenReadable(path);
}
Status FailingStorage::Rename(const std::string& from, const std::string& to) { return base_->Rename(from, to); }
Status FailingStorage::Unlink(const std::string& path) { return base_->Unlink(path); }
Status FailingStorage::MakeDir(const std::string& path) { return base_->MakeDir(path); }
Status FailingStorage::RemoveDir(const std::string& path) { return base_->RemoveDir(path); }
Status FailingStorage::SyncDir(const std::string& path) { return base_->SyncDir(path); }
Result<std::vector<std::string>> FailingStorage::ListDir(const std::string& path) { return base_->ListDir(path); }
Result<bool> FailingStorage::Exists(const std::string& path) { return base_->Exists(path); }

}  // namespace holdfast
