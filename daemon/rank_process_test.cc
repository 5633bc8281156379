#include "daemon/rank_process.h"
#include "daemon/recovery_policy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/subprocess.h"

namespace holdfast {
namespace {

using ::holdfast::testing::ReadFile;
using ::holdfast::testing::TempDir;
using ::holdfast::testing::WriteFile;

RankSpawn Spawn(const TempDir& dir, std::vector<std::string> argv) {
  RankSpawn s;
  s.rank = 0;
  s.argv = std::move(argv);
  s.log_path = dir / "rank0.log";
  s.progress_path = dir / "rank0.rec";
  return s;
}

int WaitFor(pid_t pid) {
  int ws = 0;
  while (waitpid(pid, &ws, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return ws;
}

// This test process starts no children other than the ranks under test, so
// "no child left to reap" means the failed rank was reaped by Start.
bool NoChildLeft() {
  int ws = 0;
  return waitpid(-1, &ws, WNOHANG) < 0 && errno == ECHILD;
}

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(RankProcessTest, StartsTheCommandWithItsEnvironmentAndLogsItsOutput) {
  TempDir dir("rank_process");
  RankSpawn s = Spawn(dir, {"/bin/sh", "-c", "echo rank $HF_TEST_VALUE; pwd"});
  s.env["HF_TEST_VALUE"] = "seven";
  s.workdir = dir.path();
  auto proc = RankProcess::Start(s);
  ASSERT_TRUE(proc.ok()) << proc.status().ToString();
  const int ws = WaitFor((*proc)->pid());
  ASSERT_TRUE(WIFEXITED(ws));
  EXPECT_EQ(WEXITSTATUS(ws), 0);
  EXPECT_FALSE(IsExecFailureStatus(ws));
  EXPECT_EQ(ReadFile(s.log_path), "rank seven\n" + dir.path() + "\n");
}

// Slurm's warning signal reaches every process of the step: a rank starts with
// it ignored (the daemon decides when to stop), and a shell, which cannot trap
// a signal ignored on entry, survives it.
TEST(RankProcessTest, ARankStartsWithTheSchedulersWarningSignalIgnored) {
  TempDir dir("rank_process_usr1");
  RankSpawn s = Spawn(dir, {"/bin/sh", "-c", "kill -USR1 $$; echo still training"});
  auto proc = RankProcess::Start(s);
  ASSERT_TRUE(proc.ok()) << proc.status().ToString();
  const int ws = WaitFor((*proc)->pid());
  ASSERT_TRUE(WIFEXITED(ws)) << "the rank was killed by signal " << (WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
  EXPECT_EQ(WEXITSTATUS(ws), 0);
  EXPECT_EQ(ReadFile(s.log_path), "still training\n");
}

// A warm spare (spare_pool.h) keeps exactly the fd it is given across exec,
// close-on-exec or not, and no other; it has no progress record until assigned.
TEST(RankProcessTest, ASpareKeepsOnlyTheFdItIsGiven) {
  TempDir dir("rank_process_fd");
  int kept[2];
  int other[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, kept), 0);
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, other), 0);  // not close-on-exec: swept anyway
  RankSpawn s = Spawn(dir, {"/bin/sh", "-c",
                            "echo through >&$FD; if (echo x >&$OTHER) 2>/dev/null; then echo leaked; fi"});
  s.progress_path.clear();
  s.inherit_fd = kept[1];
  s.env["FD"] = std::to_string(kept[1]);
  s.env["OTHER"] = std::to_string(other[1]);
  auto proc = RankProcess::Start(s);
  ASSERT_TRUE(proc.ok()) << proc.status().ToString();
  ::close(kept[1]);
  const int ws = WaitFor((*proc)->pid());
  ASSERT_TRUE(WIFEXITED(ws));
  char buf[32] = {};
  ASSERT_GT(::read(kept[0], buf, sizeof buf - 1), 0);
  EXPECT_EQ(std::string(buf), "through\n");
  EXPECT_EQ(ReadFile(s.log_path), "");
  EXPECT_FALSE(std::filesystem::exists(dir / "rank0.rec"));
  EXPECT_EQ((*proc)->Progress().valid, false);
  // Assigned: its record exists now, for the rank it became.
  ASSERT_TRUE((*proc)->AssignRank(3, dir / "rank3.log", dir / "rank3.rec").ok());
  EXPECT_EQ((*proc)->rank(), 3);
  EXPECT_TRUE(std::filesystem::exists(dir / "rank3.rec"));
  for (int fd : {kept[0], other[0], other[1]}) ::close(fd);
}

TEST(RankProcessTest, MissingCommandIsAnErrorNamingItNotACrash) {
  TempDir dir("rank_process");
  RankSpawn s = Spawn(dir, {"/nonexistent/holdfast-train", "--config", "run.toml"});
  auto proc = RankProcess::Start(s);
  ASSERT_FALSE(proc.ok());
  EXPECT_EQ(proc.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(proc.status().message(),
            "holdfastd cannot execute '/nonexistent/holdfast-train': No such file or directory — fix [job] command "
            "in job.toml");
  EXPECT_TRUE(NoChildLeft());  // reaped: neither a zombie nor a "crashed rank" for the supervisor
  EXPECT_TRUE(Contains(ReadFile(s.log_path), "cannot execute '/nonexistent/holdfast-train'"));  // the log agrees
}

TEST(RankProcessTest, RelativeCommandIsResolvedInTheWorkdirAndNamedSo) {
  TempDir dir("rank_process");
  RankSpawn s = Spawn(dir, {"build/trainer/holdfast-train"});
  s.workdir = dir.path();
  auto proc = RankProcess::Start(s);
  ASSERT_FALSE(proc.ok());
  EXPECT_EQ(proc.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(proc.status().message(), "cannot execute 'build/trainer/holdfast-train' in workdir '" +
                                                    dir.path() + "': No such file or directory"))
      << proc.status().message();
  EXPECT_TRUE(NoChildLeft());
}

TEST(RankProcessTest, BareCommandNameSaysPathIsNotSearched) {
  TempDir dir("rank_process");
  auto proc = RankProcess::Start(Spawn(dir, {"python3"}));
  ASSERT_FALSE(proc.ok());
  EXPECT_TRUE(Contains(proc.status().message(), "not looked up in PATH")) << proc.status().message();
  EXPECT_TRUE(NoChildLeft());
}

TEST(RankProcessTest, NonExecutableCommandSaysPermissionDenied) {
  TempDir dir("rank_process");
  const std::string script = dir / "train.sh";
  WriteFile(script, "#!/bin/sh\necho hi\n");
  ASSERT_EQ(chmod(script.c_str(), 0644), 0);
  auto proc = RankProcess::Start(Spawn(dir, {script}));
  ASSERT_FALSE(proc.ok());
  EXPECT_EQ(proc.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(proc.status().message(), "holdfastd cannot execute '" + script + "': Permission denied"))
      << proc.status().message();
  EXPECT_TRUE(Contains(proc.status().message(), "fix [job] command in job.toml"));
  EXPECT_TRUE(NoChildLeft());
}

TEST(RankProcessTest, MissingInterpreterIsNotReportedAsAMissingScript) {
  TempDir dir("rank_process");
  const std::string script = dir / "train.py";
  WriteFile(script, "#!/nonexistent/python9\nprint('hi')\n");
  ASSERT_EQ(chmod(script.c_str(), 0755), 0);
  auto proc = RankProcess::Start(Spawn(dir, {script}));
  ASSERT_FALSE(proc.ok());
  EXPECT_TRUE(Contains(proc.status().message(), "#! interpreter")) << proc.status().message();
  EXPECT_TRUE(NoChildLeft());
}

TEST(RankProcessTest, MissingWorkdirIsAnErrorNamingIt) {
  TempDir dir("rank_process");
  RankSpawn s = Spawn(dir, {"/bin/true"});
  s.workdir = dir / "no-such-dir";
  auto proc = RankProcess::Start(s);
  ASSERT_FALSE(proc.ok());
  EXPECT_EQ(proc.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(proc.status().message(), "holdfastd cannot enter the job's workdir '" + s.workdir +
                                         "': No such file or directory — fix [job] workdir in job.toml");
  EXPECT_TRUE(NoChildLeft());
}

TEST(RankProcessTest, UnopenableLogIsAnErrorNamingIt) {
  TempDir dir("rank_process");
  RankSpawn s = Spawn(dir, {"/bin/true"});
  s.log_path = dir / "no-such-dir/rank0.log";
  auto proc = RankProcess::Start(s);
  ASSERT_FALSE(proc.ok());
  EXPECT_TRUE(Contains(proc.status().message(),
                       "holdfastd cannot open the rank log '" + s.log_path + "': No such file or directory"))
      << proc.status().message();
  EXPECT_TRUE(NoChildLeft());  // nothing was started
}

TEST(RankProcessTest, ExecFailureStatusIsShellExit126Or127) {
  TempDir dir("rank_process");
  const std::string not_executable = dir / "data.bin";
  WriteFile(not_executable, "x");
  struct Case {
    std::string script;
    bool exec_failure;
  };
  for (const Case& c : {Case{"exec /nonexistent/holdfast-train", true}, Case{"exec " + not_executable, true},
                        Case{"exit 1", false}, Case{"exit 75", false}, Case{"kill -9 $$", false}}) {
    auto proc = RankProcess::Start(Spawn(dir, {"/bin/sh", "-c", c.script}));
    ASSERT_TRUE(proc.ok()) << proc.status().ToString();  // the wrapper itself started
    const int ws = WaitFor((*proc)->pid());
    EXPECT_EQ(IsExecFailureStatus(ws), c.exec_failure) << c.script << " -> wait status " << ws;
  }
}

std::set<std::string> Lines(const std::string& text) {
  std::set<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.insert(line);
  return lines;
}

// A listening socket without close-on-exec, as Boost.Asio opens them.
int ListeningSocket() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 1) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST(RankProcessTest, RankInheritsOnlyStdioNotTheDaemonsSockets) {
  TempDir dir("rank_process");
  const int listener = ListeningSocket();
  ASSERT_GE(listener, 3);
  ASSERT_EQ(fcntl(listener, F_GETFD) & FD_CLOEXEC, 0);  // it would leak without the sweep
  const int high = fcntl(listener, F_DUPFD, 200);          // and one far above the rest
  ASSERT_GE(high, 200);
  const std::string listing = dir / "fds.txt";
  auto proc = RankProcess::Start(Spawn(dir, {"/bin/sh", "-c", "ls /proc/self/fd > " + listing}));
  ASSERT_TRUE(proc.ok()) << proc.status().ToString();
  const int ws = WaitFor((*proc)->pid());
  close(listener);
  close(high);
  ASSERT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  // 0, 1, 2 and the directory ls itself opens to list /proc/self/fd.
  EXPECT_EQ(Lines(ReadFile(listing)), (std::set<std::string>{"0", "1", "2", "3"})) << ReadFile(listing);
}

// Each fallback of the sweep, as the forked child runs it on kernels without
// close_range(CLOSE_RANGE_CLOEXEC): run in a child so that the test process's
// own fds keep their flags.
void ExpectSweepMarksEveryFdAbove2(rank_process_internal::FdSweep how) {
  const int listener = ListeningSocket();
  ASSERT_GE(listener, 3);
  const int high = fcntl(listener, F_DUPFD, 200);
  ASSERT_GE(high, 200);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    rank_process_internal::MarkCloseOnExecFrom(3, 1024, how);
    const bool swept = (fcntl(listener, F_GETFD) & FD_CLOEXEC) != 0 && (fcntl(high, F_GETFD) & FD_CLOEXEC) != 0;
    const bool stdio_kept = (fcntl(0, F_GETFD) & FD_CLOEXEC) == 0 && (fcntl(1, F_GETFD) & FD_CLOEXEC) == 0 &&
                            (fcntl(2, F_GETFD) & FD_CLOEXEC) == 0;
    _exit(swept && stdio_kept ? 0 : 1);
  }
  const int ws = WaitFor(child);
  close(listener);
  close(high);
  EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0) << "wait status " << ws;
}

TEST(RankProcessTest, FdSweepCloseRange) { ExpectSweepMarksEveryFdAbove2(rank_process_internal::FdSweep::kAuto); }
TEST(RankProcessTest, FdSweepProcSelfFd) {
  ExpectSweepMarksEveryFdAbove2(rank_process_internal::FdSweep::kProcSelfFd);
}
TEST(RankProcessTest, FdSweepEveryFd) { ExpectSweepMarksEveryFdAbove2(rank_process_internal::FdSweep::kEveryFd); }

TEST(RankProcessTest, EmptyCommandIsAnError) {
  TempDir dir("rank_process");
  auto proc = RankProcess::Start(Spawn(dir, {}));
  ASSERT_FALSE(proc.ok());
  EXPECT_EQ(proc.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace holdfast
