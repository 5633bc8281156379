// CheckpointTracker: the daemon's view of the job's checkpoint folder — the
// one place that resolves the checkpoint root ([job] checkpoint_dir, relative
// to [job] workdir) and answers "which step would the trainer resume from?".
//
// "Committed" here means the trainer's loader would take it up: the manifest
// parses and its own checksum holds, and every shard it names is on disk with
// the size the manifest records — so a manifest left beside a missing,
// truncated or half-pruned shard does not count. Shard contents are not
// checksummed here: the trainer checksums every byte as it loads (and skips,
// reports and falls back from a corrupt one), and reading a checkpoint twice
// on the daemon's event loop would stall supervision and double restore time
// for large checkpoints. A check is a manifest read and a stat per shard.
//
// Thread-safety: none; owned by the daemon's event-loop thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/job_config.h"

namespace holdfast {

// The job's checkpoint root ([job] checkpoint_dir, relative to [job] workdir,
// else to holdfastd's working directory) as an absolute path; "" when the job
// names none.
std::string CheckpointRoot(const JobConfig& job);

class CheckpointTracker {
 public:
  explicit CheckpointTracker(std::string root) : root_(std::move(root)) {}

  const std::string& root() const { return root_; }
  bool enabled() const { return !root_.empty(); }

  // Step folders on disk with a manifest (not verified), newest first.
  std::vector<int64_t> StepsOnDisk() const;
  // The newest step that checks out (see above); -1 when none (or no root).
  int64_t NewestVerified() const;
  // Whether step checks out; the error says why not. A step a trainer marked
  // corrupt (kCorruptMarkerFileName) never does.
  Status Verify(int64_t step) const;
  // The reason a trainer wrote when it found `step` corrupt; "" when unmarked.
  std::string CorruptMark(int64_t step) const;
  // Step folders a trainer found corrupt: marked in place, or moved aside
  // ("step-N.corrupt[.K]", checkpoint/format.h).
  struct CorruptFolder {
    int64_t step;
    std::string dir;
    std::string reason;
  };
  std::vector<CorruptFolder> CorruptFolders() const;
  std::string StepDir(int64_t step) const;
  // The metrics step's manifest carries (the trainer's newest eval); empty
  // when it has none or cannot be read.
  std::map<std::string, double> Metrics(int64_t step) const;
  // Bytes of the step folder's files (0 when missing).
  int64_t StepBytes(int64_t step) const;

 private:
  std::string root_;
};

}  // namespace holdfast
