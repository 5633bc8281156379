// Warm spares (docs/warm-restarts.md, the job file's recovery.warm_spares)
// against a real holdfastd supervising real holdfast-train ranks: a SIGKILLed
// rank's next generation is made of the spares that were waiting (their
// pids, their rank logs say so) and restores from the memory snapshots; a
// spare SIGKILLed while it waits is replaced and the restart after it still
// starts from spares. Every run ends with the fault-free final parameters,
// and no process of it (rank or spare) is left once the daemon has exited.
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <regex>
#include <set>

#include "common/run_files.h"
#include "tests/daemon/snapshot_folders.h"
#include "tests/daemon/supervised_run.h"

namespace holdfast {
namespace {

namespace fs = std::filesystem;

// Memory snapshots every step and warm spares; a rank held stopped by the
// test is not a hang (stopped_hang_s = 0, hang_min_s 60).
constexpr const char* kRecovery = "stopped_hang_s = 0\n[recovery]\nmemory_budget_mb = 64\nwarm_spares = true\n";

class WarmSpareTest : public SupervisedRunTest {
 protected:
  // Pids of the spares whose log says they wait for an assignment (every
  // spare this run started, assigned since or not).
  std::set<pid_t> ReadySpares() const {
    std::set<pid_t> out;
    static const std::regex ready("warm spare ready \\(pid ([0-9]+)\\)");
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_ / "run/logs", ec)) {
      if (e.path().filename().string().find("-spare-") == std::string::npos) continue;
      const std::string log = ReadFile(e.path());
      std::smatch m;
      if (std::regex_search(log, m, ready)) out.insert(static_cast<pid_t>(std::stol(m[1].str())));
    }
    return out;
  }

  // Waits until `n` spares are ready that are not in `except`; returns them.
  std::set<pid_t> WaitForSpares(ChildProcess& daemon, size_t n, const std::set<pid_t>& except = {}) {
    std::set<pid_t> fresh;
    const bool ok = testing::WaitUntil(daemon, std::to_string(n) + " warm spares ready", 180, [&] {
      fresh.clear();
      for (pid_t p : ReadySpares()) {
        if (except.count(p) == 0) fresh.insert(p);
      }
      return fresh.size() >= n;
    });
    EXPECT_TRUE(ok) << ReadFile(dir_ / "daemon.log");
    return fresh;
  }

  // Starts the run, holds its ranks stopped once they have trained a few
  // steps (SIGSTOP: the run must wait for the spares) and waits for two
  // spares. Returns the ranks' pids and the spares'.
  std::pair<std::vector<pid_t>, std::set<pid_t>> StartAndWaitForSpares(ChildProcess& daemon) {
    auto st = WaitForStep(3, daemon);
    EXPECT_TRUE(st.has_value()) << ReadFile(dir_ / "daemon.log");
    if (!st.has_value()) return {};
    // A snapshot the next generation restores from: committed before the
    // ranks are frozen (a reported step's snapshot may still be in flight).
    EXPECT_GE(WaitForCommittedSnapshot(st->run_id), 1) << ReadFile(dir_ / "daemon.log");
    std::vector<pid_t> ranks = FreezeRanks(daemon, *st);
    EXPECT_EQ(ranks.size(), 2u);
    std::set<pid_t> spares = WaitForSpares(daemon, 2);
    EXPECT_EQ(spares.size(), 2u);
    return {ranks, spares};
  }

  // The pid of the warm spare rank `rank` of `generation` was made from; -1
  // when its log says it was started cold.
  pid_t SpareOf(int generation, int rank) const {
    const std::string log = ReadFile(RankLogPath(dir_ / "run", 1, generation, rank));
    static const std::regex from("; from warm spare pid ([0-9]+)");
    std::smatch m;
    return std::regex_search(log, m, from) ? static_cast<pid_t>(std::stol(m[1].str())) : -1;
  }

  // Processes of this test's run still alive (not zombies): every rank and
  // spare has the test's folder in its command line.
  std::vector<std::string> Leftovers() const {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
      const std::string pid = e.path().filename().string();
      if (pid.find_first_not_of("0123456789") != std::string::npos || pid == std::to_string(getpid())) continue;
      std::string cmd = ReadFile(e.path() / "cmdline");
      for (char& c : cmd) c = c == '\0' ? ' ' : c;
      const std::string stat = ReadFile(e.path() / "stat");
      const size_t paren = stat.rfind(')');
      const bool zombie = paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
      if (!zombie && cmd.find(dir_.path()) != std::string::npos) out.push_back(pid + ": " + cmd);
    }
    return out;
  }

  void ExpectNothingLeft() {
    // The daemon has exited: what it SIGKILLed may still be dying (a
    // backstop deadline, not a timing assertion).
    std::vector<std::string> left = Leftovers();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!left.empty() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      left = Leftovers();
    }
    EXPECT_TRUE(left.empty()) << left.size() << " left behind, e.g. " << (left.empty() ? "" : left.front());
  }
};

TEST_F(WarmSpareTest, AKilledRanksNextGenerationStartsFromTheWaitingSpares) {
  WriteJob("", kRecovery, /*hang_min_s=*/60);
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  const auto [ranks, spares] = StartAndWaitForSpares(daemon);
  ASSERT_EQ(ranks.size(), 2u);
  ASSERT_EQ(spares.size(), 2u);
  // A spare is not a rank: the status shows the two ranks only.
  auto now = Status();
  ASSERT_TRUE(now.has_value());
  ASSERT_EQ(now->nodes[0].ranks.size(), 2u);
  for (const auto& r : now->nodes[0].ranks) EXPECT_EQ(spares.count(static_cast<pid_t>(r.pid)), 0u);

  ASSERT_EQ(kill(ranks[1], SIGKILL), 0);
  ExpectFinishedBitExact(daemon);

  // Generation 1 is the two spares, each restoring from memory.
  std::set<pid_t> used;
  for (int rank : {0, 1}) {
    const pid_t p = SpareOf(1, rank);
    EXPECT_EQ(spares.count(p), 1u) << "rank " << rank << " of generation 1 was not a waiting spare:\n"
                                   << ReadFile(RankLogPath(dir_ / "run", 1, 1, rank));
    used.insert(p);
    const std::string log = ReadFile(RankLogPath(dir_ / "run", 1, 1, rank));
    EXPECT_NE(log.find("restore tier: memory"), std::string::npos) << log;
    EXPECT_NE(log.find("warm spare (pid " + std::to_string(p) + ") becomes rank " + std::to_string(rank)),
              std::string::npos)
        << log;
  }
  EXPECT_EQ(used.size(), 2u);
  EXPECT_EQ(SpareOf(0, 0), -1) << "the first generation has no spares to start from";
  auto rec = LatestRun();
  ASSERT_TRUE(rec.has_value());
  auto gens = rec->db->Generations(rec->run.run_id);
  ASSERT_TRUE(gens.ok());
  EXPECT_EQ(gens->size(), 2u);
  ExpectNothingLeft();
}

TEST_F(WarmSpareTest, ASpareKilledWhileWaitingIsReplacedAndTheRestartStillStartsWarm) {
  WriteJob("", kRecovery, /*hang_min_s=*/60);
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  const auto [ranks, first] = StartAndWaitForSpares(daemon);
  ASSERT_EQ(ranks.size(), 2u);
  ASSERT_EQ(first.size(), 2u);
  const pid_t victim = *first.begin();
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const std::set<pid_t> replacement = WaitForSpares(daemon, 1, first);
  ASSERT_EQ(replacement.size(), 1u);
  EXPECT_NE(ReadFile(dir_ / "daemon.log").find("warm spare (pid " + std::to_string(victim) + ") killed by signal 9"),
            std::string::npos)
      << ReadFile(dir_ / "daemon.log");

  ASSERT_EQ(kill(ranks[0], SIGKILL), 0);
  ExpectFinishedBitExact(daemon);
  for (int rank : {0, 1}) {
    const pid_t p = SpareOf(1, rank);
    EXPECT_NE(p, -1) << "rank " << rank << " of generation 1 started cold";
    EXPECT_NE(p, victim) << "the killed spare was assigned";
    EXPECT_TRUE(first.count(p) == 1 || replacement.count(p) == 1) << p;
  }
  ExpectNothingLeft();
}

}  // namespace
}  // namespace holdfast
