// The "lm", "dpo" and "reward" objectives (objective.h).
#include "trainer/objective.h"

#include <algorithm>
#include <utility>

namespace holdfast {

torch::Tensor SequenceLogProbs(const torch::Tensor& logits, const torch::Tensor& targets) {
  namespace F = torch::nn::functional;
  const torch::Tensor logp = F::log_softmax(logits.to(torch::kFloat32), F::LogSoftmaxFuncOptions(-1));
  const torch::Tensor scored = targets.ne(kIgnoreIndex);
  const torch::Tensor picked = logp.gather(-1, targets.clamp_min(0).unsqueeze(-1)).squeeze(-1);
  return picked.masked_fill(scored.logical_not(), 0.0).sum(1);
}

namespace {

// Batches of a Dataset's samples, on the objective's device. On a GPU each
// batch goes through a fresh pinned buffer from LibTorch's caching host
// allocator, which reuses it only once its asynchronous upload has completed.
class BatchLoader {
 public:
  explicit BatchLoader(const ObjectiveEnv& env) : env_(env) {
    rows_ = env.data->rows_per_sample();
    x_ = torch::empty({env.config->train.micro_batch * rows_, env.config->model.block_size}, torch::kLong);
    y_ = torch::empty_like(x_);
  }

  // Samples [first, first + B) of the training split (eval = false) or of
  // the held-out one: x and y [B * rows, T].
  void Load(uint64_t first, int B, bool eval) {
    const int64_t rows = static_cast<int64_t>(B) * rows_;
    const int64_t T = env_.config->model.block_size;
    auto fill = [&](int64_t* x, int64_t* y) {
      if (eval) {
        env_.data->FillEvalBatch(first, B, x, y);
      } else {
        env_.data->FillBatch(first, B, x, y);
      }
    };
    if (!env_.cuda) {
      if (x_.size(0) != rows) {
        x_ = torch::empty({rows, T}, torch::kLong);
        y_ = torch::empty_like(x_);
      }
      fill(x_.data_ptr<int64_t>(), y_.data_ptr<int64_t>());
      return;
    }
    auto pinned = torch::TensorOptions().dtype(torch::kLong).pinned_memory(true);
    auto xh = torch::empty({rows, T}, pinned);
    auto yh = torch::empty({rows, T}, pinned);
    fill(xh.data_ptr<int64_t>(), yh.data_ptr<int64_t>());
    x_ = xh.to(env_.device, /*non_blocking=*/true);
    y_ = yh.to(env_.device, /*non_blocking=*/true);
  }
  const torch::Tensor& x() const { return x_; }
  const torch::Tensor& y() const { return y_; }

 private:
  ObjectiveEnv env_;
  int rows_ = 1;
  torch::Tensor x_;
  torch::Tensor y_;
};

// Calls each(begin, n) for held-out samples [begin, end) in micro-batches.
template <typename F>
void ForEachEvalBatch(uint64_t begin, uint64_t end, int B, F each) {
  for (uint64_t j = begin; j < end; j += static_cast<uint64_t>(B)) {
    each(j, static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(B), end - j)));
  }
}

class LmObjective final : public Objective {
 public:
  explicit LmObjective(const ObjectiveEnv& env) : env_(env), batch_(env) {}

  const char* name() const override { return "lm"; }

  torch::Tensor MicroLoss(Gpt& model, uint64_t first, int B) override {
    batch_.Load(first, B, /*eval=*/false);
    return model->forward(batch_.x(), batch_.y());
  }

  Result<std::pair<torch::Tensor, torch::Tensor>> LmBatch(uint64_t first, int B) override {
    batch_.Load(first, B, /*eval=*/false);
    return std::make_pair(batch_.x().clone(), batch_.y().clone());  // the batch's buffers are reused
  }

  int64_t TokensPerSample() const override { return env_.config->model.block_size; }

  bool HasEval() const override { return true; }
  uint64_t EvalSize() const override { return env_.data->eval_size(); }
  size_t EvalSumCount() const override { return 2; }
  // {summed cross-entropy of every scored target, scored targets}.
  Result<std::vector<double>> EvalPartial(Gpt& model, int rank, int world, uint64_t limit) override {
    return EvalPartialOf([&model](const torch::Tensor& idx) { return model->Logits(idx); }, rank, world, limit);
  }
  Result<std::vector<double>> EvalPartialOf(const LogitsOf& logits_of, int rank, int world,
                                            uint64_t limit) override {
    const auto [begin, end] = EvalShare(rank, world, limit);
    namespace F = torch::nn::functional;
    torch::Tensor sums = torch::zeros({2}, torch::TensorOptions().dtype(torch::kFloat64).device(env_.device));
    ForEachEvalBatch(begin, end, env_.config->train.micro_batch, [&](uint64_t j, int n) {
      batch_.Load(j, n, /*eval=*/true);
      torch::Tensor logits = logits_of(batch_.x());
      if (!logits.defined()) return;  // a pipeline stage short of the model's end
      logits = logits.to(torch::kFloat32);
      const torch::Tensor ce = F::cross_entropy(
          logits.view({-1, logits.size(-1)}), batch_.y().view({-1}),
          F::CrossEntropyFuncOptions().ignore_index(kIgnoreIndex).reduction(torch::kSum));
      sums[0] += ce.to(torch::kFloat64);
      sums[1] += batch_.y().ne(kIgnoreIndex).sum().to(torch::kFloat64);
    });
    const torch::Tensor host = sums.to(torch::kCPU);
    return std::vector<double>(host.data_ptr<double>(), host.data_ptr<double>() + 2);
  }
  std::map<std::string, double> EvalMetrics(const std::vector<double>& total) const override {
    return {{"eval_loss", total[1] > 0 ? total[0] / total[1] : 0.0}};
  }

 private:
  ObjectiveEnv env_;
  BatchLoader batch_;
};

// An objective over preference pairs whose per-pair loss is
// -logsigmoid(reward_chosen - reward_rejected): DPO (implicit rewards) and a
// reward model's Bradley-Terry loss (its head's scores). The metrics, the
// evaluation and the batches are theirs in common; Score is each one's own.
class PairObjective : public Objective {
 public:
  explicit PairObjective(const ObjectiveEnv& env) : env_(env), batch_(env) {}

  torch::Tensor MicroLoss(Gpt& model, uint64_t first, int B) override {
    batch_.Load(first, B, /*eval=*/false);
    Pairs p = Score(model, B);
    {
      torch::NoGradGuard no_grad;
      const torch::Tensor rc = p.reward_chosen.detach().to(torch::kFloat64);
      const torch::Tensor rr = p.reward_rejected.detach().to(torch::kFloat64);
      const torch::Tensor m = torch::stack({p.loss.detach().to(torch::kFloat64), rc.mean(), rr.mean(),
                                            (rc - rr).mean(), rc.gt(rr).to(torch::kFloat64).mean()});
      step_sums_ = step_sums_.defined() ? step_sums_ + m : m;
      ++micro_batches_;
    }
    return p.loss;
  }

  int64_t TokensPerSample() const override { return 2 * int64_t{env_.config->model.block_size}; }

  std::vector<std::string> StepMetricNames() const override {
    return {"rewards_chosen", "rewards_rejected", "reward_margin", "reward_accuracy"};
  }
  std::vector<double> TakeStepMetrics() override {
    std::vector<double> out(4, 0.0);
    if (micro_batches_ > 0) {
      const torch::Tensor host = (step_sums_ / static_cast<double>(micro_batches_)).to(torch::kCPU);
      for (size_t i = 0; i < 4; ++i) out[i] = host[static_cast<int64_t>(i) + 1].item<double>();
    }
    step_sums_ = torch::Tensor();
    micro_batches_ = 0;
    return out;
  }

  bool HasEval() const override { return true; }
  uint64_t EvalSize() const override { return env_.data->eval_size(); }
  // {summed loss, pairs ranked right, summed chosen reward, summed rejected reward, pairs}.
  size_t EvalSumCount() const override { return 5; }
  Result<std::vector<double>> EvalPartial(Gpt& model, int rank, int world, uint64_t limit) override {
    const auto [begin, end] = EvalShare(rank, world, limit);
    torch::Tensor sums = torch::zeros({5}, torch::TensorOptions().dtype(torch::kFloat64).device(env_.device));
    ForEachEvalBatch(begin, end, env_.config->train.micro_batch, [&](uint64_t j, int n) {
      batch_.Load(j, n, /*eval=*/true);
      Pairs p = Score(model, n);
      const torch::Tensor rc = p.reward_chosen.to(torch::kFloat64);
      const torch::Tensor rr = p.reward_rejected.to(torch::kFloat64);
      sums += torch::stack({p.per_pair.to(torch::kFloat64).sum(), rc.gt(rr).to(torch::kFloat64).sum(), rc.sum(),
                            rr.sum(), torch::full({}, static_cast<double>(n), sums.options())});
    });
    const torch::Tensor host = sums.to(torch::kCPU);
    return std::vector<double>(host.data_ptr<double>(), host.data_ptr<double>() + 5);
  }
  std::map<std::string, double> EvalMetrics(const std::vector<double>& t) const override {
    const double n = t[4] > 0 ? t[4] : 1;
    return {{"eval_loss", t[0] / n},
            {"eval_reward_accuracy", t[1] / n},
            {"eval_rewards_chosen", t[2] / n},
            {"eval_rewards_rejected", t[3] / n},
            {"eval_reward_margin", (t[2] - t[3]) / n}};
  }

 protected:
  struct Pairs {
    torch::Tensor per_pair;         // [B] -logsigmoid(reward_chosen - reward_rejected)
    torch::Tensor loss;             // mean of per_pair
    torch::Tensor reward_chosen;    // [B]
    torch::Tensor reward_rejected;  // [B]
  };
  static Pairs FromRewards(torch::Tensor chosen, torch::Tensor rejected) {
    namespace F = torch::nn::functional;
    Pairs p;
    p.reward_chosen = std::move(chosen);
    p.reward_rejected = std::move(rejected);
    p.per_pair = -F::logsigmoid(p.reward_chosen - p.reward_rejected);
    p.loss = p.per_pair.mean();
    return p;
  }
  // The loaded batch's B pairs (rows chosen, rejected, chosen, ...).
  virtual Pairs Score(Gpt& model, int B) = 0;

  ObjectiveEnv env_;
  BatchLoader batch_;

 private:
  torch::Tensor step_sums_;  // float64 [5] on the device: loss and the four metrics, summed over micro-batches
  int micro_batches_ = 0;
};

class DpoObjective final : public PairObjective {
 public:
  DpoObjective(const ObjectiveEnv& env, Gpt reference)
      : PairObjective(env), beta_(env.config->dpo.beta), reference_(std::move(reference)) {
    reference_->eval();
    for (auto& p : reference_->parameters()) p.set_requires_grad(false);
  }

  const char* name() const override { return "dpo"; }

 private:
  // Implicit rewards beta * log(pi / ref) of each response.
  Pairs Score(Gpt& model, int B) override {
    const torch::Tensor pi = SequenceLogProbs(model->Logits(batch_.x()), batch_.y()).view({B, 2});
    torch::Tensor ref;
    {
      torch::NoGradGuard no_grad;
      ref = SequenceLogProbs(reference_->Logits(batch_.x()), batch_.y()).view({B, 2});
    }
    const torch::Tensor ratio = pi - ref;  // log pi/ref of each response
    return FromRewards(beta_ * ratio.select(1, 0), beta_ * ratio.select(1, 1));
  }

  double beta_;
  Gpt reference_;
};

// "reward": a reward model's Bradley-Terry loss on its head's scores of the
// chosen and the rejected text (prompt + response, up to its last token).
class RewardModelObjective final : public PairObjective {
 public:
  explicit RewardModelObjective(const ObjectiveEnv& env) : PairObjective(env) {}

  const char* name() const override { return "reward"; }

 private:
  Pairs Score(Gpt& model, int B) override {
    const torch::Tensor r = model->Rewards(batch_.x(), LastTokens(batch_.y())).view({B, 2});
    return FromRewards(r.select(1, 0), r.select(1, 1));
  }
};

}  // namespace

std::unique_ptr<Objective> MakeLmObjective(const ObjectiveEnv& env) { return std::make_unique<LmObjective>(env); }

std::unique_ptr<Objective> MakeDpoObjective(const ObjectiveEnv& env, Gpt reference) {
  return std::make_unique<DpoObjective>(env, std::move(reference));
}

std::unique_ptr<Objective> MakeRewardModelObjective(const ObjectiveEnv& env) {
  return std::make_unique<RewardModelObjective>(env);
}

torch::Tensor LastTokens(const torch::Tensor& targets) {
  const torch::Tensor positions = torch::arange(targets.size(1), targets.options());
  return positions.mul(targets.ne(kIgnoreIndex).to(targets.scalar_type())).amax(1);
}

}  // namespace holdfast
