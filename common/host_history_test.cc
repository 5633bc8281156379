// The host history on a real file system: files published by several real
// processes at once into one host's directory, read back whole while they
// write; a half-written, corrupt or foreign file skipped with why; the flag
// rule over distinct runs in a window.
#include "common/host_history.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include <gtest/gtest.h>

namespace holdfast {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kDayMs = 86'400'000;
constexpr int64_t kNow = 1'764'650'000'000;  // 2025-12-02

class HostHistoryTest : public ::testing::Test {
 protected:
  HostHistoryTest() {
    std::string tmpl = (fs::temp_directory_path() / "hf-history-XXXXXX").string();
    dir_ = ::mkdtemp(tmpl.data());
    history_ = dir_ + "/.holdfast/hosts";
  }
  ~HostHistoryTest() override { fs::remove_all(dir_); }

  static HostIncident Incident(const std::string& host, const std::string& run, int64_t event, int64_t time_ms,
                               bool credited = true) {
    HostIncident i;
    i.host = host;
    i.credited = credited;
    i.time_ms = time_ms;
    i.kind = "crash";
    i.run_id = run;
    i.run_name = "demo";
    i.run_dir = "/shared/runs/" + run;
    i.event_id = event;
    i.attempt = 1;
    i.generation = 0;
    i.rank = 3;
    i.slurm_job_id = "42";
    i.summary = "rank 3 killed by signal 9 (SIGKILL)";
    i.action = "stopped all ranks; restart generation 1 from step 25";
    return i;
  }

  std::string dir_, history_;
};

TEST_F(HostHistoryTest, APublishedIncidentReadsBackWithEveryKey) {
  HostIncident in = Incident("n2", "r-20251202-aaaa", 7, kNow);
  ASSERT_TRUE(PublishHostIncident(history_, in).ok());
  const std::string file = history_ + "/n2/" + HostIncidentFileName(in);
  EXPECT_EQ(HostIncidentFileName(in), "0001764650000000-r-20251202-aaaa-7.json");
  struct stat st;
  ASSERT_EQ(::stat(file.c_str(), &st), 0) << file;
  EXPECT_EQ(st.st_mode & 07777, 0644u);

  Result<HostHistory> h = ReadHostHistory(history_, "n2");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_EQ(h->incidents.size(), 1u);
  EXPECT_TRUE(h->skipped.empty());
  const HostIncident& out = h->incidents[0];
  EXPECT_EQ(out.host, "n2");
  EXPECT_TRUE(out.credited);
  EXPECT_EQ(out.time_ms, kNow);
  EXPECT_EQ(out.kind, "crash");
  EXPECT_EQ(out.run_id, "r-20251202-aaaa");
  EXPECT_EQ(out.run_dir, "/shared/runs/r-20251202-aaaa");
  EXPECT_EQ(out.event_id, 7);
  EXPECT_EQ(out.attempt, 1);
  EXPECT_EQ(out.generation, 0);
  EXPECT_EQ(out.rank, 3);
  EXPECT_EQ(out.slurm_job_id, "42");
  EXPECT_EQ(out.summary, in.summary);
  EXPECT_EQ(out.action, in.action);
  EXPECT_EQ(out.file, file);
  EXPECT_EQ(out.owner_uid, static_cast<int64_t>(::getuid()));

  // The same event again: one file, as before.
  ASSERT_TRUE(PublishHostIncident(history_, in).ok());
  h = ReadHostHistory(history_, "n2");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->incidents.size(), 1u);
  Result<std::vector<std::string>> hosts = HistoryHosts(history_);
  ASSERT_TRUE(hosts.ok());
  EXPECT_EQ(*hosts, std::vector<std::string>{"n2"});
}

TEST_F(HostHistoryTest, HalfWrittenCorruptAndForeignFilesAreSkippedWithWhy) {
  ASSERT_TRUE(PublishHostIncident(history_, Incident("n1", "r-a", 1, kNow)).ok());
  const std::string d = history_ + "/n1/";
  // A writer that died before its rename: a temporary name, never read.
  std::ofstream(d + "0001764650000001-r-b-2.json.tmp.4242") << "{\"version\":1,\"ho";
  // A file cut short, one of another host, one that is not an object, a link.
  std::ofstream(d + "0001764650000002-r-c-3.json") << "{\"version\":1,\"host\":\"n1\",\"kind\":\"cr";
  std::ofstream(d + "0001764650000003-r-d-4.json") << HostIncidentToJson(Incident("n9", "r-d", 4, kNow));
  std::ofstream(d + "0001764650000004-r-e-5.json") << "[1,2]";
  fs::create_symlink("/etc/passwd", d + "0001764650000005-r-f-6.json");

  Result<HostHistory> h = ReadHostHistory(history_, "n1");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_EQ(h->incidents.size(), 1u);
  EXPECT_EQ(h->incidents[0].run_id, "r-a");
  ASSERT_EQ(h->skipped.size(), 4u);
  EXPECT_NE(h->skipped[0].find("r-c-3.json: not JSON"), std::string::npos) << h->skipped[0];
  EXPECT_NE(h->skipped[1].find("r-d-4.json: names host 'n9'"), std::string::npos) << h->skipped[1];
  EXPECT_NE(h->skipped[2].find("r-e-5.json: not a JSON object"), std::string::npos) << h->skipped[2];
  EXPECT_NE(h->skipped[3].find("r-f-6.json: open"), std::string::npos) << h->skipped[3];
  for (const std::string& s : h->skipped) EXPECT_EQ(s.find("root:"), std::string::npos) << s;
}

TEST_F(HostHistoryTest, HostNamesThatAreNotOneDirectoryAreRefused) {
  for (const char* bad : {"", ".", "..", "../etc", "a/b", "n1\n"}) {
    EXPECT_EQ(PublishHostIncident(history_, Incident(bad, "r-a", 1, kNow)).code(), StatusCode::kInvalidArgument)
        << bad;
    EXPECT_FALSE(ReadHostHistory(history_, bad).ok()) << bad;
  }
  EXPECT_FALSE(fs::exists(dir_ + "/etc"));
}

TEST_F(HostHistoryTest, UnderASharedStickyDirectoryNewDirectoriesAreSharedToo) {
  const std::string shared = dir_ + "/shared";
  ASSERT_EQ(::mkdir(shared.c_str(), 0755), 0);
  ASSERT_EQ(::chmod(shared.c_str(), 01777), 0);
  ASSERT_TRUE(PublishHostIncident(shared + "/hosts", Incident("n1", "r-a", 1, kNow)).ok());
  struct stat st;
  ASSERT_EQ(::stat((shared + "/hosts/n1").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 01777u);
  // Not shared: 0755 less the umask.
  ASSERT_TRUE(PublishHostIncident(history_, Incident("n1", "r-a", 1, kNow)).ok());
  ASSERT_EQ(::stat((history_ + "/n1").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 01002, 0u);
}

TEST_F(HostHistoryTest, SeveralProcessesPublishingAtOnceAreReadWholeWhileTheyWrite) {
  constexpr int kWriters = 4, kEach = 60;
  std::vector<pid_t> pids;
  for (int w = 0; w < kWriters; ++w) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int failed = 0;
      for (int e = 0; e < kEach; ++e) {
        HostIncident i = Incident("n3", "r-w" + std::to_string(w), e, kNow + e);
        i.summary = std::string(1500, 'x');  // big enough that a torn file would show
        failed += PublishHostIncident(history_, i).ok() ? 0 : 1;
      }
      ::_exit(failed == 0 ? 0 : 1);
    }
    pids.push_back(pid);
  }
  // Read while they write: every file listed is whole, and none goes away.
  size_t seen = 0;
  int reads = 0;
  std::vector<int> statuses(pids.size(), -1);
  for (size_t done = 0; done < pids.size(); ++reads) {
    for (size_t k = 0; k < pids.size(); ++k) {
      int status = 0;
      if (statuses[k] == -1 && ::waitpid(pids[k], &status, WNOHANG) == pids[k]) {
        statuses[k] = status;
        ++done;
      }
    }
    Result<HostHistory> h = ReadHostHistory(history_, "n3");
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    EXPECT_TRUE(h->skipped.empty()) << h->skipped.front();
    EXPECT_GE(h->incidents.size(), seen);
    seen = h->incidents.size();
  }
  for (int status : statuses) {
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a writer failed: " << status;
  }
  Result<HostHistory> h = ReadHostHistory(history_, "n3");
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(h->skipped.empty());
  ASSERT_EQ(h->incidents.size(), static_cast<size_t>(kWriters * kEach));
  std::set<std::string> keys;
  for (const HostIncident& i : h->incidents) keys.insert(i.run_id + "/" + std::to_string(i.event_id));
  EXPECT_EQ(keys.size(), static_cast<size_t>(kWriters * kEach));
  for (const auto& e : fs::directory_iterator(history_ + "/n3")) {
    EXPECT_EQ(e.path().extension(), ".json") << "a temporary file was left: " << e.path();
  }
  EXPECT_GT(reads, 0);
}

TEST_F(HostHistoryTest, AHostIsFlaggedForCreditedIncidentsInEnoughDistinctRunsWithinTheWindow) {
  const HistoryRule rule;  // 3 runs within 7 days
  HostHistory h;
  h.host = "n2";
  h.incidents = {Incident("n2", "r-old", 1, kNow - 8 * kDayMs),    // before the window
                 Incident("n2", "r-a", 1, kNow - 6 * kDayMs),
                 Incident("n2", "r-a", 2, kNow - 5 * kDayMs),      // the same run again
                 Incident("n2", "r-b", 1, kNow - 1 * kDayMs),
                 Incident("n2", "r-c", 9, kNow - kDayMs / 2, /*credited=*/false)};  // only involved
  HostVerdict v = JudgeHost(h, rule, kNow);
  EXPECT_FALSE(v.flagged);
  EXPECT_EQ(v.runs, (std::vector<std::string>{"r-b", "r-a"}));
  EXPECT_EQ(v.credited, 3);
  EXPECT_EQ(v.involved, 1);
  EXPECT_EQ(VerdictText("n2", v, rule), "n2 was credited with incidents in 2 runs within 7 days (r-b, r-a); flagged at 3");

  h.incidents.push_back(Incident("n2", "r-d", 4, kNow - 60'000));
  v = JudgeHost(h, rule, kNow);
  EXPECT_TRUE(v.flagged);
  EXPECT_EQ(VerdictText("n2", v, rule), "n2 was credited with incidents in 3 runs within 7 days (r-d, r-b, r-a)");
  // A shorter window leaves r-a out.
  EXPECT_FALSE(JudgeHost(h, HistoryRule{3, 2}, kNow).flagged);
  EXPECT_TRUE(JudgeHost(h, HistoryRule{2, 2}, kNow).flagged);

  EXPECT_TRUE(CheckHistoryRule(rule).ok());
  EXPECT_FALSE(CheckHistoryRule(HistoryRule{0, 7}).ok());
  EXPECT_FALSE(CheckHistoryRule(HistoryRule{3, 0}).ok());
  EXPECT_FALSE(CheckHistoryRule(HistoryRule{3, -1}).ok());
}

TEST_F(HostHistoryTest, TheDefaultDirectoryIsBesideTheRunAndFoundFromBelow) {
  EXPECT_EQ(DefaultHistoryDir("/shared/runs/r1"), "/shared/runs/.holdfast/hosts");
  EXPECT_EQ(DefaultHistoryDir("/shared/runs/r1/"), "/shared/runs/.holdfast/hosts");
  EXPECT_EQ(FindHistoryDir(dir_ + "/runs/r1"), "");
  ASSERT_TRUE(PublishHostIncident(DefaultHistoryDir(dir_ + "/runs/r1"), Incident("n1", "r-a", 1, kNow)).ok());
  fs::create_directories(dir_ + "/runs/r1/logs");
  EXPECT_EQ(FindHistoryDir(dir_ + "/runs/r1/logs"), dir_ + "/runs/.holdfast/hosts");
  EXPECT_EQ(FindHistoryDir(dir_ + "/runs"), dir_ + "/runs/.holdfast/hosts");
}

}  // namespace
}  // namespace holdfast
