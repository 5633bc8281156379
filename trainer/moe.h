// A mixture-of-experts MLP (issue 26; docs/parallelism.md, "Experts"): the
// GPT block's MLP replaced by E expert MLPs and a router that sends each
// token to k of them. One process holds every expert for now; spreading them
// over an expert-parallel group (all-to-all dispatch and combine) builds on
// the routing below, which is what decides where each token goes.
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
// "experts.<e>.c_fc.weight" and so on.
//
// tests/trainer/moe_test.cc checks the routing, the output, the auxiliary
// loss and the gradients against a float64 implementation written with plain
// loops. This header includes LibTorch. Not thread-safe: one thread owns the
// module, as trainer/model.h.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "trainer/config.h"
#include "trainer/model.h"

namespace holdfast {

struct MoeOptions {
  int experts = 4;               // E
  int top_k = 2;                 // k, 1 <= k <= E
  double capacity_factor = 1.25;  // > 0
};

// What the last forward's routing did, for the progress record and the
// bench (an expert that gets most tokens is a straggler's cause).
struct MoeRouting {
  std::vector<int64_t> assigned;  // per expert: assignments that chose it
  std::vector<int64_t> kept;      // per expert: those within its capacity
  int64_t capacity = 0;
  int64_t dropped = 0;            // sum(assigned) - sum(kept)
};

class MoeMlpImpl : public torch::nn::Module {
 public:
  // kInvalidArgument naming the key for an impossible option (no experts,
  // k outside 1..E, a capacity factor that is not positive) or for what is
  // not built yet (dropout).
  static Result<std::shared_ptr<MoeMlpImpl>> Create(const ModelConfig& cfg, const MoeOptions& options,
                                                    ComputeOptions compute = {});

  // x [B, T, C] -> [B, T, C]; sets aux_loss() and routing().
  torch::Tensor forward(const torch::Tensor& x);
  // The last forward's load-balancing loss (a scalar with its graph).
  const torch::Tensor& aux_loss() const { return aux_; }
  const MoeRouting& routing() const { return routing_; }

 private:
  MoeMlpImpl(const ModelConfig& cfg, const MoeOptions& options, ComputeOptions compute);

  MoeOptions options_;
  torch::nn::Linear router_{nullptr};
  std::vector<Mlp> experts_;
  torch::Tensor aux_;
  MoeRouting routing_;
};

}  // namespace holdfast
