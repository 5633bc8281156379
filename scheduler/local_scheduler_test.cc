#include "scheduler/local_scheduler.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

namespace holdfast {
namespace {

using std::chrono::milliseconds;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "holdfast-sched-XXXXXX").string();
    HF_CHECK(mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteAll(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// Polls `done` every 10 ms for up to 20 s (a bound for a broken build, not a
// timing assertion). Returns whether it became true.
bool WaitUntil(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

std::string MachineName() {
  char buf[HOST_NAME_MAX + 1] = {};
  HF_CHECK(gethostname(buf, sizeof(buf) - 1) == 0);
  return buf;
}

// A child process that runs until Stop(); it can be made a zombie (exited,
// not reaped) or reaped.
class Sleeper {
 public:
  Sleeper() {
    int fds[2];
    HF_CHECK(pipe(fds) == 0);
    pid_ = fork();
    HF_CHECK(pid_ >= 0);
    if (pid_ == 0) {
      close(fds[1]);
      char c;
      while (read(fds[0], &c, 1) < 0 && errno == EINTR) {
      }
      _exit(0);
    }
    close(fds[0]);
    write_end_ = fds[1];
  }
  ~Sleeper() {
    Exit();
    Reap();
  }
  int pid() const { return pid_; }
  // Makes it exit; it stays a zombie until Reap().
  void Exit() {
    if (write_end_ >= 0) close(write_end_);
    write_end_ = -1;
  }
  void Reap() {
    if (reaped_) return;
    Exit();
    waitpid(pid_, nullptr, 0);
    reaped_ = true;
  }

 private:
  int pid_ = -1;
  int write_end_ = -1;
  bool reaped_ = false;
};

class LocalSchedulerTest : public ::testing::Test {
 protected:
  LocalSchedulerOptions Options(int nodes = 1, int node_id = 0) const {
    LocalSchedulerOptions o;
    o.run_dir = dir_.path();
    o.nodes = nodes;
    o.node_id = node_id;
    return o;
  }
  TempDir dir_;
};

// ---- discovery ----

TEST_F(LocalSchedulerTest, OneNodeIsThisMachineOnLoopback) {
  LocalScheduler s(Options());
  EXPECT_STREQ(s.name(), "local");
  Result<Allocation> a = s.Discover();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->scheduler, SchedulerKind::kLocal);
  EXPECT_EQ(a->job_id, "");
  EXPECT_EQ(a->restart_count, 0);
  ASSERT_EQ(a->nodes.size(), 1u);
  EXPECT_EQ(a->nodes[0].host, MachineName());
  EXPECT_EQ(a->nodes[0].addr, "127.0.0.1");
  EXPECT_TRUE(a->leader());
  EXPECT_EQ(a->self().host, MachineName());
}

TEST_F(LocalSchedulerTest, SeveralDaemonsOnOneMachineAreDistinctHosts) {
  LocalScheduler s(Options(3, 1));
  Result<Allocation> a = s.Discover();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const std::string m = MachineName();
  EXPECT_EQ(a->hosts(), (std::vector<std::string>{m + "-n0", m + "-n1", m + "-n2"}));
  EXPECT_EQ(a->this_node, 1);
  EXPECT_FALSE(a->leader());
  EXPECT_EQ(a->self().host, m + "-n1");
  for (const NodeInfo& n : a->nodes) EXPECT_EQ(n.addr, "127.0.0.1") << n.host;
}

TEST_F(LocalSchedulerTest, HostAndAddrNameThisNodeOnly) {
  LocalSchedulerOptions o = Options(2, 1);
  o.host = "box-b";
  o.addr = "10.0.0.6";
  o.leader = "10.0.0.5:29400";
  LocalScheduler s(o);
  Result<Allocation> a = s.Discover();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->self().host, "box-b");
  EXPECT_EQ(a->self().addr, "10.0.0.6");
  EXPECT_EQ(a->nodes[0].host, MachineName() + "-n0");  // the other node keeps the default name
  EXPECT_EQ(a->nodes[0].addr, "10.0.0.5");              // from --leader
}

TEST_F(LocalSchedulerTest, LoopbackLeaderKeepsTheRunLocal) {
  LocalSchedulerOptions o = Options(2, 1);
  o.leader = "127.0.0.1:29400";
  Result<Allocation> a = LocalScheduler(o).Discover();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->self().addr, "127.0.0.1");
  EXPECT_EQ(a->nodes[0].addr, "127.0.0.1");
}

TEST_F(LocalSchedulerTest, BadFlagsSayWhatToFix) {
  struct Case {
    const char* what;
    std::function<void(LocalSchedulerOptions*)> edit;
    const char* mentions;
  };
  const std::vector<Case> cases = {
      {"no nodes", [](LocalSchedulerOptions* o) { o->nodes = 0; }, "--nodes must be at least 1"},
      {"node id past the end", [](LocalSchedulerOptions* o) { o->nodes = 2, o->node_id = 2; }, "--node-id 2 must be in 0..1"},
      {"negative node id", [](LocalSchedulerOptions* o) { o->node_id = -1; }, "--node-id -1"},
      {"no run dir", [](LocalSchedulerOptions* o) { o->run_dir.clear(); }, "--run-dir is required"},
      {"leader without port", [](LocalSchedulerOptions* o) { o->leader = "gpu-a17"; }, "--leader 'gpu-a17' is not host:port"},
      {"leader port 0", [](LocalSchedulerOptions* o) { o->leader = "gpu-a17:0"; }, "is not host:port"},
      {"leader port too big", [](LocalSchedulerOptions* o) { o->leader = "gpu-a17:70000"; }, "is not host:port"},
      {"host with a space", [](LocalSchedulerOptions* o) { o->host = "my box"; }, "--host 'my box' must not contain spaces"},
      {"host taken by another node",
       [](LocalSchedulerOptions* o) { o->nodes = 2, o->node_id = 1, o->host = MachineName() + "-n0", o->addr = "127.0.0.1"; },
       "choose another --host"},
      {"machines apart, no addr", [](LocalSchedulerOptions* o) { o->nodes = 2, o->node_id = 1, o->host = "box-b"; },
       "--addr is required"},
      {"remote leader, no addr", [](LocalSchedulerOptions* o) { o->nodes = 2, o->node_id = 1, o->leader = "10.0.0.5:29400"; },
       "--addr is required"},
  };
  for (const Case& c : cases) {
    LocalSchedulerOptions o = Options();
    c.edit(&o);
    Result<Allocation> a = LocalScheduler(o).Discover();
    ASSERT_FALSE(a.ok()) << c.what;
    EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(a.status().message().find(c.mentions), std::string::npos) << c.what << ": " << a.status().message();
  }
}

TEST_F(LocalSchedulerTest, OffersNoQueueExclusionOrDrainToThePolicy) {
  LocalScheduler s(Options());
  SchedulerCapabilities caps = s.capabilities();
  EXPECT_FALSE(caps.requeue) << "no queue: the policy stops instead (runctl resume relaunches)";
  EXPECT_FALSE(caps.exclude_hosts);
  EXPECT_FALSE(caps.drain);
  Status d = s.Drain("gpu-a17", "xid 79");
  EXPECT_EQ(d.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(d.message().find("the local scheduler cannot drain hosts"), std::string::npos) << d.message();
}

// ---- leader address ----

TEST_F(LocalSchedulerTest, FollowerFindsThePublishedLeader) {
  LocalScheduler leader(Options(2, 0));
  ASSERT_TRUE(leader.PublishLeader("127.0.0.1:4242").ok());
  Result<uint64_t> start = ProcessStartTime(static_cast<int>(getpid()));
  ASSERT_TRUE(start.ok());
  char machine[256] = {};
  gethostname(machine, sizeof(machine) - 1);
  EXPECT_EQ(ReadAll(dir_ / "cluster.addr"), "127.0.0.1:4242 " + std::to_string(getpid()) + " " +
                                                std::to_string(*start) + " " + machine + "\n");
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_.path())) {
    ++files;
    (void)e;
  }
  EXPECT_EQ(files, 1) << "no temporary file left behind";

  LocalScheduler follower(Options(2, 1));
  Result<std::string> found = follower.FindLeader(milliseconds(5000));
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(*found, "127.0.0.1:4242");
}

TEST_F(LocalSchedulerTest, FollowerWaitsForTheLeaderToPublish) {
  LocalScheduler leader(Options(2, 0));
  LocalScheduler follower(Options(2, 1));
  std::thread publisher([&] { ASSERT_TRUE(leader.PublishLeader("127.0.0.1:5151").ok()); });
  Result<std::string> found = follower.FindLeader(milliseconds(20000));
  publisher.join();
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(*found, "127.0.0.1:5151");
}

TEST_F(LocalSchedulerTest, LeaderFlagNeedsNoFile) {
  LocalSchedulerOptions o = Options(2, 1);
  o.leader = "127.0.0.1:29400";
  Result<std::string> found = LocalScheduler(o).FindLeader(milliseconds(0));
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(*found, "127.0.0.1:29400");
}

TEST_F(LocalSchedulerTest, NothingPublishedTimesOutNamingTheFile) {
  Result<std::string> found = LocalScheduler(Options(2, 1)).FindLeader(milliseconds(150));
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.status().code(), StatusCode::kTimeout);
  const std::string& m = found.status().message();
  EXPECT_NE(m.find(dir_ / "cluster.addr"), std::string::npos) << m;
  EXPECT_NE(m.find("does not exist"), std::string::npos) << m;
  EXPECT_NE(m.find("--leader host:port"), std::string::npos) << m;
}

TEST_F(LocalSchedulerTest, DeadLeadersAddressIsIgnoredAndALiveOneFound) {
  Sleeper old_leader;
  Result<uint64_t> start = ProcessStartTime(old_leader.pid());
  ASSERT_TRUE(start.ok()) << start.status().ToString();
  old_leader.Exit();
  // Exited but not reaped: a zombie is dead too.
  ASSERT_TRUE(WaitUntil([&] { return !ProcessStartTime(old_leader.pid()).ok(); }));
  WriteAll(dir_ / "cluster.addr", FormatLeaderStamp({"127.0.0.1:1111", old_leader.pid(), *start, ""}));

  LocalScheduler follower(Options(2, 1));
  Result<std::string> found = follower.FindLeader(milliseconds(150));
  ASSERT_FALSE(found.ok()) << "found " << *found;
  EXPECT_EQ(found.status().code(), StatusCode::kTimeout);
  EXPECT_NE(found.status().message().find("not running"), std::string::npos) << found.status().message();

  old_leader.Reap();
  EXPECT_FALSE(follower.FindLeader(milliseconds(0)).ok());

  Sleeper live_leader;
  Result<uint64_t> live_start = ProcessStartTime(live_leader.pid());
  ASSERT_TRUE(live_start.ok());
  WriteAll(dir_ / "cluster.addr", FormatLeaderStamp({"127.0.0.1:2222", live_leader.pid(), *live_start, ""}));
  found = follower.FindLeader(milliseconds(5000));
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(*found, "127.0.0.1:2222");
}

TEST_F(LocalSchedulerTest, ReusedPidIsNotTheLeader) {
  Result<uint64_t> start = ProcessStartTime(static_cast<int>(getpid()));
  ASSERT_TRUE(start.ok());
  // Our pid, but another process's start time: the leader died and its pid was reused.
  WriteAll(dir_ / "cluster.addr", FormatLeaderStamp({"127.0.0.1:1111", static_cast<int>(getpid()), *start + 1, ""}));
  Result<std::string> found = LocalScheduler(Options(2, 1)).FindLeader(milliseconds(150));
  ASSERT_FALSE(found.ok());
  EXPECT_NE(found.status().message().find("pid was reused"), std::string::npos) << found.status().message();
}

TEST_F(LocalSchedulerTest, UnstampedAddressIsIgnored) {
  WriteAll(dir_ / "cluster.addr", "127.0.0.1:1111\n");  // an older holdfastd's format: liveness unknown
  Result<std::string> found = LocalScheduler(Options(2, 1)).FindLeader(milliseconds(150));
  ASSERT_FALSE(found.ok());
  EXPECT_NE(found.status().message().find("not 'ADDR PID STARTTIME'"), std::string::npos) << found.status().message();
}

TEST_F(LocalSchedulerTest, WithdrawRemovesOnlyOurOwnAddress) {
  LocalScheduler leader(Options(2, 0));
  ASSERT_TRUE(leader.PublishLeader("127.0.0.1:4242").ok());
  leader.WithdrawLeader();
  EXPECT_FALSE(std::filesystem::exists(dir_ / "cluster.addr"));
  EXPECT_FALSE(LocalScheduler(Options(2, 1)).FindLeader(milliseconds(0)).ok());

  // A newer leader (another process) has published since: not ours to remove.
  Sleeper newer;
  Result<uint64_t> start = ProcessStartTime(newer.pid());
  ASSERT_TRUE(start.ok());
  WriteAll(dir_ / "cluster.addr", FormatLeaderStamp({"127.0.0.1:3333", newer.pid(), *start, ""}));
  leader.WithdrawLeader();
  Result<std::string> found = LocalScheduler(Options(2, 1)).FindLeader(milliseconds(0));
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(*found, "127.0.0.1:3333");
}

TEST_F(LocalSchedulerTest, PublishRejectsAnAddressWithSpaces) {
  Status s = LocalScheduler(Options()).PublishLeader("127.0.0.1 4242");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

TEST(LeaderStampTest, RoundTripsAndRejectsJunk) {
  Result<LeaderStamp> s = ParseLeaderStamp(FormatLeaderStamp({"[::1]:9", 42, 1234567, ""}));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->addr, "[::1]:9");
  EXPECT_EQ(s->pid, 42);
  EXPECT_EQ(s->start_time, 1234567u);
  Result<LeaderStamp> m = ParseLeaderStamp(FormatLeaderStamp({"10.0.0.1:9", 42, 7, "gpu-a17"}));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->machine, "gpu-a17");
  for (const char* junk : {"", "127.0.0.1:9", "127.0.0.1:9 x 1", "127.0.0.1:9 1 2 3 4", "127.0.0.1:9 0 5"}) {
    EXPECT_FALSE(ParseLeaderStamp(junk).ok()) << junk;
  }
  EXPECT_FALSE(ProcessStartTime(0).ok());
  // A pid of another machine cannot be checked here: the stamp is taken, the connect decides.
  EXPECT_TRUE(LeaderStampIsLive({"10.0.0.1:9", 999999, 1, "some-other-machine"}));
  EXPECT_FALSE(LeaderStampIsLive({"10.0.0.1:9", 999999, 1, ""})) << "an unknown machine is this one";
  EXPECT_TRUE(ProcessStartTime(static_cast<int>(getpid())).ok());
}

// ---- relaunch ----

TEST_F(LocalSchedulerTest, RequeueOfAMissingBinaryIsAClearError) {
  LocalSchedulerOptions o = Options();
  o.daemon_path = dir_ / "no-such-holdfastd";
  Status s = LocalScheduler(o).Requeue("run-7", {}, "rank 3 crashed twice");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot relaunch holdfastd for run run-7"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("cannot execute " + o.daemon_path + ": No such file or directory"), std::string::npos)
      << s.message();
  // The reason is on record in the relaunch log all the same.
  EXPECT_NE(ReadAll(dir_ / "logs/holdfastd-relaunch.log").find("resume run run-7: rank 3 crashed twice"),
            std::string::npos);
}

TEST_F(LocalSchedulerTest, RequeueOfANonExecutableFileIsAClearError) {
  LocalSchedulerOptions o = Options();
  o.daemon_path = dir_ / "holdfastd.txt";
  WriteAll(o.daemon_path, "not a program\n");
  Status s = LocalScheduler(o).Requeue("run-7", {}, "");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot execute " + o.daemon_path + ": Permission denied"), std::string::npos)
      << s.message();
}

TEST_F(LocalSchedulerTest, RequeueCannotExcludeHosts) {
  Status s = LocalScheduler(Options()).Requeue("run-7", {"gpu-a17"}, "xid 79");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("the local scheduler cannot exclude hosts"), std::string::npos) << s.message();
  EXPECT_FALSE(std::filesystem::exists(dir_ / "logs/holdfastd-relaunch.log")) << "nothing was relaunched";
}

TEST_F(LocalSchedulerTest, RequeueStartsTheDaemonToResumeTheRun) {
  LocalSchedulerOptions o = Options();
  o.daemon_path = dir_ / "fake-holdfastd";
  // Records its arguments ($2 is the run dir), then says something to the log.
  WriteAll(o.daemon_path,
           "#!/bin/sh\n"
           "echo \"$@\" > \"$2/args.tmp\" && mv \"$2/args.tmp\" \"$2/args\"\n"
           "echo fake holdfastd resuming\n");
  ASSERT_EQ(chmod(o.daemon_path.c_str(), 0755), 0);
  Status s = LocalScheduler(o).Requeue("run-7", {}, "preempted");
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(dir_ / "args"); }));
  EXPECT_EQ(ReadAll(dir_ / "args"), "--run-dir " + dir_.path() + " --resume run-7 --wait-for-lock\n");
  const std::string log = dir_ / "logs/holdfastd-relaunch.log";
  ASSERT_TRUE(WaitUntil([&] { return ReadAll(log).find("fake holdfastd resuming") != std::string::npos; }));
  EXPECT_NE(ReadAll(log).find("resume run run-7: preempted"), std::string::npos) << ReadAll(log);
}

TEST_F(LocalSchedulerTest, RequeueOfAFollowerRelaunchesThatNode) {
  LocalSchedulerOptions o = Options(2, 1);
  o.host = "box-b";
  o.addr = "10.0.0.6";
  o.leader = "10.0.0.5:29400";
  o.daemon_path = dir_ / "fake-holdfastd";
  WriteAll(o.daemon_path, "#!/bin/sh\necho \"$@\" > \"$2/args.tmp\" && mv \"$2/args.tmp\" \"$2/args\"\n");
  ASSERT_EQ(chmod(o.daemon_path.c_str(), 0755), 0);
  Status s = LocalScheduler(o).Requeue("run-7", {}, "preempted");
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(dir_ / "args"); }));
  EXPECT_EQ(ReadAll(dir_ / "args"), "--run-dir " + dir_.path() +
                                        " --resume run-7 --wait-for-lock --nodes 2 --node-id 1 --host box-b "
                                        "--addr 10.0.0.6\n");
}

TEST_F(LocalSchedulerTest, DetachedProgramRunsApartFromUs) {
  // An fd this process leaves open across exec: the detached program must not get it.
  const int leaky = open("/dev/null", O_RDONLY);
  ASSERT_GE(leaky, 0);
  ASSERT_EQ(dup2(leaky, 200), 200);
  close(leaky);
  const std::string marker = dir_ / "marker";
  const std::string script =
      "echo detached says hi; "
      "{ cat /proc/$$/stat; readlink /proc/$$/fd/0; "
      "if [ -e /proc/$$/fd/200 ]; then echo fd200-leaked; else echo fd200-closed; fi; } > " +
      marker + ".tmp && mv " + marker + ".tmp " + marker;
  Status s = StartDetachedDaemon("/bin/sh", {"-c", script}, dir_ / "detached.log");
  close(200);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(marker); }));

  std::istringstream lines(ReadAll(marker));
  std::string stat, stdin_target, fd200;
  std::getline(lines, stat);
  std::getline(lines, stdin_target);
  std::getline(lines, fd200);
  std::istringstream f(stat.substr(stat.rfind(')') + 2));
  std::string state;
  int ppid = 0, pgrp = 0, session = 0;
  f >> state >> ppid >> pgrp >> session;
  const int pid = std::stoi(stat);
  EXPECT_NE(ppid, static_cast<int>(getpid())) << "not our child";
  EXPECT_EQ(waitpid(pid, nullptr, WNOHANG), -1) << "not our child";
  EXPECT_NE(session, static_cast<int>(getsid(0))) << "in a session of its own";
  EXPECT_NE(pgrp, static_cast<int>(getpgrp()));
  EXPECT_EQ(stdin_target, "/dev/null");
  EXPECT_EQ(fd200, "fd200-closed");
  EXPECT_TRUE(WaitUntil([&] { return ReadAll(dir_ / "detached.log").find("detached says hi") != std::string::npos; }));
}

TEST_F(LocalSchedulerTest, DetachedStartWithAnUnwritableLogSaysSo) {
  Status s = StartDetachedDaemon("/bin/true", {}, dir_ / "no/such/dir/x.log");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot open the log " + (dir_ / "no/such/dir/x.log")), std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace holdfast
