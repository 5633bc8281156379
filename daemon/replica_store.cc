#include "daemon/replica_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>

#include <spdlog/spdlog.h>

#include "checkpoint/checkpoint_writer.h"
#include "checkpoint/file_reader.h"
#include "checkpoint/format.h"
#include "checkpoint/storage.h"

namespace holdfast {
namespace {

namespace fs = std::filesystem;

constexpr const char* kHeldDir = "held";
constexpr const char* kReplicaPrefix = "replica-";

// The step folders (step-S) directly in `dir`, newest first.
std::vector<int64_t> StepsIn(const std::string& dir) {
  std::vector<int64_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const int64_t s = ParseStepDirName(e.path().filename().string());
    std::error_code kind;
    if (s >= 0 && e.is_directory(kind)) out.push_back(s);
  }
  std::sort(out.rbegin(), out.rend());
  return out;
}

// The snapshot files (by name; no temporaries) in a step folder, with sizes.
std::vector<ReplicaFile> FilesIn(const std::string& dir) {
  std::vector<ReplicaFile> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    std::error_code size_ec;
    const uintmax_t size = e.file_size(size_ec);
    if (!IsSnapshotFileName(name) || size_ec) continue;
    out.push_back(ReplicaFile{name, static_cast<uint64_t>(size), 0});
  }
  std::sort(out.begin(), out.end(), [](const ReplicaFile& a, const ReplicaFile& b) { return a.name < b.name; });
  return out;
}

// Keeps the newest `keep` step folders of `dir`.
void KeepNewest(const std::string& dir, int keep) {
  std::vector<int64_t> steps = StepsIn(dir);
  for (size_t i = static_cast<size_t>(keep); i < steps.size(); ++i) {
    std::error_code ec;
    fs::remove_all(dir + "/" + StepDirName(steps[i]), ec);
  }
}

std::string Mib(uint64_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB"; }

}  // namespace

Result<std::pair<uint64_t, uint64_t>> FileXxh3(const std::string& path) {
  HF_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> file, PosixStorage::Default()->OpenReadable(path));
  const uint64_t size = file->size();
  Xxh3Stream sum;
  HF_RETURN_IF_ERROR(ReadOverlapped(PosixStorage::Default(), path, 0, size, nullptr, OverlappedReadOptions{},
                                    [&sum](const uint8_t* p, size_t n) { sum.Update(p, n); }));
  return std::make_pair(sum.Digest(), size);
}

std::string ReplicaStore::CopyDir(CopyKind kind, int origin, int64_t step) const {
  switch (kind) {
    case CopyKind::kLocal: return root_ + "/" + StepDirName(step);
    case CopyKind::kHeld: return root_ + "/" + kHeldDir + "/" + StepDirName(step);
    case CopyKind::kReplica: return root_ + "/" + kReplicaPrefix + std::to_string(origin) + "/" + StepDirName(step);
  }
  return root_;
}

std::vector<SnapshotCopy> ReplicaStore::Inventory() const {
  std::vector<SnapshotCopy> out;
  auto add = [&](CopyKind kind, int origin, const std::string& dir) {
    for (int64_t step : StepsIn(dir)) {
      SnapshotCopy c{kind, origin, step, FilesIn(dir + "/" + StepDirName(step))};
      if (!c.files.empty() && out.size() < kMaxReplicaSets) out.push_back(std::move(c));
    }
  };
  add(CopyKind::kLocal, node_, root_);
  add(CopyKind::kHeld, node_, root_ + "/" + kHeldDir);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root_, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kReplicaPrefix, 0) != 0) continue;
    const std::string digits = name.substr(std::string(kReplicaPrefix).size());
    if (digits.empty() || digits.size() > 4 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    add(CopyKind::kReplica, std::stoi(digits), e.path().string());
  }
  return out;
}

Result<std::string> ReplicaStore::PathOf(CopyKind kind, int origin, int64_t step, const std::string& name) const {
  if (!IsSnapshotFileName(name)) return InvalidArgumentError("not a snapshot file's name: " + name);
  const std::string path = CopyDir(kind, origin, step) + "/" + name;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    return NotFoundError(std::string("no ") + CopyKindName(kind) + " copy of " + name + " of step " +
                         std::to_string(step) + " on node " + std::to_string(node_));
  }
  return path;
}

std::vector<int64_t> ReplicaStore::CompleteLocalSteps(const std::vector<std::string>& names) const {
  std::vector<int64_t> out;
  for (int64_t step : StepsIn(root_)) {
    bool all = !names.empty();
    for (const std::string& n : names) {
      std::error_code ec;
      all = all && fs::is_regular_file(CopyDir(CopyKind::kLocal, node_, step) + "/" + n, ec);
    }
    if (all) out.push_back(step);
  }
  return out;
}

Status ReplicaStore::Hold(int64_t step, const std::vector<std::string>& names) {
  const std::string held = root_ + "/" + kHeldDir;
  const std::string dir = CopyDir(CopyKind::kHeld, node_, step);
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return Status::Ok();
  const std::string making = held + "/." + StepDirName(step);
  fs::remove_all(making, ec);
  fs::create_directories(making, ec);
  if (ec) return IoError("create " + making + ": " + ec.message());
  for (const std::string& n : names) {
    const std::string from = CopyDir(CopyKind::kLocal, node_, step) + "/" + n;
    if (::link(from.c_str(), (making + "/" + n).c_str()) != 0) {
      Status s = ErrnoError("hold " + from + " for the replica (hard link)", errno);
      fs::remove_all(making, ec);
      return s;  // the trainer's retention took the step first: it is not held
    }
  }
  if (::rename(making.c_str(), dir.c_str()) != 0) {
    Status s = ErrnoError("rename " + making, errno);
    fs::remove_all(making, ec);
    return s;
  }
  KeepNewest(held, keep_);
  return Status::Ok();
}

std::vector<int64_t> ReplicaStore::HeldSteps() const { return StepsIn(root_ + "/" + kHeldDir); }

Result<std::string> ReplicaStore::BeginPush(int origin, int64_t step, const std::vector<ReplicaFile>& files) const {
  uint64_t total = 0;
  for (const ReplicaFile& f : files) {
    if (!IsSnapshotFileName(f.name)) return InvalidArgumentError("not a snapshot file's name: " + f.name);
    if (f.size > budget_bytes_ || total + f.size > budget_bytes_) {
      return ResourceExhaustedError("a replica of node " + std::to_string(origin) + "'s step " + std::to_string(step) +
                                    " of more than " + Mib(budget_bytes_) + " does not fit this node's " +
                                    "recovery.memory_budget_mb (" + Mib(budget_bytes_) +
                                    "): raise it to at least twice the largest node's snapshot");
    }
    total += f.size;
  }
  if (origin == node_) return InvalidArgumentError("node " + std::to_string(origin) + " pushed a replica to itself");
  const std::string parent = root_ + "/" + kReplicaPrefix + std::to_string(origin);
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) return IoError("create " + parent + ": " + ec.message());
  char name[64];
  std::snprintf(name, sizeof(name), "/.incoming-%lld-%d", static_cast<long long>(step), ::getpid());
  const std::string incoming = parent + name;
  fs::remove_all(incoming, ec);
  fs::create_directory(incoming, ec);
  if (ec) return IoError("create " + incoming + ": " + ec.message());
  return incoming;
}

Status ReplicaStore::CommitPush(const std::string& incoming, int origin, int64_t step) {
  const std::string dir = CopyDir(CopyKind::kReplica, origin, step);
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (::rename(incoming.c_str(), dir.c_str()) != 0) {
    Status s = ErrnoError("rename " + incoming + " to " + dir, errno);
    AbortPush(incoming);
    return s;
  }
  KeepNewest(root_ + "/" + kReplicaPrefix + std::to_string(origin), keep_);
  return Status::Ok();
}

void ReplicaStore::AbortPush(const std::string& incoming) const {
  std::error_code ec;
  fs::remove_all(incoming, ec);
}

Result<bool> ReplicaStore::TryLocal(const std::string& from, const std::string& target, uint64_t size,
                                    uint64_t xxh3) const {
  std::error_code ec;
  if (!fs::is_regular_file(from, ec)) return false;
  Result<std::pair<uint64_t, uint64_t>> sum = FileXxh3(from);
  if (!sum.ok()) return false;
  if (sum->second != size || sum->first != xxh3) {
    spdlog::warn("memory snapshot file {} failed its check against the manifest ({} bytes, XXH3 {}; the manifest "
                 "says {} bytes, XXH3 {}): not used",
                 from, sum->second, HexU64(sum->first), size, HexU64(xxh3));
    return false;
  }
  if (from == target) return true;
  const std::string tmp = target + kTempSuffix;
  fs::remove(tmp, ec);
  if (::link(from.c_str(), tmp.c_str()) != 0 || ::rename(tmp.c_str(), target.c_str()) != 0) {
    return ErrnoError("link " + from + " to " + target, errno);
  }
  return true;
}

void ReplicaStore::RemoveStepsAfter(int64_t step) const {
  for (int64_t s : StepsIn(root_)) {
    if (s <= step) continue;
    Status removed = RemoveStepDir(CopyDir(CopyKind::kLocal, node_, s));
    if (!removed.ok()) spdlog::warn("could not remove the memory snapshot of step {}: {}", s, removed.ToString());
  }
}

Result<std::string> ReplicaStore::Gather(int64_t step, const std::vector<GatherFile>& files, const Fetcher& fetch) {
  const std::string dir = CopyDir(CopyKind::kLocal, node_, step);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IoError("create " + dir + ": " + ec.message());
  auto holders_of = [&](const std::string& name) {
    for (const GatherFile& g : files) {
      if (g.name == name) return g.holders;
    }
    return std::vector<ReplicaHolder>();
  };
  // The copies here of a file, the trainer's own first.
  auto here = [&](const std::string& name) {
    std::vector<std::pair<std::string, std::string>> out = {{dir + "/" + name, "here"}};
    for (const SnapshotCopy& c : Inventory()) {
      if (c.step != step || c.kind == CopyKind::kLocal) continue;
      out.emplace_back(CopyDir(c.kind, c.origin, step) + "/" + name,
                       std::string(CopyKindName(c.kind)) + " copy of node " + std::to_string(c.origin));
    }
    return out;
  };
  std::vector<std::string> notes;
  // The manifest: its own checksum and its step decide.
  const std::string manifest_path = dir + "/" + kManifestFileName;
  auto manifest_ok = [&](const std::string& path) -> Result<Manifest> {
    std::ifstream in(path, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    HF_ASSIGN_OR_RETURN(Manifest m, ParseManifest(text));
    if (m.step != step) return CorruptionError(path + " is the manifest of step " + std::to_string(m.step));
    return m;
  };
  std::optional<Manifest> manifest;
  for (const auto& [path, what] : here(kManifestFileName)) {
    Result<Manifest> m = manifest_ok(path);
    if (!m.ok()) continue;
    if (path != manifest_path && (::link(path.c_str(), (manifest_path + kTempSuffix).c_str()) != 0 ||
                                  ::rename((manifest_path + kTempSuffix).c_str(), manifest_path.c_str()) != 0)) {
      continue;
    }
    manifest = *m;
    if (path != manifest_path) notes.push_back(std::string("the manifest from the ") + what + " here");
    break;
  }
  if (!manifest) {
    for (const ReplicaHolder& h : holders_of(kManifestFileName)) {
      const std::string tmp = manifest_path + kTempSuffix;
      fs::remove(tmp, ec);
      Status got = fetch(h, step, kManifestFileName, tmp);
      Result<Manifest> m = got.ok() ? manifest_ok(tmp) : Result<Manifest>(got);
      if (m.ok() && ::rename(tmp.c_str(), manifest_path.c_str()) == 0) {
        manifest = *m;
        notes.push_back(std::string("the manifest from node ") + std::to_string(h.node));
        break;
      }
      spdlog::warn("the manifest of memory snapshot step {} from node {} ({}) not used: {}", step, h.node, h.addr,
                   m.status().ToString());
    }
  }
  if (!manifest) return NotFoundError("no manifest of memory snapshot step " + std::to_string(step) + " verifies");
  for (const ManifestShard& ms : manifest->shards) {
    const std::string target = dir + "/" + ms.file;
    bool done = false;
    for (const auto& [path, what] : here(ms.file)) {
      HF_ASSIGN_OR_RETURN(done, TryLocal(path, target, ms.size, ms.xxh3));
      if (done && path != target) notes.push_back(ms.file + " from the " + what + " here");
      if (done) break;
    }
    for (const ReplicaHolder& h : done ? std::vector<ReplicaHolder>() : holders_of(ms.file)) {
      const std::string tmp = target + ".fetch";
      fs::remove(tmp, ec);
      Status got = fetch(h, step, ms.file, tmp);
      if (got.ok()) {
        Result<std::pair<uint64_t, uint64_t>> sum = FileXxh3(tmp);
        if (!sum.ok()) {
          got = sum.status();
        } else if (sum->second != ms.size || sum->first != ms.xxh3) {
          got = CorruptionError("it does not match the manifest (" + std::to_string(sum->second) + " bytes, XXH3 " +
                                HexU64(sum->first) + "; the manifest says " + std::to_string(ms.size) + ", " +
                                HexU64(ms.xxh3) + ")");
        } else if (::rename(tmp.c_str(), target.c_str()) != 0) {
          got = ErrnoError("rename " + tmp, errno);
        }
      }
      if (got.ok()) {
        done = true;
        notes.push_back(ms.file + " from the " + CopyKindName(h.kind) + " on node " + std::to_string(h.node));
        break;
      }
      fs::remove(tmp, ec);
      spdlog::warn("{} of memory snapshot step {} from node {} ({}) not used: {}", ms.file, step, h.node, h.addr,
                   got.ToString());
    }
    if (!done) {
      return NotFoundError("no copy of " + ms.file + " of memory snapshot step " + std::to_string(step) +
                           " that matches its manifest is on a live node");
    }
  }
  RemoveStepsAfter(step);
  std::string note;
  for (const std::string& n : notes) note += (note.empty() ? "" : ", ") + n;
  return note;
}

}  // namespace holdfast
