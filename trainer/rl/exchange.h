// The RL exchange directory: how the learner, the rollout workers and the
// reward service of a GRPO run find each other's work (docs/rl.md). Files on
// the run's shared filesystem (like checkpoints), each written whole by one
// writer and renamed into place, so that any process may die at any moment
// and the others only ever read complete files:
//
//   DIR/weights/vNNNNNNNN/      policy weights of one version (holdfast-params-v1:
//                               params.json + params.bin), written by learner rank 0
//   DIR/weights/LATEST          "N\n": the newest complete version
//   DIR/demand.json             the learner's Demand: which prompts it wants now
//   DIR/rollouts/qNNNNNNNNNN.json  one RolloutGroup per prompt index q, written by
//                               worker q mod W; removed by the learner once ingested
//   DIR/workers/wI.jsonl        worker I's journal (what it started and finished)
//
// Prompt q belongs to learner step q / prompts_per_step; a group for it made by
// policy version v is `q/P - v` steps stale. Workers generate only what the
// demand asks for and only with weights fresh enough (PlanWork); the learner
// checks every group again when it ingests it (replay_buffer.h).
//
// Plain data and file functions; no LibTorch. Thread-safety: none needed (no
// state); concurrent processes are safe by the write-whole-then-rename rule.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/config.h"

namespace holdfast::rl {

// One completion of a group.
struct RolloutSample {
  std::vector<int64_t> tokens;  // generated tokens (the stop token included when produced)
  std::vector<float> logprobs;  // behaviour log-prob of each token (temperature 1), same length
  double reward = 0;
  bool stopped = false;         // ended with the stop token (not cut at max_new_tokens)
};

// The completions of one prompt, from one policy version.
struct RolloutGroup {
  uint64_t q = 0;            // prompt index (the task's train prompt q)
  int64_t version = 0;       // policy version (learner step) of the weights that generated it
  int worker = 0;
  std::string task;          // task spec it was made for
  std::vector<int64_t> prompt;  // prompt tokens
  std::vector<RolloutSample> samples;
  double gen_ms = 0;         // generation time (sampling only)
  double reward_ms = 0;      // time to get the rewards (retries included)
};

// What the learner wants now (written by learner rank 0 before it waits).
struct Demand {
  int64_t version = 0;        // the learner's policy version: weights vN are published
  uint64_t upto = 0;          // prompts q < upto are wanted ...
  uint64_t consumed_below = 0;  // ... except q < consumed_below (trained on already) ...
  std::set<uint64_t> buffered;  // ... and these (in the learner's replay buffer)
  int64_t prompts_per_step = 1;
  int64_t max_staleness = 0;  // a group for step s must come from version >= s - max_staleness
  int64_t group_size = 1;
  std::string task;
  int64_t learner_epoch = 0;  // changes whenever a learner (re)starts: a worker logs it
};

// rl.dir resolved against output.dir.
std::string ExchangeDir(const TrainerConfig& config);

// Paths under the exchange directory.
std::string WeightsDir(const std::string& dir, int64_t version);
std::string RolloutPath(const std::string& dir, uint64_t q);
std::string DemandPath(const std::string& dir);
std::string WorkerJournalPath(const std::string& dir, int worker);

// Creates DIR, DIR/weights, DIR/rollouts, DIR/workers.
Status PrepareExchange(const std::string& dir);

std::string GroupToJson(const RolloutGroup& group);
// Parses and validates a group file's text (every field present and typed,
// tokens and logprobs of equal length, logprobs finite and <= 0); errors name
// `source` and the field.
Result<RolloutGroup> GroupFromJson(const std::string& text, const std::string& source);
Status WriteGroup(const std::string& dir, const RolloutGroup& group);
Result<RolloutGroup> ReadGroup(const std::string& path);
// The prompt indexes with a group file (sorted); temporary files are skipped.
Result<std::vector<uint64_t>> ListGroups(const std::string& dir);

std::string DemandToJson(const Demand& demand);
Result<Demand> DemandFromJson(const std::string& text, const std::string& source);
Status WriteDemand(const std::string& dir, const Demand& demand);
// kNotFound while the learner has not written one yet.
Result<Demand> ReadDemand(const std::string& dir);

// The newest complete weights version (weights/LATEST); kNotFound when none.
Result<int64_t> ReadLatestVersion(const std::string& dir);
// Points weights/LATEST at `version` (its folder must be complete) and removes
// the folders of versions older than version - keep + 1 and newer than
// version (a learner that resumed from an earlier checkpoint: those weights
// belong to steps that no longer exist).
Status CommitLatestVersion(const std::string& dir, int64_t version, int keep);

// The learner step a prompt index belongs to.
inline int64_t StepOfPrompt(uint64_t q, int64_t prompts_per_step) {
  return static_cast<int64_t>(q / static_cast<uint64_t>(prompts_per_step));
}

// Worker `worker` of `workers`: the prompts it should generate next, in order,
// given the demand, whether a group file exists (`exists`), and the policy
// version it holds. Its prompts are q = worker (mod workers) with
// consumed_below <= q < upto, not buffered, without a file, and whose step the
// held version is fresh enough for (q/P - version <= max_staleness). At most
// `limit` of them.
std::vector<uint64_t> PlanWork(const Demand& demand, int worker, int workers, int64_t held_version,
                               const std::function<bool(uint64_t)>& exists, size_t limit);

// The per-group seed of the sampler: the same for a prompt whoever makes it,
// so a regenerated group of the same weights is the same group.
uint64_t GroupSeed(uint64_t run_seed, uint64_t q);

}  // namespace holdfast::rl
