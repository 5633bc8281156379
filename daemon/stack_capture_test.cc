// stack_capture_test: eu-stack's and faulthandler's output become frames; a
// real process (spinning, or SIGSTOPped) is read by the real eu-stack naming
// the function it is in; a capture tool that hangs is killed at the limit and
// said so. (Whole runs: tests/daemon/stacks_test.cc.)
#include "daemon/stack_capture.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/subprocess.h"

namespace holdfast {

// A busy loop in a function of a known name (not inlined: eu-stack must see it).
// Says it is there (a byte on `ready_fd`) first.
[[noreturn]] __attribute__((noinline)) void StackTestSpinForever(int ready_fd) {
  const char byte = 1;
  if (::write(ready_fd, &byte, 1) != 1) ::_exit(1);
  volatile unsigned long n = 0;
  for (;;) n = n + 1;
}

namespace {

const char kEuStack[] =
    "PID 11962 - process\n"
    "TID 11962:\n"
    "#0  0x00007f28cc2ed545 clock_nanosleep@GLIBC_2.2.5 - /usr/lib/x86_64-linux-gnu/libc.so.6\n"
    "#1  0x00007f28cc715ada time_sleep - /usr/lib/libpython3.11.so.1.0\n"
    "#2  0x000055e0866cc3f2 - /usr/bin/python3.11\n"
    "eu-stack: tid 11962: shown max number of frames (3, use -n 0 for unlimited)\n"
    "TID 12031:\n"
    "#0  0x00007f28cc2ed545 epoll_wait - /usr/lib/x86_64-linux-gnu/libc.so.6\n"
    "#1  0x00007f28cc715ada - 1 gloo::transport::tcp::Loop::run() - /usr/lib/libgloo.so\n";

TEST(ParseEuStack, FramesByThreadMainFirstNamesWithoutSymbolVersions) {
  const std::vector<ThreadStack> t = ParseEuStack(kEuStack, 11962, 2);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_TRUE(t[0].main_thread);
  EXPECT_EQ(t[0].kind, "native");
  EXPECT_EQ(t[0].frames, (std::vector<std::string>{"clock_nanosleep", "time_sleep"}));
  EXPECT_TRUE(t[0].cut);  // three frames, two kept
  EXPECT_FALSE(t[1].main_thread);
  EXPECT_EQ(t[1].frames, (std::vector<std::string>{"epoll_wait", "gloo::transport::tcp::Loop::run()"}));
  EXPECT_FALSE(t[1].cut);
  const std::vector<ThreadStack> all = ParseEuStack(kEuStack, 11962, 32);
  EXPECT_EQ(all[0].frames.back(), "?? (python3.11)");  // no symbol: the module, not an ASLR address
}

TEST(ParseFaulthandler, FramesByThreadTheCurrentOneIsTheMainThread) {
  const char dump[] =
      "Thread 0x00007f5d6b7fe640 (most recent call first):\n"
      "  File \"/usr/lib/python3.11/threading.py\", line 320 in wait\n"
      "  File \"/job/loader.py\", line 7 in prefetch\n"
      "\n"
      "Current thread 0x00007f5d6c2f7740 (most recent call first):\n"
      "  File \"/job/train.py\", line 12 in sleep_in_allreduce\n"
      "  File \"/job/train.py\", line 30 in <module>\n";
  const std::vector<ThreadStack> t = ParseFaulthandler(dump);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_TRUE(t[0].main_thread);
  EXPECT_EQ(t[0].kind, "python");
  EXPECT_EQ(t[0].frames, (std::vector<std::string>{"sleep_in_allreduce (train.py:12)", "<module> (train.py:30)"}));
  EXPECT_EQ(t[1].frames.front(), "wait (threading.py:320)");
}

TEST(ParsePythonStackMarker, OnlyAPidAndARealTimeSignal) {
  const auto m = ParsePythonStackMarker("holdfast-pystack pid=1234 signal=" + std::to_string(SIGRTMIN + 7) + "\n");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->pid, 1234);
  EXPECT_EQ(m->signal, SIGRTMIN + 7);
  EXPECT_FALSE(ParsePythonStackMarker("holdfast-pystack pid=1234 signal=9").has_value());  // never SIGKILL
  EXPECT_FALSE(ParsePythonStackMarker("holdfast-pystack pid=1234 signal=19").has_value());  // nor SIGSTOP
  EXPECT_FALSE(ParsePythonStackMarker("holdfast-pystack pid=0 signal=41").has_value());
  EXPECT_FALSE(ParsePythonStackMarker("something else").has_value());
}

// A forked child spinning in StackTestSpinForever (once constructed), killed at the end.
class Spinner {
 public:
  Spinner() {
    int fds[2];
    if (::pipe(fds) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) StackTestSpinForever(fds[1]);
    char byte = 0;
    if (::read(fds[0], &byte, 1) != 1) ADD_FAILURE() << "the spinning child did not start";
    ::close(fds[0]);
    ::close(fds[1]);
  }
  ~Spinner() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

bool Names(const RankStacks& r, const std::string& function) {
  for (const ThreadStack& t : r.threads) {
    for (const std::string& f : t.frames) {
      if (t.main_thread && f.find(function) != std::string::npos) return true;
    }
  }
  return false;
}

std::string Dump(const RankStacks& r) {
  std::string s;
  for (const ThreadStack& t : r.threads) {
    for (const std::string& f : t.frames) s += f + "\n";
  }
  for (const std::string& n : r.notes) s += "note: " + n + "\n";
  return s;
}

TEST(CaptureStacks, ReadsASpinningAndAStoppedProcessNamingTheirFunction) {
  ASSERT_EQ(::access("/usr/bin/eu-stack", X_OK), 0) << "eu-stack is missing: apt-get install elfutils";
  Spinner spinning, stopped;
  ASSERT_EQ(::kill(stopped.pid(), SIGSTOP), 0);
  // A hang is judged seconds after a stop: be stopped before the capture, as there.
  for (int i = 0; i < 6000 && ReadProcState(stopped.pid()) != ProcState::kStopped; ++i) ::usleep(10000);
  ASSERT_EQ(ReadProcState(stopped.pid()), ProcState::kStopped);
  StackCaptureConfig config;
  config.timeout_s = 60;  // generous: a loaded machine; nothing here hangs
  const std::vector<RankStacks> got =
      CaptureStacks({StackTarget{0, spinning.pid(), ProcState::kRunning, ""},
                     StackTarget{1, stopped.pid(), ProcState::kStopped, ""}},
                    config);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(Names(got[0], "StackTestSpinForever")) << Dump(got[0]);
  EXPECT_TRUE(Names(got[1], "StackTestSpinForever")) << Dump(got[1]);
  // Read, not disturbed: the stopped one is stopped (again: eu-stack's detach
  // can let it run for a moment; the capture stops it again).
  bool still_stopped = false;
  for (int i = 0; i < 6000 && !still_stopped; ++i) {
    still_stopped = ReadProcState(stopped.pid()) == ProcState::kStopped;
    if (!still_stopped) ::usleep(10000);
  }
  EXPECT_TRUE(still_stopped) << "the stopped process was left running";
}

TEST(CaptureStacks, AToolThatHangsIsKilledAtTheLimitAndSaidSo) {
  testing::TempDir dir("stack_capture");
  const std::string tool = dir / "hanging-tool";
  // Not exec: the sleep (a duration no other test uses) must die with the tool's group.
  const std::string sleep = "sleep 100" + std::to_string(::getpid()) + ".25";
  testing::WriteFile(tool, "#!/bin/sh\n" + sleep + "\n");
  ASSERT_EQ(::chmod(tool.c_str(), 0755), 0);
  Spinner spinning;
  StackCaptureConfig config;
  config.tool = tool;
  config.timeout_s = 0.5;
  double took = -1;
  const std::vector<RankStacks> got =
      CaptureStacks({StackTarget{4, spinning.pid(), ProcState::kRunning, ""}}, config, &took);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].rank, 4);
  EXPECT_TRUE(got[0].threads.empty());
  ASSERT_EQ(got[0].notes.size(), 1u) << Dump(got[0]);
  EXPECT_NE(got[0].notes[0].find("did not finish within the limit (0.5 s"), std::string::npos) << got[0].notes[0];
  EXPECT_GE(took, 0.5);
  // The tool's whole process group is gone: no sleep of it is left behind.
  const testing::ProcessResult left = testing::RunProcess({"/usr/bin/pgrep", "-f", sleep});
  EXPECT_NE(left.exit_code, 0) << left.output;
}

TEST(CaptureStacks, AMissingToolIsANoteThatSaysWhatToInstall) {
  Spinner spinning;
  StackCaptureConfig config;
  config.tool = "/nonexistent/eu-stack";
  const std::vector<RankStacks> got = CaptureStacks({StackTarget{0, spinning.pid(), ProcState::kRunning, ""}}, config);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].notes.size(), 1u);
  EXPECT_NE(got[0].notes[0].find("apt-get install elfutils"), std::string::npos) << got[0].notes[0];
}

}  // namespace
}  // namespace holdfast
