// LineConnection (daemon/line_connection.h): the cluster protocol's framing
// over loopback TCP — messages both ways, oversize lines, a peer hanging up.
#include "daemon/line_connection.h"

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio.hpp>

#include "daemon/cluster_protocol_test_util.h"

namespace holdfast {
namespace {

using namespace cluster_test;  // NOLINT: the suite's support

namespace asio = boost::asio;

// Two connected sockets on 127.0.0.1, on one io_context.
struct SocketPair {
  asio::io_context io;
  asio::ip::tcp::socket a{io};
  asio::ip::tcp::socket b{io};
  SocketPair() {
    asio::ip::tcp::acceptor acceptor(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    a.connect(acceptor.local_endpoint());
    acceptor.accept(b);
  }
};

TEST(LineConnectionTest, MessagesRoundTrip) {
  SocketPair s;
  auto follower = std::make_shared<LineConnection>(std::move(s.a));
  auto leader = std::make_shared<LineConnection>(std::move(s.b));
  std::vector<std::string> at_leader;
  std::vector<std::string> at_follower;
  std::string leader_closed;
  std::string follower_closed;
  leader->Start(
      [&](std::string_view line) {
        at_leader.emplace_back(line);
        Result<ClusterMessage> m = ParseClusterMessage(line, kReceiverNow);
        ASSERT_TRUE(m.ok()) << m.status().ToString();
        if (std::holds_alternative<HelloMsg>(*m)) {
          leader->Send(EncodeClusterMessage(std::get<StartMsg>(OneOfEach()[5]), kReceiverNow));
        } else {
          leader->Close("done");
        }
      },
      [&](const std::string& why) { leader_closed = why; });
  follower->Start(
      [&](std::string_view line) {
        at_follower.emplace_back(line);
        follower->Send(EncodeClusterMessage(OneOfEach()[1], kSenderNow));
      },
      [&](const std::string& why) { follower_closed = why; });
  follower->Send(EncodeClusterMessage(OneOfEach()[0], kSenderNow));
  s.io.run();

  ASSERT_EQ(at_leader.size(), 2u);
  EXPECT_EQ(at_leader[0].back(), '}');  // delivered without its newline
  ASSERT_EQ(at_follower.size(), 1u);
  Result<ClusterMessage> start = ParseClusterMessage(at_follower[0], kSenderNow);
  ASSERT_TRUE(start.ok()) << start.status().ToString();
  EXPECT_EQ(std::get<StartMsg>(*start).spec.run_id, "r-20240601-abc");
  Result<ClusterMessage> progress = ParseClusterMessage(at_leader[1], kReceiverNow);
  ASSERT_TRUE(progress.ok());
  EXPECT_EQ(std::get<ProgressMsg>(*progress).ranks.size(), 3u);
  EXPECT_EQ(leader_closed, "done");
  EXPECT_EQ(follower_closed, "the peer closed the connection");
  EXPECT_TRUE(leader->closed());
  EXPECT_TRUE(follower->closed());
}

TEST(LineConnectionTest, OversizeLineClosesWithAReason) {
  SocketPair s;
  auto sender = std::make_shared<LineConnection>(std::move(s.a));
  auto receiver = std::make_shared<LineConnection>(std::move(s.b), /*max_line_bytes=*/64);
  std::vector<std::string> lines;
  std::string why;
  int closes = 0;
  receiver->Start([&](std::string_view line) { lines.emplace_back(line); },
                  [&](const std::string& w) {
                    why = w;
                    ++closes;
                  });
  sender->Start([](std::string_view) {}, [](const std::string&) {});
  sender->Send(std::string(63, 'a'));  // 64 with its newline: fits
  sender->Send(std::string(64, 'b'));  // 65: one too many
  sender->Send("never read");
  s.io.run();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], std::string(63, 'a'));
  EXPECT_EQ(why, "the peer sent a line longer than 64 bytes (the limit, newline included)");
  EXPECT_EQ(closes, 1);
}

TEST(LineConnectionTest, DefaultLimitIsTheProtocolLimit) {
  SocketPair s;
  auto receiver = std::make_shared<LineConnection>(std::move(s.b));
  EXPECT_EQ(receiver->max_line_bytes(), kMaxClusterMessageBytes);
  std::string why;
  receiver->Start([](std::string_view) { ADD_FAILURE() << "no line should arrive"; },
                  [&](const std::string& w) { why = w; });
  // A raw peer sends 4 MiB without a newline.
  auto junk = std::make_shared<std::string>(kMaxClusterMessageBytes, 'x');
  asio::async_write(s.a, asio::buffer(*junk), [junk](const boost::system::error_code&, size_t) {});
  s.io.run();
  EXPECT_EQ(why, "the peer sent a line longer than 4194304 bytes (the limit, newline included)");
}

TEST(LineConnectionTest, CloseAfterSendingDeliversTheRejectFirst) {
  SocketPair s;
  auto leader = std::make_shared<LineConnection>(std::move(s.a));
  auto follower = std::make_shared<LineConnection>(std::move(s.b));
  std::string leader_why;
  std::string follower_why;
  std::string rejected;
  leader->Start([](std::string_view) {}, [&](const std::string& w) { leader_why = w; });
  follower->Start(
      [&](std::string_view line) {
        Result<ClusterMessage> m = ParseClusterMessage(line, kReceiverNow);
        ASSERT_TRUE(m.ok());
        rejected = std::get<RejectMsg>(*m).why;
      },
      [&](const std::string& w) { follower_why = w; });
  leader->Send(EncodeClusterMessage(RejectMsg{"nproc 4 differs from the leader's 8"}, kSenderNow));
  leader->CloseAfterSending("rejected follower");
  leader->Send("dropped: sent after closing");
  s.io.run();
  EXPECT_EQ(rejected, "nproc 4 differs from the leader's 8");
  EXPECT_EQ(leader_why, "rejected follower");
  EXPECT_EQ(follower_why, "the peer closed the connection");
}

TEST(LineConnectionTest, PeerHangingUpMidLineIsReported) {
  SocketPair s;
  auto receiver = std::make_shared<LineConnection>(std::move(s.b));
  std::string why;
  receiver->Start([](std::string_view) { ADD_FAILURE(); }, [&](const std::string& w) { why = w; });
  asio::write(s.a, asio::buffer(std::string("{\"v\":2,")));
  s.a.close();
  s.io.run();
  EXPECT_EQ(why, "the peer closed the connection in the middle of a line");
}

// A node cut off the network closes nothing: the connection must give up on
// a silent peer by itself (found by bench/soak_slurm.py: a partitioned
// follower was never lost, and the run waited on it until Slurm killed the job).
TEST(LineConnectionTest, PeerTimeoutMakesTheKernelGiveUpOnASilentPeer) {
  SocketPair s;
  const int fd = s.a.native_handle();  // the same descriptor once the connection owns the socket
  auto conn = std::make_shared<LineConnection>(std::move(s.a));
  int keepalive = 0;
  unsigned int user_timeout_ms = 1;
  socklen_t len = sizeof(keepalive);
  ASSERT_EQ(getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &keepalive, &len), 0);
  len = sizeof(user_timeout_ms);
  ASSERT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, &len), 0);
  EXPECT_EQ(keepalive, 0) << "off unless asked for";
  EXPECT_EQ(user_timeout_ms, 0u);

  ASSERT_TRUE(conn->SetPeerTimeout(12).ok());
  int idle_s = 0;
  len = sizeof(keepalive);
  ASSERT_EQ(getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &keepalive, &len), 0);
  len = sizeof(idle_s);
  ASSERT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, &len), 0);
  len = sizeof(user_timeout_ms);
  ASSERT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, &len), 0);
  EXPECT_EQ(keepalive, 1) << "an idle connection to a vanished node is probed";
  EXPECT_LT(idle_s, 12);
  EXPECT_EQ(user_timeout_ms, 12000u) << "unacknowledged data is given up on after the timeout";
}

}  // namespace
}  // namespace holdfast
