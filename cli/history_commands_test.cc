// `runctl node HOST` and `runctl runs --all ROOT` over runs the real recorder
// (daemon/run_recorder.h) wrote side by side: their lineage.db files and the
// host history they published. A host credited in three runs is flagged; one
// only involved (an all-ranks hang) is not; a corrupt history file is named
// and skipped; bad arguments get the documented exit codes.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "daemon/run_recorder.h"
#include "tests/support/subprocess.h"

namespace holdfast {
namespace {

using json = nlohmann::json;
using testing::TempDir;

bool Has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

struct Said {
  int exit = -1;
  std::string out, err;
};

class HistoryCommandsTest : public ::testing::Test {
 protected:
  HistoryCommandsTest() : dir_("history_commands") {
    job_.name = "train";
    job_.command = {"/bin/true"};
    job_.nproc = 1;
    // One history for every run under the root, also those a folder deeper ([lineage] history_dir).
    job_.history_dir = dir_ / "root/.holdfast/hosts";
  }

  // A run in ROOT/NAME on n9 and n8 whose rank 0 crashes on n9; credited to
  // n9 when `credited`, else (the job's own failure) to no host.
  void RunWithCrash(const std::string& name, bool credited) {
    Allocation a;
    a.scheduler = SchedulerKind::kSlurm;
    a.job_id = std::to_string(100 + runs_++);
    a.nodes = {{"n9", "10.0.0.9"}, {"n8", "10.0.0.8"}};
    RecorderOptions ro;
    ro.run_dir = dir_ / ("root/" + name);
    std::filesystem::create_directories(ro.run_dir);
    ro.job = &job_;
    ro.allocation = a;
    ro.world_size = 2;
    auto rec = RunRecorder::Open(ro, &clock_);
    ASSERT_TRUE(rec.ok()) << rec.status().ToString();
    (*rec)->StartGeneration(0);
    IncidentEvidence ev;
    ev.rank = 0;
    RankEvidence r;
    r.rank = 0;
    r.host = "n9";
    ev.ranks.push_back(r);
    (*rec)->Record(event_kind::kCrash, "rank 0 exited with code 1", "stopped all ranks", ev,
                   EventContext{credited ? "n9" : "", 0, {}, "", ""});
    (*rec)->EndRun(RunState::kFailed, "rank 0 exited with code 1");
    clock_.Advance(3600);
  }

  Said Node(const std::string& host, const std::string& history = "", HistoryRule rule = {}, bool as_json = false,
            const std::string& run_dir = "") {
    Said s;
    std::ostringstream out, err;
    CliContext c;
    c.run_dir = run_dir.empty() ? dir_ / "root/a" : run_dir;
    c.json = as_json;
    c.out = &out;
    c.err = &err;
    s.exit = CmdNode(c, host, history, rule);
    s.out = out.str();
    s.err = err.str();
    return s;
  }

  Said RunsAll(const std::string& root, HistoryRule rule = {}, bool as_json = false) {
    Said s;
    std::ostringstream out, err;
    CliContext c;
    c.run_dir = dir_.path();
    c.json = as_json;
    c.out = &out;
    c.err = &err;
    s.exit = CmdRunsAll(c, root, 0, "", rule);
    s.out = out.str();
    s.err = err.str();
    return s;
  }

  TempDir dir_;
  JobConfig job_;
  // Recent: the flag rule's window is the last days before the real now.
  FakeTimeSource clock_{1'000'000'000, RealTimeSource::Get()->UnixMs() - 3 * 86'400'000};
  int runs_ = 0;
};

TEST_F(HistoryCommandsTest, AHostCreditedInThreeRunsIsFlaggedAndOneOnlyInvolvedIsNot) {
  RunWithCrash("a", true);
  RunWithCrash("b", true);
  RunWithCrash("deep/c", false);  // the job's own failure: n9 only involved
  Said two = Node("n9");
  ASSERT_EQ(two.exit, 0) << two.err;
  EXPECT_TRUE(Has(two.out, "host n9: not flagged: n9 was credited with incidents in 2 runs within 7 days")) << two.out;
  EXPECT_TRUE(Has(two.out, "no (involved)")) << two.out;

  RunWithCrash("deep/d", true);
  Said three = Node("n9", "", {}, /*as_json=*/true);
  ASSERT_EQ(three.exit, 0) << three.err;
  const json j = json::parse(three.out);
  EXPECT_TRUE(j["flagged"].get<bool>());
  EXPECT_EQ(j["verdict"]["runs"].size(), 3u);
  EXPECT_EQ(j["verdict"]["credited"], 3);
  EXPECT_EQ(j["verdict"]["involved"], 1);
  ASSERT_EQ(j["incidents"].size(), 4u);
  EXPECT_EQ(j["history_dir"], dir_ / "root/.holdfast/hosts");
  EXPECT_EQ(j["incidents"][0]["run_dir"], dir_ / "root/a");
  EXPECT_EQ(j["incidents"][0]["slurm_job_id"], "100");
  // A longer bar, or a shorter window, and it is not.
  EXPECT_FALSE(json::parse(Node("n9", "", HistoryRule{4, 7}, true).out)["flagged"].get<bool>());
  EXPECT_FALSE(json::parse(Node("n9", "", HistoryRule{3, 1}, true).out)["flagged"].get<bool>());
  // n8 ran every job and was never blamed.
  Said n8 = Node("n8");
  EXPECT_EQ(n8.exit, 0);
  EXPECT_TRUE(Has(n8.out, "no incident recorded for n8")) << n8.out;

  // Every run under the root, and the flagged host named beside the runs it ran.
  Said all = RunsAll(dir_ / "root");
  ASSERT_EQ(all.exit, 0) << all.err;
  for (const char* dir : {"\na ", "\nb ", "\ndeep/c ", "\ndeep/d "}) EXPECT_TRUE(Has(all.out, dir)) << dir << all.out;
  EXPECT_TRUE(Has(all.out, "FLAGGED n9 was credited with incidents in 3 runs within 7 days")) << all.out;
  const json aj = json::parse(RunsAll(dir_ / "root", {}, true).out);
  ASSERT_EQ(aj["runs"].size(), 4u);
  for (const json& r : aj["runs"]) {
    EXPECT_EQ(r["flagged_hosts"], json::array({"n9"})) << r["dir"];
    EXPECT_EQ(r["state"], "failed");
  }
  ASSERT_EQ(aj["flagged"].size(), 1u);
  EXPECT_EQ(aj["flagged"][0]["host"], "n9");
}

TEST_F(HistoryCommandsTest, ACorruptHistoryFileIsNamedAndSkipped) {
  RunWithCrash("a", true);
  const std::string bad = dir_ / "root/.holdfast/hosts/n9/0000000000000001-r-x-1.json";
  std::ofstream(bad) << "{\"version\":1,\"host\":\"n9\",\"ti";
  Said s = Node("n9");
  EXPECT_EQ(s.exit, 0);
  EXPECT_TRUE(Has(s.err, "runctl: skipped " + bad + ": not JSON")) << s.err;
  EXPECT_TRUE(Has(s.out, "credited with incidents in 1 run ")) << s.out;
  Said all = RunsAll(dir_ / "root");
  EXPECT_EQ(all.exit, 0);
  EXPECT_TRUE(Has(all.err, bad)) << all.err;
}

TEST_F(HistoryCommandsTest, BadArgumentsAreRefusedWithTheDocumentedCodes) {
  if (FindHistoryDir(dir_.path()).empty()) {  // (another program's history above the temporary folder would be found)
    Said none = Node("n9");
    EXPECT_EQ(none.exit, kRunctlNotFound) << "no history anywhere above the run dir";
    EXPECT_TRUE(Has(none.err, "pass --history-dir DIR")) << none.err;
  }
  RunWithCrash("a", true);
  EXPECT_EQ(Node("../etc").exit, kRunctlUsage);
  EXPECT_EQ(Node("n9", "", HistoryRule{0, 7}).exit, kRunctlUsage);
  EXPECT_EQ(Node("n9", "", HistoryRule{3, 0}).exit, kRunctlUsage);
  EXPECT_EQ(Node("n9", dir_ / "nowhere").exit, kRunctlNotFound);
  EXPECT_EQ(RunsAll(dir_ / "nowhere").exit, kRunctlNotFound);
  EXPECT_EQ(RunsAll(dir_ / "root", HistoryRule{0, 7}).exit, kRunctlUsage);
  // Found from anywhere below the root.
  EXPECT_EQ(Node("n9", "", {}, false, dir_ / "root").exit, 0);
}

}  // namespace
}  // namespace holdfast
