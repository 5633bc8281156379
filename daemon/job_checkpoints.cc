#include "daemon/job_checkpoints.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

namespace holdfast {
namespace {

// "rank-12.jsonl" -> 12; -1 for any other name.
int RankOfFileName(const std::string& name) {
  static const std::string kPrefix = "rank-", kSuffix = ".jsonl";
  if (name.size() <= kPrefix.size() + kSuffix.size() || name.compare(0, kPrefix.size(), kPrefix) != 0 ||
      name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) {
    return -1;
  }
  const std::string digits = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoi(digits);
}

}  // namespace

std::string JobCheckpointDir(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / "job-checkpoints").string();
}

int64_t PathBytes(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return 0;
  if (!S_ISDIR(st.st_mode)) return S_ISREG(st.st_mode) ? static_cast<int64_t>(st.st_size) : 0;
  int64_t bytes = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(path, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec) && !it->is_symlink(ec)) bytes += static_cast<int64_t>(it->file_size(ec));
  }
  return bytes;
}

void JobCheckpointReports::Refresh() {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) {
    const int rank = RankOfFileName(e.path().filename().string());
    if (rank >= 0) ReadFile(e.path().string(), rank);
  }
  first_done_ = true;
}

void JobCheckpointReports::ReadFile(const std::string& path, int rank) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return;
  in.seekg(0, std::ios::end);
  const int64_t size = static_cast<int64_t>(in.tellg());
  int64_t& offset = offsets_[path];
  if (size < offset) offset = 0;  // replaced or truncated: read it again
  if (size == offset) return;
  in.seekg(offset);
  std::string data(static_cast<size_t>(size - offset), '\0');
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  data.resize(static_cast<size_t>(in.gcount()));
  size_t start = 0;
  for (size_t nl = data.find('\n'); nl != std::string::npos; nl = data.find('\n', start)) {
    Take(data.substr(start, nl - start), rank, path);
    start = nl + 1;
  }
  offset += static_cast<int64_t>(start);  // a line still being written is read whole next time
}

void JobCheckpointReports::Take(const std::string& line, int rank, const std::string& file) {
  if (line.empty()) return;
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  const bool ok = j.is_object() && j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() >= 0 &&
                  j.contains("path") && j["path"].is_string() && !j["path"].get<std::string>().empty();
  if (!ok) {
    if (warned_.insert(file).second) {
      spdlog::warn("{}: skipping a line that is not {{\"step\": N >= 0, \"path\": \"...\"}} (docs/job-contract.md): {}",
                   file, line.substr(0, 200));
    }
    return;
  }
  const int64_t step = j["step"].get<int64_t>();
  std::filesystem::path path(j["path"].get<std::string>());
  if (path.is_relative()) path = std::filesystem::path(run_dir_) / path;
  paths_[step][rank] = path.lexically_normal().string();
  if (first_done_) fresh_.insert(step);
}

std::optional<std::string> JobCheckpointReports::PathOf(int64_t step) const {
  auto it = paths_.find(step);
  if (it == paths_.end() || it->second.empty()) return std::nullopt;
  return it->second.begin()->second;  // the lowest rank's
}

std::vector<int64_t> JobCheckpointReports::FreshSteps(int64_t after, int64_t before) const {
  std::vector<int64_t> out;
  for (auto it = fresh_.upper_bound(after); it != fresh_.end() && *it < before; ++it) out.push_back(*it);
  return out;
}

std::vector<int64_t> JobCheckpointReports::StepsAfter(int64_t step) const {
  std::vector<int64_t> out;
  for (auto it = paths_.upper_bound(step); it != paths_.end(); ++it) out.push_back(it->first);
  return out;
}

}  // namespace holdfast
