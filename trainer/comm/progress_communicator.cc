#include "trainer/comm/progress_communicator.h"

#include <numeric>
#include <utility>

namespace holdfast {
namespace {

uint64_t FloatBytes(const std::vector<size_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), uint64_t{0}) * sizeof(float);
}

}  // namespace

class ProgressCommunicator::RecordedWork final : public Work {
 public:
  RecordedWork(ProgressCommunicator* comm, uint64_t seq, CollectiveKind kind, DeviceWait device_wait,
               std::unique_ptr<Work> inner)
      : comm_(comm), seq_(seq), kind_(kind), device_wait_(device_wait), inner_(std::move(inner)) {}

  Status Wait() override {
    comm_->progress_->WaitCollective(seq_, kind_);
    Status s = inner_->Wait();
    if (s.ok()) comm_->HostSawDone(seq_);
    return s;
  }

  Status WaitOnDevice() override {
    if (device_wait_ == DeviceWait::kDoneWithNextHostWait) {
      Status s = inner_->WaitOnDevice();
      if (s.ok()) comm_->unconfirmed_.push_back(seq_);
      return s;
    }
    comm_->progress_->WaitCollective(seq_, kind_);
    Status s = inner_->WaitOnDevice();
    if (s.ok()) comm_->progress_->CollectiveDone(seq_);
    return s;
  }

 private:
  ProgressCommunicator* const comm_;  // not owned; outlives its Work
  const uint64_t seq_;
  const CollectiveKind kind_;
  const DeviceWait device_wait_;
  const std::unique_ptr<Work> inner_;
};

ProgressCommunicator::ProgressCommunicator(std::unique_ptr<Communicator> inner, ProgressSink& progress,
                                           RecordedGroup group)
    : inner_(std::move(inner)), group_(std::move(group)), progress_(&progress) {}

int32_t ProgressCommunicator::Global(int r) const {
  if (r < 0 || group_.ranks.empty()) return r;
  return static_cast<size_t>(r) < group_.ranks.size() ? group_.ranks[static_cast<size_t>(r)] : -1;
}

template <typename F>
std::unique_ptr<Work> ProgressCommunicator::IssueAsync(CollectiveKind kind, uint64_t bytes, DeviceWait device_wait,
                                                       F&& call, const CollectiveLabel& label) {
  const uint64_t seq = progress_->IssueCollective(kind, bytes, label);
  return std::make_unique<RecordedWork>(this, seq, kind, device_wait, call());
}

template <typename F>
Status ProgressCommunicator::RunBlocking(CollectiveKind kind, uint64_t bytes, F&& call) {
  const uint64_t seq = progress_->IssueCollective(kind, bytes, CollectiveLabel{group_.kind});
  progress_->WaitCollective(seq, kind);
  Status s = call();
  if (s.ok()) HostSawDone(seq);
  return s;
}

void ProgressCommunicator::HostSawDone(uint64_t seq) {
  for (uint64_t earlier : unconfirmed_) progress_->CollectiveDone(earlier);
  unconfirmed_.clear();
  progress_->CollectiveDone(seq);
}

std::unique_ptr<Work> ProgressCommunicator::AllreduceAsync(float* data, size_t count, ReduceOp op) {
  return IssueAsync(CollectiveKind::kAllreduce, uint64_t{count} * sizeof(float), DeviceWait::kDoneWithNextHostWait,
                    [&] { return inner_->AllreduceAsync(data, count, op); }, CollectiveLabel{group_.kind});
}

std::unique_ptr<Work> ProgressCommunicator::ReduceScatterAsync(float* data, const std::vector<size_t>& counts,
                                                               ReduceOp op) {
  return IssueAsync(CollectiveKind::kReduceScatter, FloatBytes(counts), DeviceWait::kDoneWithNextHostWait,
                    [&] { return inner_->ReduceScatterAsync(data, counts, op); }, CollectiveLabel{group_.kind});
}

std::unique_ptr<Work> ProgressCommunicator::AllgatherAsync(float* data, const std::vector<size_t>& counts) {
  return IssueAsync(CollectiveKind::kAllgather, FloatBytes(counts), DeviceWait::kDoneAtOnce,
                    [&] { return inner_->AllgatherAsync(data, counts); }, CollectiveLabel{group_.kind});
}

Status ProgressCommunicator::AllreduceDoubles(double* data, size_t count, ReduceOp op) {
  return RunBlocking(CollectiveKind::kAllreduce, uint64_t{count} * sizeof(double),
                     [&] { return inner_->AllreduceDoubles(data, count, op); });
}

Status ProgressCommunicator::Broadcast(void* data, size_t bytes, int root) {
  return RunBlocking(CollectiveKind::kBroadcast, bytes, [&] { return inner_->Broadcast(data, bytes, root); });
}

std::unique_ptr<Work> ProgressCommunicator::SendRecvLabelled(const void* send, size_t send_bytes, int send_to,
                                                             void* recv, size_t recv_bytes, int recv_from,
                                                             const MessageLabel& label) {
  CollectiveLabel l{group_.kind};
  l.send_to = Global(send_to);
  l.recv_from = Global(recv_from);
  if (send_to >= 0) {
    l.send_what = label.send_what;
    l.send_micro = label.send_micro;
  }
  if (recv_from >= 0) {
    l.recv_what = label.recv_what;
    l.recv_micro = label.recv_micro;
  }
  // Waited for by the host (a pipeline stage needs the activations now).
  return IssueAsync(
      CollectiveKind::kSendRecv, uint64_t{send_bytes} + recv_bytes, DeviceWait::kDoneAtOnce,
      [&] { return inner_->SendRecvAsync(send, send_bytes, send_to, recv, recv_bytes, recv_from); }, l);
}

Status ProgressCommunicator::Barrier() {
  return RunBlocking(CollectiveKind::kBarrier, 0, [&] { return inner_->Barrier(); });
}

}  // namespace holdfast
