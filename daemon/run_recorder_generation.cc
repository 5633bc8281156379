// RunRecorder's generations: their start, the step they reach, their end,
// and what each generation's ranks restored (the progress record's restore
// fields, common/progress_record.h): the step and tier lineage shows for the
// generation, and a snapshot_passed_over event when the ranks passed memory
// snapshots over (a flipped byte, a snapshot not every rank held) and restored
// an older step.
#include "daemon/run_recorder.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "lineage/event_kind.h"

namespace holdfast {
namespace {

// How often the newest step is written while a generation runs.
constexpr int64_t kStepUpdateEveryNs = 5'000'000'000;

}  // namespace

int RunRecorder::StartGeneration(int64_t start_step) {
  ++generation_;
  generation_expected_step_ = start_step;
  restore_.reset();
  corrupt_scan_due_ = true;
  Write("generation " + std::to_string(generation_) + " start", [run = run_id_, a = attempt_, start_step](LineageDb& db) {
    return db.StartGeneration(run, a, start_step).status();
  });
  last_recorded_step_ = -1;
  last_step_update_ns_ = clock_->MonotonicNs();
  return generation_;
}

void RunRecorder::UpdateStep(int64_t step, bool force) {
  Flush();  // every poll: held records go in as soon as the lock is gone
  if (step < 0 || step == last_recorded_step_) return;
  const int64_t now = clock_->MonotonicNs();
  if (!force && now - last_step_update_ns_ < kStepUpdateEveryNs) return;
  Write("generation step", [run = run_id_, a = attempt_, g = generation_, step](LineageDb& db) {
    return db.UpdateGenerationStep(run, a, g, step);
  });
  last_recorded_step_ = step;
  last_step_update_ns_ = now;
}

void RunRecorder::EndGeneration(RunState state, const std::string& cause) {
  if (generation_ < 0) return;
  Write("generation " + std::to_string(generation_) + " end",
        [run = run_id_, a = attempt_, g = generation_, state, cause](LineageDb& db) {
          return db.EndGeneration(run, a, g, state, cause);
        });
}


std::optional<int64_t> RunRecorder::ObserveRestore(const std::vector<RankView>& views, int world_size) {
  if (restore_recorded_ == generation_ || world_size <= 0 || static_cast<int>(views.size()) < world_size) {
    return std::nullopt;
  }
  const RankView* first = nullptr;
  uint32_t passed_over = 0;
  bool agree = true;
  for (const RankView& v : views) {
    const RankProgress& p = v.progress;
    // Every rank must have said (a restore is one decision of all ranks).
    if (!p.attached() || p.restore_tier == RestoreTier::kUnreported) return std::nullopt;
    if (first == nullptr) first = &v;
    agree = agree && p.restored_step == first->progress.restored_step && p.restore_tier == first->progress.restore_tier;
    passed_over = std::max(passed_over, p.restore_skipped);
  }
  if (first == nullptr) return std::nullopt;
  restore_recorded_ = generation_;
  const RankProgress& p = first->progress;
  const int64_t step = std::max<int64_t>(0, p.restored_step);
  const std::string tier = RestoreTierName(p.restore_tier);
  if (!agree) {
    spdlog::warn("generation {}: the ranks report different restores; lineage records rank {}'s (step {}, {})",
                 generation_, first->rank, step, tier);
  }
  if (step != generation_expected_step_) {
    spdlog::warn("generation {} restored step {} ({}), not step {} as expected from the checkpoints and snapshots "
                 "holdfastd saw: lineage records step {}",
                 generation_, step, tier, generation_expected_step_, step);
  } else {
    spdlog::info("generation {} restored step {} ({})", generation_, step, tier);
  }
  restore_ = GenerationRestore{step, tier};
  // The mesh the ranks report (model parallelism only), with the generation.
  const std::optional<DeviceMesh> mesh = ModelParallelMesh(views);
  const std::string layout = mesh ? mesh->Layout() : "";
  Write("generation " + std::to_string(generation_) + " restore",
        [run = run_id_, a = attempt_, g = generation_, step, tier, layout](LineageDb& db) {
          return db.SetGenerationRestore(run, a, g, step, tier, layout);
        });
  if (passed_over > 0) {
    const std::string what = std::to_string(passed_over) + " memory snapshot" + (passed_over == 1 ? "" : "s");
    Record(event_kind::kSnapshotPassedOver,
           "generation " + std::to_string(generation_) + " passed over " + what +
               " (damaged, or not held by every rank) and restored step " + std::to_string(step) + " from " +
               (tier == "memory" ? "an older memory snapshot" : tier == "disk" ? "the disk" : "nothing (step 0)"),
           "resumed from step " + std::to_string(step) + " (" + tier + "); the ranks' logs name each snapshot passed "
               "over and why");
  }
  return step;
}

}  // namespace holdfast
