#include "daemon/resume_point.h"

#include <sys/stat.h>

#include <filesystem>
#include <map>

#include "checkpoint/checkpoint_loader.h"
#include "checkpoint/format.h"

namespace holdfast {

std::string WhyNotResumable(const CheckpointRecord& k, const std::string& run_dir) {
  if (k.state != CheckpointState::kCommitted) {
    return std::string("it is marked ") + CheckpointStateName(k.state) + (k.reason.empty() ? "" : " (" + k.reason + ")");
  }
  if (k.owner == CheckpointOwner::kJob) {
    // The job's own checkpoint: the job loads it (HOLDFAST_RESUME_FROM_STEP); here it must be there.
    if (k.path.empty()) {
      return "the job reported no path for it (report one with holdfast.checkpoint_committed(step, path); "
             "docs/job-contract.md)";
    }
    const std::string path = k.path[0] == '/' ? k.path : run_dir + "/" + k.path;
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0) return "its path " + path + " is gone (removed by the job, or moved)";
    return "";
  }
  if (k.path.empty()) return "lineage.db records no folder for it";
  const std::string dir = k.path[0] == '/' ? k.path : run_dir + "/" + k.path;
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return "its folder " + dir + " is gone (pruned or moved)";
  if (stat((dir + "/" + kManifestFileName).c_str(), &st) != 0) {
    return dir + " has no " + std::string(kManifestFileName) + " (an incomplete or damaged save)";
  }
  const std::filesystem::path folder = std::filesystem::path(dir).lexically_normal();
  if (folder.filename().string() != StepDirName(k.step)) {
    return dir + " is not named " + StepDirName(k.step) + " (moved by hand?)";
  }
  const Result<Manifest> m = CheckpointLoader(folder.parent_path().string()).Inspect(k.step, InspectDepth::kSizes);
  return m.ok() ? "" : m.status().message();
}

Status CheckResumeStep(const std::string& run_id, const std::vector<CheckpointRecord>& records, int64_t step,
                       const std::string& run_dir) {
  // The newest row of each step: a step can be recorded again after being
  // marked (corrupt, or fenced and then trained again on the resumed timeline).
  std::map<int64_t, const CheckpointRecord*> by_step;
  for (const CheckpointRecord& k : records) {
    auto [it, fresh] = by_step.emplace(k.step, &k);
    if (!fresh && k.seq >= it->second->seq) it->second = &k;
  }
  std::string good;
  std::string why = "no checkpoint of that step is recorded";
  for (const auto& [s, k] : by_step) {
    std::string not_resumable = WhyNotResumable(*k, run_dir);  // one look at the disk per step
    if (not_resumable.empty()) good += (good.empty() ? "" : ", ") + std::to_string(s);
    if (s == step) why = std::move(not_resumable);
  }
  if (why.empty()) return Status::Ok();
  return NotFoundError("run " + run_id + " cannot resume from step " + std::to_string(step) + ": " + why +
                       "; steps it can resume from: " +
                       (good.empty() ? "none (no checkpoint is both committed and on disk)" : good));
}

}  // namespace holdfast
