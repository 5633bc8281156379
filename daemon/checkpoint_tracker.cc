#include "daemon/checkpoint_tracker.h"

#include <sys/stat.h>

#include <filesystem>

#include "checkpoint/checkpoint_loader.h"
#include "checkpoint/format.h"

namespace holdfast {

std::string CheckpointRoot(const JobConfig& job) {
  if (job.checkpoint_dir.empty()) return "";
  std::filesystem::path root(job.checkpoint_dir);
  if (root.is_relative() && !job.workdir.empty()) root = std::filesystem::path(job.workdir) / root;
  // Absolute, so that lineage's paths mean the same to runctl run from anywhere.
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(root, ec);
  return (ec ? root : abs).lexically_normal().string();
}

std::vector<int64_t> CheckpointTracker::StepsOnDisk() const {
  std::vector<int64_t> out;
  if (!enabled()) return out;
  auto steps = CheckpointLoader(root_).ListSteps();
  if (!steps.ok()) return out;
  for (int64_t s : *steps) {
    std::error_code ec;
    if (std::filesystem::exists(std::filesystem::path(StepDir(s)) / kManifestFileName, ec)) out.push_back(s);
  }
  return out;
}

Status CheckpointTracker::Verify(int64_t step) {
  const std::string manifest = (std::filesystem::path(StepDir(step)) / kManifestFileName).string();
  struct stat st {};
  if (::stat(manifest.c_str(), &st) != 0) {
    verdicts_.erase(step);
    return NotFoundError("no committed checkpoint of step " + std::to_string(step) + " in " + root_);
  }
  const int64_t mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  auto it = verdicts_.find(step);
  if (it != verdicts_.end() && it->second.mtime_ns == mtime && it->second.size == st.st_size) return it->second.status;
  auto m = CheckpointLoader(root_).Verify(step);
  Verdict v;
  v.mtime_ns = mtime;
  v.size = st.st_size;
  v.status = m.ok() ? Status::Ok() : m.status();
  verdicts_[step] = v;
  return v.status;
}

int64_t CheckpointTracker::NewestVerified() {
  for (int64_t s : StepsOnDisk()) {
    if (Verify(s).ok()) return s;
  }
  return -1;
}

std::string CheckpointTracker::StepDir(int64_t step) const {
  return (std::filesystem::path(root_) / StepDirName(step)).string();
}

int64_t CheckpointTracker::StepBytes(int64_t step) const {
  int64_t bytes = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(StepDir(step), ec)) {
    bytes += static_cast<int64_t>(e.is_regular_file(ec) ? e.file_size(ec) : 0);
  }
  return bytes;
}

}  // namespace holdfast
