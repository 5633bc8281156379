// GRPO's math (grpo_loss.h) and the policy's weights between processes
// (policy.h): one LibTorch translation unit.
#include <cmath>
#include <map>

#include "trainer/model.h"
#include "trainer/rl/grpo_loss.h"
#include "trainer/rl/policy.h"

namespace holdfast::rl {

std::vector<double> GroupAdvantages(const std::vector<double>& rewards, double eps) {
  const size_t n = rewards.size();
  std::vector<double> adv(n, 0.0);
  if (n < 2) return adv;
  double mean = 0;
  for (double r : rewards) mean += r;
  mean /= static_cast<double>(n);
  double var = 0;
  for (double r : rewards) var += (r - mean) * (r - mean);
  const double std = std::sqrt(var / static_cast<double>(n - 1));
  for (size_t i = 0; i < n; ++i) adv[i] = (rewards[i] - mean) / (std + eps);
  return adv;
}

GrpoTerms GrpoLoss(const torch::Tensor& logp, const torch::Tensor& behaviour, const torch::Tensor& ref,
                   const torch::Tensor& mask, const torch::Tensor& adv, double clip_eps, double kl_beta) {
  GrpoTerms out;
  const auto a = adv.unsqueeze(1);
  const auto ratio = torch::exp(logp - behaviour);
  const auto unclipped = ratio * a;
  const auto clipped = torch::clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * a;
  const auto policy = -torch::min(unclipped, clipped);
  const auto d = ref - logp;
  const auto kl = torch::exp(d) - d - 1.0;
  const auto per_token = policy + kl_beta * kl;
  const auto tokens = mask.sum(1).clamp_min(1.0);
  out.loss = ((per_token * mask).sum(1) / tokens).mean();
  {
    torch::NoGradGuard no_grad;
    const double n = mask.sum().item<double>();
    if (n > 0) {
      out.policy_loss = ((policy.detach() * mask).sum(1) / tokens).mean().item<double>();
      out.kl = ((kl.detach() * mask).sum(1) / tokens).mean().item<double>();
      const auto was_clipped = (ratio.detach() - torch::clamp(ratio.detach(), 1.0 - clip_eps, 1.0 + clip_eps)).abs() > 0;
      out.clip_fraction = (was_clipped.to(torch::kFloat32) * mask).sum().item<double>() / n;
    }
  }
  return out;
}

torch::Tensor TokenLogProbs(const torch::Tensor& logits, const torch::Tensor& idx) {
  const int64_t T = idx.size(1);
  auto lp = torch::log_softmax(logits.narrow(1, 0, T - 1), -1);
  return lp.gather(2, idx.narrow(1, 1, T - 1).unsqueeze(2)).squeeze(2);
}

ParamsDump DumpModel(Gpt& model) {
  ParamsDump dump;
  torch::NoGradGuard no_grad;
  for (const auto& item : model->named_parameters()) {
    const torch::Tensor host = item.value().detach().to(torch::kCPU).to(torch::kFloat32).contiguous();
    dump.Add(item.key(), host.sizes().vec(), host.data_ptr<float>(), host.numel());
  }
  return dump;
}

Status LoadModel(const ParamsDump& dump, Gpt& model, const std::string& source) {
  torch::NoGradGuard no_grad;
  auto params = model->named_parameters();
  if (params.size() != dump.tensors.size()) {
    return InvalidArgumentError(source + " holds " + std::to_string(dump.tensors.size()) +
                                " tensors; this model has " + std::to_string(params.size()) +
                                " parameters: it was saved from another model config");
  }
  for (auto& item : params) {
    const ParamsDump::Tensor* t = dump.Find(item.key());
    if (t == nullptr) {
      return InvalidArgumentError(source + " has no tensor '" + item.key() + "': it was saved from another model config");
    }
    torch::Tensor& p = item.value();
    if (t->shape != p.sizes().vec()) {
      return InvalidArgumentError(source + ": tensor '" + item.key() + "' has another shape than this model's");
    }
    auto host = torch::from_blob(const_cast<float*>(dump.data.data() + t->offset), {t->numel}, torch::kFloat32);
    p.view({-1}).copy_(host);
  }
  return Status::Ok();
}

}  // namespace holdfast::rl
