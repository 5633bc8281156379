// checkpoint_crash_helper: two ranks (threads sharing an InMemoryStore) saving
// checkpoints in a loop, resuming after the newest committed step, until it is
// killed. checkpoint_crash_test SIGKILLs it either at a random time or, with
// --kill-after-bytes N, from inside the N-th byte written (the write that
// crosses N stores only the bytes before it, then the process dies), so kills
// land in the middle of shard writes, manifest writes and pruning.
//
//   checkpoint_crash_helper --root DIR --ready-fd FD [--kill-after-bytes N] [--max-steps 1000]
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "checkpoint/checkpoint_writer.h"
#include "common/memory_store.h"
#include "spdlog/spdlog.h"
#include "tests/checkpoint/crash_state.h"

namespace holdfast {
namespace {

std::atomic<int64_t> g_budget{-1};  // bytes left before SIGKILL; -1 = never

class KillingFile final : public WritableFile {
 public:
  explicit KillingFile(std::unique_ptr<WritableFile> base) : base_(std::move(base)) {}
  Status Append(const void* data, size_t n) override {
    if (g_budget.load() >= 0) {
      int64_t left = g_budget.fetch_sub(static_cast<int64_t>(n));
      if (left < static_cast<int64_t>(n)) {
        if (left > 0) (void)base_->Append(data, static_cast<size_t>(left));
        ::raise(SIGKILL);
      }
    }
    return base_->Append(data, n);
  }
  Status Sync() override { return base_->Sync(); }
  Status Close() override { return base_->Close(); }

 private:
  std::unique_ptr<WritableFile> base_;
};

class KillingStorage final : public Storage {
 public:
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    HF_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, base_->NewWritableFile(path));
    return std::unique_ptr<WritableFile>(new KillingFile(std::move(f)));
  }
  Result<std::unique_ptr<ReadableFile>> OpenReadable(const std::string& p) override { return base_->OpenReadable(p); }
  Status Rename(const std::string& a, const std::string& b) override { return base_->Rename(a, b); }
  Status Unlink(const std::string& p) override { return base_->Unlink(p); }
  Status MakeDir(const std::string& p) override { return base_->MakeDir(p); }
  Status RemoveDir(const std::string& p) override { return base_->RemoveDir(p); }
  Status SyncDir(const std::string& p) override { return base_->SyncDir(p); }
  Result<std::vector<std::string>> ListDir(const std::string& p) override { return base_->ListDir(p); }
  Result<bool> Exists(const std::string& p) override { return base_->Exists(p); }

 private:
  Storage* base_ = PosixStorage::Default();
};

int Main(int argc, char** argv) {
  std::string root;
  int ready_fd = -1;
  int64_t max_steps = 1000;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--root") root = argv[i + 1];
    else if (k == "--ready-fd") ready_fd = std::atoi(argv[i + 1]);
    else if (k == "--kill-after-bytes") g_budget = std::atoll(argv[i + 1]);
    else if (k == "--max-steps") max_steps = std::atoll(argv[i + 1]);
  }
  if (root.empty()) {
    std::fprintf(stderr, "usage: checkpoint_crash_helper --root DIR [--ready-fd FD] [--kill-after-bytes N]\n");
    return 2;
  }
  spdlog::set_level(spdlog::level::err);
  KillingStorage storage;
  auto store = std::make_shared<InMemoryStore>();
  std::unique_ptr<CheckpointWriter> writers[2];
  for (int r = 0; r < 2; ++r) {
    CheckpointWriterOptions o;
    o.root = root;
    o.rank = r;
    o.world_size = 2;
    o.store = store;
    o.storage = &storage;
    o.retention.keep_last = 2;
    o.retention.keep_every = 5;
    Result<std::unique_ptr<CheckpointWriter>> w = CheckpointWriter::Create(o);
    if (!w.ok()) {
      std::fprintf(stderr, "helper: %s\n", w.status().ToString().c_str());
      return 1;
    }
    writers[r] = std::move(w).value();
  }
  if (ready_fd >= 0) {
    (void)!::write(ready_fd, "ready\n", 6);
    ::close(ready_fd);
  }
  const int64_t first = writers[0]->newest_committed_step() + 1;
  for (int64_t step = first; step < first + max_steps; ++step) {
    CrashState s0(step, 0), s1(step, 1);
    if (!writers[0]->Save(step, s0.Views()).ok() || !writers[1]->Save(step, s1.Views()).ok()) return 1;
    Status a = writers[0]->Flush();
    Status b = writers[1]->Flush();
    if (!a.ok() || !b.ok()) {
      std::fprintf(stderr, "helper: step %lld: %s / %s\n", static_cast<long long>(step), a.ToString().c_str(),
                   b.ToString().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace holdfast

int main(int argc, char** argv) { return holdfast::Main(argc, argv); }
