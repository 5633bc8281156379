// Model-parallel runs under holdfastd (issue 26, must-show 3): 4 real
// holdfast-train ranks as tp 2 x dp 2 and 8 as tp 2 x pp 2 x dp 2, the
// fault-free run of the same layout without a supervisor as the reference. A
// killed rank restarts the run from its checkpoint and it ends
// bit-identical; a rank stuck in compute is the hang's culprit while its
// tensor-parallel peer waits for it.
#include <signal.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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

constexpr int kRanks = 4;

std::string TrainConfig(const std::string& corpus) {
  std::ostringstream os;
  os << "[model]\nn_layer = 2\nn_head = 4\nn_embd = 64\nblock_size = 64\ndropout = 0\n"
     << "[data]\nformat = \"text\"\npath = \"" << corpus << "\"\n"
     << "[train]\nsteps = 30\nmicro_batch = 2\nseed = 11\nthreads = 1\nlog_every = 10\n"
     << "[optim]\nlr = 1e-3\nmin_lr = 1e-4\nwarmup_steps = 5\n"
     << "[dist]\nbucket_mb = 0.05\ntensor_parallel = 2\n"
     << "[checkpoint]\nevery_steps = 5\n";
  return os.str();
}

// tp 2 x pp 2 x dp 2: a 4-layer model cut into 2 stages, 4 micro-batches of
// 1 per step on each of the 2 data-parallel groups (docs/parallelism.md).
constexpr int kPipelineRanks = 8;
const std::vector<std::string> kPipelineLayout = {
    "--set", "model.n_layer=4",     "--set", "dist.pipeline_parallel=2", "--set", "train.micro_batch=1",
    "--set", "train.grad_accum=4", "--set", "optim.lr=6e-4"};

class TensorParallelSupervisionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    shared_ = new TempDir("tp_supervision_ref");
    std::string text;
    for (const char* name : {"GPL-3", "LGPL-2.1", "Apache-2.0"}) {
      text += ReadFile(std::string("/usr/share/common-licenses/") + name);
    }
    WriteFile(*shared_ / "corpus.txt", text);
    WriteFile(*shared_ / "train.toml", TrainConfig(*shared_ / "corpus.txt"));
  }
  static void TearDownTestSuite() { delete shared_; }

  TensorParallelSupervisionTest() : dir_("tp_supervision") {}

  // The fault-free run of a layout without a supervisor: its final parameters.
  static const std::string& Reference(int nproc, const std::vector<std::string>& layout) {
    const std::string key = std::to_string(nproc) + (layout.empty() ? "" : "pp");
    auto it = references_.find(key);
    if (it != references_.end()) return it->second;
    std::vector<std::string> args = {BuildPath("trainer/holdfast-train"), "--config", *shared_ / "train.toml",
                                     "--nproc", std::to_string(nproc), "--set",
                                     "output.dir=" + (*shared_ / ("out" + key)), "--dump-final",
                                     *shared_ / ("ref" + key)};
    args.insert(args.end(), layout.begin(), layout.end());
    ProcessResult r = RunProcess(args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return references_[key] = ReadFile(*shared_ / ("ref" + key + "/params.bin"));
  }

  void WriteJob(const std::string& fault, int nproc = kRanks, const std::vector<std::string>& layout = {}) {
    reference_ = &Reference(nproc, layout);
    std::ostringstream os;
    os << "[job]\nname = \"tp-fault-test\"\ncommand = [\"" << BuildPath("trainer/holdfast-train") << "\", \"--config\", \""
       << *shared_ / "train.toml" << "\", \"--set\", \"output.dir=" << dir_ / "out" << "\", \"--set\", \"checkpoint.dir="
       << dir_ / "ck" << "\", \"--dump-final\", \"" << dir_ / "final" << "\"";
    for (const std::string& a : layout) os << ", \"" << a << "\"";
    if (!fault.empty()) os << ", \"--inject-fault\", \"" << fault << "\"";
    os << "]\nnproc = " << nproc << "\ncheckpoint_dir = \"" << dir_ / "ck" << "\"\n"
       << "[supervise]\npoll_ms = 50\nhang_min_s = 5\nstartup_timeout_s = 120\nrestart_budget = 2\nterm_grace_s = 2\n"
       << "backoff_initial_s = 0.1\nstack_timeout_s = 120\nprogress_dir = \"" << dir_ / "shm" << "\"\n"
       << "[health]\ncheckpoint_min_free_gb = 0.05\ncheckpoint_write_mb = 4\ncheckpoint_write_fail_mbps = 0\n";
    WriteFile(dir_ / "job.toml", os.str());
  }

  std::vector<std::string> Daemon() const {
    return {BuildPath("daemon/holdfastd"), "--run-dir", dir_ / "run", "--config", dir_ / "job.toml"};
  }

  void ExpectFinishedBitExact(ChildProcess& daemon) {
    EXPECT_EQ(daemon.Wait(), 0) << ReadFile(dir_ / "daemon.log");
    const std::string final_params = ReadFile(dir_ / "final/params.bin");
    ASSERT_FALSE(final_params.empty()) << ReadFile(dir_ / "daemon.log");
    EXPECT_TRUE(final_params == *reference_) << "final parameters differ from the fault-free run of the layout";
  }

  // The newest run's last incident.
  std::optional<EventRecord> LastIncident() const {
    auto db = testing::OpenLineageReadOnly(dir_ / "run");
    if (db == nullptr) return std::nullopt;
    auto run = db->LatestRun();
    EXPECT_TRUE(run.ok()) << run.status().ToString();
    if (!run.ok()) return std::nullopt;
    EXPECT_EQ(run->state, RunState::kSucceeded);
    auto inc = db->LastIncident(run->run_id);
    EXPECT_TRUE(inc.ok() && inc->has_value());
    if (!inc.ok() || !inc->has_value()) return std::nullopt;
    return **inc;
  }

  static inline TempDir* shared_ = nullptr;
  static inline std::map<std::string, std::string> references_;
  const std::string* reference_ = nullptr;
  TempDir dir_;
};

TEST_F(TensorParallelSupervisionTest, SigkillOfARankRestartsTheLayoutFromItsCheckpointBitExact) {
  WriteJob("");
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  auto st = testing::WaitForStatus(daemon, dir_ / "run", "every rank past step 12", 300, [](const RunStatus& s) {
    if (s.nodes.empty() || s.nodes[0].ranks.size() != kRanks) return false;
    for (const auto& r : s.nodes[0].ranks) {
      if (r.step < 12 || r.state != "running") return false;
    }
    return true;
  });
  ASSERT_TRUE(st.has_value()) << ReadFile(dir_ / "daemon.log");
  const auto victim = st->nodes[0].ranks[3];  // tp 1 of dp group 1
  ASSERT_EQ(victim.rank, 3);
  ASSERT_EQ(kill(static_cast<pid_t>(victim.pid), SIGKILL), 0);
  ExpectFinishedBitExact(daemon);
  auto inc = LastIncident();
  ASSERT_TRUE(inc.has_value());
  EXPECT_EQ(inc->kind, "crash");
  EXPECT_EQ(inc->rank, 3);
  EXPECT_NE(inc->summary.find("rank 3 killed by signal 9 (SIGKILL)"), std::string::npos) << inc->summary;
  EXPECT_NE(inc->action.find("restart generation 1 from step"), std::string::npos) << inc->action;
}

// Rank 1 (tp 1 of dp 0) spins in compute at step 14: its tensor-parallel
// peer, rank 0, waits in the group's allreduce for it, the other group in the
// gradient reduction; the rank that never entered the collective is named,
// with its place in the mesh and the group the collective is on.
TEST_F(TensorParallelSupervisionTest, ARankStuckInComputeIsTheHangsCulprit) {
  WriteJob("hang@1:14");
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  // While it hangs, runctl status names the collective rank 0 waits in by
  // its group and its number there.
  auto hung = testing::WaitForStatus(daemon, dir_ / "run", "rank 0 waiting in its tp group behind rank 1", 300,
                                     [](const RunStatus& s) {
                                       if (s.nodes.empty() || s.nodes[0].ranks.size() < 2) return false;
                                       const RankStatus& r0 = s.nodes[0].ranks[0];
                                       const RankStatus& r1 = s.nodes[0].ranks[1];
                                       return r1.step == 13 && !r1.waiting_on && r0.waiting_group == "tp" &&
                                              r0.waiting_kind == "allreduce" && r0.waiting_group_seq.has_value();
                                     });
  ASSERT_TRUE(hung.has_value()) << ReadFile(dir_ / "daemon.log");
  ExpectFinishedBitExact(daemon);
  auto inc = LastIncident();
  ASSERT_TRUE(inc.has_value());
  EXPECT_EQ(inc->kind, "hang");
  EXPECT_EQ(inc->rank, 1) << inc->summary;
  EXPECT_EQ(inc->summary.rfind("rank 1 (tp 1, pp stage 0, dp 0) in ", 0), 0u) << inc->summary;
  EXPECT_NE(inc->summary.find("rank 0 (tp 0, pp stage 0, dp 0) waiting"), std::string::npos)
      << "its tp peer\n" << inc->summary;
  EXPECT_NE(inc->summary.find("of its tp group (ranks 0-1), which it never entered"), std::string::npos)
      << inc->summary;
  auto ev = nlohmann::json::parse(inc->evidence_json);
  EXPECT_EQ(ev["ranks"].size(), static_cast<size_t>(kRanks));
}

// tp 2 x pp 2 x dp 2: rank 6 (tp 0, pp stage 1, dp 1) SIGKILLed mid-run; the
// run restarts every stage from the checkpoint and ends bit-identical.
TEST_F(TensorParallelSupervisionTest, SigkillOfAPipelineStageRestartsTheRunBitExact) {
  WriteJob("", kPipelineRanks, kPipelineLayout);
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  auto st = testing::WaitForStatus(daemon, dir_ / "run", "every rank past step 12", 300, [](const RunStatus& s) {
    if (s.nodes.empty() || s.nodes[0].ranks.size() != kPipelineRanks) return false;
    for (const auto& r : s.nodes[0].ranks) {
      if (r.step < 12 || r.state != "running") return false;
    }
    return true;
  });
  ASSERT_TRUE(st.has_value()) << ReadFile(dir_ / "daemon.log");
  const auto victim = st->nodes[0].ranks[6];
  ASSERT_EQ(victim.rank, 6);
  // runctl status shows the mesh and each rank's place in it (from the ranks' records).
  EXPECT_EQ(st->mesh, "tp=2,pp=2,dp=2");
  EXPECT_EQ(victim.place, "tp 0, pp stage 1, dp 1");
  ASSERT_EQ(kill(static_cast<pid_t>(victim.pid), SIGKILL), 0);
  ExpectFinishedBitExact(daemon);
  auto inc = LastIncident();
  ASSERT_TRUE(inc.has_value());
  EXPECT_EQ(inc->kind, "crash");
  EXPECT_EQ(inc->rank, 6);
  EXPECT_NE(inc->summary.find("rank 6 killed by signal 9 (SIGKILL)"), std::string::npos) << inc->summary;
  EXPECT_NE(inc->action.find("restart generation 1 from step"), std::string::npos) << inc->action;
  // Lineage keeps each generation's mesh, as its ranks reported it.
  auto db = testing::OpenLineageReadOnly(dir_ / "run");
  ASSERT_NE(db, nullptr);
  auto gens = db->Generations(inc->run_id);
  ASSERT_TRUE(gens.ok()) << gens.status().ToString();
  ASSERT_EQ(gens->size(), 2u);
  for (const GenerationRecord& g : *gens) EXPECT_EQ(g.mesh, "tp=2,pp=2,dp=2") << "generation " << g.generation;
}

// tp 2 x pp 2 x dp 2: rank 6 (tp 0, pp stage 1, dp 1) stops itself with
// SIGSTOP at the start of step 14 (--inject-fault stop@6:14, a stop at a
// point the test can name). The hang names the stopped stage, and its
// pipeline neighbour of stage 0 (rank 2) waiting in a send/recv with it; the
// run restarts from its checkpoint and ends bit-identical.
TEST_F(TensorParallelSupervisionTest, AStoppedPipelineStageIsAHangNamingTheSendRecvItsNeighbourWaitsIn) {
  WriteJob("stop@6:14", kPipelineRanks, kPipelineLayout);
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  ExpectFinishedBitExact(daemon);
  auto inc = LastIncident();
  ASSERT_TRUE(inc.has_value());
  EXPECT_EQ(inc->kind, "hang");
  EXPECT_EQ(inc->rank, 6) << inc->summary;
  EXPECT_EQ(inc->summary.rfind("rank 6 (tp 0, pp stage 1, dp 1) in ", 0), 0u) << inc->summary;
  EXPECT_NE(inc->summary.find("process stopped (SIGSTOP?)"), std::string::npos) << inc->summary;
  EXPECT_NE(inc->summary.find("rank 2 (tp 0, pp stage 0, dp 1) waiting"), std::string::npos) << inc->summary;
  // Stage 0 is in a send/recv with it: sending micro-batch 0's activations
  // (Gloo's send waits for the receive) or receiving a gradient.
  EXPECT_TRUE(inc->summary.find(" activations to it") != std::string::npos ||
              inc->summary.find(" gradients from it") != std::string::npos)
      << inc->summary;
  auto ev = nlohmann::json::parse(inc->evidence_json);
  EXPECT_EQ(ev["allowance"], "stopped");
}

}  // namespace
}  // namespace holdfast
