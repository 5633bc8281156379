// Issue 24, must-show 2, on a real run: 16 stand-in ranks (collective_fake_rank:
// progress records and a real barrier through the run's TCP store, no
// LibTorch) on two local nodes (two holdfastd, 8 ranks each). One rank of the
// follower is SIGSTOPped: before the hang is declared, `runctl status` names
// it as stopped in its first lines and exits 6 (hung); once the daemon has
// declared the hang and restarted the ranks, `runctl triage` names it, its
// log file, the action and the runbook in its first 10 lines, with the 15
// others folded into one line, and status exits 0 again; stopped, the
// recorded status exits 8 and shows the ranks as the hang found them.
#include <signal.h>
#include <sys/types.h>

#include <optional>
#include <sstream>
#include <string>
#include <vector>

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
using testing::WriteFile;

constexpr int kRanksPerNode = 8;
constexpr int kVictim = 13;  // on the follower (node 1)

// The first `n` lines of `text`, as one string.
std::string FirstLines(const std::string& text, size_t n) {
  std::istringstream in(text);
  std::string out;
  std::string line;
  for (size_t i = 0; i < n && std::getline(in, line); ++i) out += line + "\n";
  return out;
}

bool Has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

// Whether one line of `text` holds every one of `words`.
bool LineWith(const std::string& text, const std::vector<std::string>& words) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    bool all = true;
    for (const std::string& w : words) all = all && Has(line, w);
    if (all) return true;
  }
  return false;
}

int Ranks(const RunStatus& s) {
  int n = 0;
  for (const NodeStatus& node : s.nodes) n += static_cast<int>(node.ranks.size());
  return n;
}

const RankStatus* FindRank(const RunStatus& s, int rank) {
  for (const NodeStatus& node : s.nodes) {
    for (const RankStatus& r : node.ranks) {
      if (r.rank == rank) return &r;
    }
  }
  return nullptr;
}

TEST(ManyRanksTest, AStoppedRankOfSixteenIsNamedFirstByStatusAndTriage) {
  TempDir dir("many_ranks");
  const std::string run = dir / "run";
  std::ostringstream job;
  job << "[job]\nname = \"many\"\ncommand = [\"" << BuildPath("tests/collective_fake_rank") << "\", \"20\"]\n"
      << "nproc = " << kRanksPerNode << "\n"
      // A hang is declared 20 s after the last step at the earliest: time for
      // the test to see the stopped rank first (a backstop, not a timing
      // assertion: status is asked right after the daemon reports it).
      << "[supervise]\npoll_ms = 50\nhang_min_s = 20\nstartup_timeout_s = 120\nrestart_budget = 1\n"
      // Off, so that on-call's view of a stopped rank can be read before the
      // hang (hang_min_s) is declared; the default (1 s) is supervision_test's.
      << "stopped_hang_s = 0\n"
      << "term_grace_s = 2\nhealth_prelaunch = false\nhealth_poll_s = 0\nprogress_dir = \"" << dir / "shm" << "\"\n";
  WriteFile(dir / "job.toml", job.str());
  std::vector<std::string> leader = {BuildPath("daemon/holdfastd"), "--run-dir", run, "--config", dir / "job.toml",
                                     "--nodes", "2"};
  std::vector<std::string> follower = leader;
  follower.insert(follower.end(), {"--node-id", "1"});
  ChildProcess lead(leader, dir / "leader.log");
  ChildProcess follow(follower, dir / "follower.log");  // finds the leader through run/cluster.addr
  auto runctl = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {BuildPath("cli/runctl"), "--run-dir", run});
    return RunProcess(args);
  };

  std::optional<RunStatus> st =
      testing::WaitForStatus(lead, run, "all 16 ranks past step 3", 300, [](const RunStatus& s) {
        if (Ranks(s) != 2 * kRanksPerNode) return false;
        for (const NodeStatus& n : s.nodes) {
          for (const RankStatus& r : n.ranks) {
            if (r.state != "running" || r.step < 3) return false;
          }
        }
        return true;
      });
  ASSERT_TRUE(st.has_value()) << ReadFile(dir / "leader.log") << ReadFile(dir / "follower.log");
  ProcessResult healthy = runctl({"status"});
  EXPECT_EQ(healthy.exit_code, 0) << healthy.output;
  EXPECT_TRUE(Has(FirstLines(healthy.output, 6), "16 ranks on 2 nodes: 16 running")) << healthy.output;
  EXPECT_FALSE(Has(healthy.output, "not healthy")) << healthy.output;

  const RankStatus* victim = FindRank(*st, kVictim);
  ASSERT_NE(victim, nullptr);
  const pid_t pid = static_cast<pid_t>(victim->pid);
  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  st = testing::WaitForStatus(lead, run, "rank 13 reported stopped", 120, [](const RunStatus& s) {
    const RankStatus* r = FindRank(s, kVictim);
    return r != nullptr && r->state.rfind("stopped", 0) == 0;
  });
  ASSERT_TRUE(st.has_value()) << ReadFile(dir / "leader.log");

  // Before the hang: status's first lines name the stopped rank; it exits 6 (hung).
  ProcessResult stopped = runctl({"status"});
  EXPECT_EQ(stopped.exit_code, 6) << stopped.output;
  const std::string head = FirstLines(stopped.output, 12);
  EXPECT_TRUE(Has(head, "16 ranks on 2 nodes: 15 running")) << stopped.output;
  EXPECT_TRUE(Has(head, ", 1 stopped (SIGSTOP)")) << stopped.output;
  EXPECT_TRUE(LineWith(head, {" " + std::to_string(kVictim) + " ", " " + std::to_string(pid) + " ", "stopped (SIGSTOP)"}))
      << "its row:\n" << stopped.output;
  EXPECT_TRUE(Has(head, "not healthy: 1 rank")) << stopped.output;
  ProcessResult one = runctl({"status", "--rank", std::to_string(kVictim)});
  EXPECT_EQ(one.exit_code, 6) << one.output;
  EXPECT_TRUE(Has(one.output, "STEPS/S")) << "the full row:\n" << one.output;
  EXPECT_TRUE(LineWith(one.output, {" " + std::to_string(pid) + " ", "stopped (SIGSTOP)"})) << one.output;
  const std::string rows = one.output.substr(one.output.find('\n'));  // past the run's line ("... running ...")
  EXPECT_FALSE(LineWith(rows, {" running "})) << "only rank 13's row:\n" << one.output;
  ProcessResult bad = runctl({"status", "--rank", "16"});
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_TRUE(Has(bad.output, "no rank 16 in this run (it has ranks 0-15)")) << bad.output;

  // The hang: the daemon kills the culprit, stops the others and restarts them all (generation 1).
  st = testing::WaitForStatus(lead, run, "generation 1 stepping", 300, [](const RunStatus& s) {
    if (s.generation != 1 || Ranks(s) != 2 * kRanksPerNode) return false;
    for (const NodeStatus& n : s.nodes) {
      for (const RankStatus& r : n.ranks) {
        if (r.state != "running" || r.step < 2) return false;
      }
    }
    return true;
  });
  ASSERT_TRUE(st.has_value()) << ReadFile(dir / "leader.log");
  ProcessResult recovered = runctl({"status"});
  EXPECT_EQ(recovered.exit_code, 0) << recovered.output;
  EXPECT_TRUE(Has(recovered.output, "last incident: hang at ")) << recovered.output;
  ProcessResult triage = runctl({"triage", "latest"});
  EXPECT_EQ(triage.exit_code, 0) << triage.output;
  const std::string first10 = FirstLines(triage.output, 10);
  EXPECT_TRUE(Has(first10, "incident  hang")) << triage.output;
  EXPECT_TRUE(Has(first10, "culprit   rank 13 on ")) << triage.output;
  EXPECT_TRUE(Has(first10, ", pid " + std::to_string(pid) + ": ")) << triage.output;
  EXPECT_TRUE(Has(first10, "process stopped")) << triage.output;
  EXPECT_TRUE(Has(first10, "\naction    ")) << triage.output;
  EXPECT_TRUE(Has(first10, "\nrunbook   hang.md")) << triage.output;
  const size_t log_at = first10.find("\nlog       " + run + "/logs/a1-g");
  ASSERT_NE(log_at, std::string::npos) << triage.output;
  const size_t path_at = log_at + 11;
  const std::string log_path = first10.substr(path_at, first10.find(' ', path_at) - path_at);
  EXPECT_TRUE(Has(log_path, "-rank13.log")) << log_path;
  EXPECT_TRUE(Has(ReadFile(log_path), "collective_fake_rank 13 of 16")) << log_path;
  // The 15 others: one line, counted.
  EXPECT_TRUE(Has(triage.output, "  15 ranks waiting in allreduce #")) << triage.output;
  EXPECT_TRUE(Has(triage.output, ": ranks 0-12,14-15 on 2 nodes\n")) << triage.output;
  ProcessResult all = runctl({"triage", "latest", "--all"});
  EXPECT_EQ(all.exit_code, 0) << all.output;
  EXPECT_TRUE(Has(all.output, "\nothers:\n  rank 0 on ")) << all.output;
  EXPECT_TRUE(Has(all.output, "\n  rank 15 on ")) << all.output;

  // Stopped, without a daemon: the recorded status exits 8, the culprit first among the hang's ranks.
  ProcessResult stop = runctl({"stop", "--wait"});
  EXPECT_EQ(stop.exit_code, 0) << stop.output;
  lead.Wait();
  follow.Wait();
  ProcessResult recorded = runctl({"status"});
  EXPECT_EQ(recorded.exit_code, 8) << recorded.output;
  EXPECT_TRUE(Has(recorded.output, "ranks at the last incident (hang at ")) << recorded.output;
  EXPECT_TRUE(Has(recorded.output, "culprit, stopped (SIGSTOP)")) << recorded.output;
}

}  // namespace
}  // namespace holdfast
