// Tensor parallelism against the single-process block (issue 26, must-show
// 1): a block split over 2 and 4 ranks (threads of this process, a Gloo tp
// group over loopback) gives the full block's output, input gradient and
// every parameter's gradient (its shard of the full gradient) within 1e-5
// relative, float32.
#include "trainer/tensor_parallel.h"

#include <gtest/gtest.h>

#include <functional>

#include "trainer/gloo_ranks_test_util.h"
#include "trainer/model.h"

namespace holdfast {
namespace {

// max |a - b| over max |b|.
double RelativeDiff(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  return (a - b).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

ModelConfig SmallConfig(bool bias) {
  ModelConfig cfg;
  cfg.n_layer = 1;
  cfg.n_head = 4;
  cfg.n_embd = 32;
  cfg.block_size = 16;
  cfg.bias = bias;
  return cfg;
}

struct Reference {
  torch::Tensor x, out_weight, y, x_grad;
  std::map<std::string, torch::Tensor> grads;
};

// The full block's forward and backward of sum(y * out_weight).
Reference RunFull(Block& full, const ModelConfig& cfg) {
  Reference r;
  r.x = torch::randn({2, cfg.block_size, cfg.n_embd});
  r.out_weight = torch::randn({2, cfg.block_size, cfg.n_embd});
  auto x = r.x.clone().requires_grad_(true);
  r.y = full->forward(x);
  (r.y * r.out_weight).sum().backward();
  r.x_grad = x.grad().clone();
  for (const auto& p : full->named_parameters()) r.grads[p.key()] = p.value().grad().clone();
  return r;
}

// Every parameter of `block` (tp rank `r` of `size`) has a gradient, its
// shard of the full block's, within 1e-5 relative.
void ExpectShardGradients(torch::nn::Module& block, const Reference& ref, int r, int size) {
  size_t checked = 0;
  for (const auto& p : block.named_parameters()) {
    auto want = TensorParallelShardOf(p.key(), ref.grads.at(p.key()), r, size);
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_LT(RelativeDiff(p.value().grad(), *want), 1e-5) << p.key() << ", tp rank " << r;
    ++checked;
  }
  EXPECT_EQ(checked, ref.grads.size());
}

#if HOLDFAST_HAVE_GLOO

// Runs body(rank, tp) on `size` threads, each rank with a Gloo group of
// `size` over loopback.
void RunTpRanks(int size, const std::function<void(int, Communicator&)>& body) { RunGlooRanks(size, body); }

class TensorParallelTest : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(TensorParallelTest, TheSplitBlockIsTheFullBlock) {
  const auto [size, bias] = GetParam();
  torch::set_num_threads(1);
  torch::manual_seed(7);
  const ModelConfig cfg = SmallConfig(bias);
  Block full(cfg, ComputeOptions{});
  {
    torch::NoGradGuard no_grad;  // LayerNorms away from 1 / 0, so that their gradients are checked too
    for (auto& p : full->named_parameters()) {
      if (p.key().rfind("ln_", 0) == 0) p.value().add_(0.1 * torch::randn_like(p.value()));
    }
  }
  const Reference ref = RunFull(full, cfg);

  RunTpRanks(size, [&, size = size](int r, Communicator& tp) {
    auto block = ParallelBlockImpl::Create(cfg, &tp);
    ASSERT_TRUE(block.ok()) << block.status().ToString();
    ASSERT_TRUE((*block)->LoadFromFull(*full).ok());
    auto x = ref.x.clone().requires_grad_(true);
    auto y = (*block)->forward(x);
    (y * ref.out_weight).sum().backward();
    EXPECT_LT(RelativeDiff(y, ref.y), 1e-5) << "output, tp rank " << r;
    EXPECT_LT(RelativeDiff(x.grad(), ref.x_grad), 1e-5) << "input gradient, tp rank " << r;
    ExpectShardGradients(**block, ref, r, size);
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, TensorParallelTest,
                         ::testing::Combine(::testing::Values(2, 4), ::testing::Values(true, false)));

// Sequence parallel: rank r takes positions [r*T/S, (r+1)*T/S) of the input
// and gives the same positions of the full block's output and input
// gradient; every parameter's gradient (the replicated LayerNorms' and
// biases' summed over the group) is its shard of the full one. Without the
// sum over the group those gradients are one rank's positions' only.
TEST_P(TensorParallelTest, TheSequenceParallelBlockIsTheFullBlock) {
  const auto [size, bias] = GetParam();
  torch::set_num_threads(1);
  torch::manual_seed(9);
  const ModelConfig cfg = SmallConfig(bias);
  Block full(cfg, ComputeOptions{});
  {
    torch::NoGradGuard no_grad;
    for (auto& p : full->named_parameters()) {
      if (p.key().rfind("ln_", 0) == 0) p.value().add_(0.1 * torch::randn_like(p.value()));
    }
  }
  const Reference ref = RunFull(full, cfg);
  const int64_t t = cfg.block_size / size;

  RunTpRanks(size, [&, size = size](int r, Communicator& tp) {
    auto block = ParallelBlockImpl::Create(cfg, &tp, /*sequence_parallel=*/true);
    ASSERT_TRUE(block.ok()) << block.status().ToString();
    ASSERT_TRUE((*block)->LoadFromFull(*full).ok());
    auto mine = [&](const torch::Tensor& whole) { return whole.narrow(1, r * t, t).contiguous(); };
    auto x = mine(ref.x).requires_grad_(true);
    auto y = (*block)->forward(x);
    ASSERT_EQ(y.size(1), t) << "a sequence-parallel block returns its rank's positions";
    (y * mine(ref.out_weight)).sum().backward();
    EXPECT_LT(RelativeDiff(y, mine(ref.y)), 1e-5) << "output, tp rank " << r;
    EXPECT_LT(RelativeDiff(x.grad(), mine(ref.x_grad)), 1e-5) << "input gradient, tp rank " << r;
    ExpectShardGradients(**block, ref, r, size);
  });
}

// The whole model, tp 2 against one process: the same initial weights (the
// split model loads its shards from the full one), the same batches, AdamW
// on both. The first step's every parameter gradient, and the loss of each
// of 50 steps, within 1e-5 relative.
class TensorParallelGptTest : public ::testing::TestWithParam<bool> {};

TEST_P(TensorParallelGptTest, FiftyStepsOfTp2AreTheSingleProcessRun) {
  const bool sequence_parallel = GetParam();
  torch::set_num_threads(1);
  ModelConfig cfg = SmallConfig(true);
  cfg.n_layer = 2;
  cfg.vocab_size = 64;
  torch::manual_seed(11);
  Gpt full(cfg);
  full->InitWeights();
  constexpr int kSteps = 50, kTp = 2;
  std::vector<torch::Tensor> idx, targets;
  for (int s = 0; s < kSteps; ++s) {
    idx.push_back(torch::randint(cfg.vocab_size, {4, cfg.block_size}, torch::kLong));
    targets.push_back((idx.back() * 3 + 1) % cfg.vocab_size);  // a mapping there is to learn
  }
  Gpt start(cfg);
  ASSERT_TRUE(start->LoadFromFull(*full).ok());
  auto options = torch::optim::AdamWOptions(3e-3).weight_decay(0.1);
  std::vector<double> ref_loss;
  std::map<std::string, torch::Tensor> ref_grads;
  {
    torch::optim::AdamW opt(full->parameters(), options);
    for (int s = 0; s < kSteps; ++s) {
      opt.zero_grad();
      auto loss = full->forward(idx[s], targets[s]);
      loss.backward();
      if (s == 0) {
        for (const auto& p : full->named_parameters()) ref_grads[p.key()] = p.value().grad().clone();
      }
      opt.step();
      ref_loss.push_back(loss.item<double>());
    }
  }
  EXPECT_LT(ref_loss.back(), ref_loss.front() - 0.1) << "the reference run learns";

  RunTpRanks(kTp, [&](int r, Communicator& tp) {
    Gpt model(cfg, ComputeOptions{}, &tp, sequence_parallel);
    ASSERT_TRUE(model->tensor_parallel());
    ASSERT_TRUE(model->LoadFromFull(*start).ok());
    torch::optim::AdamW opt(model->parameters(), options);
    for (int s = 0; s < kSteps; ++s) {
      opt.zero_grad();
      auto loss = model->forward(idx[s], targets[s]);
      loss.backward();
      if (s == 0) {
        for (const auto& p : model->named_parameters()) {
          const std::string& name = p.key();
          auto want = GptTensorParallelShardOf(name, ref_grads.at(name), r, kTp);
          ASSERT_TRUE(want.ok()) << want.status().ToString();
          EXPECT_LT(RelativeDiff(p.value().grad(), *want), 1e-5) << name << ", tp rank " << r;
        }
      }
      opt.step();
      const double got = loss.item<double>();
      EXPECT_NEAR(got, ref_loss[static_cast<size_t>(s)], 1e-5 * ref_loss[static_cast<size_t>(s)])
          << "step " << s + 1 << ", tp rank " << r;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(SequenceParallel, TensorParallelGptTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "SequenceParallel" : "TensorParallelOnly");
                         });

#endif  // HOLDFAST_HAVE_GLOO

// The shards of the packed q | k | v rows: rank t's heads of each of the three.
TEST(TensorParallelShardTest, AttentionIsSplitByHeadsOfQKAndV) {
  auto full = torch::arange(6 * 2, torch::kFloat32).view({6, 2});  // C = 2: q rows 0-1, k 2-3, v 4-5
  auto one = TensorParallelShardOf("attn.c_attn.weight", full, 1, 2);
  ASSERT_TRUE(one.ok());
  EXPECT_TRUE(torch::equal(*one, torch::tensor({2.f, 3.f, 6.f, 7.f, 10.f, 11.f}).view({3, 2})));
  auto proj = TensorParallelShardOf("mlp.c_proj.weight", torch::arange(8, torch::kFloat32).view({1, 8}), 0, 2);
  ASSERT_TRUE(proj.ok());
  EXPECT_TRUE(torch::equal(*proj, torch::tensor({0.f, 1.f, 2.f, 3.f}).view({1, 4})));
  EXPECT_EQ(TensorParallelShardOf("mlp.c_fc.weight", torch::zeros({6, 2}), 0, 4).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(TensorParallelShardOf("wte.weight", torch::zeros({4, 2}), 0, 2).status().code(),
            StatusCode::kInvalidArgument);
}

// The parts of every parameter of a whole GPT, put back together, are that
// parameter (what DumpParams writes for a tensor-parallel run), for 2 and 4
// ranks; which parameters split is what the rules say.
TEST(TensorParallelShardTest, ThePartsOfEveryGptParameterMakeTheWholeAgain) {
  ModelConfig cfg = SmallConfig(true);
  cfg.n_layer = 2;
  torch::manual_seed(3);
  Gpt full(cfg);
  full->InitWeights();
  int split = 0;
  for (int size : {2, 4}) {
    for (const auto& p : full->named_parameters()) {
      std::vector<torch::Tensor> parts;
      for (int r = 0; r < size; ++r) {
        auto part = GptTensorParallelShardOf(p.key(), p.value(), r, size);
        ASSERT_TRUE(part.ok()) << p.key() << ": " << part.status().ToString();
        parts.push_back(*part);
      }
      auto whole = GptTensorParallelFullOf(p.key(), parts);
      ASSERT_TRUE(whole.ok()) << p.key() << ": " << whole.status().ToString();
      EXPECT_TRUE(torch::equal(*whole, p.value())) << p.key() << " over " << size;
      const bool splits = GptTensorParallelSplits(p.key());
      EXPECT_EQ(splits, !parts[0].sizes().equals(p.value().sizes())) << p.key();
      split += splits && size == 2;
    }
  }
  EXPECT_EQ(split, 2 * 6) << "c_attn, attn.c_proj, c_fc, mlp.c_proj weights and c_attn, c_fc biases per block";
  auto bad = GptTensorParallelFullOf("h.0.attn.c_attn.weight", {torch::zeros({6, 2}), torch::zeros({3, 2})});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << "parts of different shapes";
}

TEST(TensorParallelShardTest, ALayoutThatDoesNotSplitIsRefusedBeforeAnyCollective) {
  auto local = MakeLocalCommunicator();
  ModelConfig cfg = SmallConfig(true);
  cfg.n_head = 3;
  cfg.n_embd = 33;
  EXPECT_TRUE(ParallelBlockImpl::Create(cfg, local.get()).ok()) << "one rank: anything splits";
  cfg.dropout = 0.1;  // layout-independent (tests/trainer/tensor_parallel_integration_test.cc)
  EXPECT_TRUE(ParallelBlockImpl::Create(cfg, local.get()).ok());
  EXPECT_FALSE(ParallelBlockImpl::Create(cfg, nullptr).ok());
}

#if HOLDFAST_HAVE_GLOO
// A sequence that does not split over the group is refused: at Create for
// the block size, and as an error naming it for a shorter batch.
TEST(TensorParallelShardTest, ASequenceThatDoesNotSplitIsRefused) {
  ModelConfig cfg = SmallConfig(true);
  RunTpRanks(2, [&](int, Communicator& tp) {
    ModelConfig odd = cfg;
    odd.block_size = 15;
    auto refused = ParallelBlockImpl::Create(odd, &tp, /*sequence_parallel=*/true);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find("model.block_size (15)"), std::string::npos)
        << refused.status().message();
    try {
      SplitSequence(torch::zeros({1, 7, cfg.n_embd}), &tp);
      ADD_FAILURE() << "7 positions over 2 ranks split";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find("a sequence of 7 positions does not split over 2"), std::string::npos)
          << e.what();
    }
  });
}
#endif

}  // namespace
}  // namespace holdfast
