// CheckpointTracker: the daemon's view of the job's checkpoint folder — the
// one place that resolves the checkpoint root ([job] checkpoint_dir, relative
// to [job] workdir) and answers "which step would the trainer resume from?".
//
// "Committed" here means what the trainer will actually load: the manifest
// parses and every shard has its size and checksum (CheckpointLoader::Verify),
// not merely that a manifest exists. Verification reads every byte, so a
// verdict is cached per step folder (keyed by the manifest's mtime and size)
// and a step is verified at most once unless its folder changes.
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
  // The newest step that verifies completely; -1 when none (or no root).
  int64_t NewestVerified();
  // Whether step verifies completely (cached); the error says why not.
  Status Verify(int64_t step);
  std::string StepDir(int64_t step) const;
  // Bytes of the step folder's files (0 when missing).
  int64_t StepBytes(int64_t step) const;

 private:
  struct Verdict {
    int64_t mtime_ns = 0;
    int64_t size = 0;
    Status status;
  };
  std::string root_;
  std::map<int64_t, Verdict> verdicts_;
};

}  // namespace holdfast
