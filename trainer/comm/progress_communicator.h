// ProgressCommunicator: a Communicator that writes every collective it runs
// into the rank's progress record itself (c10d's habit: the process group, not
// its caller, keeps the record of collectives), so that the training loop just
// calls the collective. It wraps the real communicator (Gloo, NCCL, local) and
// changes nothing of what that one does.
//
// What it records, in ProgressSink terms (trainer/progress_sink.h):
// - issue: IssueCollective(kind, bytes) before the collective is handed to the
//   inner communicator; the Work keeps its sequence number. Bytes are the
//   payload: count x 4 for float32 collectives (the whole buffer for
//   reduce-scatter and allgather), count x 8 for AllreduceDoubles.
// - a wait the host blocks in (Work::Wait, and the blocking collectives):
//   WaitCollective(seq, kind), the wait, and on success CollectiveDone(seq),
//   first for every earlier collective that is done but was not yet recorded
//   so (next point), in issue order.
// - Work::WaitOnDevice of an allreduce or reduce-scatter (the gradient buckets
//   on a GPU): nothing at once. The host does not wait, so it cannot say the
//   collective is done; the next collective the host waits for completes after
//   it (one queue, issue order: communicator.h), and records it done first.
// - Work::WaitOnDevice of an allgather (ZeRO-1's parameter gathers, the last
//   collectives of a step): a wait and, on success, done at once, as the
//   record has always shown them, so that between steps no collective of the
//   step looks outstanding.
// Failed collectives are never recorded done. Collectives issued through
// unrecorded() are not recorded at all.
// - the group: every collective is labelled with the communicator's group
//   (RecordedGroup: tp, dp, pp, ... of common/mesh.h, or the world), which
//   the record numbers per group; a send/recv also with its peers as global
//   ranks and what its messages carry (SendRecvLabelled's MessageLabel), so
//   that triage can say which stage never sent what to whom.
//
// Thread-safety: one thread (the training thread) issues collectives and
// waits on their Work, since the progress record has exactly one writer
// (narrower than Communicator's "Work::Wait from any thread"). A Work must not
// outlive the ProgressCommunicator that issued it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/progress_record.h"
#include "common/status.h"
#include "trainer/comm/communicator.h"
#include "trainer/progress_sink.h"

namespace holdfast {

// The group a communicator runs, as the record names it.
struct RecordedGroup {
  CollectiveGroup kind = CollectiveGroup::kWorld;
  // Global rank of each rank of the group; empty: the group is the world
  // (group rank = global rank).
  std::vector<int> ranks;
};

class ProgressCommunicator final : public Communicator {
 public:
  // `inner` (owned) runs the collectives; `progress` (not owned) must outlive
  // this communicator. `group`: what its collectives are labelled with.
  explicit ProgressCommunicator(std::unique_ptr<Communicator> inner, ProgressSink& progress = NoProgress(),
                                RecordedGroup group = {});

  // Where later collectives are recorded (not owned; must outlive this).
  void SetProgressSink(ProgressSink& progress) { progress_ = &progress; }

  // The wrapped communicator: its collectives are not recorded (kept for the
  // collectives the record has never shown, such as GRPO's batch broadcasts).
  Communicator* unrecorded() { return inner_.get(); }

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  const char* backend() const override { return inner_->backend(); }

  std::unique_ptr<Work> AllreduceAsync(float* data, size_t count, ReduceOp op) override;
  std::unique_ptr<Work> ReduceScatterAsync(float* data, const std::vector<size_t>& counts, ReduceOp op) override;
  std::unique_ptr<Work> AllgatherAsync(float* data, const std::vector<size_t>& counts) override;
  Status AllreduceDoubles(double* data, size_t count, ReduceOp op) override;
  Status Broadcast(void* data, size_t bytes, int root) override;
  Status Barrier() override;
  // Recorded as one kSendRecv (bytes: sent + received) with its peers.
  std::unique_ptr<Work> SendRecvAsync(const void* send, size_t send_bytes, int send_to, void* recv, size_t recv_bytes,
                                      int recv_from) override {
    return SendRecvLabelled(send, send_bytes, send_to, recv, recv_bytes, recv_from, MessageLabel{});
  }
  std::unique_ptr<Work> SendRecvLabelled(const void* send, size_t send_bytes, int send_to, void* recv,
                                         size_t recv_bytes, int recv_from, const MessageLabel& label) override;

 private:
  class RecordedWork;
  // How a Work::WaitOnDevice is recorded (see the header comment).
  enum class DeviceWait { kDoneWithNextHostWait, kDoneAtOnce };

  template <typename F>
  std::unique_ptr<Work> IssueAsync(CollectiveKind kind, uint64_t bytes, DeviceWait device_wait, F&& call,
                                   const CollectiveLabel& label);
  // The global rank of group rank `r` (-1 stays -1).
  int32_t Global(int r) const;
  template <typename F>
  Status RunBlocking(CollectiveKind kind, uint64_t bytes, F&& call);
  // Collective `seq` completed and the host saw it: it and every collective
  // before it waiting in unconfirmed_ are recorded done.
  void HostSawDone(uint64_t seq);

  const std::unique_ptr<Communicator> inner_;
  const RecordedGroup group_;
  ProgressSink* progress_;  // not owned, never null; training thread only
  // Collectives waited on by the device only, not yet recorded done, in issue
  // order. Training thread only.
  std::vector<uint64_t> unconfirmed_;
};

}  // namespace holdfast
