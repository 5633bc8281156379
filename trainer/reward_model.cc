#include "trainer/reward_model.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "trainer/config.h"
#include "trainer/model.h"
#include "trainer/weights.h"

namespace holdfast {
namespace {

class RewardModelScorer final : public rl::TextScorer {
 public:
  RewardModelScorer(Gpt model, size_t batch, std::string description)
      : model_(std::move(model)), batch_(batch), description_(std::move(description)) {}

  Result<std::vector<double>> Score(const std::vector<std::string>& texts) override {
    const int64_t T = model_->config().block_size;
    const auto rows = static_cast<int64_t>(batch_);
    std::vector<double> out;
    out.reserve(texts.size());
    try {
      torch::NoGradGuard no_grad;
      for (size_t first = 0; first < texts.size(); first += batch_) {
        const size_t n = std::min(batch_, texts.size() - first);
        torch::Tensor idx = torch::zeros({rows, T}, torch::kLong);  // unused rows and slots: 0 (end of text)
        torch::Tensor last = torch::zeros({rows}, torch::kLong);
        int64_t* x = idx.data_ptr<int64_t>();
        int64_t* l = last.data_ptr<int64_t>();
        for (size_t i = 0; i < n; ++i) {
          const std::string& text = texts[first + i];
          const auto len = std::min<int64_t>(static_cast<int64_t>(text.size()), T);
          for (int64_t t = 0; t < len; ++t) x[static_cast<int64_t>(i) * T + t] = static_cast<unsigned char>(text[t]);
          l[i] = std::max<int64_t>(len - 1, 0);
        }
        const torch::Tensor r = torch::sigmoid(model_->Rewards(idx, last)).to(torch::kFloat64).contiguous();
        const double* p = r.data_ptr<double>();
        out.insert(out.end(), p, p + n);
      }
    } catch (const c10::Error& e) {
      return InternalError("reward model: " + std::string(e.what_without_backtrace()));
    }
    return out;
  }

  size_t max_batch() const override { return kForwardsPerCall * batch_; }
  std::string Describe() const override { return description_; }

 private:
  Gpt model_;
  const size_t batch_;
  const std::string description_;
};

}  // namespace

Result<std::shared_ptr<rl::TextScorer>> LoadRewardModel(const RewardModelOptions& options) {
  if (options.batch < 1 || options.batch > 65536) {
    return InvalidArgumentError("--batch " + std::to_string(options.batch) + " is out of range: 1..65536 texts");
  }
  if (options.threads < 1) return InvalidArgumentError("--threads must be at least 1");
  HF_ASSIGN_OR_RETURN(TrainerConfig config, LoadTrainerConfig(options.config, {}));
  if (!config.model.reward_head) {
    return InvalidArgumentError(options.config +
                                " is not a reward model's config (model.reward_head is not set): --model-config "
                                "takes the config its weights were trained with (train.objective = \"reward\")");
  }
  torch::set_num_threads(options.threads);
  try {
    Gpt model(config.model);
    std::vector<std::pair<std::string, torch::Tensor>> params;
    for (auto& item : model->named_parameters()) params.emplace_back(item.key(), item.value());
    HF_ASSIGN_OR_RETURN(std::string loaded, LoadWeights(options.weights, params));
    model->eval();
    const ModelConfig& m = config.model;
    std::string description = "reward model " + loaded + " (" + std::to_string(m.n_layer) + " layers, " +
                              std::to_string(m.n_embd) + " wide, context " + std::to_string(m.block_size) +
                              "; forwards of " + std::to_string(options.batch) + " rows)";
    return std::shared_ptr<rl::TextScorer>(
        std::make_shared<RewardModelScorer>(std::move(model), options.batch, std::move(description)));
  } catch (const c10::Error& e) {
    return InvalidArgumentError(options.config + ": cannot build the reward model: " + e.what_without_backtrace());
  }
}

}  // namespace holdfast
