#include "scheduler/recording_scheduler.h"

#include <gtest/gtest.h>

namespace holdfast {
namespace {

using std::chrono::milliseconds;

Allocation TwoNodes() {
  Allocation a;
  a.scheduler = SchedulerKind::kSlurm;
  a.job_id = "4242";
  a.restart_count = 1;
  a.nodes = {{"gpu-a1", "10.0.0.1"}, {"gpu-a2", "10.0.0.2"}};
  a.this_node = 0;
  return a;
}

SchedulerCapabilities Slurmish() {
  SchedulerCapabilities c;
  c.requeue = true;
  c.exclude_hosts = true;
  c.drain = true;
  return c;
}

TEST(RecordingSchedulerTest, DiscoversWhatItWasGiven) {
  RecordingScheduler s(TwoNodes(), Slurmish());
  EXPECT_STREQ(s.name(), "recording");
  Result<Allocation> a = s.Discover();
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->job_id, "4242");
  EXPECT_EQ(a->hosts(), (std::vector<std::string>{"gpu-a1", "gpu-a2"}));
  EXPECT_TRUE(a->leader());
  EXPECT_EQ(a->self().addr, "10.0.0.1");
  EXPECT_TRUE(s.capabilities().exclude_hosts);

  s.FailNextDiscover(UnavailableError("slurmctld unreachable"));
  EXPECT_EQ(s.Discover().status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(s.Discover().ok()) << "only the next call fails";
  EXPECT_EQ(s.discover_calls(), 3);
}

TEST(RecordingSchedulerTest, RecordsRequeuesAndDrains) {
  RecordingScheduler s(TwoNodes(), Slurmish());
  ASSERT_TRUE(s.Drain("gpu-a2", "xid 79").ok());
  ASSERT_TRUE(s.Requeue("run-1", {"gpu-a2"}, "node gpu-a2 failed its health check").ok());
  ASSERT_EQ(s.drains().size(), 1u);
  EXPECT_EQ(s.drains()[0].host, "gpu-a2");
  EXPECT_EQ(s.drains()[0].reason, "xid 79");
  ASSERT_EQ(s.requeues().size(), 1u);
  EXPECT_EQ(s.requeues()[0].run_id, "run-1");
  EXPECT_EQ(s.requeues()[0].exclude_hosts, (std::vector<std::string>{"gpu-a2"}));
  EXPECT_EQ(s.requeues()[0].reason, "node gpu-a2 failed its health check");
  EXPECT_TRUE(s.requeues()[0].result.ok());
}

TEST(RecordingSchedulerTest, FailsTheNextCallWhenTold) {
  RecordingScheduler s(TwoNodes(), Slurmish());
  s.FailNextRequeue(UnavailableError("slurm_requeue: Socket timed out"));
  s.FailNextDrain(FailedPreconditionError("slurm_update_node: Access/permission denied"));
  Status r = s.Requeue("run-1", {}, "preempted");
  EXPECT_EQ(r.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.Drain("gpu-a1", "ecc").code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(s.Requeue("run-1", {}, "preempted").ok());
  EXPECT_TRUE(s.Drain("gpu-a1", "ecc").ok());
  ASSERT_EQ(s.requeues().size(), 2u) << "failed calls are recorded too";
  EXPECT_EQ(s.requeues()[0].result.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.drains().size(), 2u);
}

TEST(RecordingSchedulerTest, RefusesWhatItsCapabilitiesLack) {
  SchedulerCapabilities local;
  local.requeue = true;
  RecordingScheduler s(TwoNodes(), local);
  EXPECT_EQ(s.Requeue("run-1", {"gpu-a2"}, "x").code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(s.Requeue("run-1", {}, "x").ok());
  EXPECT_EQ(s.Drain("gpu-a2", "x").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.requeues().size(), 2u);

  RecordingScheduler none(TwoNodes(), SchedulerCapabilities{});
  EXPECT_EQ(none.Requeue("run-1", {}, "x").code(), StatusCode::kFailedPrecondition);
}

TEST(RecordingSchedulerTest, LeaderAddressIsPublishedFoundAndWithdrawn) {
  RecordingScheduler s(TwoNodes(), Slurmish());
  EXPECT_EQ(s.FindLeader(milliseconds(10)).status().code(), StatusCode::kTimeout);
  ASSERT_TRUE(s.PublishLeader("10.0.0.1:29400").ok());
  EXPECT_EQ(s.current_leader(), "10.0.0.1:29400");
  Result<std::string> found = s.FindLeader(milliseconds(10));
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(*found, "10.0.0.1:29400");
  s.WithdrawLeader();
  EXPECT_FALSE(s.current_leader().has_value());
  EXPECT_EQ(s.withdrawals(), 1);
  EXPECT_EQ(s.published(), (std::vector<std::string>{"10.0.0.1:29400"}));

  s.FailNextPublish(IoError("disk full"));
  EXPECT_FALSE(s.PublishLeader("10.0.0.1:29401").ok());
  EXPECT_FALSE(s.current_leader().has_value());

  s.set_leader_address("10.0.0.9:1");
  found = s.FindLeader(milliseconds(10));
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(*found, "10.0.0.9:1");
}

}  // namespace
}  // namespace holdfast
