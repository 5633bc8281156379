// Gpt: the decoder-only transformer holdfast-train trains (nanoGPT layout).
//
// Parameter names follow nanoGPT ("wte.weight", "h.0.attn.c_attn.weight", ...)
// so that a Python reference can load the same weights by name; lm_head is tied
// to wte. This header includes LibTorch: only trainer/*.cc that need the module
// include it. Not thread-safe: one training thread owns the module.
#pragma once

#include <torch/torch.h>

#include "trainer/config.h"

namespace holdfast {

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

 private:
  double dropout_;
  ComputeOptions compute_;
  torch::nn::Linear c_fc_{nullptr};
  torch::nn::Linear c_proj_{nullptr};
};
TORCH_MODULE(Mlp);

class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(const ModelConfig& cfg, ComputeOptions compute);
  torch::Tensor forward(torch::Tensor x);

 private:
  LayerNorm ln_1_{nullptr};
  CausalSelfAttention attn_{nullptr};
  LayerNorm ln_2_{nullptr};
  Mlp mlp_{nullptr};
};
TORCH_MODULE(Block);

class GptImpl : public torch::nn::Module {
 public:
  explicit GptImpl(const ModelConfig& cfg, ComputeOptions compute = {});

  // idx, targets: int64 [B, T]. Returns the mean cross-entropy over targets != -1.
  torch::Tensor forward(const torch::Tensor& idx, const torch::Tensor& targets);

  // nanoGPT's init: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)), zero biases.
  // Draws from the default generator, so torch::manual_seed fixes it.
  void InitWeights();

  const ModelConfig& config() const { return cfg_; }

 private:
  ModelConfig cfg_;
  ComputeOptions compute_;
  torch::nn::Embedding wte_{nullptr};
  torch::nn::Embedding wpe_{nullptr};
  torch::nn::ModuleList h_{nullptr};
  LayerNorm ln_f_{nullptr};
  torch::Tensor pos_;  // arange(block_size), a buffer (moves with the module)
};
TORCH_MODULE(Gpt);

}  // namespace holdfast
