// Any PyTorch job under holdfastd: the DDP example (examples/pytorch_ddp/train.py,
// Debian's python3-torch, Gloo) with and without the Python progress module
// (common/python), against real signals. The fault-free reference is the same
// job supervised without faults. The signal contract (docs/job-contract.md):
// runctl checkpoint, runctl stop and a preemption (SIGUSR1 to holdfastd) reach
// the job as real signals, which it honours through the module; lineage
// records the checkpoints the job reports, and runctl resume --from-step goes
// back to one of them.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/daemon_client.h"
#include "tests/support/subprocess.h"

namespace holdfast {
namespace {

using testing::BuildPath;
using testing::ChildProcess;
using testing::LatestRunEvents;
using testing::OpenLineageReadOnly;
using testing::ProcessResult;
using testing::RunProcess;
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
  // checkpoint_every: the job's own cadence; with more than kSteps it saves
  // only when asked (and at the end), so every other save is a signal's.
  DdpJob(const std::string& corpus, bool progress, int checkpoint_every = 10)
      : dir_("pytorch_ddp"), out_(dir_ / "out"), corpus_(corpus) {
    std::ostringstream os;
    os << "[job]\nname = \"ddp-test\"\ncommand = [\"/usr/bin/python3\", \"" << kSource
       << "/examples/pytorch_ddp/train.py\", \"--data\", \"" << corpus << "\", \"--out\", \"" << out_
       << "\", \"--steps\", \"" << kSteps << "\", \"--checkpoint-every\", \"" << checkpoint_every
       << "\", \"--step-sleep\", \"0.05\"";
    if (!progress) os << ", \"--no-progress\"";
    os << "]\nnproc = 2\ncheckpoint_dir = \"" << out_ << "\"\n"
       << "[job.env]\nPYTHONPATH = \"" << kSource << "/common/python\"\nOMP_NUM_THREADS = \"1\"\n"
       << "[supervise]\npoll_ms = 50\nhang_min_s = 3\nstartup_timeout_s = 120\nrestart_budget = 2\n"
       << "term_grace_s = 2\nbackoff_initial_s = 0.1\nprogress_dir = \"" << dir_ / "shm" << "\"\n"
       << "[health]\ncheckpoint_min_free_gb = 0.05\ncheckpoint_write_mb = 4\ncheckpoint_write_fail_mbps = 0\n";
    WriteFile(dir_ / "job.toml", os.str());
  }

  std::vector<std::string> Daemon() const {
    return {BuildPath("daemon/holdfastd"), "--run-dir", dir_ / "run", "--config", dir_ / "job.toml"};
  }
  // The same job in torchrun's form: no job file, every other key its default
  // (hang_min_s 60 s, startup_timeout_s derived, progress records in /dev/shm).
  std::vector<std::string> FlagsDaemon() const {
    return {"/usr/bin/env", "PYTHONPATH=" + kSource + "/common/python", "OMP_NUM_THREADS=1",
            BuildPath("daemon/holdfastd"), "--run-dir", dir_ / "run", "--nproc-per-node", "2", "--max-restarts", "2",
            "--", "/usr/bin/python3", kSource + "/examples/pytorch_ddp/train.py", "--data", corpus_, "--out", out_,
            "--steps", std::to_string(kSteps), "--checkpoint-every", "10", "--step-sleep", "0.05"};
  }
  std::string log() const { return dir_ / "daemon.log"; }
  std::string run_dir() const { return dir_ / "run"; }
  const std::string& out() const { return out_; }
  std::string CheckpointFile(int64_t step) const {
    char name[32];
    std::snprintf(name, sizeof name, "ckpt-%08lld.pt", static_cast<long long>(step));
    return out_ + "/" + name;
  }

  ProcessResult Runctl(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {BuildPath("cli/runctl"), "--run-dir", run_dir()};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProcess(argv);
  }

  // The newest step both ranks logged (metrics-rank<r>.jsonl: one line per completed step).
  int64_t LastLoggedStep() const {
    int64_t last = INT64_MAX;
    for (int r = 0; r < 2; ++r) {
      std::istringstream in(ReadFile(out_ + "/metrics-rank" + std::to_string(r) + ".jsonl"));
      int64_t mine = -1;
      for (std::string line; std::getline(in, line);) {
        if (line.empty()) continue;
        const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        EXPECT_TRUE(j.is_object() && j.contains("step")) << "rank " << r << ": " << line;
        if (j.is_object() && j.contains("step")) mine = std::max<int64_t>(mine, j["step"].get<int64_t>());
      }
      last = std::min(last, mine);
    }
    return last;
  }

  // The newest run's checkpoint rows, by step (the newest row of each).
  std::map<int64_t, CheckpointRecord> Checkpoints() const {
    std::map<int64_t, CheckpointRecord> out;
    auto db = OpenLineageReadOnly(run_dir());
    if (db == nullptr) return out;
    auto run = db->LatestRun();
    EXPECT_TRUE(run.ok());
    if (!run.ok()) return out;
    auto rows = db->Checkpoints(run->run_id);
    EXPECT_TRUE(rows.ok());
    if (rows.ok()) {
      for (const CheckpointRecord& c : *rows) out[c.step] = c;
    }
    return out;
  }

  RunRecord Run() const {
    auto db = OpenLineageReadOnly(run_dir());
    if (db == nullptr) return {};
    auto run = db->LatestRun();
    EXPECT_TRUE(run.ok());
    return run.ok() ? *run : RunRecord{};
  }

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
  std::string corpus_;
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

  std::unique_ptr<DdpJob> Job(bool progress = true, int checkpoint_every = 10) {
    return std::make_unique<DdpJob>(*shared_ / "corpus.txt", progress, checkpoint_every);
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

  // Every row of `rows` is the job's own, at its real file, as big as the file is.
  static void ExpectRecordedAtTheirFiles(const DdpJob& job, const std::map<int64_t, CheckpointRecord>& rows,
                                         const std::set<int64_t>& committed) {
    std::set<int64_t> got;
    for (const auto& [step, c] : rows) {
      if (c.state != CheckpointState::kCommitted) continue;
      got.insert(step);
      EXPECT_EQ(c.owner, CheckpointOwner::kJob) << step;
      EXPECT_EQ(c.path, std::filesystem::absolute(job.CheckpointFile(step)).lexically_normal().string()) << step;
      struct stat st {};
      ASSERT_EQ(stat(c.path.c_str(), &st), 0) << c.path << " is recorded and must exist";
      EXPECT_EQ(c.bytes, static_cast<int64_t>(st.st_size)) << c.path;
      EXPECT_GT(c.bytes, 0) << c.path;
    }
    EXPECT_EQ(got, committed);
  }

  static void ExpectNoCrashOrHang(const DdpJob& job) {
    for (const EventRecord& e : LatestRunEvents(job.run_dir())) {
      EXPECT_NE(e.kind, "crash") << e.summary;
      EXPECT_NE(e.kind, "hang") << e.summary;
    }
  }

  // The ckpt-*.pt files in the job's folder, by step.
  static std::set<int64_t> CheckpointFilesOnDisk(const DdpJob& job) {
    std::set<int64_t> steps;
    for (const auto& e : std::filesystem::directory_iterator(job.out())) {
      const std::string name = e.path().filename().string();
      if (name.size() == 16 && name.rfind("ckpt-", 0) == 0 && name.substr(13) == ".pt") {
        steps.insert(std::stoll(name.substr(5, 8)));
      }
    }
    return steps;
  }

  // A detached holdfastd (runctl resume) ends: the run is no longer running
  // and nobody holds its lock. Polls; the deadline is a backstop.
  static bool WaitForDetachedRunEnd(const DdpJob& job) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
    while (std::chrono::steady_clock::now() < deadline) {
      const RunRecord run = job.Run();
      if (run.state != RunState::kRunning && !std::filesystem::exists(job.run_dir() + "/holdfastd.sock")) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "the resumed run did not end within 5 minutes:\n" << ReadFile(job.run_dir() + "/holdfastd.log");
    return false;
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
  // The job said where each generation started (holdfast.resumed): lineage has it.
  auto db = OpenLineageReadOnly(job->run_dir());
  ASSERT_NE(db, nullptr);
  auto gens = db->Generations(job->Run().run_id);
  ASSERT_TRUE(gens.ok());
  ASSERT_EQ(gens->size(), 2u);
  EXPECT_EQ((*gens)[0].restore_tier, "none");
  EXPECT_EQ((*gens)[1].restore_tier, "disk");
  EXPECT_GT((*gens)[1].start_step, 0);
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
  // The stacks, read before the ranks were stopped: rank 0's Python stack (the
  // module's faulthandler) shows where in train.py it waits; the stopped rank 1
  // could not run its handler, and says so beside its native stack.
  const ProcessResult triage = job->Runctl({"triage", "latest"});
  EXPECT_EQ(triage.exit_code, 0) << triage.output;
  EXPECT_NE(triage.output.find("  python, main thread:\n    1 rank (0):"), std::string::npos) << triage.output;
  EXPECT_NE(triage.output.find("main (train.py:"), std::string::npos) << triage.output;
  EXPECT_NE(triage.output.find("rank 1: python stack not available: the process is stopped"), std::string::npos)
      << triage.output;
  EXPECT_NE(triage.output.find("  native, main thread:"), std::string::npos) << triage.output;
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

// Must-show 3 of issue 23, on one run: runctl checkpoint (SIGUSR2 to the
// ranks) commits a checkpoint and the job trains on; runctl stop (SIGTERM)
// ends it stopped with its last step saved; lineage lists exactly the files
// the job wrote, with their sizes; runctl resume --from-step of the earlier one
// fences the later one off and ends as the fault-free run, bit for bit.
TEST_F(PytorchDdpTest, RunctlCheckpointStopAndResumeFromStepOfThePythonJob) {
  auto job = Job(/*progress=*/true, /*checkpoint_every=*/1000);  // it saves only when asked, and at the end
  int64_t asked = -1;
  int64_t stopped = -1;
  {
    ChildProcess daemon(job->Daemon(), job->log());
    ASSERT_TRUE(job->WaitForStep(10, daemon).has_value()) << ReadFile(job->log());
    ProcessResult ck = job->Runctl({"checkpoint", "latest", "--wait", "--json"});
    ASSERT_EQ(ck.exit_code, 0) << ck.output << ReadFile(job->log());
    const nlohmann::json answer = nlohmann::json::parse(ck.output.substr(ck.output.find('{')), nullptr, false);
    ASSERT_TRUE(answer.is_object() && answer.contains("committed_step")) << ck.output;
    asked = answer["committed_step"].get<int64_t>();
    EXPECT_GE(asked, 10);
    EXPECT_LT(asked, kSteps) << "before the end, only the signal makes this job save";
    // The job lives on and trains past it (it used to die of SIGUSR2: a crash).
    ASSERT_TRUE(job->WaitForStep(static_cast<int>(asked) + 5, daemon).has_value()) << ReadFile(job->log());
    ProcessResult stop = job->Runctl({"stop", "--wait"});
    EXPECT_EQ(stop.exit_code, 0) << stop.output;
    EXPECT_EQ(daemon.Wait(), 75) << "stopped after the ranks committed a checkpoint\n" << ReadFile(job->log());
  }
  EXPECT_EQ(job->Run().state, RunState::kStopped);
  stopped = job->LastLoggedStep();
  EXPECT_GT(stopped, asked);
  EXPECT_LT(stopped, kSteps);
  ExpectNoCrashOrHang(*job);
  auto rows = job->Checkpoints();
  ExpectRecordedAtTheirFiles(*job, rows, {asked, stopped});  // the newest step was saved
  EXPECT_EQ(CheckpointFilesOnDisk(*job), (std::set<int64_t>{asked, stopped})) << "lineage lists every file";
  ProcessResult lineage = job->Runctl({"lineage", "latest"});
  EXPECT_NE(lineage.output.find(job->CheckpointFile(asked).substr(job->out().size())), std::string::npos)
      << lineage.output;
  EXPECT_EQ(lineage.output.find("pruned"), std::string::npos) << "the daemon never prunes the job's files\n"
                                                              << lineage.output;

  ProcessResult refused = job->Runctl({"resume", "latest", "--from-step", std::to_string(asked + 1)});
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find("steps it can resume from: " + std::to_string(asked) + ", " + std::to_string(stopped)),
            std::string::npos)
      << refused.output;
  ProcessResult resumed = job->Runctl({"resume", "latest", "--from-step", std::to_string(asked), "--wait"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output << ReadFile(job->run_dir() + "/holdfastd.log");
  ASSERT_TRUE(WaitForDetachedRunEnd(*job));
  EXPECT_EQ(job->Run().state, RunState::kSucceeded) << ReadFile(job->run_dir() + "/holdfastd.log");
  auto final_state = job->Final();
  EXPECT_EQ(final_state["step"], kSteps);
  EXPECT_EQ(final_state["params_sum"].get<double>(), reference_["params_sum"].get<double>())
      << "resumed from step " << asked << ", it ends as the fault-free run";
  EXPECT_EQ(final_state["loss"].get<double>(), reference_["loss"].get<double>());
  // The stop's checkpoint belongs to the abandoned timeline: set aside, marked fenced.
  rows = job->Checkpoints();
  EXPECT_EQ(rows[stopped].state, CheckpointState::kFenced) << rows[stopped].reason;
  EXPECT_NE(rows[stopped].reason.find("resuming from step " + std::to_string(asked)), std::string::npos)
      << rows[stopped].reason;
  EXPECT_TRUE(std::filesystem::exists(job->CheckpointFile(stopped) + ".fenced"));
  EXPECT_FALSE(std::filesystem::exists(job->CheckpointFile(stopped)));
  ExpectRecordedAtTheirFiles(*job, rows, {asked, kSteps});
  ExpectNoCrashOrHang(*job);
}

// A preemption (SIGUSR1 to holdfastd, Slurm's warning signal): the ranks save
// the newest step and exit 75, the run ends preempted; the next daemon in the
// same run directory resumes it from that step to the fault-free result.
TEST_F(PytorchDdpTest, APreemptionSavesTheNewestStepAndTheRunResumesToTheFaultFreeResult) {
  auto job = Job(/*progress=*/true, /*checkpoint_every=*/1000);
  {
    ChildProcess daemon(job->Daemon(), job->log());
    ASSERT_TRUE(job->WaitForStep(10, daemon).has_value()) << ReadFile(job->log());
    daemon.Signal(SIGUSR1);
    EXPECT_EQ(daemon.Wait(), 75) << ReadFile(job->log());
  }
  EXPECT_EQ(job->Run().state, RunState::kPreempted);
  const int64_t saved = job->LastLoggedStep();
  EXPECT_GE(saved, 10);
  EXPECT_LT(saved, kSteps);
  ExpectRecordedAtTheirFiles(*job, job->Checkpoints(), {saved});
  ExpectNoCrashOrHang(*job);
  bool preempt = false;
  for (const EventRecord& e : LatestRunEvents(job->run_dir())) preempt = preempt || e.kind == "preempt";
  EXPECT_TRUE(preempt);

  ChildProcess again(job->Daemon(), job->log() + ".2");
  ASSERT_EQ(again.Wait(), 0) << ReadFile(job->log() + ".2");
  EXPECT_EQ(job->Final()["params_sum"].get<double>(), reference_["params_sum"].get<double>());
  auto db = OpenLineageReadOnly(job->run_dir());
  ASSERT_NE(db, nullptr);
  auto attempts = db->Attempts(job->Run().run_id);
  ASSERT_TRUE(attempts.ok());
  ASSERT_EQ(attempts->size(), 2u);
  EXPECT_EQ(attempts->back().resumed_from_step, std::optional<int64_t>(saved)) << "the newest step, not -1";
}

// torchrun's form, no job file (holdfastd --nproc-per-node 2 -- python3 train.py ...):
// a SIGKILLed rank restarts from its checkpoint, a SIGSTOPped one is a hang
// naming it and the collective its peer waits in, and the run ends as the
// fault-free one. The job's defaults are the large-job ones (hang_min_s 60 s),
// so the hang is found a minute after the rank stopped.
TEST_F(PytorchDdpTest, TorchrunsFormWithoutAJobFileRestartsACrashAndAHangAndEndsAsTheFaultFreeRun) {
  auto job = Job();
  ChildProcess daemon(job->FlagsDaemon(), job->log());
  auto st = job->WaitForStep(15, daemon);
  ASSERT_TRUE(st.has_value()) << ReadFile(job->log());
  ASSERT_EQ(kill(static_cast<pid_t>(st->nodes[0].ranks[1].pid), SIGKILL), 0);
  auto after = WaitForStatus(daemon, job->run_dir(), [](const RunStatus& s) {
    if (s.generation < 1 || s.nodes.empty() || s.nodes[0].ranks.size() != 2) return false;
    for (const auto& r : s.nodes[0].ranks) {
      if (r.state != "running" || r.step < 25) return false;
    }
    return true;
  });
  ASSERT_TRUE(after.has_value()) << ReadFile(job->log());
  ASSERT_EQ(kill(static_cast<pid_t>(after->nodes[0].ranks[0].pid), SIGSTOP), 0);
  ExpectFinishedAsTheFaultFreeRun(*job, daemon);
  const auto events = LatestRunEvents(job->run_dir());
  const EventRecord* crash = nullptr;
  const EventRecord* hang = nullptr;
  for (const auto& e : events) {
    if (e.kind == "crash" && crash == nullptr) crash = &e;
    if (e.kind == "hang" && hang == nullptr) hang = &e;
  }
  ASSERT_NE(crash, nullptr);
  EXPECT_EQ(crash->rank, 1) << crash->summary;
  EXPECT_NE(crash->summary.find("SIGKILL"), std::string::npos) << crash->summary;
  ASSERT_NE(hang, nullptr) << "no hang recorded";
  EXPECT_EQ(hang->rank, 0) << hang->summary;
  EXPECT_NE(hang->summary.find("process stopped"), std::string::npos) << hang->summary;
  EXPECT_NE(hang->summary.find("allreduce"), std::string::npos) << "the collective rank 1 waits in: " << hang->summary;
  // What ran is recorded as a job file: the resume of this run starts the same job.
  auto db = OpenLineageReadOnly(job->run_dir());
  ASSERT_NE(db, nullptr);
  auto run = db->LatestRun();
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->config_path, "holdfastd's command line");
  EXPECT_NE(run->config_text.find("nproc = 2"), std::string::npos) << run->config_text;
  EXPECT_NE(run->config_text.find("train.py"), std::string::npos) << run->config_text;
}

}  // namespace
}  // namespace holdfast
