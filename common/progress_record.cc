#include "common/progress_record.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

namespace holdfast {
namespace {

constexpr size_t kSize = sizeof(ProgressRecordLayout);

// The sequence lock on a field that lives in shared memory. std::atomic_ref is
// C++20; GCC/Clang builtins give the same guarantees on a naturally aligned u64.
uint64_t LoadAcquire(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
void StoreRelease(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

Result<void*> MapFile(const std::string& path, bool writable, bool create, int rank) {
  int flags = writable ? O_RDWR : O_RDONLY;
  if (create) flags |= O_CREAT;
  int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError("open progress record " + path, errno);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoError("stat progress record " + path, err);
  }
  if (static_cast<size_t>(st.st_size) < kSize) {
    if (!writable) {
      ::close(fd);
      return InvalidArgumentError("progress record " + path + " has " + std::to_string(st.st_size) +
                                  " bytes, expected " + std::to_string(kSize));
    }
    if (ftruncate(fd, kSize) != 0) {
      int err = errno;
      ::close(fd);
      return ErrnoError("size progress record " + path, err);
    }
  }
  void* map = mmap(nullptr, kSize, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  int err = errno;
  ::close(fd);
  if (map == MAP_FAILED) return ErrnoError("mmap progress record " + path, err);
  if (writable) {
    auto* rec = static_cast<ProgressRecordLayout*>(map);
    if (rec->magic != kProgressMagic || rec->version != kProgressVersion) {
      std::memset(rec, 0, kSize);
      rec->version = kProgressVersion;
      rec->size = kSize;
      rec->rank = rank;
      rec->checkpoint_step = -1;
      rec->checkpoint_failed_step = -1;
      rec->restored_step = -1;
      rec->heartbeat_ns = MonotonicNowNs();
      StoreRelease(&rec->magic, kProgressMagic);
    }
  }
  return map;
}

}  // namespace

const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kStarting: return "starting";
    case Phase::kData: return "data";
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward";
    case Phase::kCollective: return "collective";
    case Phase::kOptimizer: return "optimizer";
    case Phase::kCheckpoint: return "checkpoint";
    case Phase::kEval: return "eval";
    case Phase::kDone: return "done";
  }
  return "unknown";
}

const char* CollectiveKindName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kNone: return "none";
    case CollectiveKind::kAllreduce: return "allreduce";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kBarrier: return "barrier";
    case CollectiveKind::kAllgather: return "allgather";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kSendRecv: return "send/recv";
  }
  return "unknown";
}

const char* CollectiveGroupName(CollectiveGroup group) {
  switch (group) {
    case CollectiveGroup::kUnknown: return "unknown";
    case CollectiveGroup::kWorld: return "world";
    case CollectiveGroup::kData: return "dp";
    case CollectiveGroup::kTensor: return "tp";
    case CollectiveGroup::kPipeline: return "pp";
    case CollectiveGroup::kExpert: return "ep";
    case CollectiveGroup::kExpertData: return "edp";
  }
  return "unknown";
}

const char* MessageKindName(MessageKind kind) {
  switch (kind) {
    case MessageKind::kNone: return "nothing";
    case MessageKind::kActivations: return "activations";
    case MessageKind::kGradients: return "gradients";
    case MessageKind::kTiedEmbedding: return "tied embedding gradient";
    case MessageKind::kTokens: return "tokens for its experts";
    case MessageKind::kTokenGradients: return "routed tokens' gradients";
    case MessageKind::kExpertOutputs: return "expert outputs";
    case MessageKind::kExpertOutputGradients: return "expert outputs' gradients";
  }
  return "unknown";
}

const char* RestoreTierName(RestoreTier tier) {
  switch (tier) {
    case RestoreTier::kUnreported: return "unreported";
    case RestoreTier::kNone: return "none";
    case RestoreTier::kDisk: return "disk";
    case RestoreTier::kMemory: return "memory";
  }
  return "unknown";
}

int64_t MonotonicNowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

Status CreateProgressFile(const std::string& path, int rank) {
  ::unlink(path.c_str());  // a stale record from an earlier generation must not be read as live
  HF_ASSIGN_OR_RETURN(void* map, MapFile(path, /*writable=*/true, /*create=*/true, rank));
  munmap(map, kSize);
  return Status::Ok();
}

Result<std::unique_ptr<ProgressReader>> ProgressReader::Open(const std::string& path) {
  HF_ASSIGN_OR_RETURN(void* map, MapFile(path, /*writable=*/false, /*create=*/false, 0));
  return std::unique_ptr<ProgressReader>(new ProgressReader(map, kSize));
}

ProgressReader::~ProgressReader() { munmap(map_, size_); }

ProgressSnapshot ProgressReader::Read() const {
  ProgressSnapshot snap;
  const auto* rec = static_cast<const ProgressRecordLayout*>(map_);
  const uint32_t version = rec->version;
  // A version 2 or 3 writer (an older Python module) is read as far
  // as it goes: its record is a prefix of this one, the rest unreported (zero).
  if (LoadAcquire(&rec->magic) != kProgressMagic || (version != kProgressVersion && version != 2 && version != 3)) {
    return snap;
  }
  snap.valid = true;
  const size_t size = version == 2   ? offsetof(ProgressRecordLayout, restored_step)
                      : version == 3 ? kProgressV3Size
                                     : kSize;
  auto finish = [&snap, version] {
    if (version == 2) {
      snap.record.restored_step = -1;
      snap.record.restore_tier = static_cast<uint32_t>(RestoreTier::kUnreported);
      snap.record.restore_skipped = 0;
    }
    return snap;
  };
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const uint64_t before = LoadAcquire(&rec->seq);
    if (before % 2 == 1) continue;
    std::memcpy(&snap.record, rec, size);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (LoadAcquire(&rec->seq) == before) return finish();
  }
  // The writer is frozen mid-update (SIGSTOP, a debugger, dead): report what is there.
  std::memcpy(&snap.record, rec, size);
  snap.torn = true;
  return finish();
}

Result<std::unique_ptr<ProgressWriter>> ProgressWriter::Open(const std::string& path, int rank) {
  HF_ASSIGN_OR_RETURN(void* map, MapFile(path, /*writable=*/true, /*create=*/true, rank));
  auto* rec = static_cast<ProgressRecordLayout*>(map);
  rec->pid = static_cast<int32_t>(getpid());
  rec->rank = rank;
  return std::unique_ptr<ProgressWriter>(new ProgressWriter(map));
}

ProgressWriter::~ProgressWriter() { munmap(rec_, kSize); }

void ProgressWriter::Begin() {
  StoreRelease(&rec_->seq, rec_->seq + 1);
  __atomic_thread_fence(__ATOMIC_RELEASE);
}

void ProgressWriter::End() {
  rec_->heartbeat_ns = MonotonicNowNs();
  StoreRelease(&rec_->seq, rec_->seq + 1);
}

void ProgressWriter::SetPhase(Phase phase) {
  Begin();
  rec_->phase = static_cast<uint32_t>(phase);
  rec_->phase_started_ns = MonotonicNowNs();
  End();
}

void ProgressWriter::BeginStep() {
  Begin();
  const int64_t now = MonotonicNowNs();
  rec_->phase = static_cast<uint32_t>(Phase::kData);
  rec_->phase_started_ns = now;
  rec_->step_started_ns = now;
  End();
}

void ProgressWriter::EndStep(int64_t completed) {
  Begin();
  const int64_t now = MonotonicNowNs();
  rec_->step = completed;
  if (rec_->step_started_ns != 0) rec_->last_step_ns = now - rec_->step_started_ns;
  End();
}

uint64_t ProgressWriter::IssueCollective(CollectiveKind kind, uint64_t bytes, const CollectiveLabel& label) {
  const int g = static_cast<int>(label.group);
  const bool grouped = g >= 1 && g <= kCollectiveGroups;
  auto micro = [](int32_t m) { return static_cast<int16_t>(std::clamp<int32_t>(m, -1, INT16_MAX)); };
  Begin();
  const uint64_t seq = ++rec_->collectives_issued;
  const uint64_t slot = rec_->ring_head % kProgressRingSize;
  CollectiveEntry& e = rec_->ring[slot];
  e.seq = seq;
  e.kind = static_cast<uint32_t>(kind);
  e.bytes = bytes;
  e.issued_ns = MonotonicNowNs();
  e.completed_ns = 0;
  CollectiveDetail& d = rec_->ring_detail[slot];
  d.group = grouped ? static_cast<uint8_t>(g) : 0;
  d.group_seq = grouped ? ++rec_->group_issued[g - 1] : 0;
  d.send_what = static_cast<uint8_t>(label.send_what);
  d.recv_what = static_cast<uint8_t>(label.recv_what);
  d.reserved = 0;
  d.send_to = label.send_to;
  d.recv_from = label.recv_from;
  d.send_micro = micro(label.send_micro);
  d.recv_micro = micro(label.recv_micro);
  rec_->ring_head += 1;
  End();
  return seq;
}

void ProgressWriter::SetMesh(int tensor, int pipeline, int expert) {
  Begin();
  rec_->mesh_tensor = tensor;
  rec_->mesh_pipeline = pipeline;
  rec_->mesh_expert = expert;
  End();
}

void ProgressWriter::WaitCollective(uint64_t seq, CollectiveKind kind) {
  Begin();
  rec_->phase = static_cast<uint32_t>(Phase::kCollective);
  rec_->phase_started_ns = MonotonicNowNs();
  rec_->waiting_on = seq;
  rec_->collective_kind = static_cast<uint32_t>(kind);
  End();
}

void ProgressWriter::CollectiveDone(uint64_t seq) {
  Begin();
  if (seq > rec_->collectives_done) rec_->collectives_done = seq;
  if (rec_->waiting_on == seq) rec_->waiting_on = 0;
  for (CollectiveEntry& e : rec_->ring) {
    if (e.seq == seq) e.completed_ns = MonotonicNowNs();
  }
  End();
}

void ProgressWriter::SetCheckpointStep(int64_t step) {
  Begin();
  rec_->checkpoint_step = step;
  End();
}

void ProgressWriter::RecordCheckpointFailure(int64_t step, const std::string& message) {
  // Cut at a UTF-8 character boundary so that the text stays valid where the
  // daemon puts it into JSON (paths in messages may be UTF-8).
  size_t n = std::min(message.size(), static_cast<size_t>(kProgressErrorSize - 1));
  if (n < message.size()) {
    while (n > 0 && (static_cast<unsigned char>(message[n]) & 0xC0) == 0x80) --n;
  }
  Begin();
  rec_->checkpoint_failures += 1;
  rec_->checkpoint_failed_step = step;
  std::memcpy(rec_->checkpoint_error, message.data(), n);
  std::memset(rec_->checkpoint_error + n, 0, kProgressErrorSize - n);
  End();
}

void ProgressWriter::SetRestored(int64_t step, RestoreTier tier, uint32_t skipped) {
  Begin();
  rec_->restored_step = step;
  rec_->restore_tier = static_cast<uint32_t>(tier);
  rec_->restore_skipped = skipped;
  End();
}

}  // namespace holdfast
