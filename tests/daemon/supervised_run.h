// The fixture of the fault-injection suites: a real holdfastd supervising
// real holdfast-train ranks on a small GPT, and the fault-free reference run
// (same config, 2 ranks, no supervisor) its final parameters must equal.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/daemon_client.h"
#include "tests/support/subprocess.h"

namespace holdfast {

using testing::BuildPath;
using testing::ChildProcess;
using testing::ProcessResult;
using testing::ReadFile;
using testing::RunProcess;
using testing::TempDir;
using testing::WriteFile;

constexpr int kSteps = 30;

std::string TrainConfig(const std::string& corpus) {
  std::ostringstream os;
  os << "[model]\nn_layer = 2\nn_head = 4\nn_embd = 64\nblock_size = 64\ndropout = 0.1\n"
     << "[data]\nformat = \"text\"\npath = \"" << corpus << "\"\n"
     << "[train]\nsteps = " << kSteps << "\nmicro_batch = 4\nseed = 11\nthreads = 1\nlog_every = 10\n"
     << "[optim]\nlr = 3e-3\nmin_lr = 3e-4\nwarmup_steps = 5\n"
     << "[dist]\nbucket_mb = 0.05\n"
     << "[checkpoint]\nevery_steps = 5\n";
  return os.str();
}

// The shared fault-free reference: same config, 2 ranks, no supervisor.
class SupervisedRunTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    shared_ = new TempDir("supervision_ref");
    std::string text;
    for (const char* name : {"GPL-3", "LGPL-2.1", "Apache-2.0"}) {
      text += ReadFile(std::string("/usr/share/common-licenses/") + name);
    }
    WriteFile(*shared_ / "corpus.txt", text);
    WriteFile(*shared_ / "train.toml", TrainConfig(*shared_ / "corpus.txt"));
    ProcessResult r = RunProcess({BuildPath("trainer/holdfast-train"), "--config", *shared_ / "train.toml", "--nproc",
                                  "2", "--set", "output.dir=" + (*shared_ / "out"), "--dump-final", *shared_ / "ref"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    reference_ = ReadFile(*shared_ / "ref/params.bin");
  }
  static void TearDownTestSuite() { delete shared_; }

  SupervisedRunTest() : dir_("supervision") {}

  // Writes the job config; `fault` adds --inject-fault to the ranks' command.
  std::string WriteJob(const std::string& fault = "", const std::string& supervise_extra = "", double hang_min_s = 2) {
    std::ostringstream os;
    os << "[job]\nname = \"fault-test\"\ncommand = [\"" << BuildPath("trainer/holdfast-train") << "\", \"--config\", \""
       << *shared_ / "train.toml" << "\", \"--set\", \"output.dir=" << dir_ / "out" << "\", \"--set\", \"checkpoint.dir="
       << dir_ / "ck" << "\", \"--dump-final\", \"" << dir_ / "final" << "\"";
    if (!fault.empty()) os << ", \"--inject-fault\", \"" << fault << "\"";
    os << "]\nnproc = 2\ncheckpoint_dir = \"" << dir_ / "ck" << "\"\n"
       << "[supervise]\npoll_ms = 50\nhang_min_s = " << hang_min_s
       << "\nstartup_timeout_s = 90\nrestart_budget = 2\nterm_grace_s = 2\n"
       << "backoff_initial_s = 0.1\nprogress_dir = \"" << dir_ / "shm" << "\"\n"
       << supervise_extra
       // Modest disk thresholds: CI machines can be short of space.
       << "[health]\ncheckpoint_min_free_gb = 0.05\ncheckpoint_write_mb = 4\ncheckpoint_write_fail_mbps = 0\n";
    WriteFile(dir_ / "job.toml", os.str());
    return dir_ / "job.toml";
  }

  std::vector<std::string> Daemon() const {
    return {BuildPath("daemon/holdfastd"), "--run-dir", dir_ / "run", "--config", dir_ / "job.toml"};
  }

  // Live status from the daemon; nullopt while it does not answer yet.
  std::optional<RunStatus> Status() const { return testing::DaemonStatus(dir_ / "run"); }

  // Waits (no timing assertion) until the daemon reports every rank at `step` or later.
  std::optional<RunStatus> WaitForStep(int64_t step, ChildProcess& daemon) const {
    return testing::WaitForStatus(daemon, dir_ / "run", [step](const RunStatus& st) {
      if (st.nodes.empty() || st.nodes[0].ranks.size() != 2) return false;
      bool all = true;
      for (const auto& r : st.nodes[0].ranks) all = all && r.step >= step && r.state == "running";
      return all;
    });
  }

  // Stops both ranks and waits until the daemon sees them stopped, so that
  // the snapshots in memory stay as they are. Returns their pids.
  std::vector<pid_t> FreezeRanks(ChildProcess& daemon, const RunStatus& st) {
    std::vector<pid_t> pids;
    for (const auto& r : st.nodes[0].ranks) pids.push_back(static_cast<pid_t>(r.pid));
    for (pid_t p : pids) EXPECT_EQ(kill(p, SIGSTOP), 0);
    auto stopped = testing::WaitForStatus(daemon, dir_ / "run", "both ranks stopped", 120, [](const RunStatus& s) {
      if (s.nodes.empty() || s.nodes[0].ranks.size() != 2) return false;
      for (const auto& r : s.nodes[0].ranks) {
        if (r.state.rfind("stopped", 0) != 0) return false;
      }
      return true;
    });
    EXPECT_TRUE(stopped.has_value()) << ReadFile(dir_ / "daemon.log");
    return pids;
  }

  // The newest run of lineage.db with the database it was read from;
  // nullopt (and a failed expectation) when there is none.
  struct Recorded {
    std::unique_ptr<LineageDb> db;
    RunRecord run;
  };
  std::optional<Recorded> LatestRun() const {
    auto db = Lineage();
    if (db == nullptr) return std::nullopt;
    auto run = db->LatestRun();
    EXPECT_TRUE(run.ok()) << run.status().ToString();
    if (!run.ok()) return std::nullopt;
    return Recorded{std::move(db), *run};
  }

  std::unique_ptr<LineageDb> Lineage() const { return testing::OpenLineageReadOnly(dir_ / "run"); }

  void ExpectFinishedBitExact(ChildProcess& daemon) {
    const int code = daemon.Wait();
    EXPECT_EQ(code, 0) << ReadFile(dir_ / "daemon.log");
    const std::string final_params = ReadFile(dir_ / "final/params.bin");
    ASSERT_FALSE(final_params.empty()) << ReadFile(dir_ / "daemon.log");
    EXPECT_TRUE(final_params == reference_) << "final parameters differ from the fault-free run";
  }

  static inline TempDir* shared_ = nullptr;
  static inline std::string reference_;
  TempDir dir_;
};



// The loss a --metrics file (JSON lines) records for `step`; -1 if none.
inline double LossAtStep(const std::string& path, int64_t step) {
  std::istringstream in(ReadFile(path));
  std::string line;
  double loss = -1;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    if (j["step"] == step) loss = j["loss"].get<double>();
  }
  return loss;
}

// This machine's host name, as the local scheduler names nodes.
inline std::string ThisHost() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

}  // namespace holdfast
