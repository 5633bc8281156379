// Communicator: the collectives data-parallel training needs, on raw buffers.
//
// Kept free of LibTorch so that it compiles (and is tested) in seconds; the
// trainer hands it pointers into its flat gradient buffer. Two implementations:
// GlooCommunicator (TCP, CPU memory) and NcclCommunicator (CUDA device memory;
// compiled only where CUDA and NCCL are found). Both bootstrap through a Store.
//
// Ordering contract: every rank must issue the same collectives in the same
// order. AllreduceAsync calls are executed in issue order by one background
// thread per communicator, which is what lets the trainer overlap bucket
// allreduces with the rest of backward.
//
// Thread-safety: AllreduceAsync/Allreduce/Barrier may be called from one thread
// at a time (the training thread); Work::Wait from any thread. A Work must not
// outlive the Communicator that issued it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/progress_record.h"  // MessageKind
#include "common/status.h"
#include "common/store.h"

namespace holdfast {

enum class ReduceOp { kSum, kAvg };

// What a SendRecvLabelled's two messages carry (for the progress record):
// a pipeline's activations or gradients of a micro-batch.
struct MessageLabel {
  MessageKind send_what = MessageKind::kNone;
  MessageKind recv_what = MessageKind::kNone;
  int send_micro = -1;  // -1: not a micro-batch's
  int recv_micro = -1;
};

// Handle for one asynchronous collective.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the collective finished; returns its error (timeout, peer gone).
  virtual Status Wait() = 0;
  // Makes later work on the caller's device queue wait for the collective,
  // without blocking the host (NCCL: the legacy default stream waits for the
  // collective's event); errors known so far are returned. Host memory
  // collectives have no device queue: the default blocks as Wait does.
  virtual Status WaitOnDevice() { return Wait(); }
};

struct CommunicatorOptions {
  int rank = 0;
  int world_size = 1;
  std::shared_ptr<Store> store;  // already namespaced for this generation
  std::string interface_host = "127.0.0.1";  // address this rank listens on (Gloo)
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  int cuda_device = 0;  // NCCL only
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual const char* backend() const = 0;  // "gloo", "nccl"

  // In-place allreduce of `count` float32 values at `data` (host memory for
  // Gloo, device memory for NCCL). `data` must stay valid until Wait returns.
  virtual std::unique_ptr<Work> AllreduceAsync(float* data, size_t count, ReduceOp op) = 0;
  Status Allreduce(float* data, size_t count, ReduceOp op) { return AllreduceAsync(data, count, op)->Wait(); }
  // ZeRO-1's collectives. `counts` (world_size entries, zeros allowed) splits
  // [data, data + sum(counts)) into contiguous parts in rank order: rank r's
  // part starts at counts[0] + ... + counts[r-1]. Both are in place, queued in
  // issue order with every other collective, and `data` must stay valid until
  // Wait returns. Every rank passes the same counts (a rank whose counts are
  // malformed fails at once; its peers then wait out the timeout).
  // Reduce-scatter: on completion rank r's own part holds the reduction over
  // all ranks of that part (kAvg divides by world_size); the other parts of
  // `data` are left unspecified (scratch). The summation order is fixed for a
  // given world size, so the result is the same bits from run to run.
  virtual std::unique_ptr<Work> ReduceScatterAsync(float* data, const std::vector<size_t>& counts, ReduceOp op) = 0;
  // Allgather: every rank's own part is copied to the same place on every rank.
  virtual std::unique_ptr<Work> AllgatherAsync(float* data, const std::vector<size_t>& counts) = 0;
  // Blocking allreduce of a few float64 values (the step's loss, its requests
  // and the partial sums of the gradient norm under ZeRO-1); every rank gets the
  // same bits. Host memory for Gloo, device memory for NCCL.
  virtual Status AllreduceDoubles(double* data, size_t count, ReduceOp op) = 0;
  // In-place broadcast of `bytes` bytes from root to all ranks.
  virtual Status Broadcast(void* data, size_t bytes, int root) = 0;
  // Point to point, for a pipeline's activations and gradients: sends
  // `send_bytes` bytes at `send` to rank `send_to` and receives `recv_bytes`
  // bytes into `recv` from rank `recv_from`, both at once (either side left
  // out with -1), so that two neighbours that each send and receive never
  // wait on one another. Queued in issue order with the collectives; between
  // two ranks the n-th message one sends is the n-th the other receives, and
  // its size must be the receive's (the caller's to keep: both sides know
  // the activations' shape). The
  // buffers must stay valid until Wait returns. Host memory for Gloo, device
  // memory for NCCL. A peer outside the world, this rank itself or a null
  // buffer of nonzero size is refused before anything is queued.
  virtual std::unique_ptr<Work> SendRecvAsync(const void* send, size_t send_bytes, int send_to, void* recv,
                                              size_t recv_bytes, int recv_from) = 0;
  // SendRecvAsync with what the messages carry, for the progress record
  // (ProgressCommunicator records it with the peers; a transport just sends).
  virtual std::unique_ptr<Work> SendRecvLabelled(const void* send, size_t send_bytes, int send_to, void* recv,
                                                 size_t recv_bytes, int recv_from, const MessageLabel& label) {
    (void)label;
    return SendRecvAsync(send, send_bytes, send_to, recv, recv_bytes, recv_from);
  }
  virtual Status Barrier() = 0;
};

// Single-process communicator: every collective is the identity. Used for world_size 1.
std::unique_ptr<Communicator> MakeLocalCommunicator();

// Gloo over TCP. Fails with a clear Status when a peer does not show up in time.
Result<std::unique_ptr<Communicator>> MakeGlooCommunicator(const CommunicatorOptions& options);

// NCCL; returns kFailedPrecondition naming the reason when built without CUDA/NCCL.
Result<std::unique_ptr<Communicator>> MakeNcclCommunicator(const CommunicatorOptions& options);

}  // namespace holdfast
