#include "health/probe_process.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace holdfast::health {
namespace {

// A stand-in probe program: a shell script doing what the test needs.
struct Script {
  explicit Script(const std::string& body) {
    char tmpl[] = "/tmp/holdfast-probe-XXXXXX";
    dir = mkdtemp(tmpl);
    path = dir + "/probe";
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    chmod(path.c_str(), 0755);
  }
  ~Script() { std::filesystem::remove_all(dir); }
  std::string dir, path;
};

TEST(ProbeProcess, ReadsTheChildsResults) {
  Script s(R"(echo '{"results": [{"name": "gpu.gemm", "subject": "gpu 0", "status": "fail", "message": "slow",)"
           R"( "action": "exclude_node", "evidence": {"measured": "310 TFLOPS"}}]}')");
  auto r = RunProbeProcess({s.path, "--checks", "gpu"}, 30);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].name, "gpu.gemm");
  EXPECT_EQ(r[0].status, CheckStatus::kFail);
  EXPECT_EQ(r[0].evidence.measured, "310 TFLOPS");
}

TEST(ProbeProcess, MissingProgramIsSkipped) {
  auto r = RunProbeProcess({"/nonexistent/holdfast-health-gpu"}, 30);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, CheckStatus::kSkipped);
  EXPECT_NE(r[0].message.find("could not be started"), std::string::npos);
}

TEST(ProbeProcess, CrashIsAFailureNamingTheSignal) {
  Script s("kill -SEGV $$");
  auto r = RunProbeProcess({s.path}, 30);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, CheckStatus::kFail);
  EXPECT_EQ(r[0].evidence.measured, "signal 11");
  EXPECT_EQ(r[0].action, Action::kExcludeNode);
}

TEST(ProbeProcess, HangIsKilledAndFails) {
  Script s("exec sleep 600");  // a probe stuck in the driver
  auto r = RunProbeProcess({s.path}, 0.3);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, CheckStatus::kFail);
  EXPECT_NE(r[0].message.find("did not finish"), std::string::npos);
}

TEST(ProbeProcess, GarbageOutputIsAFailure) {
  Script s("echo not json; exit 0");
  auto r = RunProbeProcess({s.path}, 30);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, CheckStatus::kFail);
}

}  // namespace
}  // namespace holdfast::health
