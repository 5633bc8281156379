// The Slurm suite, trust (docs/control-protocol.md and docs/cluster-protocol.md,
// "Trust"): runctl in the host's network namespace — not a node's, like a
// login node — reaches the leader of a 2-node job on n1 (10.77.0.11) over
// TCP, authenticated by the cluster's own munged (found through slurm.conf's
// AuthInfo), and follows it live: status, checkpoint --wait, stop --wait.
// Another user's runctl, a TCP client without a credential, a would-be
// follower and a store client without the run's key are refused, and the run
// goes on untouched until runctl stops it.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <iostream>

#include <nlohmann/json.hpp>

#include "common/peer_auth.h"
#include "common/tcp_store.h"
#include "daemon/cluster_protocol.h"
#include "lineage/incident.h"
#include "tests/slurm/slurm_fixture.h"

namespace holdfast {
namespace {

class SlurmTrust : public SlurmSuite {
 protected:
  // runctl from the host's namespace; every call but the polls goes into D/runctl-transcript.txt.
  ProcessResult Runctl(std::vector<std::string> args, bool as_nobody = false, bool poll = false) {
    args.insert(args.begin(), {BuildPath("cli/runctl"), "--run-dir", D("run")});
    if (as_nobody) {
      const std::vector<std::string> as = {Tool("runuser"), "-u", "nobody", "--"};
      args.insert(args.begin(), as.begin(), as.end());
    }
    ProcessResult r = RunProcess(args);
    if (poll) return r;
    transcript_ += "$ runctl";
    for (size_t i = as_nobody ? 7 : 3; i < args.size(); ++i) transcript_ += " " + args[i];
    transcript_ += (as_nobody ? "   # as nobody" : "") + std::string("\n") + r.output + "(exit " +
                   std::to_string(r.exit_code) + ")\n";
    WriteFile(D("runctl-transcript.txt"), transcript_);  // what a person saw, kept with a failed test
    return r;
  }

  // A TCP connection to "addr:port" (fd; -1 when it fails).
  static int Dial(const std::string& where) {
    const size_t colon = where.rfind(':');
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(std::atoi(where.substr(colon + 1).c_str())));
    if (colon == std::string::npos || inet_pton(AF_INET, where.substr(0, colon).c_str(), &a.sin_addr) != 1) return -1;
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  }
  // One line from fd ("" at EOF first).
  static std::string ReadLine(int fd) {
    std::string line;
    char c;
    while (::read(fd, &c, 1) == 1 && c != '\n') line.push_back(c);
    return line;
  }

  std::string transcript_;
};

TEST_F(SlurmTrust, RunctlFromTheHostFollowsAndStopsATwoNodeRunOverMungeAndStrangersAreRefused) {
  WriteJob(Train::kLong);
  const uint32_t job = Submit();
  ASSERT_NE(job, 0u);

  // Live status over TCP from the host's namespace: both nodes' ranks training.
  nlohmann::json live;
  ASSERT_TRUE(WaitFor("both nodes' ranks training, seen over TCP", std::chrono::seconds(120), [&] {
    ProcessResult r = Runctl({"--via", "tcp", "--json", "status"}, /*as_nobody=*/false, /*poll=*/true);
    if (r.exit_code != 0) return false;
    live = nlohmann::json::parse(r.output, nullptr, false);
    if (!live.is_object() || live.value("live", false) != true) return false;
    int training = 0;
    for (const auto& node : live["status"]["nodes"]) {
      for (const auto& rank : node["ranks"]) training += rank["state"] == "running" && rank["step"] > 0;
    }
    return training == 2;
  })) << Diagnostics();
  EXPECT_EQ(live["status"]["scheduler"], "slurm");
  EXPECT_EQ(live["status"]["job_id"], std::to_string(job));
  EXPECT_EQ(live["status"]["hosts"], nlohmann::json::array({"n1", "n2"}));
  const std::string endpoint = ReadFile(D("run/control-endpoint.json"));
  EXPECT_NE(endpoint.find(R"("host":"n1","addr":"10.77.0.11")"), std::string::npos) << endpoint;
  EXPECT_NE(endpoint.find(R"("auth":"munge")"), std::string::npos) << endpoint;
  ProcessResult table = Runctl({"--via", "tcp", "status"});
  EXPECT_EQ(table.exit_code, 0) << table.output;
  // The transcript docs/slurm.md shows ("runctl from the login node").
  std::cout << "$ runctl --run-dir RUN_DIR --via tcp status\n" << table.output << std::flush;
  EXPECT_NE(table.output.find("n1"), std::string::npos) << table.output;
  EXPECT_NE(table.output.find("n2"), std::string::npos) << table.output;

  // Another user: MUNGE says who it is, and it is not the run's owner.
  ProcessResult nobody = Runctl({"status"}, /*as_nobody=*/true);
  EXPECT_EQ(nobody.exit_code, 1) << nobody.output;
  EXPECT_NE(nobody.output.find("holdfastd refused 'status': PermissionDenied: uid 65534 may not look at or act on "
                               "this run: only its owner (uid 0) or root may"),
            std::string::npos)
      << nobody.output;
  std::cout << "$ runuser -u nobody -- runctl --run-dir RUN_DIR status\n" << nobody.output << std::flush;
  nobody = Runctl({"--via", "tcp", "stop"}, /*as_nobody=*/true);
  EXPECT_NE(nobody.exit_code, 0) << nobody.output;
  EXPECT_NE(nobody.output.find("PermissionDenied"), std::string::npos) << nobody.output;

  // A TCP client without a credential, from the host.
  const std::string control = nlohmann::json::parse(endpoint)["addr"].get<std::string>() + ":" +
                              std::to_string(nlohmann::json::parse(endpoint)["port"].get<int>());
  int fd = Dial(control);
  ASSERT_GE(fd, 0) << control;
  const std::string stop = R"({"v":1,"id":1,"op":"stop"})" "\n";
  ASSERT_EQ(::write(fd, stop.data(), stop.size()), static_cast<ssize_t>(stop.size()));
  const std::string unauthenticated = ReadLine(fd);
  ::close(fd);
  EXPECT_NE(unauthenticated.find(R"("code":"Unauthenticated")"), std::string::npos) << unauthenticated;

  // A would-be follower without the run's key, on the leader's cluster port.
  const std::string cluster = ReadFile(D("run/cluster-slurm.addr")).substr(0, ReadFile(D("run/cluster-slurm.addr")).find(' '));
  fd = Dial(cluster);
  ASSERT_GE(fd, 0) << cluster;
  Result<ClusterMessage> challenge = ParseClusterMessage(ReadLine(fd), 0);
  ASSERT_TRUE(challenge.ok() && std::holds_alternative<ChallengeMsg>(*challenge));
  HelloMsg hello;
  hello.node = 1;
  hello.host = "n2";
  hello.nproc = 1;
  hello.pid = getpid();
  hello.nonce = std::string(kAuthNonceBytes, 'i');
  hello.proof = RunKey::Generate()->Proof(kClusterFollowerLabel, std::get<ChallengeMsg>(*challenge).nonce, hello.nonce);
  const std::string hello_line = EncodeClusterMessage(hello, 0);
  ASSERT_EQ(::write(fd, hello_line.data(), hello_line.size()), static_cast<ssize_t>(hello_line.size()));
  const std::string rejected = ReadLine(fd);
  ::close(fd);
  EXPECT_NE(rejected.find(R"("type":"reject")"), std::string::npos) << rejected;

  // A store client without the run's key (the store's address, as rank 1 on n2 was given it).
  const std::string env = ReadFile(D("env/n2-g0-r1"));
  const size_t at = env.find("HOLDFAST_STORE_ADDR=");
  ASSERT_NE(at, std::string::npos) << env;
  Result<HostPort> store = ParseHostPort(env.substr(at + 20, env.find('\n', at) - at - 20));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  Result<std::shared_ptr<Store>> stranger =
      ConnectTcpStore(store->host, store->port, *RunKey::Generate(), std::chrono::seconds(10));
  ASSERT_FALSE(stranger.ok());
  EXPECT_NE(stranger.status().message().find("the store refused this client"), std::string::npos)
      << stranger.status().message();

  // The owner, over TCP: a checkpoint now, waited for; then stop, waited for.
  ProcessResult ck = Runctl({"--via", "tcp", "checkpoint", "--wait", "--timeout", "120", "latest"});
  EXPECT_EQ(ck.exit_code, 0) << ck.output << Diagnostics();
  EXPECT_NE(ck.output.find("committed (waited"), std::string::npos) << ck.output;
  ProcessResult stopped = Runctl({"--via", "tcp", "stop", "--wait", "--timeout", "120", "latest"});
  EXPECT_EQ(stopped.exit_code, 0) << stopped.output << Diagnostics();
  EXPECT_NE(stopped.output.find("ended stopped"), std::string::npos) << stopped.output;
  std::cout << "$ runctl --run-dir RUN_DIR --via tcp checkpoint --wait --timeout 120 latest\n" << ck.output
            << "$ runctl --run-dir RUN_DIR --via tcp stop --wait --timeout 120 latest\n" << stopped.output << std::flush;
  ASSERT_TRUE(WaitForJobsToEnd());

  // The run was untouched by the strangers: one generation, no incident, stopped by its owner.
  auto db = Lineage();
  ASSERT_NE(db, nullptr);
  auto run = db->LatestRun();
  ASSERT_TRUE(run.ok());
  EXPECT_TRUE(run->state == RunState::kStopped || run->state == RunState::kPreempted) << RunStateName(run->state);
  EXPECT_NE(run->cause.find("stopped with runctl"), std::string::npos) << run->cause;
  auto gens = db->Generations(run->run_id);
  ASSERT_TRUE(gens.ok());
  EXPECT_EQ(gens->size(), 1u) << "a refused peer restarted nothing";
  auto events = db->Events(run->run_id, 0);
  ASSERT_TRUE(events.ok());
  for (const auto& e : *events) {
    EXPECT_NE(e.kind, event_kind::kCrash) << e.summary;
    EXPECT_NE(e.kind, event_kind::kHang) << e.summary;
    EXPECT_NE(e.kind, event_kind::kNodeLost) << e.summary;
  }
  const std::string out = JobOutputs();
  EXPECT_NE(out.find("runctl on other nodes reaches this run at 10.77.0.11:"), std::string::npos) << out;
  EXPECT_NE(out.find("control port: refused a request from 10.77.0.1:"), std::string::npos) << out;
  EXPECT_NE(out.find("cluster port: refused a peer at 10.77.0.1:"), std::string::npos) << out;
  EXPECT_NE(out.find("store server: refused a client at 10.77.0.1:"), std::string::npos) << out;
  struct stat st {};
  ASSERT_EQ(::stat(D("run/cluster.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

}  // namespace
}  // namespace holdfast
