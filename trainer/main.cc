// holdfast-train: one rank of a data-parallel GPT training run.
//
//   holdfast-train --config run.toml [--set section.key=value ...] [--nproc N]
//
// With --nproc N (and no HOLDFAST_RANK in the environment) it launches N local
// ranks of itself; under the supervisor daemon each process is one rank.
// With checkpoint.dir set it resumes from the newest checkpoint that verifies,
// saves asynchronously every checkpoint.every_steps, and on SIGTERM/SIGUSR1
// finishes its step, commits a checkpoint of it and exits with kExitPreempted
// (SIGUSR1 only when it was not ignored at start: under holdfastd it is).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "checkpoint/checkpoint_loader.h"
#include "checkpoint/checkpoint_writer.h"
#include "common/atomic_file.h"
#include "common/launch_contract.h"
#include "common/mesh.h"
#include "common/progress_record.h"
#include "common/store.h"
#include "common/tcp_store.h"
#include "trainer/comm/communicator.h"
#include "trainer/config.h"
#include "trainer/exit_codes.h"
#include "trainer/faults.h"
#include "trainer/local_launcher.h"
#include "trainer/memory_snapshots.h"
#include "trainer/mesh_comm.h"
#include "trainer/program_info.h"
#include "trainer/progress_sink.h"
#include "trainer/spare.h"
#include "trainer/train_state.h"
#include "trainer/trainer.h"

namespace holdfast {
namespace {

struct Flags {
  std::string config_path;
  std::vector<std::string> overrides;
  int nproc = 1;
  std::string dump_init;
  std::string dump_final;
  std::string metrics;
  int64_t stop_after = -1;
  std::string resume = "auto";
  int64_t resume_from_step = -1;
  bool strict_determinism = false;
  std::string inject_fault;  // KIND@RANK:STEP, see ParseFault
  std::string drill_dir;     // faults asked for while the run goes on (trainer/faults.h)
};

std::atomic<int> g_stop_signal{0};
std::atomic<bool> g_checkpoint_signal{false};
void OnStopSignal(int sig) { g_stop_signal.store(sig); }
void OnCheckpointSignal(int) { g_checkpoint_signal.store(true); }

// dist.host, or the address the supervisor gave this rank's node, or loopback
// (one machine, no supervisor).
std::string InterfaceHost(const TrainerConfig& cfg) {
  if (!cfg.dist.host.empty()) return cfg.dist.host;
  const char* node_addr = std::getenv(kEnvNodeAddr);
  return node_addr != nullptr && *node_addr != '\0' ? node_addr : "127.0.0.1";
}

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v == nullptr ? fallback : std::atoi(v);
}

Result<std::shared_ptr<Store>> ConnectRunStore(const TrainerConfig& cfg) {
  const char* addr = std::getenv(kEnvStoreAddr);
  if (addr == nullptr) {
    return InvalidArgumentError(std::string(kEnvWorldSize) + " > 1 but " + kEnvStoreAddr +
                                " is not set: start ranks through holdfast-train --nproc N or holdfastd");
  }
  HF_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(addr));
  HF_ASSIGN_OR_RETURN(RunKey key, StoreKeyFromEnvironment());
  HF_ASSIGN_OR_RETURN(std::shared_ptr<Store> store,
                      ConnectTcpStore(hp.host, hp.port, key, std::chrono::seconds(cfg.dist.timeout_s)));
  return std::shared_ptr<Store>(
      std::make_shared<PrefixStore>(GenerationPrefix(EnvInt(kEnvGeneration, 0)), std::move(store)));
}

Result<std::unique_ptr<Communicator>> MakeCommunicator(const TrainerConfig& cfg, int rank, int world,
                                                       std::shared_ptr<Store> store, const DevicePlacement& placement) {
  if (world == 1) return MakeLocalCommunicator();
  CommunicatorOptions opts;
  opts.rank = rank;
  opts.world_size = world;
  opts.store = std::move(store);
  opts.interface_host = InterfaceHost(cfg);
  opts.timeout = std::chrono::seconds(cfg.dist.timeout_s);
  opts.cuda_device = placement.ordinal;
  if (cfg.dist.backend == "nccl") return MakeNcclCommunicator(opts);
  return MakeGlooCommunicator(opts);
}

// The trainer's communicators: the world as one data-parallel group, or with
// dist.tensor_parallel / dist.pipeline_parallel the groups of the device mesh
// (common/mesh.h), each formed through the run's store. kInvalidArgument (a
// usage error) when the world does not split as asked, naming the shapes that
// would.
Result<TrainerComms> MakeTrainerComms(const TrainerConfig& cfg, int rank, int world, std::shared_ptr<Store> store,
                                      const DevicePlacement& placement) {
  TrainerComms out;
  out.rank = rank;
  out.world_size = world;
  const int tp = cfg.dist.tensor_parallel, pp = cfg.dist.pipeline_parallel, ep = cfg.dist.expert_parallel;
  if (tp == 1 && pp == 1 && ep == 1) {
    HF_ASSIGN_OR_RETURN(out.data, MakeCommunicator(cfg, rank, world, std::move(store), placement));
    return out;
  }
  HF_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create(world, MeshShape{tp, pp, ep}));
  CommunicatorOptions opts;
  opts.rank = rank;
  opts.world_size = world;
  opts.store = std::move(store);
  opts.interface_host = InterfaceHost(cfg);
  opts.timeout = std::chrono::seconds(cfg.dist.timeout_s);
  opts.cuda_device = placement.ordinal;
  std::vector<MeshGroup> groups;
  if (tp > 1) groups.push_back(MeshGroup::kTensor);
  groups.push_back(MeshGroup::kData);
  if (pp > 1) groups.push_back(MeshGroup::kPipeline);
  if (ep > 1) groups.push_back(MeshGroup::kExpert);
  const bool expert_data = ep > 1 && mesh.GroupOf(MeshGroup::kExpertData, rank).size() > 1;
  if (expert_data) groups.push_back(MeshGroup::kExpertData);
  HF_ASSIGN_OR_RETURN(MeshCommunicators comms, MakeMeshCommunicators(mesh, opts, cfg.dist.backend, groups));
  spdlog::info("rank {}: {} of mesh {}", rank, mesh.Describe(rank), mesh.Layout());
  out.data = std::move(comms.data);
  out.tensor = std::move(comms.tensor);
  out.pipeline = std::move(comms.pipeline);
  out.expert = std::move(comms.expert);
  if (expert_data) out.expert_data = std::move(comms.expert_data);
  return out;
}

// The parameters and AdamW moments (this rank's slice of them: StateViews)
// live in the trainer's flat tensors and change only in the optimizer update,
// which the before-update hook fences (WaitStaged), so the writer copies them
// while the next step's forward and backward run. "meta" and "rng.cpu" are
// scratch the trainer rewrites at the next StateViews(): copied inside Save.
std::vector<BufferView> ToBufferViews(const std::vector<StateView>& views) {
  std::vector<BufferView> out;
  for (const StateView& v : views) {
    BufferView b{v.name, v.data, v.size};
    b.defer_copy = v.name == "params" || v.name == "optim.exp_avg" || v.name == "optim.exp_avg_sq";
    b.ready = v.ready;  // GPU state: still arriving in pinned memory (DeviceStager)
    out.push_back(std::move(b));
  }
  return out;
}

// Marks a corrupt step folder (CORRUPT: the reason) and renames it to
// "<dir>.corrupt[.K]". Best effort: a failure is logged, never fatal.
void SetAsideCorrupt(const std::string& dir, const Status& reason) {
  if (Status w = WriteFileAtomically(dir + "/" + kCorruptMarkerFileName, reason.message() + "\n"); !w.ok()) {
    spdlog::warn("cannot mark checkpoint {} corrupt: {}", dir, w.ToString());
    return;
  }
  Result<std::string> to = MoveStepDirAside(dir, kCorruptDirSuffix);
  if (!to.ok()) spdlog::warn("cannot move corrupt checkpoint {} aside: {}", dir, to.status().ToString());
  else spdlog::warn("moved corrupt checkpoint {} to {} (evidence; remove it once looked at)", dir, *to);
}

// Every shard's buffers, as views; those this rank did not read have null data.
std::vector<SavedShard> SavedShards(const LoadedCheckpoint& c) {
  std::vector<SavedShard> out;
  for (const LoadedShard& shard : c.shards) {
    SavedShard s{shard.dir + "/" + c.manifest.shards[shard.header.rank].file, {}};
    for (const ConstBufferView& b : shard.Buffers()) s.views.push_back({b.name, b.data, b.size});
    out.push_back(std::move(s));
  }
  return out;
}

// The model-parallel part of a manifest's layout ("tp=2,pp=2" of
// "tp=2,pp=2,dp=2"; "" for data parallelism alone, "dp=W").
std::string ModelParallelOf(const std::string& layout) {
  const size_t dp = layout.find("dp=");
  if (dp == std::string::npos || dp == 0) return "";
  const size_t end = layout.find(',', dp);  // ",ep=..." after it
  return layout.substr(0, dp - 1) + (end == std::string::npos ? "" : layout.substr(end));
}

// Restores the trainer's state from a checkpoint every rank accepted (`what`
// names its tier in the log: "checkpoint" from disk, "memory snapshot").
Status ApplyCheckpoint(const Flags& flags, const LoadedCheckpoint& ckpt, const char* what, const char* tier,
                       Trainer* trainer) {
  std::vector<std::string> warnings;
  HF_RETURN_IF_ERROR(trainer->RestoreShards(SavedShards(ckpt), flags.strict_determinism, &warnings)
                         .WithContext(std::string("restore ") + what + " " + ckpt.dir));
  for (const std::string& w : warnings) {
    spdlog::error("DETERMINISM BROKEN on resume: {} -- this run will not reproduce the uninterrupted run bit for bit",
                  w);
  }
  spdlog::info("resumed from {} {} (step {}); restore tier: {}", what, ckpt.dir, trainer->step(), tier);
  const int saved_world = static_cast<int>(ckpt.shards.size());
  const std::string& saved_layout = ckpt.manifest.layout;
  const std::string layout = trainer->Layout();
  if (ModelParallelOf(saved_layout) != ModelParallelOf(layout) && trainer->rank() == 0) {
    // Another tensor-parallel or pipeline layout: resharded through the whole tensors.
    const int dp = trainer->world_size() / (trainer->tensor_parallel() * trainer->pipeline_parallel());
    spdlog::warn("RESHARDED: checkpoint of step {} saved as {} ({} ranks), resumed as {}; grad_accum {} keeps its "
                 "global batch of {} samples",
                 trainer->step(), saved_layout, saved_world, layout, trainer->grad_accum(),
                 static_cast<int64_t>(trainer->config().train.micro_batch) * trainer->grad_accum() * dp);
  } else if (saved_world != trainer->world_size() && trainer->rank() == 0) {
    // The global batch is cut over the data-parallel groups only.
    const int replica = trainer->tensor_parallel() * trainer->pipeline_parallel();
    const int dp = trainer->world_size() / replica;
    spdlog::warn("RESHARDED: checkpoint of step {} saved by {} ranks, resumed on {}; grad_accum {} keeps its global "
                 "batch of {} samples ({} data-parallel groups, was {})",
                 trainer->step(), saved_world, trainer->world_size(), trainer->grad_accum(),
                 static_cast<int64_t>(trainer->config().train.micro_batch) * trainer->grad_accum() * dp, dp,
                 saved_world / replica);
  }
  return Status::Ok();
}

// The newest memory snapshot every rank holds and that verifies, or nullopt
// when there is none (logged: the caller goes on to the disk). An error only
// when the ranks could not agree (a peer gone).
Result<std::optional<LoadedCheckpoint>> RestoreFromMemory(const std::string& dir, RestoreOptions ro,
                                                          const RestorePlanner& plan, uint32_t* passed_over) {
  if (ro.store != nullptr) ro.store = std::make_shared<PrefixStore>(kSnapshotStorePrefix, ro.store);
  std::vector<SkippedCheckpoint> skipped;
  Result<LoadedCheckpoint> snap = CheckpointLoader(dir).RestoreNewest(ro, plan, &skipped);
  for (const SkippedCheckpoint& s : skipped) {
    spdlog::warn("memory snapshot of step {} ({}) not used: {}", s.step, s.dir, s.reason.ToString());
  }
  *passed_over = static_cast<uint32_t>(skipped.size());
  if (snap.ok()) return std::optional<LoadedCheckpoint>(std::move(snap).value());
  if (snap.status().code() != StatusCode::kNotFound) return snap.status().WithContext("restore from memory " + dir);
  spdlog::log(skipped.empty() ? spdlog::level::info : spdlog::level::warn,
              "no memory snapshot in {} that every rank holds and that verifies ({} passed over): restoring from disk",
              dir, skipped.size());
  return std::optional<LoadedCheckpoint>();
}

// What a rank's start restored: the step (-1: a fresh start), the tier, and
// the memory snapshots passed over (ProgressSink::SetRestored).
struct Resumed {
  int64_t step = -1;
  RestoreTier tier = RestoreTier::kNone;
  uint32_t passed_over = 0;
};

// Finds and restores the checkpoint to resume from. With memory snapshots (`memory_root`), the newest
// snapshot every rank holds and that verifies comes first; then the disk. The
// ranks split the work (CheckpointLoader::RestoreNewest): each reads and
// checksums only the shards it verifies, plus every shard's slice of the
// parameters and the moments of its own slice (Trainer::BuffersToRestore),
// and they agree through the store on the step every one of them accepted; a
// checkpoint whose slices do not fit together is skipped like a corrupt one,
// by all ranks. A checkpoint saved by another number of ranks is resumed by
// resharding (Trainer::RestoreShards: the global batch kept, or a clear error).
Result<Resumed> ResumeFromCheckpoint(const Flags& flags, const std::string& root, const std::string& memory_root,
                                     Trainer* trainer, std::shared_ptr<Store> store,
                                     std::chrono::milliseconds peer_timeout) {
  Resumed out;
  if (flags.resume == "never" && flags.resume_from_step < 0) return out;
  RestoreOptions ro;
  ro.rank = trainer->rank();
  ro.world_size = trainer->world_size();
  ro.store = std::move(store);
  ro.peer_timeout = peer_timeout;
  auto plan = [&](const LoadedCheckpoint& preview) { return trainer->BuffersToRestore(SavedShards(preview)); };
  if (!memory_root.empty() && flags.resume_from_step < 0) {
    HF_ASSIGN_OR_RETURN(std::optional<LoadedCheckpoint> snap,
                        RestoreFromMemory(memory_root, ro, plan, &out.passed_over));
    if (snap.has_value()) {
      HF_RETURN_IF_ERROR(ApplyCheckpoint(flags, *snap, "memory snapshot", "memory", trainer));
      out.step = trainer->step();
      out.tier = RestoreTier::kMemory;
      return out;
    }
  }
  CheckpointLoader loader(root);
  std::vector<SkippedCheckpoint> skipped;
  Result<LoadedCheckpoint> ckpt = flags.resume_from_step >= 0 ? loader.Restore(flags.resume_from_step, ro, plan)
                                                             : loader.RestoreNewest(ro, plan, &skipped);
  for (const SkippedCheckpoint& s : skipped) {
    spdlog::warn("skipping checkpoint of step {} ({}): {}", s.step, s.dir, s.reason.ToString());
    // Say so on disk, once (rank 0), and move it aside (checkpoint/format.h).
    // Every rank skipped it for the same reason (one rank found it).
    if (s.reason.code() == StatusCode::kCorruption && trainer->rank() == 0) SetAsideCorrupt(s.dir, s.reason);
  }
  if (!ckpt.ok()) {
    if (flags.resume_from_step < 0 && ckpt.status().code() == StatusCode::kNotFound) {
      spdlog::info("no checkpoint to resume from in {}: starting at step 0; restore tier: none", root);
      return out;
    }
    return ckpt.status().WithContext("resume from " + root);
  }
  HF_RETURN_IF_ERROR(ApplyCheckpoint(flags, *ckpt, "checkpoint", "disk", trainer));
  out.step = trainer->step();
  out.tier = RestoreTier::kDisk;
  return out;
}

void LogOutcomes(CheckpointWriter* writer, ProgressSink& progress) {
  for (const SaveOutcome& o : writer->TakeOutcomes()) {
    if (o.committed()) {
      progress.SetCheckpointStep(o.step);
      spdlog::info("checkpoint step {} committed: {:.1f} MB, training stalled {:.1f} ms (of it {:.1f} ms at the "
                   "staging fence), staged in {:.2f} s, written in {:.2f} s",
                   o.step, o.shard_bytes / 1e6, o.stall_seconds * 1e3, o.fence_seconds * 1e3, o.stage_seconds,
                   o.write_seconds);
    } else {
      spdlog::error("checkpoint step {} FAILED (training goes on; the previous checkpoint stays the newest): {}",
                    o.step, o.status.ToString());
      // The supervisor records it in lineage.db, where on-call looks first.
      progress.RecordCheckpointFailure(o.step, o.status.ToString());
    }
  }
}

// What the memory snapshots cost the training loop in this process, for the
// summary at its end (docs/memory-snapshots.md, "What it costs"): per
// snapshot, the capture of the state's views (Trainer::StateViews: the meta
// text, the RNG state) plus the save's own stall (SaveOutcome::stall_seconds:
// Save's time in the caller and the staging fence), against the time of the
// steps run.
struct SnapshotTally {
  std::map<int64_t, double> capture_ms;  // by step, until its outcome arrives
  std::vector<double> stall_ms;
  int64_t failed = 0;
  double step_ms = 0;  // the steps this process ran
  bool logged = false;

  void Log() {
    if (logged || (stall_ms.empty() && failed == 0)) return;
    logged = true;
    std::vector<double> sorted = stall_ms;
    std::sort(sorted.begin(), sorted.end());
    const auto at = [&](double q) {
      return sorted.empty() ? 0.0 : sorted[std::min(sorted.size() - 1, static_cast<size_t>(q * sorted.size()))];
    };
    const double total = std::accumulate(sorted.begin(), sorted.end(), 0.0);
    spdlog::info("memory snapshots: {} committed, {} failed; training stall per snapshot (capture + save + fence) "
                 "median {:.3f} ms, p99 {:.3f} ms, {:.3f} s in all = {:.2f}% of the {:.2f} s of steps",
                 sorted.size(), failed, at(0.5), at(0.99), total / 1000, step_ms > 0 ? 100 * total / step_ms : 0.0,
                 step_ms / 1000);
  }
};

// The memory snapshots' failures (their commits are logged at debug level
// only: one per step), and their stalls into `tally`. Training goes on; the
// disk checkpoints are unaffected.
void LogSnapshotOutcomes(CheckpointWriter* snapshots, SnapshotTally* tally) {
  if (snapshots == nullptr) return;
  for (const SaveOutcome& o : snapshots->TakeOutcomes()) {
    double capture = 0;
    if (auto it = tally->capture_ms.find(o.step); it != tally->capture_ms.end()) {
      capture = it->second;
      tally->capture_ms.erase(it);
    }
    if (!o.committed()) {
      ++tally->failed;
      spdlog::warn("memory snapshot of step {} failed (training goes on; disk checkpoints are unaffected): {}", o.step,
                   o.status.ToString());
    } else {
      tally->stall_ms.push_back(capture + o.stall_seconds * 1000);
    }
  }
}

// Saves `step` unless it is committed already, and waits until it is durable.
Status SaveAndWait(Trainer* trainer, CheckpointWriter* writer, ProgressSink& progress) {
  progress.SetPhase(Phase::kCheckpoint);
  (void)writer->Flush();  // drain what is in flight
  LogOutcomes(writer, progress);
  if (writer->newest_committed_step() == trainer->step()) return Status::Ok();
  HF_ASSIGN_OR_RETURN(std::vector<StateView> views, trainer->StateViews());
  HF_ASSIGN_OR_RETURN(SaveDecision d, writer->Save(trainer->step(), ToBufferViews(views), trainer->LatestEvalMetrics()));
  (void)d;  // nothing is in flight after Flush, so it is queued
  Status s = writer->Flush();
  LogOutcomes(writer, progress);
  return s;
}

// A stage of Run either hands the run on to the next (nullopt) or ends the
// process with an exit code.
using StageExit = std::optional<int>;

// A warm spare (HOLDFAST_SPARE_FD, docs/warm-restarts.md): the rank-independent
// start-up (LibTorch's runtime, a throwaway forward on the CPU: never a
// device), then the wait for the rank assignment, which turns this process
// into that rank. The config is read again then: the file as it is now, as a
// cold start would read it. An exit code when the process ends here
// (released: 0; a bad assignment or config), nullopt once it is a rank.
std::optional<int> WaitAsSpare(const Flags& flags, const char* spare_fd, Result<TrainerConfig>* cfg) {
  spdlog::set_pattern(std::string(kUtcLogTime) + " [%^%l%$] [spare] %v", spdlog::pattern_time_type::utc);
  if (Status warm = WarmUpRuntime(**cfg); !warm.ok()) {
    spdlog::error("warm spare: the warm-up failed: {}", warm.ToString());
    return kExitFailed;
  }
  Startup().Mark("warm");
  spdlog::info("warm spare ready (pid {}): {}; waiting for a rank assignment", getpid(), Startup().Describe());
  const double ready_ms = Startup().ElapsedMs();
  Result<SpareAssignment> a = BecomeAssignedRank(spare_fd);
  if (!a.ok()) {
    if (a.status().code() == StatusCode::kNotFound) {
      spdlog::info("warm spare {}", a.status().message());
      return kExitOk;
    }
    spdlog::error("warm spare: {}", a.status().ToString());
    return kExitFailed;
  }
  const double waited_s = (Startup().ElapsedMs() - ready_ms) / 1e3;
  Startup().Restart("assigned");
  spdlog::info("warm spare (pid {}) becomes rank {} of {}, generation {}, after {:.1f} s waiting", getpid(),
               a->env[kEnvRank], a->env[kEnvWorldSize], a->env[kEnvGeneration], waited_s);
  *cfg = LoadTrainerConfig(flags.config_path, flags.overrides);
  if (!cfg->ok()) {
    spdlog::error("{}", cfg->status().message());
    return kExitUsage;
  }
  Startup().Mark("config");
  return std::nullopt;
}

// One rank's run, built stage by stage: OpenRun (the rank, its device, the
// store, the trainer, the progress sink, the fault hook), SetUpCheckpoints
// (resume, the writer), OpenMetrics; then RunSteps. Members are destroyed in
// reverse order: the checkpoint writer and the fault hook, which the
// trainer's before-update hook calls, before the trainer; the trainer before
// the progress sink it reports into.
struct RankRun {
  int rank = 0;
  int world = 1;
  bool main_rank = true;
  std::unique_ptr<ProgressSink> progress;  // never null once OpenRun succeeded
  std::shared_ptr<Store> store;            // null with one rank
  std::unique_ptr<Trainer> trainer;
  std::unique_ptr<FaultHook> faults;        // never null once OpenRun succeeded
  std::unique_ptr<CheckpointWriter> writer;  // null without checkpoint.dir
  // The memory snapshot writer (trainer/memory_snapshots.h): null without
  // the tier, or when a snapshot does not fit its budget.
  std::unique_ptr<CheckpointWriter> snapshots;
  int64_t snapshot_every = 1;
  SnapshotTally snapshot_tally;
  bool resumed = false;                      // from a checkpoint
  std::ofstream metrics;                     // the main rank's metrics.jsonl
};

void InstallSignalHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  // holdfastd starts its ranks with SIGUSR1 ignored: a scheduler's warning
  // reaches every process of a Slurm step and is the daemon's to act on (it
  // may train on for the lead time, then stops the ranks with SIGTERM).
  // Elsewhere SIGUSR1 is a stop, as SIGTERM is.
  struct sigaction inherited {};
  sigaction(SIGUSR1, nullptr, &inherited);
  if (inherited.sa_handler != SIG_IGN) sigaction(SIGUSR1, &sa, nullptr);
  struct sigaction ca {};
  ca.sa_handler = OnCheckpointSignal;
  sigemptyset(&ca.sa_mask);
  sigaction(SIGUSR2, &ca, nullptr);  // the supervisor's "checkpoint now" (runctl checkpoint)
}

void LogModelAndOptimizer(const TrainerConfig& cfg, const RankRun& run) {
  const Trainer& trainer = *run.trainer;
  if (run.main_rank) {
    spdlog::info("model: {} parameters, {} layers x {} wide, context {}; data {} {}; world {}", trainer.num_params(),
                 cfg.model.n_layer, cfg.model.n_embd, cfg.model.block_size, cfg.data.format, cfg.data.path,
                 run.world);
  }
  if (trainer.model_parallel()) {
    // Every rank holds another part: say which and how big (the memory a layout costs per rank).
    const std::string experts = trainer.expert_parallel() > 1 ? fmt::format(", ep {} of {}", trainer.expert_rank(),
                                                                               trainer.expert_parallel())
                                                                 : std::string();
    spdlog::info("model part on this rank (tp {} of {}, pp stage {} of {}{}): {} parameters, {} bytes of parameters "
                 "and {} of gradients",
                 trainer.tensor_rank(), trainer.tensor_parallel(), trainer.pipeline_stage(),
                 trainer.pipeline_parallel(), experts, trainer.num_params(), trainer.num_params() * 4,
                 trainer.num_params() * 4);
  }
  const double whole_mb = static_cast<double>(trainer.num_params()) * 8 / 1e6;
  const double own_mb = static_cast<double>(trainer.optimizer_state_bytes()) / 1e6;
  if (trainer.zero_stage() > 0) {
    spdlog::info("optimizer: ZeRO-{}, AdamW state {} bytes on this rank ({:.2f} MB, {:.3f} of the whole {:.2f} MB)",
                 trainer.zero_stage(), trainer.optimizer_state_bytes(), own_mb, own_mb / whole_mb, whole_mb);
  } else if (run.main_rank) {
    spdlog::info("optimizer: AdamW state {} bytes on every rank ({:.2f} MB, not sharded)",
                 trainer.optimizer_state_bytes(), own_mb);
  }
}

// The rank, its device, the run's store and communicator, the trainer, the
// progress record the supervisor asked for and the fault hook.
StageExit OpenRun(const Flags& flags, const TrainerConfig& cfg, RankRun* run) {
  run->rank = EnvInt(kEnvRank, 0);
  run->world = EnvInt(kEnvWorldSize, 1);
  run->main_rank = run->rank == 0;
  // UTC with the date, like lineage and holdfastd (common/program_cli.h).
  spdlog::set_pattern(std::string(kUtcLogTime) +
                          (run->world > 1 ? " [%^%l%$] [rank " + std::to_string(run->rank) + "] %v" : " [%^%l%$] %v"),
                      spdlog::pattern_time_type::utc);
  ConfigureTorchRuntime(cfg.train.threads);
  InstallSignalHandlers();

  // The device before anything else touches one: a wrong placement is a usage
  // error (the same launch fails the same way), reported before rendezvous.
  const auto env = [](const char* name) -> const char* { return std::getenv(name); };
  Result<DevicePlacement> placement = ResolveDevice(cfg, run->world, CudaDeviceCount(), env);
  if (!placement.ok()) {
    spdlog::error("{}", placement.status().ToString());
    return kExitUsage;
  }
  spdlog::info("rank {} computes on {} ({}), {} precision", run->rank, placement->Name(), placement->why,
               cfg.train.precision);

  if (run->world > 1) {
    auto s = ConnectRunStore(cfg);
    if (!s.ok()) {
      spdlog::error("{}", s.status().ToString());
      return kExitFailed;
    }
    run->store = *s;
    Startup().Mark("store");
  }
  auto comms = MakeTrainerComms(cfg, run->rank, run->world, run->store, *placement);
  if (!comms.ok()) {
    spdlog::error("{}", comms.status().ToString());
    return comms.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailed;
  }
  Startup().Mark("communicator");
  auto trainer = Trainer::Create(cfg, std::move(comms).value(), *placement);
  if (!trainer.ok()) {
    spdlog::error("{}", trainer.status().ToString());
    const StatusCode code = trainer.status().code();
    return code == StatusCode::kInvalidArgument || code == StatusCode::kNotFound ? kExitUsage : kExitFailed;
  }
  run->trainer = std::move(trainer).value();
  Startup().Mark("model and data");
  auto progress = OpenProgressSinkFromEnv(run->rank);
  if (!progress.ok()) {
    spdlog::error("cannot open the progress record the supervisor asked for: {}", progress.status().ToString());
    return kExitFailed;
  }
  run->progress = std::move(progress).value();
  run->trainer->SetProgressSink(*run->progress);
  LogModelAndOptimizer(cfg, *run);
  // Split over a tensor-parallel group or pipeline stages, every rank takes
  // part (the parts are gathered); the main rank writes.
  const bool model_parallel = run->trainer->model_parallel();
  if (!flags.dump_init.empty() && (run->main_rank || model_parallel)) {
    Status s = run->trainer->DumpParams(flags.dump_init, run->main_rank);
    if (!s.ok()) {
      spdlog::error("{}", s.ToString());
      return kExitFailed;
    }
  }
  FaultOptions fo;
  fo.rank = run->rank;
  fo.inject_fault = flags.inject_fault;
  fo.out_dir = cfg.output.dir;
  fo.drill_dir = flags.drill_dir;
  auto faults = MakeFaultHook(fo);
  if (!faults.ok()) {
    spdlog::error("{}", faults.status().ToString());
    return kExitUsage;
  }
  run->faults = std::move(faults).value();
  return std::nullopt;
}

// With checkpoint.dir: resumes from the newest checkpoint that verifies (or
// the one asked for) and starts the writer. Either way installs the trainer's
// before-update hook: the writer's staging fence, then the fault hook's point.
// The memory snapshot writer, when this rank's snapshot fits its budget and
// every other rank's fits theirs (AgreeOnSnapshots); otherwise the refusal is
// logged with the numbers and the run goes on with disk checkpoints only.
void StartMemorySnapshots(const SnapshotTierConfig& tier, const TrainerConfig& cfg, CheckpointWriterOptions disk,
                          const std::vector<std::pair<std::string, uint64_t>>& sizes, RankRun* run) {
  Result<ShardHeader> layout = LayoutShard(0, run->rank, run->world, sizes);
  Status fits = layout.ok() ? CheckSnapshotBudget(layout->file_size, tier.budget_bytes, SnapshotsHeld(tier))
                            : layout.status();
  // A store client of its own: a client serialises its requests, so the
  // snapshot commits' Gets parked for a peer's key would hold up the disk
  // writer's commits behind them (per-step saves: disk checkpoints went
  // uncommitted for many steps).
  if (run->world > 1) {
    Result<std::shared_ptr<Store>> own = ConnectRunStore(cfg);
    if (fits.ok() && !own.ok()) fits = own.status().WithContext("a store client for the snapshots");
    disk.store = own.ok() ? *own : run->store;
  }
  std::shared_ptr<Store> agree;
  if (disk.store != nullptr) agree = std::make_shared<PrefixStore>(kSnapshotStorePrefix, disk.store);
  Status all = AgreeOnSnapshots(fits, run->rank, run->world, agree.get(), disk.commit_timeout);
  if (all.ok() && layout.ok()) {
    auto w = CheckpointWriter::Create(SnapshotWriterOptions(tier, disk));
    if (w.ok() && (*w)->Reserve(layout->file_size).ok()) {
      run->snapshots = std::move(w).value();
      run->snapshot_every = tier.every;
      spdlog::info("memory snapshots every {} step(s) in {}: {:.1f} MiB each, {} held of this rank's {:.1f} MiB budget",
                   tier.every, tier.dir, layout->file_size / 1048576.0, SnapshotsHeld(tier), tier.budget_bytes / 1048576.0);
      return;
    }
    all = w.ok() ? ResourceExhaustedError("cannot allocate the snapshot staging buffer") : w.status();
  }
  spdlog::warn("memory snapshots REFUSED, training goes on with disk checkpoints only: {}", all.ToString());
}

// With checkpoint.dir: resumes from the newest memory snapshot or checkpoint
// that verifies (or the one asked for), starts the writer and, under a
// supervisor with the memory tier, the snapshot writer. Either way installs
// the trainer's before-update hook: the writers' staging fences, then the
// fault hook's point.
StageExit SetUpCheckpoints(const Flags& flags, const TrainerConfig& cfg, RankRun* run) {
  Trainer& trainer = *run->trainer;
  const std::string ckpt_root = CheckpointRoot(cfg);
  auto tier = SnapshotTierFromEnvironment([](const char* name) -> const char* { return std::getenv(name); });
  if (!tier.ok()) {
    spdlog::error("{}", tier.status().ToString());
    return kExitUsage;
  }
  if (tier->has_value() && ckpt_root.empty()) {
    spdlog::warn("memory snapshots need checkpoint.dir (the tier they fall back to): none are taken");
    tier->reset();
  }
  if (ckpt_root.empty()) run->progress->SetRestored(-1, RestoreTier::kNone, 0);
  if (!ckpt_root.empty()) {
    auto step = ResumeFromCheckpoint(flags, ckpt_root, tier->has_value() ? (*tier)->dir : "", &trainer, run->store,
                                     std::chrono::seconds(cfg.checkpoint.commit_timeout_s));
    if (!step.ok()) {
      spdlog::error("{}", step.status().ToString());
      // Another config, a reshard that cannot keep the global batch, a strict
      // determinism refusal: the same start would fail again (a supervisor
      // stops instead of restarting it).
      return step.status().code() == StatusCode::kFailedPrecondition ? kExitUsage : kExitFailed;
    }
    run->resumed = step->step >= 0;
    run->progress->SetRestored(step->step, step->tier, step->passed_over);
    CheckpointWriterOptions wo;
    wo.root = ckpt_root;
    wo.rank = run->rank;
    wo.world_size = run->world;
    wo.layout = trainer.Layout();
    wo.config_hash = trainer.ConfigHashHex();
    wo.policy = cfg.checkpoint.policy;
    wo.retention.keep_last = static_cast<int>(cfg.checkpoint.keep_last);
    wo.retention.keep_every = cfg.checkpoint.keep_every;
    wo.store = run->store;
    wo.commit_timeout = std::chrono::seconds(cfg.checkpoint.commit_timeout_s);
    auto w = CheckpointWriter::Create(wo);
    if (!w.ok()) {
      spdlog::error("cannot start checkpointing to {}: {}", ckpt_root, w.status().ToString());
      return kExitFailed;
    }
    run->writer = std::move(w).value();
    // The state's buffers (one StateViews: on a GPU it stages the state) size
    // the staging buffers before the first save.
    std::vector<std::pair<std::string, uint64_t>> sizes;
    size_t bytes = 0;
    if (auto views = trainer.StateViews(); views.ok()) {
      for (const StateView& v : *views) {
        sizes.emplace_back(v.name, v.size);
        bytes += v.size;
      }
    }
    Status reserved = run->writer->Reserve(bytes + (1 << 20));
    if (!reserved.ok()) spdlog::warn("could not pre-allocate the checkpoint staging buffer: {}", reserved.ToString());
    if (tier->has_value()) {
      // Snapshots of steps after the one resumed belong to a timeline that
      // ended; one rank per node clears them before any rank can save.
      if (EnvInt(kEnvLocalRank, 0) == 0) RemoveSnapshotsAfter((*tier)->dir, step->step);
      SnapshotTierConfig snap = **tier;
      snap.prune_here = EnvInt(kEnvLocalRank, 0) == 0;  // one rank per node's folder
      StartMemorySnapshots(snap, cfg, wo, sizes, run);
    }
  }
  // The writers and the fault hook are declared after the trainer in RankRun,
  // so they die first; no Step runs after that.
  trainer.SetBeforeUpdateHook([w = run->writer.get(), snap = run->snapshots.get(), faults = run->faults.get()] {
    if (w != nullptr) w->WaitStaged();
    if (snap != nullptr) snap->WaitStaged();
    faults->BeforeUpdate();
  });
  return std::nullopt;
}

// The main rank's metrics.jsonl: appended to after a resume, else started afresh.
StageExit OpenMetrics(const Flags& flags, const TrainerConfig& cfg, RankRun* run) {
  if (!run->main_rank) return std::nullopt;
  std::string path = flags.metrics;
  if (path.empty()) path = (std::filesystem::path(cfg.output.dir) / cfg.output.metrics).string();
  std::error_code ec;
  if (auto parent = std::filesystem::path(path).parent_path(); !parent.empty()) {
    std::filesystem::create_directories(parent, ec);
  }
  run->metrics.open(path, run->resumed ? std::ios::app : std::ios::trunc);
  if (!run->metrics) {
    spdlog::error("cannot open metrics file {} for writing", path);
    return kExitFailed;
  }
  return std::nullopt;
}

int64_t WallClockMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Held-out evaluation: the metrics.jsonl record and the log line. False on error.
bool Evaluate(RankRun* run) {
  auto e = run->trainer->Evaluate();
  if (!e.ok()) {
    spdlog::error("{}", e.status().ToString());
    return false;
  }
  if (run->main_rank) {
    nlohmann::json line = {{"record", "eval"}, {"step", e->step},      {"eval_samples", e->samples},
                           {"eval_ms", e->ms}, {"time_ms", WallClockMs()}, {"generation", EnvInt(kEnvGeneration, 0)}};
    std::string text;
    for (const auto& [name, value] : e->metrics) {
      line[name] = value;
      text += fmt::format(" | {} {:.4f}", name, value);
    }
    run->metrics << line.dump() << "\n";
    run->metrics.flush();
    spdlog::info("eval after step {} on {} held-out samples{} | {:.1f} ms", e->step, e->samples, text, e->ms);
  }
  return true;
}

// The main rank's metrics.jsonl record of a step, and its log line every train.log_every.
void RecordStep(const StepMetrics& m, const TrainerConfig& cfg, RankRun* run) {
  nlohmann::json line = {{"step", m.step},           {"loss", m.loss},         {"lr", m.lr},
                         {"grad_norm", m.grad_norm}, {"tokens_per_s", m.tokens_per_s},
                         {"step_ms", m.step_ms},     {"comm_wait_ms", m.comm_wait_ms},
                         {"time_ms", WallClockMs()}, {"generation", EnvInt(kEnvGeneration, 0)}};
  std::string extra;  // the objective's metrics, for the log line
  for (const auto& [name, value] : m.extra) {
    line[name] = value;
    extra += fmt::format(" | {} {:.4f}", name, value);
  }
  run->metrics << line.dump() << "\n";
  run->metrics.flush();
  if (m.step % cfg.train.log_every == 0 || m.step == cfg.train.steps) {
    spdlog::info("step {:>6}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:>8.0f} tok/s | {:.1f} ms{}", m.step,
                 cfg.train.steps, m.loss, m.lr, m.grad_norm, m.tokens_per_s, m.step_ms, extra);
  }
}

// A stop asked for (a signal): the checkpoint of the last completed step, then kExitPreempted.
int SaveAndExitPreempted(RankRun* run) {
  Trainer& trainer = *run->trainer;
  Status s = SaveAndWait(&trainer, run->writer.get(), *run->progress);
  if (!s.ok()) {
    spdlog::error("preemption checkpoint of step {} failed: {}", trainer.step(), s.ToString());
    return kExitFailed;
  }
  if (run->snapshots != nullptr) {
    LogSnapshotOutcomes(run->snapshots.get(), &run->snapshot_tally);
    run->snapshot_tally.Log();
  }
  spdlog::warn("checkpoint of step {} committed; exiting for preemption (code {})", trainer.step(), kExitPreempted);
  return kExitPreempted;
}

// A step that failed: stopped while it waited on other processes (GRPO's
// groups; nothing of the step happened, so the last completed step is saved)
// or an error.
int StepFailed(const Status& status, RankRun* run) {
  if (status.code() != StatusCode::kCancelled) {
    spdlog::error("{}", status.ToString());
    return kExitFailed;
  }
  spdlog::warn("{}", status.ToString());
  if (run->writer != nullptr && run->trainer->step() > 0) return SaveAndExitPreempted(run);
  return kExitPreempted;
}

// After a completed step: what it asked for (stop, checkpoint) and what is
// due: the memory snapshot (every snapshot_every steps), the disk checkpoint
// (every checkpoint.every_steps), both from the same state views.
StageExit CheckpointAfterStep(const StepMetrics& m, const TrainerConfig& cfg, RankRun* run) {
  CheckpointWriter* writer = run->writer.get();
  if (writer == nullptr) {
    if (!m.stop) return std::nullopt;
    spdlog::warn("stop requested (signal) after step {}; no checkpoint.dir is set, so nothing is saved", m.step);
    return kExitPreempted;
  }
  LogOutcomes(writer, *run->progress);
  LogSnapshotOutcomes(run->snapshots.get(), &run->snapshot_tally);
  if (m.stop) {
    spdlog::warn("stop requested (signal): committing a checkpoint of step {} before exiting", m.step);
    return SaveAndExitPreempted(run);
  }
  const bool disk_due = m.checkpoint || (cfg.checkpoint.every_steps > 0 && m.step % cfg.checkpoint.every_steps == 0);
  const bool memory_due = run->snapshots != nullptr && m.step % run->snapshot_every == 0;
  if (!disk_due && !memory_due) return std::nullopt;
  if (m.checkpoint) spdlog::info("checkpoint requested (runctl checkpoint): saving step {}", m.step);
  if (disk_due) run->progress->SetPhase(Phase::kCheckpoint);
  const auto capture_start = std::chrono::steady_clock::now();
  auto views = run->trainer->StateViews();
  if (!views.ok()) {
    spdlog::error("cannot capture state for checkpoint: {}", views.status().ToString());
    return kExitFailed;
  }
  const std::vector<BufferView> buffers = ToBufferViews(*views);
  if (memory_due) {
    const double capture_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - capture_start).count();
    auto decision = run->snapshots->Save(m.step, buffers, run->trainer->LatestEvalMetrics());
    if (!decision.ok()) {
      spdlog::warn("memory snapshot of step {}: {}", m.step, decision.status().ToString());
    } else {
      run->snapshot_tally.capture_ms[m.step] = capture_ms;  // until the save's outcome arrives
    }
  }
  if (!disk_due) return std::nullopt;
  auto decision = writer->Save(m.step, buffers, run->trainer->LatestEvalMetrics());
  if (!decision.ok()) spdlog::error("checkpoint step {}: {}", m.step, decision.status().ToString());
  // The save goes on in the writer's thread: this rank is on to the next
  // batch, and the checkpoint allowance must not cover a hang there.
  run->progress->SetPhase(Phase::kData);
  return std::nullopt;
}

// After the last step: its checkpoint, phase kDone, the final parameters.
int FinishRun(const Flags& flags, RankRun* run) {
  Trainer& trainer = *run->trainer;
  if (run->snapshots != nullptr) {
    (void)run->snapshots->Flush();
    LogSnapshotOutcomes(run->snapshots.get(), &run->snapshot_tally);
    run->snapshot_tally.Log();
  }
  if (run->writer != nullptr) {
    Status s = SaveAndWait(&trainer, run->writer.get(), *run->progress);
    if (!s.ok()) spdlog::error("final checkpoint failed: {}", s.ToString());
  }
  run->progress->SetPhase(Phase::kDone);
  if (!flags.dump_final.empty() && trainer.model_parallel()) {
    // A collective over the tensor-parallel group and the pipeline: every rank takes part, the main rank writes.
    Status s = trainer.DumpParams(flags.dump_final, run->main_rank);
    if (!s.ok()) {
      spdlog::error("{}", s.ToString());
      return kExitFailed;
    }
  }
  if (run->main_rank) {
    if (!flags.dump_final.empty() && !trainer.model_parallel()) {
      Status s = trainer.DumpParams(flags.dump_final);
      if (!s.ok()) {
        spdlog::error("{}", s.ToString());
        return kExitFailed;
      }
    }
    std::printf("final step %lld params xxh3 %016llx\n", static_cast<long long>(trainer.step()),
                static_cast<unsigned long long>(trainer.ParamsHash()));
    std::fflush(stdout);
  }
  return kExitOk;
}

// The step loop: the fault hook's points around each step, the step with this
// rank's requests (signals), its records, evaluation and checkpoint.
int RunSteps(const Flags& flags, const TrainerConfig& cfg, RankRun* run) {
  Trainer& trainer = *run->trainer;
  // A fresh run is evaluated before its first step too: the starting point
  // (the init_from weights of an SFT, DPO or RL run) beside what training made of it.
  if (cfg.eval.every_steps > 0 && trainer.step() == 0 && !Evaluate(run)) return kExitFailed;
  trainer.SetInterruptCheck([] { return g_stop_signal.load() != 0; });
  while (trainer.step() < cfg.train.steps) {
    run->faults->BeforeStep(trainer.step() + 1);
    StepRequests requests;
    requests.stop = g_stop_signal.load() != 0;
    requests.checkpoint = g_checkpoint_signal.exchange(false);
    auto m = trainer.Step(requests);
    if (!m.ok()) return StepFailed(m.status(), run);
    run->faults->AfterStep(m->step_ms, m->comm_wait_ms);
    run->snapshot_tally.step_ms += m->step_ms;
    if (run->main_rank) RecordStep(*m, cfg, run);
    if (!Startup().logged) {  // where this process's start went (docs/warm-restarts.md)
      Startup().Mark("first step");
      Startup().logged = true;
      spdlog::info("start-up: {}", Startup().Describe());
    }
    // Held-out evaluation: every eval.every_steps and after the last step,
    // before the checkpoint of the step (which carries its metrics).
    if (cfg.eval.every_steps > 0 && (m->step % cfg.eval.every_steps == 0 || m->step == cfg.train.steps) &&
        !Evaluate(run)) {
      return kExitFailed;
    }
    if (StageExit e = CheckpointAfterStep(*m, cfg, run)) return *e;
    if (m->step == flags.stop_after) {
      spdlog::info("stopping after step {} as asked (--stop-after)", m->step);
      if (run->writer != nullptr) {
        (void)run->writer->Flush();
        LogOutcomes(run->writer.get(), *run->progress);
      }
      return kExitOk;
    }
  }
  return FinishRun(flags, run);
}

int Run(const Flags& flags, const TrainerConfig& cfg) {
  RankRun run;
  if (StageExit e = OpenRun(flags, cfg, &run)) return *e;
  if (StageExit e = SetUpCheckpoints(flags, cfg, &run)) return *e;
  Startup().Mark("restored");
  if (StageExit e = OpenMetrics(flags, cfg, &run)) return *e;
  return RunSteps(flags, cfg, &run);
}

}  // namespace
}  // namespace holdfast

int main(int argc, char** argv) {
  using namespace holdfast;
  Startup();  // the timeline's zero
  CLI::App app{"holdfast-train: data-parallel GPT training with complete, bit-exact state"};
  Flags flags;
  app.add_option("-c,--config", flags.config_path, "TOML config file (see examples/)");
  app.add_option("--set", flags.overrides, "override a config key: --set optim.lr=3e-4 (repeatable)");
  app.add_option("--nproc", flags.nproc, "launch N local data-parallel ranks")->check(CLI::Range(1, 1024));
  app.add_option("--dump-init", flags.dump_init, "write the initial parameters to DIR (params.json + params.bin)");
  app.add_option("--dump-final", flags.dump_final, "write the final parameters to DIR");
  app.add_option("--metrics", flags.metrics, "per-step metrics JSONL (default: output.dir/output.metrics)");
  app.add_option("--stop-after", flags.stop_after, "exit after step K, its checkpoint (if due) committed")
      ->check(CLI::PositiveNumber);
  app.add_option("--resume", flags.resume, "auto: continue from the newest checkpoint that verifies; never: start over")
      ->check(CLI::IsMember({"auto", "never"}));
  app.add_option("--from-step", flags.resume_from_step, "continue from the checkpoint of step N (as holdfastd's)")
      ->check(CLI::NonNegativeNumber);
  // The old spelling, hidden (docs/cli.md: one flag name per concept across the programs).
  app.add_option("--resume-from-step", flags.resume_from_step)->check(CLI::NonNegativeNumber)->group("");
  app.add_option("--inject-fault", flags.inject_fault,
                 "test/drill only: KIND@RANK:STEP with KIND hang, crash, exit, stop or slow (slow@RANK:STEP:xF computes F "
                 "times as long from STEP on, default x4); fires once per output.dir, except exit (exit 1 "
                 "every time the rank reaches STEP)");
  app.add_option("--drill-dir", flags.drill_dir,
                 "test/drill only: before each step, rank R takes DIR/rank-R if present and does what it says: "
                 "hang, crash, or 'slow xF N' (F times the compute for N steps)")
      ->envname("HOLDFAST_DRILL_DIR");
  app.add_flag("--strict-determinism", flags.strict_determinism,
               "refuse to resume when threads, BLAS, world size or LibTorch differ from the checkpoint");
  AddProgramConventions(app, "holdfast-train", TrainerBuiltAgainst(), TrainerExitCodesHelp());
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help/--version exit 0; anything else is named (the closest flag) and exits kExitUsage.
    return HandleParseError(app, e, "holdfast-train", argc, argv, kExitUsage);
  }
  if (!flags.inject_fault.empty()) {
    if (auto f = ParseFault(flags.inject_fault, ""); !f.ok()) {
      std::fprintf(stderr, "error: %s\nRun with --help for more information.\n", f.status().message().c_str());
      return kExitUsage;
    }
  }
  auto cfg = LoadTrainerConfig(flags.config_path, flags.overrides);
  if (!cfg.ok()) {
    std::fprintf(stderr, "error: %s\n", cfg.status().message().c_str());
    return kExitUsage;
  }
  Startup().Mark("config");
  if (const char* spare_fd = std::getenv(kEnvSpareFd); spare_fd != nullptr) {
    if (std::optional<int> code = WaitAsSpare(flags, spare_fd, &cfg)) return *code;
  }
  if (const char* env = std::getenv(kEnvResumeFromStep); env != nullptr && flags.resume_from_step < 0) {
    flags.resume_from_step = std::atoll(env);  // set by holdfastd for `runctl resume --from-step`
  }
  if (flags.resume_from_step >= 0 && cfg->checkpoint.dir.empty()) {
    std::fprintf(stderr, "error: --from-step needs checkpoint.dir (--set checkpoint.dir=DIR)\n");
    return kExitUsage;
  }
  if (flags.nproc > 1 && std::getenv(kEnvRank) == nullptr) {
    LaunchOptions lo;
    lo.nproc = flags.nproc;
    lo.host = InterfaceHost(*cfg);
    return RunLocalRanks(std::vector<std::string>(argv, argv + argc), lo);
  }
  const int code = Run(flags, *cfg);
  // Everything of the run (writers, trainer, store, metrics) is closed by
  // now. What is left is LibTorch's and its libraries' static teardown, which
  // took 130 ms on the 2-core VM: a restart waits for it (the daemon starts
  // the next generation once every rank is reaped). Skip it.
  std::fflush(stdout);
  std::fflush(stderr);
  spdlog::default_logger()->flush();
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return code;  // the sanitizers report at exit
#else
  std::_Exit(code);
#endif
}
