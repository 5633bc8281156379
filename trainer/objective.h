// Objective: what one training step of holdfast-train minimises, behind one
// seam so that the trainer's step (micro-batches, bucketed gradient
// reduction, ZeRO-1, AdamW, checkpoints) is the same for every workload.
//
//   "lm"  (LmObjective)  next-token cross-entropy on a Dataset's samples:
//                        the trainer's original math, bit for bit.
//   "dpo" (DpoObjective) Direct Preference Optimisation on preference pairs
//                        against a frozen reference model (docs/dpo.md).
//   "reward"             a reward model (model.reward_head) on preference
//                        pairs: Bradley-Terry, -logsigmoid(r_chosen - r_rejected)
//                        of its head's scores (docs/rl-reward.md).
//
// The trainer drives an Objective once per optimiser step:
//   BeginStep(step, cursor)           before the first micro-batch (an RL
//                                     objective waits for samples here);
//   MicroLoss(model, first, B) x A    one per micro-step: the loss of samples
//                                     [first, first + B) (global sample
//                                     indexes: the data cursor's), which the
//                                     trainer divides by A and backpropagates;
//   TakeStepMetrics()                 the step's metrics beyond the loss
//                                     (StepMetricNames), this rank's mean
//                                     over its micro-batches; the trainer
//                                     averages them over the ranks (every rank
//                                     runs the same number of micro-batches)
//                                     in one extra allreduce, only when there
//                                     are any, and writes them to metrics.jsonl.
// Evaluation (Trainer::Evaluate): EvalPartial returns this rank's sums over
// its share of the held-out samples (EvalSumCount() of them, the same layout
// on every rank); the trainer sums them over the ranks in one allreduce and
// EvalMetrics turns the totals into named metrics.
// Extra checkpointed state (a replay buffer, say): ExtraStateViews are saved
// in this rank's shard beside the trainer's own buffers, under names that
// start with "objective."; RestoreExtraState gets this rank's saved views back.
//
// Includes LibTorch: only trainer/*.cc include it. Not thread-safe: the
// training thread owns an Objective.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "common/status.h"
#include "trainer/config.h"
#include "trainer/data/dataset.h"
#include "trainer/model.h"
#include "trainer/train_state.h"

namespace holdfast {

// What an objective works with; pointers not owned, outliving the objective.
struct ObjectiveEnv {
  const TrainerConfig* config = nullptr;
  const Dataset* data = nullptr;  // the run's data (null for objectives fed otherwise)
  torch::Device device{torch::kCPU};
  bool cuda = false;
};

class Objective {
 public:
  virtual ~Objective() = default;

  virtual const char* name() const = 0;

  // Before the first micro-batch of 0-based step `step`, whose samples start
  // at global index `cursor`. An error fails the step.
  virtual Status BeginStep(int64_t /*step*/, uint64_t /*cursor*/) { return Status::Ok(); }
  // Polled while BeginStep waits for something outside the process (an RL
  // learner's samples): true = a stop was asked for, and BeginStep returns
  // kCancelled on every rank without having changed any state, so the caller
  // can checkpoint the last step and exit. Empty = never.
  void SetInterruptCheck(std::function<bool()> check) { interrupted_ = std::move(check); }

  // The loss of samples [first, first + B), a differentiable scalar of
  // model's parameters (model is in training mode).
  virtual torch::Tensor MicroLoss(Gpt& model, uint64_t first, int B) = 0;

  // Samples [first, first + B) as tokens and targets (int64 [B, T]), for a
  // step that runs the model in pieces (a pipeline, trainer/pipeline.h) and
  // computes the lm loss itself; only the lm objective has them
  // (kFailedPrecondition otherwise).
  virtual Result<std::pair<torch::Tensor, torch::Tensor>> LmBatch(uint64_t /*first*/, int /*B*/) {
    return FailedPreconditionError(std::string("the ") + name() + " objective does not run over a pipeline");
  }

  // Tokens one sample feeds the model (tokens_per_s).
  virtual int64_t TokensPerSample() const = 0;

  // Per-step metrics beyond the loss; fixed for the run. Empty = none (and
  // no extra collective per step).
  virtual std::vector<std::string> StepMetricNames() const { return {}; }
  // This rank's mean of each over the micro-batches since the last call
  // (StepMetricNames' order), and starts over.
  virtual std::vector<double> TakeStepMetrics() { return {}; }

  // Evaluation on held-out data: false = this objective has none.
  virtual bool HasEval() const { return false; }
  // Length of the sums vector EvalPartial returns (the same on every rank).
  virtual size_t EvalSumCount() const { return 0; }
  // This rank's sums over its share of held-out samples [0, limit) (model is
  // in eval mode, no grad). Any split of them among the ranks will do (lm and
  // dpo: the contiguous block EvalShare gives), as long as the ranks' shares
  // make up [0, limit) once.
  virtual Result<std::vector<double>> EvalPartial(Gpt& /*model*/, int /*rank*/, int /*world*/, uint64_t /*limit*/) {
    return std::vector<double>();
  }
  // The same with the model run in pieces (a pipeline stage): `logits`
  // returns a batch's logits, or an undefined tensor where this rank does
  // not hold the model's end (its sums are then 0). Only the lm objective.
  using LogitsOf = std::function<torch::Tensor(const torch::Tensor& idx)>;
  virtual Result<std::vector<double>> EvalPartialOf(const LogitsOf& /*logits*/, int /*rank*/, int /*world*/,
                                                    uint64_t /*limit*/) {
    return FailedPreconditionError(std::string("the ") + name() + " objective does not evaluate over a pipeline");
  }
  // Held-out samples there are to evaluate (before eval.samples bounds them).
  virtual uint64_t EvalSize() const { return 0; }
  // Named metrics ("eval_loss", ...) from the sums of every rank.
  virtual std::map<std::string, double> EvalMetrics(const std::vector<double>& /*total*/) const { return {}; }

  // Extra state saved with this rank's checkpoint shard (names "objective.*"),
  // as views valid until the next step; and restoring it from a saved shard's
  // views (all of the shard's buffers; pick yours by name). A checkpoint
  // without them (saved by another objective) is the objective's to judge.
  virtual std::vector<StateView> ExtraStateViews() { return {}; }
  virtual Status RestoreExtraState(const std::vector<StateView>& /*views*/) { return Status::Ok(); }

 protected:
  bool Interrupted() const { return interrupted_ && interrupted_(); }

 private:
  std::function<bool()> interrupted_;
};

// Rank's contiguous block [begin, end) of held-out samples [0, limit).
inline std::pair<uint64_t, uint64_t> EvalShare(int rank, int world, uint64_t limit) {
  const auto r = static_cast<uint64_t>(rank), w = static_cast<uint64_t>(world);
  return {limit * r / w, limit * (r + 1) / w};
}

// "lm": model->forward(x, y) of the Dataset's batch, as the trainer always did.
std::unique_ptr<Objective> MakeLmObjective(const ObjectiveEnv& env);

// "dpo": per pair -logsigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r))), pi
// and ref the summed log-probabilities of the response tokens under the
// policy and under `reference` (a frozen Gpt: eval mode, no grad, on
// env.device; owned by the objective from here on).
std::unique_ptr<Objective> MakeDpoObjective(const ObjectiveEnv& env, Gpt reference);

// "reward": per pair -logsigmoid(r(chosen) - r(rejected)), r the model's
// reward head at each text's last token (Gpt::Rewards, LastTokens).
std::unique_ptr<Objective> MakeRewardModelObjective(const ObjectiveEnv& env);

// The position of each row's last token from its targets [R, T] (int64):
// the last position whose target is scored — an SFT or preference row's
// end-of-text target sits after the response's last byte. int64 [R].
torch::Tensor LastTokens(const torch::Tensor& targets);

// Summed log-probabilities of each row's scored targets (target != -1) under
// logits [R, T, V]: float32 [R]. Differentiable.
torch::Tensor SequenceLogProbs(const torch::Tensor& logits, const torch::Tensor& targets);

}  // namespace holdfast
