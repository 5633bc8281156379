// Hang stacks under a real holdfastd (daemon/stack_capture.h): stand-in ranks
// (tests/daemon/stack_test_rank.cc, a C++ rank with known function names, and
// tests/daemon/hung_python_rank.py with the holdfast module) hang for real — a
// SIGSTOP, a busy loop, a Python sleep — and `runctl triage` must show their
// folded stacks naming the function they are in, after the run recovered. A
// capture tool that hangs is killed at the limit: the run still recovers, and
// the evidence says the capture timed out. (No timing is asserted.)
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <cstdlib>
#include <sstream>

#include <gtest/gtest.h>

#include "tests/support/daemon_client.h"
#include "tests/support/subprocess.h"

namespace holdfast {
namespace {

using testing::BuildPath;
using testing::ChildProcess;
using testing::ProcessResult;
using testing::ReadFile;
using testing::RunProcess;
using testing::TempDir;
using testing::WaitForStatus;
using testing::WriteFile;

std::string SourceDir() {
  const char* dir = std::getenv("HOLDFAST_SOURCE_DIR");
  return dir != nullptr ? dir : HOLDFAST_DEFAULT_SOURCE_DIR;
}

class StacksTest : public ::testing::Test {
 protected:
  StacksTest() : dir_("stacks") {}

  // 2 ranks of `command` (JSON array items); a hang after 3 s without a step.
  void WriteJob(const std::string& command, const std::string& supervise_extra = "",
                const std::string& stack_timeout_s = "60") {
    std::ostringstream os;
    os << "[job]\nname = \"stacks\"\ncommand = [" << command << "]\nnproc = 2\n"
       << "[job.env]\nPYTHONPATH = \"" << SourceDir() << "/common/python\"\n"
       << "[supervise]\npoll_ms = 50\nhang_min_s = 3\nstartup_timeout_s = 120\nrestart_budget = 2\n"
       << "term_grace_s = 1\nbackoff_initial_s = 0.1\nhealth_prelaunch = false\nhealth_poll_s = 0\n"
       << "stack_timeout_s = " << stack_timeout_s << "\n"  // generous on a loaded machine, but the last case's
       << "progress_dir = \"" << dir_ / "shm" << "\"\n"
       << supervise_extra;
    WriteFile(dir_ / "job.toml", os.str());
  }
  std::string StandIn(const std::string& extra = "") const {
    return "\"" + BuildPath("tests/stack_test_rank") + "\", \"200\", \"50\"" + extra;
  }

  ChildProcess Start() const {
    return ChildProcess({BuildPath("daemon/holdfastd"), "--run-dir", dir_ / "run", "--config", dir_ / "job.toml"},
                        dir_ / "daemon.log");
  }

  // The live pid of `rank` once every rank is at `step` or later.
  int64_t PidAtStep(ChildProcess& daemon, int rank, int64_t step) const {
    auto st = WaitForStatus(daemon, dir_ / "run", "both ranks at step " + std::to_string(step), 300,
                            [step](const RunStatus& s) {
      if (s.nodes.empty() || s.nodes[0].ranks.size() != 2) return false;
      bool all = true;
      for (const auto& r : s.nodes[0].ranks) all = all && r.step >= step && r.state == "running";
      return all;
    });
    if (!st) return 0;
    for (const auto& r : st->nodes[0].ranks) {
      if (r.rank == rank) return r.pid;
    }
    return 0;
  }

  // The run recovered: holdfastd ended it successfully after a restart.
  void ExpectRecovered(ChildProcess& daemon) const {
    EXPECT_EQ(daemon.Wait(), 0) << ReadFile(dir_ / "daemon.log");
    EXPECT_EQ(testing::LatestRunGenerations(dir_ / "run"), 2u) << ReadFile(dir_ / "daemon.log");
  }

  std::string Triage() const {
    const ProcessResult r = RunProcess({BuildPath("cli/runctl"), "--run-dir", dir_ / "run", "triage", "latest"});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output;
  }

  TempDir dir_;
};

// The header line holding `heading` and the frame lines under it (indented 6).
std::string Section(const std::string& text, const std::string& heading) {
  const size_t at = text.find(heading);
  if (at == std::string::npos) return "";
  size_t end = text.find('\n', at);
  while (end != std::string::npos && text.compare(end + 1, 6, "      ") == 0) end = text.find('\n', end + 1);
  return text.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

// A SIGSTOPped rank: its native stack is read (a stopped process can be) and
// names the function it stopped in; the peer's is shown apart.
TEST_F(StacksTest, ASigstoppedRanksNativeStackNamesTheFunctionItStoppedIn) {
  WriteJob(StandIn());
  ChildProcess daemon = Start();
  const int64_t pid = PidAtStep(daemon, 1, 3);
  ASSERT_GT(pid, 0) << ReadFile(dir_ / "daemon.log");
  ASSERT_EQ(::kill(static_cast<pid_t>(pid), SIGSTOP), 0);
  ExpectRecovered(daemon);
  const std::string triage = Triage();
  EXPECT_NE(triage.find("incident  hang"), std::string::npos) << triage;
  EXPECT_NE(triage.find("stacks    captured before the ranks were stopped"), std::string::npos) << triage;
  // Rank 1's group (rank 0, stepping on, sleeps in the same function: they may fold).
  const std::string culprit = Section(triage, ", culprit");
  EXPECT_NE(culprit.find("StackTestRankStepWork"), std::string::npos) << triage;
  EXPECT_NE(culprit.find("\n      main\n"), std::string::npos) << triage;
  EXPECT_TRUE(triage.find("1 rank (1), culprit") != std::string::npos ||
              triage.find("2 ranks (0-1), culprit") != std::string::npos)
      << triage;
}

// A rank spinning in compute: its stack names the busy function.
TEST_F(StacksTest, ASpinningRanksStackNamesTheBusyFunction) {
  WriteJob(StandIn(", \"spin@0:5\""));
  ChildProcess daemon = Start();
  ExpectRecovered(daemon);
  const std::string triage = Triage();
  const std::string culprit = Section(triage, "1 rank (0), culprit");
  EXPECT_NE(culprit.find("StackTestRankSpinInCompute"), std::string::npos) << triage;
}

// A Python rank hung in a sleep: its Python stack (faulthandler on the
// module's signal) names the function and line; its native stack is there too.
TEST_F(StacksTest, AHungPythonRanksPythonStackNamesItsFunction) {
  WriteJob("\"/usr/bin/python3\", \"" + SourceDir() + "/tests/daemon/hung_python_rank.py\", \"200\", \"3\"");
  ChildProcess daemon = Start();
  ExpectRecovered(daemon);
  const std::string triage = Triage();
  EXPECT_NE(triage.find("  python, main thread:"), std::string::npos) << triage;
  const std::string culprit = Section(triage, "1 rank (1), culprit");
  EXPECT_NE(culprit.find("hang_in_python_sleep (hung_python_rank.py:"), std::string::npos) << triage;
  EXPECT_NE(triage.find("main (hung_python_rank.py:"), std::string::npos) << triage;
  EXPECT_NE(triage.find("  native, main thread:"), std::string::npos) << triage;
}

// A stopped Python rank cannot run its handler: the native stack only, and a note says so.
TEST_F(StacksTest, ASigstoppedPythonRankHasItsNativeStackAndANoteWhy) {
  WriteJob("\"/usr/bin/python3\", \"" + SourceDir() + "/tests/daemon/hung_python_rank.py\", \"200\", \"-1\"");
  ChildProcess daemon = Start();
  const int64_t pid = PidAtStep(daemon, 0, 1);
  ASSERT_GT(pid, 0) << ReadFile(dir_ / "daemon.log");
  ASSERT_EQ(::kill(static_cast<pid_t>(pid), SIGSTOP), 0);
  ExpectRecovered(daemon);
  const std::string triage = Triage();
  EXPECT_NE(triage.find("rank 0: python stack not available: the process is stopped"), std::string::npos) << triage;
  EXPECT_NE(triage.find("  native, main thread:"), std::string::npos) << triage;
}

// A capture tool that never returns is killed at the limit: the run recovers
// all the same, and the evidence says the capture timed out.
TEST_F(StacksTest, ACaptureThatHangsIsCutAtTheLimitAndRecoveryGoesOn) {
  const std::string tool = dir_ / "hanging-eu-stack";
  WriteFile(tool, "#!/bin/sh\nexec sleep 1000\n");
  ASSERT_EQ(::chmod(tool.c_str(), 0755), 0);
  WriteJob(StandIn(), "stack_tool = \"" + tool + "\"\n", "1");
  ChildProcess daemon = Start();
  const int64_t pid = PidAtStep(daemon, 1, 3);
  ASSERT_GT(pid, 0) << ReadFile(dir_ / "daemon.log");
  ASSERT_EQ(::kill(static_cast<pid_t>(pid), SIGSTOP), 0);
  ExpectRecovered(daemon);
  const std::string triage = Triage();
  EXPECT_NE(triage.find("(limit 1.0 s)"), std::string::npos) << triage;
  EXPECT_NE(triage.find("rank 1: native stack: hanging-eu-stack did not finish within the limit (1 s"),
            std::string::npos)
      << triage;
  EXPECT_NE(triage.find("stopped all ranks; restart generation 1"), std::string::npos) << triage;
}


// A Python rank that did the last step with its peer but never exits (SIGTERM
// blocked, asleep: as in a stuck destroy_process_group): after exit_grace_s it
// is ended, an exit_stuck event holds its Python stack, and the run succeeds in
// one generation — no hang, no restart.
TEST_F(StacksTest, ARankStuckInItsTeardownIsEndedWithItsStackAndTheRunSucceedsWithoutARestart) {
  WriteJob("\"/usr/bin/python3\", \"" + SourceDir() + "/tests/daemon/hung_python_rank.py\", \"20\", \"-1\", \"stuck\"",
           "exit_grace_s = 2\n");
  ChildProcess daemon = Start();
  EXPECT_EQ(daemon.Wait(), 0) << ReadFile(dir_ / "daemon.log");
  EXPECT_EQ(testing::LatestRunGenerations(dir_ / "run"), 1u) << ReadFile(dir_ / "daemon.log");
  const EventRecord* stuck = nullptr;
  const auto events = testing::LatestRunEvents(dir_ / "run");
  for (const EventRecord& e : events) {
    EXPECT_NE(e.kind, "hang") << e.summary;
    EXPECT_NE(e.kind, "crash") << e.summary;
    if (e.kind == "exit_stuck") stuck = &e;
  }
  ASSERT_NE(stuck, nullptr) << ReadFile(dir_ / "daemon.log");
  EXPECT_EQ(stuck->rank, 1);
  EXPECT_NE(stuck->summary.find("rank 1 completed step 20 but did not exit"), std::string::npos) << stuck->summary;
  EXPECT_NE(stuck->summary.find("after rank 0 exited 0"), std::string::npos) << stuck->summary;
  EXPECT_EQ(stuck->runbook, "runbooks/hang.md");
  EXPECT_NE(stuck->evidence_json.find("stuck_in_teardown"), std::string::npos) << stuck->evidence_json;
}

}  // namespace
}  // namespace holdfast
