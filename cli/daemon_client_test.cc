// DaemonClient against a stand-in daemon on a real Unix socket: each typed
// call's request on the wire, and the three outcomes a caller tells apart —
// an answer, a refusal, no answer.
#include "cli/daemon_client.h"
#include "daemon/unix_socket_address.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

namespace holdfast {
namespace {

// Answers one connection on DIR/holdfastd.sock with answer(request line), then closes.
class OneShotDaemon {
 public:
  OneShotDaemon(const std::string& dir, std::function<std::string(const std::string&)> answer)
      : fd_(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    Result<UnixSocketAddress> addr = UnixSocketAddress::For(ControlSocketPath(dir));
    HF_CHECK(addr.ok());
    HF_CHECK(::bind(fd_, addr->addr(), addr->size()) == 0);
    HF_CHECK(::listen(fd_, 1) == 0);
    thread_ = std::thread([this, answer] {
      const int c = ::accept(fd_, nullptr, nullptr);
      HF_CHECK(c >= 0);
      char ch;
      while (::recv(c, &ch, 1, 0) == 1 && ch != '\n') request_ += ch;
      const std::string reply = answer(request_);
      HF_CHECK(::send(c, reply.data(), reply.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(reply.size()));
      ::close(c);
    });
  }
  ~OneShotDaemon() {
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
  }
  // The request line it got (call after the client's call returned).
  const std::string& request() {
    if (thread_.joinable()) thread_.join();
    return request_;
  }

 private:
  int fd_;
  std::thread thread_;
  std::string request_;
};

class DaemonClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/daemon-client-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }

  // The request's id, from its line, for an answer that echoes it.
  static uint64_t IdOf(const std::string& line) {
    Result<ControlRequest> req = ParseControlRequest(line);
    HF_CHECK(req.ok());
    return req->id;
  }

  std::string dir_;
};

TEST_F(DaemonClientTest, StatusReturnsTheParsedStatusTheRunIdAndTheResultAsSent) {
  RunStatus st;
  st.run_id = "r-1";
  st.state = "running";
  st.step = 42;
  OneShotDaemon daemon(dir_, [&](const std::string& line) { return EncodeOkResponse(IdOf(line), EncodeStatusResult(st)); });
  Reply<StatusAnswer> reply = DaemonClient(dir_).GetStatus();
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->run_id, "r-1");
  ASSERT_TRUE(reply->status.ok()) << reply->status.status().ToString();
  EXPECT_EQ(reply->status->step, 42);
  EXPECT_EQ(reply->result_json, EncodeStatusResult(st));
  EXPECT_EQ(ParseControlRequest(daemon.request())->op, control_op::kStatus);
}

TEST_F(DaemonClientTest, ACheckpointNamesTheRunAndReadsTheRequestedStep) {
  OneShotDaemon daemon(dir_, [](const std::string& line) {
    return EncodeOkResponse(IdOf(line), "{\"requested_at_step\":140}");
  });
  Reply<CheckpointAnswer> reply = DaemonClient(dir_).Checkpoint("r-1");
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->requested_at_step, 140);
  Result<ControlRequest> req = ParseControlRequest(daemon.request());
  ASSERT_TRUE(req.ok());
  EXPECT_EQ(req->op, control_op::kCheckpoint);
  EXPECT_EQ(req->run_id, "r-1");
}

TEST_F(DaemonClientTest, ARefusalIsNeitherAnAnswerNorUnreachable) {
  OneShotDaemon daemon(dir_, [](const std::string& line) {
    return EncodeErrorResponse(IdOf(line), ControlErrorCode::kFailedPrecondition, "holdfastd supervises run r-2");
  });
  Reply<StopAnswer> reply = DaemonClient(dir_).Stop("r-1");
  EXPECT_FALSE(reply.ok());
  EXPECT_TRUE(reply.refused());
  EXPECT_FALSE(reply.unreachable());
  EXPECT_EQ(reply.refusal_code(), "FailedPrecondition");
  EXPECT_EQ(reply.status().message(), "holdfastd supervises run r-2");
}

TEST_F(DaemonClientTest, NoDaemonIsUnreachable) {
  Reply<PingAnswer> reply = DaemonClient(dir_).Ping();
  EXPECT_TRUE(reply.unreachable());
  EXPECT_FALSE(reply.refused());
  EXPECT_EQ(reply.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(reply.status().message().find("no daemon is listening on " + dir_ + "/holdfastd.sock"), std::string::npos)
      << reply.status().message();
}

TEST_F(DaemonClientTest, AReplyThatBreaksTheProtocolIsAFailureNotUnreachable) {
  OneShotDaemon daemon(dir_, [](const std::string&) { return std::string("not json\n"); });
  Reply<PingAnswer> reply = DaemonClient(dir_).Ping();
  EXPECT_FALSE(reply.ok());
  EXPECT_FALSE(reply.refused());
  EXPECT_FALSE(reply.unreachable());
  EXPECT_EQ(reply.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(DaemonClientTest, SendLineSendsAHostileLineAsItIsAndReturnsTheReplyLine) {
  OneShotDaemon daemon(dir_, [](const std::string&) {
    return EncodeErrorResponse(0, ControlErrorCode::kInvalidArgument, "duplicate key \"op\"");
  });
  const std::string hostile = R"({"v":1,"id":3,"op":"stop","op":"ping"})";
  Result<std::string> reply = DaemonClient(dir_).SendLine(hostile);
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(daemon.request(), hostile);
  Result<ControlResponse> resp = ParseControlResponse(*reply);
  ASSERT_TRUE(resp.ok()) << *reply;
  EXPECT_EQ(resp->error_code, "InvalidArgument");
}

TEST_F(DaemonClientTest, RunIdArgsNameTheRunOrNothing) {
  EXPECT_EQ(RunIdArgs(""), "{}");
  EXPECT_EQ(RunIdArgs("r-1"), "{\"run_id\":\"r-1\"}");
}

}  // namespace
}  // namespace holdfast
