// Helpers of the memory snapshot suites (memory_snapshot_test.cc,
// replica_snapshot_test.cc): reading a snapshot folder as a test sees it.
#pragma once

#include <cstdint>
#include <string>

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

}  // namespace holdfast
