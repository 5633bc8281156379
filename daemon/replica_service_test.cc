// Two ReplicaServices on real sockets: a node's held snapshot reaches its
// successor and is kept only once it verifies; a gather takes another
// node's files; hostile connections (no key, bad lines, bad names, sizes
// that do not fit or do not match) are refused before anything is written.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "checkpoint/format.h"
#include "common/tcp_store.h"
#include "daemon/replica_service.h"
#include "tests/support/subprocess.h"

namespace holdfast {
namespace {

namespace fs = std::filesystem;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

class ReplicaServiceTest : public ::testing::Test {
 protected:
  ReplicaServiceTest() : tmp_("replica_service"), key_(*RunKey::Generate()) {
    fs::create_directories(tmp_.path() + "/run");
  }

  std::unique_ptr<ReplicaService> Start(int node, bool send, uint64_t budget = 1 << 20) {
    ReplicaServiceOptions o;
    o.root = tmp_.path() + "/n" + std::to_string(node);
    fs::create_directories(o.root);
    o.node = node;
    o.bind_addr = "127.0.0.1";
    o.run_dir = tmp_.path() + "/run";
    o.budget_bytes = budget;
    o.send = send;
    auto s = ReplicaService::Start(o, key_);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  // Everything under node `n`'s folder, as relative paths.
  std::vector<std::string> Entries(int n) {
    std::vector<std::string> out;
    const std::string root = tmp_.path() + "/n" + std::to_string(n);
    for (const auto& e : fs::recursive_directory_iterator(root)) out.push_back(fs::relative(e.path(), root).string());
    std::sort(out.begin(), out.end());
    return out;
  }

  // A raw connection to `addr`: the handshake done with `key`, then `line`
  // and `payload` sent; returns the server's reply line ("" if none).
  std::string Raw(const std::string& addr, const RunKey& key, const std::string& line, const std::string& payload = "") {
    auto hp = ParseHostPort(addr);
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(hp->port);
    ::inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
    std::string buf;
    auto read_line = [&]() {
      char c;
      std::string l;
      while (::read(fd, &c, 1) == 1) {
        l += c;
        if (c == '\n') break;
      }
      return l;
    };
    auto challenge = ParseChallenge(read_line());
    EXPECT_TRUE(challenge.ok());
    const std::string nonce(kAuthNonceBytes, 'n');
    const std::string hello = EncodeHello(nonce, key.Proof(kReplicaClientLabel, *challenge, nonce));
    (void)!::write(fd, hello.data(), hello.size());
    std::string welcome = read_line();
    if (ParseWelcome(welcome).ok()) {
      const std::string all = line + payload;
      (void)!::write(fd, all.data(), all.size());
      ::shutdown(fd, SHUT_WR);
      welcome = read_line();
    }
    ::close(fd);
    return welcome;
  }

  TempDir tmp_;
  RunKey key_;
};

TEST_F(ReplicaServiceTest, ANodesSnapshotReachesItsSuccessorAndAGatherTakesItBack) {
  auto one = Start(1, /*send=*/false);
  auto zero = Start(0, /*send=*/true);
  ASSERT_TRUE(one && zero);
  const std::string shard(300000, 's'), theirs(4096, 't');
  fs::create_directories(tmp_.path() + "/n0/step-000000000004");
  WriteFile(tmp_.path() + "/n0/step-000000000004/shard-00000-of-00002.bin", shard);
  Manifest m;
  m.step = 4;
  m.world_size = 2;
  m.shards = {{0, "shard-00000-of-00002.bin", shard.size(), Xxh3(shard.data(), shard.size())},
              {1, "shard-00001-of-00002.bin", theirs.size(), Xxh3(theirs.data(), theirs.size())}};
  WriteFile(tmp_.path() + "/n0/step-000000000004/MANIFEST.json", EncodeManifest(m));
  zero->SetLocalFiles({"MANIFEST.json", "shard-00000-of-00002.bin"});
  // Wait (with a deadline, no timing assertion) for the replica on node 1.
  const std::string replica = tmp_.path() + "/n1/replica-0/step-000000000004/shard-00000-of-00002.bin";
  for (int i = 0; i < 3000 && !fs::exists(replica); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(fs::exists(replica)) << "node 0's step 4 never reached node 1";
  EXPECT_TRUE(ReadFile(replica) == shard);
  auto inv = RequestInventory(one->addr(), key_, std::chrono::seconds(5));
  ASSERT_TRUE(inv.ok()) << inv.status().ToString();
  ASSERT_EQ(inv->size(), 1u);
  EXPECT_EQ((*inv)[0].kind, CopyKind::kReplica);
  EXPECT_EQ((*inv)[0].origin, 0);

  // Node 0 lost its folder; node 1 has its own shard: a gather on node 0 takes node 0's files from the replica.
  fs::create_directories(tmp_.path() + "/n1/step-000000000004");
  WriteFile(tmp_.path() + "/n1/step-000000000004/shard-00001-of-00002.bin", theirs);
  fs::remove_all(tmp_.path() + "/n0/step-000000000004");
  fs::remove_all(tmp_.path() + "/n0/held");
  const ReplicaHolder rep{one->addr(), 1, CopyKind::kReplica, 0}, local{one->addr(), 1, CopyKind::kLocal, 1};
  auto note = RequestGather(zero->addr(), key_, 4,
                            {{"MANIFEST.json", {rep}}, {"shard-00000-of-00002.bin", {rep}}, {"shard-00001-of-00002.bin", {local}}},
                            std::chrono::seconds(30));
  ASSERT_TRUE(note.ok()) << note.status().ToString();
  EXPECT_TRUE(ReadFile(tmp_.path() + "/n0/step-000000000004/shard-00000-of-00002.bin") == shard);
  EXPECT_TRUE(ReadFile(tmp_.path() + "/n0/step-000000000004/shard-00001-of-00002.bin") == theirs);
  EXPECT_NE(note->find("shard-00000-of-00002.bin from the replica on node 1"), std::string::npos) << *note;
  zero->Stop();
  EXPECT_FALSE(fs::exists(tmp_.path() + "/run/replicas/node-0")) << "the endpoint is withdrawn";
}

TEST_F(ReplicaServiceTest, HostileInputIsRefusedBeforeAnythingIsWritten) {
  auto one = Start(1, /*send=*/false, /*budget=*/4096);
  ASSERT_TRUE(one);
  const std::string addr = one->addr();
  auto push = [](const std::string& name, uint64_t size, const std::string& xxh3) {
    return R"({"v":1,"type":"push","step":5,"origin":0,"files":[{"name":")" + name + R"(","size":)" +
           std::to_string(size) + R"(,"xxh3":")" + xxh3 + "\"}]}\n";
  };
  const std::string ok_sum = HexU64(Xxh3("abcd", 4));
  // Another run's key: refused at the handshake.
  const std::string other = Raw(addr, *RunKey::Generate(), push("shard-00000-of-00002.bin", 4, ok_sum), "abcd");
  EXPECT_NE(other.find("did not prove it holds the run's key"), std::string::npos) << other;
  // A malformed request line, a path out of the folder, a name too long.
  EXPECT_NE(Raw(addr, key_, "{\"v\":1,\"type\":\"push\",\n").find("is not JSON"), std::string::npos);
  EXPECT_NE(Raw(addr, key_, push("../../n0/x", 4, ok_sum), "abcd").find("is not a snapshot file's name"),
            std::string::npos);
  EXPECT_NE(Raw(addr, key_, push(std::string(100, 'a'), 4, ok_sum), "abcd").find("the limit is 64"), std::string::npos);
  // More than the node's budget.
  EXPECT_NE(Raw(addr, key_, push("shard-00000-of-00002.bin", 1 << 20, ok_sum)).find("does not fit"), std::string::npos);
  // Fewer bytes than announced, and bytes that are not the ones announced.
  EXPECT_NE(Raw(addr, key_, push("shard-00000-of-00002.bin", 100, ok_sum), "abcd").find("before the end of the file"),
            std::string::npos);
  EXPECT_NE(Raw(addr, key_, push("shard-00000-of-00002.bin", 4, ok_sum), "abce").find("arrived with XXH3"),
            std::string::npos);
  // A node pushing to itself.
  EXPECT_NE(Raw(addr, key_, R"({"v":1,"type":"push","step":5,"origin":1,"files":[{"name":"MANIFEST.json","size":4,"xxh3":")" +
                                ok_sum + "\"}]}\n", "abcd").find("to itself"),
            std::string::npos);
  // Nothing of them is kept; only the folder of an origin that was tried.
  for (const std::string& e : Entries(1)) EXPECT_EQ(e, "replica-0") << "left behind: " << e;
  // And the right key with the right bytes is taken.
  EXPECT_NE(Raw(addr, key_, push("shard-00000-of-00002.bin", 4, ok_sum), "abcd").find("\"ok\""), std::string::npos);
  EXPECT_EQ(ReadFile(tmp_.path() + "/n1/replica-0/step-000000000005/shard-00000-of-00002.bin"), "abcd");
}

}  // namespace
}  // namespace holdfast
