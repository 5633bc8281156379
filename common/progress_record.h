// ProgressRecord: what a rank is doing, in shared memory, for its supervisor.
//
// One fixed-size record per rank in a file (normally under /dev/shm) that the
// supervisor creates before it launches the rank and maps read-only; the rank
// maps it read-write and updates it at every phase change. The rank never
// blocks and makes no system call to update it (clock_gettime(CLOCK_MONOTONIC)
// is served by the vDSO), and the supervisor can read it while the rank is
// frozen, stopped or dead. The layout is fixed and little-endian, with
// explicit offsets (docs/progress-record.md), so that a Python job (PyTorch
// FSDP, DeepSpeed, Megatron-LM) can write the same record through a small
// module.
//
// Consistency: a sequence lock. The writer makes `seq` odd, updates the
// fields, makes it even. Readers retry while `seq` is odd or changed; a writer
// frozen mid-update is reported as such (ProgressSnapshot::torn).
//
// Thread-safety: exactly one writer thread per record (the rank's training
// thread); any number of readers in any process.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace holdfast {

// What the rank is doing. Values are part of the on-disk layout.
enum class Phase : uint32_t {
  kStarting = 0,    // process up, not yet training (model build, rendezvous, restore)
  kData = 1,        // fetching the next batch
  kForward = 2,
  kBackward = 3,    // (bucketed allreduces may be issued meanwhile)
  kCollective = 4,  // blocked waiting for a collective to finish
  kOptimizer = 5,
  kCheckpoint = 6,  // staging or committing a checkpoint
  kEval = 7,
  kDone = 8,        // finished training, exiting
};
const char* PhaseName(Phase phase);

// kSendRecv: point-to-point messages posted together (a pipeline stage's
// activations out and a gradient in), with CollectiveDetail's peers.
enum class CollectiveKind : uint32_t { kNone = 0, kAllreduce = 1, kBroadcast = 2, kBarrier = 3, kAllgather = 4,
                                      kReduceScatter = 5, kSendRecv = 6 };
const char* CollectiveKindName(CollectiveKind kind);  // "allreduce", ..., "send/recv"

// The group a collective ran on (version 4; values are part of the layout):
// the groups of common/mesh.h, and the whole world. kUnknown: a writer that
// does not say (an older record, the Python module).
enum class CollectiveGroup : uint8_t { kUnknown = 0, kWorld = 1, kData = 2, kTensor = 3, kPipeline = 4, kExpert = 5,
                                       kExpertData = 6 };
inline constexpr int kCollectiveGroups = 6;  // kWorld .. kExpertData
const char* CollectiveGroupName(CollectiveGroup group);  // "world", "dp", "tp", "pp", "ep", "edp"

// What a point-to-point message carries (version 4; layout values).
// Values 4-7: expert parallelism's all-to-all (tokens routed to the experts a
// rank holds, those experts' outputs, and their gradients going back).
enum class MessageKind : uint8_t { kNone = 0, kActivations = 1, kGradients = 2, kTiedEmbedding = 3, kTokens = 4,
                                   kTokenGradients = 5, kExpertOutputs = 6, kExpertOutputGradients = 7 };
inline constexpr uint8_t kMaxMessageKind = 7;  // the largest value a record may hold
// "activations", "gradients", "tied embedding gradient", "tokens for its
// experts", ...
const char* MessageKindName(MessageKind kind);

// How a collective is labelled when issued: its group and, for kSendRecv,
// the peers (global ranks) and what the messages carry.
struct CollectiveLabel {
  CollectiveGroup group = CollectiveGroup::kUnknown;
  int32_t send_to = -1;    // global rank sent to; -1 none
  int32_t recv_from = -1;  // global rank received from; -1 none
  MessageKind send_what = MessageKind::kNone;
  MessageKind recv_what = MessageKind::kNone;
  int32_t send_micro = -1;  // micro-batch of the message sent; -1 none
  int32_t recv_micro = -1;
};

// Where a rank's state came from when it started (restore_tier). Values are
// part of the layout; kUnreported until the rank says (a job that does not).
enum class RestoreTier : uint32_t { kUnreported = 0, kNone = 1, kDisk = 2, kMemory = 3 };
// "unreported", "none" (started at step 0), "disk", "memory".
const char* RestoreTierName(RestoreTier tier);

inline constexpr uint64_t kProgressMagic = 0x31474F5250464C48ULL;  // "HLFPROG1"
// Version 2 appended the checkpoint-failure fields (offset 760 on), version 3
// the restore fields (offset 936 on), version 4 the mesh and the groups
// (offset 952 on); the earlier offsets are unchanged.
inline constexpr uint32_t kProgressVersion = 4;
inline constexpr int kProgressRingSize = 16;
// Bytes of checkpoint_error, its terminating NUL included.
inline constexpr int kProgressErrorSize = 160;

// One collective in the ring of recent ones.
struct CollectiveEntry {
  uint64_t seq;         // 1-based sequence number of the collective on this rank
  uint32_t kind;        // CollectiveKind
  uint32_t reserved;
  uint64_t bytes;
  int64_t issued_ns;    // CLOCK_MONOTONIC
  int64_t completed_ns; // 0 while not known complete
};
static_assert(sizeof(CollectiveEntry) == 40);

// The group and messages of ring[i], in ring_detail[i] (version 4).
struct CollectiveDetail {
  uint64_t group_seq;  // 1-based number of the collective in its group (0: group unknown)
  uint8_t group;       // CollectiveGroup
  uint8_t send_what;   // MessageKind
  uint8_t recv_what;   // MessageKind
  uint8_t reserved;
  int32_t send_to;     // global ranks; -1 none
  int32_t recv_from;
  int16_t send_micro;  // micro-batches; -1 none
  int16_t recv_micro;
};
static_assert(sizeof(CollectiveDetail) == 24);

// The shared layout. Every field is naturally aligned; offsets are pinned below.
struct ProgressRecordLayout {
  uint64_t magic;               // 0
  uint32_t version;             // 8
  uint32_t size;                // 12: sizeof(ProgressRecordLayout)
  int32_t rank;                 // 16
  int32_t pid;                  // 20
  uint64_t seq;                 // 24: sequence lock (odd = update in progress)
  int64_t step;                 // 32: completed optimiser steps
  uint32_t phase;               // 40: Phase
  uint32_t collective_kind;     // 44: kind of the collective waited on (kCollective)
  uint64_t collectives_issued;  // 48: collectives this rank has entered (issued)
  uint64_t collectives_done;    // 56: collectives it knows finished
  uint64_t waiting_on;          // 64: seq of the collective being waited on (0 = none)
  int64_t phase_started_ns;     // 72
  int64_t step_started_ns;      // 80
  int64_t heartbeat_ns;         // 88: last update
  int64_t last_step_ns;         // 96: duration of the last completed step
  int64_t checkpoint_step;      // 104: newest checkpoint this rank saw committed (-1 none)
  uint64_t ring_head;           // 112: entries written so far (ring index = (head-1) % size)
  CollectiveEntry ring[kProgressRingSize];  // 120
  // Checkpoint saves that failed (training went on without them). The daemon
  // records one lineage event each time the count rises; only the newest
  // failure's step and text are kept.
  uint64_t checkpoint_failures;  // 760: failed saves so far (this process)
  int64_t checkpoint_failed_step;  // 768: step of the newest failed save (-1 none)
  char checkpoint_error[kProgressErrorSize];  // 776: its error, NUL-terminated, truncated to fit
  // What the rank restored when it started, written once before its first
  // step (ProgressWriter::SetRestored): the step (-1: started fresh), the
  // tier, and how many newer candidates of a faster tier it passed over
  // (a memory snapshot that failed its checksum, one not every rank held).
  int64_t restored_step;     // 936
  uint32_t restore_tier;     // 944: RestoreTier
  uint32_t restore_skipped;  // 948
  // The rank's place in a device mesh (common/mesh.h), written once before
  // the first collective (ProgressWriter::SetMesh): 0 while not reported.
  int32_t mesh_tensor;    // 952: TP
  int32_t mesh_pipeline;  // 956: PP
  int32_t mesh_expert;    // 960: EP
  uint32_t reserved2;     // 964
  // Collectives issued per group, index CollectiveGroup - 1: a rank is in
  // one group of each kind, so this is its count in that group.
  uint64_t group_issued[kCollectiveGroups];  // 968
  CollectiveDetail ring_detail[kProgressRingSize];  // 1016
};
static_assert(offsetof(ProgressRecordLayout, seq) == 24);
static_assert(offsetof(ProgressRecordLayout, ring) == 120);
static_assert(offsetof(ProgressRecordLayout, checkpoint_failures) == 760);
static_assert(offsetof(ProgressRecordLayout, checkpoint_failed_step) == 768);
static_assert(offsetof(ProgressRecordLayout, checkpoint_error) == 776);
static_assert(offsetof(ProgressRecordLayout, restored_step) == 776 + kProgressErrorSize);
static_assert(offsetof(ProgressRecordLayout, restore_tier) == 944);
static_assert(offsetof(ProgressRecordLayout, mesh_tensor) == 952);
static_assert(offsetof(ProgressRecordLayout, group_issued) == 968);
static_assert(offsetof(ProgressRecordLayout, ring_detail) == 1016);
static_assert(sizeof(ProgressRecordLayout) == 1400);
// Where a version 3 record (the Python module's) ends.
inline constexpr size_t kProgressV3Size = 952;

// A consistent copy of a record, as a reader sees it.
struct ProgressSnapshot {
  bool valid = false;  // the file holds an initialised record of the right version
  bool torn = false;   // the writer stopped mid-update; fields may be mixed
  ProgressRecordLayout record{};
  Phase phase() const { return static_cast<Phase>(record.phase); }
};

// Whether a rank has attached a writer to its record (holdfast-train, or the
// Python module): the writer stamps its pid on open; CreateProgressFile leaves
// it 0 (and sets a heartbeat, so the heartbeat says nothing here).
inline bool WriterAttached(const ProgressSnapshot& p) { return p.valid && p.record.pid != 0; }

int64_t MonotonicNowNs();

// Creates (or truncates) the record file for `rank`, zeroed and initialised,
// mode 0600. The supervisor does this before launching the rank.
Status CreateProgressFile(const std::string& path, int rank);

// Read side: maps the file read-only. Safe against a writer in another process.
class ProgressReader {
 public:
  static Result<std::unique_ptr<ProgressReader>> Open(const std::string& path);
  ~ProgressReader();
  ProgressSnapshot Read() const;

 private:
  ProgressReader(void* map, size_t size) : map_(map), size_(size) {}
  void* map_;  // owned mapping
  size_t size_;
};

// Write side, for the rank. All methods are cheap: stores and a vDSO clock read.
class ProgressWriter {
 public:
  // Maps the file created by the supervisor (or creates it when missing).
  static Result<std::unique_ptr<ProgressWriter>> Open(const std::string& path, int rank);
  ~ProgressWriter();

  void SetPhase(Phase phase);
  void BeginStep();                 // phase kData, step timer starts
  void EndStep(int64_t completed);  // step = completed, last step duration recorded
  // A collective was issued (entered); returns its sequence number. `label`:
  // its group (counted in group_issued, numbered in it) and messages.
  uint64_t IssueCollective(CollectiveKind kind, uint64_t bytes, const CollectiveLabel& label = {});
  // The mesh the rank is part of (TP, PP, EP; common/mesh.h), once, before
  // its first collective.
  void SetMesh(int tensor, int pipeline, int expert);
  // The rank blocks until collective `seq` is done (phase kCollective).
  void WaitCollective(uint64_t seq, CollectiveKind kind);
  void CollectiveDone(uint64_t seq);
  void SetCheckpointStep(int64_t step);
  // A checkpoint save of `step` failed with `message` (e.g. the Status text):
  // counts it and keeps the step and the message's first
  // kProgressErrorSize - 1 bytes for the supervisor.
  void RecordCheckpointFailure(int64_t step, const std::string& message);
  // What this rank resumed from (step -1 and kNone: a fresh start), and how
  // many newer candidates of a faster tier it passed over. Once, before the
  // first step; the leading daemon records it as the generation's start.
  void SetRestored(int64_t step, RestoreTier tier, uint32_t skipped);

 private:
  explicit ProgressWriter(void* map) : rec_(static_cast<ProgressRecordLayout*>(map)) {}
  void Begin();
  void End();
  ProgressRecordLayout* rec_;  // owned mapping
};

}  // namespace holdfast
