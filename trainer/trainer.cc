// The LibTorch side of holdfast-train: flat parameters, bucketed gradient
// allreduce overlapped with backward, a flat AdamW, and complete state capture.
#include "trainer/trainer.h"

#include <malloc.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include "common/mesh.h"
#include "common/progress_record.h"
#include "common/rank_progress.h"  // CollectiveGroupOf
#include "trainer/adamw.h"
#include "trainer/comm/communicator.h"
#include "trainer/comm/progress_communicator.h"
#include "trainer/data/dataset.h"
#include "trainer/device_stager.h"
#include "trainer/gpu.h"
#include "trainer/model.h"
#include "trainer/moe.h"
#include "trainer/objective.h"
#include "trainer/pipeline.h"
#include "trainer/progress_sink.h"
#include "trainer/rl/grpo_objective.h"
#include "trainer/tensor_parallel.h"
#include "trainer/weights.h"

namespace holdfast {
namespace {

using Clock = std::chrono::steady_clock;
// v2: each rank's "params"/"optim.*" are its slice of the flat buffers, the
// slice recorded in meta. v1 (before slicing): every rank a full replica.
constexpr const char* kStateFormat = "holdfast-train-state-v2";
constexpr const char* kStateFormatV1 = "holdfast-train-state-v1";
constexpr const char* kParamsFormat = "holdfast-params-v1";

// A rank's model-parallel coordinate: the part of the model its flat
// buffers hold (tp rank, pipeline stage, and with experts sharded its ep
// rank), which the ranks of its slice group tile.
struct Coordinate {
  int tp = 1, tp_rank = 0, pp = 1, stage = 0, ep = 1, ep_rank = 0;
};

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The BLAS library LibTorch actually loaded, as the kernel mapped it. Read
// once: the mapping cannot change, and checkpoints ask for it every save.
std::string ReadLoadedBlas() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    std::string path = line.substr(slash);
    const std::string base = std::filesystem::path(path).filename().string();
    if (base.find("blas") != std::string::npos || base.find("mkl_core") != std::string::npos) return path;
  }
  return "unknown";
}

const std::string& LoadedBlas() {
  static const std::string blas = ReadLoadedBlas();
  return blas;
}

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

Status TorchError(const std::string& what, const std::exception& e) {
  if (auto* c10 = dynamic_cast<const c10::Error*>(&e)) {
    return InternalError(what + ": LibTorch: " + c10->what_without_backtrace());
  }
  return InternalError(what + ": " + e.what());
}

}  // namespace

std::vector<std::string> DeterminismFingerprint::Diff(const DeterminismFingerprint& now) const {
  std::vector<std::string> out;
  auto cmp = [&](const char* what, const std::string& a, const std::string& b) {
    if (a != b) out.push_back(std::string(what) + ": checkpoint " + a + ", now " + b);
  };
  cmp("torch version", torch_version, now.torch_version);
  cmp("BLAS", blas, now.blas);
  cmp("threads", std::to_string(threads), std::to_string(now.threads));
  cmp("world size", std::to_string(world_size), std::to_string(now.world_size));
  cmp("grad_accum", std::to_string(grad_accum), std::to_string(now.grad_accum));
  cmp("bucket bytes", std::to_string(bucket_bytes), std::to_string(now.bucket_bytes));
  cmp("backend", backend, now.backend);
  cmp("ZeRO stage", std::to_string(zero_stage), std::to_string(now.zero_stage));
  cmp("device", device, now.device);
  return out;
}

int CudaDeviceCount() { return static_cast<int>(torch::cuda::device_count()); }

void ConfigureTorchRuntime(int threads) {
  at::set_num_threads(threads);
  static bool interop_set = false;  // a second call throws in LibTorch
  if (!interop_set) at::set_num_interop_threads(1);
  interop_set = true;
  // Keep freed activation buffers in the heap instead of returning them to the
  // kernel: glibc otherwise serves every large tensor with a fresh mmap and the
  // step pays ~15k page faults zero-filling them (bench/: ~8% of a step).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's maximum on 64-bit
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 256 << 20);
}

Status WarmUpRuntime(const TrainerConfig& config) {
  ConfigureTorchRuntime(config.train.threads);
  try {
    ModelConfig small = config.model;
    small.n_layer = 1;
    small.n_head = std::max(1, std::min(config.model.n_head, 4));
    small.n_embd = small.n_head * std::max(1, std::min(config.model.n_embd, 128) / small.n_head);
    small.block_size = std::min(config.model.block_size, 64);
    small.vocab_size = std::min(config.model.vocab_size, 1024);
    small.dropout = 0.0;
    Gpt model(small, ComputeOptions{config.train.precision == "bf16"});
    model->train();
    const torch::Tensor idx = torch::zeros({std::min(config.train.micro_batch, 4), small.block_size}, torch::kLong);
    model->forward(idx, idx).backward();
  } catch (const std::exception& e) {
    return InternalError(std::string("LibTorch warm-up: ") + e.what());
  }
  return Status::Ok();
}

struct Trainer::Impl {
  struct Slot {
    std::string name;
    torch::Tensor param;
    std::vector<int64_t> shape;
    int64_t offset = 0;  // in floats, in the flat buffers
    int64_t numel = 0;
    bool decay = false;
    bool split = false;  // a tensor-parallel shard (its peers in the tp group hold the other parts)
    bool expert = false;  // an expert this rank holds of an expert-parallel run (its ep peers hold the others)
    // In the gradient norm: all but the last stage's copy of the tied wte
    // (the first stage's has the same gradient, counted there).
    bool counted = true;
    int bucket = 0;
  };
  struct Bucket {
    int64_t offset = 0;
    int64_t numel = 0;
    int total = 0;
    int pending = 0;
    bool expert = false;  // of expert parameters: reduced over the expert-data group
    // ZeRO-1 with experts sharded, the other parameters' bucket: its mean over
    // the data-parallel group as a reduce-scatter by the data-parallel ranks'
    // slices (the summation order of ZeRO-1 without experts sharded) and an
    // allgather of the result (FinishGradSync), since this rank's slice is cut
    // over the expert-data group.
    std::vector<size_t> dp_parts;
    std::unique_ptr<Work> work;
    // ZeRO-1: the bucket cut by the ranks' slices (parts[r] elements are rank
    // r's, in rank order); this rank's part is [own_lo, own_hi) of the flat
    // buffers, with its weight-decay runs relative to own_lo.
    std::vector<size_t> parts;
    int64_t own_lo = 0;
    int64_t own_hi = 0;
    std::vector<std::pair<int64_t, int64_t>> own_decay_runs;
    std::unique_ptr<Work> gather;  // the allgather of its updated parameters
  };

  // Calls back into the trainer when a parameter's gradient has been
  // accumulated (DDP's trick: a post hook on the AccumulateGrad node).
  class GradReadyHook : public torch::autograd::FunctionPostHook {
   public:
    GradReadyHook(Impl* impl, int slot) : impl_(impl), slot_(slot) {}
    torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                              const torch::autograd::variable_list& /*inputs*/) override {
      impl_->OnGradReady(slot_);
      return outputs;
    }

   private:
    Impl* impl_;  // not owned; outlives the hook (the hook dies with the grad accumulators Impl holds)
    int slot_;
  };

  TrainerConfig cfg;
  DevicePlacement placement;
  torch::Device device{torch::kCPU};
  bool cuda = false;
  std::string device_text = "cpu";         // DeterminismFingerprint::device
  std::unique_ptr<DeviceStager> stager;     // GPU only: checkpoint staging through pinned memory
  torch::Tensor grad_norm;                  // GPU only: float64 [1], the step's gradient norm
  torch::Tensor shared_dev;                 // GPU only: float32 [3], the step's loss and requests
  // Records every collective of the trainer in `progress` (the GRPO
  // objective's broadcasts go through comm->unrecorded(), as they always did).
  std::unique_ptr<ProgressCommunicator> comm;  // the data-parallel group (the world without tensor parallelism)
  std::unique_ptr<ProgressCommunicator> tp_comm;  // the tensor-parallel group; null for dist.tensor_parallel 1
  std::unique_ptr<ProgressCommunicator> pp_comm;  // the pipeline (rank = stage); null for dist.pipeline_parallel 1
  std::unique_ptr<ProgressCommunicator> ep_comm;  // the MoE all-to-all group; null for dist.expert_parallel 1
  // Expert parallel: the dp ranks holding this rank's experts; null when
  // that is this rank alone (dp = ep) or without expert parallelism.
  std::unique_ptr<ProgressCommunicator> edp_comm;
  // Expert parallel: this rank holds only its own experts (trainer/moe.h),
  // at the end of the flat buffers; they and every ZeRO-1 and checkpoint
  // slice are cut over the expert-data group, and the ep rank is a model-
  // parallel coordinate of the checkpoint, as a tp rank is.
  bool experts_sharded = false;
  int global_rank = 0;   // this rank in the world (TrainerComms::rank)
  int global_world = 1;
  // Tensor parallel: the whole model's parameter names in its registration
  // order (a split block registers its own in another), for DumpParams.
  std::vector<std::string> full_order;
  // Model parallel: the whole model's parameter shapes (DumpParams writes
  // whole tensors, and reads the other stages' parts by them).
  std::map<std::string, std::vector<int64_t>> full_shapes;
  ProgressSink* progress = &NoProgress();  // not owned, never null (SetProgressSink)
  std::function<void()> before_update;  // SetBeforeUpdateHook; runs right before Update (AdamW)
  std::unique_ptr<Dataset> data;
  Gpt model{nullptr};      // the model this rank trains; null on a pipeline stage
  GptStage stage{nullptr};  // dist.pipeline_parallel > 1: this rank's stage instead
  std::unique_ptr<Objective> objective;  // train.objective: what a micro-batch's loss is
  // The newest evaluation (Evaluate, or the restored checkpoint's meta):
  // its step (-1 = none yet) and metrics. Saved in "meta" so that a resumed
  // run's checkpoints still carry it.
  int64_t eval_step = -1;
  std::map<std::string, double> eval_metrics;

  torch::Tensor flat_params;  // all parameters; module parameters are views into it
  torch::Tensor flat_grads;   // all gradients; .grad of each parameter is a view into it
  // AdamW moments: all n elements, or under ZeRO-1 only [own_begin, own_end).
  torch::Tensor exp_avg;
  torch::Tensor exp_avg_sq;
  bool zero = false;       // ZeRO-1 in effect (dist.zero_stage 1 and world > 1)
  int64_t own_begin = 0;   // this rank's slice of the flat buffers: its checkpoint slice,
  int64_t own_end = 0;     // and under ZeRO-1 the part whose moments it holds and updates
  torch::Tensor totals_dev;  // GPU + ZeRO-1: float64 [4], the step's loss, requests and norm²
  std::vector<Slot> slots;    // flat order (reverse of registration: backward order)
  std::vector<std::pair<int64_t, int64_t>> decay_runs;  // contiguous [offset, numel) with weight decay
  std::vector<Bucket> buckets;
  int64_t bucket_bytes = 0;
  // Keeps each parameter's AccumulateGrad node (and its hook) alive. LibTorch
  // 1.x returns a shared_ptr, 2.x an intrusive_ptr: take whatever it returns.
  std::vector<decltype(torch::autograd::impl::grad_accumulator(std::declval<const torch::Tensor&>()))>
      grad_accumulators;

  // Per-step state, touched only by the training thread (autograd runs CPU
  // backward on the calling thread, so hooks run here too).
  bool syncing = false;
  int next_launch = 0;

  int64_t step = 0;
  uint64_t cursor = 0;  // global sample index of the next step's first sample
  // Micro-steps per optimiser step: train.grad_accum, or after a resume on
  // another world size whatever keeps the checkpoint's global batch.
  int accum = 1;
  std::string meta_text;    // backing store of the "meta" state view
  // The "meta" object's members that do not change while the run trains
  // (the config hash, the layout of every parameter, the determinism
  // fingerprint, the slice), as JSON text made once per slice: StateViews
  // runs every step with memory snapshots, and building and dumping them took
  // 0.15 ms of an 11 ms step. Only the step, the data cursor and the eval
  // metrics are dumped each call; a resume that changes grad_accum (another
  // world size) makes them again.
  std::string meta_static_members;
  std::tuple<int64_t, int64_t, int> meta_cache_key{-1, -1, 0};  // the slice and accum it was built for
  torch::Tensor rng_state;  // backing store of the "rng.cpu" state view
  torch::Tensor rng_cuda_state;  // backing store of the "rng.cuda" state view (GPU only)

  // rank() and world() are data-parallel: the data sampler, the gradient
  // average, ZeRO-1 and the checkpoint slices are cut by them.
  int rank() const { return comm->rank(); }
  int world() const { return comm->world_size(); }
  int tp_size() const { return tp_comm ? tp_comm->world_size() : 1; }
  int tp_rank() const { return tp_comm ? tp_comm->rank() : 0; }
  int pp_size() const { return pp_comm ? pp_comm->world_size() : 1; }
  int pp_rank() const { return pp_comm ? pp_comm->rank() : 0; }
  int ep_size() const { return ep_comm ? ep_comm->world_size() : 1; }
  int ep_rank() const { return ep_comm ? ep_comm->rank() : 0; }
  // The group the ZeRO-1 and checkpoint slices are cut over: the data-
  // parallel group, or with experts sharded the expert-data group (the
  // ranks holding the same experts).
  Coordinate coordinate() const {
    Coordinate c;
    c.tp = tp_size();
    c.tp_rank = tp_rank();
    c.pp = pp_size();
    c.stage = pp_rank();
    if (experts_sharded) {
      c.ep = ep_size();
      c.ep_rank = ep_rank();
    }
    return c;
  }
  int slice_world() const { return experts_sharded ? (edp_comm ? edp_comm->world_size() : 1) : world(); }
  int slice_rank() const { return experts_sharded ? (edp_comm ? edp_comm->rank() : 0) : rank(); }
  torch::nn::Module& trained() { return stage ? static_cast<torch::nn::Module&>(*stage) : *model; }
  // Slice r's part of n flat elements: [n*r/W, n*(r+1)/W), W = slice_world().
  int64_t SliceBegin(int64_t n, int r) const { return n * r / slice_world(); }
  // Where element i of the flat buffers lives in exp_avg / exp_avg_sq, and
  // the end of the elements whose moments this rank holds.
  int64_t moments_base() const { return zero ? own_begin : 0; }
  int64_t moments_end() const { return moments_base() + exp_avg.numel(); }
  // The saved shard whose rank-local state (meta, RNG) this rank takes: its
  // own, or rank 0's when the checkpoint had fewer ranks (a reshard).
  size_t own_shard(size_t shards) const { return static_cast<size_t>(slice_rank()) < shards ? slice_rank() : 0; }

  void BuildFlatLayout() {
    torch::NoGradGuard no_grad;
    std::vector<std::pair<std::string, torch::Tensor>> named;
    for (auto& item : trained().named_parameters()) {
      named.emplace_back(stage ? stage->GlobalName(item.key()) : item.key(), item.value());
    }
    std::reverse(named.begin(), named.end());  // gradients become ready roughly in this order
    if (experts_sharded) {
      // This rank's experts after every other parameter, so that buckets of
      // each group's gradients are contiguous.
      std::stable_partition(named.begin(), named.end(),
                            [](const auto& item) { return ExpertOfParameter(item.first) < 0; });
    }
    int64_t total = 0;
    for (auto& [name, p] : named) {
      Slot s;
      s.name = name;
      s.param = p;
      s.shape = p.sizes().vec();
      s.offset = total;
      s.numel = p.numel();
      s.decay = p.dim() >= 2;
      s.split = tp_comm != nullptr && GptTensorParallelSplits(name);
      s.expert = experts_sharded && ExpertOfParameter(name) >= 0;
      s.counted = !(stage && !stage->spec().first() && name == "wte.weight");
      total += s.numel;
      slots.push_back(std::move(s));
    }
    const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
    zero = cfg.dist.zero_stage >= 1 && world() > 1;
    own_begin = SliceBegin(total, slice_rank());
    own_end = SliceBegin(total, slice_rank() + 1);
    const int64_t moments = zero ? own_end - own_begin : total;
    flat_params = torch::empty({total}, f32);
    flat_grads = torch::zeros({total}, f32);
    exp_avg = torch::zeros({moments}, f32);
    exp_avg_sq = torch::zeros({moments}, f32);
    for (Slot& s : slots) {
      auto pview = flat_params.slice(0, s.offset, s.offset + s.numel).view(s.shape);
      pview.copy_(s.param.detach());
      s.param.set_data(pview);
      s.param.mutable_grad() = flat_grads.slice(0, s.offset, s.offset + s.numel).view(s.shape);
      if (s.decay) {
        if (!decay_runs.empty() && decay_runs.back().first + decay_runs.back().second == s.offset) {
          decay_runs.back().second += s.numel;
        } else {
          decay_runs.emplace_back(s.offset, s.numel);
        }
      }
    }
    // Buckets: contiguous ranges of whole parameters, about bucket_mb each.
    bucket_bytes = std::max<int64_t>(4, static_cast<int64_t>(cfg.dist.bucket_mb * 1024 * 1024));
    for (size_t i = 0; i < slots.size(); ++i) {
      if (buckets.empty() || buckets.back().numel * 4 >= bucket_bytes || buckets.back().expert != slots[i].expert) {
        Bucket b;
        b.offset = slots[i].offset;
        b.expert = slots[i].expert;
        buckets.push_back(std::move(b));
      }
      buckets.back().numel += slots[i].numel;
      buckets.back().total += 1;
      slots[i].bucket = static_cast<int>(buckets.size()) - 1;
    }
    if (zero) {
      for (Bucket& b : buckets) {
        const int64_t end = b.offset + b.numel;
        for (int r = 0; experts_sharded && !b.expert && r < world(); ++r) {
          const int64_t lo = std::max(b.offset, total * r / world());
          const int64_t hi = std::min(end, total * (r + 1) / world());
          b.dp_parts.push_back(static_cast<size_t>(std::max<int64_t>(0, hi - lo)));
        }
        for (int r = 0; r < slice_world(); ++r) {
          const int64_t lo = std::max(b.offset, SliceBegin(total, r));
          const int64_t hi = std::min(end, SliceBegin(total, r + 1));
          b.parts.push_back(static_cast<size_t>(std::max<int64_t>(0, hi - lo)));
        }
        b.own_lo = std::clamp(own_begin, b.offset, end);
        b.own_hi = std::clamp(own_end, b.own_lo, end);
        for (const auto& [offset, numel] : decay_runs) {
          const int64_t lo = std::max(offset, b.own_lo), hi = std::min(offset + numel, b.own_hi);
          if (lo < hi) b.own_decay_runs.emplace_back(lo - b.own_lo, hi - lo);
        }
      }
    }
    if (world() > 1 && cfg.dist.overlap) {
      for (size_t i = 0; i < slots.size(); ++i) {
        auto acc = torch::autograd::impl::grad_accumulator(slots[i].param);
        acc->add_post_hook(std::make_unique<GradReadyHook>(this, static_cast<int>(i)));
        grad_accumulators.push_back(std::move(acc));
      }
    }
  }

  void OnGradReady(int slot) {
    if (!syncing) return;
    Bucket& b = buckets[slots[slot].bucket];
    if (--b.pending == 0) LaunchReadyBuckets();
  }

  // Launches buckets strictly in index order, so every rank issues the same sequence.
  void LaunchReadyBuckets() {
    while (next_launch < static_cast<int>(buckets.size()) && buckets[next_launch].pending == 0) {
      Bucket& b = buckets[next_launch];
      float* grads = flat_grads.data_ptr<float>() + b.offset;
      if (b.expert) {
        // An expert's gradient here is the sum over its ep group's tokens of
        // their ranks' losses: / EP, then the mean over the expert-data
        // group, is the mean over the data-parallel world one process takes.
        flat_grads.narrow(0, b.offset, b.numel).mul_(1.0 / ep_size());
        if (edp_comm != nullptr) {
          b.work = zero ? edp_comm->ReduceScatterAsync(grads, b.parts, ReduceOp::kAvg)
                        : edp_comm->AllreduceAsync(grads, static_cast<size_t>(b.numel), ReduceOp::kAvg);
        }
      } else if (zero) {
        b.work = comm->ReduceScatterAsync(grads, b.dp_parts.empty() ? b.parts : b.dp_parts, ReduceOp::kAvg);
      } else {
        b.work = comm->AllreduceAsync(grads, static_cast<size_t>(b.numel), ReduceOp::kAvg);
      }
      ++next_launch;
    }
  }

  Status FinishGradSync(double* wait_ms) {
    auto t0 = Clock::now();
    for (Bucket& b : buckets) b.pending = 0;  // anything not launched yet (unused parameters) goes now
    LaunchReadyBuckets();
    Status first;
    for (Bucket& b : buckets) {
      if (b.work == nullptr) continue;  // an expert bucket held by this rank alone
      if (cuda) {
        // The update waits for the bucket on the device; the host goes on. The
        // step's loss allreduce, queued behind every bucket on the same
        // stream, is where the host waits (and a hung peer is noticed).
        Status s = b.work->WaitOnDevice();
        b.work.reset();
        if (!s.ok() && first.ok()) first = s;
        continue;
      }
      Status s = b.work->Wait();
      b.work.reset();
      if (s.ok() && !b.dp_parts.empty()) {
        s = comm->AllgatherAsync(flat_grads.data_ptr<float>() + b.offset, b.dp_parts)->Wait();
      }
      if (!s.ok() && first.ok()) first = s;
    }
    *wait_ms = MsSince(t0);
    return first.WithContext(zero ? "gradient reduce-scatter" : "gradient allreduce");
  }

  // ZeRO-1, after the gradient reduce-scatter: one float64 allreduce of the
  // step's loss, the ranks' requests and the partial sums of squares of each
  // rank's gradient slice (their sum is the global norm², every rank gets the
  // same bits, so every rank clips alike). On a GPU it reduces device memory
  // and leaves the norm in grad_norm for the update kernel.
  Status ReduceStepTotals(double* loss_sum, const torch::Tensor& loss_dev, const StepRequests& requests,
                          StepMetrics* m) {
    double totals[5] = {*loss_sum, requests.stop ? 1.0 : 0.0, requests.checkpoint ? 1.0 : 0.0, 0.0, 0.0};
    double* reduce = totals;
    const size_t count = tp_comm ? 5 : 4;  // tensor parallel: shards' and replicated sums apart
    if (cuda) {
      torch::NoGradGuard no_grad;
      totals_dev.copy_(torch::from_blob(totals, {4}, torch::kFloat64));
      totals_dev.narrow(0, 0, 1).copy_(loss_dev.view({1}));
      const torch::Tensor own = flat_grads.narrow(0, own_begin, own_end - own_begin);
      totals_dev.narrow(0, 3, 1).copy_(
          torch::linalg_vector_norm(own, 2, c10::nullopt, false, torch::kFloat64).square().view({1}));
      reduce = totals_dev.data_ptr<double>();
    } else if (tp_comm) {
      std::tie(totals[3], totals[4]) = SplitSumsOfSquares(own_begin, own_end);
    } else if (experts_sharded) {
      // The data-parallel world's slices hold every expert once (each ep
      // rank's experts cut over its expert-data group) and the other
      // parameters ep times: ep rank 0's slices count those.
      const auto [experts, others] = SplitSumsOfSquares(own_begin, own_end);
      totals[3] = experts + (ep_rank() == 0 ? others : 0.0);
    } else if (pp_comm) {
      const auto [split, replicated] = SplitSumsOfSquares(own_begin, own_end);
      totals[3] = split + replicated;
    } else {
      totals[3] = SumOfSquares(flat_grads.data_ptr<float>() + own_begin, own_end - own_begin);
    }
    // On a GPU its completion is also where the gradient buckets are recorded done.
    HF_RETURN_IF_ERROR(comm->AllreduceDoubles(reduce, count, ReduceOp::kSum).WithContext("loss and norm allreduce"));
    if (cuda) {
      torch::NoGradGuard no_grad;
      grad_norm.copy_(totals_dev.narrow(0, 3, 1).sqrt());
      auto host = totals_dev.to(torch::kCPU);
      std::memcpy(totals, host.data_ptr<double>(), sizeof(totals));
    }
    *loss_sum = totals[0] / world();
    m->stop = totals[1] > 0;
    m->checkpoint = totals[2] > 0;
    m->grad_norm = std::sqrt(totals[3]);
    if (tp_comm) HF_RETURN_IF_ERROR(ReduceOverTensorGroup(totals[3], totals[4], m));
    if (pp_comm) HF_RETURN_IF_ERROR(ReduceOverPipeline(loss_sum, m));
    return Status::Ok();
  }

  // Sums of squares of the gradient elements [lo, hi) of the flat buffers:
  // {of tensor-parallel shards or this rank's experts, of replicated
  // parameters}, in float64.
  std::pair<double, double> SplitSumsOfSquares(int64_t lo, int64_t hi) const {
    double split = 0, replicated = 0;
    const float* g = flat_grads.data_ptr<float>();
    for (const Slot& s : slots) {
      const int64_t a = std::max(lo, s.offset), b = std::min(hi, s.offset + s.numel);
      if (a < b && s.counted) (s.split || s.expert ? split : replicated) += SumOfSquares(g + a, b - a);
    }
    return {split, replicated};
  }

  // Tensor parallel, after the data-parallel reductions: the shards' sum of
  // squares over the tp group (each rank holds a part of them) plus the
  // replicated parameters' (the same bits on every rank of the group, counted
  // once) is the global norm²; the requests join it, so that every rank of
  // the world (dp groups agreed, then tp groups) acts after the same step.
  // Expert parallel without ZeRO-1 alike over the ep group (each rank's
  // experts are its part).
  Status ReduceOverTensorGroup(double split_sq, double replicated_sq, StepMetrics* m) {
    return ReduceSplitOver(*tp_comm, split_sq, replicated_sq, m, "tensor-parallel gradient norm and requests");
  }
  Status ReduceSplitOver(Communicator& group, double split_sq, double replicated_sq, StepMetrics* m,
                         const char* what) {
    double v[3] = {split_sq, m->stop ? 1.0 : 0.0, m->checkpoint ? 1.0 : 0.0};
    HF_RETURN_IF_ERROR(group.AllreduceDoubles(v, 3, ReduceOp::kSum).WithContext(what));
    m->grad_norm = std::sqrt(v[0] + replicated_sq);
    m->stop = v[1] > 0;
    m->checkpoint = v[2] > 0;
    return Status::Ok();
  }

  // Pipeline parallel, after the data- and tensor-parallel reductions: each
  // stage's norm² (of the parameters it counts), the loss (the last stage's;
  // 0 elsewhere) and the requests summed over the pipeline, so that every
  // rank of the world has the whole model's norm and the step's loss and acts
  // after the same step.
  Status ReduceOverPipeline(double* loss_sum, StepMetrics* m) {
    double v[4] = {m->grad_norm * m->grad_norm, *loss_sum, m->stop ? 1.0 : 0.0, m->checkpoint ? 1.0 : 0.0};
    HF_RETURN_IF_ERROR(
        pp_comm->AllreduceDoubles(v, 4, ReduceOp::kSum).WithContext("pipeline gradient norm, loss and requests"));
    m->grad_norm = std::sqrt(v[0]);
    *loss_sum = v[1];
    m->stop = v[2] > 0;
    m->checkpoint = v[3] > 0;
    return Status::Ok();
  }

  // Pipeline parallel: the step's grad_accum micro-batches over the stages
  // (1F1B, trainer/pipeline.h), each one's loss scaled by 1 / grad_accum; the
  // tied wte's gradient summed between the first and the last stage. The
  // last stage's *loss_sum is the step's loss on this data-parallel rank.
  Status PipelineForwardBackward(uint64_t cursor_now, double* loss_sum, double* wait_ms) {
    const int B = cfg.train.micro_batch;
    std::vector<torch::Tensor> idx, targets;
    for (int micro = 0; micro < accum; ++micro) {
      const uint64_t first = cursor_now + (static_cast<uint64_t>(micro) * world() + rank()) * B;
      HF_ASSIGN_OR_RETURN(auto batch, objective->LmBatch(first, B));
      idx.push_back(std::move(batch.first));
      targets.push_back(std::move(batch.second));
    }
    progress->SetPhase(Phase::kForward);
    HF_ASSIGN_OR_RETURN(PipelineStepResult r,
                        RunPipelineStep(*stage, *pp_comm, idx, targets, 1.0 / static_cast<double>(accum)));
    *loss_sum = r.loss;
    *wait_ms += r.wait_ms;
    return SyncTiedEmbeddingGrad(*stage, *pp_comm);
  }

  Status Update(double lr, double grad_scale) {
    const OptimConfig& o = cfg.optim;
    AdamWStep a;
    a.lr = lr;
    a.beta1 = o.beta1;
    a.beta2 = o.beta2;
    a.eps = o.eps;
    a.weight_decay = o.weight_decay;
    a.step = step + 1;
    a.grad_scale = grad_scale;
    if (cuda) {
      // The copies of a checkpoint staged last step finish before the update
      // overwrites what they read (a device-side wait; the host goes on).
      if (stager != nullptr) HF_RETURN_IF_ERROR(stager->FenceBeforeUpdate().WithContext("checkpoint staging fence"));
    }
    if (zero) return UpdateOwnSliceAndGather(a);
    if (cuda) {
      return gpu::ApplyAdamWOnDevice(a, decay_runs, flat_params.numel(), flat_grads.data_ptr<float>(),
                                     flat_params.data_ptr<float>(), exp_avg.data_ptr<float>(),
                                     exp_avg_sq.data_ptr<float>(), grad_norm.data_ptr<double>(), cfg.optim.grad_clip);
    }
    ApplyAdamW(a, decay_runs, flat_params.numel(), flat_grads.data_ptr<float>(), flat_params.data_ptr<float>(),
               exp_avg.data_ptr<float>(), exp_avg_sq.data_ptr<float>());
    return Status::Ok();
  }

  // ZeRO-1: updates this rank's slice bucket by bucket, launching each
  // bucket's allgather as soon as its part is updated (the gather of one
  // overlaps the update of the next). Every rank issues one allgather per
  // bucket, in bucket order, its own part empty or not. The arithmetic per
  // element is ApplyAdamW's, so a slice updates exactly as the whole would.
  Status UpdateOwnSliceAndGather(const AdamWStep& a) {
    float* params = flat_params.data_ptr<float>();
    const float* grads = flat_grads.data_ptr<float>();
    for (Bucket& b : buckets) {
      const int64_t n = b.own_hi - b.own_lo;
      if (n > 0) {
        const int64_t mom = b.own_lo - own_begin;
        float* m1 = exp_avg.data_ptr<float>() + mom;
        float* m2 = exp_avg_sq.data_ptr<float>() + mom;
        if (cuda) {
          HF_RETURN_IF_ERROR(gpu::ApplyAdamWOnDevice(a, b.own_decay_runs, n, grads + b.own_lo, params + b.own_lo, m1,
                                                     m2, grad_norm.data_ptr<double>(), cfg.optim.grad_clip));
        } else {
          ApplyAdamW(a, b.own_decay_runs, n, grads + b.own_lo, params + b.own_lo, m1, m2);
        }
      }
      if (experts_sharded) {
        if (edp_comm != nullptr) b.gather = edp_comm->AllgatherAsync(params + b.offset, b.parts);
      } else {
        b.gather = comm->AllgatherAsync(params + b.offset, b.parts);
      }
    }
    return Status::Ok();
  }

  // Waits for the parameter allgathers (a GPU queues the wait on the device);
  // the time waited is added to *wait_ms.
  Status FinishParamGather(double* wait_ms) {
    const auto t0 = Clock::now();
    Status first;
    for (Bucket& b : buckets) {
      if (b.gather == nullptr) continue;
      Status s = cuda ? b.gather->WaitOnDevice() : b.gather->Wait();
      b.gather.reset();
      if (!s.ok() && first.ok()) first = s;
    }
    *wait_ms += MsSince(t0);
    return first.WithContext("parameter allgather");
  }

  // Sums (kSum) or averages (kAvg) doubles over the ranks; on a GPU through
  // device memory (NCCL reduces nothing else). Every rank must call it alike.
  Status AllreduceDoubles(std::vector<double>* values, ReduceOp op, const char* what) {
    if (world() == 1 || values->empty()) return Status::Ok();
    const int64_t n = static_cast<int64_t>(values->size());
    torch::Tensor buf = torch::from_blob(values->data(), {n}, torch::kFloat64);
    if (cuda) buf = buf.to(device);
    HF_RETURN_IF_ERROR(comm->AllreduceDoubles(buf.data_ptr<double>(), values->size(), ReduceOp::kSum).WithContext(what));
    if (cuda) std::memcpy(values->data(), buf.to(torch::kCPU).data_ptr<double>(), values->size() * sizeof(double));
    if (op == ReduceOp::kAvg) {
      for (double& v : *values) v /= world();
    }
    return Status::Ok();
  }

  Result<StepMetrics> Step(StepRequests requests) {
    const auto t0 = Clock::now();
    const int B = cfg.train.micro_batch;
    StepMetrics m;
    double loss_sum = 0;
    torch::Tensor loss_dev;  // GPU: the step's loss summed on the device (read once, at the end)
    progress->BeginStep();
    HF_RETURN_IF_ERROR(objective->BeginStep(step, cursor).WithContext(std::string(objective->name()) + " objective"));
    flat_grads.zero_();
    if (stage) HF_RETURN_IF_ERROR(PipelineForwardBackward(cursor, &loss_sum, &m.comm_wait_ms));
    for (int micro = 0; micro < (stage ? 0 : accum); ++micro) {
      if (micro > 0) progress->SetPhase(Phase::kData);
      const uint64_t first = cursor + (static_cast<uint64_t>(micro) * world() + rank()) * B;
      syncing = world() > 1 && cfg.dist.overlap && micro == accum - 1;
      if (syncing) {
        next_launch = 0;
        for (Bucket& b : buckets) b.pending = b.total;
      }
      progress->SetPhase(Phase::kForward);
      auto loss = objective->MicroLoss(model, first, B);  // loads the batch, then forward
      if (accum > 1) loss = loss / accum;
      progress->SetPhase(Phase::kBackward);
      loss.backward();
      if (cuda) {
        loss_dev = loss_dev.defined() ? loss_dev + loss.detach().to(torch::kFloat64) : loss.detach().to(torch::kFloat64);
      } else {
        loss_sum += loss.item<double>();
      }
      syncing = false;
    }
    if (world() > 1) {
      if (!cfg.dist.overlap || stage) {  // a pipeline's buckets go after its last backward
        next_launch = 0;
        for (Bucket& b : buckets) b.pending = 0;
      }
      HF_RETURN_IF_ERROR(FinishGradSync(&m.comm_wait_ms));
    }
    if (zero) {
      HF_RETURN_IF_ERROR(ReduceStepTotals(&loss_sum, loss_dev, requests, &m));
    } else if (world() > 1) {
      float shared[3] = {static_cast<float>(loss_sum), requests.stop ? 1.0f : 0.0f, requests.checkpoint ? 1.0f : 0.0f};
      float* reduce = shared;
      if (cuda) {
        // NCCL reduces device memory: the loss joins the requests there.
        shared_dev.copy_(torch::from_blob(shared, {3}, torch::kFloat32));
        shared_dev.narrow(0, 0, 1).copy_(loss_dev.to(torch::kFloat32).view({1}));
        reduce = shared_dev.data_ptr<float>();
      }
      // On a GPU its completion is also where the gradient buckets are recorded done.
      HF_RETURN_IF_ERROR(comm->Allreduce(reduce, 3, ReduceOp::kAvg).WithContext("loss allreduce"));
      if (cuda) {
        auto host = shared_dev.to(torch::kCPU);
        std::memcpy(shared, host.data_ptr<float>(), sizeof(shared));
      }
      loss_sum = shared[0];
      m.stop = shared[1] > 0;
      m.checkpoint = shared[2] > 0;
    } else {
      if (cuda) loss_sum = loss_dev.item<double>();
      m.stop = requests.stop;
      m.checkpoint = requests.checkpoint;
    }
    // The objective's own metrics (DPO's rewards): one more allreduce, only
    // when it has any, so the lm step issues exactly the collectives it did.
    if (!objective->StepMetricNames().empty()) {
      std::vector<double> extra = objective->TakeStepMetrics();
      HF_RETURN_IF_ERROR(AllreduceDoubles(&extra, ReduceOp::kAvg, "step metrics allreduce"));
      const std::vector<std::string> names = objective->StepMetricNames();
      for (size_t i = 0; i < names.size() && i < extra.size(); ++i) m.extra.emplace_back(names[i], extra[i]);
    }
    progress->SetPhase(Phase::kOptimizer);
    double grad_scale = 1.0;
    {
      torch::NoGradGuard no_grad;
      // The global norm summed in float64 (adamw.h: a float32 norm of the flat
      // buffer drifts by ~1e-4 at 10M elements). clip_grad_norm_'s coefficient,
      // max_norm / (norm + 1e-6) clamped to 1, is applied by the update as it
      // reads each gradient (no extra pass); on a GPU the kernel reads the norm
      // from device memory.
      if (zero) {
        grad_scale = cuda ? 1.0 : ClipCoefficient(m.grad_norm, cfg.optim.grad_clip);  // ReduceStepTotals
      } else if (cuda) {
        grad_norm.copy_(torch::linalg_vector_norm(flat_grads, 2, c10::nullopt, false, torch::kFloat64).view({1}));
      } else if (tp_comm || pp_comm || experts_sharded) {
        const auto [split_sq, replicated_sq] = SplitSumsOfSquares(0, flat_grads.numel());
        if (tp_comm) {
          HF_RETURN_IF_ERROR(ReduceOverTensorGroup(split_sq, replicated_sq, &m));
        } else if (experts_sharded) {
          HF_RETURN_IF_ERROR(ReduceSplitOver(*ep_comm, split_sq, replicated_sq, &m, "expert-parallel gradient norm"));
        } else {
          m.grad_norm = std::sqrt(split_sq + replicated_sq);
        }
        if (pp_comm) HF_RETURN_IF_ERROR(ReduceOverPipeline(&loss_sum, &m));
        grad_scale = ClipCoefficient(m.grad_norm, cfg.optim.grad_clip);
      } else {
        m.grad_norm = std::sqrt(SumOfSquares(flat_grads.data_ptr<float>(), flat_grads.numel()));
        grad_scale = ClipCoefficient(m.grad_norm, cfg.optim.grad_clip);
      }
    }
    const double lr = LearningRateAt(cfg.optim, cfg.train.steps, step);
    // The host fence of the checkpoint writer (it copies the flat buffers after
    // Save returns). On a GPU the writer reads pinned memory the update never
    // touches: the device-side fence in Update is enough, and StateViews
    // waits for the writer instead, before it reuses the pinned buffer.
    if (before_update && !cuda) before_update();
    HF_RETURN_IF_ERROR(Update(lr, grad_scale).WithContext("optimizer update"));
    if (zero) HF_RETURN_IF_ERROR(FinishParamGather(&m.comm_wait_ms));
    if (cuda) m.grad_norm = grad_norm.item<double>();
    cursor += static_cast<uint64_t>(B) * accum * world();
    step += 1;
    progress->EndStep(step);
    m.step = step;
    m.loss = loss_sum;
    m.lr = lr;
    m.step_ms = MsSince(t0);
    const double tokens = static_cast<double>(B) * accum * world() * static_cast<double>(objective->TokensPerSample());
    m.tokens_per_s = tokens / (m.step_ms / 1000.0);
    return m;
  }

  Result<EvalResult> Evaluate() {
    if (!objective->HasEval() || objective->EvalSize() == 0) {
      return FailedPreconditionError(std::string("the ") + objective->name() +
                                     " objective has no held-out data to evaluate on: set eval.holdout");
    }
    const auto t0 = Clock::now();
    progress->SetPhase(Phase::kEval);
    uint64_t limit = objective->EvalSize();
    if (cfg.eval.samples > 0) limit = std::min<uint64_t>(limit, static_cast<uint64_t>(cfg.eval.samples));
    // The objective splits the held-out samples among the ranks; the sums
    // meet in one allreduce that every rank issues (one with no share too).
    std::vector<double> sums;
    {
      torch::NoGradGuard no_grad;
      trained().eval();  // no dropout: evaluation draws nothing from the generators
      // A pipeline: each batch through the stages, the last one's sums (the others' are 0).
      // Expert parallel: the ranks of an ep group run their experts over
      // each other's tokens, so they evaluate the same batches (the same
      // count and shapes; the expert-data group splits the samples) and
      // only ep rank 0's sums count.
      const int share = ep_comm ? rank() / ep_size() : rank();
      const int shares = ep_comm ? world() / ep_size() : world();
      Result<std::vector<double>> part =
          stage ? objective->EvalPartialOf(
                      [this](const torch::Tensor& idx) { return PipelineForward(*stage, *pp_comm, idx); }, rank(),
                      world(), limit)
                : objective->EvalPartial(model, share, shares, limit);
      trained().train();
      if (!part.ok()) return part.status();
      sums = std::move(part).value();
      if (ep_rank() != 0) std::fill(sums.begin(), sums.end(), 0.0);
    }
    if (sums.size() != objective->EvalSumCount()) {
      return InternalError("objective returned " + std::to_string(sums.size()) + " eval sums, expected " +
                           std::to_string(objective->EvalSumCount()));
    }
    HF_RETURN_IF_ERROR(AllreduceDoubles(&sums, ReduceOp::kSum, "eval allreduce"));
    if (pp_comm) {
      HF_RETURN_IF_ERROR(pp_comm->AllreduceDoubles(sums.data(), sums.size(), ReduceOp::kSum)
                             .WithContext("eval allreduce over the pipeline"));
    }
    EvalResult r;
    r.step = step;
    r.samples = limit;
    r.metrics = objective->EvalMetrics(sums);
    r.ms = MsSince(t0);
    eval_step = step;
    eval_metrics = r.metrics;
    progress->SetPhase(Phase::kData);
    return r;
  }

  DeterminismFingerprint Fingerprint() const {
    DeterminismFingerprint f;
    f.torch_version = TORCH_VERSION;
    f.blas = LoadedBlas();
    f.threads = at::get_num_threads();
    f.world_size = world();
    f.grad_accum = accum;
    f.bucket_bytes = world() > 1 ? bucket_bytes : 0;
    f.backend = world() > 1 ? comm->backend() : "none";
    f.zero_stage = zero ? cfg.dist.zero_stage : 0;
    f.device = device_text;
    return f;
  }

  nlohmann::json Layout() const {
    nlohmann::json layout = nlohmann::json::array();
    for (const Slot& s : slots) {
      layout.push_back({{"name", s.name}, {"shape", s.shape}, {"offset", s.offset}, {"numel", s.numel}});
    }
    return layout;
  }
};

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trainer::~Trainer() = default;

Result<std::unique_ptr<Trainer>> Trainer::Create(const TrainerConfig& config, std::unique_ptr<Communicator> comm,
                                                  const DevicePlacement& placement) {
  if (comm == nullptr) return InvalidArgumentError("Trainer::Create: no communicator");
  TrainerComms comms;
  comms.rank = comm->rank();
  comms.world_size = comm->world_size();
  comms.data = std::move(comm);
  return Create(config, std::move(comms), placement);
}

namespace {

// The groups of TrainerComms make up the world as common/mesh.h lays it out.
Status CheckTrainerComms(const TrainerConfig& config, const TrainerComms& c, const DevicePlacement& placement) {
  const int tp = config.dist.tensor_parallel, pp = config.dist.pipeline_parallel;
  if (c.data == nullptr) return InvalidArgumentError("Trainer::Create: no data-parallel communicator");
  const int ep = config.dist.expert_parallel;
  if (ep > 1 && (c.expert == nullptr || c.expert->world_size() != ep)) {
    return InvalidArgumentError("Trainer::Create: dist.expert_parallel = " + std::to_string(ep) +
                                " but the expert-parallel group has " +
                                (c.expert == nullptr ? std::string("no communicator")
                                                     : std::to_string(c.expert->world_size()) + " ranks"));
  }
  if (ep > 1) {
    const int edp = c.data->world_size() / ep;
    const int have = c.expert_data ? c.expert_data->world_size() : 1;
    if (have != edp || (c.expert_data && c.expert_data->rank() != c.data->rank() / ep)) {
      return InvalidArgumentError("Trainer::Create: the expert-data group (the data-parallel ranks holding the same "
                                  "experts) has " + std::to_string(have) + " ranks, the mesh makes it " +
                                  std::to_string(edp));
    }
  }
  if (tp == 1 && pp == 1) {
    if (c.data->world_size() != c.world_size || c.data->rank() != c.rank) {
      return InvalidArgumentError("Trainer::Create: without model parallelism the data-parallel group is the world");
    }
    return Status::Ok();
  }
  auto check_group = [](const char* key, int size, const std::unique_ptr<Communicator>& g,
                        const char* what) -> Status {
    if (size == 1 || (g != nullptr && g->world_size() == size)) return Status::Ok();
    return InvalidArgumentError(std::string(key) + " = " + std::to_string(size) + " but the " + what + " has " +
                                (g == nullptr ? std::string("no communicator") : std::to_string(g->world_size()) +
                                                                                     " ranks"));
  };
  HF_RETURN_IF_ERROR(check_group("dist.tensor_parallel", tp, c.tensor, "tensor-parallel group"));
  HF_RETURN_IF_ERROR(check_group("dist.pipeline_parallel", pp, c.pipeline, "pipeline"));
  const int tp_rank = tp > 1 ? c.tensor->rank() : 0, pp_rank = pp > 1 ? c.pipeline->rank() : 0;
  const int dp = c.data->world_size();
  if (dp * tp * pp != c.world_size || tp_rank + tp * (c.data->rank() + dp * pp_rank) != c.rank) {
    return InvalidArgumentError("rank " + std::to_string(c.rank) + " of " + std::to_string(c.world_size) +
                                ": its groups (tp rank " + std::to_string(tp_rank) + ", dp rank " +
                                std::to_string(c.data->rank()) + " of " + std::to_string(dp) + ", pp stage " +
                                std::to_string(pp_rank) + ") do not lay out the world as rank = tp + TP x (dp + DP x pp)");
  }
  if (placement.cuda) {
    return InvalidArgumentError("tensor and pipeline parallelism run on the CPU for now: set train.device = \"cpu\"");
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Trainer>> Trainer::Create(const TrainerConfig& config, TrainerComms comms,
                                                  const DevicePlacement& placement) {
  HF_RETURN_IF_ERROR(CheckTrainerComms(config, comms, placement));
  auto impl = std::make_unique<Impl>();
  impl->cfg = config;
  // Each group's collectives are recorded as its own (the progress record
  // numbers them per group; a send/recv names its peers as global ranks).
  HF_ASSIGN_OR_RETURN(DeviceMesh mesh,
                      DeviceMesh::Create(comms.world_size, MeshShape{config.dist.tensor_parallel,
                                                                     config.dist.pipeline_parallel,
                                                                     config.dist.expert_parallel}));
  auto recorded = [&](MeshGroup group) {
    return RecordedGroup{CollectiveGroupOf(group), mesh.GroupOf(group, comms.rank)};
  };
  impl->comm = std::make_unique<ProgressCommunicator>(std::move(comms.data), NoProgress(),
                                                      recorded(MeshGroup::kData));
  if (config.dist.tensor_parallel > 1) {
    impl->tp_comm = std::make_unique<ProgressCommunicator>(std::move(comms.tensor), NoProgress(),
                                                           recorded(MeshGroup::kTensor));
  }
  if (config.dist.pipeline_parallel > 1) {
    impl->pp_comm = std::make_unique<ProgressCommunicator>(std::move(comms.pipeline), NoProgress(),
                                                           recorded(MeshGroup::kPipeline));
  }
  if (config.dist.expert_parallel > 1) {
    impl->ep_comm = std::make_unique<ProgressCommunicator>(std::move(comms.expert), NoProgress(),
                                                           recorded(MeshGroup::kExpert));
    impl->experts_sharded = true;
    if (comms.expert_data != nullptr) {
      impl->edp_comm = std::make_unique<ProgressCommunicator>(std::move(comms.expert_data), NoProgress(),
                                                              recorded(MeshGroup::kExpertData));
    }
  }
  impl->global_rank = comms.rank;
  impl->global_world = comms.world_size;
  impl->placement = placement;
  impl->accum = config.train.grad_accum;
  if (placement.cuda) {
    impl->cuda = true;
    impl->device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(placement.ordinal));
    HF_RETURN_IF_ERROR(gpu::SetDevice(placement.ordinal).WithContext("placing rank " +
                                                                     std::to_string(impl->rank()) + " on " +
                                                                     placement.Name()));
    HF_ASSIGN_OR_RETURN(gpu::DeviceInfo info, gpu::QueryDevice(placement.ordinal));
    impl->device_text = info.Describe();
    // Bit-exact resume on the same GPU: cuBLAS's deterministic workspace (must
    // be set before its first handle), LibTorch's deterministic kernels (a
    // warning names any op without one), no cuDNN autotuning.
    setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
    at::globalContext().setBenchmarkCuDNN(false);
    at::globalContext().setDeterministicCuDNN(true);
    HF_ASSIGN_OR_RETURN(std::unique_ptr<CopyEngine> engine, gpu::MakeCopyEngine(placement.ordinal));
    impl->stager = std::make_unique<DeviceStager>(std::move(engine));
  }
  const bool grpo = config.train.objective == "grpo";  // fed by rollout workers: no data file
  Result<DataFormat> format = ParseDataFormat(config.data.format);
  if (!format.ok()) return format.status();
  DataOptions dopt;
  dopt.format = *format;
  dopt.path = config.data.path;
  dopt.block_size = config.model.block_size;
  dopt.vocab_size = config.model.vocab_size;
  dopt.seed = config.train.seed;
  dopt.holdout = config.eval.holdout;
  if (!grpo) {
    Result<std::unique_ptr<Dataset>> data = Dataset::Open(dopt);
    if (!data.ok()) return data.status();
    impl->data = std::move(data).value();
  }
  try {
    torch::manual_seed(config.train.seed);
    // Every expert initialised as one process does; with expert
    // parallelism the rank keeps its own (below).
    impl->model = Gpt(config.model, ComputeOptions{config.train.precision == "bf16"}, nullptr, false,
                      impl->ep_comm.get());
    impl->model->InitWeights();  // on the CPU generator: the same weights on every device
    // train.init_from replaces the initial weights (a resume then overwrites
    // them with the checkpoint's, like any initial weights).
    auto named_params = [](Gpt& m) {
      std::vector<std::pair<std::string, torch::Tensor>> out;
      for (auto& item : m->named_parameters()) out.emplace_back(item.key(), item.value());
      return out;
    };
    if (!config.train.init_from.empty()) {
      // A reward model may start from a language model's weights: its head
      // then keeps its initialisation.
      Result<std::string> loaded = LoadWeights(config.train.init_from, named_params(impl->model),
                                               config.model.reward_head ? "reward_head." : "");
      if (!loaded.ok()) return loaded.status().WithContext("train.init_from");
      if (impl->global_rank == 0) spdlog::info("initial weights: {}", *loaded);
    }
    if (impl->tp_comm != nullptr || impl->pp_comm != nullptr || impl->experts_sharded) {
      for (auto& item : impl->model->named_parameters()) {
        impl->full_order.push_back(item.key());
        impl->full_shapes[item.key()] = item.value().sizes().vec();
      }
    }
    if (impl->pp_comm != nullptr) {
      // This rank's stage (its part of it over the tp group) of the whole
      // model, initialised as one process would; the whole model goes.
      HF_ASSIGN_OR_RETURN(std::shared_ptr<GptStageImpl> stage,
                          GptStageImpl::Create(config.model, impl->pp_rank(), impl->pp_size(), impl->tp_comm.get(),
                                               config.dist.sequence_parallel));
      HF_RETURN_IF_ERROR(stage->LoadFromFull(*impl->model).WithContext("cutting the model into pipeline stages"));
      impl->stage = GptStage(stage);
      impl->model = Gpt(nullptr);
    } else if (impl->tp_comm != nullptr) {
      // This rank's part of the whole model, initialised as one process would.
      Gpt split(config.model, ComputeOptions{config.train.precision == "bf16"}, impl->tp_comm.get(),
                config.dist.sequence_parallel);
      HF_RETURN_IF_ERROR(split->LoadFromFull(*impl->model).WithContext("splitting the model over the tp group"));
      impl->model = split;
    } else if (impl->experts_sharded) {
      // This rank's experts (and every other parameter) of the whole model.
      Gpt mine(config.model, ComputeOptions{config.train.precision == "bf16"}, nullptr, false, impl->ep_comm.get(),
               /*hold_every_expert=*/false);
      HF_RETURN_IF_ERROR(mine->LoadFromFull(*impl->model).WithContext("spreading the experts over the ep group"));
      impl->model = mine;
    }
    impl->trained().to(impl->device);
    impl->trained().train();
    ObjectiveEnv env;
    env.config = &impl->cfg;
    env.data = impl->data.get();
    env.device = impl->device;
    env.cuda = impl->cuda;
    if (config.train.objective == "dpo" || grpo) {
      // The frozen reference: its own weights, or the policy's initial ones.
      // Built before the dropout streams are seeded (module constructors draw).
      Gpt reference(config.model, ComputeOptions{config.train.precision == "bf16"});
      reference->to(impl->device);
      const std::string ref_path = ReferenceWeights(config);
      if (ref_path.empty()) {
        torch::NoGradGuard no_grad;
        auto src = named_params(impl->model);
        auto dst = named_params(reference);
        for (size_t i = 0; i < src.size(); ++i) dst[i].second.copy_(src[i].second);
        if (impl->rank() == 0) spdlog::info("{} reference: the policy's initial weights (train.seed)", grpo ? "GRPO" : "DPO");
      } else {
        Result<std::string> loaded = LoadWeights(ref_path, named_params(reference));
        if (!loaded.ok()) return loaded.status().WithContext(std::string(grpo ? "GRPO" : "DPO") + " reference (dpo.reference or train.init_from)");
        if (impl->rank() == 0) spdlog::info("{} reference: {}", grpo ? "GRPO" : "DPO", *loaded);
      }
      if (grpo) {
        // The policy the objective publishes to the rollout workers is this model.
        Result<std::unique_ptr<Objective>> rl =
            rl::MakeGrpoObjective(env, impl->comm->unrecorded(), impl->model, std::move(reference));
        if (!rl.ok()) return rl.status();
        impl->objective = std::move(rl).value();
      } else {
        impl->objective = MakeDpoObjective(env, std::move(reference));
      }
    } else if (config.train.objective == "reward") {
      impl->objective = MakeRewardModelObjective(env);
    } else {
      impl->objective = MakeLmObjective(env);
    }
    impl->BuildFlatLayout();
    // Dropout draws from here on: a stream per rank (CPU and CUDA generators alike).
    // Seeded by the data-parallel rank: the ranks of a tensor-parallel group
    // draw the same stream, the whole tensors' dropout noise as one process
    // of that data-parallel rank does (trainer/tensor_parallel.h). Without
    // model parallelism the data-parallel rank is the world rank.
    torch::manual_seed(config.train.seed * 1000003ULL + 1 + static_cast<uint64_t>(impl->rank()));
    if (impl->cuda) {
      impl->grad_norm = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat64).device(impl->device));
      impl->shared_dev = torch::zeros({3}, torch::TensorOptions().dtype(torch::kFloat32).device(impl->device));
      impl->totals_dev = torch::zeros({4}, torch::TensorOptions().dtype(torch::kFloat64).device(impl->device));
    }
  } catch (const std::exception& e) {
    return TorchError("building the model", e);
  }
  return std::unique_ptr<Trainer>(new Trainer(std::move(impl)));
}

Result<StepMetrics> Trainer::Step(StepRequests requests) {
  try {
    return impl_->Step(requests);
  } catch (const std::exception& e) {
    return TorchError("training step " + std::to_string(impl_->step + 1), e);
  }
}

Result<EvalResult> Trainer::Evaluate() {
  try {
    return impl_->Evaluate();
  } catch (const std::exception& e) {
    impl_->trained().train();
    return TorchError("evaluation after step " + std::to_string(impl_->step), e);
  }
}

std::map<std::string, double> Trainer::LatestEvalMetrics() const {
  std::map<std::string, double> out = impl_->eval_metrics;
  if (impl_->eval_step >= 0) out["eval_step"] = static_cast<double>(impl_->eval_step);
  return out;
}

void Trainer::SetProgressSink(ProgressSink& progress) {
  impl_->progress = &progress;
  progress.SetMesh(impl_->cfg.dist.tensor_parallel, impl_->cfg.dist.pipeline_parallel,
                   impl_->cfg.dist.expert_parallel);
  impl_->comm->SetProgressSink(progress);
  if (impl_->tp_comm != nullptr) impl_->tp_comm->SetProgressSink(progress);
  if (impl_->pp_comm != nullptr) impl_->pp_comm->SetProgressSink(progress);
  if (impl_->ep_comm != nullptr) impl_->ep_comm->SetProgressSink(progress);
  if (impl_->edp_comm != nullptr) impl_->edp_comm->SetProgressSink(progress);
}
void Trainer::SetBeforeUpdateHook(std::function<void()> hook) { impl_->before_update = std::move(hook); }
void Trainer::SetInterruptCheck(std::function<bool()> check) { impl_->objective->SetInterruptCheck(std::move(check)); }
int64_t Trainer::step() const { return impl_->step; }
int Trainer::rank() const { return impl_->global_rank; }
int Trainer::world_size() const { return impl_->global_world; }
int Trainer::tensor_parallel() const { return impl_->tp_size(); }
int Trainer::tensor_rank() const { return impl_->tp_rank(); }
int Trainer::pipeline_parallel() const { return impl_->pp_size(); }
int Trainer::pipeline_stage() const { return impl_->pp_rank(); }
int Trainer::expert_parallel() const { return impl_->ep_size(); }
int Trainer::expert_rank() const { return impl_->ep_rank(); }
const TrainerConfig& Trainer::config() const { return impl_->cfg; }
DeterminismFingerprint Trainer::Fingerprint() const { return impl_->Fingerprint(); }
int64_t Trainer::num_params() const { return impl_->flat_params.numel(); }
int64_t Trainer::optimizer_state_bytes() const {
  return (impl_->exp_avg.numel() + impl_->exp_avg_sq.numel()) * static_cast<int64_t>(sizeof(float));
}
int Trainer::grad_accum() const { return impl_->accum; }
int Trainer::zero_stage() const { return impl_->zero ? impl_->cfg.dist.zero_stage : 0; }

uint64_t Trainer::ParamsHash() const {
  const torch::Tensor host = impl_->flat_params.to(torch::kCPU);
  return XXH3_64bits(host.data_ptr<float>(), host.numel() * sizeof(float));
}

namespace {
StateView ViewOf(const char* name, const torch::Tensor& t) {
  return {name, static_cast<const uint8_t*>(t.data_ptr()), static_cast<size_t>(t.numel() * t.element_size())};
}
// Copies host bytes into (part of) a tensor on any device.
void CopyHostBytes(const torch::Tensor& dst, const void* src) {
  if (dst.is_cpu()) {
    std::memcpy(dst.data_ptr(), src, static_cast<size_t>(dst.numel() * dst.element_size()));
    return;
  }
  dst.copy_(torch::from_blob(const_cast<void*>(src), dst.sizes(), dst.options().device(torch::kCPU)));
}
// A view whose data is null is a buffer the restore did not read from the
// checkpoint (BuffersToRestore left it out); using it is a bug, not damage.
Status NeedBytes(const StateView* v, const std::string& source) {
  if (v != nullptr && v->data == nullptr && v->size > 0) {
    return InternalError(source + ": buffer '" + v->name + "' was not read from the checkpoint");
  }
  return Status::Ok();
}

Status CopyInto(const StateView* v, const torch::Tensor& t, const char* name) {
  if (v == nullptr) return CorruptionError(std::string("state has no '") + name + "' buffer");
  HF_RETURN_IF_ERROR(NeedBytes(v, "state"));
  const size_t want = static_cast<size_t>(t.numel() * t.element_size());
  if (v->size != want) {
    return CorruptionError(std::string("state buffer '") + name + "' has " + std::to_string(v->size) +
                           " bytes, the model needs " + std::to_string(want));
  }
  CopyHostBytes(t, v->data);
  return Status::Ok();
}
}  // namespace

std::string Trainer::Layout() const {
  Result<DeviceMesh> mesh =
      DeviceMesh::Create(impl_->global_world, MeshShape{impl_->tp_size(), impl_->pp_size(), impl_->ep_size()});
  return mesh.ok() ? mesh->Layout() : "dp=" + std::to_string(impl_->world());  // Create checked the groups
}
std::string Trainer::ConfigHashHex() const { return Hex(ConfigHash(impl_->cfg)); }

namespace {
// The replicated buffers each rank saves a slice of (float32, one layout).
constexpr const char* kSlicedBuffers[] = {"params", "optim.exp_avg", "optim.exp_avg_sq"};
constexpr int64_t kSlicedElementSize = 4;

// Elements [offset, offset + count) of the flat buffers, which hold total.
struct StateSlice {
  int64_t offset = 0;
  int64_t count = 0;
  int64_t total = 0;
};

constexpr const char* kWhatToDo =
    "; the checkpoint cannot be assembled: resume from another one (an earlier step, --from-step) or "
    "move this step folder away";

Result<nlohmann::json> ParseMeta(const SavedShard& shard) {
  const StateView* meta_buf = FindView(shard.views, "meta");
  if (meta_buf == nullptr) return CorruptionError(shard.source + ": state has no 'meta' buffer");
  HF_RETURN_IF_ERROR(NeedBytes(meta_buf, shard.source));
  nlohmann::json meta = nlohmann::json::parse(meta_buf->data, meta_buf->data + meta_buf->size, nullptr, false);
  if (meta.is_discarded() || !meta.is_object()) {
    return CorruptionError(shard.source + ": state 'meta' is not valid JSON");
  }
  return meta;
}

// The shard's slice, or nullopt for a v1 state (a full replica, no slice).
Result<std::optional<StateSlice>> ReadSlice(const SavedShard& shard) {
  HF_ASSIGN_OR_RETURN(nlohmann::json meta, ParseMeta(shard));
  const std::string format = meta.value("format", "");
  if (format == kStateFormatV1) return std::optional<StateSlice>();
  if (format != kStateFormat) {
    return CorruptionError(shard.source + ": state format is '" + format + "', expected " + kStateFormat + " or " +
                           kStateFormatV1);
  }
  StateSlice slice;
  try {
    const auto& j = meta.at("slice");
    slice.offset = j.at("offset").get<int64_t>();
    slice.count = j.at("count").get<int64_t>();
    slice.total = j.at("total").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    return CorruptionError(shard.source + ": state 'meta' has no valid 'slice' {offset, count, total}: " + e.what());
  }
  if (slice.offset < 0 || slice.count < 0 || slice.total < 0 ||
      slice.total > std::numeric_limits<int64_t>::max() / kSlicedElementSize || slice.offset > slice.total ||
      slice.count > slice.total - slice.offset) {
    return CorruptionError(shard.source + ": slice offset " + std::to_string(slice.offset) + " count " +
                           std::to_string(slice.count) + " does not fit in total " + std::to_string(slice.total) +
                           kWhatToDo);
  }
  for (const char* name : kSlicedBuffers) {
    const StateView* v = FindView(shard.views, name);
    if (v == nullptr) return CorruptionError(shard.source + ": state has no '" + name + "' buffer");
    if (v->size != static_cast<size_t>(slice.count * kSlicedElementSize)) {
      return CorruptionError(shard.source + ": buffer '" + name + "' has " + std::to_string(v->size) +
                             " bytes, its slice of " + std::to_string(slice.count) + " floats needs " +
                             std::to_string(slice.count * kSlicedElementSize) + kWhatToDo);
    }
  }
  return std::optional<StateSlice>(slice);
}

std::string Range(int64_t begin, int64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

// Every shard's slice (all present), or all nullopt for a v1 checkpoint.
Result<std::vector<std::optional<StateSlice>>> CheckedSlices(const std::vector<SavedShard>& shards) {
  if (shards.empty()) return InvalidArgumentError("no saved state to restore from");
  std::vector<std::optional<StateSlice>> slices;
  for (const SavedShard& s : shards) {
    HF_ASSIGN_OR_RETURN(std::optional<StateSlice> slice, ReadSlice(s));
    slices.push_back(slice);
  }
  size_t first_v1 = shards.size(), first_sliced = shards.size();
  for (size_t i = 0; i < slices.size(); ++i) {
    size_t& first = slices[i] ? first_sliced : first_v1;
    first = std::min(first, i);
  }
  if (first_sliced == shards.size()) return slices;  // v1: every shard a full replica
  if (first_v1 < shards.size()) {
    return CorruptionError(shards[first_v1].source + " holds a full replica (state " + kStateFormatV1 + ") but " +
                           shards[first_sliced].source + " holds a slice (" + kStateFormat + ")" + kWhatToDo);
  }
  const int64_t total = slices[0]->total;
  for (size_t i = 1; i < slices.size(); ++i) {
    if (slices[i]->total != total) {
      return CorruptionError(shards[i].source + " says the flat buffers hold " + std::to_string(slices[i]->total) +
                             " elements, " + shards[0].source + " says " + std::to_string(total) + kWhatToDo);
    }
  }
  std::vector<size_t> order(slices.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return slices[a]->offset < slices[b]->offset; });
  int64_t covered = 0;  // [0, covered) is held by exactly one shard so far
  size_t prev = shards.size();
  for (size_t i : order) {
    const StateSlice& s = *slices[i];
    if (s.count == 0) continue;
    if (s.offset > covered) {
      return CorruptionError("no shard holds elements " + Range(covered, s.offset) + " of " + std::to_string(total) +
                             " (" + shards[i].source + " starts at " + std::to_string(s.offset) + ")" + kWhatToDo);
    }
    if (s.offset < covered) {
      return CorruptionError(shards[i].source + " holds elements " + Range(s.offset, s.offset + s.count) +
                             ", which overlap " + Range(slices[prev]->offset, covered) + " held by " +
                             shards[prev].source + kWhatToDo);
    }
    covered = s.offset + s.count;
    prev = i;
  }
  if (covered != total) {
    return CorruptionError("no shard holds elements " + Range(covered, total) + " of " + std::to_string(total) +
                           kWhatToDo);
  }
  return slices;
}

StateView SliceOf(const char* name, const torch::Tensor& t, int64_t begin, int64_t end) {
  return {name, static_cast<const uint8_t*>(t.data_ptr()) + begin * t.element_size(),
          static_cast<size_t>((end - begin) * t.element_size())};
}

// A layout key of a checkpoint's meta ("tensor_parallel": {"size", ...},
// "pipeline_parallel": {"size", ...}); absent = 1.
Result<int> SavedLayoutSize(const SavedShard& shard, const nlohmann::json& meta, const char* key) {
  if (!meta.contains(key)) return 1;
  const nlohmann::json& t = meta[key];
  if (!t.is_object() || !t.contains("size") || !t["size"].is_number_integer() || t["size"].get<int64_t>() < 1 ||
      t["size"].get<int64_t>() > 1024) {
    return CorruptionError(shard.source + ": state 'meta' has no valid '" + key + "' {size, ...}" + kWhatToDo);
  }
  return t["size"].get<int>();
}

// The saved shards (index = saved world rank) that hold this rank's
// parameters: those of its coordinate, saved ranks
// tp_rank + TP x (ep_rank + EP x j + DP x stage) (common/mesh.h: dp =
// ep_rank + EP x j) for j = 0, 1, ... in order, so that they tile its flat
// buffers as a data-parallel checkpoint's shards do. Nullopt when the
// checkpoint was saved with another dist.tensor_parallel,
// dist.pipeline_parallel or expert-sharded dist.expert_parallel (read from
// the first shard's meta; absent = 1): it is resharded through whole tensors
// (WholeTensors).
Result<std::optional<std::vector<size_t>>> ShardsOfCoordinate(const std::vector<SavedShard>& shards,
                                                              const Coordinate& c) {
  if (shards.empty()) return InvalidArgumentError("no saved state to restore from");
  HF_ASSIGN_OR_RETURN(nlohmann::json meta, ParseMeta(shards[0]));
  HF_ASSIGN_OR_RETURN(const int saved_tp, SavedLayoutSize(shards[0], meta, "tensor_parallel"));
  HF_ASSIGN_OR_RETURN(const int saved_pp, SavedLayoutSize(shards[0], meta, "pipeline_parallel"));
  HF_ASSIGN_OR_RETURN(const int saved_ep, SavedLayoutSize(shards[0], meta, "expert_parallel"));
  if (saved_tp != c.tp || saved_pp != c.pp || saved_ep != c.ep) return std::optional<std::vector<size_t>>();
  const size_t tp = static_cast<size_t>(c.tp), ep = static_cast<size_t>(c.ep);
  const size_t per_replica = tp * static_cast<size_t>(c.pp) * ep;
  if (shards.size() % per_replica != 0) {
    return CorruptionError("a checkpoint of dist.tensor_parallel = " + std::to_string(c.tp) +
                           " x dist.pipeline_parallel = " + std::to_string(c.pp) +
                           (c.ep > 1 ? " x dist.expert_parallel = " + std::to_string(c.ep) : std::string()) + " has " +
                           std::to_string(shards.size()) + " shards, not a multiple of " +
                           std::to_string(per_replica) + kWhatToDo);
  }
  const size_t dp = shards.size() / (tp * static_cast<size_t>(c.pp));
  std::vector<size_t> out;
  for (size_t j = 0; j < dp / ep; ++j) {
    const size_t d = static_cast<size_t>(c.ep_rank) + ep * j;
    out.push_back(static_cast<size_t>(c.tp_rank) + tp * (d + dp * static_cast<size_t>(c.stage)));
  }
  return std::optional<std::vector<size_t>>(out);
}

std::vector<SavedShard> Pick(const std::vector<SavedShard>& shards, const std::vector<size_t>& which) {
  std::vector<SavedShard> out;
  for (size_t i : which) out.push_back(shards[i]);
  return out;
}

// A saved shard's coordinate in its run's mesh.
Result<Coordinate> SavedPlaceOf(const SavedShard& shard, const nlohmann::json& meta) {
  Coordinate p;
  HF_ASSIGN_OR_RETURN(p.tp, SavedLayoutSize(shard, meta, "tensor_parallel"));
  HF_ASSIGN_OR_RETURN(p.pp, SavedLayoutSize(shard, meta, "pipeline_parallel"));
  HF_ASSIGN_OR_RETURN(p.ep, SavedLayoutSize(shard, meta, "expert_parallel"));
  if (p.tp > 1) p.tp_rank = meta["tensor_parallel"].value("rank", -1);
  if (p.pp > 1) p.stage = meta["pipeline_parallel"].value("stage", -1);
  if (p.ep > 1) p.ep_rank = meta["expert_parallel"].value("rank", -1);
  if (p.tp_rank < 0 || p.tp_rank >= p.tp || p.stage < 0 || p.stage >= p.pp || p.ep_rank < 0 || p.ep_rank >= p.ep) {
    return CorruptionError(shard.source + ": state 'meta' has no valid tensor-parallel rank, pipeline stage or " +
                           "expert-parallel rank" + kWhatToDo);
  }
  return p;
}

// Params, exp_avg, exp_avg_sq of one parameter.
using Moments3 = std::array<torch::Tensor, 3>;

// The whole model's parameters and AdamW moments (by global name), from a
// checkpoint of any model-parallel layout: each coordinate's (tp rank,
// stage, ep rank) flat buffers put together from its slices, cut into its
// parameters by its meta's layout, and the tensor-parallel parts of each
// split parameter joined (GptTensorParallelFullOf). A replicated parameter
// is taken from its first coordinate (the last stage's copy of the tied wte
// equals the first's; each ep rank's copy of the non-expert parameters).
Result<std::map<std::string, Moments3>> WholeTensors(const std::vector<SavedShard>& shards) {
  std::map<std::tuple<int, int, int>, std::vector<size_t>> coords;  // (stage, ep, tp rank) -> shards, saved order
  std::vector<nlohmann::json> metas;
  Coordinate first;
  for (size_t i = 0; i < shards.size(); ++i) {
    HF_ASSIGN_OR_RETURN(nlohmann::json meta, ParseMeta(shards[i]));
    HF_ASSIGN_OR_RETURN(Coordinate p, SavedPlaceOf(shards[i], meta));
    if (i == 0) first = p;
    if (p.tp != first.tp || p.pp != first.pp || p.ep != first.ep) {
      return CorruptionError(shards[i].source + " was saved by another layout than " + shards[0].source + kWhatToDo);
    }
    coords[{p.stage, p.ep_rank, p.tp_rank}].push_back(i);
    metas.push_back(std::move(meta));
  }
  if (coords.size() != static_cast<size_t>(first.tp) * static_cast<size_t>(first.pp) * static_cast<size_t>(first.ep)) {
    return CorruptionError("the checkpoint of dist.tensor_parallel = " + std::to_string(first.tp) +
                           " x dist.pipeline_parallel = " + std::to_string(first.pp) +
                           " x dist.expert_parallel = " + std::to_string(first.ep) + " holds " +
                           std::to_string(coords.size()) + " of its tensor-parallel ranks, stages and expert-" +
                           "parallel ranks" + kWhatToDo);
  }
  std::map<std::string, std::vector<Moments3>> parts;  // name -> its part on each tp rank
  for (const auto& [coord, which] : coords) {
    const std::vector<SavedShard> mine = Pick(shards, which);
    HF_ASSIGN_OR_RETURN(std::vector<std::optional<StateSlice>> slices, CheckedSlices(mine));
    if (!slices[0]) return FailedPreconditionError("a checkpoint of full replicas (" + std::string(kStateFormatV1) +
                                                   ") cannot be resharded between model-parallel layouts");
    const int64_t total = slices[0]->total;
    Moments3 flat;
    for (auto& t : flat) t = torch::empty({total}, torch::kFloat32);
    for (size_t j = 0; j < mine.size(); ++j) {
      const StateSlice& sl = *slices[j];
      if (sl.count == 0) continue;
      for (size_t b = 0; b < 3; ++b) {
        const StateView* v = FindView(mine[j].views, kSlicedBuffers[b]);
        HF_RETURN_IF_ERROR(NeedBytes(v, mine[j].source));
        CopyHostBytes(flat[b].narrow(0, sl.offset, sl.count), v->data);
      }
    }
    try {
      for (const nlohmann::json& slot : metas[which[0]].at("layout")) {
        const std::string name = slot.at("name").get<std::string>();
        const auto shape = slot.at("shape").get<std::vector<int64_t>>();
        const int64_t offset = slot.at("offset").get<int64_t>(), numel = slot.at("numel").get<int64_t>();
        int64_t n = 1;
        for (int64_t d : shape) n = d >= 0 && n <= (int64_t{1} << 40) ? n * d : -1;
        if (offset < 0 || numel < 0 || n != numel || offset > total - numel) {
          return CorruptionError(mine[0].source + ": parameter " + name + " does not fit its flat buffers" + kWhatToDo);
        }
        std::vector<Moments3>& v = parts[name];
        if (v.size() < static_cast<size_t>(first.tp)) v.resize(static_cast<size_t>(first.tp));
        Moments3& part = v[static_cast<size_t>(std::get<2>(coord))];
        if (part[0].defined()) continue;  // the last stage's copy of wte, another ep rank's copy
        for (size_t b = 0; b < 3; ++b) part[b] = flat[b].narrow(0, offset, numel).view(shape);
      }
    } catch (const nlohmann::json::exception& e) {
      return CorruptionError(mine[0].source + ": state 'meta' has no valid 'layout': " + e.what() + kWhatToDo);
    }
  }
  std::map<std::string, Moments3> whole;
  for (auto& [name, v] : parts) {
    Moments3 w;
    for (size_t b = 0; b < 3; ++b) {
      std::vector<torch::Tensor> pieces;
      for (size_t r = 0; r < v.size(); ++r) {
        if (!v[r][b].defined()) {
          return CorruptionError("no shard of tensor-parallel rank " + std::to_string(r) + " holds " + name + kWhatToDo);
        }
        pieces.push_back(v[r][b]);
      }
      HF_ASSIGN_OR_RETURN(w[b], GptTensorParallelFullOf(name, pieces));
    }
    whole[name] = std::move(w);
  }
  return whole;
}

}  // namespace

Result<std::vector<StateView>> Trainer::StateViews() { return ViewsOfSlice(impl_->own_begin, impl_->own_end); }

Result<std::vector<StateView>> Trainer::ViewsOfSlice(int64_t begin, int64_t end) {
  Impl& d = *impl_;
  const int64_t mb = d.moments_base();
  if (begin < mb || end - mb > d.exp_avg.numel()) {
    return FailedPreconditionError("rank " + std::to_string(d.rank()) + " holds the optimizer state of elements " +
                                   Range(mb, d.moments_end()) + " only (ZeRO-1), not " + Range(begin, end) +
                                   "; capture the complete state with dist.zero_stage = 0");
  }
  if (d.cuda && d.before_update) d.before_update();  // the writer no longer reads the pinned buffer
  if (d.meta_cache_key != std::make_tuple(begin, end, d.accum)) {
    const DeterminismFingerprint f = d.Fingerprint();
    nlohmann::json meta = {
        {"format", kStateFormat},
        {"global_batch", static_cast<int64_t>(d.cfg.train.micro_batch) * d.accum * d.world()},
        {"config_hash", Hex(ConfigHash(d.cfg))},
        {"rank", d.rank()},
        {"world_size", d.world()},
        {"layout", d.Layout()},
        {"slice", {{"offset", begin}, {"count", end - begin}, {"total", d.flat_params.numel()}}},
        {"determinism",
         {{"torch_version", f.torch_version}, {"blas", f.blas}, {"threads", f.threads},
          {"world_size", f.world_size}, {"grad_accum", f.grad_accum}, {"bucket_bytes", f.bucket_bytes},
          {"backend", f.backend}, {"zero_stage", f.zero_stage}, {"device", f.device}}},
    };
    if (d.tp_comm != nullptr) {
      // "rank", "world_size" and "slice" are data-parallel: a slice of this
      // tensor-parallel rank's flat buffers, which its dp peers tile.
      meta["tensor_parallel"] = {{"size", d.tp_size()}, {"rank", d.tp_rank()}};
    }
    if (d.pp_comm != nullptr) meta["pipeline_parallel"] = {{"size", d.pp_size()}, {"stage", d.pp_rank()}};
    if (d.experts_sharded) {
      // "slice" is of this ep rank's flat buffers (its experts last), which
      // its expert-data group's ranks tile.
      meta["expert_parallel"] = {{"size", d.ep_size()}, {"rank", d.ep_rank()}};
    }
    const std::string text = meta.dump(1);  // "{\n \"config_hash\": ...\n}"
    d.meta_static_members = text.substr(1, text.size() - 3);
    d.meta_cache_key = {begin, end, d.accum};
  }
  nlohmann::json changing = {
      {"step", d.step},
      {"data_cursor", d.cursor},
      {"optim", {{"kind", "adamw"}, {"step", d.step}}},
  };
  if (d.eval_step >= 0) changing["eval"] = {{"step", d.eval_step}, {"metrics", d.eval_metrics}};
  // One object: the changing members, then the cached ones (no key is in both).
  d.meta_text = changing.dump(1);
  d.meta_text.resize(d.meta_text.size() - 2);  // the closing "\n}"
  d.meta_text += ',';
  d.meta_text += d.meta_static_members;
  d.meta_text += "\n}";
  std::vector<StateView> views;
  views.push_back({"meta", reinterpret_cast<const uint8_t*>(d.meta_text.data()), d.meta_text.size()});
  try {
    if (d.cuda) {
      // Device→host copies into the stager's pinned buffer, queued after the
      // update that produced these bytes; the writer waits for them (ready()).
      const torch::Tensor* sources[] = {&d.flat_params, &d.exp_avg, &d.exp_avg_sq};  // kSlicedBuffers' order
      std::vector<DeviceStager::Piece> pieces;
      for (size_t i = 0; i < 3; ++i) {
        const int64_t base = i == 0 ? 0 : mb;
        const StateView v = SliceOf(kSlicedBuffers[i], *sources[i], begin - base, end - base);
        pieces.push_back({v.name, v.data, v.size});
      }
      HF_ASSIGN_OR_RETURN(std::vector<StateView> staged, d.stager->Stage(pieces));
      for (StateView& v : staged) views.push_back(std::move(v));
    } else {
      views.push_back(SliceOf("params", d.flat_params, begin, end));
      views.push_back(SliceOf("optim.exp_avg", d.exp_avg, begin - mb, end - mb));
      views.push_back(SliceOf("optim.exp_avg_sq", d.exp_avg_sq, begin - mb, end - mb));
    }
    auto gen = at::detail::getDefaultCPUGenerator();
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      d.rng_state = gen.get_state();
    }
    views.push_back(ViewOf("rng.cpu", d.rng_state));
    if (d.cuda) {
      at::Generator cuda_gen = at::globalContext().defaultGenerator(d.device);
      {
        std::lock_guard<std::mutex> lock(cuda_gen.mutex());
        d.rng_cuda_state = cuda_gen.get_state();
      }
      views.push_back(ViewOf("rng.cuda", d.rng_cuda_state));
    }
    for (StateView& v : d.objective->ExtraStateViews()) views.push_back(std::move(v));
  } catch (const std::exception& e) {
    return TorchError("capturing state", e);
  }
  return views;
}

Result<TrainState> Trainer::CaptureState() {
  HF_ASSIGN_OR_RETURN(std::vector<StateView> views, ViewsOfSlice(0, impl_->flat_params.numel()));
  TrainState state;
  for (const StateView& v : views) {
    if (v.ready) HF_RETURN_IF_ERROR(v.ready());
    state.buffers.push_back({v.name, std::vector<uint8_t>(v.data, v.data + v.size)});
  }
  return state;
}

Result<std::vector<std::vector<std::string>>> Trainer::BuffersToRestore(const std::vector<SavedShard>& all) const {
  const Impl& d = *impl_;
  // Only the shards of this rank's coordinate are read.
  HF_ASSIGN_OR_RETURN(std::optional<std::vector<size_t>> same, ShardsOfCoordinate(all, d.coordinate()));
  if (!same) {
    // Another model-parallel layout: every shard's meta, parameters and
    // moments make the whole tensors (WholeTensors); shard 0's rank-local state.
    std::vector<std::vector<std::string>> out(all.size());
    for (size_t i = 0; i < all.size(); ++i) {
      out[i] = {"meta", kSlicedBuffers[0], kSlicedBuffers[1], kSlicedBuffers[2]};
      if (i != 0) continue;
      for (const StateView& v : all[0].views) {
        if (v.name.rfind("rng.", 0) == 0 || v.name.rfind("objective.", 0) == 0) out[0].push_back(v.name);
      }
    }
    return out;
  }
  const std::vector<size_t>& mine = *same;
  const std::vector<SavedShard> preview = Pick(all, mine);
  HF_ASSIGN_OR_RETURN(std::vector<std::vector<std::string>> want, BuffersOfShards(preview));
  std::vector<std::vector<std::string>> out(all.size());
  for (size_t i = 0; i < mine.size(); ++i) out[mine[i]] = std::move(want[i]);
  return out;
}

Result<std::vector<std::vector<std::string>>> Trainer::BuffersOfShards(const std::vector<SavedShard>& preview) const {
  const Impl& d = *impl_;
  HF_ASSIGN_OR_RETURN(std::vector<std::optional<StateSlice>> slices, CheckedSlices(preview));
  // The shard whose rank-local state (meta, RNG) this rank takes (RestoreShards).
  const size_t own = d.own_shard(preview.size());
  std::vector<std::vector<std::string>> want(preview.size());
  if (!slices[0]) {
    // v1: this rank's shard is a full replica; nothing else is used.
    for (const StateView& v : preview[own].views) want[own].push_back(v.name);
    return want;
  }
  // The moments this rank holds: elements [mb, me) of the flat layout.
  const int64_t mb = d.moments_base(), me = d.moments_end();
  for (size_t i = 0; i < preview.size(); ++i) {
    const StateSlice& s = *slices[i];
    want[i].push_back(kSlicedBuffers[0]);
    if (std::max(s.offset, mb) < std::min(s.offset + s.count, me)) {
      want[i].push_back(kSlicedBuffers[1]);
      want[i].push_back(kSlicedBuffers[2]);
    }
  }
  for (const StateView& v : preview[own].views) {
    if (v.name == "meta" || v.name.rfind("rng.", 0) == 0 || v.name.rfind("objective.", 0) == 0) {
      want[own].push_back(v.name);
    }
  }
  return want;
}

Status Trainer::RestoreState(const std::vector<StateView>& state, bool strict_determinism,
                             std::vector<std::string>* warnings) {
  SavedShard shard{"state", state};
  return Restore(shard, {shard}, strict_determinism, warnings, /*another_layout=*/false);
}

Status Trainer::RestoreShards(const std::vector<SavedShard>& shards, bool strict_determinism,
                              std::vector<std::string>* warnings) {
  if (shards.empty()) return InvalidArgumentError("no saved state to restore from");
  // Model parallel: the shards of this rank's tp rank and stage, as a
  // data-parallel checkpoint of its flat buffers.
  HF_ASSIGN_OR_RETURN(std::optional<std::vector<size_t>> which, ShardsOfCoordinate(shards, impl_->coordinate()));
  if (!which) return Restore(shards[0], shards, strict_determinism, warnings, /*another_layout=*/true);
  const std::vector<SavedShard> mine = Pick(shards, *which);
  // On another world size (a reshard) a rank past the saved ranks takes the
  // step, cursor and fingerprint from rank 0's meta (they are the same on
  // every shard) and starts a fresh dropout stream (Restore).
  const size_t own = impl_->own_shard(mine.size());
  return Restore(mine[own], mine, strict_determinism, warnings, /*another_layout=*/false);
}

Status Trainer::Restore(const SavedShard& own, const std::vector<SavedShard>& all, bool strict_determinism,
                        std::vector<std::string>* warnings, bool another_layout) {
  Impl& d = *impl_;
  HF_ASSIGN_OR_RETURN(nlohmann::json meta, ParseMeta(own));
  try {
    const std::string format = meta.value("format", "");
    if (format != kStateFormat && format != kStateFormatV1) {
      return CorruptionError("state format is '" + format + "', expected " + kStateFormat);
    }
    const std::string want_hash = Hex(ConfigHash(d.cfg));
    const std::string have_hash = meta.at("config_hash").get<std::string>();
    if (have_hash != want_hash) {
      return FailedPreconditionError("the state was saved by a run with another config (config hash " + have_hash +
                                     ", this run " + want_hash +
                                     "); resume with the config it was saved with, or start a new run");
    }
    if (!another_layout && meta.at("layout") != d.Layout()) {
      return FailedPreconditionError("the state's parameter layout differs from this model's");
    }
    const auto& det = meta.at("determinism");
    // The global batch (samples per step) is the checkpoint's: on another
    // world size the micro-steps per step change to keep it, so the data
    // sampler goes on with the same samples in each step.
    const int saved_world = meta.at("world_size").get<int>();
    const int64_t micro = d.cfg.train.micro_batch;
    const int64_t global = meta.contains("global_batch")
                               ? meta.at("global_batch").get<int64_t>()
                               : micro * det.at("grad_accum").get<int64_t>() * saved_world;  // before the field
    if (global <= 0 || global % (micro * d.world()) != 0) {
      // The data-parallel sizes that keep it; with model parallelism, as layouts.
      const int replica = d.tp_size() * d.pp_size();
      std::string fits;
      for (int64_t w = 1; w <= global / micro && fits.size() < 200; ++w) {
        if (global % (micro * w) != 0) continue;
        fits += (fits.empty() ? "" : ", ") +
                (replica == 1 ? std::to_string(w)
                              : "tp=" + std::to_string(d.tp_size()) + ",pp=" + std::to_string(d.pp_size()) + ",dp=" +
                                    std::to_string(w) + " (" + std::to_string(w * replica) + " ranks)");
      }
      if (replica > 1) {
        return FailedPreconditionError(
            "the checkpoint was saved with a global batch of " + std::to_string(global) + " samples; " +
            std::to_string(d.world()) + " data-parallel groups of " + std::to_string(micro) +
            " samples per micro-batch cannot make it up (" + std::to_string(global) + " is not a multiple of " +
            std::to_string(micro * d.world()) + "): resume as " +
            (fits.empty() ? std::string("the layout that saved it") : "one of " + fits) +
            ", or change train.micro_batch in a new run");
      }
      return FailedPreconditionError(
          "the checkpoint was saved by " + std::to_string(saved_world) + " ranks with a global batch of " +
          std::to_string(global) + " samples; " + std::to_string(d.world()) + " ranks of " +
          std::to_string(micro) + " samples per micro-batch cannot make it up (" + std::to_string(global) +
          " is not a multiple of " + std::to_string(micro * d.world()) + "): resume on " +
          (fits.empty() ? std::string("the world size that saved it") : "one of " + fits + " ranks") +
          ", or change train.micro_batch in a new run");
    }
    d.accum = static_cast<int>(global / (micro * d.world()));
    DeterminismFingerprint saved;
    saved.torch_version = det.at("torch_version").get<std::string>();
    saved.blas = det.at("blas").get<std::string>();
    saved.threads = det.at("threads").get<int>();
    saved.world_size = det.at("world_size").get<int>();
    saved.grad_accum = det.at("grad_accum").get<int>();
    saved.bucket_bytes = det.at("bucket_bytes").get<int64_t>();
    saved.backend = det.at("backend").get<std::string>();
    saved.zero_stage = det.value("zero_stage", 0);  // checkpoints from before ZeRO-1
    saved.device = det.value("device", "cpu");  // checkpoints from before GPU training
    std::vector<std::string> diffs = saved.Diff(d.Fingerprint());
    if (!diffs.empty()) {
      std::string all_diffs;
      for (const auto& s : diffs) all_diffs += (all_diffs.empty() ? "" : "; ") + s;
      if (strict_determinism) {
        return FailedPreconditionError("resuming would break bit-exact determinism (" + all_diffs +
                                       "); rerun with the same settings, or drop --strict-determinism");
      }
      if (warnings != nullptr) *warnings = diffs;
    }
    const torch::Tensor* targets[] = {&d.flat_params, &d.exp_avg, &d.exp_avg_sq};
    // The moments this rank holds: elements [mb, me) of the flat layout.
    const int64_t mb = d.moments_base(), me = d.moments_end();
    std::vector<std::optional<StateSlice>> slices;
    if (!another_layout) {
      HF_ASSIGN_OR_RETURN(slices, CheckedSlices(all));
    }
    if (another_layout) {
      // Another tensor-parallel or pipeline layout: the whole model's
      // tensors, cut as this rank holds them.
      HF_ASSIGN_OR_RETURN(auto whole, WholeTensors(all));
      for (const Impl::Slot& slot : d.slots) {
        auto it = whole.find(slot.name);
        if (it == whole.end()) {
          return FailedPreconditionError("the checkpoint has no parameter " + slot.name +
                                         "; resume with the model config it was saved with");
        }
        for (size_t b = 0; b < 3; ++b) {
          HF_ASSIGN_OR_RETURN(torch::Tensor part,
                              GptTensorParallelShardOf(slot.name, it->second[b], d.tp_rank(), d.tp_size()));
          if (!part.sizes().equals(slot.shape)) {
            return FailedPreconditionError("the checkpoint's " + slot.name + " does not fit this model's; resume "
                                           "with the model config it was saved with");
          }
          const torch::Tensor flat = part.contiguous().view(-1);
          if (b == 0) {
            d.flat_params.narrow(0, slot.offset, slot.numel).copy_(flat);
            continue;
          }
          const int64_t lo = std::max(slot.offset, mb), hi = std::min(slot.offset + slot.numel, me);
          if (lo < hi) targets[b]->narrow(0, lo - mb, hi - lo).copy_(flat.narrow(0, lo - slot.offset, hi - lo));
        }
      }
    } else if (!slices[0]) {
      // v1: this rank's shard is a full replica.
      HF_RETURN_IF_ERROR(CopyInto(FindView(own.views, kSlicedBuffers[0]), d.flat_params, kSlicedBuffers[0]));
      for (size_t b = 1; b < 3; ++b) {
        const StateView* v = FindView(own.views, kSlicedBuffers[b]);
        const size_t want = static_cast<size_t>(d.flat_params.numel()) * kSlicedElementSize;
        if (v == nullptr || v->size != want) {
          return CorruptionError(std::string("state buffer '") + kSlicedBuffers[b] + "' is missing or not " +
                                 std::to_string(want) + " bytes (the model's parameters)");
        }
        HF_RETURN_IF_ERROR(NeedBytes(v, own.source));
        CopyHostBytes(*targets[b], v->data + mb * kSlicedElementSize);
      }
    } else {
      const int64_t n = d.flat_params.numel();
      if (slices[0]->total != n) {
        return FailedPreconditionError("the checkpoint's flat buffers hold " + std::to_string(slices[0]->total) +
                                       " parameters, this model has " + std::to_string(n) +
                                       "; resume with the model config it was saved with");
      }
      // Parameters: every slice. Moments: the part of each slice this rank holds.
      for (size_t i = 0; i < all.size(); ++i) {
        const StateSlice& s = *slices[i];
        if (s.count == 0) continue;
        const StateView* p = FindView(all[i].views, kSlicedBuffers[0]);  // present and sized: CheckedSlices
        HF_RETURN_IF_ERROR(NeedBytes(p, all[i].source));
        CopyHostBytes(d.flat_params.narrow(0, s.offset, s.count), p->data);
        const int64_t lo = std::max(s.offset, mb), hi = std::min(s.offset + s.count, me);
        if (lo >= hi) continue;
        for (size_t b = 1; b < 3; ++b) {
          const StateView* v = FindView(all[i].views, kSlicedBuffers[b]);
          HF_RETURN_IF_ERROR(NeedBytes(v, all[i].source));
          CopyHostBytes(targets[b]->narrow(0, lo - mb, hi - lo), v->data + (lo - s.offset) * kSlicedElementSize);
        }
      }
    }
    d.step = meta.at("step").get<int64_t>();
    d.cursor = meta.at("data_cursor").get<uint64_t>();
    d.eval_step = -1;
    d.eval_metrics.clear();
    if (meta.contains("eval")) {  // checkpoints from before evaluation have none
      d.eval_step = meta.at("eval").at("step").get<int64_t>();
      d.eval_metrics = meta.at("eval").at("metrics").get<std::map<std::string, double>>();
    }
    HF_RETURN_IF_ERROR(d.objective->RestoreExtraState(own.views).WithContext(own.source));
    if (d.rank() >= saved_world || another_layout) {
      // A rank the checkpoint had no shard of (or of another layout, where
      // no shard is its own): a fresh dropout stream of its own, a function
      // of the seed, its rank and the step.
      torch::manual_seed(d.cfg.train.seed * 1000003ULL + 1 + static_cast<uint64_t>(d.rank()) +
                         static_cast<uint64_t>(d.step) * 7919ULL);
      return Status::Ok();
    }
    const StateView* rng = FindView(own.views, "rng.cpu");
    if (rng == nullptr) return CorruptionError("state has no 'rng.cpu' buffer");
    HF_RETURN_IF_ERROR(NeedBytes(rng, own.source));
    auto rng_tensor = torch::empty({static_cast<int64_t>(rng->size)}, torch::kUInt8);
    std::memcpy(rng_tensor.data_ptr(), rng->data, rng->size);
    auto gen = at::detail::getDefaultCPUGenerator();
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(rng_tensor);
    }
    const StateView* rng_cuda = FindView(own.views, "rng.cuda");
    HF_RETURN_IF_ERROR(NeedBytes(rng_cuda, own.source));
    if (d.cuda && rng_cuda != nullptr) {
      auto state = torch::empty({static_cast<int64_t>(rng_cuda->size)}, torch::kUInt8);
      std::memcpy(state.data_ptr(), rng_cuda->data, rng_cuda->size);
      at::Generator cuda_gen = at::globalContext().defaultGenerator(d.device);
      std::lock_guard<std::mutex> lock(cuda_gen.mutex());
      cuda_gen.set_state(state);
    }
    // A CPU checkpoint resumed on a GPU (or back) keeps its CUDA generator
    // seeded as at start: the fingerprint's device difference already warned.
  } catch (const nlohmann::json::exception& e) {
    return CorruptionError(std::string("state 'meta' is missing a field: ") + e.what());
  } catch (const std::exception& e) {
    return TorchError("restoring state", e);
  }
  return Status::Ok();
}

Status Trainer::DumpParams(const std::string& dir, bool write) const {
  const Impl& d = *impl_;
  // Tensor parallel: every rank's flat parameters, rank r's at [r*n, (r+1)*n).
  torch::Tensor gathered;
  const int64_t n = d.flat_params.numel();
  if (d.tp_comm != nullptr) {
    gathered = torch::empty({n * d.tp_size()}, torch::kFloat32);
    gathered.narrow(0, n * d.tp_rank(), n).copy_(d.flat_params);
    const std::vector<size_t> counts(static_cast<size_t>(d.tp_size()), static_cast<size_t>(n));
    HF_RETURN_IF_ERROR(d.tp_comm->AllgatherAsync(gathered.data_ptr<float>(), counts)->Wait().WithContext(
        "gathering the tensor-parallel shards of the parameters"));
  }
  const torch::Tensor host = d.flat_params.to(torch::kCPU);
  std::map<std::string, const Impl::Slot*> by_name;
  for (const Impl::Slot& s : d.slots) by_name[s.name] = &s;
  // The whole model's names in registration order (the order a reader expects).
  std::vector<std::string> order = d.full_order;
  if (order.empty()) {
    for (auto it = d.slots.rbegin(); it != d.slots.rend(); ++it) order.push_back(it->name);
  }
  auto shape_of = [&](const std::string& name) {
    auto it = d.full_shapes.find(name);
    return it != d.full_shapes.end() ? it->second : by_name.at(name)->shape;
  };
  // Pipeline parallel: each parameter is written from the first stage that
  // holds it (the tied wte from stage 0); every stage's whole tensors are
  // gathered over the pipeline, stage k's in `order`'s order. Experts
  // sharded: alike over the ep group, each expert from its ep rank, the
  // other parameters from ep rank 0.
  ProgressCommunicator* holders = d.pp_comm ? d.pp_comm.get() : d.experts_sharded ? d.ep_comm.get() : nullptr;
  const int stages = holders ? holders->world_size() : 1;
  const int holder_rank = holders ? holders->rank() : 0;
  std::vector<int> owner(order.size(), 0);
  for (size_t i = 0; i < order.size() && stages > 1; ++i) {
    if (d.pp_comm) {
      HF_ASSIGN_OR_RETURN(owner[i], FirstStageHolding(d.cfg.model, stages, order[i]));
    } else {
      const int e = ExpertOfParameter(order[i]);
      owner[i] = e < 0 ? 0 : e / (d.cfg.model.moe.experts / stages);
    }
  }
  std::vector<size_t> counts(static_cast<size_t>(stages), 0);
  std::vector<int64_t> offset_in_stage(order.size(), 0);
  for (size_t i = 0; i < order.size(); ++i) {
    int64_t numel = 1;
    for (int64_t dim : shape_of(order[i])) numel *= dim;
    offset_in_stage[i] = static_cast<int64_t>(counts[static_cast<size_t>(owner[i])]);
    counts[static_cast<size_t>(owner[i])] += static_cast<size_t>(numel);
  }
  std::vector<int64_t> stage_base(static_cast<size_t>(stages), 0);
  for (int k = 1; k < stages; ++k) {
    stage_base[static_cast<size_t>(k)] =
        stage_base[static_cast<size_t>(k - 1)] + static_cast<int64_t>(counts[static_cast<size_t>(k - 1)]);
  }
  const int64_t total = stage_base.back() + static_cast<int64_t>(counts.back());
  torch::Tensor whole_model = torch::empty({total}, torch::kFloat32);
  for (size_t i = 0; i < order.size(); ++i) {
    if (owner[i] != holder_rank) continue;
    auto slot = by_name.find(order[i]);
    if (slot == by_name.end()) return InternalError("DumpParams: this rank's model has no " + order[i]);
    const Impl::Slot* it = slot->second;
    torch::Tensor whole = host.narrow(0, it->offset, it->numel);
    if (it->split) {
      std::vector<torch::Tensor> parts;
      for (int r = 0; r < d.tp_size(); ++r) parts.push_back(gathered.narrow(0, r * n + it->offset, it->numel).view(it->shape));
      HF_ASSIGN_OR_RETURN(whole, GptTensorParallelFullOf(it->name, parts));
    }
    whole_model.narrow(0, stage_base[static_cast<size_t>(owner[i])] + offset_in_stage[i], whole.numel())
        .copy_(whole.reshape({-1}));
  }
  if (stages > 1) {
    HF_RETURN_IF_ERROR(holders->AllgatherAsync(whole_model.data_ptr<float>(), counts)->Wait().WithContext(
        d.pp_comm ? "gathering the pipeline stages' parameters" : "gathering the expert-parallel ranks' experts"));
  }
  if (!write) return Status::Ok();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IoError("create " + dir + ": " + ec.message());
  nlohmann::json index = {{"format", kParamsFormat}, {"dtype", "float32"}, {"tensors", nlohmann::json::array()}};
  std::ofstream bin(dir + "/params.bin", std::ios::binary | std::ios::trunc);
  int64_t offset = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const std::vector<int64_t> shape = shape_of(order[i]);
    int64_t numel = 1;
    for (int64_t dim : shape) numel *= dim;
    const float* src = whole_model.data_ptr<float>() + stage_base[static_cast<size_t>(owner[i])] + offset_in_stage[i];
    bin.write(reinterpret_cast<const char*>(src), numel * 4);
    index["tensors"].push_back({{"name", order[i]}, {"shape", shape}, {"offset", offset}, {"numel", numel}});
    offset += numel * 4;
  }
  bin.close();
  if (!bin) return IoError("write " + dir + "/params.bin failed");
  std::ofstream js(dir + "/params.json", std::ios::trunc);
  js << index.dump(1) << "\n";
  js.close();
  if (!js) return IoError("write " + dir + "/params.json failed");
  return Status::Ok();
}

}  // namespace holdfast
