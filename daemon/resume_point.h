// The one answer to "can run R resume from the checkpoint of step S?", asked
// by `runctl resume --from-step` before it starts a daemon and by holdfastd
// itself (`--resume R --from-step S`) before anything of the attempt starts,
// so that both refuse the same requests with the same words (exit 2 from
// holdfastd, kNotFound here).
//
// A step can be resumed from when lineage's newest record of it says
// committed (not corrupt, pruned or fenced off by an earlier resume), the
// record names a folder, and the folder passes CheckpointLoader::Inspect at
// InspectDepth::kSizes (a manifest that checks out, every shard on disk with
// its size) — the depth holdfastd's CheckpointTracker uses. Shard contents are
// checksummed by the trainer as it loads. A checkpoint the job owns
// (CheckpointOwner::kJob: a path it reported itself) needs only to be
// committed, with its path still there: the job loads it, told the step in
// HOLDFAST_RESUME_FROM_STEP.
//
// Thread-safety: pure functions of their arguments and the files they read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "lineage/lineage_db.h"

namespace holdfast {

// "" when `record` can be resumed from, else why not, in words. A relative
// record.path is taken relative to `run_dir`.
std::string WhyNotResumable(const CheckpointRecord& record, const std::string& run_dir);

// OK when run `run_id` (whose checkpoint rows are `records`, any order) can
// resume from `step`; else kNotFound: "run R cannot resume from step S: WHY;
// steps it can resume from: A, B" (or "none ...").
Status CheckResumeStep(const std::string& run_id, const std::vector<CheckpointRecord>& records, int64_t step,
                       const std::string& run_dir);

}  // namespace holdfast
