// holdfast-gpu-bench: holdfast-train's GPU figures, measured in one process.
//
//   holdfast-gpu-bench --config gpt2-124m.toml [--set k=v ...] [--steps 20] [--warmup 5]
//                      [--checkpoint-dir DIR] [--out result.json]
//
// On the rank's GPU (train.device = "cuda"):
//  - dense bf16 GEMM throughput (8192^3 matmuls), the MFU denominator;
//  - step time (median) and MFU: model FLOPs per token as nanoGPT's
//    estimate_mfu counts them (6 N + 12 L T C, N without the position
//    embedding) x tokens per step / step time / GEMM FLOP/s;
//  - checkpoint stall against a synchronous save of the same state: the stall
//    is the time the training thread spends in StateViews + Save plus what the
//    next step takes beyond the median; the synchronous save is Save + Flush
//    (stage, write, fsync, commit) with the training thread waiting;
//  - device→host staging bandwidth (DeviceStager, as a save does it) against a
//    plain pinned copy of the same bytes.
// Prints a table and writes the numbers as JSON. Exits 2 without a GPU.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "checkpoint/checkpoint_writer.h"
#include "trainer/comm/communicator.h"
#include "trainer/config.h"
#include "trainer/device.h"
#include "trainer/gpu.h"
#include "trainer/trainer.h"

namespace holdfast {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void Sync(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

double GemmFlops(const torch::Device& device) {
  const int64_t n = device.is_cuda() ? 8192 : 512;
  auto opts = torch::TensorOptions().dtype(torch::kBFloat16).device(device);
  auto a = torch::randn({n, n}, opts), b = torch::randn({n, n}, opts);
  for (int i = 0; i < 3; ++i) (void)torch::matmul(a, b);
  Sync(device);
  const int iters = 20;
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) (void)torch::matmul(a, b);
  Sync(device);
  return 2.0 * n * n * n * iters / Seconds(t0);
}

int Main(int argc, char** argv) {
  CLI::App app{"holdfast-gpu-bench: step time, MFU, checkpoint stall and staging bandwidth on one GPU"};
  std::string config_path, out_path, ckpt_dir = "/tmp/holdfast-gpu-bench-ckpt";
  std::vector<std::string> overrides;
  int steps = 20, warmup = 5;
  bool cpu_check = false;
  app.add_option("--config", config_path, "trainer config (TOML)")->required();
  app.add_option("--set", overrides, "override section.key=value");
  app.add_option("--steps", steps, "measured steps")->check(CLI::Range(3, 100000));
  app.add_option("--warmup", warmup, "unmeasured steps first")->check(CLI::Range(1, 1000));
  app.add_option("--checkpoint-dir", ckpt_dir, "where the checkpoint figures write");
  app.add_option("--out", out_path, "write the figures as JSON here");
  app.add_flag("--cpu-check", cpu_check, "run on the CPU, only to check this program (the figures mean nothing)");
  CLI11_PARSE(app, argc, argv);

  overrides.push_back(cpu_check ? "train.device=cpu" : "train.device=cuda");
  Result<TrainerConfig> cfg = LoadTrainerConfig(config_path, overrides);
  if (!cfg.ok()) {
    spdlog::error("{}", cfg.status().ToString());
    return 2;
  }
  const auto env = [](const char* name) -> const char* { return std::getenv(name); };
  Result<DevicePlacement> placement = ResolveDevice(*cfg, 1, CudaDeviceCount(), env);
  if (!placement.ok()) {
    spdlog::error("{}", placement.status().ToString());
    return 2;
  }
  ConfigureTorchRuntime(cfg->train.threads);
  auto trainer_or = Trainer::Create(*cfg, MakeLocalCommunicator(), *placement);
  if (!trainer_or.ok()) {
    spdlog::error("{}", trainer_or.status().ToString());
    return 1;
  }
  Trainer& trainer = **trainer_or;
  const torch::Device device = placement->cuda
                                   ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(placement->ordinal))
                                   : torch::Device(torch::kCPU);
  nlohmann::json out;
  out["device"] = trainer.Fingerprint().device;
  out["config"] = {{"n_layer", cfg->model.n_layer}, {"n_embd", cfg->model.n_embd}, {"n_head", cfg->model.n_head},
                   {"block_size", cfg->model.block_size}, {"vocab_size", cfg->model.vocab_size},
                   {"micro_batch", cfg->train.micro_batch}, {"grad_accum", cfg->train.grad_accum},
                   {"precision", cfg->train.precision}, {"params", trainer.num_params()}};

  const double gemm = GemmFlops(device);
  out["gemm_bf16_tflops"] = gemm / 1e12;

  // Step time and MFU.
  std::vector<double> step_ms;
  std::vector<double> losses;
  for (int i = 0; i < warmup + steps; ++i) {
    Result<StepMetrics> m = trainer.Step();
    if (!m.ok()) {
      spdlog::error("{}", m.status().ToString());
      return 1;
    }
    losses.push_back(m->loss);
    if (i >= warmup) step_ms.push_back(m->step_ms);
  }
  const double med_ms = Median(step_ms);
  const double L = cfg->model.n_layer, T = cfg->model.block_size, C = cfg->model.n_embd;
  const double n_params = static_cast<double>(trainer.num_params()) - T * C;  // without wpe, as nanoGPT
  const double flops_per_token = 6 * n_params + 12 * L * T * C;
  const double tokens = static_cast<double>(cfg->train.micro_batch) * cfg->train.grad_accum * T;
  const double mfu = flops_per_token * tokens / (med_ms / 1e3) / gemm;
  out["step_ms_median"] = med_ms;
  out["tokens_per_s"] = tokens / (med_ms / 1e3);
  out["mfu"] = mfu;
  out["loss_first"] = losses.front();
  out["loss_last"] = losses.back();

  // Staging bandwidth: the trainer's own path against a plain pinned copy.
  std::vector<double> staged_s, plain_s;
  size_t state_bytes = 0;
  for (int i = 0; i < 5; ++i) {
    Sync(device);
    const auto t0 = Clock::now();
    Result<std::vector<StateView>> views = trainer.StateViews();
    if (!views.ok()) {
      spdlog::error("{}", views.status().ToString());
      return 1;
    }
    state_bytes = 0;
    for (const StateView& v : *views) {
      if (v.name != "params" && v.name.rfind("optim.", 0) != 0) continue;
      if (v.ready) {
        Status s = v.ready();
        if (!s.ok()) {
          spdlog::error("{}", s.ToString());
          return 1;
        }
      }
      state_bytes += v.size;
    }
    staged_s.push_back(Seconds(t0));
  }
  {
    const int64_t n = static_cast<int64_t>(state_bytes / 4);
    auto src = torch::empty({n}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
    auto dst = torch::empty({n}, torch::TensorOptions().dtype(torch::kFloat32).pinned_memory(device.is_cuda()));
    for (int i = 0; i < 5; ++i) {
      Sync(device);
      const auto t0 = Clock::now();
      dst.copy_(src, /*non_blocking=*/device.is_cuda());
      Sync(device);
      plain_s.push_back(Seconds(t0));
    }
  }
  const double staged_bw = state_bytes / Median(staged_s), plain_bw = state_bytes / Median(plain_s);
  out["staging_bytes"] = state_bytes;
  out["staging_gb_per_s"] = staged_bw / 1e9;
  out["plain_pinned_copy_gb_per_s"] = plain_bw / 1e9;
  out["staging_ratio"] = staged_bw / plain_bw;

  // Checkpoint stall against a synchronous save.
  std::filesystem::remove_all(ckpt_dir);
  CheckpointWriterOptions wo;
  wo.root = ckpt_dir;
  wo.layout = trainer.Layout();
  wo.config_hash = trainer.ConfigHashHex();
  wo.retention.keep_last = 1;
  auto writer_or = CheckpointWriter::Create(wo);
  if (!writer_or.ok()) {
    spdlog::error("{}", writer_or.status().ToString());
    return 1;
  }
  CheckpointWriter& writer = **writer_or;
  trainer.SetBeforeUpdateHook([&writer] { writer.WaitStaged(); });
  auto save = [&](int64_t step) -> Result<double> {
    const auto t0 = Clock::now();
    HF_ASSIGN_OR_RETURN(std::vector<StateView> views, trainer.StateViews());
    std::vector<BufferView> buffers;
    for (const StateView& v : views) {
      BufferView b{v.name, v.data, v.size};
      b.defer_copy = v.name == "params" || v.name.rfind("optim.", 0) == 0;
      b.ready = v.ready;
      buffers.push_back(std::move(b));
    }
    HF_RETURN_IF_ERROR(writer.Save(step, buffers).status());
    return Seconds(t0);
  };
  std::vector<double> sync_s, stall_s;
  for (int round = 0; round < 3; ++round) {
    // Synchronous: the training thread waits for the whole save.
    Result<StepMetrics> m = trainer.Step();
    if (!m.ok()) return 1;
    const auto t0 = Clock::now();
    Result<double> call = save(m->step);
    Status flushed = writer.Flush();
    if (!call.ok() || !flushed.ok()) {
      spdlog::error("synchronous save: {} {}", call.status().ToString(), flushed.ToString());
      return 1;
    }
    sync_s.push_back(Seconds(t0));
    // Asynchronous: the save's call plus what the next steps lose.
    m = trainer.Step();
    if (!m.ok()) return 1;
    Result<double> async_call = save(m->step);
    if (!async_call.ok()) return 1;
    double extra = 0;
    for (int k = 0; k < 2; ++k) {
      Result<StepMetrics> next = trainer.Step();
      if (!next.ok()) return 1;
      extra += std::max(0.0, next->step_ms - med_ms) / 1e3;
    }
    stall_s.push_back(*async_call + extra);
    if (!writer.Flush().ok()) return 1;
  }
  out["sync_save_s"] = Median(sync_s);
  out["checkpoint_stall_s"] = Median(stall_s);
  out["stall_ratio"] = Median(stall_s) / Median(sync_s);
  std::filesystem::remove_all(ckpt_dir);

  std::printf("device            %s\n", out["device"].get<std::string>().c_str());
  std::printf("model             %lld parameters, %s, micro_batch %d, context %d\n",
              static_cast<long long>(trainer.num_params()), cfg->train.precision.c_str(), cfg->train.micro_batch,
              cfg->model.block_size);
  std::printf("bf16 GEMM         %.1f TFLOP/s\n", gemm / 1e12);
  std::printf("step              %.2f ms median of %d, %.0f tokens/s, MFU %.3f\n", med_ms, steps,
              tokens / (med_ms / 1e3), mfu);
  std::printf("loss              %.4f -> %.4f\n", losses.front(), losses.back());
  std::printf("staging           %.1f GB/s vs plain pinned copy %.1f GB/s (ratio %.3f), %.0f MB\n", staged_bw / 1e9,
              plain_bw / 1e9, staged_bw / plain_bw, state_bytes / 1e6);
  std::printf("checkpoint stall  %.4f s vs synchronous save %.3f s (ratio %.4f)\n", Median(stall_s), Median(sync_s),
              Median(stall_s) / Median(sync_s));
  if (!out_path.empty()) std::ofstream(out_path) << out.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace holdfast

int main(int argc, char** argv) { return holdfast::Main(argc, argv); }
