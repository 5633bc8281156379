#include "trainer/tensor_parallel.h"

#include <cstdint>
#include <limits>

#include "trainer/model.h"

namespace holdfast {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t Handle(Communicator* c) { return static_cast<int64_t>(reinterpret_cast<intptr_t>(c)); }
Communicator* FromHandle(const c10::IValue& v) {
  return reinterpret_cast<Communicator*>(static_cast<intptr_t>(v.toInt()));
}

// In place over `tp`; a failed collective (a peer gone, a timeout) is a
// c10::Error, which the trainer's step turns into its Status.
void AllreduceInPlace(torch::Tensor& t, Communicator* tp, const char* what) {
  TORCH_CHECK(t.is_contiguous() && t.scalar_type() == torch::kFloat32 && t.is_cpu(),
              "tensor parallel ", what, ": needs a contiguous float32 CPU tensor");
  Status s = tp->Allreduce(t.data_ptr<float>(), static_cast<size_t>(t.numel()), ReduceOp::kSum);
  TORCH_CHECK(s.ok(), "tensor parallel ", what, " over the tp group: ", s.ToString());
}

class CopyToTp : public torch::autograd::Function<CopyToTp> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    torch::Tensor g = grads[0].contiguous().clone();
    AllreduceInPlace(g, FromHandle(ctx->saved_data["comm"]), "backward (f)");
    return {g, torch::Tensor()};
  }
};

class ReduceFromTp : public torch::autograd::Function<ReduceFromTp> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t comm) {
    torch::Tensor y = x.contiguous().clone();
    AllreduceInPlace(y, FromHandle(c10::IValue(comm)), "forward (g)");
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) { return {grads[0], torch::Tensor()}; }
};

// Sequence parallelism's data movement. Activations are [B, T, ...]; a
// rank's part is positions [r*T/S, (r+1)*T/S). The collectives work on
// contiguous parts in rank order, so they run on sequence-major copies
// ([T, B, ...]) in fresh buffers (ReduceScatterAsync scribbles on the parts
// that are not the rank's).
std::vector<size_t> EqualCounts(int64_t part, int size) {
  return std::vector<size_t>(static_cast<size_t>(size), static_cast<size_t>(part));
}

int64_t PartLength(const torch::Tensor& whole, Communicator* tp, const char* what) {
  TORCH_CHECK(whole.dim() >= 2 && whole.scalar_type() == torch::kFloat32 && whole.is_cpu(),
              "sequence parallel ", what, ": needs a float32 CPU tensor [B, T, ...]");
  const int64_t S = tp->world_size(), T = whole.size(1);
  TORCH_CHECK(T % S == 0, "sequence parallel ", what, ": a sequence of ", T, " positions does not split over ", S,
              " tensor-parallel ranks (use sequences whose length is a multiple of dist.tensor_parallel)");
  return T / S;
}

torch::Tensor PartOfSequence(const torch::Tensor& whole, Communicator* tp, const char* what) {
  const int64_t t = PartLength(whole, tp, what);
  return whole.narrow(1, tp->rank() * t, t).clone(at::MemoryFormat::Contiguous);
}

torch::Tensor AllgatherParts(const torch::Tensor& part, Communicator* tp, const char* what) {
  TORCH_CHECK(part.dim() >= 2 && part.scalar_type() == torch::kFloat32 && part.is_cpu(),
              "sequence parallel ", what, ": needs a float32 CPU tensor [B, T, ...]");
  const int64_t S = tp->world_size(), t = part.size(1);
  std::vector<int64_t> sizes = part.transpose(0, 1).sizes().vec();
  sizes[0] *= S;
  torch::Tensor whole = torch::empty(sizes, part.options());
  whole.narrow(0, tp->rank() * t, t).copy_(part.transpose(0, 1));
  Status s = tp->AllgatherAsync(whole.data_ptr<float>(), EqualCounts(part.numel(), static_cast<int>(S)))->Wait();
  TORCH_CHECK(s.ok(), "sequence parallel ", what, " (all-gather over the tp group): ", s.ToString());
  return whole.transpose(0, 1).contiguous();
}

torch::Tensor ReduceScatterParts(const torch::Tensor& whole, Communicator* tp, const char* what) {
  const int64_t t = PartLength(whole, tp, what);
  torch::Tensor major = torch::empty(whole.transpose(0, 1).sizes(), whole.options());
  major.copy_(whole.transpose(0, 1));
  Status s = tp->ReduceScatterAsync(major.data_ptr<float>(), EqualCounts(major.numel() / tp->world_size(),
                                                                         tp->world_size()),
                                    ReduceOp::kSum)->Wait();
  TORCH_CHECK(s.ok(), "sequence parallel ", what, " (reduce-scatter over the tp group): ", s.ToString());
  return major.narrow(0, tp->rank() * t, t).transpose(0, 1).clone(at::MemoryFormat::Contiguous);
}

class SplitSeq : public torch::autograd::Function<SplitSeq> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return PartOfSequence(x, FromHandle(c10::IValue(comm)), "split");
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {AllgatherParts(grads[0], FromHandle(ctx->saved_data["comm"]), "split backward"), torch::Tensor()};
  }
};

class GatherSeq : public torch::autograd::Function<GatherSeq> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t comm, bool reduce_grad) {
    ctx->saved_data["comm"] = comm;
    ctx->saved_data["reduce"] = reduce_grad;
    return AllgatherParts(x, FromHandle(c10::IValue(comm)), "gather");
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Communicator* tp = FromHandle(ctx->saved_data["comm"]);
    torch::Tensor g = ctx->saved_data["reduce"].toBool() ? ReduceScatterParts(grads[0], tp, "gather backward")
                                                         : PartOfSequence(grads[0], tp, "gather backward");
    return {g, torch::Tensor(), torch::Tensor()};
  }
};

class ReduceScatterSeq : public torch::autograd::Function<ReduceScatterSeq> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return ReduceScatterParts(x, FromHandle(c10::IValue(comm)), "reduce-scatter");
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {AllgatherParts(grads[0], FromHandle(ctx->saved_data["comm"]), "reduce-scatter backward"),
            torch::Tensor()};
  }
};

// Megatron's f on several tensors at once (the sequence-parallel region's
// replicated parameters): copies forward; backward, their gradients packed
// into one vector, allreduced over `tp` once, and unpacked (an unused one's
// as zeros).
class SumGradsOverTp : public torch::autograd::Function<SumGradsOverTp> {
 public:
  // xs as a TensorList: autograd sees a std::vector argument as no tensor at all.
  static variable_list forward(AutogradContext* ctx, at::TensorList xs, int64_t comm) {
    ctx->saved_data["comm"] = comm;
    std::vector<int64_t> sizes;
    variable_list out;
    for (const torch::Tensor& x : xs) {
      sizes.push_back(x.numel());
      out.push_back(x.clone());
    }
    ctx->saved_data["sizes"] = sizes;
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const std::vector<int64_t> sizes = ctx->saved_data["sizes"].toIntVector();
    std::vector<torch::Tensor> flat;
    for (size_t i = 0; i < grads.size(); ++i) {
      flat.push_back(grads[i].defined() ? grads[i].reshape({-1}) : torch::zeros({sizes[i]}));
    }
    torch::Tensor packed = torch::cat(flat).contiguous();
    AllreduceInPlace(packed, FromHandle(ctx->saved_data["comm"]), "backward (f of the sequence-parallel parameters)");
    variable_list out;
    int64_t at = 0;
    for (size_t i = 0; i < grads.size(); ++i) {
      const torch::Tensor& like = grads[i].defined() ? grads[i] : torch::Tensor();
      torch::Tensor g = packed.narrow(0, at, sizes[i]).clone();
      out.push_back(like.defined() ? g.view(like.sizes()) : g);
      at += sizes[i];
    }
    out.push_back(torch::Tensor());  // comm
    return out;
  }
};

Status NotSplit(const std::string& name, const torch::Tensor& full, int size) {
  std::string shape;
  for (int64_t d : full.sizes()) shape += (shape.empty() ? "" : " x ") + std::to_string(d);
  return InvalidArgumentError("tensor parallel: " + name + " [" + shape + "] does not split over " +
                              std::to_string(size) + " ranks");
}

// A child module holding parameters, so that the names are nanoGPT's ("attn.c_attn.weight").
std::shared_ptr<torch::nn::Module> Holder(torch::nn::Module& parent, const std::string& name) {
  return parent.register_module(name, std::make_shared<torch::nn::Module>());
}

}  // namespace

torch::Tensor CopyToTensorParallel(const torch::Tensor& x, Communicator* tp) {
  return tp->world_size() == 1 ? x : CopyToTp::apply(x, Handle(tp));
}

torch::Tensor ReduceFromTensorParallel(const torch::Tensor& x, Communicator* tp) {
  return tp->world_size() == 1 ? x : ReduceFromTp::apply(x, Handle(tp));
}

torch::Tensor SplitSequence(const torch::Tensor& x, Communicator* tp) {
  return tp->world_size() == 1 ? x : SplitSeq::apply(x, Handle(tp));
}

torch::Tensor GatherSequence(const torch::Tensor& x, Communicator* tp, bool reduce_grad) {
  return tp->world_size() == 1 ? x : GatherSeq::apply(x, Handle(tp), reduce_grad);
}

torch::Tensor ReduceScatterSequence(const torch::Tensor& x, Communicator* tp) {
  return tp->world_size() == 1 ? x : ReduceScatterSeq::apply(x, Handle(tp));
}

namespace {

// How a block parameter splits: `groups` equal blocks along `dim` (q | k | v
// for c_attn), each cut into one part per rank; groups 0 = replicated.
struct SplitRule {
  int64_t dim = 0;
  int64_t groups = 0;
};

Result<SplitRule> RuleOf(const std::string& name) {
  if (name == "ln_1.weight" || name == "ln_1.bias" || name == "ln_2.weight" || name == "ln_2.bias" ||
      name == "attn.c_proj.bias" || name == "mlp.c_proj.bias") {
    return SplitRule{};
  }
  if (name == "attn.c_attn.weight" || name == "attn.c_attn.bias") return SplitRule{0, 3};
  if (name == "mlp.c_fc.weight" || name == "mlp.c_fc.bias") return SplitRule{0, 1};
  if (name == "attn.c_proj.weight" || name == "mlp.c_proj.weight") return SplitRule{1, 1};
  return InvalidArgumentError("tensor parallel: no rule for the block parameter '" + name + "'");
}

// The block's own name of a GptImpl parameter ("h.<i>.attn.c_attn.weight" ->
// "attn.c_attn.weight"), or "" for wte, wpe, ln_f (replicated).
std::string BlockName(const std::string& name) {
  const size_t dot = name.find('.', 2);
  if (name.rfind("h.", 0) != 0 || dot == std::string::npos) return "";
  return name.substr(dot + 1);
}

}  // namespace

Result<torch::Tensor> TensorParallelShardOf(const std::string& name, const torch::Tensor& full, int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size) {
    return InvalidArgumentError("tensor parallel: rank " + std::to_string(rank) + " of " + std::to_string(size));
  }
  HF_ASSIGN_OR_RETURN(SplitRule rule, RuleOf(name));
  if (rule.groups == 0) return full;  // replicated
  torch::NoGradGuard no_grad;
  const int64_t dim = rule.dim, groups = rule.groups;
  if (full.dim() <= dim || full.size(dim) % (groups * size) != 0) return NotSplit(name, full, size);
  const int64_t block = full.size(dim) / groups, part = block / size;
  std::vector<torch::Tensor> parts;
  for (int64_t g = 0; g < groups; ++g) parts.push_back(full.narrow(dim, g * block + rank * part, part));
  return torch::cat(parts, dim).contiguous();
}

bool GptTensorParallelSplits(const std::string& name) {
  const std::string block = BlockName(name);
  if (block.empty()) return false;
  Result<SplitRule> rule = RuleOf(block);
  return rule.ok() && rule->groups > 0;
}

Result<torch::Tensor> GptTensorParallelFullOf(const std::string& name, const std::vector<torch::Tensor>& parts) {
  if (parts.empty()) return InvalidArgumentError("tensor parallel: no parts of " + name);
  if (parts.size() == 1) return parts[0];  // one tp rank: nothing was split (an expert, a layout without tp)
  const std::string block = BlockName(name);
  if (block.empty()) return parts[0];
  HF_ASSIGN_OR_RETURN(SplitRule rule, RuleOf(block));
  if (rule.groups == 0) return parts[0];
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> pieces;
  for (int64_t g = 0; g < rule.groups; ++g) {
    for (const torch::Tensor& p : parts) {
      if (p.dim() <= rule.dim || p.size(rule.dim) % rule.groups != 0 || !p.sizes().equals(parts[0].sizes())) {
        return InvalidArgumentError("tensor parallel: the parts of " + name + " do not fit together");
      }
      const int64_t part = p.size(rule.dim) / rule.groups;
      pieces.push_back(p.narrow(rule.dim, g * part, part));
    }
  }
  return torch::cat(pieces, rule.dim).contiguous();
}

Result<std::shared_ptr<ParallelBlockImpl>> ParallelBlockImpl::Create(const ModelConfig& cfg, Communicator* tp,
                                                                     bool sequence_parallel) {
  if (tp == nullptr) return InvalidArgumentError("tensor parallel: no tp communicator");
  const int s = tp->world_size();
  if (cfg.n_head % s != 0 || (4 * cfg.n_embd) % s != 0 || cfg.n_embd % cfg.n_head != 0) {
    return InvalidArgumentError("tensor parallel over " + std::to_string(s) + " ranks needs model.n_head (" +
                                std::to_string(cfg.n_head) + ") divisible by it, and n_embd (" +
                                std::to_string(cfg.n_embd) + ") by n_head");
  }
  if (cfg.moe.experts > 0) {
    return InvalidArgumentError("tensor parallel: mixture-of-experts blocks are not split over a tp group yet "
                                "(set moe.experts = 0 or dist.tensor_parallel = 1)");
  }
  if (sequence_parallel && cfg.block_size % s != 0) {
    return InvalidArgumentError("sequence parallel over " + std::to_string(s) + " ranks needs model.block_size (" +
                                std::to_string(cfg.block_size) + ") divisible by it");
  }
  return std::shared_ptr<ParallelBlockImpl>(new ParallelBlockImpl(cfg, tp, sequence_parallel));
}

ParallelBlockImpl::ParallelBlockImpl(const ModelConfig& cfg, Communicator* tp, bool sequence_parallel)
    : cfg_(cfg), tp_(tp), sequence_(sequence_parallel), local_heads_(cfg.n_head / tp->world_size()) {
  const int64_t C = cfg.n_embd, S = tp->world_size(), c = C / S, hidden = 4 * C / S;
  auto ln_1 = Holder(*this, "ln_1"), ln_2 = Holder(*this, "ln_2");
  auto attn = Holder(*this, "attn"), mlp = Holder(*this, "mlp");
  auto c_attn = Holder(*attn, "c_attn"), attn_proj = Holder(*attn, "c_proj");
  auto c_fc = Holder(*mlp, "c_fc"), mlp_proj = Holder(*mlp, "c_proj");
  ln_1_w_ = ln_1->register_parameter("weight", torch::ones({C}));
  ln_2_w_ = ln_2->register_parameter("weight", torch::ones({C}));
  attn_w_ = c_attn->register_parameter("weight", torch::zeros({3 * c, C}));
  attn_proj_w_ = attn_proj->register_parameter("weight", torch::zeros({C, c}));
  fc_w_ = c_fc->register_parameter("weight", torch::zeros({hidden, C}));
  mlp_proj_w_ = mlp_proj->register_parameter("weight", torch::zeros({C, hidden}));
  if (cfg.bias) {
    ln_1_b_ = ln_1->register_parameter("bias", torch::zeros({C}));
    ln_2_b_ = ln_2->register_parameter("bias", torch::zeros({C}));
    attn_b_ = c_attn->register_parameter("bias", torch::zeros({3 * c}));
    attn_proj_b_ = attn_proj->register_parameter("bias", torch::zeros({C}));
    fc_b_ = c_fc->register_parameter("bias", torch::zeros({hidden}));
    mlp_proj_b_ = mlp_proj->register_parameter("bias", torch::zeros({C}));
  }
  mask_ = register_buffer(
      "mask", torch::full({cfg.block_size, cfg.block_size}, -std::numeric_limits<float>::infinity()).triu(1));
}

torch::Tensor ParallelBlockImpl::forward(torch::Tensor x) {
  if (sequence_) return ForwardSequenceParallel(std::move(x));
  namespace F = torch::nn::functional;
  const int64_t C = cfg_.n_embd;
  auto h = CopyToTensorParallel(torch::layer_norm(x, {C}, ln_1_w_, ln_1_b_, 1e-5), tp_);
  auto y = Attention(F::linear(h, attn_w_, attn_b_));
  y = ReduceFromTensorParallel(F::linear(y, attn_proj_w_), tp_);
  x = x + Dropout(attn_proj_b_.defined() ? y + attn_proj_b_ : y);
  h = CopyToTensorParallel(torch::layer_norm(x, {C}, ln_2_w_, ln_2_b_, 1e-5), tp_);
  y = ReduceFromTensorParallel(F::linear(torch::gelu(F::linear(h, fc_w_, fc_b_)), mlp_proj_w_), tp_);
  return x + Dropout(mlp_proj_b_.defined() ? y + mlp_proj_b_ : y);
}

namespace {
// The noise F::dropout multiplies a float32 tensor of shape `whole` by on
// the CPU (ATen's _dropout_impl: bernoulli_(1 - p) of an empty tensor of
// its shape, then / (1 - p)), drawn from the default generator.
torch::Tensor DropoutNoise(at::IntArrayRef whole, double p) {
  torch::Tensor noise = torch::empty(whole, torch::kFloat32);
  noise.bernoulli_(1 - p);
  noise.div_(1 - p);
  return noise;
}
}  // namespace

torch::Tensor ParallelBlockImpl::Attention(const torch::Tensor& qkv) {
  if (!dropping()) return CausalAttention(qkv, local_heads_, mask_);
  // The probabilities in full, as the unsplit model's dropout path does.
  const int64_t B = qkv.size(0), T = qkv.size(1), c = qkv.size(2) / 3, hs = c / local_heads_;
  auto parts = qkv.split(c, 2);
  auto heads = [&](const torch::Tensor& t) { return t.reshape({B, T, local_heads_, hs}).transpose(1, 2); };
  auto q = heads(parts[0]), k = heads(parts[1]), v = heads(parts[2]);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  auto att = torch::baddbmm(mask_.slice(0, 0, T).slice(1, 0, T), q.reshape({B * local_heads_, T, hs}),
                            k.reshape({B * local_heads_, T, hs}).transpose(1, 2), /*beta=*/1.0, scale);
  att = torch::softmax(att, -1).view({B, local_heads_, T, T});
  // The whole [B, n_head, T, T] noise; this rank's heads of it.
  att = att * DropoutNoise({B, cfg_.n_head, T, T}, cfg_.dropout).narrow(1, tp_->rank() * local_heads_, local_heads_);
  return torch::matmul(att, v).transpose(1, 2).contiguous().view({B, T, c});
}

torch::Tensor ParallelBlockImpl::Dropout(const torch::Tensor& y) {
  if (!dropping()) return y;
  if (!sequence_) return y * DropoutNoise(y.sizes(), cfg_.dropout);
  // This rank's positions of the whole sequence's noise.
  std::vector<int64_t> whole = y.sizes().vec();
  const int64_t t = whole[1];
  whole[1] *= tp_->world_size();
  return y * DropoutNoise(whole, cfg_.dropout).narrow(1, tp_->rank() * t, t);
}

torch::Tensor ParallelBlockImpl::ForwardSequenceParallel(torch::Tensor x) {
  namespace F = torch::nn::functional;
  const int64_t C = cfg_.n_embd;
  // The replicated parameters used on this rank's positions only (both
  // LayerNorms, both output biases, each [C]) get their gradient summed over
  // the tp group: f's backward on the parameters themselves, packed into one
  // vector so that a block's backward issues one allreduce for all of them.
  variable_list replicated;
  for (const torch::Tensor* p : {&ln_1_w_, &ln_1_b_, &attn_proj_b_, &ln_2_w_, &ln_2_b_, &mlp_proj_b_}) {
    if (p->defined()) replicated.push_back(*p);
  }
  const variable_list summed = SumGradsOverTp::apply(at::TensorList(replicated), Handle(tp_));
  size_t next = 0;
  auto whole_grad = [&](const torch::Tensor& p) { return p.defined() ? summed[next++] : p; };
  const torch::Tensor ln_1_w = whole_grad(ln_1_w_), ln_1_b = whole_grad(ln_1_b_), attn_proj_b = whole_grad(attn_proj_b_);
  const torch::Tensor ln_2_w = whole_grad(ln_2_w_), ln_2_b = whole_grad(ln_2_b_), mlp_proj_b = whole_grad(mlp_proj_b_);
  auto h = GatherSequence(torch::layer_norm(x, {C}, ln_1_w, ln_1_b, 1e-5), tp_, true);
  auto y = Attention(F::linear(h, attn_w_, attn_b_));
  y = ReduceScatterSequence(F::linear(y, attn_proj_w_), tp_);
  x = x + Dropout(attn_proj_b.defined() ? y + attn_proj_b : y);
  h = GatherSequence(torch::layer_norm(x, {C}, ln_2_w, ln_2_b, 1e-5), tp_, true);
  y = ReduceScatterSequence(F::linear(torch::gelu(F::linear(h, fc_w_, fc_b_)), mlp_proj_w_), tp_);
  return x + Dropout(mlp_proj_b.defined() ? y + mlp_proj_b : y);
}

Status ParallelBlockImpl::LoadFromFull(const torch::nn::Module& full) {
  return CopyParts(full, *this, [this](const std::string& name, const torch::Tensor& t) {
    return TensorParallelShardOf(name, t, tp_->rank(), tp_->world_size());
  });
}

Result<torch::Tensor> GptTensorParallelShardOf(const std::string& name, const torch::Tensor& full, int rank,
                                               int size) {
  if (size == 1 && rank == 0) return full;  // one tp rank holds the whole (an expert, a layout without tp)
  const std::string block = BlockName(name);
  if (block.empty()) return full;  // wte, wpe, ln_f: replicated
  return TensorParallelShardOf(block, full, rank, size);
}

Status CopyParts(const torch::nn::Module& full, torch::nn::Module& mine, const PartOf& part_of) {
  torch::NoGradGuard no_grad;
  auto theirs = full.named_parameters();
  for (auto& p : mine.named_parameters()) {
    const torch::Tensor* src = theirs.find(p.key());
    if (src == nullptr) return InvalidArgumentError("the full model has no " + p.key() + " (another config?)");
    HF_ASSIGN_OR_RETURN(torch::Tensor part, part_of(p.key(), *src));
    if (!part.sizes().equals(p.value().sizes())) {
      return InvalidArgumentError("the full model's " + p.key() + " does not fit this one's (another config?)");
    }
    p.value().copy_(part);
  }
  return Status::Ok();
}

}  // namespace holdfast
