// PlanMemoryRestore: which step of the memory snapshots a new generation of
// a run of several nodes starts from, and where each of its files is
// (docs/memory-snapshots.md, "Several nodes"). Pure: the leader asks every
// live node for its inventory (daemon/replica_wire.h) and hands the answers
// here; the plan goes to every node of the new generation as a gather.
//
// The step is the newest S for which some live node holds MANIFEST.json and,
// for every shard r of its world W, shard-r-of-W.bin: in the trainer's own
// folder, a held copy or a replica. The files' holders are listed the
// trainer's folders first, then held copies, then replicas. Sizes are not
// compared here: the gather checks every file against the manifest.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "daemon/replica_wire.h"

namespace holdfast {

// One live node's answer.
struct NodeInventory {
  int node = 0;
  std::string addr;  // its replica port
  std::vector<SnapshotCopy> copies;
};

struct MemoryRestorePlan {
  int64_t step = -1;
  std::vector<GatherFile> files;  // the manifest first, then the shards in rank order
  // Where the state of nodes that are gone comes from, for the log and the
  // incident's action: "node 2 (gpu-b)'s shards from the replica on node 1
  // (gpu-a)"; "" when every shard is on the node that wrote it.
  std::string note;
};

// nullopt when no step is whole on the live nodes. `hosts`: node index ->
// host name, for the note.
std::optional<MemoryRestorePlan> PlanMemoryRestore(const std::vector<NodeInventory>& live,
                                                   const std::map<int, std::string>& hosts);

}  // namespace holdfast
