// A whole Follower on a fake clock: a leader of the test's own (a TCP
// acceptor on the same loop, speaking the cluster protocol), real rank
// processes (/bin/sh), and every timer from a FakeTimerFactory. The kill
// grace after a stop passes only when the test moves the clock.
#include "daemon/follower.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <boost/asio.hpp>
#include <gtest/gtest.h>

#include "common/peer_auth.h"
#include "daemon/cluster_protocol.h"
#include "daemon/exit_codes.h"
#include "scheduler/recording_scheduler.h"
#include "tests/support/subprocess.h"

namespace holdfast {
namespace {

namespace asio = boost::asio;
using testing::TempDir;

class FollowerTest : public ::testing::Test {
 protected:
  FollowerTest() : dir_("follower"), timers_(&clock_), acceptor_(io_, {asio::ip::make_address("127.0.0.1"), 0}) {
    job_.name = "fake-clock";
    job_.nproc = 1;
    job_.supervise.poll_ms = 100;
    job_.supervise.startup_timeout_s = 3600;
    job_.supervise.term_grace_s = 5;
    job_.supervise.node_timeout_s = 0;
    job_.supervise.progress_dir = dir_ / "shm";
    job_.supervise.health_prelaunch = false;
    job_.supervise.health_poll_s = 0;
    Rank("");
  }

  // The rank: started.GEN.RANK says it ran; `traps` first (e.g. ignore TERM).
  void Rank(const std::string& traps) {
    job_.command = {"/bin/sh", "-c",
                    traps + " echo $$ > " + dir_.path() +
                        "/started.$HOLDFAST_GENERATION.$HOLDFAST_RANK; while :; do sleep 0.05; done"};
  }

  // Starts the follower (node 1 of 2) and accepts its connection as the
  // leader: the challenge, the follower's hello (its proof checked), and —
  // with `welcome` — the leader's welcome proving the run's key back.
  void Start(bool welcome = true) {
    std::filesystem::create_directories(dir_ / "run");
    Result<RunKey> key = EnsureRunKey(RunKeyPath(dir_ / "run"));
    ASSERT_TRUE(key.ok()) << key.status().ToString();
    key_ = *key;
    Launch();
    const HelloMsg hello = Expect<HelloMsg>("the follower's hello");
    EXPECT_EQ(hello.node, 1);
    EXPECT_EQ(hello.nproc, 1);
    EXPECT_TRUE(key_->Verify(kClusterFollowerLabel, challenge_, hello.nonce, hello.proof))
        << "the hello proves the run's key";
    if (welcome) SendToFollower(WelcomeMsg{key_->Proof(kClusterLeaderLabel, challenge_, hello.nonce), ""});
  }

  // Starts the follower; the test's leader accepts it and sends its challenge.
  void Launch() {
    Allocation alloc;
    alloc.nodes = {{"node-0", "127.0.0.1"}, {"node-1", "127.0.0.1"}};
    alloc.this_node = 1;
    scheduler_ = std::make_unique<RecordingScheduler>(alloc, SchedulerCapabilities{});
    scheduler_->set_leader_address("127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()));
    acceptor_.async_accept([this](const boost::system::error_code& e, asio::ip::tcp::socket s) {
      if (e) return;
      conn_.emplace(std::move(s));
      SendToFollower(ChallengeMsg{challenge_});
    });
    FollowerOptions o;
    o.run_dir = dir_ / "run";
    o.job = job_;
    o.allocation = alloc;
    follower_ = std::make_unique<Follower>(&io_, std::move(o), scheduler_.get(), &clock_, &timers_);
    ASSERT_TRUE(follower_->Start().ok());
  }

  void Turn() {
    if (io_.poll() == 0) io_.run_for(std::chrono::milliseconds(1));
  }
  // Turns the loop, the clock moving `step_s` a turn, until `done` or the loop ends.
  bool Drive(const std::function<bool()>& done, const std::string& what, double step_s) {
    for (int turn = 0; turn < 20000; ++turn) {
      if (done()) return true;
      if (io_.stopped()) break;
      Turn();
      timers_.Advance(step_s);
    }
    if (done()) return true;
    ADD_FAILURE() << "never got there: " << what;
    return false;
  }

  void SendToFollower(const ClusterMessage& m) {
    asio::write(*conn_, asio::buffer(EncodeClusterMessage(m, clock_.MonotonicNs())));
  }
  // Reads what the follower has sent so far into received_.
  void Pump() {
    if (!conn_) return;
    boost::system::error_code ec;
    char buf[65536];
    while (conn_->available(ec) > 0) inbox_.append(buf, conn_->read_some(asio::buffer(buf), ec));
    for (size_t nl; (nl = inbox_.find('\n')) != std::string::npos;) {
      auto m = ParseClusterMessage(inbox_.substr(0, nl), clock_.MonotonicNs());
      inbox_.erase(0, nl + 1);
      EXPECT_TRUE(m.ok()) << m.status().ToString();
      if (m.ok()) received_.push_back(*m);
    }
  }
  // The first message of type M the follower sent (taking it and those
  // before it off the list), turning the loop with the clock standing still.
  template <typename M>
  M Expect(const std::string& what) {
    std::optional<M> got;
    Drive(
        [&] {
          Pump();
          while (!got && !received_.empty()) {
            if (std::holds_alternative<M>(received_.front())) got = std::get<M>(received_.front());
            received_.erase(received_.begin());
          }
          return got.has_value();
        },
        what, 0);
    return got.value_or(M{});
  }
  template <typename M>
  int CountReceived() {
    Pump();
    int n = 0;
    for (const ClusterMessage& m : received_) n += std::holds_alternative<M>(m);
    return n;
  }

  void StartGeneration(int generation) {
    StartMsg m;
    m.spec.run_id = "20260101-f011ow";
    m.spec.generation = generation;
    m.spec.world_size = 2;
    m.spec.store_addr = "127.0.0.1:1";
    RankPlacement p;
    p.global_rank = 1;
    p.node = 1;
    p.host = "node-1";
    m.ranks = {p};
    SendToFollower(m);
    Drive([&] { return Started(generation, 1); }, "rank 1 starts", 0);
  }
  bool Started(int generation, int rank) const {
    return std::filesystem::exists(dir_ / ("started." + std::to_string(generation) + "." + std::to_string(rank)));
  }

  TempDir dir_;
  JobConfig job_;
  std::optional<RunKey> key_;  // RUN_DIR/cluster.key, as the leader made it
  const std::string challenge_ = std::string(kAuthNonceBytes, 'L');
  asio::io_context io_;
  FakeTimeSource clock_;
  FakeTimerFactory timers_;
  asio::ip::tcp::acceptor acceptor_;
  std::optional<asio::ip::tcp::socket> conn_;  // the follower, as the leader sees it
  std::string inbox_;                   // what the follower sent, not yet a whole line
  std::vector<ClusterMessage> received_;  // what it sent, not yet taken by Expect
  std::unique_ptr<RecordingScheduler> scheduler_;
  std::unique_ptr<Follower> follower_;
};

TEST_F(FollowerTest, ARankThatIgnoresTermIsKilledWhenTheGracePassesOnTheFakeClock) {
  Rank("trap '' TERM;");
  Start();
  StartGeneration(0);
  StopMsg stop;
  stop.generation = 0;
  stop.why = "test";
  stop.grace_s = 5;
  SendToFollower(stop);
  // The clock stands still: however often the loop turns, the grace has not passed.
  for (int turn = 0; turn < 50; ++turn) Turn();
  timers_.Advance(4.9);
  for (int turn = 0; turn < 50; ++turn) Turn();
  EXPECT_EQ(CountReceived<RankExitMsg>(), 0) << "killed before the grace passed";
  EXPECT_GT(CountReceived<ProgressMsg>(), 0) << "the follower kept reporting meanwhile";
  // The grace passes: SIGKILL, reported to the leader as this rank's exit.
  timers_.Advance(0.1);
  const RankExitMsg exit = Expect<RankExitMsg>("rank 1's exit after SIGKILL");
  EXPECT_EQ(exit.rank, 1);
  EXPECT_TRUE(WIFSIGNALED(exit.wstatus) && WTERMSIG(exit.wstatus) == SIGKILL) << exit.wstatus;
}

// Slurm's warning with a known lead time reaches every node's daemon (and
// every rank, which ignores it): the leader may use the lead time, so this
// node's ranks train on until the leader's stop.
class FollowerWarningTest : public FollowerTest {
 protected:
  void StartWithWarningMeaning(double lead_time_s = 120) {
    SignalMeaning m;
    m.preemption = true;
    m.warning = true;
    m.lead_time_s = lead_time_s;
    m.why = "Slurm's warning signal (SIGUSR1) to job 7 with 120 s left before its time limit";
    job_.supervise.preempt_margin_s = 15;
    Start();
    scheduler_->set_signal_meaning(SIGUSR1, m);
    StartGeneration(0);
    ASSERT_EQ(::kill(::getpid(), SIGUSR1), 0);  // what srun forwards to each holdfastd
    for (int turn = 0; turn < 50; ++turn) Turn();
  }
  // Turns the loop with the clock moving 1 s a turn, `seconds` in all.
  void Pass(int seconds) {
    for (int s = 0; s < seconds; ++s) {
      timers_.Advance(1.0);
      for (int turn = 0; turn < 3; ++turn) Turn();
    }
  }
};

TEST_F(FollowerWarningTest, TheRanksTrainOnUntilTheLeadersStop) {
  StartWithWarningMeaning();
  Pass(100);  // the fallback is 120 - 15 = 105 s away
  EXPECT_EQ(CountReceived<RankExitMsg>(), 0) << "the warning stopped this node's rank itself";
  StopMsg stop;
  stop.generation = 0;
  stop.why = "the warning's deadline";
  stop.grace_s = 300;
  SendToFollower(stop);
  const RankExitMsg exit = Expect<RankExitMsg>("rank 1's exit after the leader's stop");
  EXPECT_TRUE(WIFSIGNALED(exit.wstatus) && WTERMSIG(exit.wstatus) == SIGTERM) << exit.wstatus;
}

TEST_F(FollowerWarningTest, ALeaderThatNeverStopsThemLeavesTheRanksStoppedByTheirNodeBeforeTheLimit) {
  StartWithWarningMeaning();
  Pass(104);
  EXPECT_EQ(CountReceived<RankExitMsg>(), 0);
  Pass(2);
  const RankExitMsg exit = Expect<RankExitMsg>("rank 1's exit, stopped by its own node");
  EXPECT_TRUE(WIFSIGNALED(exit.wstatus) && WTERMSIG(exit.wstatus) == SIGTERM) << exit.wstatus;
}

// No lead time to use: the leader stops every rank at once, and so does this
// node — with SIGTERM, since its ranks ignore SIGUSR1.
TEST_F(FollowerWarningTest, WithoutALeadTimeTheRanksAreStoppedAtOnce) {
  StartWithWarningMeaning(-1);
  const RankExitMsg exit = Expect<RankExitMsg>("rank 1's exit on the warning");
  EXPECT_TRUE(WIFSIGNALED(exit.wstatus) && WTERMSIG(exit.wstatus) == SIGTERM) << exit.wstatus;
}

TEST_F(FollowerTest, LosingTheLeaderStopsTheRanksAndExitsWithTheLeadersFinishCode) {
  Start();
  StartGeneration(0);
  FinishMsg finish;
  finish.code = kDaemonExitStopped;
  finish.state = "stopped";
  SendToFollower(finish);
  conn_->close();
  Drive([&] { return io_.stopped(); }, "the follower leaves", 0.1);
  EXPECT_EQ(follower_->exit_code(), kDaemonExitStopped);
}

TEST_F(FollowerTest, LosingTheLeaderWithoutAFinishIsAFailure) {
  Start();
  StartGeneration(0);
  conn_->close();
  Drive([&] { return io_.stopped(); }, "the follower leaves", 0.1);
  EXPECT_EQ(follower_->exit_code(), kDaemonExitFailed);
}

// Trust: a leader that does not prove it holds the run's key is not one;
// the follower leaves without starting anything it says.
TEST_F(FollowerTest, ALeaderThatDoesNotProveTheRunsKeyIsLeftAndNothingStarts) {
  Start(/*welcome=*/false);
  SendToFollower(WelcomeMsg{std::string(kAuthProofBytes, 'x'), ""});
  StartMsg m;
  m.spec.run_id = "20260101-f011ow";
  m.spec.world_size = 2;
  m.spec.store_addr = "127.0.0.1:1";
  RankPlacement p;
  p.global_rank = 1;
  p.node = 1;
  p.host = "node-1";
  m.ranks = {p};
  SendToFollower(m);
  Drive([&] { return io_.stopped(); }, "the follower leaves", 0.1);
  EXPECT_EQ(follower_->exit_code(), kDaemonExitFailed);
  EXPECT_FALSE(Started(0, 1)) << "a start from an impostor ran a rank";
}

TEST_F(FollowerTest, AStartBeforeTheLeadersWelcomeIsRefused) {
  Start(/*welcome=*/false);
  StartMsg m;
  m.spec.run_id = "20260101-f011ow";
  m.spec.world_size = 2;
  m.spec.store_addr = "127.0.0.1:1";
  RankPlacement p;
  p.global_rank = 1;
  p.node = 1;
  p.host = "node-1";
  m.ranks = {p};
  SendToFollower(m);
  Drive([&] { return io_.stopped(); }, "the follower leaves", 0.1);
  EXPECT_EQ(follower_->exit_code(), kDaemonExitFailed);
  EXPECT_FALSE(Started(0, 1));
}

// Without RUN_DIR/cluster.key the follower waits for the leader to write it,
// then gives up at startup_timeout_s, saying what is missing.
TEST_F(FollowerTest, WithoutTheRunsKeyTheFollowerGivesUpAtTheStartupTimeout) {
  job_.supervise.startup_timeout_s = 5;
  Launch();
  Drive([&] { return io_.stopped(); }, "the follower gives up", 0.5);
  EXPECT_EQ(follower_->exit_code(), kDaemonExitFailed);
  EXPECT_FALSE(conn_.has_value()) << "it never dialled the leader without the key";
}

}  // namespace
}  // namespace holdfast
