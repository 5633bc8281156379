// CallDaemon (daemon/control_protocol.h): runctl's side of the control
// socket against a one-connection server on a thread — answers, errors, a
// missing or stale socket, a server that hangs up or stays silent.
#include "daemon/control_protocol.h"
#include "daemon/unix_socket_address.h"

#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace holdfast {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;

ControlRequest Req(uint64_t id, std::string op, std::string args = "{}") {
  ControlRequest r;
  r.id = id;
  r.op = std::move(op);
  r.args_json = std::move(args);
  return r;
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/hfctl-XXXXXX";
    HF_CHECK(mkdtemp(tmpl) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

int Listen(const std::string& path, bool listen_too = true) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  HF_CHECK(fd >= 0);
  Result<UnixSocketAddress> addr = UnixSocketAddress::For(path);
  HF_CHECK(addr.ok());
  HF_CHECK(bind(fd, addr->addr(), addr->size()) == 0);
  if (listen_too) HF_CHECK(listen(fd, 4) == 0);
  return fd;
}

std::string ReadLine(int fd) {
  std::string line;
  char c;
  while (recv(fd, &c, 1, 0) == 1) {
    line += c;
    if (c == '\n') break;
  }
  return line;
}

void SendAll(int fd, const std::string& s) {
  HF_CHECK(send(fd, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size()));
}

// Accepts one connection and hands it to `handler`, which owns nothing.
class OneShotServer {
 public:
  OneShotServer(const std::string& path, std::function<void(int)> handler)
      : listen_fd_(Listen(path)), thread_([this, handler] {
          int fd = accept(listen_fd_, nullptr, nullptr);
          HF_CHECK(fd >= 0);
          handler(fd);
          close(fd);
        }) {}
  ~OneShotServer() {
    thread_.join();
    close(listen_fd_);
  }

 private:
  int listen_fd_;
  std::thread thread_;
};

TEST(CallDaemonTest, PingRoundTripOverARealSocket) {
  TempDir dir;
  std::string path = ControlSocketPath(dir.path());
  std::string seen_op;
  uid_t seen_uid = 12345;
  {
    OneShotServer server(path, [&](int fd) {
      Result<PeerCredentials> cred = ReadPeerCredentials(fd);
      HF_CHECK(cred.ok());
      seen_uid = cred->uid;
      Result<ControlRequest> req = ParseControlRequest(ReadLine(fd));
      HF_CHECK(req.ok());
      seen_op = req->op;
      SendAll(fd, EncodeOkResponse(req->id, R"({"pong":true})"));
    });
    Result<ControlResponse> r = CallDaemon(path, Req(11, "ping"), milliseconds(10000));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->ok);
    EXPECT_EQ(r->id, 11u);
    EXPECT_EQ(json::parse(r->result_json)["pong"], true);
  }
  EXPECT_EQ(seen_op, "ping");
  EXPECT_EQ(seen_uid, getuid());
}

TEST(CallDaemonTest, DaemonErrorIsAResponseNotAFailure) {
  TempDir dir;
  std::string path = ControlSocketPath(dir.path());
  OneShotServer server(path, [&](int fd) {
    ReadLine(fd);
    SendAll(fd, EncodeErrorResponse(0, ControlErrorCode::kPermissionDenied, "uid 7 may not act"));
  });
  Result<ControlResponse> r = CallDaemon(path, Req(3, "stop"), milliseconds(10000));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->error_code, "PermissionDenied");
  EXPECT_EQ(r->error.message(), "uid 7 may not act");
}

TEST(CallDaemonTest, MissingSocketIsUnavailable) {
  TempDir dir;
  std::string path = ControlSocketPath(dir.path());
  Result<ControlResponse> r = CallDaemon(path, Req(1, "status"), milliseconds(1000));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("no daemon is listening on " + path), std::string::npos)
      << r.status().message();
}

TEST(CallDaemonTest, StaleSocketThatRefusesIsUnavailable) {
  TempDir dir;
  std::string path = ControlSocketPath(dir.path());
  int fd = Listen(path, /*listen_too=*/false);  // bound, never listening: connect is refused
  Result<ControlResponse> r = CallDaemon(path, Req(1, "status"), milliseconds(1000));
  close(fd);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("no daemon is listening on"), std::string::npos)
      << r.status().message();
}

TEST(CallDaemonTest, ServerClosingMidLineIsUnavailable) {
  TempDir dir;
  std::string path = ControlSocketPath(dir.path());
  OneShotServer server(path, [&](int fd) {
    ReadLine(fd);
    SendAll(fd, R"({"v":1,"id":1,"ok":tr)");
  });
  Result<ControlResponse> r = CallDaemon(path, Req(1, "status"), milliseconds(10000));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("in the middle of its reply"), std::string::npos)
      << r.status().message();
}

TEST(CallDaemonTest, ServerClosingWithoutAnswerIsUnavailable) {
  TempDir dir;
  std::string path = ControlSocketPath(dir.path());
  OneShotServer server(path, [&](int fd) { ReadLine(fd); });
  Result<ControlResponse> r = CallDaemon(path, Req(1, "status"), milliseconds(10000));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("without answering"), std::string::npos);
}

TEST(CallDaemonTest, SilentServerTimesOut) {
  TempDir dir;
  std::string path = ControlSocketPath(dir.path());
  // The server reads the request, then waits for the client to give up.
  OneShotServer server(path, [&](int fd) {
    ReadLine(fd);
    char c;
    while (recv(fd, &c, 1, 0) > 0) {
    }
  });
  Result<ControlResponse> r = CallDaemon(path, Req(1, "status"), milliseconds(50));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kTimeout);
  EXPECT_NE(r.status().message().find("did not answer 'status'"), std::string::npos);
}

TEST(CallDaemonTest, ReplyForAnotherRequestIsRejected) {
  TempDir dir;
  std::string path = ControlSocketPath(dir.path());
  OneShotServer server(path, [&](int fd) {
    ReadLine(fd);
    SendAll(fd, EncodeOkResponse(99, "{}"));
  });
  Result<ControlResponse> r = CallDaemon(path, Req(1, "ping"), milliseconds(10000));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("carries id 99, expected 1"), std::string::npos);
}

// Run dirs on Lustre or GPFS are longer than sun_path's 107 bytes: the same
// exchange works through the directory (daemon/unix_socket_address.h).
TEST(CallDaemonTest, PingRoundTripInA200CharacterRunDir) {
  TempDir dir;
  const std::string run_dir = dir.path() + "/long dir with spaces ünïcode " + std::string(160, 'x');
  ASSERT_GT(run_dir.size(), 200u);
  ASSERT_EQ(system(("mkdir -p '" + run_dir + "'").c_str()), 0);
  const std::string path = ControlSocketPath(run_dir);
  {
    OneShotServer server(path, [&](int fd) {
      Result<ControlRequest> req = ParseControlRequest(ReadLine(fd));
      HF_CHECK(req.ok());
      SendAll(fd, EncodeOkResponse(req->id, R"({"pong":true})"));
    });
    Result<ControlResponse> r = CallDaemon(path, Req(5, "ping"), milliseconds(10000));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->ok);
    EXPECT_EQ(json::parse(r->result_json)["pong"], true);
  }
}

TEST(CallDaemonTest, LongPathWithNoDirectoryIsNoDaemon) {
  const std::string path = "/tmp/" + std::string(200, 'd') + "/holdfastd.sock";
  Result<ControlResponse> r = CallDaemon(path, Req(1, "ping"), milliseconds(100));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("no daemon is listening on " + path), std::string::npos) << r.status().ToString();
}

}  // namespace
}  // namespace holdfast
