#include "trainer/model.h"

#include <cmath>
#include <limits>

#include "trainer/comm/communicator.h"
#include "trainer/moe.h"
#include "trainer/tensor_parallel.h"

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

torch::Tensor CausalSelfAttentionImpl::ForwardCached(const torch::Tensor& x, const torch::Tensor& k,
                                                     const torch::Tensor& v, int64_t start, const torch::Tensor& mask) {
  const int64_t B = x.size(0), n = x.size(1), C = x.size(2), hs = C / n_head_;
  auto qkv = Project(c_attn_, x, compute_).to(torch::kFloat32);  // attention in float32, as forward off CUDA
  auto parts = qkv.split(n_embd_, 2);
  auto heads = [&](const torch::Tensor& t) { return t.view({B, n, n_head_, hs}).transpose(1, 2); };
  k.narrow(2, start, n).copy_(heads(parts[1]));
  v.narrow(2, start, n).copy_(heads(parts[2]));
  const int64_t keys = start + n;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  auto att = torch::matmul(heads(parts[0]), k.narrow(2, 0, keys).transpose(-2, -1)) * scale;  // [B, nh, n, keys]
  if (mask.defined()) att = att + mask;
  att = torch::softmax(att, -1);
  auto y = torch::matmul(att, v.narrow(2, 0, keys)).transpose(1, 2).reshape({B, n, C});
  return Project(c_proj_, y, compute_);
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

torch::Tensor MlpImpl::ForwardNoDropout(const torch::Tensor& x) {
  return Project(c_proj_, torch::gelu(Project(c_fc_, x, compute_)), compute_);
}

BlockImpl::BlockImpl(const ModelConfig& cfg, ComputeOptions compute, Communicator* expert_parallel,
                     bool hold_every_expert) {
  ln_1_ = register_module("ln_1", LayerNorm(cfg.n_embd, cfg.bias));
  attn_ = register_module("attn", CausalSelfAttention(cfg, compute));
  ln_2_ = register_module("ln_2", LayerNorm(cfg.n_embd, cfg.bias));
  if (cfg.moe.experts > 0) {
    Result<std::shared_ptr<MoeMlpImpl>> moe =
        MoeMlpImpl::Create(cfg, cfg.moe, compute, expert_parallel, hold_every_expert);
    TORCH_CHECK(moe.ok(), moe.status().ToString());
    moe_ = register_module("mlp", *moe);
  } else {
    mlp_ = register_module("mlp", Mlp(cfg, compute));
  }
}

torch::Tensor BlockImpl::forward(torch::Tensor x) {
  x = x + attn_(ln_1_(x));
  x = x + (moe_ ? moe_->forward(ln_2_(x)) : mlp_(ln_2_(x)));
  return x;
}

torch::Tensor BlockImpl::aux_loss() const { return moe_ ? moe_->aux_loss() : torch::Tensor(); }

torch::Tensor BlockImpl::ForwardCached(torch::Tensor x, const torch::Tensor& k, const torch::Tensor& v,
                                       int64_t start, const torch::Tensor& mask) {
  x = x + attn_->ForwardCached(ln_1_(x), k, v, start, mask);
  x = x + (moe_ ? moe_->forward(ln_2_(x)) : mlp_->ForwardNoDropout(ln_2_(x)));
  return x;
}

void KvCache::Select(const torch::Tensor& rows) {
  TORCH_CHECK(batch_ > 0, "KvCache::Select: the cache is empty; call GptImpl::Prefill first");
  TORCH_CHECK(rows.dim() == 1 && rows.numel() > 0, "KvCache::Select: rows must be int64 [B'] with B' >= 1, got ",
              rows.sizes());
  auto r = rows.to(k_.front().device(), torch::kLong);
  TORCH_CHECK(r.min().item<int64_t>() >= 0 && r.max().item<int64_t>() < batch_, "KvCache::Select: rows must be in [0, ",
              batch_, ")");
  for (auto& t : k_) t = t.index_select(0, r);
  for (auto& t : v_) t = t.index_select(0, r);
  if (pad_.defined()) {
    pad_ = pad_.index_select(0, r);
    key_mask_ = key_mask_.index_select(0, r);
  }
  batch_ = r.size(0);
}

GptImpl::GptImpl(const ModelConfig& cfg, ComputeOptions compute, Communicator* tensor_parallel,
                 bool sequence_parallel, Communicator* expert_parallel, bool hold_every_expert)
    : cfg_(cfg), compute_(compute),
      tp_(tensor_parallel != nullptr && tensor_parallel->world_size() > 1 ? tensor_parallel : nullptr),
      sequence_(sequence_parallel && tp_ != nullptr),
      ep_(expert_parallel != nullptr && expert_parallel->world_size() > 1 ? expert_parallel : nullptr) {
  TORCH_CHECK(cfg.moe.experts == 0 || tp_ == nullptr,
              "mixture-of-experts blocks are not split over a tensor-parallel group yet");
  TORCH_CHECK(tp_ == nullptr || !compute.bf16, "tensor parallelism runs in float32 for now: set train.precision = fp32");
  wte_ = register_module("wte", torch::nn::Embedding(cfg.vocab_size, cfg.n_embd));
  wpe_ = register_module("wpe", torch::nn::Embedding(cfg.block_size, cfg.n_embd));
  h_ = register_module("h", torch::nn::ModuleList());
  for (int i = 0; i < cfg.n_layer; ++i) {
    if (tp_ == nullptr) {
      h_->push_back(Block(cfg, compute, ep_, hold_every_expert));
      continue;
    }
    Result<std::shared_ptr<ParallelBlockImpl>> block = ParallelBlockImpl::Create(cfg, tp_, sequence_);
    TORCH_CHECK(block.ok(), block.status().ToString());
    h_->push_back(*block);
  }
  ln_f_ = register_module("ln_f", LayerNorm(cfg.n_embd, cfg.bias));
  if (cfg.reward_head) {
    TORCH_CHECK(tp_ == nullptr && ep_ == nullptr && cfg.moe.experts == 0,
                "a reward model (model.reward_head) is a dense model on one rank's parameters");
    reward_head_ = register_module("reward_head", torch::nn::Linear(torch::nn::LinearOptions(cfg.n_embd, 1)));
  }
  pos_ = register_buffer("pos", torch::arange(cfg.block_size, torch::kLong));
}

void GptImpl::InitWeights() {
  TORCH_CHECK(tp_ == nullptr, "InitWeights: a tensor-parallel model takes its weights from a full one (LoadFromFull)");
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
  auto logits = Logits(idx);
  auto loss = F::cross_entropy(logits.view({-1, logits.size(-1)}), targets.view({-1}),
                               F::CrossEntropyFuncOptions().ignore_index(-1));
  if (cfg_.moe.experts == 0 || !is_training()) return loss;
  torch::Tensor aux;  // the blocks' load-balancing losses, summed in block order
  for (const auto& block : *h_) {
    const torch::Tensor a = block->as<Block>()->aux_loss();
    aux = aux.defined() ? aux + a : a;
  }
  last_aux_ = aux.detach();
  return loss + cfg_.moe.aux_loss_coef * aux;
}

double GptImpl::last_aux_loss() const { return last_aux_.defined() ? last_aux_.item<double>() : 0.0; }

torch::Tensor GptImpl::Logits(const torch::Tensor& idx) {
  const torch::Tensor x = Features(idx);
  torch::Tensor logits;  // tied lm_head
  if (compute_.bf16) {
    logits = F::linear(x.to(torch::kBFloat16), wte_->weight.to(torch::kBFloat16)).to(torch::kFloat32);
  } else {
    logits = torch::matmul(x, wte_->weight.t());
  }
  return logits;
}

torch::Tensor GptImpl::Rewards(const torch::Tensor& idx, const torch::Tensor& last) {
  TORCH_CHECK(!reward_head_.is_empty(), "Rewards: the model has no reward head (model.reward_head = false)");
  const torch::Tensor x = Features(idx);  // [B, T, C]
  const torch::Tensor index = last.to(x.device()).view({-1, 1, 1}).expand({x.size(0), 1, x.size(2)});
  const torch::Tensor at_last = x.gather(1, index).squeeze(1);  // [B, C]
  return reward_head_(at_last.to(torch::kFloat32)).squeeze(-1);
}

torch::Tensor GptImpl::Features(const torch::Tensor& idx) {
  const int64_t T = idx.size(1);
  auto x = wte_(idx) + wpe_(pos_.slice(0, 0, T));
  if (cfg_.dropout > 0 && is_training()) x = F::dropout(x, F::DropoutFuncOptions().p(cfg_.dropout).training(true));
  if (sequence_) x = SplitSequence(x, tp_);
  for (const auto& block : *h_) {
    x = tp_ != nullptr ? block->as<ParallelBlockImpl>()->forward(x) : block->as<Block>()->forward(x);
  }
  if (sequence_) x = GatherSequence(x, tp_, /*reduce_grad=*/false);  // ln_f and the head replicated
  return ln_f_(x);
}

Status GptImpl::LoadFromFull(const GptImpl& full) {
  return CopyParts(full, *this, [this](const std::string& name, const torch::Tensor& t) -> Result<torch::Tensor> {
    if (tp_ == nullptr) return t;
    return GptTensorParallelShardOf(name, t, tp_->rank(), tp_->world_size());
  }).WithContext("LoadFromFull");
}

torch::Tensor GptImpl::Prefill(const torch::Tensor& idx, KvCache* cache, int64_t capacity, const torch::Tensor& pad) {
  TORCH_CHECK(tp_ == nullptr, "Prefill: incremental decoding of a tensor-parallel model is not built yet");
  TORCH_CHECK(ep_ == nullptr, "Prefill: incremental decoding of an expert-parallel model is not built yet");
  torch::NoGradGuard no_grad;
  TORCH_CHECK(cache != nullptr, "Prefill: cache is null");
  TORCH_CHECK(idx.dim() == 2 && idx.size(0) >= 1 && idx.size(1) >= 1,
              "Prefill: idx must be int64 [B, T] with B, T >= 1, got ", idx.sizes());
  const int64_t B = idx.size(0), T = idx.size(1);
  if (capacity == 0) capacity = T;
  TORCH_CHECK(T <= cfg_.block_size, "Prefill: ", T, " prompt tokens do not fit model.block_size = ", cfg_.block_size,
              " (positions must stay < block_size); shorten the prompt");
  TORCH_CHECK(T <= capacity && capacity <= cfg_.block_size, "Prefill: capacity ", capacity, " must be in [", T,
              " (the prompt), model.block_size = ", cfg_.block_size, "]");
  const auto device = pos_.device();
  const auto slots = torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(device));
  const float inf = std::numeric_limits<float>::infinity();
  const auto float_opts = torch::TensorOptions().dtype(torch::kFloat32).device(device);

  *cache = KvCache();
  cache->batch_ = B;
  cache->capacity_ = capacity;
  torch::Tensor x, mask;
  if (pad.defined()) {
    TORCH_CHECK(pad.dim() == 1 && pad.size(0) == B, "Prefill: pad must be int64 [B = ", B, "], got ", pad.sizes());
    auto p = pad.to(device, torch::kLong);
    TORCH_CHECK(p.min().item<int64_t>() >= 0 && p.max().item<int64_t>() < T,
                "Prefill: every row needs at least one real token (pad in [0, ", T, "))");
    // Row b's positions count from its first real token; its padding slots sit at position 0.
    auto positions = (slots.unsqueeze(0) - p.unsqueeze(1)).clamp_min(0);  // [B, T]
    x = wte_(idx.to(device)) + wpe_(positions);
    // Query t sees keys j <= t that are real tokens; a padding query sees only
    // itself (a row of -inf everywhere would make its softmax NaN, and NaN
    // keys would reach real rows as 0 * NaN).
    auto j = slots.view({1, 1, T}), t = slots.view({1, T, 1});
    auto allowed = (j <= t).logical_and((j >= p.view({B, 1, 1})).logical_or(j == t));  // [B, T, T]
    mask = torch::zeros({B, T, T}, float_opts).masked_fill(allowed.logical_not(), -inf).unsqueeze(1);
    cache->pad_ = p;
    auto all_slots = torch::arange(capacity, torch::TensorOptions().dtype(torch::kLong).device(device));
    cache->key_mask_ = torch::zeros({B, capacity}, float_opts)
                           .masked_fill(all_slots.unsqueeze(0) < p.unsqueeze(1), -inf)
                           .view({B, 1, 1, capacity});
  } else {
    x = wte_(idx.to(device)) + wpe_(pos_.slice(0, 0, T));
    if (T > 1) mask = torch::full({T, T}, -inf, float_opts).triu(1);
  }
  const int64_t hs = cfg_.n_embd / cfg_.n_head;
  for (int i = 0; i < cfg_.n_layer; ++i) {
    cache->k_.push_back(torch::zeros({B, cfg_.n_head, capacity, hs}, float_opts));
    cache->v_.push_back(torch::zeros({B, cfg_.n_head, capacity, hs}, float_opts));
  }
  return RunCached(x, cache, 0, mask);
}

torch::Tensor GptImpl::DecodeStep(const torch::Tensor& tokens, KvCache* cache) {
  torch::NoGradGuard no_grad;
  TORCH_CHECK(tp_ == nullptr, "DecodeStep: incremental decoding of a tensor-parallel model is not built yet");
  TORCH_CHECK(ep_ == nullptr, "DecodeStep: incremental decoding of an expert-parallel model is not built yet");
  TORCH_CHECK(cache != nullptr && cache->batch_ > 0, "DecodeStep: the cache is empty; call Prefill first");
  const int64_t B = cache->batch_, slot = cache->length_;
  TORCH_CHECK(tokens.numel() == B && (tokens.dim() == 1 || (tokens.dim() == 2 && tokens.size(1) == 1)),
              "DecodeStep: tokens must be int64 [B = ", B, "] (one per cached row), got ", tokens.sizes());
  TORCH_CHECK(slot < cache->capacity_, "DecodeStep: slot ", slot, " is past the cache's capacity ", cache->capacity_,
              cache->capacity_ == cfg_.block_size ? " = model.block_size (positions must stay < block_size)"
                                                  : " (Prefill with a larger capacity)");
  const int64_t C = cfg_.n_embd;
  torch::Tensor positions;
  torch::Tensor mask;  // no padding: the one query sees every key so far
  if (cache->pad_.defined()) {
    positions = (slot - cache->pad_).clamp_min(0);  // [B]
    mask = cache->key_mask_.narrow(3, 0, slot + 1);
  } else {
    positions = pos_.narrow(0, slot, 1);  // [1]
  }
  const auto device = pos_.device();
  auto x = wte_(tokens.reshape({B, 1}).to(device)) + wpe_(positions).view({-1, 1, C});
  return RunCached(x, cache, slot, mask);
}

torch::Tensor GptImpl::RunCached(torch::Tensor x, KvCache* cache, int64_t start, const torch::Tensor& mask) {
  for (int i = 0; i < cfg_.n_layer; ++i) {
    x = h_[i]->as<Block>()->ForwardCached(x, cache->k_[i], cache->v_[i], start, mask);
  }
  cache->length_ = start + x.size(1);
  x = ln_f_(x.select(1, x.size(1) - 1));  // [B, C]: only the last position's logits are wanted
  if (compute_.bf16) {
    return F::linear(x.to(torch::kBFloat16), wte_->weight.to(torch::kBFloat16)).to(torch::kFloat32);
  }
  return torch::matmul(x, wte_->weight.t());
}

}  // namespace holdfast
