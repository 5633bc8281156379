// UnixSocketAddress with real sockets: a path that fits is used as it is; a
// 200+ character one (spaces, non-ASCII) is bound and connected through its
// directory, and the socket file is where its path says.
#include "daemon/unix_socket_address.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace holdfast {
namespace {

class UnixSocketAddressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/hf-sockaddr-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  std::filesystem::path root_;
};

TEST_F(UnixSocketAddressTest, APathThatFitsIsUsedAsItIs) {
  const std::string path = (root_ / "holdfastd.sock").string();
  Result<UnixSocketAddress> a = UnixSocketAddress::For(path);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->sun_path(), path);
  EXPECT_FALSE(a->via_directory());
  EXPECT_EQ(a->path(), path);
}

TEST_F(UnixSocketAddressTest, ALongPathBindsAndConnectsThroughItsDirectory) {
  const std::filesystem::path dir = root_ / "hf long" / "ünïcode dir with spaces" / std::string(180, 'r') / "run";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "holdfastd.sock").string();
  ASSERT_GT(path.size(), 200u);

  Result<UnixSocketAddress> bind_at = UnixSocketAddress::For(path);
  ASSERT_TRUE(bind_at.ok()) << bind_at.status().ToString();
  EXPECT_TRUE(bind_at->via_directory());
  EXPECT_EQ(bind_at->sun_path().rfind("/proc/self/fd/", 0), 0u) << bind_at->sun_path();
  const int server = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(server, 0);
  ASSERT_EQ(::bind(server, bind_at->addr(), bind_at->size()), 0) << std::strerror(errno);
  ASSERT_EQ(::listen(server, 1), 0);

  // The socket is a file at the full path, in the run dir itself.
  struct stat st {};
  ASSERT_EQ(::lstat(path.c_str(), &st), 0) << path;
  EXPECT_TRUE(S_ISSOCK(st.st_mode));

  // A client that knows only the path reaches it (its own address, its own fd).
  Result<UnixSocketAddress> connect_to = UnixSocketAddress::For(path);
  ASSERT_TRUE(connect_to.ok());
  const int client = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_EQ(::connect(client, connect_to->addr(), connect_to->size()), 0) << std::strerror(errno);
  const int accepted = ::accept(server, nullptr, nullptr);
  ASSERT_GE(accepted, 0);
  ASSERT_EQ(::send(client, "hi", 2, MSG_NOSIGNAL), 2);
  char buf[2];
  ASSERT_EQ(::recv(accepted, buf, 2, MSG_WAITALL), 2);
  EXPECT_EQ(std::string(buf, 2), "hi");
  ::close(accepted);
  ::close(client);
  ::close(server);
}

TEST_F(UnixSocketAddressTest, ALongRelativePathIsResolvedFromTheWorkingDirectory) {
  const std::string rel = std::string(150, 'q');
  std::filesystem::create_directories(root_ / rel);
  const std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path(root_);
  Result<UnixSocketAddress> a = UnixSocketAddress::For(rel + "/holdfastd.sock");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_EQ(::bind(fd, a->addr(), a->size()), 0) << std::strerror(errno);
  ::close(fd);
  std::filesystem::current_path(cwd);
  EXPECT_TRUE(std::filesystem::is_socket(root_ / rel / "holdfastd.sock"));
}

TEST_F(UnixSocketAddressTest, ALongPathWhoseDirectoryIsMissingIsNotFound) {
  const std::string path = (root_ / std::string(150, 'm') / "holdfastd.sock").string();
  Result<UnixSocketAddress> a = UnixSocketAddress::For(path);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kNotFound);
  EXPECT_NE(a.status().message().find(std::string(150, 'm')), std::string::npos) << a.status().ToString();
}

TEST_F(UnixSocketAddressTest, AnEmptyPathIsRefused) {
  Result<UnixSocketAddress> a = UnixSocketAddress::For("");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace holdfast
