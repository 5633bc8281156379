// World size 1: every collective is the identity, so nothing is queued and
// every Work is already complete.
#include "trainer/comm/communicator.h"

#include "trainer/comm/parts.h"

namespace holdfast {
namespace {

class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  const char* backend() const override { return "local"; }
  std::unique_ptr<Work> AllreduceAsync(float*, size_t, ReduceOp) override { return std::make_unique<DoneWork>(); }
  // The one part is this rank's: reducing or gathering it over one rank leaves it as it is.
  std::unique_ptr<Work> ReduceScatterAsync(float* data, const std::vector<size_t>& counts, ReduceOp) override {
    return std::make_unique<DoneWork>(LayOutParts("local reduce-scatter", data, counts, 1).status());
  }
  std::unique_ptr<Work> AllgatherAsync(float* data, const std::vector<size_t>& counts) override {
    return std::make_unique<DoneWork>(LayOutParts("local allgather", data, counts, 1).status());
  }
  Status AllreduceDoubles(double*, size_t, ReduceOp) override { return Status::Ok(); }
  Status Broadcast(void*, size_t, int root) override {
    if (root != 0) return InvalidArgumentError("broadcast root " + std::to_string(root) + " is not a rank of world 1");
    return Status::Ok();
  }
  Status Barrier() override { return Status::Ok(); }
  // World 1 has no peer: only the empty exchange (both sides -1) is valid.
  std::unique_ptr<Work> SendRecvAsync(const void* send, size_t send_bytes, int send_to, void* recv, size_t recv_bytes,
                                      int recv_from) override {
    return std::make_unique<DoneWork>(
        CheckSendRecv("local send/recv", 0, 1, send, send_bytes, send_to, recv, recv_bytes, recv_from));
  }
};

}  // namespace

std::unique_ptr<Communicator> MakeLocalCommunicator() { return std::make_unique<LocalCommunicator>(); }

}  // namespace holdfast
