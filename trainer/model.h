// Gpt: the decoder-only transformer holdfast-train trains (nanoGPT layout).
//
// Parameter names follow nanoGPT ("wte.weight", "h.0.attn.c_attn.weight", ...)
// so that a Python reference can load the same weights by name; lm_head is tied
// to wte. This header includes LibTorch: only trainer/*.cc that need the module
// include it. Not thread-safe: one thread owns the module (training, or
// decoding with a KvCache).
#pragma once

#include <torch/torch.h>

#include "common/status.h"
#include "trainer/config.h"

namespace holdfast {

class Communicator;

// Rows of queries per block in CausalAttention: big enough for BLAS to run at
// speed, small enough that the skipped masked area matters (bench/: T = 256).
inline constexpr int64_t kAttentionBlock = 64;

// softmax(q k^T / sqrt(hs) + mask) v for every head, from the packed c_attn
// output qkv [B, T, 3C] (q | k | v, head h in columns [h*hs, (h+1)*hs) of each);
// mask is the additive causal mask [>=T, >=T]. Returns y [B, T, C] with head h
// in columns [h*hs, (h+1)*hs). One autograd node; no copies of q, k, v or y,
// and the masked area right of each block's diagonal is never computed.
torch::Tensor CausalAttention(const torch::Tensor& qkv, int64_t n_head, const torch::Tensor& mask,
                              int64_t block = kAttentionBlock);

// How the model computes. bf16: every matmul (the linear layers, attention's
// two products, the tied lm_head) in bfloat16 on float32 master weights, the
// rest (LayerNorm, softmax, cross-entropy, the residual stream) in float32:
// torch.autocast's split, written out, because autocast's C++ API differs
// between the LibTorch versions this builds against. Where LibTorch has no
// fused attention for the device (1.x, or the CPU), attention runs in float32.
struct ComputeOptions {
  bool bf16 = false;
};

// A linear layer's forward under ComputeOptions.
torch::Tensor Project(torch::nn::Linear& layer, const torch::Tensor& x, const ComputeOptions& compute);

// nanoGPT's LayerNorm: a weight, and a bias only when model.bias is true
// (LibTorch 1.x's LayerNorm cannot drop the bias alone).
class LayerNormImpl : public torch::nn::Module {
 public:
  LayerNormImpl(int64_t n_embd, bool bias);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::Tensor weight_;
  torch::Tensor bias_;  // undefined without bias
  int64_t n_embd_;
};
TORCH_MODULE(LayerNorm);

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  CausalSelfAttentionImpl(const ModelConfig& cfg, ComputeOptions compute);
  torch::Tensor forward(const torch::Tensor& x);
  // Incremental decoding (no dropout, attention in float32): x [B, n, C] holds
  // the inputs of cache slots [start, start + n); their keys and values are
  // written into k, v ([B, n_head, capacity, hs]) and the queries attend over
  // slots [0, start + n). mask: additive, broadcastable to [B, 1, n, start + n],
  // or undefined for "every key visible".
  torch::Tensor ForwardCached(const torch::Tensor& x, const torch::Tensor& k, const torch::Tensor& v, int64_t start,
                              const torch::Tensor& mask);

 private:
  int n_head_;
  int n_embd_;
  double dropout_;
  ComputeOptions compute_;
  torch::nn::Linear c_attn_{nullptr};
  torch::nn::Linear c_proj_{nullptr};
  torch::Tensor mask_;  // [T, T] additive causal mask (0 / -inf); a buffer, not a parameter
};
TORCH_MODULE(CausalSelfAttention);

class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(const ModelConfig& cfg, ComputeOptions compute);
  torch::Tensor forward(const torch::Tensor& x);
  // forward without dropout whatever the module's mode (incremental decoding).
  torch::Tensor ForwardNoDropout(const torch::Tensor& x);

 private:
  double dropout_;
  ComputeOptions compute_;
  torch::nn::Linear c_fc_{nullptr};
  torch::nn::Linear c_proj_{nullptr};
};
TORCH_MODULE(Mlp);

class MoeMlpImpl;

class BlockImpl : public torch::nn::Module {
 public:
  // With cfg.moe.experts > 0 the MLP is a mixture of experts (trainer/moe.h),
  // computed over `expert_parallel` (not owned; null or a group of one: every
  // expert here), holding every expert's parameters or, with
  // hold_every_expert false, only this rank's experts'.
  BlockImpl(const ModelConfig& cfg, ComputeOptions compute, Communicator* expert_parallel = nullptr,
            bool hold_every_expert = true);
  torch::Tensor forward(torch::Tensor x);
  // The last forward's load-balancing loss of the MoE MLP; undefined for a dense one.
  torch::Tensor aux_loss() const;
  // forward with CausalSelfAttentionImpl::ForwardCached's attention.
  torch::Tensor ForwardCached(torch::Tensor x, const torch::Tensor& k, const torch::Tensor& v, int64_t start,
                              const torch::Tensor& mask);

 private:
  LayerNorm ln_1_{nullptr};
  CausalSelfAttention attn_{nullptr};
  LayerNorm ln_2_{nullptr};
  Mlp mlp_{nullptr};                  // dense
  std::shared_ptr<MoeMlpImpl> moe_;  // or mixture of experts
};
TORCH_MODULE(Block);

// The keys and values of every layer for a batch of sequences decoded one token
// at a time (GptImpl::Prefill, GptImpl::DecodeStep). Rows may be left-padded
// (prompts of different lengths in one batch): a row's padding slots are never
// attended to and its positions count from its first real token. Owned by one
// caller; not thread-safe. Tensors live on the model's device, in float32.
class KvCache {
 public:
  int64_t batch() const { return batch_; }
  // Slots filled so far (padding included); the next token goes to slot length().
  int64_t length() const { return length_; }
  // Slots allocated by Prefill: length() never exceeds it.
  int64_t capacity() const { return capacity_; }

  // Keeps rows `rows` (int64 [B'], indexes into the current batch, repeats
  // allowed): drops finished sequences, or fans one prefilled prompt out to B' rows.
  void Select(const torch::Tensor& rows);

 private:
  friend class GptImpl;
  std::vector<torch::Tensor> k_, v_;  // per layer [B, n_head, capacity, hs]
  torch::Tensor pad_;                 // int64 [B]: left-padding slots per row; undefined when none
  torch::Tensor key_mask_;            // float [B, 1, 1, capacity]: -inf on padding slots; undefined when none
  int64_t batch_ = 0;
  int64_t length_ = 0;
  int64_t capacity_ = 0;
};

class GptImpl : public torch::nn::Module {
 public:
  // `tensor_parallel` (not owned; null or a group of one = none): the blocks
  // are split over that group (trainer/tensor_parallel.h), the embeddings and
  // ln_f replicated. A split model takes its weights from a full one
  // (LoadFromFull); its incremental decoding is not built yet (c10::Error).
  // A config that does not split is a c10::Error naming it
  // (ParallelBlockImpl::Create says so as a Status first).
  // `sequence_parallel` (with a tp group): the blocks run sequence parallel,
  // each tp rank holding its T / S positions between the embeddings and
  // ln_f (trainer/tensor_parallel.h); sequences must split evenly.
  // `expert_parallel` (with cfg.moe.experts > 0): the MoE blocks' experts
  // computed over that group; every expert's parameters held here, or with
  // hold_every_expert false only this rank's (trainer/moe.h: rank r of EP
  // holds experts [r*E/EP, (r+1)*E/EP) of each block), which then takes its
  // weights from a model holding them all (LoadFromFull).
  explicit GptImpl(const ModelConfig& cfg, ComputeOptions compute = {}, Communicator* tensor_parallel = nullptr,
                   bool sequence_parallel = false, Communicator* expert_parallel = nullptr,
                   bool hold_every_expert = true);

  // idx, targets: int64 [B, T]. Returns the mean cross-entropy over targets
  // != -1; for a mixture-of-experts model in training mode plus
  // moe.aux_loss_coef x the sum of its blocks' load-balancing losses.
  torch::Tensor forward(const torch::Tensor& idx, const torch::Tensor& targets);
  // The sum of the blocks' load-balancing losses of the last training
  // forward (0 for a dense model).
  double last_aux_loss() const;
  // idx: int64 [B, T]. The next-token logits, float32 [B, T, vocab_size]
  // (what forward's cross-entropy reads): the sequence-level objectives (DPO,
  // GRPO) take log-probabilities of chosen tokens from these.
  torch::Tensor Logits(const torch::Tensor& idx);
  // A reward model's scores (model.reward_head): idx int64 [B, T], last int64
  // [B] the position of each row's last token. The scalar head on the final
  // LayerNorm's output there, float32 [B]. Differentiable. c10::Error without
  // the head.
  torch::Tensor Rewards(const torch::Tensor& idx, const torch::Tensor& last);

  // Incremental decoding, for rollouts and evaluation: no autograd, no dropout
  // whatever the module's mode, the same parameters and (within float32
  // rounding) the same logits as Logits() over the whole sequence.
  //
  // Prefill: idx int64 [B, T], the prompts; row b left-padded with pad[b]
  // tokens of any value when pad (int64 [B]) is given. Starts *cache afresh with
  // room for `capacity` slots (T <= capacity <= block_size; 0 = T) and returns
  // the logits after each row's last token, float32 [B, vocab_size].
  torch::Tensor Prefill(const torch::Tensor& idx, KvCache* cache, int64_t capacity = 0,
                        const torch::Tensor& pad = {});
  // DecodeStep: tokens int64 [B] (or [B, 1]), one more token per row of *cache,
  // at slot cache->length() < cache->capacity(). Returns float32 [B, vocab_size].
  // Positions past block_size are an error (c10::Error naming the limit).
  torch::Tensor DecodeStep(const torch::Tensor& tokens, KvCache* cache);

  // nanoGPT's init: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)), zero biases.
  // Draws from the default generator, so torch::manual_seed fixes it.
  void InitWeights();

  const ModelConfig& config() const { return cfg_; }
  bool tensor_parallel() const { return tp_ != nullptr; }
  // This model's part of every parameter of `full` (a GptImpl of the same
  // config, not split): replicated ones copied, split ones sliced
  // (TensorParallelShardOf). Also for an unsplit model (a plain copy).
  Status LoadFromFull(const GptImpl& full);

 private:
  ModelConfig cfg_;
  ComputeOptions compute_;
  Communicator* tp_ = nullptr;  // set only for a group of 2 or more
  bool sequence_ = false;        // sequence parallel over tp_
  Communicator* ep_ = nullptr;  // the MoE blocks' expert-parallel group (2 or more)
  torch::Tensor last_aux_;
  torch::nn::Embedding wte_{nullptr};
  torch::nn::Embedding wpe_{nullptr};
  torch::nn::ModuleList h_{nullptr};
  LayerNorm ln_f_{nullptr};
  torch::nn::Linear reward_head_{nullptr};  // model.reward_head only
  torch::Tensor pos_;  // arange(block_size), a buffer (moves with the module)

  // The final LayerNorm's output of every position, [B, T, C] (what the
  // tied lm_head and the reward head read).
  torch::Tensor Features(const torch::Tensor& idx);
  // The decode path's shared tail: blocks over x [B, n, C] at cache slots
  // [start, start + n), then ln_f and the tied lm_head on the last position.
  torch::Tensor RunCached(torch::Tensor x, KvCache* cache, int64_t start, const torch::Tensor& mask);
};
TORCH_MODULE(Gpt);

}  // namespace holdfast
