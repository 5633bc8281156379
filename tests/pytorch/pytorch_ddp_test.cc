// Any PyTorch job under holdfastd: the DDP example (examples/pytorch_ddp/train.py,
// Debian's python3-torch, Gloo) with and without the Python progress module
// (common/python), against real signals. The fault-free reference is the same
// job supervised without faults.
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/daemon_client.h"
#include "tests/support/subprocess.h"

namespace holdfast {
namespace {

using testing::BuildPath;
using testing::ChildProcess;
using testing::OpenLineageReadOnly;
using testing::ReadFile;
using testing::TempDir;
using testing::WaitForLines;
using testing::WaitForStatus;
using testing::WriteFile;

constexpr int kSteps = 60;
const std::string kSource = HOLDFAST_SOURCE_DIR;

// One supervised run of the DDP example in a folder of its own.
class DdpJob {
 public:
  DdpJob(const std::string& corpus, bool progress) : dir_("pytorch_ddp"), out_(dir_ / "out") {
    std::ostringstream os;
    os << "[job]\nname = \"ddp-test\"\ncommand = [\"/usr/bin/python3\", \"" << kSource
       << "/examples/pytorch_ddp/train.py\", \"--data\", \"" << corpus << "\", \"--out\", \"" << out_
       << "\", \"--steps\", \"" << kSteps << "\", \"--checkpoint-every\", \"10\", \"--step-sleep\", \"0.05\"";
    if (!progress) os << ", \"--no-progress\"";
    os << "]\nnproc = 2\n"
       << "[job.env]\nPYTHONPATH = \"" << kSource << "/common/python\"\nOMP_NUM_THREADS = \"1\"\n"
       << "[supervise]\npoll_ms = 50\nhang_min_s = 3\nstartup_timeout_s = 120\nrestart_budget = 2\n"
       << "term_grace_s = 2\nbackoff_initial_s = 0.1\nprogress_dir = \"" << dir_ / "shm" << "\"\n"
       << "[health]\ncheckpoint_min_free_gb = 0.05\ncheckpoint_write_mb = 4\n";
    WriteFile(dir_ / "job.toml", os.str());
  }

  std::vector<std::string> Daemon() const {
    return {BuildPath("daemon/holdfastd"), "--run-dir", dir_ / "run", "--config", dir_ / "job.toml"};
  }
  std::string log() const { return dir_ / "daemon.log"; }
  const std::string& out() const { return out_; }

  // Waits (no timing assertion) until rank 1 has logged `step` steps and the
  // daemon answers with both ranks running.
  std::optional<RunStatus> WaitForStep(int step, ChildProcess& daemon) const {
    if (!WaitForLines(out_ + "/metrics-rank1.jsonl", static_cast<size_t>(step), daemon)) return std::nullopt;
    return WaitForStatus(daemon, dir_ / "run", [](const RunStatus& st) {
      if (st.nodes.empty() || st.nodes[0].ranks.size() != 2) return false;
      bool running = true;
      for (const auto& r : st.nodes[0].ranks) running = running && r.state == "running";
      return running;
    });
  }

  std::optional<EventRecord> LastIncident() const {
    auto db = OpenLineageReadOnly(dir_ / "run");
    if (db == nullptr) return std::nullopt;
    auto run = db->LatestRun();
    EXPECT_TRUE(run.ok());
    if (!run.ok()) return std::nullopt;
    auto inc = db->LastIncident(run->run_id);
    EXPECT_TRUE(inc.ok() && inc->has_value());
    if (!inc.ok() || !inc->has_value()) return std::nullopt;
    return **inc;
  }

  nlohmann::json Final() const { return nlohmann::json::parse(ReadFile(out_ + "/final.json")); }

 private:
  TempDir dir_;
  std::string out_;
};

class PytorchDdpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    shared_ = new TempDir("pytorch_ddp_ref");
    std::string text;
    for (const char* name : {"GPL-3", "LGPL-2.1", "Apache-2.0"}) {
      text += ReadFile(std::string("/usr/share/common-licenses/") + name);
    }
    WriteFile(*shared_ / "corpus.txt", text);
    // The reference: the same job, supervised, no fault.
    DdpJob ref(*shared_ / "corpus.txt", true);
    ChildProcess daemon(ref.Daemon(), ref.log());
    ASSERT_EQ(daemon.Wait(), 0) << ReadFile(ref.log());
    reference_ = ref.Final();
  }
  static void TearDownTestSuite() { delete shared_; }

  std::unique_ptr<DdpJob> Job(bool progress = true) {
    return std::make_unique<DdpJob>(*shared_ / "corpus.txt", progress);
  }

  void ExpectFinishedAsTheFaultFreeRun(const DdpJob& job, ChildProcess& daemon) {
    ASSERT_EQ(daemon.Wait(), 0) << ReadFile(job.log());
    auto final_state = job.Final();
    EXPECT_EQ(final_state["step"], kSteps);
    // Bit for bit: the batches are a function of (seed, step, rank) and the
    // checkpoint holds model and optimizer, so nothing differs.
    EXPECT_EQ(final_state["loss"].get<double>(), reference_["loss"].get<double>());
    EXPECT_EQ(final_state["params_sum"].get<double>(), reference_["params_sum"].get<double>());
  }

  static inline TempDir* shared_ = nullptr;
  static inline nlohmann::json reference_;
};

TEST_F(PytorchDdpTest, SigkillOfARankRestartsFromItsCheckpointAndEndsAsTheFaultFreeRun) {
  auto job = Job();
  ChildProcess daemon(job->Daemon(), job->log());
  auto st = job->WaitForStep(25, daemon);
  ASSERT_TRUE(st.has_value()) << ReadFile(job->log());
  EXPECT_GE(st->nodes[0].ranks[1].step, 20) << "the module reports the step";
  ASSERT_EQ(kill(static_cast<pid_t>(st->nodes[0].ranks[1].pid), SIGKILL), 0);
  ExpectFinishedAsTheFaultFreeRun(*job, daemon);
  auto inc = job->LastIncident();
  ASSERT_TRUE(inc.has_value());
  EXPECT_EQ(inc->kind, "crash");
  EXPECT_EQ(inc->rank, 1) << inc->summary;
  EXPECT_NE(inc->summary.find("SIGKILL"), std::string::npos) << inc->summary;
  EXPECT_NE(ReadFile(job->log()).find("from step"), std::string::npos);
}

TEST_F(PytorchDdpTest, SigstopOfARankIsAHangNamingItAndTheCollectiveTheOthersWaitIn) {
  auto job = Job();
  ChildProcess daemon(job->Daemon(), job->log());
  auto st = job->WaitForStep(15, daemon);
  ASSERT_TRUE(st.has_value()) << ReadFile(job->log());
  ASSERT_EQ(kill(static_cast<pid_t>(st->nodes[0].ranks[1].pid), SIGSTOP), 0);
  ExpectFinishedAsTheFaultFreeRun(*job, daemon);
  auto inc = job->LastIncident();
  ASSERT_TRUE(inc.has_value());
  EXPECT_EQ(inc->kind, "hang");
  EXPECT_EQ(inc->rank, 1) << inc->summary;
  EXPECT_NE(inc->summary.find("process stopped"), std::string::npos) << inc->summary;
  EXPECT_NE(inc->summary.find("allreduce"), std::string::npos)
      << "the collective rank 0 waits in is named: " << inc->summary;
}

TEST_F(PytorchDdpTest, WithoutTheModuleCrashesStillRestartAndProgressIsUnknown) {
  auto job = Job(/*progress=*/false);
  ChildProcess daemon(job->Daemon(), job->log());
  auto st = job->WaitForStep(25, daemon);
  ASSERT_TRUE(st.has_value()) << ReadFile(job->log());
  for (const auto& r : st->nodes[0].ranks) {
    EXPECT_EQ(r.phase, "unknown (no progress record written)") << "rank " << r.rank;
    EXPECT_EQ(r.step, 0) << "no step is claimed without a record";
  }
  ASSERT_EQ(kill(static_cast<pid_t>(st->nodes[0].ranks[0].pid), SIGKILL), 0);
  ExpectFinishedAsTheFaultFreeRun(*job, daemon);
  auto inc = job->LastIncident();
  ASSERT_TRUE(inc.has_value());
  EXPECT_EQ(inc->kind, "crash") << "never a hang: nothing says the job is stuck";
  EXPECT_EQ(inc->rank, 0) << inc->summary;
}

}  // namespace
}  // namespace holdfast
