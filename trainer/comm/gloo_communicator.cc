// GlooCommunicator: collectives over Gloo's TCP transport.
//
// Rendezvous goes through our Store (adapter below) under the "gloo/" prefix;
// the context is a full mesh. Every collective goes through one queue drained
// by one worker thread, so collectives run in issue order on every rank and
// AllreduceAsync returns at once (the trainer overlaps bucket allreduces with
// backward). After a collective fails the context is in an unknown state: the
// communicator stays failed and every later collective returns that error.
//
// Reduce-scatter is our own ring on Gloo's unbound buffers (Gloo's new-style
// API has none). With W ranks it takes W-1 steps; at step s rank r sends part
// (r-s-1) mod W to rank r+1 and adds part (r-s-2) mod W, received from rank
// r-1, into its own copy. Part p therefore starts as rank p+1's values and
// picks up ranks p+2, p+3, ... in turn, ending on its owner p:
//   result[p] = (...((x[p+1] + x[p+2]) + x[p+3]) + ... ) + x[p]   (ranks mod W)
// one fixed order for a given W, so the same inputs give the same bits.
#include "trainer/comm/communicator.h"

#if HOLDFAST_HAVE_GLOO

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "trainer/comm/parts.h"

namespace holdfast {
namespace {

// Slot prefix of our ring reduce-scatter. Gloo's own collectives use 0x01-0x08
// (gloo/types.h); slots also carry the collective's sequence number, so this
// only keeps our sends apart from Gloo's in a reader's trace.
constexpr uint8_t kReduceScatterSlotPrefix = 0x40;
// Point-to-point messages: the slot is the n-th message of the pair's direction.
constexpr uint8_t kSendRecvSlotPrefix = 0x41;

// Carries a Store failure through Gloo's rendezvous code back to GlooError.
struct StoreFailure : std::exception {
  explicit StoreFailure(Status s) : status(std::move(s)) {}
  const char* what() const noexcept override { return status.message().c_str(); }
  Status status;
};

// The one place Gloo's exceptions (and our StoreFailure thrown through Gloo)
// become a Status. Call only from inside a catch block.
Status GlooError(const std::string& context) {
  try {
    throw;
  } catch (const StoreFailure& e) {
    return e.status.WithContext(context);
  } catch (const gloo::IoException& e) {
    std::string msg = e.what();
    // Gloo's TCP transport says "Timed out waiting ..." / "Read timeout" / "Connect timeout".
    bool timeout = msg.find("imeout") != std::string::npos || msg.find("imed out") != std::string::npos;
    if (timeout) return TimeoutError(context + ": a peer did not answer in time: " + msg);
    return UnavailableError(context + ": lost the connection to a peer (did it exit?): " + msg);
  } catch (const gloo::EnforceNotMet& e) {
    return InternalError(context + ": gloo check failed: " + e.what());
  } catch (const gloo::Exception& e) {
    return InternalError(context + ": gloo: " + e.what());
  } catch (const std::exception& e) {
    return InternalError(context + ": " + e.what());
  } catch (...) {
    return InternalError(context + ": unknown exception from gloo");
  }
}

template <typename F>
Status GlooCall(const std::string& context, F&& f) {
  try {
    f();
    return Status::Ok();
  } catch (...) {
    return GlooError(context);
  }
}

// Gloo's rendezvous store, backed by ours. Failures throw StoreFailure.
class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(std::shared_ptr<holdfast::Store> store, std::chrono::milliseconds timeout)
      : store_(std::move(store)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Status s = store_->Set(key, std::vector<uint8_t>(data.begin(), data.end()));
    if (!s.ok()) throw StoreFailure(s);
  }
  std::vector<char> get(const std::string& key) override {
    auto v = store_->Get(key, timeout_);
    if (!v.ok()) throw StoreFailure(v.status().WithContext(WaitingFor({key})));
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    Status s = store_->Wait(keys, timeout);
    if (!s.ok()) throw StoreFailure(s.WithContext(WaitingFor(keys)));
  }

 private:
  // Gloo keys each rank's address by its rank number ("1").
  static std::string WaitingFor(const std::vector<std::string>& keys) {
    std::string ranks;
    for (const std::string& k : keys) {
      if (k.empty() || k.find_first_not_of("0123456789") != std::string::npos) return "waiting for the other ranks";
      ranks += (ranks.empty() ? "" : ", ") + k;
    }
    return "waiting for rank " + ranks + " to publish its address";
  }

  std::shared_ptr<holdfast::Store> store_;
  std::chrono::milliseconds timeout_;
};

void SumFloats(void* c, const void* a, const void* b, size_t n) {
  float* out = static_cast<float*>(c);
  const float* x = static_cast<const float*>(a);
  const float* y = static_cast<const float*>(b);
  if (out == x) {
    float* __restrict o = out;
    const float* __restrict q = y;
    for (size_t i = 0; i < n; ++i) o[i] += q[i];
    return;
  }
  for (size_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
}

void SumDoubles(void* c, const void* a, const void* b, size_t n) {
  double* out = static_cast<double*>(c);
  const double* x = static_cast<const double*>(a);
  const double* y = static_cast<const double*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
}

void ScaleFloats(float* data, size_t count, int world_size) {
  float* __restrict p = data;
  const float scale = 1.0f / static_cast<float>(world_size);
  for (size_t i = 0; i < count; ++i) p[i] *= scale;
}

// State shared between the communicator, its worker thread and its Work handles.
struct Core {
  enum class Kind { kAllreduce, kReduceScatter, kAllgather, kAllreduceDoubles, kBroadcast, kBarrier, kSendRecv };
  struct Op {
    Kind kind = Kind::kBarrier;
    void* data = nullptr;
    // Floats for allreduce, reduce-scatter and allgather (all parts), doubles
    // for AllreduceDoubles, bytes for broadcast.
    size_t count = 0;
    ReduceOp reduce = ReduceOp::kSum;
    int root = 0;
    // send/recv: data and count are the receive's (bytes), these the send's.
    const void* send = nullptr;
    size_t send_bytes = 0;
    int send_to = -1;
    int recv_from = -1;
    std::vector<size_t> counts;  // reduce-scatter and allgather: floats per rank
    Parts parts;                 // reduce-scatter and allgather: where they lie
    uint64_t seq = 0;
  };

  std::mutex mu;
  std::condition_variable work_cv;  // queue gained an op, or stopping
  std::condition_variable done_cv;  // completed advanced
  std::deque<Op> queue;             // guarded by mu
  uint64_t issued = 0;              // guarded by mu; seq of the last op queued (1-based)
  uint64_t completed = 0;           // guarded by mu; every op with seq <= completed is done
  uint64_t failed_seq = std::numeric_limits<uint64_t>::max();  // guarded by mu; first failed op
  Status error;                     // guarded by mu; why failed_seq failed
  bool stopping = false;            // guarded by mu

  uint64_t Enqueue(Op op) {
    std::lock_guard<std::mutex> lock(mu);
    op.seq = ++issued;
    queue.push_back(std::move(op));
    work_cv.notify_one();
    return issued;
  }

  Status WaitFor(uint64_t seq) {
    std::unique_lock<std::mutex> lock(mu);
    done_cv.wait(lock, [&] { return completed >= seq; });
    if (seq < failed_seq) return Status::Ok();
    if (seq == failed_seq) return error;
    return Status(error.code(), "gloo collective #" + std::to_string(seq) + " was not run because collective #" +
                                    std::to_string(failed_seq) + " failed: " + error.message());
  }
};

class GlooWork final : public Work {
 public:
  GlooWork(std::shared_ptr<Core> core, uint64_t seq) : core_(std::move(core)), seq_(seq) {}
  Status Wait() override { return core_->WaitFor(seq_); }

 private:
  std::shared_ptr<Core> core_;
  uint64_t seq_;
};

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(const CommunicatorOptions& options, std::shared_ptr<gloo::Context> context)
      : rank_(options.rank),
        world_size_(options.world_size),
        timeout_(options.timeout),
        context_(std::move(context)),
        core_(std::make_shared<Core>()),
        barrier_options_(context_) {
    barrier_options_.setTimeout(timeout_);
    worker_ = std::thread([this] { WorkerLoop(); });
  }

  // Waits for the collective in flight (it ends by completing or timing out);
  // collectives still queued fail with kFailedPrecondition.
  ~GlooCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(core_->mu);
      core_->stopping = true;
    }
    core_->work_cv.notify_one();
    worker_.join();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  const char* backend() const override { return "gloo"; }

  std::unique_ptr<Work> AllreduceAsync(float* data, size_t count, ReduceOp op) override {
    Core::Op o;
    o.kind = Core::Kind::kAllreduce;
    o.data = data;
    o.count = count;
    o.reduce = op;
    return std::make_unique<GlooWork>(core_, core_->Enqueue(std::move(o)));
  }

  std::unique_ptr<Work> ReduceScatterAsync(float* data, const std::vector<size_t>& counts, ReduceOp op) override {
    return EnqueueParts(Core::Kind::kReduceScatter, "reduce-scatter", data, counts, op);
  }

  std::unique_ptr<Work> AllgatherAsync(float* data, const std::vector<size_t>& counts) override {
    return EnqueueParts(Core::Kind::kAllgather, "allgather", data, counts, ReduceOp::kSum);
  }

  Status AllreduceDoubles(double* data, size_t count, ReduceOp op) override {
    if (data == nullptr && count > 0) return InvalidArgumentError("gloo allreduce of doubles: data is null");
    Core::Op o;
    o.kind = Core::Kind::kAllreduceDoubles;
    o.data = data;
    o.count = count;
    o.reduce = op;
    return core_->WaitFor(core_->Enqueue(std::move(o)));
  }

  Status Broadcast(void* data, size_t bytes, int root) override {
    if (root < 0 || root >= world_size_) {
      return InvalidArgumentError("gloo broadcast: root " + std::to_string(root) + " is not a rank of world " +
                                  std::to_string(world_size_));
    }
    Core::Op o;
    o.kind = Core::Kind::kBroadcast;
    o.data = data;
    o.count = bytes;
    o.root = root;
    return core_->WaitFor(core_->Enqueue(std::move(o)));
  }

  Status Barrier() override {
    Core::Op o;
    o.kind = Core::Kind::kBarrier;
    return core_->WaitFor(core_->Enqueue(std::move(o)));
  }

  std::unique_ptr<Work> SendRecvAsync(const void* send, size_t send_bytes, int send_to, void* recv, size_t recv_bytes,
                                      int recv_from) override {
    Status ok = CheckSendRecv("gloo send/recv", rank_, world_size_, send, send_bytes, send_to, recv, recv_bytes,
                              recv_from);
    if (!ok.ok()) return std::make_unique<DoneWork>(ok);  // refused before it is queued
    Core::Op o;
    o.kind = Core::Kind::kSendRecv;
    o.send = send;
    o.send_bytes = send_bytes;
    o.send_to = send_to;
    o.data = recv;
    o.count = recv_bytes;
    o.recv_from = recv_from;
    return std::make_unique<GlooWork>(core_, core_->Enqueue(std::move(o)));
  }

 private:
  void WorkerLoop() {
    for (;;) {
      Core::Op op;
      bool skip;
      {
        std::unique_lock<std::mutex> lock(core_->mu);
        core_->work_cv.wait(lock, [&] { return core_->stopping || !core_->queue.empty(); });
        if (core_->queue.empty()) return;  // stopping with nothing left
        op = std::move(core_->queue.front());
        core_->queue.pop_front();
        skip = core_->stopping || core_->failed_seq != std::numeric_limits<uint64_t>::max();
      }
      Status status;
      if (!skip) {
        status = Run(op);
      } else {
        std::lock_guard<std::mutex> lock(core_->mu);
        if (core_->failed_seq == std::numeric_limits<uint64_t>::max()) {
          status = FailedPreconditionError("gloo collective #" + std::to_string(op.seq) +
                                           " was not run: the communicator was destroyed first");
        }
      }
      {
        std::lock_guard<std::mutex> lock(core_->mu);
        if (!status.ok() && core_->failed_seq == std::numeric_limits<uint64_t>::max()) {
          core_->failed_seq = op.seq;
          core_->error = status;
        }
        core_->completed = op.seq;
      }
      core_->done_cv.notify_all();
    }
  }

  // Runs on the worker thread.
  Status Run(const Core::Op& op) {
    // Collectives are tagged by their count, not by op.seq: ranks that send
    // and receive different numbers of point-to-point messages (a pipeline's
    // first and last stages) still agree on every collective's tag.
    const uint32_t tag = op.kind == Core::Kind::kSendRecv ? 0 : ++collectives_;
    switch (op.kind) {
      case Core::Kind::kAllreduce: {
        if (op.count == 0 || world_size_ == 1) return Status::Ok();
        gloo::AllreduceOptions& opts = AllreduceOptionsFor(static_cast<float*>(op.data), op.count);
        opts.setTag(tag);
        HF_RETURN_IF_ERROR(GlooCall(Describe("allreduce", op), [&] { gloo::allreduce(opts); }));
        if (op.reduce == ReduceOp::kAvg) ScaleFloats(static_cast<float*>(op.data), op.count, world_size_);
        return Status::Ok();
      }
      case Core::Kind::kReduceScatter: {
        // Every rank holds the same counts, so every rank skips together.
        if (op.count == 0 || world_size_ == 1) return Status::Ok();
        float* data = static_cast<float*>(op.data);
        HF_RETURN_IF_ERROR(GlooCall(Describe("reduce-scatter", op), [&] { RingReduceScatter(data, op, tag); }));
        if (op.reduce == ReduceOp::kAvg) ScaleFloats(data + op.parts.offsets[rank_], op.counts[rank_], world_size_);
        return Status::Ok();
      }
      case Core::Kind::kAllgather: {
        if (op.count == 0 || world_size_ == 1) return Status::Ok();
        return GlooCall(Describe("allgather", op), [&] {
          // No input buffer: allgatherv then works in place on the output,
          // sending this rank's part from where it already lies.
          gloo::AllgathervOptions opts(context_);
          opts.setOutput(static_cast<float*>(op.data), op.counts);
          opts.setTag(tag);
          opts.setTimeout(timeout_);
          gloo::allgatherv(opts);
        });
      }
      case Core::Kind::kAllreduceDoubles: {
        if (op.count == 0 || world_size_ == 1) return Status::Ok();
        double* data = static_cast<double*>(op.data);
        HF_RETURN_IF_ERROR(GlooCall(Describe("allreduce of doubles", op), [&] {
          gloo::AllreduceOptions opts(context_);
          opts.setOutput(data, op.count);
          opts.setReduceFunction(&SumDoubles);
          opts.setTag(tag);
          opts.setTimeout(timeout_);
          gloo::allreduce(opts);
        }));
        if (op.reduce == ReduceOp::kAvg) {
          for (size_t i = 0; i < op.count; ++i) data[i] /= static_cast<double>(world_size_);
        }
        return Status::Ok();
      }
      case Core::Kind::kBroadcast: {
        if (op.count == 0 || world_size_ == 1) return Status::Ok();
        return GlooCall(Describe("broadcast", op), [&] {
          gloo::BroadcastOptions opts(context_);
          opts.setOutput(static_cast<uint8_t*>(op.data), op.count);
          opts.setRoot(op.root);
          opts.setTag(tag);
          opts.setTimeout(timeout_);
          gloo::broadcast(opts);
        });
      }
      case Core::Kind::kBarrier: {
        if (world_size_ == 1) return Status::Ok();
        barrier_options_.setTag(tag);
        return GlooCall(Describe("barrier", op), [&] { gloo::barrier(barrier_options_); });
      }
      case Core::Kind::kSendRecv:
        return GlooCall(Describe("send/recv", op), [&] { SendRecv(op); });
    }
    return InternalError("unknown collective kind");
  }

  // Ring reduce-scatter (see the top of this file for the order of the sums).
  // Throws Gloo's exceptions: a peer gone (the pair reports it at once) or one
  // that does not answer within timeout_ (per send/receive, as Gloo's own
  // collectives count it) ends it. Zero-length parts are neither sent nor
  // received; both ends of a pair skip the same steps because every rank
  // holds the same counts, so the remaining sends and receives on the slot
  // pair up in order.
  void RingReduceScatter(float* data, const Core::Op& op, uint32_t tag) {
    const int w = world_size_;
    const int next = (rank_ + 1) % w;
    const int prev = (rank_ + w - 1) % w;
    const gloo::Slot slot = gloo::Slot::build(kReduceScatterSlotPrefix, tag);
    if (scratch_.size() < op.parts.largest) scratch_.resize(op.parts.largest);
    std::unique_ptr<gloo::transport::UnboundBuffer> out =
        context_->createUnboundBuffer(data, op.count * sizeof(float));
    std::unique_ptr<gloo::transport::UnboundBuffer> in =
        context_->createUnboundBuffer(scratch_.data(), op.parts.largest * sizeof(float));
    for (int step = 0; step < w - 1; ++step) {
      const int send_part = (rank_ + 2 * w - step - 1) % w;
      const int recv_part = (rank_ + 2 * w - step - 2) % w;
      const size_t send_count = op.counts[send_part];
      const size_t recv_count = op.counts[recv_part];
      if (send_count > 0) {
        out->send(next, slot, op.parts.offsets[send_part] * sizeof(float), send_count * sizeof(float));
      }
      if (recv_count > 0) {
        in->recv(prev, slot, 0, recv_count * sizeof(float));
        if (!in->waitRecv(timeout_)) throw std::runtime_error("receive from rank " + std::to_string(prev) + " aborted");
        float* own = data + op.parts.offsets[recv_part];
        SumFloats(own, own, scratch_.data(), recv_count);
      }
      // The next step sends the part just summed: this send must be done
      // with its bytes first (and the buffer allows one send in flight).
      if (send_count > 0 && !out->waitSend(timeout_)) {
        throw std::runtime_error("send to rank " + std::to_string(next) + " aborted");
      }
    }
  }

  // Posts the send, then receives, then waits for the send: neither side of
  // a pair that exchanges both ways waits for the other to receive first.
  // Zero-byte messages travel too (they keep the pair's message count).
  void SendRecv(const Core::Op& op) {
    std::unique_ptr<gloo::transport::UnboundBuffer> out;
    if (op.send_to >= 0) {
      out = context_->createUnboundBuffer(const_cast<void*>(op.send), op.send_bytes);
      out->send(op.send_to, gloo::Slot::build(kSendRecvSlotPrefix, sent_[op.send_to]++));
    }
    if (op.recv_from >= 0) {
      std::unique_ptr<gloo::transport::UnboundBuffer> in = context_->createUnboundBuffer(op.data, op.count);
      in->recv(op.recv_from, gloo::Slot::build(kSendRecvSlotPrefix, received_[op.recv_from]++));
      if (!in->waitRecv(timeout_)) {
        throw std::runtime_error("receive from rank " + std::to_string(op.recv_from) + " aborted");
      }
    }
    if (out != nullptr && !out->waitSend(timeout_)) {
      throw std::runtime_error("send to rank " + std::to_string(op.send_to) + " aborted");
    }
  }

  std::unique_ptr<Work> EnqueueParts(Core::Kind kind, const char* what, float* data,
                                     const std::vector<size_t>& counts, ReduceOp op) {
    Result<Parts> parts = LayOutParts(std::string("gloo ") + what + " (rank " + std::to_string(rank_) + " of " +
                                          std::to_string(world_size_) + ")",
                                      data, counts, world_size_);
    // Refused before it is queued: the communicator stays usable.
    if (!parts.ok()) return std::make_unique<DoneWork>(parts.status());
    Core::Op o;
    o.kind = kind;
    o.data = data;
    o.count = parts->total;
    o.reduce = op;
    o.counts = counts;
    o.parts = std::move(parts).value();
    return std::make_unique<GlooWork>(core_, core_->Enqueue(std::move(o)));
  }

  std::string Describe(const char* what, const Core::Op& op) const {
    const char* unit = " bytes";
    switch (op.kind) {
      case Core::Kind::kAllreduce:
      case Core::Kind::kReduceScatter:
      case Core::Kind::kAllgather:
        unit = " floats";
        break;
      case Core::Kind::kAllreduceDoubles:
        unit = " doubles";
        break;
      case Core::Kind::kBroadcast:
      case Core::Kind::kBarrier:
        break;
      case Core::Kind::kSendRecv:
        return std::string("gloo ") + what + " #" + std::to_string(op.seq) + " (rank " + std::to_string(rank_) +
               " of " + std::to_string(world_size_) +
               (op.send_to >= 0 ? ", " + std::to_string(op.send_bytes) + " bytes to rank " + std::to_string(op.send_to)
                                : std::string()) +
               (op.recv_from >= 0 ? ", " + std::to_string(op.count) + " bytes from rank " + std::to_string(op.recv_from)
                                  : std::string()) +
               ")";
    }
    std::string own;
    if (!op.counts.empty()) own = ", " + std::to_string(op.counts[rank_]) + " its own";
    return std::string("gloo ") + what + " #" + std::to_string(op.seq) + " (rank " + std::to_string(rank_) + " of " +
           std::to_string(world_size_) + ", " + std::to_string(op.count) + unit + own + ")";
  }

  // The trainer allreduces the same few bucket slices every step: keep their
  // options (and the unbound buffers Gloo builds for them) instead of
  // rebuilding them per call. Bounded so a caller with ever-new pointers
  // cannot grow it without limit.
  gloo::AllreduceOptions& AllreduceOptionsFor(float* data, size_t count) {
    constexpr size_t kMaxCached = 256;
    BufferKey key{data, count};
    auto it = allreduce_options_.find(key);
    if (it != allreduce_options_.end()) return *it->second;
    if (allreduce_options_.size() >= kMaxCached) allreduce_options_.clear();
    auto opts = std::make_unique<gloo::AllreduceOptions>(context_);
    opts->setOutput(data, count);
    opts->setReduceFunction(&SumFloats);
    opts->setTimeout(timeout_);
    return *(allreduce_options_[key] = std::move(opts));
  }

  struct BufferKey {
    float* data;
    size_t count;
    bool operator==(const BufferKey& o) const { return data == o.data && count == o.count; }
  };
  struct BufferKeyHash {
    size_t operator()(const BufferKey& k) const {
      return std::hash<const void*>()(k.data) ^ (std::hash<size_t>()(k.count) * 0x9e3779b97f4a7c15ull);
    }
  };

  const int rank_;
  const int world_size_;
  const std::chrono::milliseconds timeout_;
  std::shared_ptr<gloo::Context> context_;  // used only by the worker thread after construction
  std::shared_ptr<Core> core_;
  // Worker-thread only:
  std::unordered_map<BufferKey, std::unique_ptr<gloo::AllreduceOptions>, BufferKeyHash> allreduce_options_;
  gloo::BarrierOptions barrier_options_;
  std::vector<float> scratch_;  // reduce-scatter's receive buffer; grows to the largest part seen
  uint32_t collectives_ = 0;                    // collectives run so far: the next one's tag
  std::unordered_map<int, uint32_t> sent_;      // messages sent to each peer so far
  std::unordered_map<int, uint32_t> received_;  // messages received from each peer so far
  std::thread worker_;  // last: started after everything it uses
};

}  // namespace

Result<std::unique_ptr<Communicator>> MakeGlooCommunicator(const CommunicatorOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return InvalidArgumentError("gloo: rank " + std::to_string(options.rank) + " is not within world size " +
                                std::to_string(options.world_size));
  }
  if (options.store == nullptr) return InvalidArgumentError("gloo: CommunicatorOptions.store is not set");
  if (options.timeout.count() <= 0) {
    return InvalidArgumentError("gloo: timeout must be positive, got " + std::to_string(options.timeout.count()) +
                                " ms");
  }
  const std::string where = "gloo rendezvous of rank " + std::to_string(options.rank) + " of " +
                            std::to_string(options.world_size) + " on " + options.interface_host;
  std::shared_ptr<gloo::rendezvous::Context> context;
  Status s = GlooCall(where, [&] {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.interface_host;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.world_size);
    context->setTimeout(options.timeout);
    // Waits (up to the timeout) for every rank to publish its address under gloo/rank_<r>.
    GlooStoreAdapter store(std::make_shared<PrefixStore>("gloo", options.store), options.timeout);
    context->connectFullMesh(store, device);
  });
  if (!s.ok()) return s;
  return std::unique_ptr<Communicator>(std::make_unique<GlooCommunicator>(options, std::move(context)));
}

}  // namespace holdfast

#else  // !HOLDFAST_HAVE_GLOO

namespace holdfast {
Result<std::unique_ptr<Communicator>> MakeGlooCommunicator(const CommunicatorOptions&) {
  return FailedPreconditionError("built without Gloo: install libgloo-dev and reconfigure");
}
}  // namespace holdfast

#endif
