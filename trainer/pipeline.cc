#include "trainer/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "trainer/pipeline_schedule.h"
#include "trainer/tensor_parallel.h"

namespace holdfast {

namespace F = torch::nn::functional;

namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

Result<PipelineStageSpec> PipelineStageOf(const ModelConfig& cfg, int stage, int stages) {
  if (stages < 1 || stage < 0 || stage >= stages) {
    return InvalidArgumentError("pipeline stage " + std::to_string(stage) + " of " + std::to_string(stages) +
                                " does not exist: a stage is in [0, dist.pipeline_parallel)");
  }
  if (cfg.n_layer < stages) {
    return InvalidArgumentError("a model of model.n_layer = " + std::to_string(cfg.n_layer) +
                                " blocks cannot be cut into dist.pipeline_parallel = " + std::to_string(stages) +
                                " stages: use at most " + std::to_string(cfg.n_layer) + " stages");
  }
  PipelineStageSpec s;
  s.stage = stage;
  s.stages = stages;
  const int base = cfg.n_layer / stages, extra = cfg.n_layer % stages;
  s.first_layer = stage * base + std::min(stage, extra);
  s.end_layer = s.first_layer + base + (stage < extra ? 1 : 0);
  return s;
}

Result<int> FirstStageHolding(const ModelConfig& cfg, int stages, const std::string& name) {
  if (name.rfind("wte.", 0) == 0 || name.rfind("wpe.", 0) == 0) return 0;
  if (name.rfind("ln_f.", 0) == 0) return stages - 1;
  const size_t dot = name.find('.', 2);
  if (name.rfind("h.", 0) == 0 && dot != std::string::npos && dot > 2) {
    const int layer = std::atoi(name.substr(2, dot - 2).c_str());
    for (int k = 0; k < stages; ++k) {
      HF_ASSIGN_OR_RETURN(PipelineStageSpec spec, PipelineStageOf(cfg, k, stages));
      if (layer >= spec.first_layer && layer < spec.end_layer) return k;
    }
  }
  return InvalidArgumentError("the model has no parameter " + name);
}

Result<std::shared_ptr<GptStageImpl>> GptStageImpl::Create(const ModelConfig& cfg, int stage, int stages,
                                                           Communicator* tensor_parallel, bool sequence_parallel) {
  HF_ASSIGN_OR_RETURN(PipelineStageSpec spec, PipelineStageOf(cfg, stage, stages));
  if (stages > 1 && cfg.dropout > 0) {
    return InvalidArgumentError("pipeline parallelism runs without dropout for now (its random stream would depend "
                                "on the layout): set model.dropout = 0");
  }
  if (tensor_parallel != nullptr && tensor_parallel->world_size() > 1) {
    // says what does not split
    HF_RETURN_IF_ERROR(ParallelBlockImpl::Create(cfg, tensor_parallel, sequence_parallel).status());
  }
  try {
    return std::make_shared<GptStageImpl>(cfg, spec, tensor_parallel, sequence_parallel);
  } catch (const std::exception& e) {
    return InvalidArgumentError(std::string("building pipeline stage ") + std::to_string(stage) + ": " + e.what());
  }
}

GptStageImpl::GptStageImpl(const ModelConfig& cfg, const PipelineStageSpec& spec, Communicator* tensor_parallel,
                           bool sequence_parallel)
    : cfg_(cfg), spec_(spec),
      tp_(tensor_parallel != nullptr && tensor_parallel->world_size() > 1 ? tensor_parallel : nullptr),
      sequence_(sequence_parallel && tp_ != nullptr) {
  // Registered in the whole model's order (wte, wpe, h, ln_f), so that the
  // stages' parameters, put together, are GptImpl's in its own order.
  if (spec_.first() || spec_.last()) wte_ = register_module("wte", torch::nn::Embedding(cfg.vocab_size, cfg.n_embd));
  if (spec_.first()) wpe_ = register_module("wpe", torch::nn::Embedding(cfg.block_size, cfg.n_embd));
  h_ = register_module("h", torch::nn::ModuleList());
  for (int i = spec_.first_layer; i < spec_.end_layer; ++i) {
    if (tp_ == nullptr) {
      h_->push_back(Block(cfg, ComputeOptions{}));
      continue;
    }
    Result<std::shared_ptr<ParallelBlockImpl>> block = ParallelBlockImpl::Create(cfg, tp_, sequence_);
    TORCH_CHECK(block.ok(), block.status().ToString());
    h_->push_back(*block);
  }
  if (spec_.last()) ln_f_ = register_module("ln_f", LayerNorm(cfg.n_embd, cfg.bias));
  if (spec_.first()) pos_ = register_buffer("pos", torch::arange(cfg.block_size, torch::kLong));
}

torch::Tensor GptStageImpl::tied_embedding() const { return wte_ ? wte_->weight : torch::Tensor(); }

torch::Tensor GptStageImpl::forward(const torch::Tensor& input) {
  torch::Tensor x;
  if (spec_.first()) {
    const int64_t T = input.size(1);
    x = wte_(input) + wpe_(pos_.slice(0, 0, T));
  } else {
    x = input;
  }
  if (sequence_) x = SplitSequence(x, tp_);
  for (const auto& block : *h_) {
    x = tp_ != nullptr ? block->as<ParallelBlockImpl>()->forward(x) : block->as<Block>()->forward(x);
  }
  // The whole sequence again: what the next stage receives, or what ln_f and
  // the head (replicated) take.
  if (sequence_) x = GatherSequence(x, tp_, /*reduce_grad=*/false);
  if (!spec_.last()) return x;
  return torch::matmul(ln_f_(x), wte_->weight.t());  // the tied lm head
}

std::string GptStageImpl::GlobalName(const std::string& local) const {
  if (local.rfind("h.", 0) != 0) return local;
  const size_t dot = local.find('.', 2);
  const int i = std::atoi(local.substr(2, dot - 2).c_str());
  return "h." + std::to_string(spec_.first_layer + i) + (dot == std::string::npos ? "" : local.substr(dot));
}

Status GptStageImpl::LoadFromFull(const GptImpl& full) {
  std::map<std::string, torch::Tensor> whole;
  for (const auto& p : full.named_parameters()) whole[p.key()] = p.value();
  torch::NoGradGuard no_grad;
  for (auto& p : named_parameters()) {
    const std::string global = GlobalName(p.key());
    auto it = whole.find(global);
    if (it == whole.end()) {
      return InvalidArgumentError("LoadFromFull: the full model has no parameter " + global + " (stage " +
                                  std::to_string(spec_.stage) + "'s " + p.key() + ")");
    }
    torch::Tensor part = it->second;
    if (tp_ != nullptr) {
      HF_ASSIGN_OR_RETURN(part, GptTensorParallelShardOf(global, it->second, tp_->rank(), tp_->world_size()));
    }
    if (!part.sizes().equals(p.value().sizes())) {
      return InvalidArgumentError("LoadFromFull: " + global + " does not fit stage " + std::to_string(spec_.stage));
    }
    p.value().copy_(part);
  }
  return Status::Ok();
}

namespace {

// What one stage keeps of a micro-batch between its forward and backward.
struct InFlight {
  torch::Tensor input;   // a received activation (a leaf that requires grad); undefined on the first stage
  torch::Tensor output;  // the forward's output; on the last stage the scaled loss
};

class StageRunner {
 public:
  StageRunner(GptStageImpl& stage, Communicator& pipe, const std::vector<torch::Tensor>& idx,
              const std::vector<torch::Tensor>& targets, double loss_scale)
      : stage_(stage), pipe_(pipe), idx_(idx), targets_(targets), loss_scale_(loss_scale),
        in_flight_(idx.size()), recv_act_(idx.size()), recv_grad_(idx.size()), send_grad_(idx.size()) {}

  Result<PipelineStepResult> Run() {
    const int s = stage_.spec().stage;
    HF_ASSIGN_OR_RETURN(std::vector<PipeInstr> program,
                        OneFOneBSchedule(s, stage_.spec().stages, static_cast<int>(idx_.size())));
    int held = 0;
    for (const PipeInstr& in : program) {
      if (in.op == PipeOp::kComm) {
        HF_RETURN_IF_ERROR(Exchange(in).WithContext("pipeline stage " + std::to_string(s) + ", " +
                                                    DescribePipeInstr(in)));
        continue;
      }
      const auto t0 = Clock::now();
      if (in.op == PipeOp::kForward) {
        Forward(in.micro);
        r_.max_in_flight = std::max(r_.max_in_flight, ++held);
      } else {
        Backward(in.micro);
        --held;
      }
      r_.compute_ms += MsSince(t0);
    }
    return r_;
  }

 private:
  torch::Tensor Activation(int micro) const {
    const auto& t = idx_[static_cast<size_t>(micro)];
    return torch::empty({t.size(0), t.size(1), stage_.config().n_embd}, torch::kFloat32);
  }

  void Forward(int micro) {
    const size_t m = static_cast<size_t>(micro);
    InFlight& f = in_flight_[m];
    if (stage_.spec().first()) {
      f.output = stage_.forward(idx_[m]);
    } else {
      f.input = recv_act_[m].requires_grad_(true);
      recv_act_[m] = torch::Tensor();
      f.output = stage_.forward(f.input);
    }
    if (stage_.spec().last()) {
      auto loss = F::cross_entropy(f.output.view({-1, f.output.size(-1)}), targets_[m].view({-1}),
                                   F::CrossEntropyFuncOptions().ignore_index(-1));
      f.output = loss * loss_scale_;
      r_.loss += f.output.item<double>();
    } else {
      f.output = f.output.contiguous();
    }
  }

  void Backward(int micro) {
    const size_t m = static_cast<size_t>(micro);
    InFlight& f = in_flight_[m];
    if (stage_.spec().last()) {
      f.output.backward();
    } else {
      f.output.backward(recv_grad_[m]);
      recv_grad_[m] = torch::Tensor();
    }
    if (!stage_.spec().first()) send_grad_[m] = f.input.grad().contiguous();
    f = InFlight();
  }

  // The instruction's send and receive posted together, then waited for.
  // A buffer sent stays alive until the wait returns.
  Status Exchange(const PipeInstr& in) {
    const int s = stage_.spec().stage;
    const int peer = in.Peer(s);
    torch::Tensor send, recv;
    if (in.send_act >= 0) send = in_flight_[static_cast<size_t>(in.send_act)].output;
    if (in.send_grad >= 0) {
      send = send_grad_[static_cast<size_t>(in.send_grad)];
      send_grad_[static_cast<size_t>(in.send_grad)] = torch::Tensor();
    }
    if (in.recv_act >= 0) recv = recv_act_[static_cast<size_t>(in.recv_act)] = Activation(in.recv_act);
    if (in.recv_grad >= 0) recv = recv_grad_[static_cast<size_t>(in.recv_grad)] = Activation(in.recv_grad);
    const auto t0 = Clock::now();
    const size_t send_bytes = send.defined() ? static_cast<size_t>(send.numel()) * sizeof(float) : 0;
    const size_t recv_bytes = recv.defined() ? static_cast<size_t>(recv.numel()) * sizeof(float) : 0;
    // What travels, for the progress record: triage names the micro-batch
    // and whether activations or gradients never arrived.
    MessageLabel label;
    label.send_what = in.send_act >= 0 ? MessageKind::kActivations : MessageKind::kGradients;
    label.send_micro = in.send_act >= 0 ? in.send_act : in.send_grad;
    label.recv_what = in.recv_act >= 0 ? MessageKind::kActivations : MessageKind::kGradients;
    label.recv_micro = in.recv_act >= 0 ? in.recv_act : in.recv_grad;
    auto work = pipe_.SendRecvLabelled(send.defined() ? send.data_ptr() : nullptr, send_bytes,
                                       send.defined() ? peer : -1, recv.defined() ? recv.data_ptr() : nullptr,
                                       recv_bytes, recv.defined() ? peer : -1, label);
    Status st = work->Wait();
    r_.wait_ms += MsSince(t0);
    return st;
  }

  GptStageImpl& stage_;
  Communicator& pipe_;
  const std::vector<torch::Tensor>& idx_;
  const std::vector<torch::Tensor>& targets_;
  double loss_scale_;
  std::vector<InFlight> in_flight_;
  std::vector<torch::Tensor> recv_act_, recv_grad_, send_grad_;
  PipelineStepResult r_;
};

}  // namespace

Result<PipelineStepResult> RunPipelineStep(GptStageImpl& stage, Communicator& pipe,
                                           const std::vector<torch::Tensor>& idx,
                                           const std::vector<torch::Tensor>& targets, double loss_scale) {
  if (pipe.world_size() != stage.spec().stages || pipe.rank() != stage.spec().stage) {
    return InvalidArgumentError("pipeline stage " + std::to_string(stage.spec().stage) + " of " +
                                std::to_string(stage.spec().stages) + " run over a group of " +
                                std::to_string(pipe.world_size()) + " as its rank " + std::to_string(pipe.rank()));
  }
  if (idx.empty() || idx.size() != targets.size()) {
    return InvalidArgumentError("a pipeline step needs one or more micro-batches, each with its targets (got " +
                                std::to_string(idx.size()) + " and " + std::to_string(targets.size()) + ")");
  }
  try {
    return StageRunner(stage, pipe, idx, targets, loss_scale).Run();
  } catch (const std::exception& e) {
    return InternalError("pipeline stage " + std::to_string(stage.spec().stage) + ": " + e.what());
  }
}

torch::Tensor PipelineForward(GptStageImpl& stage, Communicator& pipe, const torch::Tensor& idx) {
  const PipelineStageSpec& spec = stage.spec();
  torch::NoGradGuard no_grad;
  torch::Tensor out;
  if (spec.first()) {
    out = stage.forward(idx);
  } else {
    torch::Tensor in = torch::empty({idx.size(0), idx.size(1), stage.config().n_embd}, torch::kFloat32);
    Status st = pipe.SendRecvLabelled(nullptr, 0, -1, in.data_ptr(), static_cast<size_t>(in.numel()) * sizeof(float),
                                      spec.stage - 1, MessageLabel{MessageKind::kNone, MessageKind::kActivations})
                    ->Wait();
    TORCH_CHECK(st.ok(), "pipeline stage ", spec.stage, ", evaluation input: ", st.ToString());
    out = stage.forward(in);
  }
  if (spec.last()) return out;
  out = out.contiguous();
  Status st = pipe.SendRecvLabelled(out.data_ptr(), static_cast<size_t>(out.numel()) * sizeof(float), spec.stage + 1,
                                    nullptr, 0, -1, MessageLabel{MessageKind::kActivations, MessageKind::kNone})
                  ->Wait();
  TORCH_CHECK(st.ok(), "pipeline stage ", spec.stage, ", evaluation output: ", st.ToString());
  return torch::Tensor();
}

Status SyncTiedEmbeddingGrad(GptStageImpl& stage, Communicator& pipe) {
  const PipelineStageSpec& spec = stage.spec();
  if (spec.stages == 1 || (!spec.first() && !spec.last())) return Status::Ok();
  torch::Tensor grad = stage.tied_embedding().grad();
  if (!grad.defined()) return FailedPreconditionError("the tied embedding has no gradient: run the step first");
  torch::NoGradGuard no_grad;
  const torch::Tensor mine = grad.contiguous().clone();
  torch::Tensor theirs = torch::empty_like(mine);
  const int peer = spec.first() ? spec.stages - 1 : 0;
  const size_t bytes = static_cast<size_t>(mine.numel()) * sizeof(float);
  auto work = pipe.SendRecvLabelled(mine.data_ptr(), bytes, peer, theirs.data_ptr(), bytes, peer,
                                    MessageLabel{MessageKind::kTiedEmbedding, MessageKind::kTiedEmbedding});
  HF_RETURN_IF_ERROR(work->Wait().WithContext("the tied embedding's gradient between the first and last stage"));
  // a + b on the first stage, b + a on the last: float addition commutes, so the bits agree.
  grad.copy_(spec.first() ? mine + theirs : theirs + mine);
  return Status::Ok();
}

}  // namespace holdfast
