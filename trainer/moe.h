// A mixture-of-experts MLP (issue 26; docs/parallelism.md, "Experts"): the
// GPT block's MLP replaced by E expert MLPs and a router that sends each
// token to k of them, either all held by this process or spread over an
// expert-parallel group (below).
//
// The routing, Switch Transformer / GShard style, for the block input x
// [B, T, C] flattened to N = B*T tokens:
//   p = softmax(x W_r^T) over the E experts (W_r: "router.weight", [E, C],
//       no bias), in x's dtype (float32 also under bf16 compute: the
//       routing decisions stay those of the float32 model);
//   each token's k experts are the k largest p (torch::topk: largest first);
//   an expert takes at most capacity = ceil(capacity_factor * N * k / E)
//       assignments, filled choice-major: every token's first choice in token
//       order, then every token's second choice, ... (GShard's priority:
//       a token loses its second choice before another loses its first); an
//       assignment past the capacity is dropped (the residual carries the
//       token on);
//   y_t = sum over t's kept assignments (e, p_te) of p_te * expert_e(x_t): the
//       router probability itself, not renormalised over the k chosen
//       (Mixtral renormalises; with k = 1 that would leave the router no
//       gradient but the auxiliary loss's);
//   aux = E * sum_e f_e * P_e, f_e = the share of the N*k assignments that
//       chose e (dropped ones included; a count, no gradient) and P_e = the
//       mean of p_te over the tokens (Switch's load-balancing loss, with f
//       over all k choices). The caller adds aux_loss_coef * aux to the loss.
// Each expert is nanoGPT's MLP (c_fc, GELU, c_proj), named
// "experts.<e>.c_fc.weight" and so on (e the expert's number in the layer).
//
// Expert parallel (an `ep` group of EP ranks, E a multiple of EP): rank r
// holds experts [r*E/EP, (r+1)*E/EP) (the router is replicated) and routes
// its own tokens as above; then GShard's dispatch: every rank writes each
// expert's kept tokens into a [E, capacity, C] buffer (zero rows past an
// expert's count), an all-to-all sends each owner its experts' rows from
// every rank, the owner runs each expert once over all ranks' rows
// ([EP * capacity, C]), and the reverse all-to-all brings the outputs back,
// combined as above (in expert order, as one process adds them). The
// all-to-all is EP - 1 pairwise exchanges over SendRecvLabelled (rank r
// sends to r + k and receives from r - k in round k), labelled as tokens
// and expert outputs for the progress record; in backward the same
// exchanges carry the gradients the other way. Padding rows are computed
// and get no gradient (the combine never reads them). Each rank's output,
// input gradient, router gradient and auxiliary loss are those of one
// process routing that rank's tokens; an expert's gradient is the sum over
// the ranks' tokens (trainer_moe_test checks both).
//
// tests/trainer/moe_test.cc checks the routing, the output, the auxiliary
// loss and the gradients against a float64 implementation written with plain
// loops. This header includes LibTorch. Not thread-safe: one thread owns the
// module, as trainer/model.h.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/config.h"
#include "trainer/model.h"

namespace holdfast {

class Communicator;

// E = experts, k = top_k (1 <= k <= E), capacity_factor > 0; aux_loss_coef
// is the caller's (GptImpl adds coef x the sum of its blocks' aux).
using MoeOptions = MoeConfig;

// What the last forward's routing did, for the progress record and the
// bench (an expert that gets most tokens is a straggler's cause).
struct MoeRouting {
  std::vector<int64_t> assigned;  // per expert: assignments that chose it
  std::vector<int64_t> kept;      // per expert: those within its capacity
  int64_t capacity = 0;
  int64_t dropped = 0;            // sum(assigned) - sum(kept)
};

// The expert a parameter belongs to: e for a name with "mlp.experts.<e>." in
// it (a MoE block's expert), -1 for any other parameter.
int ExpertOfParameter(const std::string& name);

class MoeMlpImpl : public torch::nn::Module {
 public:
  // kInvalidArgument naming the key for an impossible option (no experts,
  // k outside 1..E, a capacity factor that is not positive) or for what is
  // not built yet (dropout).
  // With `ep` (not owned, must outlive the module; null or a group of one =
  // every expert here): experts spread over it, kInvalidArgument when
  // moe.experts is not a multiple of its size. `hold_every_expert`: the
  // module still holds every expert's parameters (computing only its own),
  // so that its parameters are one process's (holdfast-train's data-parallel
  // buffers and checkpoints; the experts it does not compute get no gradient
  // here, and the data-parallel average makes every expert's gradient whole).
  static Result<std::shared_ptr<MoeMlpImpl>> Create(const ModelConfig& cfg, const MoeOptions& options,
                                                    ComputeOptions compute = {}, Communicator* ep = nullptr,
                                                    bool hold_every_expert = false);

  // x [B, T, C] -> [B, T, C]; sets aux_loss() and routing().
  torch::Tensor forward(const torch::Tensor& x);
  // The last forward's load-balancing loss (a scalar with its graph).
  const torch::Tensor& aux_loss() const { return aux_; }
  const MoeRouting& routing() const { return routing_; }
  // The experts this rank computes: [first_expert(), first_expert() + local_experts()).
  int first_expert() const { return first_; }
  int local_experts() const { return static_cast<int>(experts_.size()); }
  // This module's part of every parameter of `full` (a layer of the same
  // options holding every expert), by name.
  Status LoadFromFull(const torch::nn::Module& full);

 private:
  MoeMlpImpl(const ModelConfig& cfg, const MoeOptions& options, ComputeOptions compute, Communicator* ep,
             bool hold_every_expert);
  // The expert-parallel path's dispatch, expert compute and combine of the
  // kept assignments (rows: expert * capacity + place, in expert order).
  torch::Tensor DispatchCombine(const torch::Tensor& xf, const torch::Tensor& rows, const torch::Tensor& tokens,
                                const torch::Tensor& gates, int64_t capacity);

  MoeOptions options_;
  Communicator* ep_ = nullptr;  // set only for a group of 2 or more
  int first_ = 0;
  torch::nn::Linear router_{nullptr};
  std::vector<Mlp> experts_;  // the ones this rank computes
  torch::Tensor aux_;
  MoeRouting routing_;
};

}  // namespace holdfast
