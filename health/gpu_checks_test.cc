#include "health/gpu_checks.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>

#include "health/testing/fake_nvml.h"

namespace holdfast::health {
namespace {

const std::string kTestdata = HOLDFAST_HEALTH_TESTDATA;

const CheckResult* Find(const std::vector<CheckResult>& r, const std::string& name, const std::string& subject = "") {
  for (const CheckResult& c : r) {
    if (c.name == name && (subject.empty() || c.subject.rfind(subject, 0) == 0)) return &c;
  }
  return nullptr;
}

// The dlopen seam itself, against a stand-in libnvidia-ml.
std::vector<CheckResult> ThroughDlopen(const std::string& scenario, const HealthConfig& config) {
  setenv("HOLDFAST_FAKE_NVML", scenario.c_str(), 1);
  auto nvml = OpenNvml(HOLDFAST_FAKE_NVML);
  EXPECT_TRUE(nvml.ok()) << nvml.status().ToString();
  if (!nvml.ok()) return {};
  return CheckGpusWithNvml(Result<Nvml*>(nvml->get()), config);
}

TEST(Nvml, MissingLibraryIsSkippedWithTheReasonNeverPassed) {
  auto nvml = OpenNvml("libnvidia-ml-not-here.so.1");
  ASSERT_FALSE(nvml.ok());
  EXPECT_NE(nvml.status().message().find("not found: no NVIDIA driver on this node"), std::string::npos);
  const auto r = CheckGpusWithNvml(Result<Nvml*>(nvml.status()), HealthConfig{});
  for (const CheckResult& c : r) {
    EXPECT_EQ(c.status, CheckStatus::kSkipped) << c.name;
    EXPECT_NE(c.message.find("no NVIDIA driver"), std::string::npos);
  }
  HealthConfig gpu_node;
  gpu_node.expected_gpus = 8;
  const auto on_gpu_node = CheckGpusWithNvml(Result<Nvml*>(nvml.status()), gpu_node);
  EXPECT_EQ(Find(on_gpu_node, "gpu.count")->status, CheckStatus::kFail);
  EXPECT_EQ(Find(on_gpu_node, "gpu.count")->action, Action::kDrainNode);
}

TEST(Nvml, InitFailureNamesTheDriver) {
  setenv("HOLDFAST_FAKE_NVML", "init_fails=1", 1);
  auto nvml = OpenNvml(HOLDFAST_FAKE_NVML);
  ASSERT_FALSE(nvml.ok());
  EXPECT_NE(nvml.status().message().find("kernel driver is not loaded"), std::string::npos);
}

TEST(Nvml, HealthyGpusPassThroughDlopen) {
  HealthConfig c;
  c.expected_gpus = 2;
  const auto r = ThroughDlopen("gpus=2 ecc_corr=12 remap_corr.1=2", c);
  EXPECT_EQ(WorstStatus(r), CheckStatus::kPass);
  EXPECT_EQ(Find(r, "gpu.count")->evidence.measured, "2 GPUs");
  EXPECT_EQ(Find(r, "gpu.ecc", "gpu 1")->subject, "gpu 1");
  EXPECT_EQ(Find(r, "gpu.ecc", "gpu 1")->evidence.source, "nvmlDeviceGetTotalEccErrors on Fake GPU (GPU-fake-1)");
  EXPECT_EQ(Find(r, "gpu.row_remap", "gpu 1")->evidence.measured, "0 uncorrectable, 2 correctable rows");
  EXPECT_EQ(Find(r, "gpu.recovery_action", "gpu 0")->evidence.measured, "NONE");
}

TEST(Nvml, MissingGpuFailsTheCount) {
  HealthConfig c;
  c.expected_gpus = 8;
  const auto r = ThroughDlopen("gpus=7", c);
  const CheckResult* count = Find(r, "gpu.count");
  EXPECT_EQ(count->status, CheckStatus::kFail);
  EXPECT_EQ(count->evidence.measured, "7/8");
  EXPECT_EQ(count->action, Action::kDrainNode);
}

TEST(Nvml, EccRemapAndRecoveryActionThroughDlopen) {
  const auto r = ThroughDlopen("gpus=3 ecc_unc.0=2 ecc_unc_aggregate.0=5 remap_pending.1=1 remap_failure.2=1 "
                               "recovery.1=1 recovery.2=2",
                               HealthConfig{});
  const CheckResult* ecc = Find(r, "gpu.ecc", "gpu 0");
  EXPECT_EQ(ecc->status, CheckStatus::kFail);
  EXPECT_EQ(ecc->evidence.measured, "2 uncorrected (volatile), 5 lifetime");
  EXPECT_EQ(Find(r, "gpu.row_remap", "gpu 1")->status, CheckStatus::kFail);
  EXPECT_EQ(Find(r, "gpu.row_remap", "gpu 1")->action, Action::kExcludeNode);
  EXPECT_EQ(Find(r, "gpu.row_remap", "gpu 2")->action, Action::kDrainNode);
  EXPECT_EQ(Find(r, "gpu.recovery_action", "gpu 1")->evidence.measured, "GPU_RESET");
  EXPECT_EQ(Find(r, "gpu.recovery_action", "gpu 1")->action, Action::kExcludeNode);
  EXPECT_EQ(Find(r, "gpu.recovery_action", "gpu 2")->evidence.measured, "NODE_REBOOT");
  EXPECT_EQ(Find(r, "gpu.recovery_action", "gpu 2")->action, Action::kDrainNode);
}

TEST(Nvml, OlderGpusUseRetiredPagesAndOlderDriversSkipRecovery) {
  const auto r = ThroughDlopen("gpus=2 remap_unsupported=1 retired_dbe.0=3 retired_sbe.0=70 retired_pending.1=1 "
                               "fields_unsupported=1 ecc_unsupported.1=1",
                               HealthConfig{});
  const CheckResult* rma = Find(r, "gpu.retired_pages", "gpu 0");
  ASSERT_NE(rma, nullptr);
  EXPECT_EQ(rma->status, CheckStatus::kFail);
  EXPECT_EQ(rma->evidence.measured, "3 DBE + 70 SBE pages");
  EXPECT_EQ(rma->action, Action::kDrainNode);
  EXPECT_EQ(Find(r, "gpu.retired_pages", "gpu 1")->action, Action::kExcludeNode);
  EXPECT_EQ(Find(r, "gpu.ecc", "gpu 1")->status, CheckStatus::kSkipped);
  EXPECT_EQ(Find(r, "gpu.recovery_action", "gpu 0")->status, CheckStatus::kSkipped);
}

TEST(Nvml, InProcessFakeForDaemonTests) {
  FakeNvml fake;
  fake.gpus.resize(1);
  fake.gpus[0].recovery_action = 4;
  const auto r = CheckGpusWithNvml(Result<Nvml*>(&fake), HealthConfig{});
  EXPECT_EQ(Find(r, "gpu.recovery_action")->evidence.measured, "DRAIN_AND_RESET");
  fake.count_error = "GPU lost";
  EXPECT_EQ(Find(CheckGpusWithNvml(Result<Nvml*>(&fake), HealthConfig{}), "gpu.count")->status,
            CheckStatus::kFail);
}

TEST(Xid, ParsesDmesgAndKmsgLinesAndNamesTheMeaning) {
  KernelLogReader dmesg(kTestdata + "/kmsg_xid79");
  auto text = dmesg.Read();
  ASSERT_TRUE(text.ok());
  auto events = ParseXidEvents(*text);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].xid, 79);
  EXPECT_EQ(events[0].pci, "0000:3b:00");
  auto r = CheckXidEvents(events, "dmesg");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, CheckStatus::kFail);
  EXPECT_EQ(r[0].action, Action::kDrainNode);
  EXPECT_NE(r[0].message.find("fallen off the bus"), std::string::npos);
  // Nothing new on the second read.
  EXPECT_EQ(dmesg.Read().value(), "");

  KernelLogReader kmsg(kTestdata + "/kmsg_app_xid");
  events = ParseXidEvents(kmsg.Read().value());
  ASSERT_EQ(events.size(), 3u);
  r = CheckXidEvents(events, "/dev/kmsg");
  ASSERT_EQ(r.size(), 2u);  // two Xid 13s are one result
  EXPECT_EQ(r[0].status, CheckStatus::kWarn);
  EXPECT_EQ(r[0].evidence.measured, "Xid 13 x2");
  EXPECT_EQ(r[1].action, Action::kRestart);

  EXPECT_EQ(CheckXidEvents({}, "dmesg")[0].status, CheckStatus::kPass);
  EXPECT_FALSE(KernelLogReader("/nonexistent/kmsg").Read().ok());
}

}  // namespace
}  // namespace holdfast::health
