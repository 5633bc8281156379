// holdfast-train's objectives and evaluation end to end (real processes and
// files): DPO learns a held-out preference, resumes bit for bit (one rank and
// two), evaluation never changes training, checkpoints carry the newest eval
// metrics, and train.init_from loads a params dump or a checkpoint.
#include <cmath>
#include <filesystem>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_loader.h"
#include "checkpoint/format.h"
#include "tests/support/subprocess.h"

namespace holdfast {
namespace {

using testing::BuildPath;
using testing::ProcessResult;
using testing::ReadFile;
using testing::RunProcess;
using testing::TempDir;
using testing::WriteFile;

// "a+b=" -> chosen the sum, rejected the first operand echoed: a preference
// any prompt shows, so held-out pairs can be ranked right. Deterministic.
std::string PreferencePairs(int n) {
  std::string out;
  uint64_t x = 12345;
  auto next = [&x](int mod) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<int>((x >> 33) % static_cast<uint64_t>(mod));
  };
  for (int i = 0; i < n; ++i) {
    const int a = next(100), b = next(100);
    const int wrong = a == a + b ? a + 1 : a;
    out += nlohmann::json{{"prompt", std::to_string(a) + "+" + std::to_string(b) + "="},
                          {"chosen", std::to_string(a + b) + "\n"},
                          {"rejected", std::to_string(wrong) + "\n"}}
               .dump() +
           "\n";
  }
  return out;
}

std::vector<nlohmann::json> ReadMetrics(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::istringstream in(ReadFile(path));
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

std::vector<nlohmann::json> Records(const std::vector<nlohmann::json>& all, bool eval) {
  std::vector<nlohmann::json> out;
  for (const auto& r : all) {
    if (r.contains("record") == eval) out.push_back(r);
  }
  return out;
}

class ObjectiveTest : public ::testing::Test {
 protected:
  ObjectiveTest() : dir_("objective") {
    WriteFile(dir_ / "pairs.jsonl", PreferencePairs(1000));
    std::string text;
    for (const char* name : {"GPL-3", "LGPL-2.1"}) text += ReadFile(std::string("/usr/share/common-licenses/") + name);
    WriteFile(dir_ / "corpus.txt", text);
  }

  std::string DpoConfig(double dropout = 0.0) {
    std::ostringstream os;
    os << "[model]\nn_layer = 2\nn_head = 4\nn_embd = 64\nblock_size = 16\ndropout = " << dropout << "\n"
       << "[data]\nformat = \"preference\"\npath = \"pairs.jsonl\"\n"
       << "[train]\nobjective = \"dpo\"\nsteps = 60\nmicro_batch = 8\nseed = 3\nthreads = 1\nlog_every = 20\n"
       << "[optim]\nlr = 3e-3\nmin_lr = 3e-4\nwarmup_steps = 5\n"
       << "[dpo]\nbeta = 0.1\n"
       << "[eval]\nevery_steps = 20\nholdout = 0.1\n";
    const std::string path = dir_ / "dpo.toml";
    WriteFile(path, os.str());
    return path;
  }

  std::string LmConfig() {
    std::ostringstream os;
    os << "[model]\nn_layer = 2\nn_head = 4\nn_embd = 64\nblock_size = 64\n"
       << "[data]\nformat = \"text\"\npath = \"corpus.txt\"\n"
       << "[train]\nsteps = 12\nmicro_batch = 4\nseed = 7\nthreads = 1\n"
       << "[optim]\nlr = 3e-3\nmin_lr = 3e-4\nwarmup_steps = 2\n";
    const std::string path = dir_ / "lm.toml";
    WriteFile(path, os.str());
    return path;
  }

  ProcessResult Train(std::vector<std::string> args) {
    args.insert(args.begin(), BuildPath("trainer/holdfast-train"));
    return RunProcess(args);
  }

  TempDir dir_;
};

TEST_F(ObjectiveTest, DpoRaisesRewardAccuracyOnHeldOutPairs) {
  ProcessResult r = Train({"--config", DpoConfig(), "--metrics", dir_ / "m.jsonl"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto all = ReadMetrics(dir_ / "m.jsonl");
  const auto steps = Records(all, false), evals = Records(all, true);
  ASSERT_EQ(steps.size(), 60u);
  for (const auto& s : steps) {
    for (const char* k : {"loss", "rewards_chosen", "rewards_rejected", "reward_margin", "reward_accuracy"}) {
      ASSERT_TRUE(s.contains(k)) << s.dump();
    }
  }
  EXPECT_NEAR(steps[0]["loss"].get<double>(), std::log(2.0), 1e-6) << "policy = reference at step 1";
  ASSERT_EQ(evals.size(), 4u) << r.output;  // before the first step, then after steps 20, 40, 60
  EXPECT_EQ(evals[0]["eval_reward_accuracy"].get<double>(), 0.0) << "policy = reference: no margin, no win";
  for (size_t i = 0; i < evals.size(); ++i) {
    EXPECT_EQ(evals[i]["step"], 20 * i);
    EXPECT_EQ(evals[i]["eval_samples"], 100) << "10% of 1000 pairs held out";
  }
  const double acc = evals.back()["eval_reward_accuracy"].get<double>();
  EXPECT_GT(acc, 0.8) << "held-out reward accuracy should rise well above chance (0.5)\n" << r.output;
  EXPECT_GT(evals.back()["eval_reward_margin"].get<double>(), 0.5);
  EXPECT_LT(evals.back()["eval_loss"].get<double>(), std::log(2.0) - 0.2);
  std::printf("held-out reward accuracy after steps 20/40/60: %.3f %.3f %.3f, eval loss %.4f\n",
              evals[1]["eval_reward_accuracy"].get<double>(), evals[2]["eval_reward_accuracy"].get<double>(), acc,
              evals.back()["eval_loss"].get<double>());
}

// Stop after step 9 (checkpoint of step 8), resume, finish: parameters and
// every step's metrics equal the uninterrupted run's; the checkpoints carry
// the newest eval metrics in their manifests.
void ExpectDpoResumeIsBitExact(ObjectiveTest* t, const TempDir& dir, const std::string& cfg,
                               const std::vector<std::string>& extra) {
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), BuildPath("trainer/holdfast-train"));
    args.insert(args.end(), extra.begin(), extra.end());
    return RunProcess(args);
  };
  const std::vector<std::string> common = {"--config", cfg, "--set", "train.steps=16", "--set", "eval.every_steps=4"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> a = common;
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  ProcessResult full = run(with({"--dump-final", dir / "full", "--metrics", dir / "full.jsonl"}));
  ASSERT_EQ(full.exit_code, 0) << full.output;
  const std::vector<std::string> ckpt = {"--set", "checkpoint.dir=" + (dir / "ckpt"), "--set",
                                         "checkpoint.every_steps=4"};
  auto first_args = with({"--stop-after", "9", "--metrics", dir / "resumed.jsonl"});
  first_args.insert(first_args.end(), ckpt.begin(), ckpt.end());
  ProcessResult first = run(first_args);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto second_args = with({"--dump-final", dir / "resumed", "--metrics", dir / "resumed.jsonl"});
  second_args.insert(second_args.end(), ckpt.begin(), ckpt.end());
  ProcessResult second = run(second_args);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("(step 8)"), std::string::npos) << second.output;
  EXPECT_TRUE(ReadFile(dir / "full/params.bin") == ReadFile(dir / "resumed/params.bin"))
      << "resumed DPO parameters differ from the uninterrupted run";
  const auto fm = ReadMetrics(dir / "full.jsonl");
  const auto rm = ReadMetrics(dir / "resumed.jsonl");
  auto find = [](const std::vector<nlohmann::json>& v, int64_t step, bool eval) {
    for (const auto& r : v) {
      if (r["step"] == step && r.contains("record") == eval) return r;
    }
    return nlohmann::json();
  };
  for (const auto& line : rm) {
    const bool eval = line.contains("record");
    const nlohmann::json want = find(fm, line["step"].get<int64_t>(), eval);
    ASSERT_FALSE(want.is_null()) << line.dump();
    for (const char* k : {"loss", "reward_accuracy", "reward_margin", "eval_loss", "eval_reward_accuracy"}) {
      if (want.contains(k)) {
        EXPECT_EQ(line[k], want[k]) << k << " at step " << line["step"];
      }
    }
  }
  // The manifest of step 16 carries the eval of step 16; it equals the run's.
  CheckpointLoader loader(dir / "ckpt");
  auto manifest = loader.ReadManifest(16);
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  ASSERT_EQ(manifest->metrics.count("eval_loss"), 1u);
  EXPECT_EQ(manifest->metrics.at("eval_step"), 16);
  EXPECT_EQ(manifest->metrics.at("eval_loss"), find(fm, 16, true)["eval_loss"].get<double>());
  (void)t;
}

TEST_F(ObjectiveTest, DpoResumeIsBitExactSingleProcess) {
  ExpectDpoResumeIsBitExact(this, dir_, DpoConfig(0.1), {});
}

TEST_F(ObjectiveTest, DpoResumeIsBitExactDataParallel) {
  ExpectDpoResumeIsBitExact(this, dir_, DpoConfig(0.1), {"--nproc", "2", "--set", "train.micro_batch=4"});
}

// Evaluation draws nothing and changes nothing: the same parameters with and
// without it (same holdout); eval records report eval_loss on one and two ranks alike.
TEST_F(ObjectiveTest, EvaluationNeverChangesTrainingAndRanksAgree) {
  const std::string cfg = LmConfig();
  const std::vector<std::string> holdout = {"--set", "eval.holdout=0.1", "--set", "model.dropout=0.1"};
  auto args = [&](const std::string& name, std::vector<std::string> more) {
    std::vector<std::string> a = {"--config", cfg, "--dump-final", dir_ / name, "--metrics", dir_ / (name + ".jsonl")};
    a.insert(a.end(), holdout.begin(), holdout.end());
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  ProcessResult off = Train(args("off", {}));
  ASSERT_EQ(off.exit_code, 0) << off.output;
  ProcessResult on = Train(args("on", {"--set", "eval.every_steps=5", "--set", "eval.samples=40"}));
  ASSERT_EQ(on.exit_code, 0) << on.output;
  EXPECT_TRUE(ReadFile(dir_ / "off/params.bin") == ReadFile(dir_ / "on/params.bin"));
  const auto evals = Records(ReadMetrics(dir_ / "on.jsonl"), true);
  ASSERT_EQ(evals.size(), 4u);  // before the first step, after 5, 10 and the last, 12
  EXPECT_EQ(evals[0]["step"], 0);
  EXPECT_EQ(evals[3]["step"], 12);
  EXPECT_EQ(evals[3]["eval_samples"], 40);
  // Without dropout, one rank and two on the same global batch train the same
  // parameters to float tolerance, and their evals (split among the ranks,
  // summed in one allreduce) agree.
  auto world = [&](int n) {
    const std::string name = "w" + std::to_string(n);
    ProcessResult r = Train({"--config", cfg, "--nproc", std::to_string(n), "--set",
                             "train.micro_batch=" + std::to_string(4 / n), "--set", "eval.holdout=0.1", "--set",
                             "eval.every_steps=12", "--set", "eval.samples=41", "--metrics", dir_ / (name + ".jsonl")});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const auto e = Records(ReadMetrics(dir_ / (name + ".jsonl")), true);
    EXPECT_EQ(e.size(), 2u);  // before the first step and after the last
    return e.empty() ? nlohmann::json() : e.back();
  };
  const nlohmann::json one = world(1), two = world(2);
  ASSERT_FALSE(one.is_null());
  ASSERT_FALSE(two.is_null());
  EXPECT_EQ(two["eval_samples"], 41);
  EXPECT_NEAR(two["eval_loss"].get<double>(), one["eval_loss"].get<double>(), 1e-4);
}

TEST_F(ObjectiveTest, InitFromLoadsAParamsDumpOrACheckpoint) {
  const std::string cfg = LmConfig();
  ProcessResult base = Train({"--config", cfg, "--dump-final", dir_ / "base", "--metrics", dir_ / "base.jsonl", "--set",
                              "checkpoint.dir=" + (dir_ / "ckpt"), "--set", "checkpoint.every_steps=6"});
  ASSERT_EQ(base.exit_code, 0) << base.output;
  ProcessResult from_dump = Train({"--config", cfg, "--set", "train.init_from=" + (dir_ / "base"), "--set",
                                   "train.steps=1", "--dump-init", dir_ / "init1", "--metrics", dir_ / "i1.jsonl"});
  ASSERT_EQ(from_dump.exit_code, 0) << from_dump.output;
  EXPECT_TRUE(ReadFile(dir_ / "base/params.bin") == ReadFile(dir_ / "init1/params.bin"));
  // The checkpoint root: its newest step (12, the final save) = the dump.
  ProcessResult from_ckpt = Train({"--config", cfg, "--set", "train.init_from=" + (dir_ / "ckpt"), "--set",
                                   "train.steps=1", "--dump-init", dir_ / "init2", "--metrics", dir_ / "i2.jsonl"});
  ASSERT_EQ(from_ckpt.exit_code, 0) << from_ckpt.output;
  EXPECT_TRUE(ReadFile(dir_ / "base/params.bin") == ReadFile(dir_ / "init2/params.bin"));
  EXPECT_NE(from_ckpt.output.find("checkpoint step 12"), std::string::npos) << from_ckpt.output;
  // Another model's weights: a clear error naming the parameter.
  ProcessResult wrong = Train({"--config", cfg, "--set", "model.n_embd=32", "--set",
                               "train.init_from=" + (dir_ / "base"), "--metrics", dir_ / "w.jsonl"});
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_NE(wrong.output.find("this model's is"), std::string::npos) << wrong.output;
}

}  // namespace
}  // namespace holdfast
