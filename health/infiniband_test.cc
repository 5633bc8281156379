#include "health/infiniband.h"

#include <gtest/gtest.h>

#include <fstream>

#include "health/testing/sysfs_fixture.h"

namespace holdfast::health {
namespace {

using testing::SysfsFixture;

const std::string kTestdata = HOLDFAST_HEALTH_TESTDATA;

const CheckResult* Find(const std::vector<CheckResult>& r, const std::string& name, const std::string& subject) {
  for (const CheckResult& c : r) {
    if (c.name == name && c.subject == subject) return &c;
  }
  return nullptr;
}

TEST(IbPorts, ReadsTheKernelLayout) {
  auto ports = ReadIbPorts(kTestdata + "/sysfs/healthy", {});
  ASSERT_TRUE(ports.ok()) << ports.status().ToString();
  ASSERT_EQ(ports->size(), 2u);
  const IbPort& p = (*ports)[0];
  EXPECT_EQ(p.Id(), "mlx5_0/1");
  EXPECT_EQ(p.state_code, 4);
  EXPECT_EQ(p.state, "ACTIVE");
  EXPECT_EQ(p.phys_state, "LinkUp");
  EXPECT_EQ(p.rate, "200 Gb/sec (4X HDR)");
  EXPECT_DOUBLE_EQ(p.rate_gbps, 200);
  EXPECT_EQ(p.link_layer, "InfiniBand");
  EXPECT_EQ(p.counters.size(), IbErrorCounters().size());
  EXPECT_EQ(p.counters.at("link_downed"), 1u);
}

TEST(IbPorts, HealthyTreePassesStateRateAndCount) {
  HealthConfig c;
  c.expected_ib_ports = 2;
  c.ib_rate_gbps_min = 200;
  const auto r = CheckIbPorts(ReadIbPorts(kTestdata + "/sysfs/healthy", {}), c);
  EXPECT_EQ(WorstStatus(r), CheckStatus::kPass);
  ASSERT_NE(Find(r, "ib.port_rate", "mlx5_1/1"), nullptr);
  ASSERT_NE(Find(r, "ib.port_count", ""), nullptr);
}

TEST(IbPorts, PortDownFailsWithEvidenceAndExcludesTheNode) {
  const auto r = CheckIbPorts(ReadIbPorts(kTestdata + "/sysfs/port_down", {}), HealthConfig{});
  const CheckResult* down = Find(r, "ib.port_state", "mlx5_1/1");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->status, CheckStatus::kFail);
  EXPECT_EQ(down->action, Action::kExcludeNode);
  EXPECT_EQ(down->evidence.measured, "DOWN");
  EXPECT_EQ(down->evidence.threshold, "ACTIVE");
  EXPECT_NE(down->evidence.source.find("class/infiniband/mlx5_1/ports/1/state"), std::string::npos);
  EXPECT_NE(down->message.find("Disabled"), std::string::npos);
  EXPECT_EQ(Find(r, "ib.port_state", "mlx5_0/1")->status, CheckStatus::kPass);
}

TEST(IbPorts, SlowLinkFailsTheRateCheck) {
  SysfsFixture fx(kTestdata, "healthy");
  fx.SetRate("mlx5_0", 1, "100 Gb/sec (2X HDR)");
  HealthConfig c;
  c.ib_rate_gbps_min = 200;
  const auto r = CheckIbPorts(ReadIbPorts(fx.root(), {}), c);
  const CheckResult* rate = Find(r, "ib.port_rate", "mlx5_0/1");
  ASSERT_NE(rate, nullptr);
  EXPECT_EQ(rate->status, CheckStatus::kFail);
  EXPECT_EQ(rate->evidence.measured, "100 Gb/sec (2X HDR)");
}

TEST(IbPorts, NoHcaIsSkippedUnlessPortsAreExpected) {
  const std::string empty = kTestdata + "/no-such-root";
  auto r = CheckIbPorts(ReadIbPorts(empty, {}), HealthConfig{});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, CheckStatus::kSkipped);
  EXPECT_NE(r[0].message.find("class/infiniband"), std::string::npos);

  HealthConfig expect;
  expect.expected_ib_ports = 2;
  r = CheckIbPorts(ReadIbPorts(empty, {}), expect);
  EXPECT_EQ(WorstStatus(r), CheckStatus::kFail);

  SysfsFixture fx(kTestdata, "healthy");
  fx.RemoveHca("mlx5_1");
  r = CheckIbPorts(ReadIbPorts(fx.root(), {}), expect);
  EXPECT_EQ(Find(r, "ib.port_count", "")->status, CheckStatus::kFail);
  EXPECT_EQ(Find(r, "ib.port_count", "")->evidence.measured, "1 ports");
}

TEST(IbPorts, NamedHcaThatIsMissingFails) {
  HealthConfig c;
  c.ib_devices = {"mlx5_7"};
  auto read = ReadIbPorts(kTestdata + "/sysfs/healthy", c.ib_devices);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("mlx5_7"), std::string::npos);
  EXPECT_EQ(WorstStatus(CheckIbPorts(read, c)), CheckStatus::kFail);
}

TEST(IbCounters, FlappingLinkFailsOnRisingLinkDowned) {
  SysfsFixture fx(kTestdata, "healthy");
  auto before = ReadIbPorts(fx.root(), {});
  fx.AddToCounter("mlx5_0", 1, "link_downed", 3);
  fx.AddToCounter("mlx5_0", 1, "link_error_recovery", 5);
  auto after = ReadIbPorts(fx.root(), {});
  const auto r = CheckIbCounterDeltas(*before, *after, 10, HealthConfig{});
  const CheckResult* flap = Find(r, "ib.link_downed", "mlx5_0/1");
  ASSERT_NE(flap, nullptr);
  EXPECT_EQ(flap->status, CheckStatus::kFail);
  EXPECT_EQ(flap->action, Action::kExcludeNode);
  EXPECT_EQ(flap->evidence.measured, "+3 in 10 s");
  EXPECT_EQ(Find(r, "ib.link_error_recovery", "mlx5_0/1")->status, CheckStatus::kWarn);
  EXPECT_EQ(Find(r, "ib.counters", "mlx5_1/1")->status, CheckStatus::kPass);
}

TEST(IbCounters, RisingErrorCountersWarnPastTheRateAndFailPastTheFailRate) {
  SysfsFixture fx(kTestdata, "healthy");
  HealthConfig c;
  c.ib_error_warn_per_min = 10;
  c.ib_error_fail_per_min = 1000;
  auto t0 = ReadIbPorts(fx.root(), {});
  fx.AddToCounter("mlx5_0", 1, "symbol_error", 1);  // 1 in 60 s: under the rate
  auto t1 = ReadIbPorts(fx.root(), {});
  EXPECT_EQ(WorstStatus(CheckIbCounterDeltas(*t0, *t1, 60, c)), CheckStatus::kPass);

  fx.AddToCounter("mlx5_0", 1, "symbol_error", 40);
  fx.AddToCounter("mlx5_0", 1, "port_rcv_errors", 10);
  auto t2 = ReadIbPorts(fx.root(), {});
  auto r = CheckIbCounterDeltas(*t1, *t2, 60, c);
  const CheckResult* rate = Find(r, "ib.error_rate", "mlx5_0/1");
  ASSERT_NE(rate, nullptr);
  EXPECT_EQ(rate->status, CheckStatus::kWarn);
  EXPECT_NE(rate->message.find("symbol_error +40"), std::string::npos) << rate->message;
  EXPECT_EQ(rate->evidence.measured, "50/min over 60 s");

  fx.AddToCounter("mlx5_0", 1, "local_link_integrity_errors", 5000);
  auto t3 = ReadIbPorts(fx.root(), {});
  r = CheckIbCounterDeltas(*t2, *t3, 60, c);
  EXPECT_EQ(Find(r, "ib.error_rate", "mlx5_0/1")->status, CheckStatus::kFail);

  fx.AddToCounter("mlx5_1", 1, "port_xmit_discards", 100000);
  auto t4 = ReadIbPorts(fx.root(), {});
  r = CheckIbCounterDeltas(*t3, *t4, 60, c);
  EXPECT_EQ(Find(r, "ib.xmit_discards", "mlx5_1/1")->status, CheckStatus::kWarn);
}

TEST(IbCounters, ClearedCountersCountFromZeroAndVanishedPortsFail) {
  SysfsFixture fx(kTestdata, "healthy");
  fx.AddToCounter("mlx5_0", 1, "link_downed", 10);
  auto t0 = ReadIbPorts(fx.root(), {});
  // perfquery -R: the counter goes back to zero, which is not a rise.
  {
    std::ofstream(fx.PortDir("mlx5_0", 1) + "/counters/link_downed") << "0\n";
  }
  auto t1 = ReadIbPorts(fx.root(), {});
  EXPECT_EQ(WorstStatus(CheckIbCounterDeltas(*t0, *t1, 5, HealthConfig{})), CheckStatus::kPass);
  fx.RemoveHca("mlx5_1");
  auto t2 = ReadIbPorts(fx.root(), {});
  auto r = CheckIbCounterDeltas(*t1, *t2, 5, HealthConfig{});
  ASSERT_NE(Find(r, "ib.port_missing", "mlx5_1/1"), nullptr);
  EXPECT_EQ(Find(r, "ib.port_missing", "mlx5_1/1")->action, Action::kDrainNode);
}

}  // namespace
}  // namespace holdfast::health
