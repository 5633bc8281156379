#include "health/host.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace holdfast::health {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string Gb(double bytes) { return FormatNumber(bytes / kGiB) + " GB"; }

// The vector rank `rank` contributes; any value pattern works as long as both
// processes and the check agree on it.
uint64_t Value(int rank, uint64_t i) { return (i * 0x9E3779B97F4A7C15ULL) ^ ((rank + 1) * 0xD1B54A32D192ED03ULL); }

uint64_t Checksum(const uint64_t* a, const uint64_t* b, uint64_t n) {
  uint64_t sum = 0;
  for (uint64_t i = 0; i < n; ++i) sum += (a[i] + b[i]) * (i + 1);
  return sum;
}

using Clock = std::chrono::steady_clock;

// Moves `len` bytes through a non-blocking fd, waiting with poll until `deadline`.
Status Transfer(int fd, char* buf, size_t len, bool sending, Clock::time_point deadline) {
  size_t done = 0;
  while (done < len) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return TimeoutError("peer process did not exchange data in time");
    pollfd p{fd, static_cast<short>(sending ? POLLOUT : POLLIN), 0};
    int rc = poll(&p, 1, static_cast<int>(left));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return ErrnoError("poll", errno);
    if (rc == 0) continue;
    ssize_t n = sending ? send(fd, buf + done, len - done, MSG_NOSIGNAL) : recv(fd, buf + done, len - done, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n < 0) return ErrnoError(sending ? "send to peer" : "receive from peer", errno);
    if (n == 0) return UnavailableError("peer process exited before the exchange finished");
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

// The child: blocking I/O, no allocation, _exit. Returns its exit code.
int ChildMain(int fd, uint64_t* mine, uint64_t* theirs, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) mine[i] = Value(1, i);
  std::memset(theirs, 0, n * 8);  // only what arrives may count
  auto io = [fd](char* buf, size_t len, bool sending) {
    size_t done = 0;
    while (done < len) {
      ssize_t k = sending ? send(fd, buf + done, len - done, MSG_NOSIGNAL) : recv(fd, buf + done, len - done, 0);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) return false;
      done += static_cast<size_t>(k);
    }
    return true;
  };
  if (!io(reinterpret_cast<char*>(theirs), n * 8, false)) return 2;
  if (!io(reinterpret_cast<char*>(mine), n * 8, true)) return 3;
  uint64_t sum = Checksum(theirs, mine, n);
  if (!io(reinterpret_cast<char*>(&sum), 8, true)) return 4;
  return 0;
}

std::string DevicePath(const std::string& path, const HostPaths& paths) {
  if (path.rfind("/dev/", 0) == 0) return paths.dev_root + path.substr(4);
  return path;
}

// /proc/self/mounts escapes space, tab, newline and backslash as \ooo.
std::string DecodeMountField(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      const std::string oct = s.substr(i + 1, 3);
      if (oct.size() == 3 && oct.find_first_not_of("01234567") == std::string::npos) {
        out += static_cast<char>(std::stoi(oct, nullptr, 8));
        i += 3;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

Result<FsSpace> RealDiskProbe::Space(const std::string& dir) {
  struct statvfs st;
  if (statvfs(dir.c_str(), &st) != 0) return ErrnoError("statvfs " + dir, errno);
  FsSpace s;
  s.total_bytes = static_cast<uint64_t>(st.f_blocks) * st.f_frsize;
  s.available_bytes = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  return s;
}

std::chrono::nanoseconds RealDiskProbe::Now() { return Clock::now().time_since_epoch(); }

CheckResult CheckFreeMemory(const std::string& meminfo, const HealthConfig& config) {
  std::ifstream in(meminfo);
  if (!in) return Skipped("host.memory", "", "cannot read " + meminfo + ": " + std::strerror(errno));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream ls(line.substr(13));
    double kb = 0;
    ls >> kb;
    const double bytes = kb * 1024.0;
    const std::string threshold = ">= " + FormatNumber(config.min_free_memory_gb) + " GB";
    Evidence ev{Gb(bytes) + " available", threshold, meminfo + " MemAvailable"};
    if (bytes < config.min_free_memory_gb * kGiB) {
      return Fail("host.memory", "", "only " + Gb(bytes) + " of memory available: leftover processes from an " +
                                         "earlier job, or a memory leak",
                  ev, Action::kExcludeNode);
    }
    return Pass("host.memory", "", Gb(bytes) + " available", ev);
  }
  return Skipped("host.memory", "", meminfo + " has no MemAvailable line (kernel older than 3.14?)");
}

CheckResult CheckCheckpointSpace(const HealthConfig& config, DiskProbe* probe) {
  const std::string& dir = config.checkpoint_dir;
  if (dir.empty()) return Skipped("host.checkpoint_space", "", "no checkpoint directory configured");
  auto space = probe->Space(dir);
  if (!space.ok()) {
    return Fail("host.checkpoint_space", dir,
                "checkpoint directory unusable: " + space.status().message(),
                {"unreadable", "a directory", "statvfs"}, Action::kExcludeNode);
  }
  const double avail = static_cast<double>(space->available_bytes);
  const std::string threshold = ">= " + FormatNumber(config.checkpoint_min_free_gb) + " GB free";
  Evidence ev{Gb(avail) + " free of " + Gb(static_cast<double>(space->total_bytes)), threshold, "statvfs " + dir};
  if (avail < config.checkpoint_min_free_gb * kGiB) {
    return Fail("host.checkpoint_space", dir,
                "checkpoint disk nearly full (" + Gb(avail) + " free): the next checkpoint will fail; " +
                    "delete old checkpoints or grow the volume",
                ev, Action::kExcludeNode);
  }
  return Pass("host.checkpoint_space", dir, Gb(avail) + " free", ev);
}

CheckResult CheckCheckpointWrite(const HealthConfig& config, DiskProbe* probe) {
  const std::string& dir = config.checkpoint_dir;
  if (dir.empty()) return Skipped("host.checkpoint_write", "", "no checkpoint directory configured");
  if (config.checkpoint_write_mb <= 0) {
    return Skipped("host.checkpoint_write", dir, "write test turned off (health.checkpoint_write_mb = 0)");
  }
  const std::string path = dir + "/.holdfast-health-write." + std::to_string(getpid());
  const size_t chunk = 1 << 20;
  // Not zeros: some filesystems compress or skip them.
  std::string buf(chunk, '\0');
  for (size_t i = 0; i < chunk; ++i) buf[i] = static_cast<char>(Value(0, i) >> 56);
  const std::chrono::nanoseconds start = probe->Now();
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  Status st;
  if (fd < 0) {
    st = ErrnoError("create " + path, errno);
  } else {
    for (int64_t i = 0; i < config.checkpoint_write_mb && st.ok(); ++i) {
      size_t done = 0;
      while (done < chunk) {
        ssize_t n = write(fd, buf.data() + done, chunk - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
          st = ErrnoError("write " + path, errno);
          break;
        }
        done += static_cast<size_t>(n);
      }
    }
    if (st.ok() && fsync(fd) != 0) st = ErrnoError("fsync " + path, errno);
    close(fd);
  }
  const std::chrono::nanoseconds end = probe->Now();
  unlink(path.c_str());
  const std::string threshold = ">= " + FormatNumber(config.checkpoint_write_warn_mbps) + " MB/s (fail < " +
                                FormatNumber(config.checkpoint_write_fail_mbps) + ")";
  if (!st.ok()) {
    const bool full = st.code() == StatusCode::kResourceExhausted;
    return Fail("host.checkpoint_write", dir,
                (full ? "checkpoint disk is full: " : "cannot write to the checkpoint directory: ") + st.message(),
                {"write failed", threshold, "write+fsync " + std::to_string(config.checkpoint_write_mb) + " MB"},
                Action::kExcludeNode);
  }
  const double seconds = std::max(1e-9, std::chrono::duration<double>(end - start).count());
  const double mbps = static_cast<double>(config.checkpoint_write_mb) / seconds;
  Evidence ev{FormatNumber(mbps) + " MB/s", threshold,
              "write+fsync " + std::to_string(config.checkpoint_write_mb) + " MB in " + FormatNumber(seconds) + " s"};
  if (mbps < config.checkpoint_write_fail_mbps) {
    return Fail("host.checkpoint_write", dir,
                "checkpoint disk writes at " + FormatNumber(mbps) + " MB/s: checkpoints will stall training; " +
                    "check the filesystem's health and load",
                ev, Action::kExcludeNode);
  }
  if (mbps < config.checkpoint_write_warn_mbps) {
    return Warn("host.checkpoint_write", dir,
                "checkpoint disk slow (" + FormatNumber(mbps) + " MB/s): saves will take longer", ev);
  }
  return Pass("host.checkpoint_write", dir, FormatNumber(mbps) + " MB/s", ev);
}

CheckResult CheckCpuAllreduce(const HealthConfig& config) {
  const uint64_t n = static_cast<uint64_t>(config.cpu_allreduce_elements);
  const std::string source = "2 local processes, socketpair, " + std::to_string(n) + " uint64";
  // Everything the child touches is allocated here, before fork.
  std::vector<uint64_t> mine(n), theirs(n);
  for (uint64_t i = 0; i < n; ++i) mine[i] = Value(0, i);
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return Fail("host.cpu_allreduce", "", ErrnoError("socketpair", errno).message(), {"-", "-", source},
                Action::kExcludeNode);
  }
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(fds[0]);
    close(fds[1]);
    return Fail("host.cpu_allreduce", "", "cannot start a process: " + ErrnoError("fork", err).message(),
                {"fork failed", "fork succeeds", source}, Action::kExcludeNode);
  }
  if (pid == 0) {
    close(fds[0]);
    // The child's private (copy-on-write) pages: `theirs` becomes its own
    // vector, `mine` the buffer for what it receives.
    _exit(ChildMain(fds[1], theirs.data(), mine.data(), n));
  }
  close(fds[1]);
  const int fd = fds[0];
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(config.cpu_allreduce_timeout_s));
  uint64_t child_sum = 0;
  Status st = Transfer(fd, reinterpret_cast<char*>(mine.data()), n * 8, true, deadline);
  if (st.ok()) st = Transfer(fd, reinterpret_cast<char*>(theirs.data()), n * 8, false, deadline);
  if (st.ok()) st = Transfer(fd, reinterpret_cast<char*>(&child_sum), 8, false, deadline);
  close(fd);
  if (!st.ok()) kill(pid, SIGKILL);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  const std::string threshold = "both sums equal the expected value";
  if (!st.ok()) {
    return Fail("host.cpu_allreduce", "", "CPU allreduce between 2 local processes failed: " + st.message(),
                {st.ToString(), threshold, source}, Action::kExcludeNode);
  }
  // The expected value from first principles, not from either process's data.
  uint64_t expected = 0;
  for (uint64_t i = 0; i < n; ++i) expected += (Value(0, i) + Value(1, i)) * (i + 1);
  const uint64_t parent_sum = Checksum(mine.data(), theirs.data(), n);
  if (parent_sum != expected || child_sum != expected) {
    std::ostringstream m;
    m << std::hex << "parent 0x" << parent_sum << ", child 0x" << child_sum << ", expected 0x" << expected;
    return Fail("host.cpu_allreduce", "",
                "CPU allreduce produced a wrong sum: memory or CPU corruption; take the node out of service", 
                {m.str(), threshold, source}, Action::kDrainNode);
  }
  return Pass("host.cpu_allreduce", "", "2 processes agree on the sum", {"sums match", threshold, source});
}

CheckResult CheckRequiredDevices(const HealthConfig& config, const HostPaths& paths) {
  if (config.required_devices.empty()) return Skipped("host.devices", "", "no required devices configured");
  std::vector<std::string> missing;
  for (const std::string& d : config.required_devices) {
    struct stat st;
    if (stat(DevicePath(d, paths).c_str(), &st) != 0) missing.push_back(d);
  }
  const std::string threshold = "all of " + Join(config.required_devices);
  if (!missing.empty()) {
    return Fail("host.devices", "", "missing device(s) " + Join(missing) + ": driver not loaded or hardware gone",
                {"missing " + Join(missing), threshold, "stat under " + paths.dev_root}, Action::kDrainNode);
  }
  return Pass("host.devices", "", std::to_string(config.required_devices.size()) + " devices present",
              {"all present", threshold, "stat under " + paths.dev_root});
}

CheckResult CheckRequiredMounts(const HealthConfig& config, const HostPaths& paths) {
  if (config.required_mounts.empty()) return Skipped("host.mounts", "", "no required mounts configured");
  std::ifstream in(paths.mounts);
  if (!in) return Skipped("host.mounts", "", "cannot read " + paths.mounts + ": " + std::strerror(errno));
  std::vector<std::string> mounted;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string dev, dir;
    if (ls >> dev >> dir) mounted.push_back(DecodeMountField(dir));
  }
  std::vector<std::string> missing;
  for (const std::string& m : config.required_mounts) {
    std::string want = m;
    while (want.size() > 1 && want.back() == '/') want.pop_back();
    if (std::find(mounted.begin(), mounted.end(), want) == mounted.end()) missing.push_back(m);
  }
  const std::string threshold = "all of " + Join(config.required_mounts);
  if (!missing.empty()) {
    return Fail("host.mounts", "", "not mounted: " + Join(missing) + " (remount, or check the storage server)",
                {"missing " + Join(missing), threshold, paths.mounts}, Action::kDrainNode);
  }
  return Pass("host.mounts", "", std::to_string(config.required_mounts.size()) + " mounts present",
              {"all mounted", threshold, paths.mounts});
}

}  // namespace holdfast::health
