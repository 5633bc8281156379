#include "daemon/unix_socket_address.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

namespace holdfast {

Result<UnixSocketAddress> UnixSocketAddress::For(const std::string& path) {
  if (path.empty()) return InvalidArgumentError("empty Unix socket path");
  UnixSocketAddress a;
  a.path_ = path;
  a.addr_.sun_family = AF_UNIX;
  constexpr size_t kRoom = sizeof(a.addr_.sun_path) - 1;  // the terminating NUL
  if (path.size() <= kRoom) {
    std::memcpy(a.addr_.sun_path, path.data(), path.size());
    return a;
  }
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  int fd;
  do {
    fd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return ErrnoError("open " + dir + " (the directory of socket " + name + ")", errno);
  a.dir_fd_ = fd;
  const int n = std::snprintf(a.addr_.sun_path, sizeof(a.addr_.sun_path), "/proc/self/fd/%d/%s", fd, name.c_str());
  if (n < 0 || static_cast<size_t>(n) > kRoom) {
    return InvalidArgumentError("Unix socket file name " + name + " is too long (" + std::to_string(name.size()) +
                                " bytes) to reach through its directory");
  }
  return a;
}

UnixSocketAddress::UnixSocketAddress(UnixSocketAddress&& other) noexcept
    : addr_(other.addr_), path_(std::move(other.path_)), dir_fd_(std::exchange(other.dir_fd_, -1)) {}

UnixSocketAddress& UnixSocketAddress::operator=(UnixSocketAddress&& other) noexcept {
  if (this != &other) {
    if (dir_fd_ >= 0) ::close(dir_fd_);
    addr_ = other.addr_;
    path_ = std::move(other.path_);
    dir_fd_ = std::exchange(other.dir_fd_, -1);
  }
  return *this;
}

UnixSocketAddress::~UnixSocketAddress() {
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

}  // namespace holdfast
