// Tensor parallelism for the GPT block (issue 26; docs/parallelism.md):
// Megatron-LM's split, written on this trainer's model (trainer/model.h).
//
// Attention is split by heads: tp rank t of S holds heads [t*H/S, (t+1)*H/S)
// of q, k and v (their rows of c_attn, packed q | k | v as the full layer
// packs them) and the matching input columns of c_proj. The MLP is split by
// its hidden dimension: rows [t*4C/S, (t+1)*4C/S) of c_fc, the same columns
// of c_proj. LayerNorms and the output projections' biases are replicated.
// One allreduce per sub-block forward (g: after the row-parallel product)
// and one backward (f: the gradient of the column-parallel input), so two of
// each per block:
//
//   x = x + g(attn_t(f(ln_1(x))) W_proj_t^T) + b_proj
//   x = x + g(gelu(f(ln_2(x)) W_fc_t^T + b_fc_t) W_mlp_proj_t^T) + b_mlp_proj
//
// The replicated parameters get the same gradient on every tp rank (f's
// backward allreduce makes the LayerNorms' input gradient whole), so the
// data-parallel reduction treats them like any other.
//
// Sequence parallelism (Megatron-LM's, Korthikanti et al. 2022), when asked
// for: between the tensor-parallel regions (the LayerNorms, the residual
// stream, the output projections' biases) each tp rank holds only its
// T / S positions of the sequence, so those activations take 1/S of the
// memory; f becomes an all-gather along the sequence (its backward a
// reduce-scatter) and g a reduce-scatter (its backward an all-gather): the
// same bytes on the wire as the two allreduces they replace. The
// replicated parameters used in the sequence-parallel region see only
// their rank's positions, so their gradients are summed over the tp group
// (CopyToTensorParallel applied to the parameters themselves, packed into
// one vector: one allreduce per block backward).
//
//   x_t = x_t + rs(attn(ag(ln_1(x_t))) W_proj_t^T) + b_proj      (x_t: rank t's positions)
//
// Dropout (model.dropout > 0, training) does not depend on the layout: each
// of the block's three dropouts (attention probabilities, after the
// attention's and the MLP's output projection) draws the noise of the whole
// tensor as F::dropout does on one process (bernoulli(1 - p) / (1 - p) of
// the whole shape, from the default generator) and keeps this rank's part
// (its heads, or under sequence parallelism its positions). Every rank of a
// tp group holds the generator state of its data-parallel rank (the trainer
// seeds the dropout stream by it), so each draws what the unsplit model
// draws, in the same order, and the masks are one process's bit for bit.
// Float32 only: bf16 is not built yet. This header includes LibTorch.
//
// Thread-safety: one thread per module, as trainer/model.h; the communicator
// is the tp group's and is used only from that thread.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/comm/communicator.h"
#include "trainer/config.h"

namespace holdfast {

// Megatron's f: the identity forward, the gradient allreduced over `tp` backward.
torch::Tensor CopyToTensorParallel(const torch::Tensor& x, Communicator* tp);
// Megatron's g: allreduced over `tp` forward, the identity backward.
torch::Tensor ReduceFromTensorParallel(const torch::Tensor& x, Communicator* tp);

// Sequence parallelism's collectives over `tp`, on [B, T, C] activations split
// along T (dim 1) into `tp->world_size()` equal parts in rank order:
// SplitSequence keeps this rank's part (backward: the parts' gradients
// all-gathered); GatherSequence all-gathers the parts into [B, T, C]
// (backward: the gradient reduce-scattered when `reduce_grad`, as before a
// column-parallel product whose every rank contributes to it; else this
// rank's part of it, for a replicated consumer whose gradient is the same on
// every rank); ReduceScatterSequence sums the ranks' [B, T, C] and keeps
// this rank's part (backward: all-gather). A T that does not split is a
// c10::Error naming it. Identities for a group of one.
torch::Tensor SplitSequence(const torch::Tensor& x, Communicator* tp);
torch::Tensor GatherSequence(const torch::Tensor& x, Communicator* tp, bool reduce_grad);
torch::Tensor ReduceScatterSequence(const torch::Tensor& x, Communicator* tp);

// Tp rank `rank` of `size`'s part of a full block parameter named as in
// BlockImpl ("attn.c_attn.weight", "mlp.c_fc.bias", "ln_1.weight", ...): a
// copy for split parameters, the tensor itself for replicated ones. Applied
// to a full gradient it gives what the shard's gradient must be.
// kInvalidArgument for an unknown name or a shape that does not split.
Result<torch::Tensor> TensorParallelShardOf(const std::string& name, const torch::Tensor& full, int rank, int size);

// The same for a parameter of a whole GptImpl: "h.<i>.<block name>" by the
// block's rule, everything else (wte, wpe, ln_f) replicated. With one rank
// (size 1) any parameter is its own whole (an expert too); so is one part
// for GptTensorParallelFullOf.
Result<torch::Tensor> GptTensorParallelShardOf(const std::string& name, const torch::Tensor& full, int rank, int size);
// Whether a GptImpl parameter is split over the group (a shard on each
// rank) rather than replicated.
bool GptTensorParallelSplits(const std::string& name);
// The inverse: the whole parameter from every rank's part (parts[r] = rank
// r's, GptTensorParallelShardOf's layout); a replicated one is parts[0].
// kInvalidArgument when the parts do not fit together.
Result<torch::Tensor> GptTensorParallelFullOf(const std::string& name, const std::vector<torch::Tensor>& parts);

// Copies into every parameter of `mine` its part (`part_of(name, full's
// tensor)`) of the same-named parameter of `full`; kInvalidArgument naming
// a parameter `full` lacks or whose part does not fit.
using PartOf = std::function<Result<torch::Tensor>(const std::string&, const torch::Tensor&)>;
Status CopyParts(const torch::nn::Module& full, torch::nn::Module& mine, const PartOf& part_of);

class ParallelBlockImpl : public torch::nn::Module {
 public:
  // kInvalidArgument when cfg cannot be split over tp->world_size() ranks
  // (n_head and 4 * n_embd must divide) or asks for what is not built yet
  // (experts). `tp` is not owned and must outlive the module.
  // `sequence_parallel`: forward takes and returns this rank's positions
  // ([B, T / S, C], SplitSequence's part) instead of the whole sequence.
  static Result<std::shared_ptr<ParallelBlockImpl>> Create(const ModelConfig& cfg, Communicator* tp,
                                                           bool sequence_parallel = false);

  torch::Tensor forward(torch::Tensor x);
  bool sequence_parallel() const { return sequence_; }
  // Copies this rank's part of every parameter of `full` (a BlockImpl's
  // named_parameters()) into this module's.
  Status LoadFromFull(const torch::nn::Module& full);

 private:
  ParallelBlockImpl(const ModelConfig& cfg, Communicator* tp, bool sequence_parallel);
  torch::Tensor ForwardSequenceParallel(torch::Tensor x);
  // Attention over this rank's heads of qkv [B, T, 3 C / S], with dropout on
  // the probabilities when training with model.dropout > 0.
  torch::Tensor Attention(const torch::Tensor& qkv);
  // y's dropout (training, model.dropout > 0): y is the whole [B, T, C], or
  // under sequence parallelism this rank's positions of it.
  torch::Tensor Dropout(const torch::Tensor& y);
  bool dropping() const { return cfg_.dropout > 0 && is_training(); }
  ModelConfig cfg_;
  Communicator* tp_;
  bool sequence_;
  int64_t local_heads_;
  torch::Tensor ln_1_w_, ln_1_b_, ln_2_w_, ln_2_b_;
  torch::Tensor attn_w_, attn_b_, attn_proj_w_, attn_proj_b_;
  torch::Tensor fc_w_, fc_b_, mlp_proj_w_, mlp_proj_b_;
  torch::Tensor mask_;
};

}  // namespace holdfast
