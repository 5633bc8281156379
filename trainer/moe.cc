#include "trainer/moe.h"

#include <cmath>
#include <string>

namespace holdfast {

Result<std::shared_ptr<MoeMlpImpl>> MoeMlpImpl::Create(const ModelConfig& cfg, const MoeOptions& options,
                                                       ComputeOptions compute) {
  if (options.experts < 1) {
    return InvalidArgumentError("moe.experts = " + std::to_string(options.experts) + ": a MoE layer needs 1 or more");
  }
  if (options.top_k < 1 || options.top_k > options.experts) {
    return InvalidArgumentError("moe.top_k = " + std::to_string(options.top_k) + " must be between 1 and moe.experts (" +
                                std::to_string(options.experts) + ")");
  }
  if (!(options.capacity_factor > 0) || !std::isfinite(options.capacity_factor)) {
    return InvalidArgumentError("moe.capacity_factor = " + std::to_string(options.capacity_factor) +
                                " must be a positive number (1.25 is usual; below 1 drops tokens even when balanced)");
  }
  if (cfg.dropout > 0) {
    return InvalidArgumentError("model.dropout = " + std::to_string(cfg.dropout) +
                                ": the MoE layer has no dropout yet; set model.dropout = 0");
  }
  return std::shared_ptr<MoeMlpImpl>(new MoeMlpImpl(cfg, options, compute));
}

MoeMlpImpl::MoeMlpImpl(const ModelConfig& cfg, const MoeOptions& options, ComputeOptions compute)
    : options_(options) {
  router_ = register_module("router", torch::nn::Linear(torch::nn::LinearOptions(cfg.n_embd, options.experts).bias(false)));
  auto list = register_module("experts", torch::nn::ModuleList());
  for (int e = 0; e < options.experts; ++e) {
    experts_.push_back(Mlp(cfg, compute));
    list->push_back(experts_.back());
  }
}

torch::Tensor MoeMlpImpl::forward(const torch::Tensor& x) {
  const int64_t C = x.size(-1);
  const torch::Tensor xf = x.reshape({-1, C});
  const int64_t N = xf.size(0);
  const int64_t E = options_.experts;
  const int64_t k = options_.top_k;
  // The router in x's dtype: float32 training, float64 in the reference test.
  const torch::Tensor probs = torch::softmax(router_(xf), -1);  // [N, E]
  auto [top_p, top_e] = probs.topk(k, -1);                     // [N, k], largest first
  // Choice-major order: assignment a = j * N + t is token t's j-th choice.
  const torch::Tensor choice_e = top_e.t().reshape({-1});  // [k*N]
  const torch::Tensor choice_p = top_p.t().reshape({-1});
  const torch::Tensor onehot = torch::one_hot(choice_e, E);  // [k*N, E], int64
  // An assignment's place in its expert's queue: how many earlier ones chose it.
  const torch::Tensor place = ((onehot.cumsum(0) - 1) * onehot).sum(1);
  const int64_t capacity =
      static_cast<int64_t>(std::ceil(options_.capacity_factor * static_cast<double>(N * k) / static_cast<double>(E)));
  const torch::Tensor kept = place < capacity;
  const torch::Tensor chosen = onehot.sum(0);  // [E]: assignments per expert, dropped ones included

  torch::Tensor y = torch::zeros_like(xf);
  routing_ = MoeRouting{};
  routing_.capacity = capacity;
  const torch::Tensor chosen_cpu = chosen.cpu();
  routing_.assigned.assign(chosen_cpu.data_ptr<int64_t>(), chosen_cpu.data_ptr<int64_t>() + E);
  const torch::Tensor token_of = torch::arange(k * N, torch::TensorOptions().dtype(torch::kLong).device(x.device())) % N;
  for (int64_t e = 0; e < E; ++e) {
    const torch::Tensor mine = torch::nonzero((choice_e == e) & kept).reshape({-1});  // in choice-major order
    routing_.kept.push_back(mine.numel());
    if (mine.numel() == 0) continue;
    const torch::Tensor tokens = token_of.index_select(0, mine);
    const torch::Tensor gate = choice_p.index_select(0, mine).unsqueeze(1);
    const torch::Tensor out = experts_[static_cast<size_t>(e)]->forward(xf.index_select(0, tokens));
    y = y.index_add(0, tokens, gate * out);
  }
  for (size_t e = 0; e < routing_.assigned.size(); ++e) routing_.dropped += routing_.assigned[e] - routing_.kept[e];
  // Switch's load-balancing loss over all k choices (f: counts, no gradient).
  const torch::Tensor f = chosen.to(probs.scalar_type()) / static_cast<double>(N * k);
  aux_ = static_cast<double>(E) * (f * probs.mean(0)).sum();
  return y.reshape(x.sizes());
}

}  // namespace holdfast
