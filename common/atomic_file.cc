#include "common/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace holdfast {

Status WriteFileAtomically(const std::string& path, const std::string& text, mode_t mode, bool durable) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoError("create " + tmp, errno);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      unlink(tmp.c_str());
      return ErrnoError("write " + tmp, err);
    }
    done += static_cast<size_t>(n);
  }
  if (durable && fsync(fd) != 0) {
    const int err = errno;
    close(fd);
    unlink(tmp.c_str());
    return ErrnoError("fsync " + tmp, err);
  }
  if (close(fd) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return ErrnoError("close " + tmp, err);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return ErrnoError("rename " + tmp + " to " + path, err);
  }
  if (durable) {
    // The rename itself, durable: fsync the directory (best effort; some file systems refuse it).
    const size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    const int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      (void)fsync(dfd);
      close(dfd);
    }
  }
  return Status::Ok();
}

}  // namespace holdfast
