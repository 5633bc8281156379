#include "common/tcp_store.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <future>
#include <thread>
#include <vector>

#include "common/tcp_store_server.h"
#include "common/tcp_store_wire.h"

namespace holdfast {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kLong(30000);

std::vector<uint8_t> Bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

RunKey NewKey() {
  Result<RunKey> k = RunKey::Generate();
  HF_CHECK(k.ok());
  return *k;
}

// Reads exactly n bytes (fewer at EOF).
std::string ReadN(int fd, size_t n) {
  std::string out;
  char buf[4096];
  while (out.size() < n) {
    ssize_t got = ::read(fd, buf, std::min(sizeof(buf), n - out.size()));
    if (got <= 0) break;
    out.append(buf, static_cast<size_t>(got));
  }
  return out;
}

class TcpStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = StartTcpStoreServer("127.0.0.1", 0, key_);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
    ASSERT_NE(server_->port(), 0);
  }

  std::shared_ptr<Store> Client() {
    auto c = ConnectTcpStore("127.0.0.1", server_->port(), key_, milliseconds(5000));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? *c : nullptr;
  }

  // A raw socket to the server, for speaking bad protocol; with `authenticate`
  // it has answered the challenge with `key` (default: the server's) and read
  // the server's proof, so what follows is a request.
  int RawSocket(bool authenticate = true, const RunKey* key = nullptr) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(server_->port());
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    const std::string challenge = ReadN(fd, tcp_store_wire::kHeaderBytes + kAuthNonceBytes);
    EXPECT_EQ(challenge.size(), tcp_store_wire::kHeaderBytes + kAuthNonceBytes) << "the server speaks first";
    EXPECT_EQ(static_cast<uint8_t>(challenge[3]), tcp_store_wire::kChallenge);
    if (!authenticate) return fd;
    const std::string nonce = challenge.substr(tcp_store_wire::kHeaderBytes);
    const std::string mine(kAuthNonceBytes, 'c');
    const std::string body = mine + (key ? *key : key_).Proof(tcp_store_wire::kClientLabel, nonce, mine);
    std::vector<uint8_t> frame(tcp_store_wire::kHeaderBytes);
    tcp_store_wire::EncodeHeader(tcp_store_wire::kAuth, static_cast<uint32_t>(body.size()), frame.data());
    frame.insert(frame.end(), body.begin(), body.end());
    EXPECT_EQ(::write(fd, frame.data(), frame.size()), static_cast<ssize_t>(frame.size()));
    if (key == nullptr) {
      const std::string ok = ReadN(fd, tcp_store_wire::kHeaderBytes + kAuthProofBytes);
      EXPECT_EQ(static_cast<uint8_t>(ok[3]), tcp_store_wire::kReplyOk);
    }
    return fd;
  }

  // Reads until EOF; returns everything the server sent.
  static std::string ReadToEof(int fd) {
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    return out;
  }

  const RunKey key_ = NewKey();
  std::unique_ptr<TcpStoreServer> server_;
};

TEST_F(TcpStoreTest, SetOnOneClientGetOnAnother) {
  auto a = Client(), b = Client();
  ASSERT_TRUE(a->Set("k", Bytes("v1")).ok());
  auto v = b->Get("k", milliseconds(0));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, Bytes("v1"));
  EXPECT_TRUE(*b->Check("k"));
  ASSERT_TRUE(b->Delete("k").ok());
  EXPECT_FALSE(*a->Check("k"));
  // Empty and binary values survive the trip.
  std::vector<uint8_t> binary = {0, 255, 0, 7};
  ASSERT_TRUE(a->Set("bin", binary).ok());
  EXPECT_EQ(*b->Get("bin", milliseconds(0)), binary);
  ASSERT_TRUE(a->Set("empty", {}).ok());
  EXPECT_TRUE(b->Get("empty", milliseconds(0))->empty());
}

TEST_F(TcpStoreTest, GetTimeoutNamesKeyAndAddress) {
  auto a = Client();
  auto v = a->Get("g7/rank3/addr", milliseconds(50));
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kTimeout);
  EXPECT_NE(v.status().message().find("g7/rank3/addr"), std::string::npos) << v.status().message();
  EXPECT_NE(v.status().message().find(server_->address().ToString()), std::string::npos) << v.status().message();
  EXPECT_EQ(a->Get("never", milliseconds::min()).status().code(), StatusCode::kTimeout);
  ASSERT_TRUE(a->Set("here", Bytes("1")).ok());
  EXPECT_TRUE(a->Get("here", milliseconds::max()).ok());
  // The connection is still usable after a timeout.
  EXPECT_TRUE(a->Set("x", Bytes("1")).ok());
}

TEST_F(TcpStoreTest, ParkedGetIsAnsweredWhenAnotherClientSets) {
  auto a = Client(), b = Client();
  auto got = std::async(std::launch::async, [&] {
    EXPECT_TRUE(a->Add("getter_started", 1).ok());
    return a->Get("late", kLong);
  });
  ASSERT_TRUE(b->Wait({"getter_started"}, kLong).ok());
  ASSERT_TRUE(b->Set("late", Bytes("here")).ok());
  auto v = got.get();
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, Bytes("here"));
}

TEST_F(TcpStoreTest, AddIsAtomicAcrossClientsAndThreads) {
  constexpr int kClients = 3, kThreadsPerClient = 2, kAdds = 200;
  std::vector<std::shared_ptr<Store>> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(Client());
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients * kThreadsPerClient; ++i) {
    threads.emplace_back([&, i] {
      for (int j = 0; j < kAdds; ++j) ASSERT_TRUE(clients[i % kClients]->Add("counter", 1).ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(*clients[0]->Add("counter", 0), kClients * kThreadsPerClient * kAdds);
  EXPECT_EQ(*clients[1]->Add("counter", -5), kClients * kThreadsPerClient * kAdds - 5);
  EXPECT_EQ(*clients[2]->Get("counter", milliseconds(0)), Bytes(std::to_string(kClients * kThreadsPerClient * kAdds - 5)));
}

TEST_F(TcpStoreTest, AddOnNonCounterIsAnErrorNotADisconnect) {
  auto a = Client();
  ASSERT_TRUE(a->Set("blob", Bytes("not a number")).ok());
  auto r = a->Add("blob", 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("blob"), std::string::npos);
  EXPECT_TRUE(a->Set("after", Bytes("ok")).ok());
}

TEST_F(TcpStoreTest, WaitOnSeveralKeys) {
  auto a = Client(), b = Client();
  Status timed_out = a->Wait({"w1", "w2"}, milliseconds(50));
  EXPECT_EQ(timed_out.code(), StatusCode::kTimeout);
  EXPECT_NE(timed_out.message().find("w1"), std::string::npos) << timed_out.message();

  auto waited = std::async(std::launch::async, [&] { return a->Wait({"w1", "w2", "w3"}, kLong); });
  ASSERT_TRUE(b->Set("w1", {}).ok());
  ASSERT_TRUE(b->Set("w2", {}).ok());
  ASSERT_TRUE(b->Set("w3", {}).ok());
  Status s = waited.get();
  EXPECT_TRUE(s.ok()) << s.ToString();
  // A partial set names the key still missing.
  Status partial = a->Wait({"w1", "w4"}, milliseconds(50));
  EXPECT_EQ(partial.code(), StatusCode::kTimeout);
  EXPECT_NE(partial.message().find("'w4' was not set"), std::string::npos) << partial.message();
}

TEST_F(TcpStoreTest, ServerSurvivesGarbageAndOtherClientsAreUnaffected) {
  auto good = Client();
  ASSERT_TRUE(good->Set("before", Bytes("1")).ok());
  auto parked = std::async(std::launch::async, [&] { return Client()->Get("after", kLong); });

  int fd = RawSocket();
  const char garbage[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_GT(::write(fd, garbage, sizeof(garbage)), 0);
  std::string reply = ReadToEof(fd);  // the server closes after its error reply
  ::close(fd);
  ASSERT_GE(reply.size(), tcp_store_wire::kHeaderBytes + 1);
  EXPECT_EQ(static_cast<uint8_t>(reply[3]), tcp_store_wire::kReplyError);
  EXPECT_NE(reply.find("bad magic"), std::string::npos) << reply;

  ASSERT_TRUE(good->Set("after", Bytes("2")).ok());
  auto v = parked.get();
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, Bytes("2"));
  EXPECT_EQ(*good->Get("before", milliseconds(0)), Bytes("1"));
}

TEST_F(TcpStoreTest, OversizedFrameAndWrongVersionAreRefused) {
  {
    int fd = RawSocket();
    uint8_t header[tcp_store_wire::kHeaderBytes];
    tcp_store_wire::EncodeHeader(tcp_store_wire::kSet, 0x7fffffff, header);
    ASSERT_EQ(::write(fd, header, sizeof(header)), static_cast<ssize_t>(sizeof(header)));
    std::string reply = ReadToEof(fd);
    ::close(fd);
    EXPECT_NE(reply.find("exceeds the limit"), std::string::npos) << reply;
  }
  {
    int fd = RawSocket();
    uint8_t header[tcp_store_wire::kHeaderBytes];
    tcp_store_wire::EncodeHeader(tcp_store_wire::kCheck, 0, header);
    header[2] = 99;
    ASSERT_EQ(::write(fd, header, sizeof(header)), static_cast<ssize_t>(sizeof(header)));
    std::string reply = ReadToEof(fd);
    ::close(fd);
    EXPECT_NE(reply.find("version 99"), std::string::npos) << reply;
  }
  {
    // A Set whose key length runs past the body.
    int fd = RawSocket();
    std::vector<uint8_t> frame(tcp_store_wire::kHeaderBytes + 4);
    tcp_store_wire::EncodeHeader(tcp_store_wire::kSet, 4, frame.data());
    frame[8] = 0xff;
    ASSERT_EQ(::write(fd, frame.data(), frame.size()), static_cast<ssize_t>(frame.size()));
    std::string reply = ReadToEof(fd);
    ::close(fd);
    EXPECT_NE(reply.find("malformed store Set"), std::string::npos) << reply;
  }
  auto c = Client();
  EXPECT_TRUE(c->Set("still", Bytes("alive")).ok());
}

// The run's key (common/peer_auth.h): a client without it gets nothing, a
// client that holds it sees no difference, and the store keeps serving.
TEST_F(TcpStoreTest, AClientWithAnotherKeyIsRefusedAndTheStoreGoesOn) {
  auto good = Client();
  ASSERT_TRUE(good->Set("before", Bytes("1")).ok());
  auto parked = std::async(std::launch::async, [&] { return Client()->Get("after", kLong); });

  auto intruder = ConnectTcpStore("127.0.0.1", server_->port(), NewKey(), milliseconds(5000));
  ASSERT_FALSE(intruder.ok());
  EXPECT_EQ(intruder.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(intruder.status().message().find("the store refused this client"), std::string::npos)
      << intruder.status().message();
  EXPECT_NE(intruder.status().message().find("does not match the run's key"), std::string::npos)
      << intruder.status().message();

  ASSERT_TRUE(good->Set("after", Bytes("2")).ok());
  auto v = parked.get();
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, Bytes("2"));
}

TEST_F(TcpStoreTest, ARequestBeforeTheProofIsRefusedAndNothingChanges) {
  int fd = RawSocket(/*authenticate=*/false);
  std::vector<uint8_t> body;
  tcp_store_wire::Writer(&body).Str("planted");
  body.push_back('x');
  std::vector<uint8_t> frame(tcp_store_wire::kHeaderBytes);
  tcp_store_wire::EncodeHeader(tcp_store_wire::kSet, static_cast<uint32_t>(body.size()), frame.data());
  frame.insert(frame.end(), body.begin(), body.end());
  ASSERT_EQ(::write(fd, frame.data(), frame.size()), static_cast<ssize_t>(frame.size()));
  std::string reply = ReadToEof(fd);
  ::close(fd);
  ASSERT_GE(reply.size(), tcp_store_wire::kHeaderBytes + 1);
  EXPECT_EQ(static_cast<uint8_t>(reply[3]), tcp_store_wire::kReplyError);
  EXPECT_NE(reply.find("sent Set before proving it holds the run's key"), std::string::npos) << reply;
  EXPECT_FALSE(*Client()->Check("planted")) << "the refused Set changed nothing";

  fd = RawSocket(/*authenticate=*/false);
  const char garbage[] = "GET / HTTP/1.1\r\n\r\n";
  ASSERT_GT(::write(fd, garbage, sizeof(garbage)), 0);
  reply = ReadToEof(fd);
  ::close(fd);
  EXPECT_NE(reply.find("does not speak holdfast store protocol v2"), std::string::npos) << reply;

  const RunKey wrong = NewKey();
  fd = RawSocket(/*authenticate=*/true, &wrong);
  reply = ReadToEof(fd);
  ::close(fd);
  EXPECT_NE(reply.find("does not match the run's key"), std::string::npos) << reply;
  EXPECT_TRUE(Client()->Set("still", Bytes("serving")).ok());
}

// The server proves the key too: a client never rendezvous through another run's store.
TEST(TcpStoreAuthTest, AClientRefusesAStoreThatDoesNotProveTheKey) {
  // A stand-in server: challenges, then accepts any proof and answers with a wrong one of its own.
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(lfd, 1), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::thread fake([lfd] {
    int fd = ::accept(lfd, nullptr, nullptr);
    std::vector<uint8_t> frame(tcp_store_wire::kHeaderBytes + kAuthNonceBytes, 'n');
    tcp_store_wire::EncodeHeader(tcp_store_wire::kChallenge, kAuthNonceBytes, frame.data());
    (void)!::write(fd, frame.data(), frame.size());
    ReadN(fd, tcp_store_wire::kHeaderBytes + kAuthNonceBytes + kAuthProofBytes);
    std::vector<uint8_t> ok(tcp_store_wire::kHeaderBytes + kAuthProofBytes, 'p');
    tcp_store_wire::EncodeHeader(tcp_store_wire::kReplyOk, kAuthProofBytes, ok.data());
    (void)!::write(fd, ok.data(), ok.size());
    ::close(fd);
  });
  auto c = ConnectTcpStore("127.0.0.1", ntohs(addr.sin_port), NewKey(), milliseconds(5000));
  fake.join();
  ::close(lfd);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(c.status().message().find("did not prove it holds the run's key"), std::string::npos)
      << c.status().message();
}

TEST_F(TcpStoreTest, ClientRefusesOversizedKeysAndValuesLocally) {
  auto c = Client();
  Status big_key = c->Set(std::string(5000, 'k'), {});
  EXPECT_EQ(big_key.code(), StatusCode::kInvalidArgument);
  Status big_value = c->Set("v", std::vector<uint8_t>(tcp_store_wire::kMaxValueBytes + 1));
  EXPECT_EQ(big_value.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big_value.message().find("64 MiB"), std::string::npos);
  EXPECT_TRUE(c->Set("v", Bytes("small")).ok());
}

TEST_F(TcpStoreTest, ParkedClientSeesServerStop) {
  auto c = Client();
  auto got = std::async(std::launch::async, [&] {
    EXPECT_TRUE(c->Add("parking", 1).ok());
    return c->Get("never", kLong);
  });
  ASSERT_TRUE(Client()->Wait({"parking"}, kLong).ok());
  server_->Stop();
  auto v = got.get();
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kUnavailable) << v.status().ToString();
}

TEST(TcpStoreConnectTest, ClientConnectsToAServerThatStartsLater) {
  uint16_t port;
  {
    auto probe = StartTcpStoreServer("127.0.0.1", 0, NewKey());
    ASSERT_TRUE(probe.ok()) << probe.status().ToString();
    port = (*probe)->port();
  }  // stopped: nothing listens on `port` now
  const RunKey key = NewKey();
  auto connected = std::async(std::launch::async, [port, &key] { return ConnectTcpStore("127.0.0.1", port, key, kLong); });
  auto server = StartTcpStoreServer("127.0.0.1", port, key);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto c = connected.get();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE((*c)->Set("hello", Bytes("world")).ok());
}

TEST(TcpStoreConnectTest, ConnectTimeoutNamesTheAddress) {
  uint16_t port;
  {
    auto probe = StartTcpStoreServer("127.0.0.1", 0, NewKey());
    ASSERT_TRUE(probe.ok());
    port = (*probe)->port();
  }
  auto c = ConnectTcpStore("127.0.0.1", port, NewKey(), milliseconds(100));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(c.status().message().find("127.0.0.1:" + std::to_string(port)), std::string::npos)
      << c.status().message();
}

TEST_F(TcpStoreTest, PrefixStoresIsolateGenerations) {
  auto base = Client();
  PrefixStore g1(GenerationPrefix(1), base), g2(GenerationPrefix(2), Client());
  ASSERT_TRUE(g1.Set("rank0/addr", Bytes("old")).ok());
  EXPECT_FALSE(*g2.Check("rank0/addr"));
  EXPECT_EQ(g2.Get("rank0/addr", milliseconds(20)).status().code(), StatusCode::kTimeout);
  EXPECT_EQ(*g1.Add("joined", 1), 1);
  EXPECT_EQ(*g2.Add("joined", 1), 1);
  EXPECT_EQ(*base->Get("g1/rank0/addr", milliseconds(0)), Bytes("old"));
}

TEST(AsioTcpStoreServerTest, RunsOnACallersEventLoop) {
  boost::asio::io_context io;
  const RunKey key = NewKey();
  auto server = AsioTcpStoreServer::Listen(&io, "127.0.0.1", 0, key);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  std::thread loop([&] { io.run(); });
  auto c = ConnectTcpStore("127.0.0.1", (*server)->port(), key, kLong);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE((*c)->Set("k", Bytes("v")).ok());
  EXPECT_EQ(*(*c)->Get("k", milliseconds(0)), Bytes("v"));
  std::promise<size_t> connections;
  boost::asio::post(io, [&] {
    connections.set_value((*server)->connection_count());
    (*server).reset();  // on the loop thread, as the contract asks
  });
  EXPECT_EQ(connections.get_future().get(), 1u);
  loop.join();  // run() returns once the server's handlers drained
}

TEST(ParseHostPortTest, AcceptsNamesV4AndBracketedV6) {
  auto a = ParseHostPort("node-7.cluster:29500");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "node-7.cluster");
  EXPECT_EQ(a->port, 29500);
  auto b = ParseHostPort("[::1]:80");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->host, "::1");
  EXPECT_EQ(b->ToString(), "[::1]:80");
  for (const char* bad : {"nohost", ":80", "h:", "h:0", "h:65536", "h:12x", "::1:80", "[::1]80"}) {
    auto r = ParseHostPort(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find(bad), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace holdfast
