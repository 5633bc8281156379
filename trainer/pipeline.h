// Pipeline parallelism for the GPT (issue 26; docs/parallelism.md "Pipeline
// parallelism"): the model cut into stages of consecutive blocks, and one
// optimiser step's forwards and backwards run over the stages by the 1F1B
// schedule (trainer/pipeline_schedule.h), activations and their gradients
// sent between neighbouring stages (Communicator::SendRecvAsync).
//
// Stage 0 holds the embeddings (wte, wpe) and its blocks; the last stage its
// blocks, ln_f and the lm head, which is tied to wte, so the last stage holds
// a copy of wte too (Megatron-LM's "embedding group"): both start from the
// same weights, their gradients are summed between the two stages after
// backward (SyncTiedEmbeddingGrad: the same bits on both), and the same
// update keeps them equal. A pipeline of one stage is the whole model.
//
// A stage's parameters are named as in the whole model (GlobalName:
// stage 1 of a 4-layer model over 2 stages holds "h.2.*" and "h.3.*"), so a
// checkpoint or a parameter dump can say which global tensor each one is.
// The blocks may be split over a tensor-parallel group as GptImpl's are.
//
// Float32 and without dropout, as tensor parallelism (dropout's random
// stream would depend on the layout). This header includes LibTorch.
// Thread-safety: one thread per stage module; the communicators are used
// only from that thread.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/comm/communicator.h"
#include "trainer/config.h"
#include "trainer/model.h"

namespace holdfast {

// Which blocks stage `stage` of `stages` holds: [first_layer, end_layer), the
// n_layer blocks cut into contiguous runs, the first n_layer % stages stages
// holding one more.
struct PipelineStageSpec {
  int stage = 0;
  int stages = 1;
  int first_layer = 0;
  int end_layer = 0;
  bool first() const { return stage == 0; }
  bool last() const { return stage == stages - 1; }
};

// kInvalidArgument when the stage is out of range or there are fewer blocks
// than stages (naming the most stages the model can have).
Result<PipelineStageSpec> PipelineStageOf(const ModelConfig& cfg, int stage, int stages);

// The first stage that holds the whole model's parameter `name` ("wte.weight"
// and "wpe.weight": 0; "ln_f.*": the last; "h.<i>.*": the stage of block i).
// The last stage's copy of the tied wte is not its first holder.
// kInvalidArgument for a name the model does not have.
Result<int> FirstStageHolding(const ModelConfig& cfg, int stages, const std::string& name);

class GptStageImpl : public torch::nn::Module {
 public:
  // kInvalidArgument when the model cannot be cut (PipelineStageOf), asks
  // for what is not built yet (dropout, bf16) or its blocks cannot be split
  // over `tensor_parallel` (not owned; null or a group of one = none).
  // `sequence_parallel` (with a tp group): the stage's blocks run sequence
  // parallel, each tp rank holding its T / S positions between them; what a
  // stage sends and receives stays the whole [B, T, C] (the same on every
  // rank of the tp group, as without it).
  static Result<std::shared_ptr<GptStageImpl>> Create(const ModelConfig& cfg, int stage, int stages,
                                                      Communicator* tensor_parallel = nullptr,
                                                      bool sequence_parallel = false);

  // The first stage takes tokens (int64 [B, T]), the others the previous
  // stage's output (float32 [B, T, C]); the last stage returns the logits
  // (float32 [B, T, vocab_size]), the others their blocks' output [B, T, C].
  torch::Tensor forward(const torch::Tensor& input);

  // The whole model's name of one of this stage's parameters.
  std::string GlobalName(const std::string& local) const;
  // This stage's part of every parameter of `full` (an unsplit GptImpl of
  // the same config), by global name (and tensor-parallel shard).
  Status LoadFromFull(const GptImpl& full);

  const PipelineStageSpec& spec() const { return spec_; }
  const ModelConfig& config() const { return cfg_; }
  // wte's weight: on the first stage the input embedding, on the last the
  // tied head (both when there is one stage); undefined on middle stages.
  torch::Tensor tied_embedding() const;

  // Use Create.
  GptStageImpl(const ModelConfig& cfg, const PipelineStageSpec& spec, Communicator* tensor_parallel,
               bool sequence_parallel = false);

 private:
  ModelConfig cfg_;
  PipelineStageSpec spec_;
  Communicator* tp_ = nullptr;  // set only for a group of 2 or more
  bool sequence_ = false;        // sequence parallel over tp_
  torch::nn::Embedding wte_{nullptr};
  torch::nn::Embedding wpe_{nullptr};  // first stage only
  torch::nn::ModuleList h_{nullptr};
  LayerNorm ln_f_{nullptr};  // last stage only
  torch::Tensor pos_;
};
TORCH_MODULE(GptStage);

struct PipelineStepResult {
  // The last stage: the sum over the micro-batches of loss x loss_scale (the
  // step's mean loss with loss_scale = 1 / M); 0 on the other stages.
  double loss = 0;
  double compute_ms = 0;  // forwards and backwards
  double wait_ms = 0;     // waiting for messages to go and come
  int max_in_flight = 0;  // most micro-batches whose activations it held at once
};

// One step of stage pipe->rank() (the pipeline group: rank = stage, size =
// stages): every micro-batch's forward and backward by the 1F1B schedule,
// micro-batch m's tokens idx[m] and targets[m] (int64 [B, T]; every stage is
// given them, the first reads the tokens, the last the targets, the others
// the shape). Each micro-batch's loss (mean cross-entropy over targets !=
// -1) is scaled by loss_scale before backward; gradients accumulate into the
// parameters' .grad. Every stage of the pipeline must call it with the same
// micro-batch shapes. A message that fails is returned naming the stage,
// the instruction and its micro-batch.
Result<PipelineStepResult> RunPipelineStep(GptStageImpl& stage, Communicator& pipe,
                                           const std::vector<torch::Tensor>& idx,
                                           const std::vector<torch::Tensor>& targets, double loss_scale);

// A forward of one batch through the pipeline, without autograd (evaluation):
// the first stage reads the tokens idx (int64 [B, T]) and sends its output
// on, each stage receives, runs its blocks and sends on; the last stage
// returns the logits, every other stage an undefined tensor. Every stage
// must call it with the same batch shape. Throws c10::Error when a message
// fails (naming the stage).
torch::Tensor PipelineForward(GptStageImpl& stage, Communicator& pipe, const torch::Tensor& idx);

// After RunPipelineStep of a pipeline of 2 or more stages: the first and the
// last stage swap their wte gradients and each adds the other's (a + b on
// one, b + a on the other: the same bits), the whole tied parameter's
// gradient. Middle stages and a one-stage pipeline do nothing.
Status SyncTiedEmbeddingGrad(GptStageImpl& stage, Communicator& pipe);

}  // namespace holdfast
