// A whole Supervisor on a fake clock: real rank processes (/bin/sh scripts),
// the real control socket, cluster port and lineage.db, but every timer from a
// FakeTimerFactory. The test drives the event loop itself: each turn handles
// whatever I/O and child exits are ready (waiting a few milliseconds for
// them), then moves the fake clock one poll. A backoff, a kill grace or a
// startup timeout passes only when the test moves the clock past it — nothing
// here waits for time to pass.
#include "daemon/supervisor.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include <boost/asio.hpp>
#include <gtest/gtest.h>

#include "common/peer_auth.h"
#include "daemon/cluster_protocol.h"
#include "daemon/control_protocol.h"
#include "daemon/unix_socket_address.h"
#include "daemon/exit_codes.h"
#include "lineage/lineage_db.h"
#include "scheduler/recording_scheduler.h"
#include "tests/support/subprocess.h"

namespace holdfast {
namespace {

using testing::TempDir;

// A rank: records that it started (started.GEN.RANK holds its pid), ignores
// SIGUSR2 (a checkpoint request: it has nothing to save) and runs until
// stopped, unless `crash` (a shell condition) holds: then it SIGKILLs itself.
std::vector<std::string> RankScript(const std::string& dir, const std::string& crash = "false") {
  return {"/bin/sh", "-c",
          "trap '' USR2; echo $$ > " + dir + "/started.$HOLDFAST_GENERATION.$HOLDFAST_RANK; if " + crash +
              "; then kill -KILL $$; fi; while :; do sleep 0.05; done"};
}

// The process state letter of `pid` ('Z' once it has exited and is not reaped).
char ProcStateLetter(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() ? '?' : stat[paren + 2];
}

class SupervisorTest : public ::testing::Test {
 protected:
  SupervisorTest() : dir_("supervisor"), timers_(&clock_) {
    job_.name = "fake-clock";
    job_.nproc = 2;
    job_.supervise.poll_ms = 100;
    job_.supervise.startup_timeout_s = 3600;  // the ranks write no progress record
    job_.supervise.hang_min_s = 3600;
    job_.supervise.restart_budget = 2;
    job_.supervise.backoff_initial_s = 60;  // a restart waits a fake minute
    job_.supervise.backoff_max_s = 60;
    job_.supervise.term_grace_s = 5;
    job_.supervise.node_timeout_s = 0;
    job_.supervise.progress_dir = dir_ / "shm";
    job_.supervise.health_prelaunch = false;
    job_.supervise.health_poll_s = 0;
    job_.command = RankScript(dir_.path());
  }

  ~SupervisorTest() override {
    supervisor_.reset();  // its ranks get SIGKILL with the group (RankGroup's destructor)
  }

  Status Start(int nodes = 1) {
    Allocation alloc;
    for (int n = 0; n < nodes; ++n) alloc.nodes.push_back({"node-" + std::to_string(n), "127.0.0.1"});
    scheduler_ = std::make_unique<RecordingScheduler>(alloc, SchedulerCapabilities{});  // like a local machine
    SupervisorOptions o;
    o.run_dir = dir_ / "run";
    o.job = job_;
    o.allocation = alloc;
    supervisor_ = std::make_unique<Supervisor>(&io_, std::move(o), scheduler_.get(), &clock_, &timers_);
    return supervisor_->Start();
  }

  // One turn of the loop: what is ready now, else what becomes ready within 1 ms.
  void Turn() {
    if (io_.poll() == 0) io_.run_for(std::chrono::milliseconds(1));
  }

  // Turns the loop, moving the fake clock one poll each turn, until `done`
  // holds or the daemon's loop has ended. A backstop bounds a run that never
  // gets there (a failed EXPECT says what was awaited).
  bool Drive(const std::function<bool()>& done, const std::string& what) {
    for (int turn = 0; turn < 20000; ++turn) {
      if (done()) return true;
      if (io_.stopped()) break;
      Turn();
      timers_.Advance(job_.supervise.poll_ms / 1000.0);
    }
    if (done()) return true;
    ADD_FAILURE() << "never got there: " << what;
    return false;
  }
  void DriveToEnd() { Drive([&] { return io_.stopped(); }, "the daemon's loop ends"); }

  // ---- a follower of our own, on the loop's thread ----
  // Connects to the published cluster port.
  boost::asio::ip::tcp::socket ConnectToLeader() {
    EXPECT_EQ(scheduler_->published().size(), 1u);
    const std::string leader = scheduler_->published().at(0);
    const size_t colon = leader.rfind(':');
    boost::asio::ip::tcp::socket s(io_);
    s.connect({boost::asio::ip::make_address(leader.substr(0, colon)),
               static_cast<uint16_t>(std::stoi(leader.substr(colon + 1)))});
    return s;
  }
  // The next whole line the leader sent on `s` (the loop turns meanwhile); "" when it closed first.
  std::string ReadLine(boost::asio::ip::tcp::socket& s, std::string* inbox) {
    s.non_blocking(true);
    bool closed = false;
    Drive(
        [&] {
          char buf[4096];
          boost::system::error_code ec;
          const size_t n = s.read_some(boost::asio::buffer(buf), ec);
          if (!ec) inbox->append(buf, n);
          closed = ec && ec != boost::asio::error::would_block;
          return inbox->find('\n') != std::string::npos || closed;
        },
        "a line from the leader");
    const size_t nl = inbox->find('\n');
    if (nl == std::string::npos) return "";
    std::string line = inbox->substr(0, nl);
    inbox->erase(0, nl + 1);
    return line;
  }
  template <typename M>
  M ExpectFromLeader(boost::asio::ip::tcp::socket& s, std::string* inbox) {
    const std::string line = ReadLine(s, inbox);
    auto m = ParseClusterMessage(line, clock_.MonotonicNs());
    EXPECT_TRUE(m.ok() && std::holds_alternative<M>(*m)) << line;
    return m.ok() && std::holds_alternative<M>(*m) ? std::get<M>(*m) : M{};
  }
  // Answers the leader's challenge with a hello for node 1 proved with `key`.
  void SendHello(boost::asio::ip::tcp::socket& s, std::string* inbox, const RunKey& key) {
    const ChallengeMsg challenge = ExpectFromLeader<ChallengeMsg>(s, inbox);
    HelloMsg hello;
    hello.node = 1;
    hello.host = "node-1";
    hello.pid = getpid();
    hello.nproc = 1;
    hello.nonce = std::string(kAuthNonceBytes, 'f');
    hello.proof = key.Proof(kClusterFollowerLabel, challenge.nonce, hello.nonce);
    boost::asio::write(s, boost::asio::buffer(EncodeClusterMessage(hello, clock_.MonotonicNs())));
  }
  RunKey TheRunsKey() {
    Result<RunKey> k = ReadRunKey(RunKeyPath(dir_ / "run"));
    EXPECT_TRUE(k.ok()) << k.status().ToString();
    return k.ok() ? *k : *RunKey::Generate();
  }

  // ---- a runctl of our own, on the loop's thread ----
  // Connects and sends `line`; the daemon answers when the loop turns.
  int SendControl(const std::string& line) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const std::string path = ControlSocketPath(dir_ / "run");
    Result<UnixSocketAddress> addr = UnixSocketAddress::For(path);
    EXPECT_TRUE(addr.ok()) << addr.status().ToString();
    if (addr.ok()) {
      EXPECT_EQ(::connect(fd, addr->addr(), addr->size()), 0) << path;
    }
    const std::string out = line + "\n";
    EXPECT_EQ(::write(fd, out.data(), out.size()), static_cast<ssize_t>(out.size()));
    return fd;
  }
  // Turns the loop (the clock stands still) until the daemon's answer on `fd` is complete.
  ControlResponse Answer(int fd) {
    std::string reply;
    for (int turn = 0; turn < 20000 && reply.find('\n') == std::string::npos; ++turn) {
      Turn();
      char buf[65536];
      const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) reply.append(buf, static_cast<size_t>(n));
      if (n == 0) break;
    }
    ::close(fd);
    auto resp = ParseControlResponse(reply);
    EXPECT_TRUE(resp.ok()) << "reply: " << reply;
    return resp.ok() ? *resp : ControlResponse{};
  }
  ControlResponse Call(const std::string& op) {
    return Answer(SendControl(R"({"v":1,"id":1,"op":")" + op + R"("})"));
  }
  RunStatus GetStatus() {
    const ControlResponse r = Call("status");
    auto st = ParseStatusResult(r.result_json);
    return st.ok() ? *st : RunStatus{};
  }

  // ---- what the run left ----
  bool Started(int generation, int rank) const {
    return std::filesystem::exists(dir_ / ("started." + std::to_string(generation) + "." + std::to_string(rank)));
  }
  pid_t PidOf(int generation, int rank) const {
    std::ifstream in(dir_ / ("started." + std::to_string(generation) + "." + std::to_string(rank)));
    pid_t pid = 0;
    in >> pid;
    return pid;
  }
  std::vector<EventRecord> Events() {
    LineageOptions o;
    o.read_only = true;
    auto db = LineageDb::Open(dir_ / "run/lineage.db", o);
    EXPECT_TRUE(db.ok());
    auto run = (*db)->FindRun("latest");
    EXPECT_TRUE(run.ok());
    auto ev = (*db)->Events(run->run_id, 0);
    EXPECT_TRUE(ev.ok());
    return *ev;
  }
  int CountEvents(const std::string& kind) {
    int n = 0;
    for (const EventRecord& e : Events()) n += e.kind == kind;
    return n;
  }

  TempDir dir_;
  JobConfig job_;
  boost::asio::io_context io_;
  FakeTimeSource clock_;
  FakeTimerFactory timers_;
  std::unique_ptr<RecordingScheduler> scheduler_;
  std::unique_ptr<Supervisor> supervisor_;
};

TEST_F(SupervisorTest, ALostFollowerEndsTheRunAsTheRecoveryPolicySaysForALocalMachine) {
  job_.nproc = 1;  // rank 0 here, rank 1 on node 1
  ASSERT_TRUE(Start(/*nodes=*/2).ok());
  ASSERT_EQ(scheduler_->published().size(), 1u);
  const std::string leader = scheduler_->published()[0];
  EXPECT_FALSE(Started(0, 0)) << "generation 0 waits for every follower";

  // A follower of our own: joins as node 1, reads its start, then is gone.
  boost::asio::ip::tcp::socket follower = ConnectToLeader();
  std::string from_leader;
  SendHello(follower, &from_leader, TheRunsKey());
  const WelcomeMsg welcome = ExpectFromLeader<WelcomeMsg>(follower, &from_leader);
  EXPECT_EQ(welcome.proof.size(), kAuthProofBytes);
  ASSERT_TRUE(Drive(
      [&] {
        char buf[4096];
        boost::system::error_code ec;
        if (follower.available(ec) > 0) from_leader.append(buf, follower.read_some(boost::asio::buffer(buf), ec));
        return from_leader.find('\n') != std::string::npos && Started(0, 0);
      },
      "node 1 is told to start generation 0 and rank 0 starts here"));
  auto start = ParseClusterMessage(from_leader.substr(0, from_leader.find('\n')), clock_.MonotonicNs());
  ASSERT_TRUE(start.ok()) << from_leader;
  ASSERT_TRUE(std::holds_alternative<StartMsg>(*start)) << from_leader;
  EXPECT_EQ(std::get<StartMsg>(*start).ranks.size(), 1u);
  EXPECT_EQ(std::get<StartMsg>(*start).ranks[0].global_rank, 1);

  follower.close();
  DriveToEnd();
  EXPECT_EQ(supervisor_->exit_code(), kDaemonExitFailed) << "no requeue on a local machine: the run stops, failed";
  EXPECT_EQ(CountEvents("node_lost"), 1);
  EXPECT_TRUE(scheduler_->requeues().empty());
  EXPECT_FALSE(Started(1, 0)) << "no restart without the lost node";
}

// Trust (docs/cluster-protocol.md): a peer without the run's key is refused
// on the cluster port, and the run does not notice: the real follower then
// joins as node 1 and generation 0 starts.
TEST_F(SupervisorTest, AWouldBeFollowerWithoutTheRunsKeyIsRefusedAndTheRunGoesOn) {
  job_.nproc = 1;
  ASSERT_TRUE(Start(/*nodes=*/2).ok());
  struct stat st {};
  ASSERT_EQ(::stat(RunKeyPath(dir_ / "run").c_str(), &st), 0) << "the leader made the run's key";
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  boost::asio::ip::tcp::socket intruder = ConnectToLeader();
  std::string inbox;
  SendHello(intruder, &inbox, *RunKey::Generate());
  const RejectMsg reject = ExpectFromLeader<RejectMsg>(intruder, &inbox);
  EXPECT_NE(reject.why.find("does not prove it holds the run's key"), std::string::npos) << reject.why;
  EXPECT_EQ(ReadLine(intruder, &inbox), "") << "the leader hangs up on it";

  // Something that is not holdfast at all: refused too.
  boost::asio::ip::tcp::socket scanner = ConnectToLeader();
  std::string junk;
  ExpectFromLeader<ChallengeMsg>(scanner, &junk);
  boost::asio::write(scanner, boost::asio::buffer(std::string("GET / HTTP/1.0\r\n\r\n")));
  EXPECT_NE(ReadLine(scanner, &junk).find("reject"), std::string::npos);

  EXPECT_FALSE(Started(0, 0)) << "refused peers are no node: generation 0 still waits for node 1";
  EXPECT_EQ(CountEvents("node_lost"), 0);
  boost::asio::ip::tcp::socket follower = ConnectToLeader();
  std::string from_leader;
  SendHello(follower, &from_leader, TheRunsKey());
  ExpectFromLeader<WelcomeMsg>(follower, &from_leader);
  const StartMsg start = ExpectFromLeader<StartMsg>(follower, &from_leader);
  EXPECT_EQ(start.spec.generation, 0);
  ASSERT_TRUE(Drive([&] { return Started(0, 0); }, "rank 0 starts once the real node 1 joined"));
  EXPECT_EQ(GetStatus().state, "running");
  ASSERT_TRUE(Call("stop").ok);
  follower.close();
  DriveToEnd();
  EXPECT_EQ(CountEvents("crash"), 0) << "the refused peers caused no incident";
}

TEST_F(SupervisorTest, AStopDuringARestartBackoffCancelsTheRestart) {
  job_.command = RankScript(dir_.path(), "[ $HOLDFAST_GENERATION = 0 ] && [ $HOLDFAST_RANK = 0 ]");
  ASSERT_TRUE(Start().ok());
  ASSERT_TRUE(Drive([&] { return GetStatus().state == "restarting"; }, "rank 0's crash puts the run in backoff"));
  EXPECT_EQ(CountEvents("crash"), 1);
  EXPECT_FALSE(Started(1, 0));

  const ControlResponse stop = Call("stop");
  ASSERT_TRUE(stop.ok) << stop.error.ToString();
  EXPECT_EQ(stop.result_json, R"({"stopping":true})");
  // Move the clock well past the backoff: the cancelled restart must not fire.
  timers_.Advance(job_.supervise.backoff_max_s * 2);
  DriveToEnd();
  EXPECT_EQ(supervisor_->exit_code(), kDaemonExitStopped);
  EXPECT_FALSE(Started(1, 0)) << "a stopped run starts no new generation";
  EXPECT_FALSE(Started(1, 1));
}

TEST_F(SupervisorTest, ACheckpointRequestRacingACrashIsAnsweredConsistentlyAndTheCrashRestartsOnce) {
  ASSERT_TRUE(Start().ok());
  ASSERT_TRUE(Drive([&] { return Started(0, 0) && Started(0, 1) && GetStatus().state == "running"; },
                    "generation 0 runs"));
  const pid_t victim = PidOf(0, 0);
  ASSERT_GT(victim, 0);

  // The request and rank 0's death reach the daemon in one turn of its loop.
  const int fd = SendControl(R"({"v":1,"id":5,"op":"checkpoint"})");
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  while (ProcStateLetter(victim) != 'Z') std::this_thread::yield();  // dead, not reaped: the daemon reaps it
  io_.poll();
  const ControlResponse r = Answer(fd);
  if (r.ok) {
    EXPECT_NE(r.result_json.find("\"requested_at_step\":0"), std::string::npos) << r.result_json;
  } else {
    EXPECT_EQ(r.error_code, "FailedPrecondition");
    EXPECT_EQ(r.error.message(), "no ranks are running right now");
  }

  ASSERT_TRUE(Drive([&] { return Started(1, 0) && Started(1, 1) && GetStatus().state == "running"; },
                    "the crash restarts generation 1"));
  const RunStatus st = GetStatus();
  EXPECT_EQ(st.generation, 1);
  EXPECT_EQ(st.restarts_used, 1);
  EXPECT_EQ(CountEvents("crash"), 1) << "one crash, whatever the checkpoint request's answer";

  ASSERT_TRUE(Call("stop").ok);
  DriveToEnd();
  EXPECT_EQ(supervisor_->exit_code(), kDaemonExitStopped);
  EXPECT_FALSE(Started(2, 0));
}

}  // namespace
}  // namespace holdfast
