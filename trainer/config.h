// TrainerConfig: everything a training run is, read from TOML and flags.
//
// Every key is known and validated: an unknown key, a wrong type or an
// out-of-range value is an error that names the file, the line and the key, and
// says what is allowed. Flags override the file (`--set section.key=value`).
// The config hash covers the keys that change the math of training (model,
// data, optimiser, schedule, batch, seed), so a checkpoint can tell whether it
// belongs to this run. Plain data; no LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_writer.h"  // InFlightPolicy
#include "common/status.h"

namespace holdfast {

// The job file's [moe] (docs/parallelism.md, "The mixture-of-experts
// layer"): every block's MLP replaced by `experts` expert MLPs and a top-k
// router (trainer/moe.h). Part of the model (and of the config hash when set).
struct MoeConfig {
  int experts = 0;               // 0 = a dense MLP
  int top_k = 2;                 // experts per token, 1..experts
  double capacity_factor = 1.25;  // an expert takes ceil(factor x tokens x top_k / experts) assignments
  double aux_loss_coef = 0.01;   // weight of the load-balancing loss, summed over the blocks
};

struct ModelConfig {
  int n_layer = 4;
  int n_head = 4;
  int n_embd = 128;
  int block_size = 128;
  int vocab_size = 256;
  double dropout = 0.0;
  bool bias = true;
  // A reward model's scalar head (train.objective = "reward", docs/rl-reward.md):
  // a Linear(n_embd, 1) on the final LayerNorm's output at a text's last token.
  bool reward_head = false;
  MoeConfig moe;  // the [moe] section
};

struct DataConfig {
  std::string format = "text";  // text | bin | sft | preference
  std::string path;             // resolved against the config file's folder
};

struct TrainConfig {
  int64_t steps = 100;
  int micro_batch = 8;   // samples per rank per micro-step
  int grad_accum = 1;    // micro-steps per optimiser step
  uint64_t seed = 1337;
  int threads = 1;       // LibTorch intra-op threads per rank
  int log_every = 1;
  // Where the rank computes (trainer/device.h, ResolveDevice): "auto" = the
  // supervisor's HOLDFAST_DEVICE, else a GPU by local rank when there is one
  // and the backend can reduce on it, else the CPU; "cpu"; "cuda" = a GPU or fail.
  std::string device = "auto";
  // "fp32"; "bf16" = the matmuls in bfloat16 (autocast's choice of ops), with
  // float32 master weights, gradients, AdamW moments and reductions.
  std::string precision = "fp32";
  // What a step minimises (trainer/objective.h): "lm" = next-token
  // cross-entropy (text, bin, sft data); "dpo" = Direct Preference
  // Optimisation on preference pairs against a frozen reference model.
  std::string objective = "lm";
  // The initial weights at step 0 (not when resuming a checkpoint of this
  // run): a holdfast-params-v1 dump (a folder with params.json + params.bin,
  // --dump-final) or a checkpoint (a step folder, or a checkpoint root: its
  // newest step that verifies). Resolved against the config file's folder.
  // "" = initialised from train.seed.
  std::string init_from;
};

struct OptimConfig {
  double lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup_steps = 10;
  int64_t decay_steps = 0;  // 0 = train.steps
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;  // 0 = off
};

struct DistConfig {
  std::string backend = "gloo";  // gloo | nccl
  double bucket_mb = 4.0;
  bool overlap = true;           // allreduce buckets while backward runs
  // 1 (ZeRO stage 1, with world > 1): each rank keeps and updates only its
  // slice of the AdamW moments ([n*r/W, n*(r+1)/W), its checkpoint slice);
  // gradients are reduce-scattered and the updated parameters all-gathered,
  // bucket by bucket. 0: every rank holds all of it (gradients allreduced).
  int zero_stage = 1;
  // Ranks per tensor-parallel group (Megatron's column/row split of every
  // transformer block: attention by heads, the MLP by its hidden dimension;
  // trainer/tensor_parallel.h). Data parallelism is what is left of the
  // world: world / tensor_parallel groups, each averaging gradients (and
  // ZeRO-1) over its own ranks. Not in the config hash: like the world size,
  // a layout, recorded with each checkpoint (docs/parallelism.md).
  int tensor_parallel = 1;
  // Pipeline stages (trainer/pipeline.h): the blocks cut into this many
  // stages of consecutive blocks, one optimiser step's grad_accum
  // micro-batches run over them by the 1F1B schedule. A layout, as
  // tensor_parallel: world = tensor_parallel x pipeline_parallel x data
  // parallel groups (common/mesh.h); not in the config hash.
  int pipeline_parallel = 1;
  // Sequence parallelism within each tensor-parallel group (Megatron-LM's):
  // between the split regions (LayerNorms, residual stream) each tp rank
  // holds T / tensor_parallel positions; the same results as without it.
  // Needs tensor_parallel > 1 and model.block_size a multiple of it. A
  // layout, not in the config hash.
  bool sequence_parallel = false;
  // Ranks per expert-parallel group (with moe.experts > 0): the data-parallel
  // ranks split into groups of this many consecutive ones (common/mesh.h),
  // each rank computing moe.experts / expert_parallel of every block's
  // experts for the tokens of its whole group (all-to-all dispatch and
  // combine). Every rank still holds every expert's parameters (averaged
  // over the data-parallel group like the rest), so checkpoints do not
  // depend on it. A layout, not in the config hash.
  int expert_parallel = 1;
  // The address this rank's Gloo connections and a local launcher's store bind:
  // "" = the node's address from its supervisor (HOLDFAST_NODE_ADDR), else 127.0.0.1.
  std::string host;
  int64_t timeout_s = 300;
};

struct CheckpointConfig {
  std::string dir;           // "" = no checkpoints; relative = under output.dir
  int64_t every_steps = 0;   // 0 = only on preemption (SIGTERM/SIGUSR1)
  int64_t keep_last = 3;
  int64_t keep_every = 0;    // also keep every N-th step (0 = none)
  InFlightPolicy policy = InFlightPolicy::kWait;  // a save requested while one is in flight: "wait" | "skip"
  int64_t commit_timeout_s = 600;
};

struct OutputConfig {
  std::string dir = ".";
  std::string metrics = "metrics.jsonl";  // relative to dir
};

// train.objective = "dpo" (docs/dpo.md).
struct DpoConfig {
  double beta = 0.1;      // strength of the implicit KL to the reference
  // The frozen reference model: weights as for train.init_from (a params dump
  // or a checkpoint). "" = train.init_from, or, without that, the policy's
  // initial weights.
  std::string reference;
};

// Held-out evaluation (docs/eval.md).
struct EvalConfig {
  int64_t every_steps = 0;  // evaluate after every N-th step and the last one; 0 = off
  // The part of the data never trained on: a fraction of the dataset when
  // below 1, else a whole count (examples or pairs; tokens for text and bin).
  // 0 = nothing held out (every sample trains, as before this key existed).
  double holdout = 0;
  int64_t samples = 0;  // held-out samples per evaluation (the first N); 0 = all of them
};

// train.objective = "grpo": the learner of a GRPO run (docs/rl.md). The
// rollout workers (holdfast-rollout) read the same file.
struct RlConfig {
  std::string dir = "rl";       // the exchange directory (trainer/rl/exchange.h); relative = under output.dir
  std::string task = "add2";    // the verifiable task (trainer/rl/task.h)
  int64_t prompts_per_step = 8;  // prompts (groups) one learner step trains on, over all ranks
  int64_t group_size = 8;        // completions per prompt (the group of group-relative advantages)
  int64_t max_new_tokens = 6;
  double temperature = 1.0;
  // A group trained at step s must come from policy version >= s - max_staleness.
  // 0 = synchronous: every step waits for groups of its own policy (deterministic).
  int64_t max_staleness = 0;
  double clip_eps = 0.2;   // PPO ratio clip
  double kl_beta = 0.04;   // weight of the k3 KL estimate to the reference
  int64_t eval_prompts = 200;    // held-out prompts per evaluation (greedy)
  double wait_timeout_s = 600;   // a step waiting longer than this for its groups fails, naming them
  int64_t keep_versions = 4;     // weights versions kept in the exchange directory
  // Learner rank 0 writes the groups each step trained on to DIR/trained/sN.jsonl
  // (what tests/reference/check_grpo.py replays in PyTorch; an audit trail).
  bool ledger = false;
  // How workers get each policy version (trainer/rl/weights_wire.h): "network"
  // = from learner rank 0's weights server as soon as it is handed over, the
  // exchange directory's copy as the fallback; "files" = the copy only.
  std::string weights_transport = "network";
};

struct TrainerConfig {
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  OptimConfig optim;
  DistConfig dist;
  CheckpointConfig checkpoint;
  OutputConfig output;
  DpoConfig dpo;
  EvalConfig eval;
  RlConfig rl;
  std::string source;  // the file it came from, for messages ("" = defaults)
};

// Reads `path` (may be empty: defaults only), then applies overrides of the
// form "section.key=value" (value in TOML syntax; bare words are strings).
Result<TrainerConfig> LoadTrainerConfig(const std::string& path, const std::vector<std::string>& overrides);

// Checks cross-key rules (n_embd divisible by n_head, min_lr <= lr, ...).
Status ValidateTrainerConfig(const TrainerConfig& config);

// Hash of everything that changes training's math; stable across runs/builds.
uint64_t ConfigHash(const TrainerConfig& config);

// Canonical TOML text of the config (what the run actually used).
std::string ConfigToToml(const TrainerConfig& config);

// The frozen reference model's weights for DPO: dpo.reference, else
// train.init_from; "" = the policy's initial weights.
std::string ReferenceWeights(const TrainerConfig& config);

// checkpoint.dir resolved against output.dir ("" when checkpoints are off).
std::string CheckpointRoot(const TrainerConfig& config);

// LR at 0-based step: linear warmup to lr, then cosine to min_lr.
double LearningRateAt(const OptimConfig& optim, int64_t total_steps, int64_t step);

}  // namespace holdfast
