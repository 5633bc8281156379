#include "trainer/model.h"

#include <cmath>
#include <limits>

namespace holdfast {

namespace F = torch::nn::functional;

namespace {
// LibTorch 2.x has fused scaled-dot-product attention (flash / memory-efficient
// kernels on CUDA); 1.x does not.
#if defined(TORCH_VERSION_MAJOR) && TORCH_VERSION_MAJOR >= 2
constexpr bool kHaveSdpa = true;
#else
constexpr bool kHaveSdpa = false;
#endif

// Causal attention on the packed c_attn output, as one autograd node.
//
// LibTorch's eager path (and nanoGPT's) copies q, k and v into [B*nh, T, hs],
// materialises the full [T, T] scores with the mask added, and copies y back
// from [B, nh, T, hs] — and the same again backward. Here each head's q, k, v
// are read in place as strided [B, T, hs] views of qkv (BLAS takes the row
// stride 3C directly), y is written in place into [B, T, C], and queries go in
// blocks of kAttentionBlock rows: block [i0, i1) needs keys [0, i1) only, so
// the fully masked area right of the diagonal block is never computed, forward
// or backward (T = 256: 37.5% of the score GEMMs and softmax). Per row the math
// is the same as softmax(scale q k^T + mask) v: masked scores are exp(-inf) = 0.
class CausalAttentionFunction : public torch::autograd::Function<CausalAttentionFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& qkv, int64_t n_head,
                               const torch::Tensor& mask, int64_t block) {
    const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, hs = C / n_head;
    const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
    auto y = torch::empty({B, T, C}, qkv.options());
    std::vector<torch::Tensor> saved{qkv};
    for (int64_t h = 0; h < n_head; ++h) {
      auto q = qkv.narrow(2, h * hs, hs);
      auto k = qkv.narrow(2, C + h * hs, hs);
      auto v = qkv.narrow(2, 2 * C + h * hs, hs);
      auto yh = y.narrow(2, h * hs, hs);
      for (int64_t i0 = 0; i0 < T; i0 += block) {
        const int64_t n = std::min(block, T - i0), keys = i0 + n;
        auto s = torch::baddbmm(mask.narrow(0, i0, n).narrow(1, 0, keys), q.narrow(1, i0, n),
                                k.narrow(1, 0, keys).transpose(1, 2), /*beta=*/1.0, scale);
        auto p = torch::softmax(s, -1);
        auto yb = yh.narrow(1, i0, n);
        torch::bmm_out(yb, p, v.narrow(1, 0, keys));
        saved.push_back(p);
      }
    }
    ctx->save_for_backward(saved);
    ctx->saved_data["n_head"] = n_head;
    ctx->saved_data["block"] = block;
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& qkv = saved[0];
    const int64_t n_head = ctx->saved_data["n_head"].toInt();
    const int64_t block = ctx->saved_data["block"].toInt();
    const int64_t T = qkv.size(1), C = qkv.size(2) / 3, hs = C / n_head;
    const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
    auto dy = grads[0].contiguous();
    auto dqkv = torch::zeros_like(qkv);
    size_t next = 1;
    for (int64_t h = 0; h < n_head; ++h) {
      auto q = qkv.narrow(2, h * hs, hs);
      auto k = qkv.narrow(2, C + h * hs, hs);
      auto v = qkv.narrow(2, 2 * C + h * hs, hs);
      auto dq = dqkv.narrow(2, h * hs, hs);
      auto dk = dqkv.narrow(2, C + h * hs, hs);
      auto dv = dqkv.narrow(2, 2 * C + h * hs, hs);
      auto dyh = dy.narrow(2, h * hs, hs);
      for (int64_t i0 = 0; i0 < T; i0 += block) {
        const int64_t n = std::min(block, T - i0), keys = i0 + n;
        const torch::Tensor& p = saved[next++];
        auto dyb = dyh.narrow(1, i0, n);
        dv.narrow(1, 0, keys).baddbmm_(p.transpose(1, 2), dyb);
        auto ds = torch::_softmax_backward_data(torch::bmm(dyb, v.narrow(1, 0, keys).transpose(1, 2)), p, -1,
                                                p.scalar_type());
        dq.narrow(1, i0, n).baddbmm_(ds, k.narrow(1, 0, keys), /*beta=*/1.0, scale);
        dk.narrow(1, 0, keys).baddbmm_(ds.transpose(1, 2), q.narrow(1, i0, n), /*beta=*/1.0, scale);
      }
    }
    return {dqkv, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};
}  // namespace

torch::Tensor CausalAttention(const torch::Tensor& qkv, int64_t n_head, const torch::Tensor& mask, int64_t block) {
  return CausalAttentionFunction::apply(qkv.contiguous(), n_head, mask, block);
}

torch::Tensor Project(torch::nn::Linear& layer, const torch::Tensor& x, const ComputeOptions& compute) {
  if (!compute.bf16) return layer->forward(x);
  const torch::Tensor& b = layer->bias;
  return F::linear(x.to(torch::kBFloat16), layer->weight.to(torch::kBFloat16),
                   b.defined() ? b.to(torch::kBFloat16) : torch::Tensor());
}

LayerNormImpl::LayerNormImpl(int64_t n_embd, bool bias) : n_embd_(n_embd) {
  weight_ = register_parameter("weight", torch::ones({n_embd}));
  if (bias) bias_ = register_parameter("bias", torch::zeros({n_embd}));
}

torch::Tensor LayerNormImpl::forward(const torch::Tensor& x) {
  return torch::layer_norm(x.to(torch::kFloat32), {n_embd_}, weight_, bias_, 1e-5);
}

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const ModelConfig& cfg, ComputeOptions compute)
    : n_head_(cfg.n_head), n_embd_(cfg.n_embd), dropout_(cfg.dropout), compute_(compute) {
  c_attn_ = register_module("c_attn", torch::nn::Linear(torch::nn::LinearOptions(cfg.n_embd, 3 * cfg.n_embd).bias(cfg.bias)));
  c_proj_ = register_module("c_proj", torch::nn::Linear(torch::nn::LinearOptions(cfg.n_embd, cfg.n_embd).bias(cfg.bias)));
  mask_ = register_buffer(
      "mask", torch::full({cfg.block_size, cfg.block_size}, -std::numeric_limits<float>::infinity()).triu(1));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  auto qkv = Project(c_attn_, x, compute_);  // [B, T, 3C]: q | k | v, each head a slice of hs columns
  torch::Tensor y;
  if (kHaveSdpa && qkv.is_cuda()) {
#if defined(TORCH_VERSION_MAJOR) && TORCH_VERSION_MAJOR >= 2
    // Fused attention (flash / memory-efficient) in the compute dtype, as nanoGPT on PyTorch 2.
    const int64_t hs = C / n_head_;
    auto parts = qkv.split(n_embd_, 2);
    auto q = parts[0].view({B, T, n_head_, hs}).transpose(1, 2);
    auto k = parts[1].view({B, T, n_head_, hs}).transpose(1, 2);
    auto v = parts[2].view({B, T, n_head_, hs}).transpose(1, 2);
    const double p = dropout_ > 0 && is_training() ? dropout_ : 0.0;
    y = torch::scaled_dot_product_attention(q, k, v, {}, p, /*is_causal=*/true);
    y = y.transpose(1, 2).contiguous().view({B, T, C});
#endif
  } else if (!(dropout_ > 0 && is_training())) {
    if (compute_.bf16) qkv = qkv.to(torch::kFloat32);  // no fused kernel here: attention in float32
    y = CausalAttention(qkv, n_head_, mask_);
  } else {
    // Attention dropout needs the whole probability matrix: the plain path.
    if (compute_.bf16) qkv = qkv.to(torch::kFloat32);
    const int64_t hs = C / n_head_;
    auto parts = qkv.split(n_embd_, 2);
    auto q = parts[0].view({B, T, n_head_, hs}).transpose(1, 2);
    auto k = parts[1].view({B, T, n_head_, hs}).transpose(1, 2);
    auto v = parts[2].view({B, T, n_head_, hs}).transpose(1, 2);
    const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
    auto att = torch::baddbmm(mask_.slice(0, 0, T).slice(1, 0, T), q.reshape({B * n_head_, T, hs}),
                              k.reshape({B * n_head_, T, hs}).transpose(1, 2), /*beta=*/1.0, scale);
    att = torch::softmax(att, -1).view({B, n_head_, T, T});
    att = F::dropout(att, F::DropoutFuncOptions().p(dropout_).training(true));
    y = torch::matmul(att, v).transpose(1, 2).contiguous().view({B, T, C});
  }
  y = Project(c_proj_, y, compute_);
  if (dropout_ > 0 && is_training()) y = F::dropout(y, F::DropoutFuncOptions().p(dropout_).training(true));
  return y;
}

MlpImpl::MlpImpl(const ModelConfig& cfg, ComputeOptions compute) : dropout_(cfg.dropout), compute_(compute) {
  c_fc_ = register_module("c_fc", torch::nn::Linear(torch::nn::LinearOptions(cfg.n_embd, 4 * cfg.n_embd).bias(cfg.bias)));
  c_proj_ = register_module("c_proj", torch::nn::Linear(torch::nn::LinearOptions(4 * cfg.n_embd, cfg.n_embd).bias(cfg.bias)));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  auto y = Project(c_proj_, torch::gelu(Project(c_fc_, x, compute_)), compute_);
  if (dropout_ > 0 && is_training()) y = F::dropout(y, F::DropoutFuncOptions().p(dropout_).training(true));
  return y;
}

BlockImpl::BlockImpl(const ModelConfig& cfg, ComputeOptions compute) {
  ln_1_ = register_module("ln_1", LayerNorm(cfg.n_embd, cfg.bias));
  attn_ = register_module("attn", CausalSelfAttention(cfg, compute));
  ln_2_ = register_module("ln_2", LayerNorm(cfg.n_embd, cfg.bias));
  mlp_ = register_module("mlp", Mlp(cfg, compute));
}

torch::Tensor BlockImpl::forward(torch::Tensor x) {
  x = x + attn_(ln_1_(x));
  x = x + mlp_(ln_2_(x));
  return x;
}

GptImpl::GptImpl(const ModelConfig& cfg, ComputeOptions compute) : cfg_(cfg), compute_(compute) {
  wte_ = register_module("wte", torch::nn::Embedding(cfg.vocab_size, cfg.n_embd));
  wpe_ = register_module("wpe", torch::nn::Embedding(cfg.block_size, cfg.n_embd));
  h_ = register_module("h", torch::nn::ModuleList());
  for (int i = 0; i < cfg.n_layer; ++i) h_->push_back(Block(cfg, compute));
  ln_f_ = register_module("ln_f", LayerNorm(cfg.n_embd, cfg.bias));
  pos_ = register_buffer("pos", torch::arange(cfg.block_size, torch::kLong));
}

void GptImpl::InitWeights() {
  torch::NoGradGuard no_grad;
  const double proj_std = 0.02 / std::sqrt(2.0 * cfg_.n_layer);
  for (auto& item : named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor& p = item.value();
    const bool is_bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    const bool is_ln = name.find("ln_") != std::string::npos;
    if (is_ln) {
      if (is_bias) p.zero_(); else p.fill_(1.0);
    } else if (is_bias) {
      p.zero_();
    } else if (name.find("c_proj.weight") != std::string::npos) {
      p.normal_(0.0, proj_std);
    } else {
      p.normal_(0.0, 0.02);
    }
  }
}

torch::Tensor GptImpl::forward(const torch::Tensor& idx, const torch::Tensor& targets) {
  const int64_t T = idx.size(1);
  auto x = wte_(idx) + wpe_(pos_.slice(0, 0, T));
  if (cfg_.dropout > 0 && is_training()) x = F::dropout(x, F::DropoutFuncOptions().p(cfg_.dropout).training(true));
  for (const auto& block : *h_) x = block->as<Block>()->forward(x);
  x = ln_f_(x);
  torch::Tensor logits;  // tied lm_head
  if (compute_.bf16) {
    logits = F::linear(x.to(torch::kBFloat16), wte_->weight.to(torch::kBFloat16)).to(torch::kFloat32);
  } else {
    logits = torch::matmul(x, wte_->weight.t());
  }
  return F::cross_entropy(logits.view({-1, logits.size(-1)}), targets.view({-1}),
                          F::CrossEntropyFuncOptions().ignore_index(-1));
}

}  // namespace holdfast
