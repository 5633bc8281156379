// runctl sweep with real processes: a holdfast-train job file swept over two
// learning rates, each member its own holdfastd, run directory and lineage
// run, side by side, then compared; a member that fails does not stop the
// others and fails the sweep; what cannot be swept is refused before
// anything is written.
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/subprocess.h"

namespace holdfast {
namespace {

using testing::BuildPath;
using testing::ProcessResult;
using testing::ReadFile;
using testing::RunProcess;
using testing::TempDir;
using testing::WriteFile;

class SweepTest : public ::testing::Test {
 protected:
  SweepTest() : dir_("sweep") {
    std::string text;
    for (const char* name : {"GPL-3", "Apache-2.0"}) text += ReadFile(std::string("/usr/share/common-licenses/") + name);
    WriteFile(dir_ / "corpus.txt", text);
    // A tiny GPT, 6 steps, evaluated and checkpointed every 2.
    WriteFile(dir_ / "train.toml",
              "[model]\nn_layer = 1\nn_head = 2\nn_embd = 32\nblock_size = 32\n"
              "[data]\nformat = \"text\"\npath = \"" + (dir_ / "corpus.txt") + "\"\n"
              "[train]\nsteps = 6\nmicro_batch = 4\nseed = 3\nthreads = 1\nlog_every = 2\n"
              "[optim]\nwarmup_steps = 0\n[eval]\nevery_steps = 2\nholdout = 0.1\nsamples = 32\n"
              "[checkpoint]\ndir = \"checkpoints\"\nevery_steps = 2\n");
  }

  // The job file: `value` and `sweep` are what goes where {value} and {sweep} would.
  std::string Job(const std::string& value, const std::string& sweep) {
    return "[job]\nname = \"tiny\"\ncommand = [\"" + BuildPath("trainer/holdfast-train") + "\", \"--config\", \"" +
           (dir_ / "train.toml") + "\", \"--set\", \"optim.lr=" + value + "\", \"--set\", \"optim.min_lr=" + value +
           "\", \"--set\", \"output.dir=" + (dir_ / "out") + "/" + sweep + "\"]\nnproc = 1\ncheckpoint_dir = \"" +
           (dir_ / "out") + "/" + sweep + "/checkpoints\"\n[supervise]\npoll_ms = 100\nrestart_budget = 0\n";
  }

  // Under a 300 s deadline (a backstop far past the seconds it takes: a sweep
  // that never ends fails with exit 124 instead of at the ctest timeout).
  ProcessResult Runctl(std::vector<std::string> args) {
    args.insert(args.begin(), {"/usr/bin/timeout", "300", BuildPath("cli/runctl"), "--run-dir", dir_ / "runs"});
    return RunProcess(args);
  }

  TempDir dir_;
};

TEST_F(SweepTest, EachValueIsItsOwnRunSideBySideThenCompared) {
  std::filesystem::create_directories(dir_ / "runs");
  WriteFile(dir_ / "job.toml", Job("{value}", "{sweep}"));
  ProcessResult r = Runctl({"sweep", dir_ / "job.toml", "--vary", "lr=1e-3,3e-3", "--side-by-side", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string root = dir_ / "runs/sweep-lr";
  for (const char* tag : {"lr-1e-3", "lr-3e-3"}) {
    SCOPED_TRACE(tag);
    const std::string member = root + "/" + tag;
    EXPECT_NE(r.output.find(std::string("started ") + tag), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(std::string(tag) + " ended: holdfastd exit 0"), std::string::npos) << r.output;
    // Its own job file (the value in it), outputs and lineage.
    const std::string job = ReadFile(member + "/job.toml");
    EXPECT_NE(job.find(std::string("optim.lr=") + (tag + 3)), std::string::npos) << job;
    EXPECT_TRUE(std::filesystem::exists(dir_ / "out" + "/" + tag + "/checkpoints")) << "outputs of its own";
    ProcessResult runs = RunProcess({BuildPath("cli/runctl"), "--run-dir", member, "runs", "--json"});
    ASSERT_EQ(runs.exit_code, 0) << runs.output;
    EXPECT_NE(runs.output.find(std::string("tiny lr=") + (tag + 3)), std::string::npos) << runs.output;
    EXPECT_NE(runs.output.find("succeeded"), std::string::npos) << runs.output;
  }
  // The comparison at the end: both members, eval_loss at steps 2, 4, 6, different values.
  for (const char* want : {"eval_loss (lower is better)", "tiny lr=1e-3", "tiny lr=3e-3", "STEP"}) {
    EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n" << r.output;
  }
  ProcessResult cmp = Runctl({"compare", root + "/lr-1e-3", root + "/lr-3e-3", "--json"});
  ASSERT_EQ(cmp.exit_code, 0) << cmp.output;
  const auto j = nlohmann::json::parse(cmp.output.substr(cmp.output.find('{')));
  ASSERT_EQ(j["runs"].size(), 2u);
  ASSERT_EQ(j["runs"][0]["values"].size(), 3u) << j.dump();
  EXPECT_NE(j["runs"][0]["last"]["value"], j["runs"][1]["last"]["value"]) << "the learning rate matters";
}

TEST_F(SweepTest, AFailingMemberFailsTheSweepAndTheOthersStillRun) {
  std::filesystem::create_directories(dir_ / "runs");
  WriteFile(dir_ / "job.toml", Job("{value}", "{sweep}"));
  // lr = -1: the trainer refuses its config (exit 2), holdfastd gives up on that member.
  ProcessResult r = Runctl({"sweep", dir_ / "job.toml", "--vary", "lr=-1,1e-3"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("members that did not succeed: lr--1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("lr-1e-3 ended: holdfastd exit 0"), std::string::npos) << r.output;
}

TEST_F(SweepTest, WhatCannotBeSweptIsRefusedBeforeAnythingIsWritten) {
  std::filesystem::create_directories(dir_ / "runs");
  WriteFile(dir_ / "no_value.toml", Job("1e-3", "{sweep}"));
  ProcessResult r = Runctl({"sweep", dir_ / "no_value.toml", "--vary", "lr=1e-3,3e-3"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("has no {value}"), std::string::npos) << r.output;
  WriteFile(dir_ / "no_sweep.toml", Job("{value}", "shared"));
  r = Runctl({"sweep", dir_ / "no_sweep.toml", "--vary", "lr=1e-3,3e-3"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("has no {sweep}"), std::string::npos) << r.output;
  WriteFile(dir_ / "job.toml", Job("{value}", "{sweep}"));
  for (const char* vary : {"lr=1e-3", "lr=1e-3,1e-3", "lr=1e-3,,3e-3", "=1e-3,3e-3", "lr"}) {
    r = Runctl({"sweep", dir_ / "job.toml", "--vary", vary});
    EXPECT_EQ(r.exit_code, 2) << vary << ": " << r.output;
  }
  r = Runctl({"sweep", dir_ / "job.toml", "--vary", "lr=1e-3,3e-3", "--side-by-side", "0"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = Runctl({"sweep", dir_ / "missing.toml", "--vary", "lr=1e-3,3e-3"});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "runs/sweep-lr")) << "nothing written";
  std::filesystem::create_directories(dir_ / "runs/sweep-lr");
  r = Runctl({"sweep", dir_ / "job.toml", "--vary", "lr=1e-3,3e-3"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("already exists"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace holdfast
