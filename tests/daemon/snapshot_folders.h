// Helpers of the memory snapshot suites (memory_snapshot_test.cc,
// replica_snapshot_test.cc): reading a snapshot folder as a test sees it.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/checkpoint_loader.h"

namespace holdfast {

// The newest step in `folder` whose manifest verifies its own checksum; -1 if none.
inline int64_t NewestCommittedSnapshot(const std::string& folder) {
  CheckpointLoader loader(folder);
  auto steps = loader.ListSteps();
  if (!steps.ok()) return -1;
  for (int64_t s : *steps) {
    if (loader.ReadManifest(s).ok()) return s;
  }
  return -1;
}

// The run's snapshot folders in /dev/shm (holdfast-snap-RUN-PID).
inline std::vector<std::string> SnapshotFoldersOf(const std::string& run_id) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = e.path().filename().string();
    if (name.find("holdfast-snap-" + run_id + "-") != std::string::npos) out.push_back(e.path().string());
  }
  return out;
}

// Waits until the run's snapshot folder holds a committed snapshot (the
// ranks report their step before the asynchronous snapshot of it commits:
// on a loaded machine a step can be reported while no snapshot has, so a
// test that freezes the ranks to keep the snapshots must wait for one).
// A 120 s backstop, not a timing assertion. The newest committed step, or
// -1 when none came.
inline int64_t WaitForCommittedSnapshot(const std::string& run_id) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (;;) {
    for (const std::string& folder : SnapshotFoldersOf(run_id)) {
      if (const int64_t step = NewestCommittedSnapshot(folder); step >= 1) return step;
    }
    if (std::chrono::steady_clock::now() > deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace holdfast
