#include "daemon/checkpoint_tracker.h"

#include <filesystem>
#include <fstream>

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

namespace {
// A marked folder's reason as lineage records it.
std::string ReasonOf(const std::string& written) { return written.empty() ? "marked corrupt by a trainer" : written; }
}  // namespace

std::string CheckpointTracker::CorruptMark(int64_t step) const {
  const std::optional<std::string> why = CheckpointLoader(root_).CorruptReason(StepDir(step));
  return why ? ReasonOf(*why) : "";
}

std::vector<CheckpointTracker::CorruptFolder> CheckpointTracker::CorruptFolders() const {
  std::vector<CorruptFolder> out;
  if (!enabled()) return out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(root_, ec)) {
    const std::string name = e.path().filename().string();
    int64_t step = ParseCorruptStepDirName(name);
    if (step < 0) step = ParseStepDirName(name);
    if (step < 0) continue;
    const std::optional<std::string> why = CheckpointLoader(root_).CorruptReason(e.path().string());
    if (!why) continue;
    out.push_back({step, e.path().string(), ReasonOf(*why)});
  }
  return out;
}

Status CheckpointTracker::Verify(int64_t step) const {
  return CheckpointLoader(root_).Inspect(step, InspectDepth::kSizes).status();
}

int64_t CheckpointTracker::NewestVerified() const {
  for (int64_t s : StepsOnDisk()) {
    if (Verify(s).ok()) return s;
  }
  return -1;
}

std::map<std::string, double> CheckpointTracker::Metrics(int64_t step) const {
  if (!enabled()) return {};
  Result<Manifest> m = CheckpointLoader(root_).ReadManifest(step);
  return m.ok() ? m->metrics : std::map<std::string, double>();
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
