// Pipeline parallelism against the single-process model (issue 26, must-show
// 1): a GPT cut into 2 and 4 stages (threads of this process, a Gloo
// pipeline group over loopback), one step of M micro-batches by 1F1B, gives
// the single-process step's loss and every parameter's gradient within 1e-5
// relative; 50 AdamW steps of 2 stages follow the single-process run's
// losses within 1e-5 and keep the tied embedding's two copies bit-identical;
// tp 2 x pp 2 likewise.
#include "trainer/pipeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "trainer/gloo_ranks_test_util.h"
#include "trainer/mesh_comm.h"
#include "trainer/pipeline_schedule.h"
#include "trainer/tensor_parallel.h"

namespace holdfast {
namespace {

// max |a - b| over max |b|.
double RelativeDiff(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  return (a - b).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

ModelConfig SmallConfig(int layers) {
  ModelConfig cfg;
  cfg.n_layer = layers;
  cfg.n_head = 4;
  cfg.n_embd = 32;
  cfg.block_size = 16;
  cfg.vocab_size = 64;
  cfg.bias = true;
  return cfg;
}

struct Batches {
  std::vector<torch::Tensor> idx, targets;
};

Batches MakeBatches(const ModelConfig& cfg, int n, int64_t batch) {
  Batches b;
  for (int i = 0; i < n; ++i) {
    b.idx.push_back(torch::randint(cfg.vocab_size, {batch, cfg.block_size}, torch::kLong));
    b.targets.push_back((b.idx.back() * 3 + 1) % cfg.vocab_size);  // a mapping there is to learn
  }
  return b;
}

Gpt FullModel(const ModelConfig& cfg, uint64_t seed) {
  torch::manual_seed(seed);
  Gpt full(cfg);
  full->InitWeights();
  torch::NoGradGuard no_grad;  // LayerNorms away from 1 / 0, so that their gradients are checked too
  for (auto& p : full->named_parameters()) {
    if (p.key().find("ln_") != std::string::npos) p.value().add_(0.1 * torch::randn_like(p.value()));
  }
  return full;
}

// One single-process step of micro-batches [first, first + m): the mean loss
// and every parameter's gradient, accumulated as grad_accum does.
struct Reference {
  double loss = 0;
  std::map<std::string, torch::Tensor> grads;
};

Reference RunFull(Gpt& full, const Batches& b) {
  Reference r;
  for (auto& p : full->parameters()) p.mutable_grad() = torch::Tensor();
  const double scale = 1.0 / static_cast<double>(b.idx.size());
  for (size_t m = 0; m < b.idx.size(); ++m) {
    auto loss = full->forward(b.idx[m], b.targets[m]) * scale;
    loss.backward();
    r.loss += loss.item<double>();
  }
  for (const auto& p : full->named_parameters()) r.grads[p.key()] = p.value().grad().clone();
  return r;
}

TEST(PipelineStageTest, TheStagesCutTheModelIntoRunsAndTogetherHoldEveryParameter) {
  const ModelConfig cfg = SmallConfig(5);
  Gpt full(cfg);
  std::set<std::string> whole;
  for (const auto& p : full->named_parameters()) whole.insert(p.key());
  for (int stages = 1; stages <= 5; ++stages) {
    std::set<std::string> held;
    int next = 0;
    for (int s = 0; s < stages; ++s) {
      auto stage = GptStageImpl::Create(cfg, s, stages);
      ASSERT_TRUE(stage.ok()) << stage.status().ToString();
      const PipelineStageSpec& spec = (*stage)->spec();
      EXPECT_EQ(spec.first_layer, next) << "stage " << s << " of " << stages;
      EXPECT_GE(spec.end_layer - spec.first_layer, cfg.n_layer / stages);
      next = spec.end_layer;
      for (const auto& p : (*stage)->named_parameters()) {
        const std::string name = (*stage)->GlobalName(p.key());
        held.insert(name);
        auto holder = FirstStageHolding(cfg, stages, name);
        ASSERT_TRUE(holder.ok()) << holder.status().ToString();
        EXPECT_EQ(*holder, name == "wte.weight" ? 0 : s) << name << " on stage " << s << " of " << stages;
      }
      EXPECT_EQ((*stage)->tied_embedding().defined(), s == 0 || s == stages - 1);
    }
    EXPECT_EQ(next, cfg.n_layer);
    EXPECT_EQ(held, whole) << stages << " stages";
  }
  EXPECT_FALSE(FirstStageHolding(cfg, 2, "h.9.ln_1.weight").ok());
  EXPECT_FALSE(FirstStageHolding(cfg, 2, "lm_head.weight").ok());
  auto too_many = GptStageImpl::Create(cfg, 0, 6);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("use at most 5 stages"), std::string::npos)
      << too_many.status().ToString();
  ModelConfig dropout = cfg;
  dropout.dropout = 0.1;
  auto refused = GptStageImpl::Create(dropout, 0, 2);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("model.dropout = 0"), std::string::npos);
}

#if HOLDFAST_HAVE_GLOO

class PipelineStepTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(PipelineStepTest, OneStepIsTheSingleProcessStep) {
  const auto [stages, micro] = GetParam();
  torch::set_num_threads(1);
  const ModelConfig cfg = SmallConfig(4);
  Gpt full = FullModel(cfg, 5);
  torch::manual_seed(6);
  const Batches b = MakeBatches(cfg, micro, 2);
  const Reference ref = RunFull(full, b);

  RunGlooRanks(stages, [&, stages = stages, micro = micro](int s, Communicator& pipe) {
    auto stage = GptStageImpl::Create(cfg, s, stages);
    ASSERT_TRUE(stage.ok()) << stage.status().ToString();
    ASSERT_TRUE((*stage)->LoadFromFull(*full).ok());
    auto r = RunPipelineStep(**stage, pipe, b.idx, b.targets, 1.0 / micro);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(SyncTiedEmbeddingGrad(**stage, pipe).ok());
    EXPECT_EQ(r->max_in_flight, std::min(stages - s, micro)) << "stage " << s;
    if (s == stages - 1) {
      EXPECT_NEAR(r->loss, ref.loss, 1e-5 * ref.loss);
    } else {
      EXPECT_EQ(r->loss, 0.0);
    }
    for (const auto& p : (*stage)->named_parameters()) {
      const std::string name = (*stage)->GlobalName(p.key());
      ASSERT_TRUE(p.value().grad().defined()) << name << ", stage " << s;
      EXPECT_LT(RelativeDiff(p.value().grad(), ref.grads.at(name)), 1e-5) << name << ", stage " << s;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Shapes, PipelineStepTest,
                         ::testing::Combine(::testing::Values(2, 4), ::testing::Values(1, 4, 6)));

// Without the tied embedding's exchange the first stage's wte gradient lacks
// the head's part and the last stage's the embedding's: the test above
// would fail (this one checks that it can).
TEST(PipelineTiedEmbeddingTest, WithoutTheExchangeBothCopiesOfWteAreWrong) {
  torch::set_num_threads(1);
  const ModelConfig cfg = SmallConfig(2);
  Gpt full = FullModel(cfg, 8);
  const Batches b = MakeBatches(cfg, 2, 2);
  const Reference ref = RunFull(full, b);
  RunGlooRanks(2, [&](int s, Communicator& pipe) {
    auto stage = GptStageImpl::Create(cfg, s, 2);
    ASSERT_TRUE(stage.ok());
    ASSERT_TRUE((*stage)->LoadFromFull(*full).ok());
    ASSERT_TRUE(RunPipelineStep(**stage, pipe, b.idx, b.targets, 0.5).ok());
    EXPECT_GT(RelativeDiff((*stage)->tied_embedding().grad(), ref.grads.at("wte.weight")), 1e-3) << "stage " << s;
    ASSERT_TRUE(SyncTiedEmbeddingGrad(**stage, pipe).ok());
    EXPECT_LT(RelativeDiff((*stage)->tied_embedding().grad(), ref.grads.at("wte.weight")), 1e-5) << "stage " << s;
  });
}

// 50 AdamW steps of 4 micro-batches: pp 2 against one process from the
// same weights on the same batches. Every step's loss within 1e-5
// relative; the two copies of wte stay bit-identical.
TEST(PipelineGptTest, FiftyStepsOfPp2AreTheSingleProcessRun) {
  torch::set_num_threads(1);
  const ModelConfig cfg = SmallConfig(4);
  Gpt full = FullModel(cfg, 11);
  constexpr int kSteps = 50, kMicro = 4;
  std::vector<Batches> steps;
  for (int s = 0; s < kSteps; ++s) steps.push_back(MakeBatches(cfg, kMicro, 2));
  Gpt start(cfg);
  ASSERT_TRUE(start->LoadFromFull(*full).ok());
  auto options = torch::optim::AdamWOptions(3e-3).weight_decay(0.1);
  std::vector<double> ref_loss;
  {
    torch::optim::AdamW opt(full->parameters(), options);
    for (int s = 0; s < kSteps; ++s) {
      ref_loss.push_back(RunFull(full, steps[static_cast<size_t>(s)]).loss);
      opt.step();
    }
  }
  EXPECT_LT(ref_loss.back(), ref_loss.front() - 0.1) << "the reference run learns";

  std::vector<torch::Tensor> wte(2);
  RunGlooRanks(2, [&](int s, Communicator& pipe) {
    auto stage = GptStageImpl::Create(cfg, s, 2);
    ASSERT_TRUE(stage.ok());
    ASSERT_TRUE((*stage)->LoadFromFull(*start).ok());
    torch::optim::AdamW opt((*stage)->parameters(), options);
    for (int step = 0; step < kSteps; ++step) {
      opt.zero_grad();
      const Batches& b = steps[static_cast<size_t>(step)];
      auto r = RunPipelineStep(**stage, pipe, b.idx, b.targets, 1.0 / kMicro);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_TRUE(SyncTiedEmbeddingGrad(**stage, pipe).ok());
      opt.step();
      if (s == 1) {
        const double want = ref_loss[static_cast<size_t>(step)];
        EXPECT_NEAR(r->loss, want, 1e-5 * want) << "step " << step + 1;
      }
    }
    wte[static_cast<size_t>(s)] = (*stage)->tied_embedding().detach().clone();
  });
  ASSERT_TRUE(wte[0].defined() && wte[1].defined());
  EXPECT_TRUE(torch::equal(wte[0], wte[1])) << "the first and last stage's wte drifted apart";
}

// tp 2 x pp 2 (4 ranks; common/mesh.h: rank = tp + 2 * pp): each rank's
// shard of each of its stage's parameters has the single-process gradient's
// shard, and the last stage's loss is the single-process loss.
TEST(PipelineGptTest, TensorTimesPipelineTwoByTwoIsTheSingleProcessStep) {
  torch::set_num_threads(1);
  const ModelConfig cfg = SmallConfig(4);
  Gpt full = FullModel(cfg, 13);
  const Batches b = MakeBatches(cfg, 4, 2);
  const Reference ref = RunFull(full, b);
  auto mesh = DeviceMesh::Create(4, MeshShape{2, 2, 1});
  ASSERT_TRUE(mesh.ok()) << mesh.status().ToString();
  RunStoreRanks(4, [&](int r, const CommunicatorOptions& o) {
    auto comms = MakeMeshCommunicators(*mesh, o, "gloo", {MeshGroup::kTensor, MeshGroup::kPipeline});
    ASSERT_TRUE(comms.ok()) << comms.status().ToString();
    const MeshCoords c = mesh->CoordsOf(r);
    auto stage = GptStageImpl::Create(cfg, c.pp, 2, comms->tensor.get());
    ASSERT_TRUE(stage.ok()) << stage.status().ToString();
    ASSERT_TRUE((*stage)->LoadFromFull(*full).ok());
    auto result = RunPipelineStep(**stage, *comms->pipeline, b.idx, b.targets, 0.25);
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    ASSERT_TRUE(SyncTiedEmbeddingGrad(**stage, *comms->pipeline).ok());
    if (c.pp == 1) {
      EXPECT_NEAR(result->loss, ref.loss, 1e-5 * ref.loss) << "rank " << r;
    }
    for (const auto& p : (*stage)->named_parameters()) {
      const std::string name = (*stage)->GlobalName(p.key());
      auto want = GptTensorParallelShardOf(name, ref.grads.at(name), c.tp, 2);
      ASSERT_TRUE(want.ok()) << want.status().ToString();
      EXPECT_LT(RelativeDiff(p.value().grad(), *want), 1e-5) << name << ", rank " << r;
    }
  });
}

#endif  // HOLDFAST_HAVE_GLOO

}  // namespace
}  // namespace holdfast
