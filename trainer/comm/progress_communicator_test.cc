// ProgressCommunicator: what each collective writes into the progress record,
// call by call, against a fake communicator whose collectives succeed or fail
// as told and a sink that logs what it is told.
#include "trainer/comm/progress_communicator.h"

#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace holdfast {
namespace {

// Logs every call: "issue 1 allreduce 12", "wait 1 allreduce", "done 1", ...
class LoggingProgressSink final : public ProgressSink {
 public:
  std::vector<std::string> log;

  void SetPhase(Phase phase) override { log.push_back(std::string("phase ") + PhaseName(phase)); }
  void BeginStep() override { log.push_back("begin step"); }
  void EndStep(int64_t completed) override { log.push_back("end step " + std::to_string(completed)); }
  uint64_t IssueCollective(CollectiveKind kind, uint64_t bytes, const CollectiveLabel& label) override {
    ++issued_;
    labels.push_back(label);
    log.push_back("issue " + std::to_string(issued_) + " " + CollectiveKindName(kind) + " " + std::to_string(bytes));
    return issued_;
  }
  void SetMesh(int, int, int) override {}
  std::vector<CollectiveLabel> labels;  // of every issue, in order
  void WaitCollective(uint64_t seq, CollectiveKind kind) override {
    log.push_back("wait " + std::to_string(seq) + " " + CollectiveKindName(kind));
  }
  void CollectiveDone(uint64_t seq) override { log.push_back("done " + std::to_string(seq)); }
  void SetCheckpointStep(int64_t) override {}
  void RecordCheckpointFailure(int64_t, const std::string&) override {}
  void SetRestored(int64_t, RestoreTier, uint32_t) override {}

  std::vector<std::string> Take() { return std::exchange(log, {}); }

 private:
  uint64_t issued_ = 0;
};

// Two ranks' worth of a communicator, run by nobody: every collective returns
// `next_status` (and logs what the inner communicator was asked, into the sink's
// log, so the order of records and calls shows).
class FakeCommunicator final : public Communicator {
 public:
  explicit FakeCommunicator(std::vector<std::string>* log) : log_(log) {}
  Status next_status;

  int rank() const override { return 1; }
  int world_size() const override { return 2; }
  const char* backend() const override { return "fake"; }
  std::unique_ptr<Work> AllreduceAsync(float*, size_t count, ReduceOp) override {
    return Queued("allreduce " + std::to_string(count));
  }
  std::unique_ptr<Work> ReduceScatterAsync(float*, const std::vector<size_t>& counts, ReduceOp) override {
    return Queued("reduce-scatter of " + std::to_string(counts.size()) + " parts");
  }
  std::unique_ptr<Work> AllgatherAsync(float*, const std::vector<size_t>& counts) override {
    return Queued("allgather of " + std::to_string(counts.size()) + " parts");
  }
  Status AllreduceDoubles(double*, size_t count, ReduceOp) override {
    log_->push_back("run allreduce doubles " + std::to_string(count));
    return next_status;
  }
  Status Broadcast(void*, size_t bytes, int root) override {
    log_->push_back("run broadcast " + std::to_string(bytes) + " from " + std::to_string(root));
    return next_status;
  }
  Status Barrier() override {
    log_->push_back("run barrier");
    return next_status;
  }
  std::unique_ptr<Work> SendRecvAsync(const void*, size_t send_bytes, int send_to, void*, size_t recv_bytes,
                                      int recv_from) override {
    return Queued("send/recv " + std::to_string(send_bytes) + " to " + std::to_string(send_to) + ", " +
                  std::to_string(recv_bytes) + " from " + std::to_string(recv_from));
  }

 private:
  class FakeWork final : public Work {
   public:
    FakeWork(std::vector<std::string>* log, std::string what, Status status)
        : log_(log), what_(std::move(what)), status_(std::move(status)) {}
    Status Wait() override {
      log_->push_back("host waits for " + what_);
      return status_;
    }
    Status WaitOnDevice() override {
      log_->push_back("device waits for " + what_);
      return status_;
    }

   private:
    std::vector<std::string>* log_;
    std::string what_;
    Status status_;
  };

  std::unique_ptr<Work> Queued(const std::string& what) {
    log_->push_back("queue " + what);
    return std::make_unique<FakeWork>(log_, what, next_status);
  }

  std::vector<std::string>* log_;
};

class ProgressCommunicatorTest : public ::testing::Test {
 protected:
  ProgressCommunicatorTest() {
    auto fake = std::make_unique<FakeCommunicator>(&sink_.log);
    fake_ = fake.get();
    comm_ = std::make_unique<ProgressCommunicator>(std::move(fake), sink_);
  }

  LoggingProgressSink sink_;
  FakeCommunicator* fake_;  // owned by comm_
  std::unique_ptr<ProgressCommunicator> comm_;
  float grads_[8] = {};
  double totals_[4] = {};
};

TEST_F(ProgressCommunicatorTest, AHostWaitIsRecordedAsAWaitThenDone) {
  auto work = comm_->AllreduceAsync(grads_, 8, ReduceOp::kAvg);
  EXPECT_TRUE(work->Wait().ok());
  EXPECT_EQ(sink_.Take(), (std::vector<std::string>{"issue 1 allreduce 32", "queue allreduce 8", "wait 1 allreduce",
                                                    "host waits for allreduce 8", "done 1"}));
  // The blocking convenience goes through the same path.
  EXPECT_TRUE(comm_->Allreduce(grads_, 3, ReduceOp::kAvg).ok());
  EXPECT_EQ(sink_.Take(), (std::vector<std::string>{"issue 2 allreduce 12", "queue allreduce 3", "wait 2 allreduce",
                                                    "host waits for allreduce 3", "done 2"}));
}

TEST_F(ProgressCommunicatorTest, ReduceScatterAndAllgatherRecordTheWholeBuffer) {
  const std::vector<size_t> parts = {3, 5};
  EXPECT_TRUE(comm_->ReduceScatterAsync(grads_, parts, ReduceOp::kAvg)->Wait().ok());
  EXPECT_TRUE(comm_->AllgatherAsync(grads_, parts)->Wait().ok());
  EXPECT_EQ(sink_.Take(), (std::vector<std::string>{"issue 1 reduce_scatter 32", "queue reduce-scatter of 2 parts",
                                                    "wait 1 reduce_scatter", "host waits for reduce-scatter of 2 parts",
                                                    "done 1", "issue 2 allgather 32", "queue allgather of 2 parts",
                                                    "wait 2 allgather", "host waits for allgather of 2 parts",
                                                    "done 2"}));
}

TEST_F(ProgressCommunicatorTest, BlockingCollectivesRecordIssueWaitAndDone) {
  EXPECT_TRUE(comm_->AllreduceDoubles(totals_, 4, ReduceOp::kSum).ok());
  EXPECT_TRUE(comm_->Broadcast(grads_, 20, 0).ok());
  EXPECT_TRUE(comm_->Barrier().ok());
  EXPECT_EQ(sink_.Take(),
            (std::vector<std::string>{"issue 1 allreduce 32", "wait 1 allreduce", "run allreduce doubles 4", "done 1",
                                      "issue 2 broadcast 20", "wait 2 broadcast", "run broadcast 20 from 0", "done 2",
                                      "issue 3 barrier 0", "wait 3 barrier", "run barrier", "done 3"}));
}

// Point-to-point messages are one send/recv in the record (bytes both ways),
// waited for and done like a collective.
TEST_F(ProgressCommunicatorTest, SendRecvIsRecordedAsOneExchange) {
  EXPECT_TRUE(comm_->SendRecvAsync(grads_, 16, 1, totals_, 32, 1)->Wait().ok());
  EXPECT_EQ(sink_.Take(), (std::vector<std::string>{"issue 1 send/recv 48", "queue send/recv 16 to 1, 32 from 1",
                                                    "wait 1 send/recv", "host waits for send/recv 16 to 1, 32 from 1",
                                                    "done 1"}));
}

// The group's collectives carry its kind; a send/recv its peers as global
// ranks (the group's rank 1 is world rank 5) and what travels, a side left
// out (-1) with nothing.
TEST(ProgressCommunicatorLabelTest, CollectivesCarryTheGroupAndMessagesTheirPeersAndContents) {
  LoggingProgressSink sink;
  std::vector<std::string> calls;
  ProgressCommunicator comm(std::make_unique<FakeCommunicator>(&calls), sink,
                            RecordedGroup{CollectiveGroup::kPipeline, {1, 5}});
  float x[4] = {};
  MessageLabel msg{MessageKind::kGradients, MessageKind::kActivations, 2, 3};
  EXPECT_TRUE(comm.SendRecvLabelled(x, 8, 1, x + 2, 8, 1, msg)->Wait().ok());
  EXPECT_TRUE(comm.SendRecvLabelled(nullptr, 0, -1, x, 8, 1, msg)->Wait().ok());
  EXPECT_TRUE(comm.AllreduceDoubles(nullptr, 0, ReduceOp::kSum).ok());
  ASSERT_EQ(sink.labels.size(), 3u);
  const CollectiveLabel& both = sink.labels[0];
  EXPECT_EQ(both.group, CollectiveGroup::kPipeline);
  EXPECT_EQ(both.send_to, 5);
  EXPECT_EQ(both.recv_from, 5);
  EXPECT_EQ(both.send_what, MessageKind::kGradients);
  EXPECT_EQ(both.send_micro, 2);
  EXPECT_EQ(both.recv_what, MessageKind::kActivations);
  EXPECT_EQ(both.recv_micro, 3);
  const CollectiveLabel& recv_only = sink.labels[1];
  EXPECT_EQ(recv_only.send_to, -1);
  EXPECT_EQ(recv_only.send_what, MessageKind::kNone);
  EXPECT_EQ(recv_only.send_micro, -1);
  EXPECT_EQ(recv_only.recv_from, 5);
  EXPECT_EQ(sink.labels[2].group, CollectiveGroup::kPipeline);
  EXPECT_EQ(sink.labels[2].send_to, -1);
}

// The GPU gradient path: buckets are waited on by the device queue only; the
// loss allreduce behind them is where the host learns they are done.
TEST_F(ProgressCommunicatorTest, ADeviceWaitIsRecordedDoneWhenTheNextHostWaitCompletes) {
  auto a = comm_->ReduceScatterAsync(grads_, {4, 4}, ReduceOp::kAvg);
  auto b = comm_->AllreduceAsync(grads_, 2, ReduceOp::kAvg);
  EXPECT_TRUE(a->WaitOnDevice().ok());
  EXPECT_TRUE(b->WaitOnDevice().ok());
  EXPECT_EQ(sink_.Take(), (std::vector<std::string>{"issue 1 reduce_scatter 32", "queue reduce-scatter of 2 parts",
                                                    "issue 2 allreduce 8", "queue allreduce 2",
                                                    "device waits for reduce-scatter of 2 parts",
                                                    "device waits for allreduce 2"}));
  EXPECT_TRUE(comm_->AllreduceDoubles(totals_, 4, ReduceOp::kSum).ok());
  EXPECT_EQ(sink_.Take(), (std::vector<std::string>{"issue 3 allreduce 32", "wait 3 allreduce",
                                                    "run allreduce doubles 4", "done 1", "done 2", "done 3"}));
  // Recorded once: the next host wait has nothing earlier to confirm.
  EXPECT_TRUE(comm_->Allreduce(grads_, 3, ReduceOp::kAvg).ok());
  EXPECT_EQ(sink_.Take(), (std::vector<std::string>{"issue 4 allreduce 12", "queue allreduce 3", "wait 4 allreduce",
                                                    "host waits for allreduce 3", "done 4"}));
}

// ZeRO-1's parameter allgathers end the step: queued on the device, they count as done.
TEST_F(ProgressCommunicatorTest, AnAllgatherWaitedOnByTheDeviceIsDoneAtOnce) {
  auto g = comm_->AllgatherAsync(grads_, {4, 4});
  EXPECT_TRUE(g->WaitOnDevice().ok());
  EXPECT_EQ(sink_.Take(), (std::vector<std::string>{"issue 1 allgather 32", "queue allgather of 2 parts",
                                                    "wait 1 allgather", "device waits for allgather of 2 parts",
                                                    "done 1"}));
}

TEST_F(ProgressCommunicatorTest, AFailedCollectiveIsNeverRecordedDone) {
  fake_->next_status = UnavailableError("peer gone");
  auto bucket = comm_->AllreduceAsync(grads_, 8, ReduceOp::kAvg);
  EXPECT_FALSE(bucket->WaitOnDevice().ok());
  EXPECT_FALSE(comm_->AllreduceAsync(grads_, 8, ReduceOp::kAvg)->Wait().ok());
  EXPECT_FALSE(comm_->AllreduceDoubles(totals_, 4, ReduceOp::kSum).ok());
  EXPECT_FALSE(comm_->AllgatherAsync(grads_, {4, 4})->WaitOnDevice().ok());
  for (const std::string& line : sink_.Take()) EXPECT_EQ(line.rfind("done", 0), std::string::npos) << line;
  // A failed device wait leaves nothing for a later host wait to confirm.
  fake_->next_status = Status::Ok();
  EXPECT_TRUE(comm_->AllreduceDoubles(totals_, 1, ReduceOp::kSum).ok());
  EXPECT_EQ(sink_.Take(), (std::vector<std::string>{"issue 5 allreduce 8", "wait 5 allreduce",
                                                    "run allreduce doubles 1", "done 5"}));
}

TEST_F(ProgressCommunicatorTest, UnrecordedCollectivesAndTheInnerIdentity) {
  EXPECT_EQ(comm_->rank(), 1);
  EXPECT_EQ(comm_->world_size(), 2);
  EXPECT_STREQ(comm_->backend(), "fake");
  EXPECT_TRUE(comm_->unrecorded()->Broadcast(grads_, 4, 0).ok());
  EXPECT_EQ(sink_.Take(), (std::vector<std::string>{"run broadcast 4 from 0"}));
}

TEST_F(ProgressCommunicatorTest, ANewSinkTakesTheLaterCollectives) {
  LoggingProgressSink other;
  comm_->SetProgressSink(other);
  EXPECT_TRUE(comm_->Barrier().ok());
  EXPECT_EQ(other.Take(), (std::vector<std::string>{"issue 1 barrier 0", "wait 1 barrier", "done 1"}));
  EXPECT_EQ(sink_.Take(), (std::vector<std::string>{"run barrier"}));
  comm_->SetProgressSink(NoProgress());
  EXPECT_TRUE(comm_->Barrier().ok());
}

}  // namespace
}  // namespace holdfast
