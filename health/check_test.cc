#include "health/check.h"

#include <gtest/gtest.h>

#include "health/policy.h"
#include "health/report.h"

namespace holdfast::health {
namespace {

std::vector<CheckResult> Mixed() {
  return {Pass("host.memory", "", "1 TB available", {"1000 GB", ">= 1 GB", "/proc/meminfo"}),
          Fail("ib.port_state", "mlx5_1/1", "port is DOWN", {"DOWN", "ACTIVE", "/sys/.../state"},
               Action::kExcludeNode),
          Warn("ib.error_rate", "mlx5_0/1", "errors", {"20/min", "<= 10/min", "counters"}),
          Fail("gpu.count", "", "found 7 GPUs", {"7/8", "== 8", "nvmlDeviceGetCount_v2"}, Action::kDrainNode),
          Skipped("gpu.memtest", "", "built without CUDA")};
}

TEST(DrainReason, NamesFailuresWorstActionFirstAndFitsSlurm) {
  const std::string reason = DrainReason(Mixed());
  EXPECT_EQ(reason, "holdfast: gpu.count 7/8; ib.port_state mlx5_1/1 DOWN (2 failed)");
  EXPECT_LE(reason.size(), 100u);
}

TEST(DrainReason, EmptyWithoutFailures) {
  EXPECT_EQ(DrainReason({Pass("a.b", "", "ok", {}), Warn("c.d", "", "meh", {}), Skipped("e.f", "", "n/a")}), "");
}

TEST(DrainReason, LongReasonsAreCutToTheLimitAndStayPrintable) {
  std::vector<CheckResult> many;
  for (int i = 0; i < 20; ++i) {
    many.push_back(Fail("ib.link_downed", "mlx5_" + std::to_string(i) + "/1", "flap\n\"x\"",
                        {"+3 in 10 s\n'quoted'", "<= 0", "s"}, Action::kExcludeNode));
  }
  const std::string reason = DrainReason(many);
  EXPECT_LE(reason.size(), 100u);
  EXPECT_NE(reason.find("(+20 failed)"), std::string::npos) << reason;
  for (char c : reason) {
    EXPECT_TRUE(c >= 0x20 && c < 0x7f && c != '"' && c != '\'') << reason;
  }
}

TEST(Table, ShowsStatusActionAndEvidence) {
  const std::string table = FormatTable(Mixed());
  EXPECT_NE(table.find("fail    gpu.count"), std::string::npos) << table;
  EXPECT_NE(table.find("drain_node"), std::string::npos);
  EXPECT_NE(table.find("measured: 7/8; threshold: == 8; source: nvmlDeviceGetCount_v2"), std::string::npos);
  EXPECT_NE(table.find("skipped gpu.memtest"), std::string::npos);
}

TEST(WorstStatus, FailBeatsWarnBeatsPassBeatsSkipped) {
  EXPECT_EQ(WorstStatus(Mixed()), CheckStatus::kFail);
  EXPECT_EQ(WorstStatus({Skipped("a.b", "", "x")}), CheckStatus::kSkipped);
  EXPECT_EQ(WorstStatus({Skipped("a.b", "", "x"), Pass("a.c", "", "", {})}), CheckStatus::kPass);
}

TEST(Json, ReportRoundTripsEveryField) {
  const std::vector<CheckResult> in = Mixed();
  const std::string json = ReportToJson(in, Decide(in, PolicyConfig{}));
  EXPECT_NE(json.find("\"action\": \"drain_node\""), std::string::npos) << json;
  auto out = ResultsFromReportJson(json);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ((*out)[i].name, in[i].name);
    EXPECT_EQ((*out)[i].subject, in[i].subject);
    EXPECT_EQ((*out)[i].status, in[i].status);
    EXPECT_EQ((*out)[i].action, in[i].action);
    EXPECT_EQ((*out)[i].message, in[i].message);
    EXPECT_EQ((*out)[i].runbook, in[i].runbook);
    EXPECT_EQ((*out)[i].evidence.measured, in[i].evidence.measured);
    EXPECT_EQ((*out)[i].evidence.source, in[i].evidence.source);
  }
  auto one = ResultFromJson(ResultToJson(in[1]));
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->runbook, "runbooks/health-ib.md");
  EXPECT_FALSE(ResultFromJson("{\"name\": \"a.b\", \"status\": \"sick\"}").ok());
  EXPECT_FALSE(ResultFromJson("not json").ok());
}

}  // namespace
}  // namespace holdfast::health
