// holdfast-train on a real GPU: placement, the fused AdamW kernel, loss against
// the CPU, bit-exact resume, checkpoint staging. Every test needs a CUDA device
// and a CUDA LibTorch; without one each is reported SKIPPED with the reason
// (scripts/gpu_check.sh runs them on a GPU machine).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "trainer/adamw.h"
#include "trainer/comm/communicator.h"
#include "trainer/config.h"
#include "trainer/device.h"
#include "trainer/gpu.h"
#include "trainer/trainer.h"

namespace holdfast {
namespace {

std::string NoGpuReason() {
  if (!gpu::Built()) return "built without the CUDA toolkit";
  if (CudaDeviceCount() == 0) return "LibTorch sees no CUDA device (a CPU LibTorch, or no GPU/driver here)";
  return "";
}

#define REQUIRE_GPU()                                           \
  do {                                                          \
    const std::string why = NoGpuReason();                      \
    if (!why.empty()) GTEST_SKIP() << "no GPU to test: " << why; \
  } while (0)

class GpuTrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("hf_gpu_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    std::mt19937 rng(1);
    std::ofstream f(dir_ / "corpus.txt", std::ios::binary);
    const char* words[] = {"the ", "GPU ", "trains ", "while ", "holdfast ", "keeps ", "watch. ", "\n"};
    for (int i = 0; i < 40000; ++i) f << words[rng() % 8];
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  TrainerConfig Config(const std::string& device, const std::string& precision = "fp32") {
    Result<TrainerConfig> c = LoadTrainerConfig(
        "", {"data.path=" + (dir_ / "corpus.txt").string(), "model.n_layer=2", "model.n_embd=64", "model.n_head=4",
             "model.block_size=64", "train.micro_batch=4", "train.steps=12", "train.device=" + device,
             "train.precision=" + precision, "optim.lr=3e-3", "optim.grad_clip=0.5"});
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return *c;
  }

  std::unique_ptr<Trainer> Make(const TrainerConfig& c) {
    const auto env = [](const char* name) -> const char* { return std::getenv(name); };
    Result<DevicePlacement> p = ResolveDevice(c, 1, CudaDeviceCount(), env);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    auto t = Trainer::Create(c, MakeLocalCommunicator(), *p);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(t).value() : nullptr;
  }

  std::filesystem::path dir_;
};

TEST_F(GpuTrainerTest, TrainsOnTheGpuAndMatchesTheCpu) {
  REQUIRE_GPU();
  auto gpu = Make(Config("cuda"));
  auto cpu = Make(Config("cpu"));
  ASSERT_TRUE(gpu && cpu);
  EXPECT_NE(gpu->Fingerprint().device.find("sm_"), std::string::npos) << gpu->Fingerprint().device;
  double first = 0, last = 0, worst = 0;
  for (int s = 0; s < 12; ++s) {
    Result<StepMetrics> g = gpu->Step(), c = cpu->Step();
    ASSERT_TRUE(g.ok() && c.ok()) << g.status().ToString() << c.status().ToString();
    if (s == 0) first = g->loss;
    last = g->loss;
    worst = std::max(worst, std::abs(g->loss - c->loss) / c->loss);
    EXPECT_NEAR(g->grad_norm / c->grad_norm, 1.0, 1e-3) << "step " << s + 1;
  }
  EXPECT_LT(last, first) << "the loss falls on the GPU";
  EXPECT_LT(worst, 1e-3) << "GPU and CPU float32 losses agree";
}

TEST_F(GpuTrainerTest, Bf16TrainsAndStaysNearFloat32) {
  REQUIRE_GPU();
  auto bf16 = Make(Config("cuda", "bf16"));
  auto fp32 = Make(Config("cuda"));
  ASSERT_TRUE(bf16 && fp32);
  for (int s = 0; s < 12; ++s) {
    Result<StepMetrics> a = bf16->Step(), b = fp32->Step();
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_NEAR(a->loss / b->loss, 1.0, 2e-2) << "step " << s + 1;
  }
}

TEST_F(GpuTrainerTest, ResumesBitExactlyOnTheGpu) {
  REQUIRE_GPU();
  const TrainerConfig c = Config("cuda");
  auto straight = Make(c);
  for (int s = 0; s < 10; ++s) ASSERT_TRUE(straight->Step().ok());
  auto first = Make(c);
  for (int s = 0; s < 5; ++s) ASSERT_TRUE(first->Step().ok());
  Result<TrainState> saved = first->CaptureState();  // through the pinned staging path
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  ASSERT_NE(saved->Find("rng.cuda"), nullptr) << "the CUDA generator is part of the state";
  first.reset();
  auto resumed = Make(c);
  std::vector<std::string> warnings;
  ASSERT_TRUE(resumed->RestoreState(saved->Views(), /*strict=*/true, &warnings).ok());
  for (int s = 0; s < 5; ++s) ASSERT_TRUE(resumed->Step().ok());
  EXPECT_EQ(resumed->ParamsHash(), straight->ParamsHash()) << "resume is bit-exact on the same GPU";
}

TEST_F(GpuTrainerTest, StagedViewsHoldTheStateOfTheirStep) {
  REQUIRE_GPU();
  auto t = Make(Config("cuda"));
  ASSERT_TRUE(t->Step().ok());
  Result<TrainState> want = t->CaptureState();
  ASSERT_TRUE(want.ok());
  Result<std::vector<StateView>> views = t->StateViews();
  ASSERT_TRUE(views.ok());
  ASSERT_TRUE(t->Step().ok());  // the update waits for the copies on the device
  for (const StateView& v : *views) {
    if (v.name == "meta") continue;
    if (v.ready) {
      ASSERT_TRUE(v.ready().ok());
    }
    const StateBuffer* b = want->Find(v.name);
    ASSERT_NE(b, nullptr) << v.name;
    ASSERT_EQ(b->bytes.size(), v.size) << v.name;
    EXPECT_EQ(std::memcmp(b->bytes.data(), v.data, v.size), 0) << v.name << " changed under the staged copy";
  }
}

TEST(GpuAdamWTest, TheKernelMatchesTheHostUpdate) {
  REQUIRE_GPU();
  const int64_t n = 1 << 20;
  auto opts = torch::TensorOptions().dtype(torch::kFloat32);
  torch::manual_seed(3);
  auto g = torch::randn({n}, opts), p = torch::randn({n}, opts), m = torch::zeros({n}, opts), v = torch::zeros({n}, opts);
  auto dev = torch::Device(torch::kCUDA, 0);
  auto gd = g.to(dev), pd = p.to(dev), md = m.to(dev), vd = v.to(dev);
  const std::vector<std::pair<int64_t, int64_t>> runs = {{1000, 5000}, {200000, 300000}};
  const double norm = std::sqrt(SumOfSquares(g.data_ptr<float>(), n));
  auto norm_d = torch::full({1}, norm, torch::TensorOptions().dtype(torch::kFloat64).device(dev));
  for (int64_t step = 1; step <= 5; ++step) {
    AdamWStep s;
    s.lr = 1e-2;
    s.weight_decay = 0.1;
    s.step = step;
    s.grad_scale = ClipCoefficient(norm, 1.0);
    ApplyAdamW(s, runs, n, g.data_ptr<float>(), p.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>());
    ASSERT_TRUE(gpu::ApplyAdamWOnDevice(s, runs, n, gd.data_ptr<float>(), pd.data_ptr<float>(), md.data_ptr<float>(),
                                        vd.data_ptr<float>(), norm_d.data_ptr<double>(), 1.0)
                    .ok());
  }
  const double diff = (pd.to(torch::kCPU) - p).abs().max().item<double>();
  EXPECT_LT(diff, 1e-5) << "device and host AdamW agree to float rounding";
}

}  // namespace
}  // namespace holdfast
