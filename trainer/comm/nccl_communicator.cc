// NcclCommunicator: collectives on CUDA device memory through NCCL.
//
// Bootstrap: rank 0 creates the ncclUniqueId and publishes it in the store at
// "nccl/unique_id"; the others Get it. The communicator is created in NCCL's
// non-blocking mode so that neither init nor a hung collective can hold the
// caller past options.timeout: waits poll the communicator's async error and,
// on timeout or error, abort it (ncclCommAbort) and fail for good.
//
// Collectives run on a dedicated non-blocking stream that first waits for the
// legacy default stream (where LibTorch's default stream produces gradients),
// so queued NCCL work is ordered after the gradients it reads without
// serialising later compute behind it. Work::Wait blocks the host until a
// cudaEvent recorded after the collective has completed.
//
// Reduce-scatter and allgather with uneven parts (ZeRO-1) are one NCCL group
// of per-rank collectives, skipping empty parts: an in-place ncclReduce to
// each part's owner, and an in-place ncclBroadcast from each part's owner.
// NCCL's reduction order is fixed for a given world size, topology and NCCL
// version (and NCCL_ALGO/NCCL_PROTO), so results repeat bit for bit on the
// same machines.
//
// ncclResult_t becomes a Status in exactly one function, NcclStatus
// (common/nccl_status.h; cudaError_t: common/cuda_status.h).
#include "trainer/comm/communicator.h"

#if HOLDFAST_HAVE_NCCL

#include <cuda_runtime_api.h>
#include <nccl.h>
#include "common/cuda_status.h"
#include "common/nccl_status.h"
#include "trainer/comm/parts.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

static_assert(NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0), "needs NCCL >= 2.14 (ncclAvg, non-blocking init)");

namespace holdfast {
namespace {

using Clock = std::chrono::steady_clock;

class NcclCommunicator;

class NcclWork final : public Work {
 public:
  NcclWork(NcclCommunicator* comm, cudaEvent_t event, std::string what)
      : comm_(comm), event_(event), what_(std::move(what)) {}
  ~NcclWork() override;
  Status Wait() override;
  Status WaitOnDevice() override;

 private:
  NcclCommunicator* comm_;  // not owned; the communicator must outlive its Work
  cudaEvent_t event_;       // borrowed from the communicator's pool
  std::string what_;
  std::mutex mu_;
  bool done_ = false;  // guarded by mu_
  Status status_;      // guarded by mu_
};

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(const CommunicatorOptions& options) : options_(options) {}

  ~NcclCommunicator() override {
    if (!failed_.load() && comm_ != nullptr) {
      // Finalize flushes outstanding work collectively; if a peer is gone it
      // times out and Fail() aborts instead.
      ncclResult_t res;
      {
        std::lock_guard<std::mutex> lock(comm_mu_);
        res = ncclCommFinalize(comm_);
      }
      Status s = res == ncclSuccess || res == ncclInProgress ? WaitIdle("nccl: finalize")
                                                              : Fail(NcclStatus("nccl: finalize", res, comm_));
      if (s.ok()) ncclCommDestroy(comm_);
    }
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    if (input_ready_ != nullptr) cudaEventDestroy(input_ready_);
    if (barrier_buffer_ != nullptr) cudaFree(barrier_buffer_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  Status Init() {
    const std::string who = "nccl: rank " + std::to_string(options_.rank) + " of " +
                            std::to_string(options_.world_size) + " on cuda device " +
                            std::to_string(options_.cuda_device);
    HF_RETURN_IF_ERROR(CudaStatus(who + ": cudaSetDevice", cudaSetDevice(options_.cuda_device)));
    HF_RETURN_IF_ERROR(CudaStatus(who + ": cudaStreamCreate", cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)));
    HF_RETURN_IF_ERROR(
        CudaStatus(who + ": cudaEventCreate", cudaEventCreateWithFlags(&input_ready_, cudaEventDisableTiming)));
    HF_RETURN_IF_ERROR(CudaStatus(who + ": cudaMalloc", cudaMalloc(&barrier_buffer_, sizeof(float))));

    ncclUniqueId id;
    const std::string key = "nccl/unique_id";
    if (options_.rank == 0) {
      HF_RETURN_IF_ERROR(NcclStatus(who + ": ncclGetUniqueId", ncclGetUniqueId(&id), nullptr));
      std::vector<uint8_t> bytes(reinterpret_cast<uint8_t*>(&id), reinterpret_cast<uint8_t*>(&id) + sizeof(id));
      HF_RETURN_IF_ERROR(options_.store->Set(key, bytes).WithContext(who + ": publishing the ncclUniqueId"));
    } else {
      auto bytes = options_.store->Get(key, options_.timeout);
      if (!bytes.ok()) return bytes.status().WithContext(who + ": waiting for rank 0's ncclUniqueId");
      if (bytes->size() != sizeof(id)) {
        return CorruptionError(who + ": store key '" + key + "' holds " + std::to_string(bytes->size()) +
                               " bytes, not an ncclUniqueId (" + std::to_string(sizeof(id)) + ")");
      }
      std::memcpy(&id, bytes->data(), sizeof(id));
    }

    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // so init and collectives can be abandoned at our timeout
    ncclResult_t res;
    {
      std::lock_guard<std::mutex> lock(comm_mu_);
      res = ncclCommInitRankConfig(&comm_, options_.world_size, id, options_.rank, &config);
    }
    if (res != ncclSuccess && res != ncclInProgress) {
      return Fail(NcclStatus(who + ": ncclCommInitRankConfig", res, comm_));
    }
    return WaitIdle(who + ": ncclCommInitRankConfig (waiting for every rank to join)");
  }

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }
  const char* backend() const override { return "nccl"; }

  std::unique_ptr<Work> AllreduceAsync(float* data, size_t count, ReduceOp op) override {
    const std::string what = "nccl allreduce of " + std::to_string(count) + " floats (rank " +
                             std::to_string(options_.rank) + " of " + std::to_string(options_.world_size) + ")";
    cudaEvent_t event = nullptr;
    Status s = Enqueue(what, [&] {
      return ncclAllReduce(data, data, count, ncclFloat32, op == ReduceOp::kAvg ? ncclAvg : ncclSum, comm_, stream_);
    }, &event);
    if (!s.ok()) return std::make_unique<DoneWork>(s);
    return std::make_unique<NcclWork>(this, event, what);
  }

  std::unique_ptr<Work> ReduceScatterAsync(float* data, const std::vector<size_t>& counts, ReduceOp op) override {
    const std::string what = "nccl reduce-scatter (rank " + std::to_string(options_.rank) + " of " +
                             std::to_string(options_.world_size) + ")";
    Result<Parts> parts = LayOutParts(what, data, counts, options_.world_size);
    if (!parts.ok()) return std::make_unique<DoneWork>(parts.status());
    const std::string described = what + " of " + std::to_string(parts->total) + " floats";
    const ncclRedOp_t reduce = op == ReduceOp::kAvg ? ncclAvg : ncclSum;
    cudaEvent_t event = nullptr;
    Status s = Enqueue(described, [&] {
      return GroupOverParts(counts, [&](int r) {
        float* part = data + parts->offsets[r];
        return ncclReduce(part, part, counts[r], ncclFloat32, reduce, r, comm_, stream_);
      });
    }, &event);
    if (!s.ok()) return std::make_unique<DoneWork>(s);
    return std::make_unique<NcclWork>(this, event, described);
  }

  std::unique_ptr<Work> AllgatherAsync(float* data, const std::vector<size_t>& counts) override {
    const std::string what = "nccl allgather (rank " + std::to_string(options_.rank) + " of " +
                             std::to_string(options_.world_size) + ")";
    Result<Parts> parts = LayOutParts(what, data, counts, options_.world_size);
    if (!parts.ok()) return std::make_unique<DoneWork>(parts.status());
    const std::string described = what + " of " + std::to_string(parts->total) + " floats";
    cudaEvent_t event = nullptr;
    Status s = Enqueue(described, [&] {
      return GroupOverParts(counts, [&](int r) {
        float* part = data + parts->offsets[r];
        return ncclBroadcast(part, part, counts[r], ncclFloat32, r, comm_, stream_);
      });
    }, &event);
    if (!s.ok()) return std::make_unique<DoneWork>(s);
    return std::make_unique<NcclWork>(this, event, described);
  }

  Status AllreduceDoubles(double* data, size_t count, ReduceOp op) override {
    const std::string what = "nccl allreduce of " + std::to_string(count) + " doubles (rank " +
                             std::to_string(options_.rank) + " of " + std::to_string(options_.world_size) + ")";
    cudaEvent_t event = nullptr;
    HF_RETURN_IF_ERROR(Enqueue(what, [&] {
      return ncclAllReduce(data, data, count, ncclFloat64, op == ReduceOp::kAvg ? ncclAvg : ncclSum, comm_, stream_);
    }, &event));
    return NcclWork(this, event, what).Wait();
  }

  Status Broadcast(void* data, size_t bytes, int root) override {
    if (root < 0 || root >= options_.world_size) {
      return InvalidArgumentError("nccl broadcast: root " + std::to_string(root) + " is not a rank of world " +
                                  std::to_string(options_.world_size));
    }
    const std::string what = "nccl broadcast of " + std::to_string(bytes) + " bytes from rank " + std::to_string(root);
    cudaEvent_t event = nullptr;
    HF_RETURN_IF_ERROR(Enqueue(what, [&] {
      return ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_);
    }, &event));
    return NcclWork(this, event, what).Wait();
  }

  // One NCCL group of the send and the receive, so that neighbours that
  // exchange both ways do not wait on one another.
  std::unique_ptr<Work> SendRecvAsync(const void* send, size_t send_bytes, int send_to, void* recv, size_t recv_bytes,
                                      int recv_from) override {
    const std::string what = "nccl send/recv (rank " + std::to_string(options_.rank) + " of " +
                             std::to_string(options_.world_size) + ", " + std::to_string(send_bytes) +
                             " bytes to rank " + std::to_string(send_to) + ", " + std::to_string(recv_bytes) +
                             " bytes from rank " + std::to_string(recv_from) + ")";
    Status ok = CheckSendRecv(what, options_.rank, options_.world_size, send, send_bytes, send_to, recv, recv_bytes,
                              recv_from);
    if (!ok.ok()) return std::make_unique<DoneWork>(ok);
    cudaEvent_t event = nullptr;
    Status s = Enqueue(what, [&] {
      ncclResult_t res = ncclGroupStart();
      if (res != ncclSuccess) return res;
      if (send_to >= 0) res = ncclSend(send, send_bytes, ncclUint8, send_to, comm_, stream_);
      if (recv_from >= 0 && (res == ncclSuccess || res == ncclInProgress)) {
        res = ncclRecv(recv, recv_bytes, ncclUint8, recv_from, comm_, stream_);
      }
      ncclResult_t end = ncclGroupEnd();
      return res == ncclSuccess || res == ncclInProgress ? end : res;
    }, &event);
    if (!s.ok()) return std::make_unique<DoneWork>(s);
    return std::make_unique<NcclWork>(this, event, what);
  }

  Status Barrier() override {
    cudaEvent_t event = nullptr;
    HF_RETURN_IF_ERROR(Enqueue("nccl barrier", [&] {
      return ncclAllReduce(barrier_buffer_, barrier_buffer_, 1, ncclFloat32, ncclSum, comm_, stream_);
    }, &event));
    return NcclWork(this, event, "nccl barrier").Wait();
  }

  // Polls until `event` completed, the communicator reports an error, or the
  // timeout passes; the last two abort the communicator.
  Status WaitEvent(const std::string& what, cudaEvent_t event) {
    const Clock::time_point deadline = Clock::now() + options_.timeout;
    for (;;) {
      if (failed_.load()) return FailedStatus(what);
      cudaError_t q = cudaEventQuery(event);
      if (q == cudaSuccess) return Status::Ok();
      if (q != cudaErrorNotReady) return Fail(CudaStatus(what + ": cudaEventQuery", q));
      HF_RETURN_IF_ERROR(CheckAsyncError(what));
      if (Clock::now() >= deadline) {
        return Fail(TimeoutError(what + ": did not complete within " + std::to_string(options_.timeout.count()) +
                                 " ms (a peer is hung or gone); the NCCL communicator was aborted"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));  // CUDA offers no wait with a timeout
    }
  }

  // The legacy default stream (LibTorch's) waits for `event`; the host does not.
  Status StreamWaitEvent(const std::string& what, cudaEvent_t event) {
    if (failed_.load()) return FailedStatus(what);
    HF_RETURN_IF_ERROR(Fail(CudaStatus(what + ": cudaStreamWaitEvent", cudaStreamWaitEvent(cudaStreamLegacy, event, 0))));
    return CheckAsyncError(what);
  }

  void ReleaseEvent(cudaEvent_t event) {
    std::lock_guard<std::mutex> lock(mu_);
    free_events_.push_back(event);
  }

 private:
  // Issues issue(r) for every rank r with a non-empty part, as one NCCL group
  // (one launch, and no rank waits on a peer's earlier part). Called under
  // comm_mu_ from Enqueue's issue function. The group is always ended, so an
  // error inside it leaves NCCL's group state clean before Fail aborts.
  template <typename F>
  static ncclResult_t GroupOverParts(const std::vector<size_t>& counts, F&& issue) {
    ncclResult_t res = ncclGroupStart();
    if (res != ncclSuccess) return res;
    for (size_t r = 0; r < counts.size() && (res == ncclSuccess || res == ncclInProgress); ++r) {
      if (counts[r] > 0) res = issue(static_cast<int>(r));
    }
    ncclResult_t end = ncclGroupEnd();
    return res == ncclSuccess || res == ncclInProgress ? end : res;
  }

  // Orders the collective after work already queued on the legacy default
  // stream, issues it, and records a completion event (from the pool).
  template <typename F>
  Status Enqueue(const std::string& what, F&& issue, cudaEvent_t* event) {
    if (failed_.load()) return FailedStatus(what);
    HF_RETURN_IF_ERROR(CudaStatus(what + ": cudaSetDevice", cudaSetDevice(options_.cuda_device)));
    HF_RETURN_IF_ERROR(Fail(CudaStatus(what + ": cudaEventRecord", cudaEventRecord(input_ready_, cudaStreamLegacy))));
    HF_RETURN_IF_ERROR(Fail(CudaStatus(what + ": cudaStreamWaitEvent", cudaStreamWaitEvent(stream_, input_ready_, 0))));
    ncclResult_t res;
    {
      std::lock_guard<std::mutex> lock(comm_mu_);
      if (failed_.load()) return FailedStatus(what);
      res = issue();
    }
    if (res == ncclInProgress) {
      HF_RETURN_IF_ERROR(WaitIdle(what));
    } else if (res != ncclSuccess) {
      return Fail(NcclStatus(what, res, comm_));
    }
    HF_ASSIGN_OR_RETURN(*event, TakeEvent(what));
    return Fail(CudaStatus(what + ": cudaEventRecord", cudaEventRecord(*event, stream_)));
  }

  Result<cudaEvent_t> TakeEvent(const std::string& what) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_events_.empty()) {
        cudaEvent_t e = free_events_.back();
        free_events_.pop_back();
        return e;
      }
    }
    cudaEvent_t e = nullptr;
    HF_RETURN_IF_ERROR(CudaStatus(what + ": cudaEventCreate", cudaEventCreateWithFlags(&e, cudaEventDisableTiming)));
    return e;
  }

  // Waits out ncclInProgress after a non-blocking call.
  Status WaitIdle(const std::string& what) {
    const Clock::time_point deadline = Clock::now() + options_.timeout;
    for (;;) {
      ncclResult_t state = ncclInProgress;
      ncclResult_t res;
      {
        std::lock_guard<std::mutex> lock(comm_mu_);
        if (failed_.load()) return FailedStatus(what);
        res = ncclCommGetAsyncError(comm_, &state);
      }
      if (res != ncclSuccess) return Fail(NcclStatus(what + ": ncclCommGetAsyncError", res, comm_));
      if (state == ncclSuccess) return Status::Ok();
      if (state != ncclInProgress) return Fail(NcclStatus(what, state, comm_));
      if (Clock::now() >= deadline) {
        return Fail(TimeoutError(what + ": not done within " + std::to_string(options_.timeout.count()) +
                                 " ms; the NCCL communicator was aborted"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  Status CheckAsyncError(const std::string& what) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t res;
    {
      std::lock_guard<std::mutex> lock(comm_mu_);
      if (failed_.load()) return FailedStatus(what);
      res = ncclCommGetAsyncError(comm_, &state);
    }
    if (res != ncclSuccess) return Fail(NcclStatus(what + ": ncclCommGetAsyncError", res, comm_));
    if (state != ncclSuccess && state != ncclInProgress) return Fail(NcclStatus(what, state, comm_));
    return Status::Ok();
  }

  // Marks the communicator failed (first error wins) and aborts it so that
  // every rank's pending work ends. Passes OK through.
  Status Fail(Status s) {
    if (s.ok()) return s;
    std::lock_guard<std::mutex> lock(comm_mu_);
    if (!failed_.load()) {
      first_error_ = s;
      failed_.store(true);
      if (comm_ != nullptr) ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    return s;
  }

  // Needs comm_mu_ held, or failed_ seen true (first_error_ is then final).
  Status FailedStatus(const std::string& what) {
    return Status(first_error_.code(), what + ": not run, the communicator failed earlier: " + first_error_.message());
  }

  const CommunicatorOptions options_;
  // Every NCCL call on comm_ holds comm_mu_, so Work::Wait on another thread
  // cannot abort the communicator under a call in progress.
  std::mutex comm_mu_;
  ncclComm_t comm_ = nullptr;       // guarded by comm_mu_; nulled by Fail after the abort
  std::atomic<bool> failed_{false};  // set once, under comm_mu_
  Status first_error_;               // written once under comm_mu_ before failed_ is set
  cudaStream_t stream_ = nullptr;
  cudaEvent_t input_ready_ = nullptr;  // training thread only
  float* barrier_buffer_ = nullptr;    // one device float for Barrier
  std::mutex mu_;
  std::vector<cudaEvent_t> free_events_;  // guarded by mu_
};

NcclWork::~NcclWork() {
  if (event_ == nullptr) return;
  // An event still pending must not be reused; wait it out (it ends or the comm is aborted).
  if (!done_) (void)Wait();
  comm_->ReleaseEvent(event_);
}

Status NcclWork::WaitOnDevice() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!done_) {
    // Once the wait is queued the event may be recorded again: the queued wait
    // keeps the record it saw. So the event goes back to the pool untouched.
    status_ = comm_->StreamWaitEvent(what_, event_);
    done_ = true;
  }
  return status_;
}

Status NcclWork::Wait() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!done_) {
    status_ = comm_->WaitEvent(what_, event_);
    done_ = true;
  }
  return status_;
}

}  // namespace

Result<std::unique_ptr<Communicator>> MakeNcclCommunicator(const CommunicatorOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return InvalidArgumentError("nccl: rank " + std::to_string(options.rank) + " is not within world size " +
                                std::to_string(options.world_size));
  }
  if (options.store == nullptr) return InvalidArgumentError("nccl: CommunicatorOptions.store is not set");
  auto comm = std::make_unique<NcclCommunicator>(options);
  HF_RETURN_IF_ERROR(comm->Init());
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace holdfast

#else  // !HOLDFAST_HAVE_NCCL

namespace holdfast {
Result<std::unique_ptr<Communicator>> MakeNcclCommunicator(const CommunicatorOptions&) {
  return FailedPreconditionError(
      "built without NCCL: the CUDA toolkit or NCCL was not found at configure time (or HOLDFAST_WITH_CUDA=OFF); "
      "rebuild on a machine with /usr/local/cuda and libnccl, or use the gloo backend");
}
}  // namespace holdfast

#endif
