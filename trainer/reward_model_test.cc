// The reward model served by holdfast-reward --model (trainer/reward_model.h):
// what it scores is the trainer's Gpt::Rewards at the text's last token, a
// text's reward does not depend on what else is in its batch, and a config or
// weights that do not fit are refused naming the file.
#include "trainer/reward_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <torch/torch.h>

#include "trainer/model.h"
#include "trainer/rl/params_dump.h"

namespace holdfast {
namespace {

class RewardModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (std::filesystem::temp_directory_path() / "reward_model_test_XXXXXX").string();
    dir_ = mkdtemp(templ.data());
    cfg_.n_layer = 2;
    cfg_.n_head = 2;
    cfg_.n_embd = 16;
    cfg_.block_size = 12;
    cfg_.vocab_size = 256;
    cfg_.reward_head = true;
    torch::manual_seed(3);
    model_ = Gpt(cfg_);
    model_->InitWeights();
    {
      torch::NoGradGuard no_grad;
      for (auto& p : model_->parameters()) p.add_(torch::randn_like(p) * 0.1);  // a head that is not ~0
    }
    model_->eval();
    rl::ParamsDump dump;
    for (auto& item : model_->named_parameters()) {
      const torch::Tensor t = item.value().detach().contiguous();
      dump.Add(item.key(), t.sizes().vec(), t.data_ptr<float>(), t.numel());
    }
    ASSERT_TRUE(rl::WriteParamsDumpAtomically(dump, dir_ + "/weights").ok());
    std::ofstream(dir_ + "/rm.toml") << "[model]\nn_layer = 2\nn_head = 2\nn_embd = 16\nblock_size = 12\n"
                                        "reward_head = true\n[data]\nformat = \"preference\"\npath = \"p.jsonl\"\n"
                                        "[train]\nobjective = \"reward\"\n";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  RewardModelOptions Options(size_t batch) const {
    RewardModelOptions o;
    o.config = dir_ + "/rm.toml";
    o.weights = dir_ + "/weights";
    o.batch = batch;
    return o;
  }

  // sigmoid(Rewards) of one text on its own, the trainer's way: its tokens, its last position.
  double Direct(const std::string& text) {
    torch::NoGradGuard no_grad;
    const auto n = std::min<int64_t>(static_cast<int64_t>(text.size()), cfg_.block_size);
    torch::Tensor idx = torch::zeros({1, n}, torch::kLong);
    for (int64_t t = 0; t < n; ++t) idx[0][t] = static_cast<unsigned char>(text[static_cast<size_t>(t)]);
    return torch::sigmoid(model_->Rewards(idx, torch::full({1}, n - 1, torch::kLong))).item<double>();
  }

  std::string dir_;
  ModelConfig cfg_;
  Gpt model_{nullptr};
};

TEST_F(RewardModelTest, ScoresAreTheTrainersRewardsAtTheLastTokenWhateverTheBatch) {
  auto scorer = LoadRewardModel(Options(4));
  ASSERT_TRUE(scorer.ok()) << scorer.status().ToString();
  const std::vector<std::string> texts = {"12+30=42\n", "1+1=3\n", "99+99=198\n", "7+0=7",
                                          "0+0=0\n",    "x",      "55+44=99\n and more past the context"};
  auto all = (*scorer)->Score(texts);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), texts.size());  // 7 texts in batches of 4: two forwards
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_NEAR((*all)[i], Direct(texts[i]), 1e-6) << texts[i];
    // Alone, or among other texts at another place: the same bits.
    auto alone = (*scorer)->Score({texts[i]});
    ASSERT_TRUE(alone.ok());
    EXPECT_EQ((*alone)[0], (*all)[i]) << texts[i];
    std::vector<std::string> shuffled = {texts[(i + 3) % texts.size()], texts[i]};
    auto other = (*scorer)->Score(shuffled);
    ASSERT_TRUE(other.ok());
    EXPECT_EQ((*other)[1], (*all)[i]) << texts[i];
  }
  EXPECT_NE((*all)[0], (*all)[1]) << "the head must tell texts apart, or this test proves nothing";
  EXPECT_TRUE((*scorer)->Score({})->empty());
}

TEST_F(RewardModelTest, AConfigWithoutTheHeadOrWeightsThatDoNotFitAreRefused) {
  std::ofstream(dir_ + "/lm.toml") << "[model]\nn_layer = 2\nn_head = 2\nn_embd = 16\nblock_size = 12\n"
                                      "[data]\npath = \"t.txt\"\n";
  RewardModelOptions lm = Options(4);
  lm.config = dir_ + "/lm.toml";
  auto refused = LoadRewardModel(lm);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("is not a reward model's config"), std::string::npos);
  std::ofstream(dir_ + "/wide.toml") << "[model]\nn_layer = 2\nn_head = 2\nn_embd = 32\nblock_size = 12\n"
                                        "reward_head = true\n[data]\nformat = \"preference\"\npath = \"p.jsonl\"\n"
                                        "[train]\nobjective = \"reward\"\n";
  RewardModelOptions wide = Options(4);
  wide.config = dir_ + "/wide.toml";
  auto misfit = LoadRewardModel(wide);
  ASSERT_FALSE(misfit.ok());
  EXPECT_NE(misfit.status().message().find("'wte.weight' is [256, 16], this model's is [256, 32]"), std::string::npos)
      << misfit.status().message();
  RewardModelOptions none = Options(4);
  none.weights = dir_ + "/nowhere";
  EXPECT_EQ(LoadRewardModel(none).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(LoadRewardModel(Options(0)).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace holdfast
