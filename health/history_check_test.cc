// host.history on real history files (common/host_history.h): pass, warn or
// refuse a host by its credited incidents across runs; a history that cannot
// be read is skipped, never failed; the drain reason names the runs.
#include "health/history_check.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "common/host_history.h"

namespace holdfast::health {
namespace {

constexpr int64_t kNow = 1'764'650'000'000;
constexpr int64_t kHourMs = 3'600'000;

class HistoryCheckTest : public ::testing::Test {
 protected:
  HistoryCheckTest() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "hf-history-check-XXXXXX").string();
    dir_ = ::mkdtemp(tmpl.data());
    config_.history_dir = dir_ + "/hosts";
    config_.history_action = HistoryAction::kRefuse;
  }
  ~HistoryCheckTest() override { std::filesystem::remove_all(dir_); }

  void Credit(const std::string& host, const std::string& run, int64_t ago_hours, bool credited = true) {
    HostIncident i;
    i.host = host;
    i.credited = credited;
    i.time_ms = kNow - ago_hours * kHourMs;
    i.kind = "hang";
    i.run_id = run;
    i.event_id = ++events_;
    ASSERT_TRUE(PublishHostIncident(config_.history_dir, i).ok());
  }

  std::string dir_;
  HealthConfig config_;
  int events_ = 0;
};

TEST_F(HistoryCheckTest, AHostCreditedInThreeRunsThisWeekIsRefusedWithItsRuns) {
  Credit("n2", "r-20251201-aaaa", 100);
  Credit("n2", "r-20251130-bbbb", 50);
  Credit("n2", "r-20251130-bbbb", 49);
  Credit("n2", "r-20251129-cccc", 200, /*credited=*/false);  // only involved: does not count
  CheckResult r = CheckHostHistory(config_, "n2", kNow);
  EXPECT_EQ(r.status, CheckStatus::kPass) << r.message;
  EXPECT_EQ(r.name, "host.history");
  EXPECT_EQ(r.evidence.measured, "in 2 runs/7d: r-20251130-bbbb,r-20251201-aaaa");

  Credit("n2", "r-20251202-dddd", 1);
  r = CheckHostHistory(config_, "n2", kNow);
  EXPECT_EQ(r.status, CheckStatus::kFail) << r.message;
  EXPECT_EQ(r.action, Action::kDrainNode);
  EXPECT_EQ(r.runbook, "runbooks/host-history.md");
  EXPECT_NE(r.message.find("n2 was credited with incidents in 3 runs within 7 days"), std::string::npos) << r.message;
  const std::string reason = DrainReason({r});
  EXPECT_EQ(reason, "holdfast: host.history n2 in 3 runs/7d: r-20251202-dddd,r-20251130-bbbb,r-20251201-aaaa");
  EXPECT_LE(reason.size(), 100u);

  config_.history_action = HistoryAction::kWarn;
  r = CheckHostHistory(config_, "n2", kNow);
  EXPECT_EQ(r.status, CheckStatus::kWarn);
  EXPECT_EQ(r.action, Action::kNone);
  // Another host, and a window that leaves the old runs out.
  EXPECT_EQ(CheckHostHistory(config_, "n3", kNow).status, CheckStatus::kPass);
  config_.history_window_days = 3;
  EXPECT_EQ(CheckHostHistory(config_, "n2", kNow).status, CheckStatus::kPass);
}

TEST_F(HistoryCheckTest, AHistoryThatCannotBeReadIsSkippedNeverFailed) {
  std::ofstream(dir_ + "/hosts") << "not a folder";
  CheckResult r = CheckHostHistory(config_, "n2", kNow);
  EXPECT_EQ(r.status, CheckStatus::kSkipped) << r.message;
  EXPECT_NE(r.message.find("cannot read the host history"), std::string::npos) << r.message;
  config_.history_dir.clear();
  EXPECT_EQ(CheckHostHistory(config_, "n2", kNow).status, CheckStatus::kSkipped);
}

TEST_F(HistoryCheckTest, CorruptFilesAreCountedAndDoNotCount) {
  Credit("n2", "r-a", 1);
  std::ofstream(config_.history_dir + "/n2/0000000000000009-r-x-9.json") << "{\"version\":1";
  CheckResult r = CheckHostHistory(config_, "n2", kNow);
  EXPECT_EQ(r.status, CheckStatus::kPass);
  EXPECT_NE(r.message.find("1 unreadable file(s) skipped"), std::string::npos) << r.message;
}

TEST(HistoryConfigTest, TheKeysAreReadAndCheckedLikeEveryOther) {
  Result<HealthConfig> c = ParseHealthConfig(
      "[health]\nhistory_dir = \"/shared/.holdfast/hosts\"\nhistory_action = \"refuse\"\nhistory_runs = 2\n"
      "history_window_days = 14\n",
      "health.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->history_dir, "/shared/.holdfast/hosts");
  EXPECT_EQ(c->history_action, HistoryAction::kRefuse);
  EXPECT_EQ(c->history_runs, 2);
  EXPECT_EQ(c->history_window_days, 14);
  Result<HealthConfig> bad = ParseHealthConfig("[health]\nhistory_action = \"drain\"\n", "health.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("history_action"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(ParseHealthConfig("[health]\nhistory_runs = 0\n", "health.toml").ok());
  EXPECT_EQ(HealthConfig{}.history_action, HistoryAction::kOff);
}

}  // namespace
}  // namespace holdfast::health
