#include "daemon/run_dir.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "daemon/unix_socket_address.h"
#include "lineage/lineage_path.h"

namespace holdfast {

namespace {

Status Refuse(const std::string& run_dir, const std::string& why, const std::string& what_to_do) {
  return InvalidArgumentError("run dir " + run_dir + " cannot be used: " + why + "; " + what_to_do);
}

// Why a directory could not be created or written in, from the errno.
Status RefuseFor(const std::string& run_dir, const std::string& doing, int err) {
  const std::string e = std::strerror(err);
  switch (err) {
    case ENOTDIR:
      return Refuse(run_dir, "a component of its path is a file, not a directory (" + e + ")",
                    "choose a path whose parents are directories");
    case ENAMETOOLONG:
      return Refuse(run_dir, "a name in its path is longer than the filesystem allows (" + e +
                                 "; usually 255 bytes a component, 4096 the whole path)",
                    "use shorter names");
    case EROFS:
      return Refuse(run_dir, "it is on a read-only filesystem (" + doing + ": " + e + ")",
                    "choose a directory on a writable filesystem");
    case EACCES:
    case EPERM:
      return Refuse(run_dir, doing + ": " + e + " (uid " + std::to_string(getuid()) + ")",
                    "choose a directory this user may write, or have its owner create it writable for this user");
    case ENOSPC:
    case EDQUOT:
      return Refuse(run_dir, doing + ": " + e, "free space (or quota) there, or choose another filesystem");
    default: return Refuse(run_dir, doing + ": " + e, "check the path and the filesystem it is on");
  }
}

// Binds a Unix socket at `path` as the control socket will be bound; the
// socket file is removed again.
Status ProbeSocket(const std::string& run_dir, const std::string& path) {
  Result<UnixSocketAddress> addr = UnixSocketAddress::For(path);
  if (!addr.ok()) return Refuse(run_dir, "cannot address a socket in it: " + addr.status().message(), "check the path");
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError("socket(AF_UNIX)", errno);
  const int rc = ::bind(fd, addr->addr(), addr->size());
  const int err = errno;
  ::close(fd);
  if (rc == 0) {
    ::unlink(path.c_str());
    return Status::Ok();
  }
  if (addr->via_directory() && err == ENOENT) {
    return Refuse(run_dir,
                  "its path is longer than a Unix socket address holds (" + std::to_string(sizeof(sockaddr_un::sun_path) - 1) +
                      " bytes), and the control socket is then reached through /proc/self/fd, but /proc is not mounted",
                  "mount /proc, or use a run dir of at most " +
                      std::to_string(sizeof(sockaddr_un::sun_path) - 1 - std::strlen("/holdfastd.sock")) + " bytes");
  }
  if (err == EPERM || err == EOPNOTSUPP || err == EINVAL || err == EACCES) {
    return Refuse(run_dir,
                  "its filesystem cannot hold a Unix socket (bind " + path + ": " + std::strerror(err) +
                      "); holdfastd's control socket, which runctl talks to, lives in the run dir",
                  "choose a run dir on a filesystem that holds sockets (local disk, NFS and Lustre do; some FUSE, "
                  "vfat and SMB mounts do not)");
  }
  return RefuseFor(run_dir, "bind a Unix socket in it", err);
}

// Creates, writes and removes a file in the run dir, then binds a socket
// there; the probes' names are as long as "holdfastd.sock".
Status ProbeRunDir(const std::string& run_dir) {
  std::string probe = run_dir + "/.hfprob.XXXXXX";
  std::vector<char> name(probe.begin(), probe.end());
  name.push_back('\0');
  const int fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd < 0) return RefuseFor(run_dir, "create a file in it", errno);
  probe = name.data();
  static constexpr char kText[] = "holdfastd probe\n";
  const ssize_t n = ::write(fd, kText, sizeof(kText) - 1);
  const int write_err = errno;
  const int close_rc = ::close(fd);
  const int close_err = errno;
  Status s;
  if (n != static_cast<ssize_t>(sizeof(kText) - 1)) {
    s = RefuseFor(run_dir, "write a file in it", n < 0 ? write_err : ENOSPC);
  } else if (close_rc != 0) {
    s = RefuseFor(run_dir, "write a file in it", close_err);
  } else {
    // The socket probe shares the file's unique suffix: no other daemon's probe can have its name.
    s = ProbeSocket(run_dir, run_dir + "/.hfsock." + probe.substr(probe.size() - 6));
  }
  if (::unlink(probe.c_str()) != 0 && s.ok()) s = RefuseFor(run_dir, "remove a file in it", errno);
  return s;
}

// SQLite opens lineage.db by its absolute path, symlinks resolved: refused
// when that is longer than it can open.
Status CheckLineagePath(const std::string& run_dir, const std::filesystem::path& dir) {
  const size_t db_bytes = (dir / "lineage.db").string().size();
  const size_t max_db = MaxLineageDbPathBytes();
  if (db_bytes <= max_db) return Status::Ok();
  return Refuse(run_dir,
                "its lineage database's path would be " + std::to_string(db_bytes) + " bytes, and SQLite opens at most " +
                    std::to_string(max_db),
                "use a run dir of at most " + std::to_string(max_db - std::strlen("/lineage.db")) +
                    " bytes (absolute, symlinks resolved)");
}

}  // namespace

Status PrepareRunDir(const std::string& run_dir) {
  namespace fs = std::filesystem;
  if (run_dir.empty()) return InvalidArgumentError("--run-dir is empty: give the run's directory");
  std::error_code ec;
  const fs::file_status st = fs::status(run_dir, ec);
  if (fs::exists(st) && !fs::is_directory(st)) {
    return Refuse(run_dir, "it exists and is not a directory", "remove it, or choose another path");
  }
  const fs::path abs = fs::absolute(run_dir, ec);
  if (!ec) HF_RETURN_IF_ERROR(CheckLineagePath(run_dir, abs.lexically_normal()));  // before creating anything
  if (!fs::exists(st)) {
    fs::create_directories(run_dir, ec);
    if (ec) return RefuseFor(run_dir, "create it", ec.value());
  }
  const fs::path canonical = fs::canonical(run_dir, ec);
  if (!ec) HF_RETURN_IF_ERROR(CheckLineagePath(run_dir, canonical));
  return ProbeRunDir(run_dir);
}

std::string JobCopyPath(const std::string& run_dir, const std::string& run_id) {
  return run_dir + "/job-" + run_id + ".toml";
}

}  // namespace holdfast
