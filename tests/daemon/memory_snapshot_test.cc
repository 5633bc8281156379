// The in-memory snapshot tier (docs/memory-snapshots.md) against a real
// holdfastd supervising real holdfast-train ranks: a killed rank resumes from
// the newest snapshot in /dev/shm with the disk checkpoints gone, a damaged
// snapshot falls back to the disk, a snapshot over the budget is refused —
// and every run ends with the fault-free final parameters and nothing of it
// left in /dev/shm.
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>

#include "checkpoint/checkpoint_loader.h"
#include "tests/daemon/snapshot_folders.h"
#include "common/run_files.h"
#include "tests/daemon/supervised_run.h"

namespace holdfast {
namespace {

namespace fs = std::filesystem;


// Memory snapshots every step; nothing declares a hang while a test holds the ranks stopped.
constexpr const char* kRecovery = "stopped_hang_s = 0\n[recovery]\nmemory_budget_mb = 64\n";

class MemorySnapshotTest : public SupervisedRunTest {
 protected:
  // The run's snapshot folders in /dev/shm (one per daemon).
  static std::vector<std::string> SnapshotFolders(const std::string& run_id) { return SnapshotFoldersOf(run_id); }

  static int64_t NewestCommitted(const std::string& folder) { return NewestCommittedSnapshot(folder); }

  // The log of rank `rank` of generation `generation` (attempt 1).
  std::string RankLog(int generation, int rank) const {
    return ReadFile(RankLogPath(dir_ / "run", 1, generation, rank));
  }

  void ExpectNothingLeftInShm(const std::string& run_id) {
    EXPECT_TRUE(SnapshotFolders(run_id).empty()) << "the daemon leaves its snapshot folder behind in /dev/shm";
  }
};

TEST_F(MemorySnapshotTest, AKilledRankResumesFromTheNewestSnapshotWithTheDiskCheckpointsGone) {
  // The periodic health check would (rightly) call the node unfit once the
  // checkpoint directory is gone: this test removes it on purpose.
  WriteJob("", std::string("health_poll_s = 0\n") + kRecovery, /*hang_min_s=*/60);
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  auto st = WaitForStep(12, daemon);
  ASSERT_TRUE(st.has_value()) << ReadFile(dir_ / "daemon.log");
  const std::vector<std::string> folders = SnapshotFolders(st->run_id);
  ASSERT_EQ(folders.size(), 1u) << ReadFile(dir_ / "daemon.log");
  ASSERT_GE(WaitForCommittedSnapshot(st->run_id), 1) << ReadFile(dir_ / "daemon.log");
  const std::vector<pid_t> pids = FreezeRanks(daemon, *st);
  ASSERT_EQ(pids.size(), 2u);
  const int64_t newest = NewestCommitted(folders[0]);
  ASSERT_GE(newest, 1) << "no committed snapshot at step 12: " << RankLog(0, 0);
  // No disk is involved from here on: the checkpoint directory goes away.
  fs::rename(dir_ / "ck", dir_ / "ck.gone");
  ASSERT_FALSE(fs::exists(dir_ / "ck"));
  ASSERT_EQ(kill(pids[1], SIGKILL), 0);
  ExpectFinishedBitExact(daemon);

  // Both ranks of generation 1 came back from memory, at the newest step every
  // rank held (rank 0, continued by the daemon to act on its TERM, may have
  // committed one more step with rank 1's shard already there).
  const std::regex resumed("resumed from memory snapshot (\\S+)/step-0*([0-9]+) \\(step ([0-9]+)\\); restore tier: memory");
  for (int rank : {0, 1}) {
    const std::string log = RankLog(1, rank);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(log, m, resumed)) << "rank " << rank << " of generation 1:\n" << log;
    EXPECT_EQ(m[1].str(), folders[0]);
    const int64_t step = std::stoll(m[3].str());
    EXPECT_GE(step, newest) << log;
    EXPECT_LE(step, newest + 1) << log;
    EXPECT_EQ(log.find("restore tier: disk"), std::string::npos) << log;
  }
  auto db = Lineage();
  ASSERT_NE(db, nullptr);
  auto run = db->LatestRun();
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->state, RunState::kSucceeded);
  auto gens = db->Generations(run->run_id);
  ASSERT_TRUE(gens.ok());
  ASSERT_EQ(gens->size(), 2u);
  // Lineage has the step generation 1 started from: the snapshot's, not the disk's (which is gone).
  std::smatch m;
  const std::string log = RankLog(1, 0);
  ASSERT_TRUE(std::regex_search(log, m, resumed));
  EXPECT_EQ((*gens)[1].start_step, std::stoll(m[3].str()));
  EXPECT_EQ((*gens)[1].restore_tier, "memory");
  EXPECT_EQ((*gens)[0].restore_tier, "none");
  auto inc = db->LastIncident(run->run_id);
  ASSERT_TRUE(inc.ok() && inc->has_value());
  EXPECT_NE((*inc)->action.find(" (memory snapshot)"), std::string::npos) << (*inc)->action;
  ExpectNothingLeftInShm(st->run_id);
}

TEST_F(MemorySnapshotTest, AFlippedByteInTheSnapshotsFallsBackToTheDiskCheckpoint) {
  WriteJob("", kRecovery, /*hang_min_s=*/60);
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  auto st = WaitForStep(12, daemon);
  ASSERT_TRUE(st.has_value()) << ReadFile(dir_ / "daemon.log");
  const std::vector<std::string> folders = SnapshotFolders(st->run_id);
  ASSERT_EQ(folders.size(), 1u) << ReadFile(dir_ / "daemon.log");
  ASSERT_GE(WaitForCommittedSnapshot(st->run_id), 1) << ReadFile(dir_ / "daemon.log");
  const std::vector<pid_t> pids = FreezeRanks(daemon, *st);
  ASSERT_EQ(pids.size(), 2u);
  // One byte of every shard of every snapshot, past the header: the data.
  int flipped = 0;
  for (const auto& step : fs::directory_iterator(folders[0])) {
    if (step.path().filename().string().rfind("step-", 0) != 0) continue;
    for (const auto& f : fs::directory_iterator(step.path())) {
      const std::string name = f.path().filename().string();
      if (name.rfind("shard-", 0) != 0 || name.find(".tmp") != std::string::npos) continue;
      std::fstream io(f.path(), std::ios::in | std::ios::out | std::ios::binary);
      const std::streamoff at = static_cast<std::streamoff>(fs::file_size(f.path())) - 1;
      io.seekg(at);
      char c = 0;
      io.get(c);
      io.seekp(at);
      io.put(static_cast<char>(c ^ 0x10));
      ++flipped;
    }
  }
  ASSERT_GE(flipped, 2) << "no snapshot shards to damage in " << folders[0];
  ASSERT_EQ(kill(pids[1], SIGKILL), 0);
  ExpectFinishedBitExact(daemon);

  for (int rank : {0, 1}) {
    const std::string log = RankLog(1, rank);
    EXPECT_NE(log.find("not used: "), std::string::npos) << "the damaged snapshot is named: " << log;
    EXPECT_NE(log.find("restoring from disk"), std::string::npos) << log;
    EXPECT_NE(log.find("resumed from checkpoint " + (dir_ / "ck") + "/step-"), std::string::npos) << log;
    EXPECT_NE(log.find("restore tier: disk"), std::string::npos) << log;
  }
  EXPECT_NE(RankLog(1, 0).find("Corruption"), std::string::npos) << RankLog(1, 0);
  // Lineage has where generation 1 really started: the disk checkpoint the
  // ranks restored, not the snapshot the daemon expected, and a note of it.
  std::smatch m;
  const std::string log = RankLog(1, 0);
  const std::regex disk("resumed from checkpoint \\S+ \\(step ([0-9]+)\\); restore tier: disk");
  ASSERT_TRUE(std::regex_search(log, m, disk)) << log;
  auto db = Lineage();
  ASSERT_NE(db, nullptr);
  auto run = db->LatestRun();
  ASSERT_TRUE(run.ok());
  auto gens = db->Generations(run->run_id);
  ASSERT_TRUE(gens.ok());
  ASSERT_EQ(gens->size(), 2u);
  EXPECT_EQ((*gens)[1].start_step, std::stoll(m[1].str()));
  EXPECT_EQ((*gens)[1].restore_tier, "disk");
  auto events = db->Events(run->run_id, 0);
  ASSERT_TRUE(events.ok());
  bool noted = false;
  for (const EventRecord& e : *events) {
    if (e.kind != "snapshot_passed_over") continue;
    noted = true;
    EXPECT_EQ(e.generation, 1);
    EXPECT_NE(e.summary.find("and restored step " + m[1].str() + " from the disk"), std::string::npos) << e.summary;
  }
  EXPECT_TRUE(noted) << "no snapshot_passed_over event";
  ExpectNothingLeftInShm(st->run_id);
}

// A SIGKILLed daemon cannot remove its folder; the next holdfastd on the node
// (here the one that continues the run) removes it before it starts its own.
TEST_F(MemorySnapshotTest, AKilledDaemonsSnapshotsAreRemovedByTheNextDaemon) {
  WriteJob("", kRecovery, /*hang_min_s=*/60);
  std::string run_id;
  std::vector<std::string> folders;
  {
    ChildProcess daemon(Daemon(), dir_ / "daemon.log");
    auto st = WaitForStep(12, daemon);
    ASSERT_TRUE(st.has_value()) << ReadFile(dir_ / "daemon.log");
    run_id = st->run_id;
    folders = SnapshotFolders(run_id);
    ASSERT_EQ(folders.size(), 1u) << ReadFile(dir_ / "daemon.log");
    daemon.Signal(SIGKILL);
    EXPECT_EQ(daemon.Wait(), 128 + SIGKILL);
  }
  EXPECT_TRUE(fs::exists(folders[0] + "/owner.lock")) << "the dead daemon's folder is still there";
  ChildProcess again(Daemon(), dir_ / "daemon2.log");
  ExpectFinishedBitExact(again);
  EXPECT_FALSE(fs::exists(folders[0]));
  EXPECT_NE(ReadFile(dir_ / "daemon2.log").find("removed " + folders[0] + ": memory snapshots of a holdfastd that is gone"),
            std::string::npos)
      << ReadFile(dir_ / "daemon2.log");
  ExpectNothingLeftInShm(run_id);
}

// A budget smaller than two snapshots of a rank: refused with the numbers on
// every rank, and the run trains on with its disk checkpoints.
TEST_F(MemorySnapshotTest, ASnapshotOverTheBudgetIsRefusedAndTheRunGoesOnWithDiskCheckpoints) {
  WriteJob("", "[recovery]\nmemory_budget_mb = 1\n", /*hang_min_s=*/60);
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  auto st = WaitForStep(3, daemon);
  ASSERT_TRUE(st.has_value()) << ReadFile(dir_ / "daemon.log");
  const std::string run_id = st->run_id;
  ExpectFinishedBitExact(daemon);
  for (int rank : {0, 1}) {
    const std::string log = RankLog(0, rank);
    EXPECT_NE(log.find("memory snapshots REFUSED, training goes on with disk checkpoints only"), std::string::npos)
        << log;
    EXPECT_NE(log.find("of recovery.memory_budget_mb; raise the budget"), std::string::npos) << log;
  }
  EXPECT_TRUE(fs::exists(dir_ / ("ck/" + StepDirName(kSteps) + "/" + kManifestFileName))) << "the disk checkpoints went on";
  ExpectNothingLeftInShm(run_id);
}

}  // namespace
}  // namespace holdfast
