// RankProgress: one rank's progress record as a value — the one form every
// part of the daemon (hang detection, triage, stragglers, status, metrics, the
// recorder, role supervision) and the cluster wire work with. RankView: one
// rank as the supervisor sees it at one instant (its process and its progress).
//
// The shared-memory layout (common/progress_record.h) is decoded only here
// (DecodeProgress) and, for a follower's ranks, by the cluster wire codec
// (daemon/cluster_rank_view.cc), which carries a RankProgress field by field.
// Times are CLOCK_MONOTONIC readings of the reader's machine: a local record
// is written on the reader's clock; the wire sends ages and the receiver
// turns them back into its own readings. The ring is a vector of fixed
// capacity, oldest first: a RankProgress copies without allocating (the leader
// copies every rank's view a few times a second; issue 28).
//
// A record that is not initialised, is of another version, or holds a phase
// or collective kind this build does not know is not `valid`: nothing in it
// is interpreted (locally or from a follower alike).
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <boost/container/static_vector.hpp>

#include "common/mesh.h"
#include "common/proc_state.h"
#include "common/progress_record.h"

namespace holdfast {

// The largest rank a record's send/recv peer can name (a world of 2^20, as
// the cluster protocol's); a peer past it decodes as none (-1).
inline constexpr int32_t kMaxRecordedRank = (1 << 20) - 1;

// One collective of the ring of recent ones.
struct CollectiveRecord {
  uint64_t seq = 0;  // 1-based sequence number on its rank
  CollectiveKind kind = CollectiveKind::kNone;
  uint64_t bytes = 0;
  int64_t issued_ns = 0;     // 0 = unset
  int64_t completed_ns = 0;  // 0 while not known complete
  // Version 4: its group (kUnknown: not said) and number in it, and for a
  // send/recv the peers and what travels.
  CollectiveLabel label;
  uint64_t group_seq = 0;  // 1-based in label.group; 0 when the group is unknown
  bool completed() const { return completed_ns != 0; }
};

// At most a record's ring: pushing past kProgressRingSize throws std::bad_alloc.
using CollectiveRing = boost::container::static_vector<CollectiveRecord, kProgressRingSize>;

struct RankProgress {
  bool valid = false;  // an initialised record of this version, every value known to this build
  bool torn = false;   // the writer stopped mid-update: fields may be mixed
  // The pid the writer stamped on attaching (holdfast-train, the Python
  // module); 0 while no writer has attached (a job without the progress module).
  int32_t writer_pid = 0;
  int64_t step = 0;  // completed optimiser steps (the job's to write: any value)
  Phase phase = Phase::kStarting;
  CollectiveKind collective_kind = CollectiveKind::kNone;  // what it waits on in kCollective
  uint64_t collectives_issued = 0;
  uint64_t collectives_done = 0;
  uint64_t waiting_on = 0;  // seq of the collective waited on; 0 = none
  int64_t phase_started_ns = 0;  // readings of the reader's clock; 0 = unset
  int64_t step_started_ns = 0;
  int64_t heartbeat_ns = 0;
  int64_t last_step_ns = 0;  // a duration: the last completed step's
  int64_t checkpoint_step = -1;  // newest checkpoint the rank saw committed; -1 none
  uint64_t checkpoint_failures = 0;
  int64_t checkpoint_failed_step = -1;
  std::string checkpoint_error;  // the newest failure's text, valid UTF-8 ("" none)
  // What the rank restored when it started (ProgressWriter::SetRestored).
  int64_t restored_step = -1;  // -1: started fresh (or unreported)
  RestoreTier restore_tier = RestoreTier::kUnreported;
  uint32_t restore_skipped = 0;  // newer candidates of a faster tier passed over
  uint64_t ring_head = 0;                // collectives ever put in the ring (>= ring.size())
  CollectiveRing ring;                   // the newest kProgressRingSize at most, oldest first
  // The mesh the rank reported (ProgressWriter::SetMesh); none: not reported
  // (a pure data-parallel job, an older writer).
  std::optional<MeshShape> mesh;
  // Collectives issued in each of its groups, index CollectiveGroup - 1.
  std::array<uint64_t, kCollectiveGroups> group_issued{};

  // A writer attached to a valid record: there is progress to judge by.
  bool attached() const { return valid && writer_pid != 0; }
  // Blocked in collective #waiting_on (kind collective_kind).
  bool in_collective() const { return valid && phase == Phase::kCollective && waiting_on != 0; }
  // The ring's entry of the collective waited in; null when not in one or
  // when it has left the ring.
  const CollectiveRecord* waited() const;
  uint64_t issued_in(CollectiveGroup g) const {
    const int i = static_cast<int>(g);
    return i >= 1 && i <= kCollectiveGroups ? group_issued[static_cast<size_t>(i - 1)] : 0;
  }
};

// The one decode of the shared-memory layout.
RankProgress DecodeProgress(const ProgressSnapshot& snapshot);

// One rank as the supervisor sees it at one instant.
struct RankView {
  int rank = 0;
  int node = 0;      // index of its node in the allocation
  std::string host;  // its node's host name (scheduler/scheduler.h NodeInfo::host)
  pid_t pid = 0;
  bool alive = true;
  ProcState proc_state = ProcState::kUnknown;  // /proc/<pid>/stat (common/proc_state.h)
  RankProgress progress;
  // A follower's rank: seconds since its node's last report reached the
  // leader (followers report every poll); 0 for the leader's own ranks. A
  // node cut off from the network keeps its last report here, ageing.
  double report_age_s = 0;
  // On the cluster protocol only (daemon/ring_delta.h): 0 when progress.ring
  // is the rank's whole ring; else the ring holds only the entries with
  // seq >= ring_since, the older ones being as this rank's previous report
  // on the same connection carried them (complete, so they cannot change).
  uint64_t ring_since = 0;
};

// A mesh dimension past this is not a mesh a writer can mean (a record's
// mesh, the cluster protocol's "mesh" item).
inline constexpr int32_t kMaxMeshSize = 1 << 20;

// The mesh's group a recorded collective's group is (false for the world
// and unknown), and the recorded group of a mesh's group.
bool MeshGroupOf(CollectiveGroup group, MeshGroup* out);
CollectiveGroup CollectiveGroupOf(MeshGroup group);

// The mesh the ranks reported (RankProgress::mesh) when the run has model
// parallelism (TP, PP or EP > 1) and the mesh fits the ranks seen (their
// number is the world); none for data parallelism alone, older writers, or
// ranks that disagree (triage then judges as before the mesh).
std::optional<DeviceMesh> ModelParallelMesh(const std::vector<RankView>& ranks);

// The newest completed step a valid record reports, and at least `at_least`
// (what the caller already knows: the generation's start, the newest seen).
int64_t NewestStep(const std::vector<RankView>& ranks, int64_t at_least);

}  // namespace holdfast
