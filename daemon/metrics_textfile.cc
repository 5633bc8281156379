// WriteMetricsTextfile: shared by the prometheus-cpp build and the stub.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "daemon/metrics.h"

namespace holdfast {

Status WriteMetricsTextfile(const std::string& path, const std::string& text) {
  // Beside the target (same filesystem, so rename is atomic); node_exporter
  // reads only *.prom, so it never sees the temporary name.
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("metrics textfile: create " + tmp, errno);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      unlink(tmp.c_str());
      return ErrnoError("metrics textfile: write " + tmp, err);
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return ErrnoError("metrics textfile: close " + tmp, err);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return ErrnoError("metrics textfile: rename " + tmp + " to " + path, err);
  }
  return Status::Ok();
}

}  // namespace holdfast
