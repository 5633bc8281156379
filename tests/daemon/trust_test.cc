// Trust (docs/control-protocol.md and docs/cluster-protocol.md, "Trust"): a
// real two-node local run (two holdfastd, real holdfast-train ranks) and a
// real munged of the test's own. While the leader waits for its follower,
// everything that has no business with the run knocks on its ports: a TCP
// control client without a credential, another user's runctl, a would-be
// follower and a store client without the run's key. Each is refused and
// logged, and the run then goes on to finish bit for bit like a fault-free one.
#include <sys/stat.h>

#include <boost/asio.hpp>

#include "common/peer_auth.h"
#include "common/tcp_store.h"
#include "daemon/cluster_protocol.h"
#include "daemon/control_remote.h"
#include "daemon/munge_credential.h"
#include "tests/daemon/supervised_run.h"
#include "tests/support/munged.h"

namespace holdfast {
namespace {

class TrustTest : public SupervisedRunTest {
 protected:
  // The job of 2 nodes x 1 rank (world 2: the reference's).
  void WriteTwoNodeJob() {
    WriteJob();
    std::string job = ReadFile(dir_ / "job.toml");
    job.replace(job.find("nproc = 2"), 9, "nproc = 1");
    WriteFile(dir_ / "job.toml", job);
    ::chmod(dir_.path().c_str(), 0755);  // as run directories are: other users may enter
  }
  std::vector<std::string> Node(int id) const {
    std::vector<std::string> argv = Daemon();
    argv.insert(argv.end(), {"--nodes", "2", "--node-id", std::to_string(id)});
    return argv;
  }
  // Waits (a failure guard, not a timing assertion) until `path` holds `text`.
  bool WaitForText(const std::string& path, const std::string& text, ChildProcess& daemon) {
    for (int i = 0; i < 3000; ++i) {
      if (ReadFile(path).find(text) != std::string::npos) return true;
      if (daemon.Exited()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "no '" << text << "' in " << path << ":\n" << ReadFile(dir_ / "daemon.log");
    return false;
  }
  // "host:port" after `marker` in the leader's log.
  std::string LoggedAddress(const std::string& marker) {
    const std::string log = ReadFile(dir_ / "daemon.log");
    const size_t at = log.find(marker);
    if (at == std::string::npos) return "";
    const size_t from = at + marker.size();
    return log.substr(from, log.find_first_of(" \n", from) - from);
  }
  ProcessResult Runctl(std::vector<std::string> args, bool as_nobody = false) {
    args.insert(args.begin(), {BuildPath("cli/runctl"), "--run-dir", dir_ / "run"});
    if (as_nobody) {
      const std::vector<std::string> as = {"/usr/sbin/runuser", "-u", "nobody", "--", "/usr/bin/env",
                                           std::string(kEnvMungeSocket) + "=" + munged_.socket()};
      args.insert(args.begin(), as.begin(), as.end());
    }
    return RunProcess(args);
  }

  testing::PrivateMunged munged_;
};

TEST_F(TrustTest, PeersWithoutTheCredentialOrTheKeyAreRefusedAndTheRunFinishesBitExact) {
  ASSERT_EQ(munged_.Start(), "");
  ::setenv(kEnvMungeSocket, munged_.socket().c_str(), 1);  // the daemons' and runctl's munged
  WriteTwoNodeJob();
  ChildProcess lead(Node(0), dir_ / "daemon.log");
  ASSERT_TRUE(WaitForText(dir_ / "daemon.log", "waiting for followers on ", lead));
  ASSERT_TRUE(WaitForText(dir_ / "daemon.log", "(MUNGE-authenticated)", lead));
  Result<ControlEndpoint> ep = ReadControlEndpoint(dir_ / "run");
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  ASSERT_NE(ep->port, 0) << ep->off;
  struct stat st {};
  ASSERT_EQ(::stat(RunKeyPath(dir_ / "run").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "the run's key is the owner's alone";

  // runctl over TCP, as from a login node: the live run, authenticated by MUNGE.
  ProcessResult live = Runctl({"--via", "tcp", "--json", "status"});
  EXPECT_EQ(live.exit_code, 0) << live.output;
  EXPECT_NE(live.output.find(R"("live": true)"), std::string::npos) << live.output;
  EXPECT_NE(live.output.find(ep->run_id), std::string::npos) << live.output;

  // A TCP control client without a credential.
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket control(io);
  control.connect({boost::asio::ip::make_address(ep->addr), ep->port});
  boost::asio::write(control, boost::asio::buffer(std::string(R"({"v":1,"id":1,"op":"stop"})" "\n")));
  boost::asio::streambuf reply;
  boost::system::error_code ec;
  boost::asio::read_until(control, reply, '\n', ec);
  const std::string refused(boost::asio::buffers_begin(reply.data()), boost::asio::buffers_end(reply.data()));
  EXPECT_NE(refused.find(R"("code":"Unauthenticated")"), std::string::npos) << refused;

  // Another user's runctl: its credential is good, it is not the run's owner.
  if (geteuid() == 0) {
    ProcessResult nobody = Runctl({"status"}, /*as_nobody=*/true);
    EXPECT_EQ(nobody.exit_code, 1) << nobody.output;
    EXPECT_NE(nobody.output.find("PermissionDenied: uid 65534 may not look at or act on this run"), std::string::npos)
        << nobody.output;
    nobody = Runctl({"stop"}, /*as_nobody=*/true);
    EXPECT_EQ(nobody.exit_code, 1) << nobody.output;
    EXPECT_NE(nobody.output.find("PermissionDenied"), std::string::npos) << nobody.output;
  }

  // A would-be follower without the run's key, on the cluster port.
  const std::string cluster = LoggedAddress("waiting for followers on ");
  const size_t colon = cluster.rfind(':');
  boost::asio::ip::tcp::socket intruder(io);
  intruder.connect({boost::asio::ip::make_address(cluster.substr(0, colon)),
                    static_cast<uint16_t>(std::stoi(cluster.substr(colon + 1)))});
  boost::asio::streambuf from_leader;
  boost::asio::read_until(intruder, from_leader, '\n');
  std::string line(boost::asio::buffers_begin(from_leader.data()), boost::asio::buffers_end(from_leader.data()));
  from_leader.consume(from_leader.size());
  Result<ClusterMessage> challenge = ParseClusterMessage(line.substr(0, line.find('\n')), 0);
  ASSERT_TRUE(challenge.ok() && std::holds_alternative<ChallengeMsg>(*challenge)) << line;
  HelloMsg hello;
  hello.node = 1;
  hello.host = ThisHost() + "-n1";
  hello.nproc = 1;
  hello.pid = getpid();
  hello.nonce = std::string(kAuthNonceBytes, 'i');
  hello.proof = RunKey::Generate()->Proof(kClusterFollowerLabel, std::get<ChallengeMsg>(*challenge).nonce, hello.nonce);
  boost::asio::write(intruder, boost::asio::buffer(EncodeClusterMessage(hello, 0)));
  boost::asio::read_until(intruder, from_leader, '\n', ec);
  line.assign(boost::asio::buffers_begin(from_leader.data()), boost::asio::buffers_end(from_leader.data()));
  EXPECT_NE(line.find(R"("type":"reject")"), std::string::npos) << line;
  EXPECT_NE(line.find("does not prove it holds the run's key"), std::string::npos) << line;

  // A store client without the run's key.
  Result<HostPort> store = ParseHostPort(LoggedAddress("rendezvous store on "));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  Result<std::shared_ptr<Store>> stranger =
      ConnectTcpStore(store->host, store->port, *RunKey::Generate(), std::chrono::seconds(10));
  ASSERT_FALSE(stranger.ok());
  EXPECT_NE(stranger.status().message().find("the store refused this client"), std::string::npos)
      << stranger.status().message();

  // The real follower joins; the run goes on as if nothing had happened.
  ChildProcess follow(Node(1), dir_ / "follower.log");
  ExpectFinishedBitExact(lead);
  EXPECT_EQ(follow.Wait(), 0) << ReadFile(dir_ / "follower.log");
  const std::string log = ReadFile(dir_ / "daemon.log");
  EXPECT_NE(log.find("control port: refused a request from"), std::string::npos) << log;
  EXPECT_NE(log.find("cluster port: refused a peer at"), std::string::npos) << log;
  EXPECT_NE(log.find("store server: refused a client at"), std::string::npos) << log;
  auto rec = LatestRun();
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->run.state, RunState::kSucceeded) << rec->run.cause;
  auto gens = rec->db->Generations(rec->run.run_id);
  ASSERT_TRUE(gens.ok());
  EXPECT_EQ(gens->size(), 1u) << "a refused peer restarted nothing";
  auto inc = rec->db->LastIncident(rec->run.run_id);
  ASSERT_TRUE(inc.ok());
  EXPECT_FALSE(inc->has_value()) << "a refused peer is no incident";
  EXPECT_FALSE(std::filesystem::exists(ControlEndpointPath(dir_ / "run"))) << "the leader withdrew its endpoint";
  ::unsetenv(kEnvMungeSocket);
}

// Without munged the leader serves runctl on its own node only, and says so:
// the endpoint names why, runctl over TCP says where to run instead, and the
// socket works as ever. Nothing to set up for a local run.
TEST_F(TrustTest, WithoutMungedRunctlWorksOnTheLeadersNodeAndSaysWhyNotElsewhere) {
  ::setenv(kEnvMungeSocket, (dir_ / "no-munged.socket").c_str(), 1);
  WriteTwoNodeJob();
  ChildProcess lead(Node(0), dir_ / "daemon.log");
  ASSERT_TRUE(WaitForText(dir_ / "daemon.log", "runctl works on this node only", lead));
  ProcessResult tcp = Runctl({"--via", "tcp", "status"});
  EXPECT_NE(tcp.output.find("takes runctl on its own node only (TCP control is off: on " + ThisHost() +
                            "-n0, munged is not reachable"),
            std::string::npos)
      << tcp.output;
  EXPECT_NE(tcp.output.find("run runctl on " + ThisHost() + "-n0"), std::string::npos) << tcp.output;
  ProcessResult here = Runctl({"--json", "status"});
  EXPECT_EQ(here.exit_code, 0) << here.output;
  EXPECT_NE(here.output.find(R"("live": true)"), std::string::npos) << here.output;
  ChildProcess follow(Node(1), dir_ / "follower.log");
  ExpectFinishedBitExact(lead);
  EXPECT_EQ(follow.Wait(), 0) << ReadFile(dir_ / "follower.log");
  ::unsetenv(kEnvMungeSocket);
}

}  // namespace
}  // namespace holdfast
