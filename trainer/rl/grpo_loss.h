// The GRPO learner's math on tensors (docs/rl.md, "The loss"). Includes
// LibTorch: only trainer/rl/grpo*.cc and its test include it.
//
// For a group of G completions of one prompt with rewards r_i, the advantage
// of completion i is (r_i - mean(r)) / (std(r) + eps) (std with G - 1 in the
// denominator, as GRPO's reference implementation in TRL computes it;
// a group whose rewards are all equal gets advantage 0 everywhere). Per
// generated token t of completion i, with ratio = exp(logp - logp_behaviour):
//   policy term  -min(ratio * A_i, clip(ratio, 1 - eps_clip, 1 + eps_clip) * A_i)
//   KL term      beta * (exp(ref - logp) - (ref - logp) - 1)   (the k3 estimator)
// averaged over the completion's tokens, then over completions (GRPO's
// sequence-mean; DAPO's token-mean is not used).
#pragma once

#include <torch/torch.h>

#include <vector>

namespace holdfast::rl {

// Advantages of one group's rewards (float64 in, float64 out).
std::vector<double> GroupAdvantages(const std::vector<double>& rewards, double eps = 1e-4);

struct GrpoTerms {
  torch::Tensor loss;        // scalar, with grad through logp
  double policy_loss = 0;    // the mean policy term
  double kl = 0;             // the mean k3 estimate (before beta)
  double clip_fraction = 0;  // fraction of tokens whose ratio was clipped
};

// logp, behaviour, ref: float32 [B, L] log-probs of the generated tokens
// (logp with grad); mask: float32 [B, L], 1 on generated tokens; adv: float32 [B].
GrpoTerms GrpoLoss(const torch::Tensor& logp, const torch::Tensor& behaviour, const torch::Tensor& ref,
                   const torch::Tensor& mask, const torch::Tensor& adv, double clip_eps, double kl_beta);

// Log-probs of the tokens idx[:, 1:] under logits[:, :-1]: float32 [B, T-1].
torch::Tensor TokenLogProbs(const torch::Tensor& logits, const torch::Tensor& idx);

}  // namespace holdfast::rl
