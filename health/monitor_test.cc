#include "health/monitor.h"

#include <gtest/gtest.h>

#include <fstream>

#include "health/policy.h"
#include "health/testing/sysfs_fixture.h"

namespace holdfast::health {
namespace {

using testing::SysfsFixture;
using Clock = std::chrono::steady_clock;

const std::string kTestdata = HOLDFAST_HEALTH_TESTDATA;

// A disk whose free space the test sets: "the checkpoint disk filling".
class SettableDisk : public DiskProbe {
 public:
  uint64_t available = 500ULL << 30;
  Result<FsSpace> Space(const std::string&) override { return FsSpace{1ULL << 40, available}; }
  std::chrono::nanoseconds Now() override { return std::chrono::nanoseconds(0); }
};

const CheckResult* Find(const std::vector<CheckResult>& r, const std::string& name, const std::string& subject = "") {
  for (const CheckResult& c : r) {
    if (c.name == name && (subject.empty() || c.subject == subject)) return &c;
  }
  return nullptr;
}

struct MonitorTest : ::testing::Test {
  MonitorTest() : fx(kTestdata, "healthy") {
    paths.sysfs_root = fx.root();
    paths.kernel_log = fx.root() + "/kmsg";
    std::ofstream(paths.kernel_log) << "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n";
    config.checkpoint_dir = "/ckpt";
    config.checkpoint_min_free_gb = 10;
  }
  SysfsFixture fx;
  HostPaths paths;
  HealthConfig config;
  SettableDisk disk;
  Clock::time_point t0 = Clock::time_point() + std::chrono::hours(1);
};

TEST_F(MonitorTest, HealthyNodeReportsOnceThenStaysQuiet) {
  HealthMonitor m(config, paths, &disk);
  auto first = m.Poll(t0);
  EXPECT_EQ(WorstStatus(first.results), CheckStatus::kPass);
  EXPECT_EQ(first.changed.size(), first.results.size());
  // The Xid already in the log was there before the run: the monitor starts after it.
  EXPECT_EQ(Find(first.results, "gpu.xid"), nullptr);
  auto second = m.Poll(t0 + std::chrono::seconds(5));
  EXPECT_EQ(WorstStatus(second.results), CheckStatus::kPass);
  ASSERT_NE(Find(second.results, "ib.counters", "mlx5_0/1"), nullptr);
  auto third = m.Poll(t0 + std::chrono::seconds(10));
  EXPECT_TRUE(third.changed.empty());
}

TEST_F(MonitorTest, PortGoingDownMidRunIsAFailureThePolicyActsOn) {
  HealthMonitor m(config, paths, &disk);
  m.Poll(t0);
  fx.SetPortState("mlx5_1", 1, "1: DOWN", "2: Polling");
  fx.AddToCounter("mlx5_1", 1, "link_downed", 1);
  auto r = m.Poll(t0 + std::chrono::seconds(5));
  const CheckResult* down = Find(r.changed, "ib.port_state", "mlx5_1/1");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->status, CheckStatus::kFail);
  ASSERT_NE(Find(r.changed, "ib.link_downed", "mlx5_1/1"), nullptr);
  EXPECT_EQ(Find(r.changed, "ib.link_downed", "mlx5_1/1")->evidence.measured, "+1 in 5 s");
  const Decision d = Decide(r.changed, config.policy);
  EXPECT_EQ(d.action, Action::kExcludeNode);
  EXPECT_NE(d.reason.find("mlx5_1/1"), std::string::npos) << d.reason;

  // Still down: no new transition to record.
  auto again = m.Poll(t0 + std::chrono::seconds(10));
  EXPECT_EQ(Find(again.changed, "ib.port_state", "mlx5_1/1"), nullptr);
  EXPECT_EQ(Find(again.results, "ib.port_state", "mlx5_1/1")->status, CheckStatus::kFail);
  // Back up: the recovery is a transition too.
  fx.SetPortState("mlx5_1", 1, "4: ACTIVE", "5: LinkUp");
  auto up = m.Poll(t0 + std::chrono::seconds(15));
  ASSERT_NE(Find(up.changed, "ib.port_state", "mlx5_1/1"), nullptr);
  EXPECT_EQ(Find(up.changed, "ib.port_state", "mlx5_1/1")->status, CheckStatus::kPass);
}

TEST_F(MonitorTest, CheckpointDiskFillingFails) {
  HealthMonitor m(config, paths, &disk);
  EXPECT_EQ(Find(m.Poll(t0).results, "host.checkpoint_space")->status, CheckStatus::kPass);
  disk.available = 2ULL << 30;
  auto r = m.Poll(t0 + std::chrono::seconds(5));
  const CheckResult* full = Find(r.changed, "host.checkpoint_space");
  ASSERT_NE(full, nullptr);
  EXPECT_EQ(full->status, CheckStatus::kFail);
  EXPECT_EQ(full->subject, "/ckpt");
  EXPECT_EQ(full->evidence.measured, "2 GB free of 1024 GB");
  EXPECT_EQ(full->evidence.threshold, ">= 10 GB free");
  EXPECT_EQ(Decide(r.changed, config.policy).action, Action::kExcludeNode);
}

TEST_F(MonitorTest, NewXidDuringTheRunIsReported) {
  HealthMonitor m(config, paths, &disk);
  m.Poll(t0);
  std::ofstream(paths.kernel_log, std::ios::app)
      << "NVRM: Xid (PCI:0000:5e:00): 95, pid=77, Uncontained: FBHUB. RST: Yes, D-RST: No\n";
  auto r = m.Poll(t0 + std::chrono::seconds(5));
  const CheckResult* xid = Find(r.changed, "gpu.xid");
  ASSERT_NE(xid, nullptr);
  EXPECT_EQ(xid->status, CheckStatus::kFail);
  EXPECT_EQ(xid->subject, "pci 0000:5e:00");
  EXPECT_EQ(xid->action, Action::kDrainNode);
}

TEST_F(MonitorTest, UnreadableKernelLogIsSkippedNotPassed) {
  paths.kernel_log = fx.root() + "/no-such-kmsg";
  HealthMonitor m(config, paths, &disk);
  const auto poll = m.Poll(t0);
  const CheckResult* xid = Find(poll.results, "gpu.xid");
  ASSERT_NE(xid, nullptr);
  EXPECT_EQ(xid->status, CheckStatus::kSkipped);
}

}  // namespace
}  // namespace holdfast::health
