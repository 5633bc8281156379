// Memory snapshots across nodes (docs/memory-snapshots.md, "Several nodes"):
// several holdfastd on one machine act as nodes, each node's snapshots are
// replicated to the next. A crashed rank of a 2-node run restores from
// memory with the checkpoint directory gone and ends bit for bit with the
// fault-free run, also when a byte of one node's snapshot is flipped (the
// replica on the other node serves); a node lost with its daemon in an
// elastic run goes on from memory, its shards taken from the replica on the
// survivor, and ends with the fault-free loss to float tolerance (resharded);
// with a spare node taking the lost node's place the world is kept and the
// run ends bit for bit.
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "checkpoint/checkpoint_loader.h"
#include "tests/daemon/snapshot_folders.h"
#include "common/run_files.h"
#include "tests/daemon/supervised_run.h"

namespace holdfast {
namespace {

namespace fs = std::filesystem;

// Every snapshot replicated (replica_every = 1): the tests that flip or look
// for the newest step; the spare's test uses the default (every 10th).
constexpr const char* kRecovery =
    "stopped_hang_s = 0\nhealth_poll_s = 0\n[recovery]\nmemory_budget_mb = 64\nreplica_every = 1\n";

class ReplicaSnapshotTest : public SupervisedRunTest {
 protected:
  // One rank per node, two nodes: the reference's world of 2.
  void WriteTwoNodeJob(const std::string& fault = "") {
    WriteJob(fault, kRecovery, /*hang_min_s=*/60);
    std::string job = ReadFile(dir_ / "job.toml");
    job.replace(job.find("nproc = 2"), 9, "nproc = 1");
    WriteFile(dir_ / "job.toml", job);
  }
  std::vector<std::string> Node(int node, int nodes) const {
    std::vector<std::string> cmd = Daemon();
    cmd.insert(cmd.end(), {"--nodes", std::to_string(nodes)});
    if (node > 0) cmd.insert(cmd.end(), {"--node-id", std::to_string(node)});
    return cmd;
  }
  // The snapshot folder of the daemon with pid `pid`.
  static std::string FolderOf(const std::string& run_id, int pid) {
    return std::string("/dev/shm/holdfast-snap-") + run_id + "-" + std::to_string(pid);
  }
  static int64_t NewestCommitted(const std::string& folder) { return NewestCommittedSnapshot(folder); }
  // Waits until every rank of `ranks` runs at `step` or later; the status then.
  std::optional<RunStatus> WaitForRanks(ChildProcess& lead, size_t ranks, int64_t step) {
    return testing::WaitForStatus(lead, dir_ / "run", "every rank at step " + std::to_string(step), 300,
                                  [&](const RunStatus& st) {
                                    size_t n = 0;
                                    for (const auto& node : st.nodes) {
                                      for (const auto& r : node.ranks) n += r.step >= step && r.state == "running";
                                    }
                                    return n == ranks;
                                  });
  }
  // SIGSTOPs every rank (the snapshots then stay as they are) and waits until
  // node 1's replica of node 0 and node 0's of node 1 hold node 0's newest
  // committed step. Returns the ranks' pids (rank order) and that step.
  // Stops every rank (SIGSTOP) and waits until the newest committed step of
  // node 0 is replicated both ways. A push that fails is not retried (the
  // replica service goes on with the next step: docs/memory-snapshots.md), so
  // on a loaded machine the step frozen on may never get its replica: then
  // the ranks run on for a few steps and are frozen again, each wait well
  // within the job's hang allowance (hang_min_s 60; a 60 s wait here had
  // the run restarted as hung under CI load).
  std::pair<std::vector<pid_t>, int64_t> FreezeAndAwaitReplicas(ChildProcess& lead, const RunStatus& st,
                                                                const std::string& zero, const std::string& one) {
    std::vector<pid_t> pids(2, 0);
    for (const auto& node : st.nodes) {
      for (const auto& r : node.ranks) pids[static_cast<size_t>(r.rank)] = static_cast<pid_t>(r.pid);
    }
    auto replicated = [&](int64_t step) {
      return step >= 0 && fs::exists(one + "/replica-0/" + StepDirName(step) + "/" + kManifestFileName) &&
             fs::exists(zero + "/replica-1/" + StepDirName(step) + "/" + ShardFileName(1, 2));
    };
    for (int attempt = 0; attempt < 5 && !lead.Exited(); ++attempt) {
      for (pid_t pid : pids) EXPECT_EQ(kill(pid, SIGSTOP), 0);
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (std::chrono::steady_clock::now() < until) {
        const int64_t step = NewestCommitted(zero);
        if (replicated(step)) return {pids, step};
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      for (pid_t pid : pids) EXPECT_EQ(kill(pid, SIGCONT), 0);
      std::this_thread::sleep_for(std::chrono::seconds(2));
    }
    ADD_FAILURE() << "no committed step was replicated both ways in 5 freezes of 20 s\n"
                  << ReadFile(dir_ / "daemon.log") << ReadFile(dir_ / "follower.log");
    return {pids, -1};
  }
  std::string RankLog(int generation, int rank) const {
    return ReadFile(RankLogPath(dir_ / "run", 1, generation, rank));
  }
};

TEST_F(ReplicaSnapshotTest, TwoNodesACrashedRankRestoresFromMemoryAndAFlippedByteFromTheReplica) {
  WriteTwoNodeJob();
  ChildProcess lead(Node(0, 2), dir_ / "daemon.log");
  ChildProcess follow(Node(1, 2), dir_ / "follower.log");
  auto st = WaitForRanks(lead, 2, 12);
  ASSERT_TRUE(st.has_value());
  const std::string zero = FolderOf(st->run_id, lead.pid()), one = FolderOf(st->run_id, follow.pid());
  auto [pids, step] = FreezeAndAwaitReplicas(lead, *st, zero, one);
  ASSERT_GE(step, 1);
  // A byte of node 0's own shard of that step (the trainer's file and its held link): only the replica is good.
  const std::string shard = zero + "/" + StepDirName(step) + "/" + ShardFileName(0, 2);
  {
    std::fstream io(shard, std::ios::in | std::ios::out | std::ios::binary);
    const std::streamoff at = static_cast<std::streamoff>(fs::file_size(shard)) - 1;
    io.seekg(at);
    char c = 0;
    io.get(c);
    io.seekp(at);
    io.put(static_cast<char>(c ^ 0x10));
  }
  fs::rename(dir_ / "ck", dir_ / "ck.gone");  // no disk from here on
  ASSERT_EQ(kill(pids[0], SIGKILL), 0);  // rank 0, the writer of manifests: no later step can commit
  ExpectFinishedBitExact(lead);
  EXPECT_EQ(follow.Wait(), 0) << ReadFile(dir_ / "follower.log");

  const std::regex resumed("resumed from memory snapshot \\S+/step-0*([0-9]+) \\(step ([0-9]+)\\); restore tier: memory");
  for (int rank : {0, 1}) {
    const std::string log = RankLog(1, rank);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(log, m, resumed)) << "rank " << rank << ":\n" << log;
    EXPECT_EQ(std::stoll(m[2].str()), step) << log;
    EXPECT_EQ(log.find("restore tier: disk"), std::string::npos) << log;
  }
  // The flipped shard was found and replaced from node 1's replica.
  const std::string lead_log = ReadFile(dir_ / "daemon.log");
  EXPECT_NE(lead_log.find(shard + " failed its check against the manifest"), std::string::npos) << lead_log;
  EXPECT_NE(lead_log.find(ShardFileName(0, 2) + " from the replica on node 1"), std::string::npos) << lead_log;
  auto db = Lineage();
  ASSERT_NE(db, nullptr);
  auto run = db->LatestRun();
  ASSERT_TRUE(run.ok());
  auto gens = db->Generations(run->run_id);
  ASSERT_TRUE(gens.ok());
  ASSERT_EQ(gens->size(), 2u);
  EXPECT_EQ((*gens)[1].start_step, step);
  auto inc = db->LastIncident(run->run_id);
  ASSERT_TRUE(inc.ok() && inc->has_value());
  EXPECT_NE((*inc)->action.find("from step " + std::to_string(step) + " (memory snapshot)"), std::string::npos)
      << (*inc)->action;
  EXPECT_FALSE(fs::exists(zero));
  EXPECT_FALSE(fs::exists(one));
}

// An elastic run (min_nodes = 1) of two nodes loses node 1 (its daemon and
// rank SIGKILLed) with the checkpoint directory gone: node 0 goes on alone
// from the newest snapshot, node 1's shard from its replica on node 0.
TEST_F(ReplicaSnapshotTest, ALostNodesShardsComeFromTheReplicaOnItsPeer) {
  std::string cfg = ReadFile(*shared_ / "train.toml");
  cfg.replace(cfg.find("dropout = 0.1"), 13, "dropout = 0.0");
  cfg.replace(cfg.find("micro_batch = 4"), 15, "micro_batch = 2\ngrad_accum = 2");
  WriteFile(dir_ / "elastic.toml", cfg);
  ProcessResult ref = RunProcess({BuildPath("trainer/holdfast-train"), "--config", dir_ / "elastic.toml", "--nproc",
                                  "2", "--set", "output.dir=" + (dir_ / "ref_out"), "--metrics", dir_ / "ref.jsonl"});
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  WriteTwoNodeJob();
  std::string job = ReadFile(dir_ / "job.toml");
  job.replace(job.find(*shared_ / "train.toml"), (*shared_ / "train.toml").size(), dir_ / "elastic.toml");
  job.replace(job.find("nproc = 1"), 9, "nproc = 1\nmin_nodes = 1");
  job.replace(job.find("\"--dump-final\""), 14, "\"--metrics\", \"" + (dir_ / "metrics.jsonl") + "\", \"--dump-final\"");
  WriteFile(dir_ / "job.toml", job);
  ChildProcess lead(Node(0, 2), dir_ / "daemon.log");
  ChildProcess follow(Node(1, 2), dir_ / "follower.log");
  auto st = WaitForRanks(lead, 2, 12);
  ASSERT_TRUE(st.has_value());
  const std::string zero = FolderOf(st->run_id, lead.pid()), one = FolderOf(st->run_id, follow.pid());
  auto [pids, step] = FreezeAndAwaitReplicas(lead, *st, zero, one);
  ASSERT_GE(step, 1);
  fs::rename(dir_ / "ck", dir_ / "ck.gone");
  follow.Signal(SIGKILL);  // node 1's daemon; its (stopped) rank dies with it
  follow.Wait();
  EXPECT_EQ(lead.Wait(), 0) << ReadFile(dir_ / "daemon.log");

  // Rank 0, told to stop, may commit one more step whose shard of rank 1 was written (and replicated) already.
  const std::string log = RankLog(1, 0);
  const std::regex resumed("resumed from memory snapshot " + zero + "/step-0*([0-9]+) \\(step ([0-9]+)\\); restore tier: memory");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, resumed)) << log;
  const int64_t from = std::stoll(m[2].str());
  EXPECT_GE(from, step) << log;
  EXPECT_LE(from, step + 1) << log;
  EXPECT_NE(log.find("RESHARDED: checkpoint of step " + std::to_string(from) + " saved by 2 ranks, resumed on 1"),
            std::string::npos)
      << log;
  auto db = Lineage();
  ASSERT_NE(db, nullptr);
  auto run = db->LatestRun();
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->state, RunState::kSucceeded) << run->cause;
  auto events = db->Events(run->run_id, 0);
  ASSERT_TRUE(events.ok());
  bool lost = false;
  for (const auto& e : *events) {
    if (e.kind != "node_lost") continue;
    lost = true;
    // The action was written at the incident, before rank 0 could commit its last step.
    const std::string note = " (memory snapshot; node 1 (" + ThisHost() + "-n1)'s shards from the replica on node 0 (" +
                             ThisHost() + "-n0))";
    EXPECT_TRUE(e.action.find("from step " + std::to_string(step) + note) != std::string::npos ||
                e.action.find("from step " + std::to_string(from) + note) != std::string::npos)
        << e.action;
  }
  EXPECT_TRUE(lost) << ReadFile(dir_ / "daemon.log");
  const double want = LossAtStep(dir_ / "ref.jsonl", kSteps), got = LossAtStep(dir_ / "metrics.jsonl", kSteps);
  ASSERT_GT(want, 0);
  EXPECT_NEAR(got, want, 1e-4 * want) << "the resharded run's final loss";
  EXPECT_FALSE(fs::exists(zero));
  EXPECT_FALSE(fs::exists(one)) << "the killed daemon's snapshots, swept when the next generation started";
}

// A run of two training nodes and a spare (max_nodes = min_nodes = 2) loses
// node 1 (its daemon and rank SIGKILLed) with the checkpoint directory gone:
// the spare takes node 1's place, rank 1's shard comes from its replica on a
// surviving node, the world stays 2 and the run ends bit for bit with the
// fault-free run.
TEST_F(ReplicaSnapshotTest, ALostNodesReplacementRestoresItsShardsFromTheReplicaBitExact) {
  WriteTwoNodeJob();
  std::string job = ReadFile(dir_ / "job.toml");
  job.replace(job.find("nproc = 1"), 9, "nproc = 1\nmin_nodes = 2\nmax_nodes = 2");
  job.replace(job.find("replica_every = 1\n"), 18, "");  // the default: every 10th step is replicated
  WriteFile(dir_ / "job.toml", job);
  ChildProcess lead(Node(0, 3), dir_ / "daemon.log");
  ChildProcess follow(Node(1, 3), dir_ / "follower.log");
  ChildProcess spare(Node(2, 3), dir_ / "spare.log");
  auto st = WaitForRanks(lead, 2, 12);
  ASSERT_TRUE(st.has_value());
  for (const auto& node : st->nodes) ASSERT_LT(node.node, 2) << "node 2 is the spare: it runs no rank";
  const std::string zero = FolderOf(st->run_id, lead.pid()), one = FolderOf(st->run_id, follow.pid());
  const std::string two = FolderOf(st->run_id, spare.pid());
  std::vector<pid_t> pids;
  for (const auto& node : st->nodes) {
    for (const auto& r : node.ranks) {
      pids.push_back(static_cast<pid_t>(r.pid));
      ASSERT_EQ(kill(static_cast<pid_t>(r.pid), SIGSTOP), 0);
    }
  }
  // A replicated step S: node 1's shard of it on a node that survives, and
  // node 0's own copy of S held for its push (the trainer keeps only its
  // newest snapshot and the newest replicated step: both may move on once
  // the ranks go on, as when rank 0 was stopped inside the next commit).
  int64_t step = -1;
  const bool replicated = testing::WaitUntil(lead, "a replicated step of node 1 that node 0 holds too", 120, [&] {
    for (const std::string& holder : {zero, two}) {
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(holder + "/replica-1", ec)) {
        const int64_t s = ParseStepDirName(e.path().filename().string());
        if (s > step && fs::exists(e.path() / ShardFileName(1, 2)) &&
            fs::exists(zero + "/held/" + StepDirName(s) + "/" + kManifestFileName)) {
          step = s;
        }
      }
    }
    return step >= 0;
  });
  ASSERT_TRUE(replicated) << ReadFile(dir_ / "daemon.log") << ReadFile(dir_ / "follower.log")
                          << ReadFile(dir_ / "spare.log");
  EXPECT_EQ(step % 10, 0) << "only every 10th snapshot is replicated";
  fs::rename(dir_ / "ck", dir_ / "ck.gone");  // no disk from here on
  follow.Signal(SIGKILL);  // node 1's daemon; its (stopped) rank dies with it
  follow.Wait();
  for (pid_t pid : pids) (void)kill(pid, SIGCONT);  // rank 0 goes on to be stopped by its daemon
  ExpectFinishedBitExact(lead);
  EXPECT_EQ(spare.Wait(), 0) << ReadFile(dir_ / "spare.log");

  // Rank 1 of the next generation ran on the spare and restored from memory, as rank 0 did.
  const std::regex resumed("resumed from memory snapshot \\S+/step-0*([0-9]+) \\(step ([0-9]+)\\); restore tier: memory");
  int64_t from = -1;
  for (int rank : {0, 1}) {
    const std::string log = RankLog(1, rank);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(log, m, resumed)) << "rank " << rank << ":\n" << log << "\nnode 0:\n"
                                                    << ReadFile(dir_ / "daemon.log") << "\nnode 2:\n"
                                                    << ReadFile(dir_ / "spare.log");
    if (from < 0) from = std::stoll(m[2].str());
    EXPECT_EQ(std::stoll(m[2].str()), from) << "every rank restores one step:\n" << log;
    EXPECT_EQ(log.find("RESHARDED"), std::string::npos) << log;
  }
  EXPECT_GE(from, step);
  auto db = Lineage();
  ASSERT_NE(db, nullptr);
  auto run = db->LatestRun();
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->state, RunState::kSucceeded) << run->cause;
  auto gens = db->Generations(run->run_id);
  ASSERT_TRUE(gens.ok());
  ASSERT_EQ(gens->size(), 2u);
  EXPECT_EQ((*gens)[1].start_step, from);
  EXPECT_EQ((*gens)[1].restore_tier, "memory");
  auto events = db->Events(run->run_id, 0);
  ASSERT_TRUE(events.ok());
  bool lost = false;
  for (const auto& e : *events) {
    if (e.kind != "node_lost") continue;
    lost = true;
    EXPECT_NE(e.action.find(ThisHost() + "-n2"), std::string::npos) << "the spare named: " << e.action;
    EXPECT_NE(e.action.find("memory snapshot; node 1 (" + ThisHost() + "-n1)'s shards from the replica on node "),
              std::string::npos)
        << e.action;
  }
  EXPECT_TRUE(lost) << ReadFile(dir_ / "daemon.log");
  EXPECT_FALSE(fs::exists(zero));
  EXPECT_FALSE(fs::exists(two));
  EXPECT_FALSE(fs::exists(one)) << "the killed daemon's snapshots, swept when the next generation started";
}

}  // namespace
}  // namespace holdfast
