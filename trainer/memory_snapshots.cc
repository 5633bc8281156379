#include "trainer/memory_snapshots.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <spdlog/spdlog.h>

#include "checkpoint/checkpoint_loader.h"
#include "common/launch_contract.h"

namespace holdfast {
namespace {

// A whole decimal number of [lo, hi] in variable `name`.
Result<int64_t> EnvNumber(const char* name, const char* text, int64_t lo, int64_t hi) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) {
    return InvalidArgumentError(std::string(name) + "='" + text + "' is not a whole number between " +
                                std::to_string(lo) + " and " + std::to_string(hi) +
                                " (holdfastd sets it from the job file's [recovery]; unset HOLDFAST_SNAPSHOT_DIR "
                                "to run without memory snapshots)");
  }
  return static_cast<int64_t>(v);
}

std::string Text(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }
std::vector<uint8_t> Bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

}  // namespace

Result<std::optional<SnapshotTierConfig>> SnapshotTierFromEnvironment(
    const std::function<const char*(const char*)>& env) {
  const char* dir = env(kEnvSnapshotDir);
  if (dir == nullptr || *dir == '\0') return std::optional<SnapshotTierConfig>();
  SnapshotTierConfig tier;
  tier.dir = dir;
  const char* budget = env(kEnvSnapshotBudgetBytes);
  if (budget == nullptr) {
    return InvalidArgumentError(std::string(kEnvSnapshotDir) + " is set but " + kEnvSnapshotBudgetBytes +
                                " is not: both come from holdfastd (the job file's recovery.memory_budget_mb)");
  }
  HF_ASSIGN_OR_RETURN(int64_t bytes, EnvNumber(kEnvSnapshotBudgetBytes, budget, 0, int64_t{1} << 60));
  tier.budget_bytes = static_cast<uint64_t>(bytes);
  if (const char* every = env(kEnvSnapshotEvery)) {
    HF_ASSIGN_OR_RETURN(tier.every, EnvNumber(kEnvSnapshotEvery, every, 1, int64_t{1} << 50));
  }
  if (const char* replica = env(kEnvSnapshotReplicaEvery)) {
    HF_ASSIGN_OR_RETURN(tier.replica_every, EnvNumber(kEnvSnapshotReplicaEvery, replica, 1, int64_t{1} << 50));
  }
  return std::optional<SnapshotTierConfig>(tier);
}

int SnapshotsHeld(const SnapshotTierConfig& tier) {
  return tier.replica_every > tier.every ? kSnapshotsHeld + 1 : kSnapshotsHeld;
}

Status CheckSnapshotBudget(uint64_t shard_bytes, uint64_t budget_bytes, int held) {
  const uint64_t need = static_cast<uint64_t>(held) * shard_bytes;
  if (need <= budget_bytes) return Status::Ok();
  const double mib = 1 << 20;
  char text[512];
  std::snprintf(text, sizeof(text),
                "a snapshot of this rank is %.1f MiB and %d of them (%s) need %.1f MiB, more than this rank's "
                "%.1f MiB of recovery.memory_budget_mb; raise the budget to at least %.0f MiB x the ranks per node",
                shard_bytes / mib, held,
                held > kSnapshotsHeld ? "the newest, the one being written and the newest replicated step"
                                      : "the newest and the one being written",
                need / mib, budget_bytes / mib, std::ceil(need / mib));
  return ResourceExhaustedError(text);
}

Status AgreeOnSnapshots(const Status& mine, int rank, int world, Store* store, std::chrono::milliseconds timeout) {
  if (world <= 1 || store == nullptr) return mine;
  const std::string decision_key = "budget/decision";
  if (rank != 0) {
    HF_RETURN_IF_ERROR(store->Set("budget/" + std::to_string(rank), Bytes(mine.ok() ? "ok" : mine.message())));
    HF_ASSIGN_OR_RETURN(std::vector<uint8_t> got, store->Get(decision_key, timeout));
    const std::string text = Text(got);
    return text == "ok" ? Status::Ok() : ResourceExhaustedError(text);
  }
  Status decision = mine.ok() ? Status::Ok() : ResourceExhaustedError("rank 0: " + mine.message());
  for (int r = 1; r < world; ++r) {
    Result<std::vector<uint8_t>> got = store->Get("budget/" + std::to_string(r), timeout);
    if (!got.ok()) {
      if (decision.ok()) decision = got.status().WithContext("rank " + std::to_string(r) + "'s snapshot budget");
      break;
    }
    if (decision.ok() && Text(*got) != "ok") decision = ResourceExhaustedError("rank " + std::to_string(r) + ": " + Text(*got));
  }
  Status told = store->Set(decision_key, Bytes(decision.ok() ? "ok" : decision.message()));
  if (!told.ok() && decision.ok()) decision = told.WithContext("publishing the snapshot decision");
  return decision;
}

CheckpointWriterOptions SnapshotWriterOptions(const SnapshotTierConfig& tier, const CheckpointWriterOptions& disk) {
  CheckpointWriterOptions o;
  o.root = tier.dir;
  o.rank = disk.rank;
  o.world_size = disk.world_size;
  o.layout = disk.layout;
  o.config_hash = disk.config_hash;
  o.policy = InFlightPolicy::kWait;  // a rank that skipped a step would leave its peers' commits waiting
  o.retention.keep_last = 1;
  o.retention.keep_newest_every = tier.replica_every;  // the daemon holds it for the replica (hard links)
  if (disk.store != nullptr) o.store = std::make_shared<PrefixStore>(kSnapshotStorePrefix, disk.store);
  o.commit_timeout = disk.commit_timeout;
  // A snapshot commit waits on its peers every step: when one dies, the
  // survivors' exit (and so the restart) waits for this slice to end.
  o.peer_wait_slice = kSnapshotPeerWaitSlice;
  o.start_writeback = false;  // tmpfs has no device to write back to
  o.log_commits = false;
  o.log_name = "memory snapshot";
  o.prune_own_root = tier.prune_here && disk.rank != 0;
  o.idle_priority = true;  // a snapshot every step must not preempt the step (docs/memory-snapshots.md)
  // Short write(2)s: a kernel without preemption runs a syscall to its end
  // before a woken training thread gets the core back (64 MB took ~1 ms).
  o.write_chunk_bytes = 128u << 10;
  return o;
}

void RemoveSnapshotsAfter(const std::string& dir, int64_t step) {
  CheckpointLoader loader(dir);
  Result<std::vector<int64_t>> steps = loader.ListSteps();
  if (!steps.ok()) return;  // nothing there yet
  for (int64_t s : *steps) {
    if (s <= step) continue;
    Status removed = RemoveStepDir(loader.StepDir(s));
    if (removed.ok()) {
      spdlog::info("removed the memory snapshot of step {}: the run goes on from step {}", s, std::max<int64_t>(step, 0));
    } else {
      spdlog::warn("could not remove the memory snapshot of step {}: {}", s, removed.ToString());
    }
  }
}

}  // namespace holdfast
