// holdfast-health as Slurm's Prolog and as a command: real process, fixture
// sysfs trees, the stand-in libnvidia-ml; exit codes and output are what
// Slurm and a person see.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/host_history.h"

namespace {

const std::string kBin = HOLDFAST_HEALTH_BIN;
const std::string kData = HOLDFAST_HEALTH_TESTDATA;

struct ProcessRun {
  int exit_code = -1;
  std::string out;  // stdout only
};

ProcessRun Exec(const std::string& env, const std::string& args) {
  const std::string cmd = env + " " + kBin + " --meminfo " + kData + "/meminfo_healthy --mounts " + kData +
                          "/mounts --nvml-library " + HOLDFAST_FAKE_NVML + " " + args + " 2>/dev/null";
  ProcessRun r;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

struct HealthCli : ::testing::Test {
  HealthCli() {
    char tmpl[] = "/tmp/holdfast-cli-XXXXXX";
    dir = mkdtemp(tmpl);
    config = dir + "/job.toml";
    std::ofstream(config) << "[trainer]\nignored = 1\n[health]\nexpected_gpus = 8\nexpected_ib_ports = 2\n"
                             "ib_rate_gbps_min = 200\nrequired_mounts = [\"/scratch\"]\ncheckpoint_min_free_gb = 0\n";
    std::ofstream(dir + "/empty-kmsg");
  }
  ~HealthCli() override { std::filesystem::remove_all(dir); }
  std::string Prolog(const std::string& tree, const std::string& kmsg = "") {
    return "--prolog --config " + config + " --sysfs-root " + kData + "/sysfs/" + tree + " --checkpoint-dir " + dir +
           " --kernel-log " + (kmsg.empty() ? dir + "/empty-kmsg" : kData + "/" + kmsg);
  }
  std::string dir, config;
};

TEST_F(HealthCli, HealthyNodePassesTheProlog) {
  // Xids of an application that is gone (13, 94) warn: they do not drain the node.
  ProcessRun r = Exec("HOLDFAST_FAKE_NVML='gpus=8'", Prolog("healthy", "kmsg_app_xid"));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "");
}

TEST_F(HealthCli, PortDownDrainsWithAReasonThatFitsSlurm) {
  ProcessRun r = Exec("HOLDFAST_FAKE_NVML='gpus=8'", Prolog("port_down"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "holdfast: ib.port_state mlx5_1/1 DOWN\n");
}

TEST_F(HealthCli, MissingGpuAndFallenOffTheBusDrain) {
  ProcessRun r = Exec("HOLDFAST_FAKE_NVML='gpus=7'", Prolog("healthy", "kmsg_xid79"));
  EXPECT_EQ(r.exit_code, 1);
  ASSERT_FALSE(r.out.empty());
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << "one line: " << r.out;
  EXPECT_LE(r.out.size() - 1, 100u);
  EXPECT_NE(r.out.find("gpu.count 7/8"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("gpu.xid pci 0000:3b:00 Xid 79"), std::string::npos) << r.out;
}

TEST_F(HealthCli, ConfigErrorExitsTwoAndSaysSo) {
  std::ofstream(config) << "[health]\nexpected_gpus = \"eight\"\n";
  ProcessRun r = Exec("", Prolog("healthy"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out.rfind("holdfast: health config error: " + config + ":2: key health.expected_gpus", 0), 0u)
      << r.out;
  EXPECT_EQ(Exec("", "--checks host,disk").exit_code, 2);
}

TEST_F(HealthCli, JsonCarriesResultsEvidenceAndTheDecision) {
  ProcessRun r = Exec("HOLDFAST_FAKE_NVML='gpus=8'", "--json --checks ib --config " + config + " --sysfs-root " + kData +
                                                  "/sysfs/port_down");
  EXPECT_EQ(r.exit_code, 1);
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["status"], "fail");
  EXPECT_EQ(j["decision"]["action"], "exclude_node");
  bool found = false;
  for (const auto& res : j["results"]) {
    if (res["name"] == "ib.port_state" && res["subject"] == "mlx5_1/1") {
      found = true;
      EXPECT_EQ(res["status"], "fail");
      EXPECT_EQ(res["evidence"]["measured"], "DOWN");
      EXPECT_EQ(res["runbook"], "runbooks/health-ib.md");
    }
    EXPECT_EQ(res["name"].get<std::string>().rfind("ib.", 0), 0u) << "--checks ib runs only ib checks";
  }
  EXPECT_TRUE(found);
}

TEST_F(HealthCli, ChecksThatCannotRunHereAreSkippedNeverPassed) {
  // No GPU on this machine (and the stand-in NVML reports none): the CUDA and
  // NCCL probes, compiled or not, must say skipped.
  ProcessRun r = Exec("HOLDFAST_FAKE_NVML='gpus=0'", "--json --checks gpu,nccl --kernel-log " + dir + "/empty-kmsg");
  EXPECT_EQ(r.exit_code, 0);
  auto j = nlohmann::json::parse(r.out);
  int probes = 0;
  for (const auto& res : j["results"]) {
    const std::string name = res["name"];
    if (name == "gpu.memtest" || name == "gpu.gemm" || name == "nccl.allreduce_busbw") {
      ++probes;
      EXPECT_EQ(res["status"], "skipped") << name;
      EXPECT_FALSE(res["message"].get<std::string>().empty());
    }
  }
  EXPECT_EQ(probes, 3);
}

// The host's record across runs: refused (exit 1, the drain reason naming the
// runs) or warned about (exit 0, nothing drained), on top of a healthy node.
TEST_F(HealthCli, AHostFlaggedAcrossRunsIsRefusedOrWarnedAbout) {
  const std::string history = dir + "/hosts";
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  for (const char* run : {"r-20261201-aaaa", "r-20261201-bbbb", "r-20261202-cccc"}) {
    holdfast::HostIncident i;
    i.host = "n2";
    i.credited = true;
    i.time_ms = now - 3'600'000;
    i.kind = "hang";
    i.run_id = run;
    i.event_id = 1;
    ASSERT_TRUE(holdfast::PublishHostIncident(history, i).ok());
  }
  const std::string flags = " --history-dir " + history + " --history-host n2";
  ProcessRun refused = Exec("HOLDFAST_FAKE_NVML='gpus=8'", Prolog("healthy") + flags + " --history-action refuse");
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_EQ(refused.out.rfind("holdfast: host.history n2 in 3 runs/7d: r-2026120", 0), 0u) << refused.out;
  for (const char* run : {"r-20261201-aaaa", "r-20261201-bbbb", "r-20261202-cccc"}) {
    EXPECT_NE(refused.out.find(run), std::string::npos) << refused.out;
  }
  ProcessRun warned = Exec("HOLDFAST_FAKE_NVML='gpus=8'", Prolog("healthy") + flags + " --history-action warn");
  EXPECT_EQ(warned.exit_code, 0);
  EXPECT_EQ(warned.out, "");
  // Another host, a higher bar, and the action off: nothing to refuse.
  EXPECT_EQ(Exec("HOLDFAST_FAKE_NVML='gpus=8'", Prolog("healthy") + " --history-dir " + history +
                                                  " --history-host n3 --history-action refuse").exit_code, 0);
  EXPECT_EQ(Exec("HOLDFAST_FAKE_NVML='gpus=8'", Prolog("healthy") + flags + " --history-action refuse --history-runs 4")
                .exit_code, 0);
  EXPECT_EQ(Exec("HOLDFAST_FAKE_NVML='gpus=8'", Prolog("healthy") + flags).exit_code, 0);
  // SLURMD_NODENAME names the node when --history-host does not.
  EXPECT_EQ(Exec("SLURMD_NODENAME=n2 HOLDFAST_FAKE_NVML='gpus=8'",
                 Prolog("healthy") + " --history-dir " + history + " --history-action refuse").exit_code, 1);
  // A bad action is a usage error (exit 2), like any other flag.
  EXPECT_EQ(Exec("HOLDFAST_FAKE_NVML='gpus=8'", Prolog("healthy") + flags + " --history-action drain").exit_code, 2);
}

}  // namespace
