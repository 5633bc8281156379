// The control protocol over TCP, end to end: a real ControlServer (on its own
// loop thread) with the real ControlHandler, a real munged of the test's own,
// and the client runctl uses (CallRunDaemon). Who may do what is the same as
// on the Unix socket; a peer that proves nothing is refused, and the server
// goes on serving the others.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <future>
#include <optional>
#include <thread>

#include <boost/asio.hpp>
#include <gtest/gtest.h>

#include "common/atomic_file.h"
#include "daemon/control_handler.h"
#include "daemon/control_remote.h"
#include "daemon/control_server.h"
#include "tests/support/munged.h"

namespace holdfast {
namespace {

using testing::PrivateMunged;
using testing::TempDir;

class RecordingTarget : public ControlTarget {
 public:
  const std::string& run_id() const override { return id; }
  RunStatus BuildStatus() const override {
    RunStatus s;
    s.run_id = id;
    s.state = "running";
    return s;
  }
  bool RanksRunning() const override { return true; }
  int64_t RequestCheckpoint() override { return ++checkpoints; }
  void RequestStop(const std::string& why) override { stops.push_back(why); }

  std::string id = "20261202-7c9a";
  int checkpoints = 0;               // touched on the loop thread only
  std::vector<std::string> stops;    // touched on the loop thread only
};

class ControlTcpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(munged_.Start(), "");
    ::chmod(dir_.path().c_str(), 0755);  // as a run directory is: others may read the endpoint
    server_ = std::make_shared<ControlServer>(&io_, ControlSocketPath(dir_.path()),
                                              [this](const ControlRequest& r, uid_t uid) { return handler_.Handle(r, uid); });
  }
  void TearDown() override {
    if (loop_.joinable()) {
      boost::asio::post(io_, [this] { server_->Close(); });
      work_.reset();
      io_.stop();
      loop_.join();
    }
  }
  // Listens on TCP (and the Unix socket when `unix_too`), writes the endpoint, runs the loop.
  void Serve(bool unix_too) {
    if (unix_too) {
      ASSERT_TRUE(server_->Start().ok());
    }
    Result<uint16_t> port = server_->ListenTcp("127.0.0.1", 0, munged_.socket());
    ASSERT_TRUE(port.ok()) << port.status().ToString();
    endpoint_ = ControlEndpoint{"node-0", "127.0.0.1", *port, getpid(), target_.id, ""};
    ASSERT_TRUE(WriteFileAtomically(ControlEndpointPath(dir_.path()), EncodeControlEndpoint(endpoint_)).ok());
    loop_ = std::thread([this] { io_.run(); });
  }
  Result<ControlResponse> Call(const std::string& op, ControlVia via = ControlVia::kTcp) {
    ControlRequest req;
    req.id = ++id_;
    req.op = op;
    return CallRunDaemon(dir_.path(), req, std::chrono::seconds(10), via, munged_.socket());
  }
  // Sends `text` on a fresh TCP connection, returns its answer.
  std::string Raw(const std::string& text) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(endpoint_.port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    std::string out;
    char buf[4096];
    // Until the server closes or has answered one line (a good request keeps the connection open).
    for (ssize_t n; out.find('\n') == std::string::npos && (n = ::read(fd, buf, sizeof(buf))) > 0;) {
      out.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    return out;
  }
  // The run as the loop thread sees it.
  std::pair<int, size_t> Touched() {
    std::promise<std::pair<int, size_t>> p;
    boost::asio::post(io_, [&] { p.set_value({target_.checkpoints, target_.stops.size()}); });
    return p.get_future().get();
  }

  TempDir dir_{"control-tcp"};
  PrivateMunged munged_;
  RecordingTarget target_;
  ControlHandler handler_{&target_, getuid()};
  boost::asio::io_context io_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_{io_.get_executor()};
  std::shared_ptr<ControlServer> server_;
  std::thread loop_;
  ControlEndpoint endpoint_;
  uint64_t id_ = 0;
};

TEST_F(ControlTcpTest, TheOwnerLooksAndActsOverTcp) {
  Serve(/*unix_too=*/false);
  Result<ControlResponse> st = Call("status");
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  ASSERT_TRUE(st->ok) << st->error.ToString();
  EXPECT_EQ(ParseStatusResult(st->result_json)->run_id, target_.id);
  Result<ControlResponse> ck = Call("checkpoint");
  ASSERT_TRUE(ck.ok() && ck->ok);
  Result<ControlResponse> stop = Call("stop");
  ASSERT_TRUE(stop.ok() && stop->ok);
  EXPECT_EQ(Touched(), std::make_pair(1, size_t{1}));
}

// The same owner-or-root rule as the Unix socket: nobody's credential is
// good, nobody is not the owner.
TEST_F(ControlTcpTest, AnotherUserIsPermissionDeniedAndTheRunIsUntouched) {
  if (geteuid() != 0) GTEST_SKIP() << "acting as another user needs root (the CI runs as root)";
  Serve(/*unix_too=*/false);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    ::close(fds[0]);
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
    std::string said;
    for (const char* op : {"status", "stop", "checkpoint"}) {
      Result<ControlResponse> r = Call(op);
      said += std::string(op) + " " + (r.ok() ? r->error_code + " " + r->error.message() : r.status().ToString()) + "\n";
    }
    (void)!::write(fds[1], said.data(), said.size());
    _exit(0);
  }
  ::close(fds[1]);
  std::string said;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) said.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int ws = 0;
  ASSERT_EQ(waitpid(pid, &ws, 0), pid);
  for (const char* op : {"status", "stop", "checkpoint"}) {
    EXPECT_NE(said.find(std::string(op) + " PermissionDenied uid 65534 may not look at or act on this run"),
              std::string::npos)
        << said;
  }
  EXPECT_EQ(Touched(), std::make_pair(0, size_t{0}));
}

TEST_F(ControlTcpTest, APeerWithoutAGoodCredentialIsUnauthenticatedAndTheServerGoesOn) {
  Serve(/*unix_too=*/false);
  // A plain request, as on the Unix socket.
  std::string reply = Raw(R"({"v":1,"id":1,"op":"stop"})" "\n");
  EXPECT_NE(reply.find(R"("code":"Unauthenticated")"), std::string::npos) << reply;
  EXPECT_NE(reply.find("must start with a MUNGE credential"), std::string::npos) << reply;
  // A credential that is not one.
  reply = Raw(R"(MUNGE:bm90IGEgY3JlZGVudGlhbA==: {"v":1,"id":1,"op":"stop"})" "\n");
  EXPECT_NE(reply.find(R"("code":"Unauthenticated")"), std::string::npos) << reply;
  // Garbage.
  reply = Raw(std::string(200, '\x01') + "\n");
  EXPECT_NE(reply.find(R"("code":"Unauthenticated")"), std::string::npos) << reply;
  // A good line replayed: the first is answered, the copy refused.
  Result<std::string> line = AuthenticatedControlLine(munged_.socket(), endpoint_.Where(),
                                                      R"({"v":1,"id":9,"op":"checkpoint"})");
  ASSERT_TRUE(line.ok());
  EXPECT_NE(Raw(*line).find(R"("ok":true)"), std::string::npos);
  reply = Raw(*line);
  EXPECT_NE(reply.find(R"("code":"Unauthenticated")"), std::string::npos) << reply;
  EXPECT_NE(reply.find("Replayed"), std::string::npos) << reply;
  EXPECT_EQ(Touched(), std::make_pair(1, size_t{0})) << "only the authenticated checkpoint acted";
  // The server still answers a good client.
  Result<ControlResponse> st = Call("status");
  ASSERT_TRUE(st.ok() && st->ok) << (st.ok() ? st->error.ToString() : st.status().ToString());
}

// auto: the socket when it answers; TCP only when it cannot be reached from here.
TEST_F(ControlTcpTest, AutoGoesOverTcpWhenTheSocketCannotBeReached) {
  Serve(/*unix_too=*/false);  // no socket here: the leader is "on another node"
  Result<ControlResponse> unix_only = Call("status", ControlVia::kUnix);
  ASSERT_FALSE(unix_only.ok());
  EXPECT_EQ(unix_only.status().code(), StatusCode::kUnavailable);
  Result<ControlResponse> st = Call("status", ControlVia::kAuto);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_TRUE(st->ok);
}

TEST_F(ControlTcpTest, TcpOffOrGoneSaysWhereToRunRunctl) {
  Serve(/*unix_too=*/false);
  ControlEndpoint off{"n1", "10.77.0.11", 0, 4242, target_.id, "on n1, munged is not reachable (...)"};
  ASSERT_TRUE(WriteFileAtomically(ControlEndpointPath(dir_.path()), EncodeControlEndpoint(off)).ok());
  Result<ControlResponse> r = Call("status", ControlVia::kAuto);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("holdfastd (pid 4242 on n1) takes runctl on its own node only (TCP control is "
                                      "off: on n1, munged is not reachable (...)); run runctl on n1"),
            std::string::npos)
      << r.status().message();
  ::unlink(ControlEndpointPath(dir_.path()).c_str());
  r = Call("status", ControlVia::kTcp);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("control-endpoint.json does not exist"), std::string::npos)
      << r.status().message();
}

TEST_F(ControlTcpTest, WithoutMungedHereRunctlSaysSo) {
  Serve(/*unix_too=*/false);
  ControlRequest req;
  req.id = 1;
  req.op = "status";
  Result<ControlResponse> r =
      CallRunDaemon(dir_.path(), req, std::chrono::seconds(5), ControlVia::kTcp, "/nonexistent/munge.socket");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("cannot prove to holdfastd"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("start munged on this node"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace holdfast
