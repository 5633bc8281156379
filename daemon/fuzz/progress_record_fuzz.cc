// libFuzzer target: the shared-memory progress records (common/progress_record.h)
// that ranks write and holdfastd reads, and what the daemon does with them.
//
// A record is written by the job (holdfast-train, or any PyTorch job through
// the Python module) and may hold anything: the daemon must read and judge it
// without crashing and without undefined behaviour, however wrong it is. The
// record has no checksum; what the reader validates is its magic and version
// (and its sequence lock: an odd seq that never turns even reads as torn).
// This harness writes each fuzzed record into a memfd that a ProgressReader
// maps, with the magic and version repaired (unless the flags say not), and feeds what the reader returns
// to the daemon's consumers, poll by poll, as the supervisor does: the
// HangDetector and, on a hang, TriageHang; the StragglerDetector; the cluster
// protocol that carries a follower's views to the leader (encode, parse back);
// and finally TriageExit. Input:
//   header, 16 bytes:
//     [0]      flags: bits 0-3 == 15: records read as written (no repair);
//              bits 4-5: ranks - 1; bit 6: keep seq as written (else made
//              even: no writer is mid-update); bit 7: triage a hang at every
//              poll, not only when the detector declares one
//     [1, 9)   CLOCK_MONOTONIC at the first poll (ns, little-endian; kept in [1, 2^62))
//     [9, 13)  poll interval (ns, little-endian)
//     [13, 15) wait status of the rank that ends last (triaged as a crash)
//     [15]     straggler settings: bit 0: factor 2 (else 0, off); bits 1-3: min_duration_s
//   then, for each poll and each rank in turn: one state byte (bits 0-2: the
//   /proc state, "RSDTtZIX"; bit 3: the process is dead) and the record's
//   sizeof(ProgressRecordLayout) bytes (952). A trailing partial poll is ignored.
// Properties: see the HF_CHECKs. Seeds: tests/fuzz/corpus/progress_record
// (records written by ProgressWriter during a simulated run).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "common/progress_record.h"
#include "common/rank_progress.h"
#include "daemon/cluster_protocol.h"
#include "daemon/straggler.h"
#include "daemon/triage.h"
#include "lineage/incident.h"

namespace holdfast {
namespace {

constexpr size_t kRecordSize = sizeof(ProgressRecordLayout);
constexpr size_t kV2Size = offsetof(ProgressRecordLayout, restored_step);
constexpr size_t kHeaderSize = 16;
constexpr int kMaxRanks = 4;
constexpr char kProcStates[] = "RSDTtZIX";

template <typename T>
T Get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// One memfd per rank slot, mapped by a ProgressReader as the daemon maps a
// rank's record file; the harness writes each input's records into it.
struct Slot {
  int fd = -1;
  std::unique_ptr<ProgressReader> reader;
};

Slot* Slots() {
  static Slot* slots = [] {
    auto* s = new Slot[kMaxRanks];
    for (int r = 0; r < kMaxRanks; ++r) {
      s[r].fd = memfd_create("holdfast-progress-fuzz", MFD_CLOEXEC);
      HF_CHECK(s[r].fd >= 0);
      HF_CHECK(ftruncate(s[r].fd, kRecordSize) == 0);
      Result<std::unique_ptr<ProgressReader>> reader =
          ProgressReader::Open("/proc/self/fd/" + std::to_string(s[r].fd));
      HF_CHECK_MSG(reader.ok(), reader.status().ToString());
      s[r].reader = std::move(reader).value();
    }
    return s;
  }();
  return slots;
}

ProgressSnapshot ReadThrough(Slot& slot, const ProgressRecordLayout& record) {
  HF_CHECK(pwrite(slot.fd, &record, kRecordSize, 0) == static_cast<ssize_t>(kRecordSize));
  return slot.reader->Read();
}

// A clock reading as the receiver of a cluster message gets it back: unset
// (<= 0) stays unset, a reading after the sender's now arrives as now.
int64_t Carried(int64_t t, int64_t now) { return t <= 0 ? 0 : (t >= now ? now : t); }

bool KnownToThisBuild(const ProgressRecordLayout& p) {
  if (p.phase > static_cast<uint32_t>(Phase::kDone)) return false;
  if (p.collective_kind > static_cast<uint32_t>(CollectiveKind::kSendRecv)) return false;
  if (p.restore_tier > static_cast<uint32_t>(RestoreTier::kMemory)) return false;
  const uint64_t n = std::min<uint64_t>(p.ring_head, kProgressRingSize);
  constexpr uint8_t kMaxWhat = kMaxMessageKind;
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t slot = (p.ring_head - n + i) % kProgressRingSize;
    if (p.ring[slot].kind > static_cast<uint32_t>(CollectiveKind::kSendRecv)) return false;
    const CollectiveDetail& d = p.ring_detail[slot];
    if (d.group > kCollectiveGroups || d.send_what > kMaxWhat || d.recv_what > kMaxWhat) return false;
  }
  return true;
}

// The error text, when it is plain ASCII that travels unchanged.
bool PlainError(const std::string& error) {
  return std::all_of(error.begin(), error.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

// The decode (common/rank_progress.h) keeps every field of a record this build
// can interpret, the ring in order, and nothing of one it cannot.
void CheckDecoded(const ProgressSnapshot& snap, const RankProgress& p) {
  const ProgressRecordLayout& r = snap.record;
  HF_CHECK(p.torn == snap.torn);
  HF_CHECK(p.valid == (snap.valid && KnownToThisBuild(r)));
  if (!p.valid) return;
  HF_CHECK(p.writer_pid == r.pid && p.attached() == (r.pid != 0));
  HF_CHECK(p.step == r.step && static_cast<uint32_t>(p.phase) == r.phase);
  HF_CHECK(static_cast<uint32_t>(p.collective_kind) == r.collective_kind && p.waiting_on == r.waiting_on);
  HF_CHECK(p.collectives_issued == r.collectives_issued && p.collectives_done == r.collectives_done);
  HF_CHECK(p.heartbeat_ns == r.heartbeat_ns && p.phase_started_ns == r.phase_started_ns);
  HF_CHECK(p.checkpoint_failures == r.checkpoint_failures && p.checkpoint_failed_step == r.checkpoint_failed_step);
  HF_CHECK(p.restored_step == r.restored_step && static_cast<uint32_t>(p.restore_tier) == r.restore_tier);
  HF_CHECK(p.restore_skipped == r.restore_skipped);
  const uint64_t n = std::min<uint64_t>(r.ring_head, kProgressRingSize);
  HF_CHECK(p.ring_head == r.ring_head && p.ring.size() == n);
  for (uint64_t k = 0; k < n; ++k) {
    const CollectiveEntry& e = r.ring[(r.ring_head - n + k) % kProgressRingSize];
    HF_CHECK(p.ring[k].seq == e.seq && static_cast<uint32_t>(p.ring[k].kind) == e.kind && p.ring[k].bytes == e.bytes);
    HF_CHECK(p.ring[k].issued_ns == e.issued_ns && p.ring[k].completed_ns == e.completed_ns);
    // Version 4's detail: the group and its number (0 without a group), peers and micro-batches -1 at least.
    const CollectiveDetail& d = r.ring_detail[(r.ring_head - n + k) % kProgressRingSize];
    const CollectiveLabel& l = p.ring[k].label;
    HF_CHECK(static_cast<uint8_t>(l.group) == d.group && p.ring[k].group_seq == (d.group != 0 ? d.group_seq : 0));
    auto peer = [](int32_t r) { return r >= 0 && r <= kMaxRecordedRank ? r : -1; };
    HF_CHECK(l.send_to == peer(d.send_to) && l.recv_from == peer(d.recv_from));
    HF_CHECK(l.send_micro == std::max<int32_t>(-1, d.send_micro) && l.recv_micro == std::max<int32_t>(-1, d.recv_micro));
  }
  HF_CHECK(p.checkpoint_error.size() <= 3 * (kProgressErrorSize - 1));
}

// A follower's views, sent to the leader and parsed there at the same clock.
void CheckCarried(const std::vector<RankView>& views, int64_t now) {
  ProgressMsg msg;
  msg.generation = 1;
  msg.ranks = views;
  const std::string line = EncodeClusterMessage(msg, now);
  Result<ClusterMessage> parsed = ParseClusterMessage(line, now);
  HF_CHECK_MSG(parsed.ok(), parsed.status().ToString());
  HF_CHECK(EncodeClusterMessage(*parsed, now) == line);
  const auto* got = std::get_if<ProgressMsg>(&*parsed);
  HF_CHECK(got != nullptr && got->generation == 1 && got->ranks.size() == views.size());
  for (size_t i = 0; i < views.size(); ++i) {
    const RankView& o = views[i];
    const RankView& q = got->ranks[i];
    HF_CHECK(q.rank == o.rank && q.node == o.node && q.host == o.host && q.pid == o.pid && q.alive == o.alive);
    HF_CHECK(q.proc_state == o.proc_state);
    HF_CHECK(q.progress.torn == o.progress.torn);
    const RankProgress& a = o.progress;
    const RankProgress& b = q.progress;
    HF_CHECK(b.valid == a.valid);
    HF_CHECK(b.attached() == a.attached());
    if (!a.valid) continue;
    HF_CHECK(b.step == a.step && b.phase == a.phase && b.collective_kind == a.collective_kind);
    HF_CHECK(b.collectives_issued == a.collectives_issued && b.collectives_done == a.collectives_done);
    HF_CHECK(b.waiting_on == a.waiting_on && b.last_step_ns == a.last_step_ns);
    HF_CHECK(b.checkpoint_step == a.checkpoint_step && b.checkpoint_failures == a.checkpoint_failures);
    HF_CHECK(b.checkpoint_failed_step == a.checkpoint_failed_step && b.ring_head == a.ring_head);
    HF_CHECK(b.restored_step == a.restored_step && b.restore_tier == a.restore_tier);
    HF_CHECK(b.restore_skipped == a.restore_skipped);
    HF_CHECK(b.phase_started_ns == Carried(a.phase_started_ns, now));
    HF_CHECK(b.step_started_ns == Carried(a.step_started_ns, now));
    HF_CHECK(b.heartbeat_ns == Carried(a.heartbeat_ns, now));
    if (PlainError(a.checkpoint_error)) HF_CHECK(b.checkpoint_error == a.checkpoint_error);
    HF_CHECK(b.ring.size() == a.ring.size());
    for (size_t k = 0; k < a.ring.size(); ++k) {
      const CollectiveRecord& x = a.ring[k];
      const CollectiveRecord& y = b.ring[k];
      HF_CHECK(y.seq == x.seq && y.kind == x.kind && y.bytes == x.bytes);
      HF_CHECK(y.issued_ns == Carried(x.issued_ns, now) && y.completed_ns == Carried(x.completed_ns, now));
    }
  }
}

// What on-call reads back with `runctl triage`.
void CheckEvidence(const TriageReport& inc, const std::vector<RankView>& views) {
  HF_CHECK(!inc.summary.empty() && *RunbookFor(inc.event) != '\0');
  const std::string written = ToJson(inc.evidence);  // as RunRecorder::Record writes it
  Result<IncidentEvidence> ev = ParseIncidentEvidence(written);
  HF_CHECK_MSG(ev.ok(), ev.status().ToString());
  HF_CHECK(ev->ranks.size() == views.size());
  HF_CHECK(ev->culprits == inc.culprits || inc.event != "hang");
  HF_CHECK(ToJson(*ev) == written);
  HF_CHECK(!inc.culprits.empty());
  for (int c : inc.culprits) HF_CHECK(c >= 0 && c < static_cast<int>(views.size()));
}

void CheckPace(const StragglerDetector& detector, int ranks, const StragglerConfig& config) {
  for (int r = 0; r < ranks; ++r) {
    std::optional<RankPace> pace = detector.Pace(r);
    if (!pace) continue;
    HF_CHECK(pace->rank == r && pace->samples >= config.min_samples);
    for (double v : {pace->steps_per_s, pace->step_ms_p50, pace->step_ms_p99, pace->compute_ms_p50,
                     pace->wait_ms_p50}) {
      HF_CHECK_MSG(std::isfinite(v) && v >= 0, std::to_string(v));
    }
  }
  if (const std::optional<SlowestRank>& s = detector.Slowest()) {
    HF_CHECK(s->rank >= 0 && s->rank < ranks && std::isfinite(s->ratio) && s->ratio >= 0);
  }
}

}  // namespace
}  // namespace holdfast

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace holdfast;
  if (size < kHeaderSize) return 0;
  Slot* slots = Slots();
  const uint8_t flags = data[0];
  const bool repair = (flags & 0x0f) != 0x0f;
  const int ranks = 1 + ((flags >> 4) & 3);
  const bool keep_seq = (flags & 0x40) != 0;
  const bool always_triage = (flags & 0x80) != 0;
  const int64_t start_ns = 1 + static_cast<int64_t>(Get<uint64_t>(data + 1) % ((uint64_t{1} << 62) - 1));
  const int64_t interval_ns = Get<uint32_t>(data + 9);
  const int wstatus = Get<uint16_t>(data + 13);
  StragglerConfig straggler_config;
  straggler_config.factor = (data[15] & 1) != 0 ? 2.0 : 0.0;
  straggler_config.min_duration_s = (data[15] >> 1) & 7;
  data += kHeaderSize;
  size -= kHeaderSize;

  const size_t slot_bytes = 1 + kRecordSize;
  const size_t polls = size / (slot_bytes * static_cast<size_t>(ranks));
  HangDetector hangs{SuperviseConfig{}};
  StragglerDetector stragglers(straggler_config);
  hangs.StartGeneration(start_ns, ranks);
  stragglers.StartGeneration(start_ns, ranks);
  std::vector<RankView> views;
  int64_t now = start_ns;
  for (size_t poll = 0; poll < polls; ++poll) {
    now = start_ns + static_cast<int64_t>(poll) * interval_ns;
    views.clear();
    for (int r = 0; r < ranks; ++r) {
      const uint8_t* slot = data + (poll * static_cast<size_t>(ranks) + static_cast<size_t>(r)) * slot_bytes;
      ProgressRecordLayout record;
      std::memcpy(&record, slot + 1, kRecordSize);
      if (repair) {
        record.magic = kProgressMagic;
        record.version = kProgressVersion;
      }
      if (!keep_seq) record.seq &= ~uint64_t{1};
      RankView v;
      v.rank = r;
      v.node = 0;
      v.host = "node-0";
      v.pid = 1000 + r;
      v.proc_state = ProcStateFromLetter(kProcStates[slot[0] & 7]);
      v.alive = (slot[0] & 8) == 0;
      const ProgressSnapshot snap = ReadThrough(slots[r], record);
      // A version 2 record (an older Python module) is read as its prefix,
      // with the restore fields unreported; any other version is not read.
      const bool v2 = record.version == 2;
      HF_CHECK(snap.valid == (record.magic == kProgressMagic && (record.version == kProgressVersion || v2)));
      HF_CHECK(!snap.torn || record.seq % 2 == 1);
      if (snap.valid) {
        HF_CHECK(std::memcmp(&snap.record, &record, v2 ? kV2Size : kRecordSize) == 0);
        if (v2) {
          HF_CHECK(snap.record.restored_step == -1 && snap.record.restore_skipped == 0);
          HF_CHECK(snap.record.restore_tier == static_cast<uint32_t>(RestoreTier::kUnreported));
        }
      }
      v.progress = DecodeProgress(snap);
      CheckDecoded(snap, v.progress);
      views.push_back(std::move(v));
    }

    const HangDetector::Verdict verdict = hangs.Observe(now, views);
    HF_CHECK(verdict.stalled_s >= 0 && std::isfinite(verdict.timeout_s));
    if (verdict.hung || always_triage) CheckEvidence(TriageHang(now, views, verdict), views);

    const StragglerVerdict straggler = stragglers.Observe(now, views);
    if (straggler.straggler || straggler.recovered) {
      HF_CHECK(straggler.rank >= 0 && straggler.rank < ranks && !straggler.summary.empty());
    }
    CheckPace(stragglers, ranks, straggler_config);

    CheckCarried(views, now);
  }
  if (!views.empty()) {
    const int last = ranks - 1;
    CheckEvidence(TriageExit(now, views, last, wstatus, {"Traceback (most recent call last):", "\xff\xfe"}), views);
  }
  return 0;
}
