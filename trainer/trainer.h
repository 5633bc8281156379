// Trainer: one data-parallel rank of holdfast-train.
//
// Owns the GPT model, its parameters and gradients as two flat float32
// buffers (parameters are views into them), a flat AdamW, the data sampler
// cursor, and the Communicator that averages gradients. Backward fills
// gradient buckets; each bucket is allreduced as soon as it is complete, in a
// fixed order on every rank, while backward goes on (DDP-style overlap).
//
// This header is LibTorch-free (pimpl) so that main and tests compile fast.
// Not thread-safe: one thread drives a Trainer.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "trainer/config.h"
#include "trainer/device.h"
#include "trainer/train_state.h"

namespace holdfast {

class Communicator;
class ProgressSink;

struct StepMetrics {
  int64_t step = 0;        // completed steps after this one (1-based)
  double loss = 0;         // mean loss over the step's global batch
  double lr = 0;
  double grad_norm = 0;    // before clipping
  double tokens_per_s = 0;
  double step_ms = 0;
  double comm_wait_ms = 0;  // time backward's end waited for the last allreduce
  bool stop = false;        // some rank asked to stop after this step (all ranks agree)
  bool checkpoint = false;  // some rank asked for a checkpoint of this step (all ranks agree)
  // The objective's own metrics (train.objective = "dpo": rewards_chosen,
  // rewards_rejected, reward_margin, reward_accuracy), averaged over the
  // step's global batch; empty for "lm".
  std::vector<std::pair<std::string, double>> extra;
};

// One evaluation on the held-out data (Trainer::Evaluate); every rank gets
// the same values.
struct EvalResult {
  int64_t step = 0;      // completed steps when it ran
  uint64_t samples = 0;  // held-out samples evaluated (eval.samples bounds them)
  // "eval_loss"; with "dpo" also eval_reward_accuracy, eval_rewards_chosen,
  // eval_rewards_rejected, eval_reward_margin.
  std::map<std::string, double> metrics;
  double ms = 0;
};

// One rank's saved state, and where it came from (a shard file's path) for
// error messages. The views are not owned.
struct SavedShard {
  std::string source;
  std::vector<StateView> views;
};

// What a rank asks of every rank at the end of a step (signals it received).
struct StepRequests {
  bool stop = false;
  bool checkpoint = false;
};

// The communicators of a model-parallel rank (dist.tensor_parallel or
// dist.pipeline_parallel > 1): its data-parallel group (gradients, ZeRO-1,
// the step's loss and requests, evaluation), its tensor-parallel group (the
// model's allreduces, the split parameters' share of the gradient norm) and
// its pipeline (activations and gradients between stages, the tied
// embedding's gradient, the loss, norm and requests shared between stages),
// with the rank's place in the whole world (common/mesh.h: rank = tp + TP *
// (dp + DP * pp)). A group of one may be null.
struct TrainerComms {
  std::unique_ptr<Communicator> data;
  std::unique_ptr<Communicator> tensor;
  std::unique_ptr<Communicator> pipeline;
  std::unique_ptr<Communicator> expert;  // dist.expert_parallel > 1: the MoE blocks' all-to-all group
  // dist.expert_parallel > 1: the ranks holding the same experts (the data
  // group's ranks with the same ep rank; common/mesh.h): the experts'
  // gradients, and every ZeRO-1 and checkpoint slice, are cut over it. Null
  // when it is one rank (dp = ep).
  std::unique_ptr<Communicator> expert_data;
  int rank = 0;
  int world_size = 1;
};

class Trainer {
 public:
  // Builds the model (initialised from config.train.seed, on the CPU, so the
  // initial weights are the same on every device; then train.init_from's
  // weights when set), the objective (train.objective; DPO's frozen reference
  // model: dpo.reference, else train.init_from, else the initial weights)
  // and opens the data (eval.holdout held out). `comm`
  // is owned by the Trainer; its world size and rank define the layout. On a
  // GPU placement the model, the flat buffers and every batch live on that
  // device, AdamW runs as one CUDA kernel, and checkpoints are staged through
  // pinned memory (DeviceStager); cuBLAS and LibTorch are set deterministic.
  static Result<std::unique_ptr<Trainer>> Create(const TrainerConfig& config, std::unique_ptr<Communicator> comm,
                                                 const DevicePlacement& placement = {});
  // The same with tensor and/or pipeline parallelism: every transformer block split over
  // comms.tensor (its size is config.dist.tensor_parallel), the rest of the
  // model replicated in the group. The initial weights are the unsplit
  // model's (train.seed, train.init_from), each rank keeping its part, so a
  // layout starts from the same weights as one process. The flat buffers,
  // AdamW and ZeRO-1 hold this rank's parameters (its shards and the
  // replicated ones) and work over comms.data; the data sampler cuts the
  // global batch by data-parallel rank. kInvalidArgument when the groups do
  // not make up the world or the config cannot be split. With
  // dist.pipeline_parallel the rank holds its stage's blocks (trainer/
  // pipeline.h; the first stage the embeddings, the last ln_f and a copy of
  // the tied wte) and a step runs its grad_accum micro-batches over the
  // stages by the 1F1B schedule.
  static Result<std::unique_ptr<Trainer>> Create(const TrainerConfig& config, TrainerComms comms,
                                                 const DevicePlacement& placement = {});
  ~Trainer();

  // Runs one optimiser step (grad_accum micro-steps). `requests` are this
  // rank's wishes (a signal arrived); they travel with the step's loss
  // allreduce, so every rank learns in the same step that one of them wants to
  // stop or checkpoint (StepMetrics::stop / ::checkpoint) and they all act
  // after the same step.
  Result<StepMetrics> Step(StepRequests requests = {});

  // Evaluates the current parameters on the held-out split (eval.holdout;
  // eval.samples of it, 0 = all), with the model in eval mode and no grad; the
  // progress record's phase is kEval meanwhile. The ranks split the held-out
  // samples and sum their results in one allreduce: every rank must call it
  // after the same step. Draws no random numbers, so training goes on exactly
  // as without it. kFailedPrecondition when nothing is held out.
  Result<EvalResult> Evaluate();
  // The newest evaluation's metrics plus "eval_step" (the step it ran after);
  // kept across a resume (saved in the checkpoint's meta). Empty before any.
  std::map<std::string, double> LatestEvalMetrics() const;

  // Reports phases and collectives to the supervisor's shared-memory record
  // (trainer/progress_sink.h): the step's phases here, every collective
  // through the communicator wrapper (trainer/comm/progress_communicator.h).
  // `progress` is not owned and must outlive the Trainer; until this is
  // called, NoProgress().
  void SetProgressSink(ProgressSink& progress);

  // Runs `hook` on the training thread inside each Step, just before the AdamW
  // update: the only point where a Step changes the parameters and moments
  // that StateViews() points to. A deferred checkpoint copy fences here
  // (CheckpointWriter::WaitStaged). Empty = none.
  void SetBeforeUpdateHook(std::function<void()> hook);

  // Polled by an objective whose step waits on other processes (GRPO's
  // learner waiting for groups): when it returns true the wait ends and Step
  // fails with kCancelled on every rank, the state still that of the last
  // completed step (checkpoint it, then exit). Empty = never.
  void SetInterruptCheck(std::function<bool()> check);

  int64_t step() const;
  // This rank in the whole world, and the world (all groups).
  int rank() const;
  int world_size() const;
  // dist.tensor_parallel, and this rank's place in its tensor-parallel group.
  int tensor_parallel() const;
  int tensor_rank() const;
  // dist.pipeline_parallel, and this rank's stage.
  int pipeline_parallel() const;
  int pipeline_stage() const;
  // dist.expert_parallel, and this rank's place in its expert-parallel group
  // (it holds experts [rank x E / EP, (rank + 1) x E / EP) of each block).
  int expert_parallel() const;
  int expert_rank() const;
  // Split over a tensor-parallel group, pipeline stages or expert-parallel
  // ranks: DumpParams is then a collective of every rank.
  bool model_parallel() const { return tensor_parallel() > 1 || pipeline_parallel() > 1 || expert_parallel() > 1; }
  const TrainerConfig& config() const;

  // What the checkpoint writer stages, as views into the trainer's own memory
  // (no copy): valid until the next Step or RestoreState; "params" and
  // "optim.*" keep their bytes until the next Step's before-update hook
  // returns. The parameters and moments are the same on every rank, so each
  // rank saves only its slice of them, [rank*N/W, (rank+1)*N/W) of the N
  // flat elements (the last rank takes the remainder), recorded in "meta" as
  // "slice": {offset, count, total}; "meta" and "rng.cpu" are this rank's own.
  // With one rank the slice is everything.
  // On a GPU the sliced buffers are views of the DeviceStager's pinned buffer,
  // filled by asynchronous device→host copies: read them only after their
  // ready() returns OK (the checkpoint writer does); "rng.cuda" is added. The
  // call first runs the before-update hook (the writer's WaitStaged), since the
  // pinned buffer is reused from save to save.
  Result<std::vector<StateView>> StateViews();
  // Complete state (slice = everything), copied into host buffers.
  Result<TrainState> CaptureState();
  // Restores one complete state (a CaptureState, or a one-rank checkpoint
  // shard). A state from another config fails; a state whose determinism
  // fingerprint differs is restored with a loud warning (returned in
  // *warnings) unless strict, in which case it fails.
  Status RestoreState(const std::vector<StateView>& state, bool strict_determinism,
                      std::vector<std::string>* warnings);
  // Restores from every rank's saved state (shards[r] = rank r's): "meta" and
  // "rng.cpu" from shards[rank()], the parameters and moments assembled from
  // all shards' slices. Buffers BuffersToRestore did not ask for may be
  // views with null data (not read). Also accepts checkpoints written before slicing
  // (every shard a full replica, state format v1): this rank's shard is used.
  // Saved by another number of ranks (a reshard): the slices are re-cut for
  // this world, grad_accum() changes to keep the checkpoint's global batch
  // (or the restore fails naming the world sizes that would keep it), ranks
  // past the saved ones seed a fresh dropout stream, and the determinism
  // fingerprint's difference names the world size. Saved with another
  // dist.tensor_parallel or dist.pipeline_parallel: the whole model's
  // parameters and moments are put together from every shard and cut as
  // this rank holds them (the global batch kept likewise; a fresh dropout
  // stream on every rank).
  Status RestoreShards(const std::vector<SavedShard>& shards, bool strict_determinism,
                       std::vector<std::string>* warnings);
  // What RestoreShards needs of a checkpoint, given a preview of it: every
  // shard's "meta" and buffer sizes (a view whose data is null was not read).
  // For each shard (index = saved rank): its "params"; its moments when its
  // slice overlaps the part of them this rank holds (all of it without
  // ZeRO-1); and of the shard whose rank-local state this rank takes, "meta"
  // and "rng.*" (a checkpoint of full replicas: all of that shard). A
  // checkpoint of another model-parallel layout: every shard's meta,
  // parameters and moments, and shard 0's "rng.*".
  // RestoreShards must then be given at least these buffers; the others may
  // have null data. First checks that the slices fit together (tile [0,
  // total) with no gap or overlap, agree on total and on their buffer sizes):
  // kCorruption naming the shard and saying what to do, so that the checkpoint
  // is skipped like a corrupt one. Does not compare with this model
  // (RestoreShards does, after the config check), so a checkpoint of another
  // config still fails loudly instead of being skipped.
  Result<std::vector<std::vector<std::string>>> BuffersToRestore(const std::vector<SavedShard>& preview) const;

  // The world layout recorded with checkpoints ("dp=2", "tp=2,dp=2").
  std::string Layout() const;
  // Hex of ConfigHash(config()).
  std::string ConfigHashHex() const;

  DeterminismFingerprint Fingerprint() const;

  // Parameters in the "holdfast-params-v1" layout: DIR/params.json + DIR/params.bin
  // (named tensors, float32, little endian), readable from Python: the whole
  // model, as one process holds it. With tensor parallelism the shards are
  // gathered over the tensor-parallel group first, so every rank of the group
  // must call it (a collective); `write` says whether this one writes.
  Status DumpParams(const std::string& dir, bool write = true) const;
  // XXH3-64 of the flat parameter bytes: equal hashes = bit-identical parameters.
  uint64_t ParamsHash() const;
  int64_t num_params() const;
  // Bytes of AdamW state (both moments) this rank holds: 8 per parameter, or
  // under ZeRO-1 8 per parameter of its slice (about 1/world of it).
  int64_t optimizer_state_bytes() const;
  // Micro-steps per optimiser step: train.grad_accum, or after RestoreShards
  // of a checkpoint saved by another number of ranks, what keeps its global
  // batch (micro_batch x grad_accum x world size).
  int grad_accum() const;
  // The ZeRO stage in effect: dist.zero_stage with more than one rank, else 0.
  int zero_stage() const;

 private:
  struct Impl;
  explicit Trainer(std::unique_ptr<Impl> impl);
  // State views with the flat buffers cut to elements [begin, end).
  Result<std::vector<StateView>> ViewsOfSlice(int64_t begin, int64_t end);
  // Restores own's rank-local state and the flat buffers from all's slices.
  // `another_layout`: `all` is every shard of a checkpoint of another
  // tensor-parallel or pipeline layout, resharded through whole tensors.
  Status Restore(const SavedShard& own, const std::vector<SavedShard>& all, bool strict_determinism,
                 std::vector<std::string>* warnings, bool another_layout);
  // BuffersToRestore of the shards of this rank's tensor-parallel coordinate.
  Result<std::vector<std::vector<std::string>>> BuffersOfShards(const std::vector<SavedShard>& preview) const;
  std::unique_ptr<Impl> impl_;
};

// CUDA devices LibTorch can use in this process (0 for a CPU-only LibTorch).
int CudaDeviceCount();

// Applies the threading and allocator settings determinism and speed depend on;
// call at process start, before any LibTorch work (again later: only the
// intra-op thread count changes; LibTorch fixes the inter-op pool once).
void ConfigureTorchRuntime(int threads);

// A warm spare's start-up (trainer/spare.h): ConfigureTorchRuntime, then one
// forward and backward of a small model of config.model's kind on the CPU
// (LibTorch's kernels, thread pools and allocator touched once), thrown away.
// Never touches a device, never the global RNG's later use (Create seeds it).
// Its memory is bounded (at most 128 wide, 1 layer), whatever the model.
Status WarmUpRuntime(const TrainerConfig& config);

}  // namespace holdfast
