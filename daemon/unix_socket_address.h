// UnixSocketAddress: the address bind(2) and connect(2) take for a Unix
// socket file at any path, however long. A sockaddr_un holds at most 107
// bytes of path, and run directories on Lustre or GPFS are routinely longer.
// A path that fits is used as it is. A longer one is reached through its
// directory: the address opens the directory (O_PATH, so it needs only the
// search permission the full path would need) and names the socket
// /proc/self/fd/<fd>/<name>, which the kernel resolves to the same file in
// the same directory. The socket therefore always lives where its path says,
// with that directory's permissions; no other location is ever used (see
// docs/control-protocol.md, "Where the socket lives").
//
// The daemon's ControlServer binds through it and every client — runctl,
// CallDaemon, the tests' stand-in daemons — connects through it: this is the
// only place a control socket path becomes a sockaddr.
//
// Ownership: the address owns the directory descriptor (when it opened one)
// and closes it on destruction; it must stay alive until bind or connect has
// returned. Thread-safety: an address is used by one thread; For() may be
// called from any thread at once.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>

#include <string>

#include "common/status.h"

namespace holdfast {

class UnixSocketAddress {
 public:
  // The address of the socket file at `path` (relative paths are resolved
  // against the working directory, as bind would). Errors: kInvalidArgument
  // for an empty path or a file name (the part after the last '/') that
  // alone does not fit sun_path; the ErrnoError of opening the directory of a
  // long path (kNotFound when it does not exist).
  static Result<UnixSocketAddress> For(const std::string& path);

  UnixSocketAddress(UnixSocketAddress&& other) noexcept;
  UnixSocketAddress& operator=(UnixSocketAddress&& other) noexcept;
  UnixSocketAddress(const UnixSocketAddress&) = delete;
  UnixSocketAddress& operator=(const UnixSocketAddress&) = delete;
  ~UnixSocketAddress();

  const sockaddr* addr() const { return reinterpret_cast<const sockaddr*>(&addr_); }
  socklen_t size() const { return sizeof(addr_); }
  // The path as given, for messages.
  const std::string& path() const { return path_; }
  // What bind and connect see: path() itself, or /proc/self/fd/N/NAME.
  std::string sun_path() const { return addr_.sun_path; }
  // Whether the path was too long and is reached through its directory.
  bool via_directory() const { return dir_fd_ >= 0; }

 private:
  UnixSocketAddress() = default;

  sockaddr_un addr_{};
  std::string path_;
  int dir_fd_ = -1;  // owned; -1 when path_ fits sun_path
};

}  // namespace holdfast
