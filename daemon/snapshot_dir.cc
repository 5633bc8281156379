#include "daemon/snapshot_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "checkpoint/checkpoint_loader.h"

namespace holdfast {
namespace {

constexpr const char* kLockName = "owner.lock";

// Opens dir/owner.lock and takes its flock without waiting: the fd, or -1
// (errno set: EWOULDBLOCK when its owner lives).
int OpenAndLock(const std::string& dir, bool create) {
  const std::string path = dir + "/" + kLockName;
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0600);
  if (fd < 0) return -1;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

}  // namespace

Result<std::unique_ptr<SnapshotDir>> SnapshotDir::Create(const std::string& memory_dir, const std::string& run_id) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(memory_dir, ec)) {
    return FailedPreconditionError("recovery.memory_dir " + memory_dir +
                                   " is not a directory: point it at a tmpfs (\"/dev/shm\"), or set "
                                   "recovery.memory_budget_mb = 0 to run without memory snapshots");
  }
  const std::string name = std::string(kSnapshotDirPrefix) + run_id + "-" + std::to_string(::getpid());
  const std::string path = memory_dir + "/" + name;
  const std::string making = memory_dir + "/." + name;
  fs::remove_all(making, ec);  // a folder of this pid's name is a dead process's
  fs::remove_all(path, ec);
  if (::mkdir(making.c_str(), 0700) != 0) {
    return ErrnoError("create the memory snapshot folder " + making +
                          " (recovery.memory_dir must be writable by the job's user)",
                      errno);
  }
  const int fd = OpenAndLock(making, /*create=*/true);
  if (fd < 0) {
    Status s = ErrnoError("lock " + making + "/" + kLockName, errno);
    fs::remove_all(making, ec);
    return s;
  }
  if (::rename(making.c_str(), path.c_str()) != 0) {
    Status s = ErrnoError("rename " + making + " to " + path, errno);
    fs::remove_all(making, ec);
    ::close(fd);
    return s;
  }
  return std::unique_ptr<SnapshotDir>(new SnapshotDir(path, fd));
}

SnapshotDir::~SnapshotDir() { Remove(); }

void SnapshotDir::Remove() {
  if (lock_fd_ < 0) return;
  std::error_code ec;
  const auto n = std::filesystem::remove_all(path_, ec);
  if (ec) {
    spdlog::warn("could not remove the memory snapshot folder {}: {} (the next holdfastd on this node removes it)",
                 path_, ec.message());
  } else {
    spdlog::info("removed the memory snapshot folder {} ({} entries)", path_, static_cast<long long>(n));
  }
  ::close(lock_fd_);  // the lock goes last: a sweep must not find the folder ownerless while it is removed
  lock_fd_ = -1;
}

int SweepDeadSnapshotDirs(const std::string& memory_dir) {
  namespace fs = std::filesystem;
  int removed = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(memory_dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool ours = name.rfind(kSnapshotDirPrefix, 0) == 0 || name.rfind(std::string(".") + kSnapshotDirPrefix, 0) == 0;
    std::error_code kind_ec;
    if (!ours || !e.is_directory(kind_ec)) continue;
    const int fd = OpenAndLock(e.path().string(), /*create=*/false);
    if (fd < 0) continue;  // alive (EWOULDBLOCK), being made (no lock file yet), or not ours to open
    std::error_code rm_ec;
    fs::remove_all(e.path(), rm_ec);
    ::close(fd);
    if (rm_ec) {
      spdlog::warn("could not remove the dead daemon's memory snapshot folder {}: {}", e.path().string(),
                   rm_ec.message());
    } else {
      spdlog::info("removed {}: memory snapshots of a holdfastd that is gone", e.path().string());
      ++removed;
    }
  }
  return removed;
}

int64_t NewestSnapshotStep(const std::string& dir) {
  CheckpointLoader loader(dir);
  Result<std::vector<int64_t>> steps = loader.ListSteps();
  if (!steps.ok()) return -1;
  for (int64_t step : *steps) {
    if (loader.Inspect(step, InspectDepth::kSizes).ok()) return step;
  }
  return -1;
}

Result<std::unique_ptr<SnapshotDir>> OpenSnapshotDir(const RecoveryConfig& recovery, const std::string& run_id,
                                                     size_t nodes) {
  SweepDeadSnapshotDirs(recovery.memory_dir);
  if (!recovery.enabled()) return std::unique_ptr<SnapshotDir>();
  HF_ASSIGN_OR_RETURN(std::unique_ptr<SnapshotDir> dir, SnapshotDir::Create(recovery.memory_dir, run_id));
  spdlog::info("memory snapshots in {} (recovery.memory_budget_mb = {} on this node, a snapshot every {} step(s){})",
               dir->path(), recovery.memory_budget_mb, recovery.snapshot_every,
               nodes > 1 ? ", replicated to the next node" : "");
  return dir;
}

}  // namespace holdfast
