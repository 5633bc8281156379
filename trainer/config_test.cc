#include "trainer/config.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace holdfast {
namespace {

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("hf_config_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& text) {
    std::string path = (dir_ / "run.toml").string();
    std::ofstream(path) << text;
    return path;
  }

  std::filesystem::path dir_;
};

TEST_F(ConfigTest, ReadsFileAndResolvesDataPathNextToIt) {
  auto cfg = LoadTrainerConfig(Write("[model]\nn_layer = 2\nn_embd = 64\n[data]\npath = \"corpus.txt\"\n"
                                     "[optim]\nlr = 3e-3\nmin_lr = 1\n"),
                               {"optim.min_lr=1e-4"});
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->model.n_layer, 2);
  EXPECT_EQ(cfg->model.n_embd, 64);
  EXPECT_EQ(cfg->model.n_head, 4);  // default
  EXPECT_DOUBLE_EQ(cfg->optim.lr, 3e-3);
  EXPECT_DOUBLE_EQ(cfg->optim.min_lr, 1e-4);  // flag overrides file
  EXPECT_EQ(cfg->data.path, (dir_ / "corpus.txt").string());
}

TEST_F(ConfigTest, UnknownKeyNamesKeyAndLine) {
  auto cfg = LoadTrainerConfig(Write("[data]\npath = \"x\"\n\n[model]\nn_layer = 2\nn_layr = 3\n"), {});
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = cfg.status().message();
  EXPECT_NE(m.find("run.toml:6"), std::string::npos) << m;
  EXPECT_NE(m.find("model.n_layr"), std::string::npos) << m;
  EXPECT_NE(m.find("n_layer"), std::string::npos) << m;  // lists the known keys
}

TEST_F(ConfigTest, WrongTypeAndRangeNameKeyAndLine) {
  auto typed = LoadTrainerConfig(Write("[data]\npath = \"x\"\n[train]\nsteps = \"many\"\n"), {});
  ASSERT_FALSE(typed.ok());
  EXPECT_NE(typed.status().message().find("run.toml:4: key 'train.steps' must be an integer"), std::string::npos)
      << typed.status().message();
  auto ranged = LoadTrainerConfig(Write("[data]\npath = \"x\"\n[optim]\nlr = -1.0\n"), {});
  ASSERT_FALSE(ranged.ok());
  EXPECT_NE(ranged.status().message().find("run.toml:4: key 'optim.lr' must be between"), std::string::npos)
      << ranged.status().message();
}

TEST_F(ConfigTest, SyntaxErrorAndMissingFile) {
  auto bad = LoadTrainerConfig(Write("[model]\nn_layer = = 2\n"), {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("run.toml:2"), std::string::npos) << bad.status().message();
  auto missing = LoadTrainerConfig((dir_ / "nope.toml").string(), {});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST_F(ConfigTest, BadOverridesAreRejectedClearly) {
  const std::string path = Write("[data]\npath = \"x\"\n");
  EXPECT_NE(LoadTrainerConfig(path, {"optim.lr"}).status().message().find("expected section.key=value"),
            std::string::npos);
  EXPECT_NE(LoadTrainerConfig(path, {"optim.lr=fast"}).status().message().find("must be a number"),
            std::string::npos);
  EXPECT_NE(LoadTrainerConfig(path, {"optimizer.lr=1"}).status().message().find("unknown section"),
            std::string::npos);
  EXPECT_NE(LoadTrainerConfig(path, {"data.format=csv"}).status().message().find("one of text|bin|sft"),
            std::string::npos);
  auto ok = LoadTrainerConfig(path, {"data.format=bin", "model.vocab_size=50304", "dist.backend=\"gloo\""});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->data.format, "bin");
}

TEST_F(ConfigTest, BareOverrideMustBeUtf8SoThatThePrintedConfigReadsBack) {
  // A bare word is taken as the string; bytes that are not UTF-8 could not
  // be in a TOML file, and printed they would read back as other characters.
  auto bad = LoadTrainerConfig("", {"data.path=x", "output.dir=runs/\xff\xb7"});
  ASSERT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("must be UTF-8"), std::string::npos) << bad.status().ToString();
  EXPECT_FALSE(LoadTrainerConfig("", {"data.path=\xc0\xaf"}).ok());  // an overlong '/'

  auto ok = LoadTrainerConfig("", {"data.path=x", "output.dir=runs/caf\xc3\xa9"});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  auto again = LoadTrainerConfig(Write(ConfigToToml(*ok)), {});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->output.dir, "runs/caf\xc3\xa9");
}

TEST_F(ConfigTest, CrossKeyRules) {
  const std::string path = Write("[data]\npath = \"x\"\n");
  EXPECT_NE(LoadTrainerConfig(path, {"model.n_embd=100", "model.n_head=3"}).status().message().find("divisible"),
            std::string::npos);
  EXPECT_NE(LoadTrainerConfig(path, {"model.vocab_size=300"}).status().message().find("vocab_size = 256"),
            std::string::npos);
  EXPECT_NE(LoadTrainerConfig("", {}).status().message().find("data.path is required"), std::string::npos);
}

TEST_F(ConfigTest, HashFollowsTheMathOnly) {
  auto a = LoadTrainerConfig("", {"data.path=x"});
  auto b = LoadTrainerConfig("", {"data.path=x", "output.dir=/elsewhere", "train.log_every=10"});
  auto c = LoadTrainerConfig("", {"data.path=x", "optim.lr=2e-3"});
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(ConfigHash(*a), ConfigHash(*b));
  EXPECT_NE(ConfigHash(*a), ConfigHash(*c));
  // The printed config reads back to the same config.
  auto again = LoadTrainerConfig(Write(ConfigToToml(*c)), {});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(ConfigHash(*again), ConfigHash(*c));
}

TEST_F(ConfigTest, PrecisionIsMathDeviceIsNotAndOldHashesHold) {
  auto a = LoadTrainerConfig("", {"data.path=x"});
  auto gpu = LoadTrainerConfig("", {"data.path=x", "train.device=cuda", "dist.backend=nccl"});
  auto bf16 = LoadTrainerConfig("", {"data.path=x", "train.precision=bf16"});
  ASSERT_TRUE(a.ok() && gpu.ok() && bf16.ok()) << gpu.status().ToString() << bf16.status().ToString();
  EXPECT_EQ(ConfigHash(*a), ConfigHash(*gpu)) << "a CPU checkpoint resumes on a GPU (the fingerprint warns)";
  EXPECT_NE(ConfigHash(*a), ConfigHash(*bf16));
  // The defaults hash as they did before train.precision existed, so the
  // checkpoints of earlier runs still resume.
  EXPECT_EQ(ConfigHash(*a), 0x44e5140994a2bf18ull);
  auto bad = LoadTrainerConfig("", {"data.path=x", "train.precision=fp16"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("fp32"), std::string::npos) << bad.status().message();
  auto nccl_cpu = LoadTrainerConfig("", {"data.path=x", "train.device=cpu", "dist.backend=nccl"});
  ASSERT_FALSE(nccl_cpu.ok());
  EXPECT_NE(nccl_cpu.status().message().find("train.device = \"cuda\""), std::string::npos)
      << nccl_cpu.status().message();
}

TEST(LearningRateTest, WarmupThenCosineToMin) {
  OptimConfig o;
  o.lr = 1.0;
  o.min_lr = 0.1;
  o.warmup_steps = 4;
  EXPECT_DOUBLE_EQ(LearningRateAt(o, 104, 0), 0.25);
  EXPECT_DOUBLE_EQ(LearningRateAt(o, 104, 3), 1.0);
  EXPECT_DOUBLE_EQ(LearningRateAt(o, 104, 4), 1.0);
  EXPECT_NEAR(LearningRateAt(o, 104, 54), 0.55, 1e-12);
  EXPECT_DOUBLE_EQ(LearningRateAt(o, 104, 104), 0.1);
  EXPECT_DOUBLE_EQ(LearningRateAt(o, 104, 500), 0.1);
}

// [moe] is read into the model config, printed back as its own section,
// changes the hash when set (old checkpoints keep theirs), and the expert
// layout is not in the hash.
TEST_F(ConfigTest, MoeSectionReadsBackAndHashesOnlyWhenSet) {
  auto moe = LoadTrainerConfig(Write("[data]\npath = \"x\"\n[moe]\nexperts = 8\ntop_k = 1\ncapacity_factor = 2.0\n"),
                               {"dist.expert_parallel=4"});
  ASSERT_TRUE(moe.ok()) << moe.status().ToString();
  EXPECT_EQ(moe->model.moe.experts, 8);
  EXPECT_EQ(moe->model.moe.top_k, 1);
  EXPECT_EQ(moe->model.moe.capacity_factor, 2.0);
  EXPECT_EQ(moe->dist.expert_parallel, 4);
  EXPECT_TRUE(ValidateTrainerConfig(*moe).ok()) << ValidateTrainerConfig(*moe).ToString();
  const std::string text = ConfigToToml(*moe);
  EXPECT_NE(text.find("[moe]\nexperts = 8\ntop_k = 1\n"), std::string::npos) << text;
  auto again = LoadTrainerConfig(Write(text), {});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(ConfigHash(*again), ConfigHash(*moe));
  auto other_layout = LoadTrainerConfig(Write(text), {"dist.expert_parallel=1"});
  ASSERT_TRUE(other_layout.ok());
  EXPECT_EQ(ConfigHash(*other_layout), ConfigHash(*moe)) << "the expert layout is not the math";
  auto dense = LoadTrainerConfig("", {"data.path=x"});
  auto dense_written = LoadTrainerConfig("", {"data.path=x", "moe.experts=0", "moe.top_k=2"});
  ASSERT_TRUE(dense.ok() && dense_written.ok());
  EXPECT_EQ(ConfigHash(*dense), ConfigHash(*dense_written)) << "a dense model's hash is as before [moe]";
  EXPECT_NE(ConfigHash(*dense), ConfigHash(*moe));
  auto bad = LoadTrainerConfig("", {"data.path=x", "moe.experts=4", "moe.top_k=5"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("moe.top_k = 5 must be between 1 and moe.experts (4)"), std::string::npos)
      << bad.status().message();
  auto unknown = LoadTrainerConfig("", {"moe.expert=4"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("known keys in [moe]: experts, top_k, capacity_factor, aux_loss_coef"),
            std::string::npos)
      << unknown.status().message();
}

}  // namespace
}  // namespace holdfast

namespace holdfast {
namespace {

TEST(ObjectiveConfigTest, DpoNeedsPreferenceDataAndHoldoutIsAFractionOrACount) {
  auto dpo_text = LoadTrainerConfig("", {"data.path=x", "train.objective=dpo"});
  ASSERT_FALSE(dpo_text.ok());
  EXPECT_NE(dpo_text.status().message().find("data.format = \"preference\""), std::string::npos);
  auto pref_lm = LoadTrainerConfig("", {"data.path=x", "data.format=preference"});
  ASSERT_FALSE(pref_lm.ok());
  EXPECT_NE(pref_lm.status().message().find("train.objective = \"dpo\""), std::string::npos);
  auto half = LoadTrainerConfig("", {"data.path=x", "eval.holdout=2.5"});
  ASSERT_FALSE(half.ok());
  EXPECT_NE(half.status().message().find("whole count"), std::string::npos);
  auto no_data = LoadTrainerConfig("", {"data.path=x", "eval.every_steps=10"});
  ASSERT_FALSE(no_data.ok());
  EXPECT_NE(no_data.status().message().find("eval.holdout"), std::string::npos);
  auto ok = LoadTrainerConfig("", {"data.path=x", "data.format=preference", "train.objective=dpo", "eval.holdout=50",
                                   "eval.every_steps=10"});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_DOUBLE_EQ(ok->dpo.beta, 0.1);
}

TEST(ObjectiveConfigTest, ARewardModelHasItsHeadAndPreferenceDataAndNothingElseDoes) {
  auto ok = LoadTrainerConfig("", {"data.path=x", "data.format=preference", "train.objective=reward",
                                   "model.reward_head=true"});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  auto headless = LoadTrainerConfig("", {"data.path=x", "data.format=preference", "train.objective=reward"});
  ASSERT_FALSE(headless.ok());
  EXPECT_NE(headless.status().message().find("set model.reward_head = true"), std::string::npos);
  auto lm_head = LoadTrainerConfig("", {"data.path=x", "model.reward_head=true"});
  ASSERT_FALSE(lm_head.ok());
  EXPECT_NE(lm_head.status().message().find("remove model.reward_head"), std::string::npos);
  auto text = LoadTrainerConfig("", {"data.path=x", "train.objective=reward", "model.reward_head=true"});
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("train.objective = \"reward\" trains on preference pairs"),
            std::string::npos);
  auto split = LoadTrainerConfig("", {"data.path=x", "data.format=preference", "train.objective=reward",
                                      "model.reward_head=true", "dist.tensor_parallel=2", "model.n_head=4"});
  ASSERT_FALSE(split.ok());
  EXPECT_NE(split.status().message().find("only train.objective = \"lm\" runs model parallel"), std::string::npos);
  // The head is math: a reward model's hash is not its language model's.
  auto lm = LoadTrainerConfig("", {"data.path=x"});
  auto lm_false = LoadTrainerConfig("", {"data.path=x", "model.reward_head=false"});
  ASSERT_TRUE(lm.ok() && lm_false.ok());
  EXPECT_EQ(ConfigHash(*lm), ConfigHash(*lm_false)) << "an unset head keeps old checkpoints resumable";
}

// New keys enter the hash only when set away from their defaults: existing
// checkpoints resume. Eval cadence is not math; the holdout is.
TEST(ObjectiveConfigTest, NewKeysKeepOldHashesAndHashOnlyWhenSet) {
  auto base = LoadTrainerConfig("", {"data.path=x"});
  auto cadence = LoadTrainerConfig("", {"data.path=x", "eval.every_steps=5", "eval.holdout=0.1", "eval.samples=9"});
  auto holdout = LoadTrainerConfig("", {"data.path=x", "eval.holdout=0.1"});
  auto init = LoadTrainerConfig("", {"data.path=x", "train.init_from=/w"});
  ASSERT_TRUE(base.ok() && cadence.ok() && holdout.ok() && init.ok());
  EXPECT_EQ(ConfigHash(*cadence), ConfigHash(*holdout));
  EXPECT_NE(ConfigHash(*base), ConfigHash(*holdout));
  EXPECT_NE(ConfigHash(*base), ConfigHash(*init));
  auto lm = LoadTrainerConfig("", {"data.path=x", "train.objective=lm", "dpo.beta=0.1"});
  ASSERT_TRUE(lm.ok());
  EXPECT_EQ(ConfigHash(*base), ConfigHash(*lm)) << "defaults written out change nothing";
}

}  // namespace
}  // namespace holdfast
