#include "daemon/run_lock.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <sstream>
#include <thread>

#include "common/time_source.h"

namespace holdfast {
namespace {

// What the holder wrote into the lock file (for messages; the lock is the truth).
struct HolderRecord {
  pid_t pid = 0;  // 0: not recorded (yet)
  std::string host;
  std::string started;
};

struct flock WholeFile(short type) {
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 0;  // to the end, however long
  fl.l_pid = 0;  // required for OFD locks
  return fl;
}

HolderRecord ReadRecord(int fd) {
  char buf[1024];
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  HolderRecord rec;
  if (n <= 0) return rec;
  std::istringstream in(std::string(buf, static_cast<size_t>(n)));
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    if (key == "pid") {
      char* end = nullptr;
      const long pid = std::strtol(value.c_str(), &end, 10);
      if (end != value.c_str() && *end == '\0' && pid > 0) rec.pid = static_cast<pid_t>(pid);
    } else if (key == "host") {
      rec.host = value;
    } else if (key == "started") {
      rec.started = value;
    }
  }
  return rec;
}

std::string ThisHost() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) return "";
  return host;
}

std::string NowUtc() {
  const auto now = static_cast<std::time_t>(RealTimeSource::Get()->UnixMs() / 1000);  // for people: the wall clock
  std::tm tm {};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Status WriteRecord(int fd, const std::string& path) {
  const std::string text =
      "pid=" + std::to_string(::getpid()) + "\nhost=" + ThisHost() + "\nstarted=" + NowUtc() + "\n";
  // In place: the file must stay the locked inode.
  if (::ftruncate(fd, 0) != 0) return ErrnoError("write run lock " + path, errno);
  const ssize_t n = ::pwrite(fd, text.data(), text.size(), 0);
  if (n < 0) return ErrnoError("write run lock " + path, errno);
  return Status::Ok();
}

std::string DescribeHolder(const HolderRecord& rec) {
  if (rec.pid == 0) return "another holdfastd (just starting)";
  std::string who = "another holdfastd (pid " + std::to_string(rec.pid);
  if (!rec.host.empty()) who += " on " + rec.host;
  if (!rec.started.empty()) who += ", started " + rec.started;
  return who + ")";
}

}  // namespace

std::string RunLock::LockPath(const std::string& run_dir, int node_id) {
  return run_dir + (node_id == 0 ? "/holdfastd.lock" : "/holdfastd-node" + std::to_string(node_id) + ".lock");
}

Result<std::unique_ptr<RunLock>> RunLock::Acquire(const std::string& run_dir, bool wait, int node_id) {
  const std::string path = LockPath(run_dir, node_id);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("holdfastd cannot open the run lock '" + path + "'", errno);
  struct flock fl = WholeFile(F_WRLCK);
  int rc;
  do {
    rc = ::fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl);
  } while (rc < 0 && errno == EINTR);
  if (rc < 0) {
    const int err = errno;
    if (err == EAGAIN || err == EACCES) {
      const HolderRecord holder = ReadRecord(fd);
      ::close(fd);
      return FailedPreconditionError(DescribeHolder(holder) + " is supervising " + run_dir +
                                     "; stop it first (runctl stop), or use another --run-dir");
    }
    ::close(fd);
    if (err == ENOLCK || err == ENOSYS || err == EOPNOTSUPP || err == EINVAL) {
      return UnavailableError("holdfastd cannot lock '" + path + "': " + std::strerror(err) +
                              " — the run directory's file system does not support locks (Lustre: mount with "
                              "-o flock); use a --run-dir on a file system that does");
    }
    return ErrnoError("holdfastd cannot lock '" + path + "'", err);
  }
  const Status written = WriteRecord(fd, path);
  if (!written.ok()) {
    ::close(fd);
    return written;
  }
  return std::unique_ptr<RunLock>(new RunLock(fd, path));
}

Result<std::unique_ptr<RunLock>> RunLock::AcquireWithin(const std::string& run_dir, std::chrono::milliseconds timeout,
                                                        int node_id) {
  // Real time: this waits for another process (the time source's real clock, not an injected one).
  const TimeSource* real = RealTimeSource::Get();
  const int64_t start_ns = real->MonotonicNs();
  for (;;) {
    auto lock = Acquire(run_dir, /*wait=*/false, node_id);
    if (lock.ok() || lock.status().code() != StatusCode::kFailedPrecondition) return lock;
    const auto waited = std::chrono::nanoseconds(real->MonotonicNs() - start_ns);
    if (waited >= timeout) {
      const auto s = std::chrono::duration_cast<std::chrono::seconds>(waited).count();
      return FailedPreconditionError(lock.status().message() + " (waited " + std::to_string(s) + " s for it to exit)");
    }
    // A lock has no "wait with a timeout": poll (a holder on its way out goes within seconds).
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(std::chrono::milliseconds(100),
                                                                              timeout - waited));
  }
}

std::optional<pid_t> RunLock::Holder(const std::string& run_dir, int node_id) {
  const int fd = ::open(LockPath(run_dir, node_id).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;  // never locked
  // Asks whether a write lock could be placed, without placing it.
  struct flock fl = WholeFile(F_WRLCK);
  const int rc = ::fcntl(fd, F_OFD_GETLK, &fl);
  std::optional<pid_t> holder;
  if (rc == 0 && fl.l_type != F_UNLCK) holder = ReadRecord(fd).pid;
  ::close(fd);
  return holder;
}

RunLock::~RunLock() { ::close(fd_); }

}  // namespace holdfast
