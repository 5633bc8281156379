#include "trainer/moe.h"

#include <cmath>
#include <string>

#include "trainer/comm/communicator.h"
#include "trainer/tensor_parallel.h"  // CopyParts

namespace holdfast {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Equal-split all-to-all over `ep`: block j of x ([EP, ...]) goes to rank j;
// block i of the result came from rank i. EP - 1 pairwise exchanges (round
// k: send to r + k, receive from r - k), each posted as one SendRecv so that
// no rank waits on a send; a failed one (a peer gone, a timeout) is a
// c10::Error, which the trainer's step turns into its Status.
torch::Tensor ExchangeBlocks(const torch::Tensor& x, Communicator* ep, MessageKind what) {
  const int n = ep->world_size(), r = ep->rank();
  TORCH_CHECK(x.dim() >= 1 && x.size(0) == n && x.is_cpu(), "expert parallel all-to-all: needs [", n, ", ...] on the CPU");
  const torch::Tensor send = x.contiguous();
  torch::Tensor recv = torch::empty_like(send);
  recv[r].copy_(send[r]);
  const size_t bytes = static_cast<size_t>(send[0].numel()) * send.element_size();
  for (int k = 1; k < n; ++k) {
    const int to = (r + k) % n, from = (r - k + n) % n;
    Status s = ep->SendRecvLabelled(send[to].data_ptr(), bytes, to, recv[from].data_ptr(), bytes, from,
                                    MessageLabel{what, what})
                   ->Wait();
    TORCH_CHECK(s.ok(), "expert parallel all-to-all (", MessageKindName(what), ") over the ep group: ", s.ToString());
  }
  return recv;
}

class AllToAll : public torch::autograd::Function<AllToAll> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t comm, int64_t what,
                               int64_t grad_what) {
    ctx->saved_data["comm"] = comm;
    ctx->saved_data["grad_what"] = grad_what;
    return ExchangeBlocks(x, reinterpret_cast<Communicator*>(static_cast<intptr_t>(comm)),
                          static_cast<MessageKind>(what));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* ep = reinterpret_cast<Communicator*>(static_cast<intptr_t>(ctx->saved_data["comm"].toInt()));
    return {ExchangeBlocks(grads[0], ep, static_cast<MessageKind>(ctx->saved_data["grad_what"].toInt())),
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

torch::Tensor ExchangeWithGrad(const torch::Tensor& x, Communicator* ep, MessageKind what, MessageKind grad_what) {
  return AllToAll::apply(x, static_cast<int64_t>(reinterpret_cast<intptr_t>(ep)), static_cast<int64_t>(what),
                         static_cast<int64_t>(grad_what));
}

}  // namespace

int ExpertOfParameter(const std::string& name) {
  static const std::string kMark = "mlp.experts.";
  const size_t at = name.find(kMark);
  if (at == std::string::npos) return -1;
  const size_t begin = at + kMark.size(), end = name.find('.', begin);
  if (end == std::string::npos || end == begin || end - begin > 6) return -1;
  int e = 0;
  for (size_t i = begin; i < end; ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    e = e * 10 + (name[i] - '0');
  }
  return e;
}

Result<std::shared_ptr<MoeMlpImpl>> MoeMlpImpl::Create(const ModelConfig& cfg, const MoeOptions& options,
                                                       ComputeOptions compute, Communicator* ep,
                                                       bool hold_every_expert) {
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
  if (ep != nullptr && options.experts % ep->world_size() != 0) {
    return InvalidArgumentError("moe.experts = " + std::to_string(options.experts) + " does not spread over " +
                                std::to_string(ep->world_size()) + " expert-parallel ranks: use a multiple of " +
                                "dist.expert_parallel (" + std::to_string(ep->world_size()) + ")");
  }
  if (ep != nullptr && ep->world_size() > 1 && compute.bf16) {
    return InvalidArgumentError("expert parallelism runs in float32 for now: set train.precision = \"fp32\"");
  }
  return std::shared_ptr<MoeMlpImpl>(new MoeMlpImpl(cfg, options, compute, ep, hold_every_expert));
}

MoeMlpImpl::MoeMlpImpl(const ModelConfig& cfg, const MoeOptions& options, ComputeOptions compute, Communicator* ep,
                       bool hold_every_expert)
    : options_(options), ep_(ep != nullptr && ep->world_size() > 1 ? ep : nullptr) {
  router_ = register_module("router", torch::nn::Linear(torch::nn::LinearOptions(cfg.n_embd, options.experts).bias(false)));
  // A plain holder rather than a ModuleList, so that an expert keeps its
  // number in the layer as its name on every rank ("experts.5.c_fc.weight").
  auto holder = register_module("experts", std::make_shared<torch::nn::Module>());
  const int local = ep_ != nullptr ? options.experts / ep_->world_size() : options.experts;
  first_ = ep_ != nullptr ? ep_->rank() * local : 0;
  for (int e = 0; e < options.experts; ++e) {
    const bool mine = e >= first_ && e < first_ + local;
    if (!mine && !hold_every_expert) continue;
    Mlp expert(cfg, compute);  // constructed (and so drawn from the generator) in the same order on every layout
    holder->register_module(std::to_string(e), expert.ptr());
    if (mine) experts_.push_back(expert);
  }
}

Status MoeMlpImpl::LoadFromFull(const torch::nn::Module& full) {
  return CopyParts(full, *this, [](const std::string&, const torch::Tensor& t) -> Result<torch::Tensor> { return t; })
      .WithContext("the MoE layer's experts");
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

  torch::Tensor spread;  // the expert-parallel output
  if (ep_ != nullptr) {
    // The kept assignments in expert order (as one process adds them), each
    // at row expert * capacity + its place in the expert's queue.
    const torch::Tensor order = torch::argsort(choice_e * (k * N) + torch::arange(k * N, choice_e.options()));
    const torch::Tensor sorted_kept = kept.index_select(0, order);
    const torch::Tensor picked = order.masked_select(sorted_kept);
    const torch::Tensor token_of = torch::arange(k * N, choice_e.options()) % N;
    const torch::Tensor rows = choice_e.index_select(0, picked) * capacity + place.index_select(0, picked);
    spread = DispatchCombine(xf, rows, token_of.index_select(0, picked), choice_p.index_select(0, picked).unsqueeze(1),
                         capacity);
  }
  torch::Tensor y = torch::zeros_like(xf);
  routing_ = MoeRouting{};
  routing_.capacity = capacity;
  const torch::Tensor chosen_cpu = chosen.cpu();
  routing_.assigned.assign(chosen_cpu.data_ptr<int64_t>(), chosen_cpu.data_ptr<int64_t>() + E);
  const torch::Tensor token_of = torch::arange(k * N, torch::TensorOptions().dtype(torch::kLong).device(x.device())) % N;
  for (int64_t e = 0; e < E; ++e) {
    const torch::Tensor mine = torch::nonzero((choice_e == e) & kept).reshape({-1});  // in choice-major order
    routing_.kept.push_back(mine.numel());
    if (mine.numel() == 0 || ep_ != nullptr) continue;
    const torch::Tensor tokens = token_of.index_select(0, mine);
    const torch::Tensor gate = choice_p.index_select(0, mine).unsqueeze(1);
    const torch::Tensor out = experts_[static_cast<size_t>(e)]->forward(xf.index_select(0, tokens));
    y = y.index_add(0, tokens, gate * out);
  }
  for (size_t e = 0; e < routing_.assigned.size(); ++e) routing_.dropped += routing_.assigned[e] - routing_.kept[e];
  // Switch's load-balancing loss over all k choices (f: counts, no gradient).
  const torch::Tensor f = chosen.to(probs.scalar_type()) / static_cast<double>(N * k);
  aux_ = static_cast<double>(E) * (f * probs.mean(0)).sum();
  if (ep_ != nullptr) y = spread;
  return y.reshape(x.sizes());
}

torch::Tensor MoeMlpImpl::DispatchCombine(const torch::Tensor& xf, const torch::Tensor& rows,
                                          const torch::Tensor& tokens, const torch::Tensor& gates, int64_t capacity) {
  const int64_t C = xf.size(1), E = options_.experts, EP = ep_->world_size(), local = E / EP;
  // Dispatch: [E * capacity, C], expert e's queue in rows [e * capacity, (e + 1) * capacity).
  torch::Tensor queues = torch::zeros({E * capacity, C}, xf.options()).index_copy(0, rows, xf.index_select(0, tokens));
  torch::Tensor arrived = ExchangeWithGrad(queues.view({EP, local, capacity, C}), ep_, MessageKind::kTokens,
                                           MessageKind::kTokenGradients);  // [source rank, local expert, place, C]
  // How many rows of each queue are tokens: the owner runs an expert over
  // exactly one source's tokens at a time, the product one process computes
  // for those tokens (the same rows, so the same bits: a product over other
  // rows can round an ulp apart, and an ulp can move a token between two
  // experts it is balanced between).
  const torch::Tensor counts = ExchangeBlocks(
      torch::bincount(rows.div(capacity, "floor"), {}, E).to(torch::kLong).view({EP, local}), ep_,
      MessageKind::kTokens);
  const torch::Tensor pad = torch::zeros({capacity, C}, xf.options());
  std::vector<torch::Tensor> outputs;  // per local expert: [source rank, place, C]
  for (int64_t l = 0; l < local; ++l) {
    std::vector<torch::Tensor> per_source;
    for (int64_t src = 0; src < EP; ++src) {
      const int64_t n = counts[src][l].item<int64_t>();
      // No tokens: an empty slice of `arrived` keeps the combine's input tied
      // to it, so that every rank's backward runs both exchanges (a rank whose
      // experts got no token would otherwise skip them and its peers would
      // wait for it forever).
      torch::Tensor out = n > 0 ? experts_[static_cast<size_t>(l)]->forward(arrived[src][l].narrow(0, 0, n))
                                : arrived[src][l].narrow(0, 0, 0);
      per_source.push_back(n == capacity ? out : torch::cat({out, pad.narrow(0, 0, capacity - n)}));
    }
    outputs.push_back(torch::stack(per_source));
  }
  // Combine: every source rank's outputs back to it, [owner, local expert, place, C] = [E, capacity, C].
  torch::Tensor back = ExchangeWithGrad(torch::stack(outputs, 1), ep_, MessageKind::kExpertOutputs,
                                        MessageKind::kExpertOutputGradients);
  const torch::Tensor out = back.reshape({E * capacity, C}).index_select(0, rows);
  return torch::zeros_like(xf).index_add(0, tokens, gates * out);
}

}  // namespace holdfast
