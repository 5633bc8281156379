#include "health/host.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace holdfast::health {
namespace {

const std::string kTestdata = HOLDFAST_HEALTH_TESTDATA;

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/holdfast-host-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string path;
};

// The real disk, seen through a clock that advances `step` per reading: a
// disk as slow as the test wants, with no timing in the assertion.
class SlowClockDisk : public RealDiskProbe {
 public:
  explicit SlowClockDisk(std::chrono::nanoseconds step) : step_(step) {}
  std::chrono::nanoseconds Now() override { return now_ += step_; }

 private:
  std::chrono::nanoseconds step_;
  std::chrono::nanoseconds now_{0};
};

class FullDisk : public RealDiskProbe {
 public:
  Result<FsSpace> Space(const std::string&) override { return FsSpace{100ULL << 30, 300ULL << 20}; }
};

TEST(HostMemory, PassesWithMemoryAndFailsWhenLow) {
  HealthConfig c;
  c.min_free_memory_gb = 4;
  CheckResult ok = CheckFreeMemory(kTestdata + "/meminfo_healthy", c);
  EXPECT_EQ(ok.status, CheckStatus::kPass);
  EXPECT_EQ(ok.evidence.measured, "1903 GB available");
  CheckResult low = CheckFreeMemory(kTestdata + "/meminfo_low", c);
  EXPECT_EQ(low.status, CheckStatus::kFail);
  EXPECT_EQ(low.evidence.measured, "0.5 GB available");
  EXPECT_EQ(low.evidence.threshold, ">= 4 GB");
  EXPECT_EQ(low.action, Action::kExcludeNode);
  EXPECT_EQ(CheckFreeMemory(kTestdata + "/missing", c).status, CheckStatus::kSkipped);
}

TEST(HostDisk, FullCheckpointDiskFails) {
  HealthConfig c;
  c.checkpoint_dir = "/ckpt";
  FullDisk disk;
  CheckResult r = CheckCheckpointSpace(c, &disk);
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_EQ(r.evidence.measured, "0.293 GB free of 100 GB");
  EXPECT_NE(r.message.find("nearly full"), std::string::npos);
}

TEST(HostDisk, RealStatvfsAgainstThresholds) {
  TempDir dir;
  HealthConfig c;
  c.checkpoint_dir = dir.path;
  RealDiskProbe disk;
  c.checkpoint_min_free_gb = 0;
  EXPECT_EQ(CheckCheckpointSpace(c, &disk).status, CheckStatus::kPass);
  c.checkpoint_min_free_gb = 1e9;  // more than any disk here has: the "full" outcome on a real statvfs
  EXPECT_EQ(CheckCheckpointSpace(c, &disk).status, CheckStatus::kFail);
  c.checkpoint_dir = dir.path + "/missing";
  CheckResult gone = CheckCheckpointSpace(c, &disk);
  EXPECT_EQ(gone.status, CheckStatus::kFail);
  EXPECT_NE(gone.message.find("No such file"), std::string::npos);
  c.checkpoint_dir = "";
  EXPECT_EQ(CheckCheckpointSpace(c, &disk).status, CheckStatus::kSkipped);
}

TEST(HostDisk, WriteBandwidthFromTheInjectedClock) {
  TempDir dir;
  HealthConfig c;
  c.checkpoint_dir = dir.path;
  c.checkpoint_write_mb = 4;
  c.checkpoint_write_warn_mbps = 100;
  c.checkpoint_write_fail_mbps = 10;
  SlowClockDisk fast(std::chrono::milliseconds(1));  // 4 MB in 1 ms
  EXPECT_EQ(CheckCheckpointWrite(c, &fast).status, CheckStatus::kPass);
  SlowClockDisk slow(std::chrono::milliseconds(100));  // 40 MB/s
  CheckResult warn = CheckCheckpointWrite(c, &slow);
  EXPECT_EQ(warn.status, CheckStatus::kWarn);
  EXPECT_EQ(warn.evidence.measured, "40 MB/s");
  SlowClockDisk crawling(std::chrono::seconds(2));  // 2 MB/s
  CheckResult fail = CheckCheckpointWrite(c, &crawling);
  EXPECT_EQ(fail.status, CheckStatus::kFail);
  EXPECT_EQ(fail.evidence.measured, "2 MB/s");
  EXPECT_EQ(fail.action, Action::kExcludeNode);
  // The probe file is gone afterwards.
  EXPECT_TRUE(std::filesystem::is_empty(dir.path));
}

TEST(HostDisk, UnwritableDirectoryFails) {
  HealthConfig c;
  c.checkpoint_dir = "/nonexistent/ckpt";
  RealDiskProbe disk;
  CheckResult r = CheckCheckpointWrite(c, &disk);
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_NE(r.message.find("/nonexistent/ckpt"), std::string::npos);
  c.checkpoint_write_mb = 0;
  EXPECT_EQ(CheckCheckpointWrite(c, &disk).status, CheckStatus::kSkipped);
}

TEST(HostCpuAllreduce, TwoProcessesAgreeOnTheSum) {
  HealthConfig c;
  c.cpu_allreduce_elements = 300000;  // larger than a socket buffer: both directions must drain
  CheckResult r = CheckCpuAllreduce(c);
  EXPECT_EQ(r.status, CheckStatus::kPass) << r.message << " " << r.evidence.measured;
  EXPECT_NE(r.evidence.source.find("2 local processes"), std::string::npos);
}

TEST(HostDevicesAndMounts, MissingOnesFailAndNameThemselves) {
  TempDir dev;
  std::filesystem::create_directories(dev.path + "/infiniband");
  std::ofstream(dev.path + "/infiniband/uverbs0").put('\0');
  std::ofstream(dev.path + "/nvidiactl").put('\0');
  HostPaths paths;
  paths.dev_root = dev.path;
  paths.mounts = kTestdata + "/mounts";
  HealthConfig c;
  EXPECT_EQ(CheckRequiredDevices(c, paths).status, CheckStatus::kSkipped);
  c.required_devices = {"/dev/infiniband/uverbs0", "/dev/nvidiactl"};
  EXPECT_EQ(CheckRequiredDevices(c, paths).status, CheckStatus::kPass);
  c.required_devices.push_back("/dev/nvidia7");
  CheckResult missing = CheckRequiredDevices(c, paths);
  EXPECT_EQ(missing.status, CheckStatus::kFail);
  EXPECT_EQ(missing.evidence.measured, "missing /dev/nvidia7");

  c.required_mounts = {"/scratch", "/home/", "/mnt/local ckpt"};
  EXPECT_EQ(CheckRequiredMounts(c, paths).status, CheckStatus::kPass);
  c.required_mounts.push_back("/datasets");
  CheckResult m = CheckRequiredMounts(c, paths);
  EXPECT_EQ(m.status, CheckStatus::kFail);
  EXPECT_EQ(m.evidence.measured, "missing /datasets");
  EXPECT_EQ(m.action, Action::kDrainNode);
}

}  // namespace
}  // namespace holdfast::health
