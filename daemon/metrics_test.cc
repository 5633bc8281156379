#include "daemon/metrics.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <netinet/in.h>
#include <arpa/inet.h>

#include <regex>
#include <sstream>

#include <gtest/gtest.h>

#include "tests/support/subprocess.h"

namespace holdfast {
namespace {

using testing::ProcessResult;
using testing::ReadFile;
using testing::RunProcess;
using testing::TempDir;
using testing::WriteFile;

constexpr int64_t kSecond = 1000000000;

// The value of the sample `series` (name with its labels, as exposed), or
// nullopt when the exposition has no such line.
std::optional<double> Sample(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return std::nullopt;
}

RankSample Rank(int rank, int64_t step, double last_step_s, bool in_checkpoint = false) {
  RankSample r;
  r.rank = rank;
  r.host = "n1";
  r.alive = true;
  r.has_progress = true;
  r.step = step;
  r.last_step_s = last_step_s;
  r.in_checkpoint = in_checkpoint;
  return r;
}

MetricsSnapshot Snapshot(int64_t now_ns, int generation, std::vector<RankSample> ranks) {
  MetricsSnapshot s;
  s.now_ns = now_ns;
  s.run_id = "r-1";
  s.state = "running";
  s.attempt = 1;
  s.generation = generation;
  s.world_size = static_cast<int>(ranks.size());
  s.restart_budget = 3;
  s.ranks = std::move(ranks);
  return s;
}

TEST(RunMetricsTest, RankStepAndStepTimesFollowTheProgressRecords) {
  RunMetrics m;
  m.Update(Snapshot(0, 0, {Rank(0, 10, 0.1), Rank(1, 10, 0.1)}));
  m.Update(Snapshot(1 * kSecond, 0, {Rank(0, 14, 0.25), Rank(1, 13, 0.3)}));
  const std::string text = m.Exposition();
  EXPECT_EQ(Sample(text, R"(holdfast_rank_step{host="n1",rank="0",run="r-1"})"), 14) << text;
  EXPECT_EQ(Sample(text, R"(holdfast_rank_step{host="n1",rank="1",run="r-1"})"), 13) << text;
  // Four steps of rank 0 since the first poll, each counted at the latest duration.
  EXPECT_EQ(Sample(text, R"(holdfast_rank_step_duration_seconds_count{host="n1",rank="0",run="r-1"})"), 4) << text;
  EXPECT_EQ(Sample(text, R"(holdfast_rank_step_duration_seconds_sum{host="n1",rank="0",run="r-1"})"), 1.0);
  EXPECT_EQ(Sample(text, R"(holdfast_rank_step_duration_seconds{host="n1",rank="0",run="r-1",quantile="0.5"})"), 0.25);
  EXPECT_EQ(Sample(text, R"(holdfast_rank_alive{host="n1",rank="1",run="r-1"})"), 1);
  // No job reported tokens: the metric is left out, not exposed empty.
  EXPECT_EQ(text.find("holdfast_rank_tokens_per_second"), std::string::npos) << text;
}

TEST(RunMetricsTest, TokensPerSecondAppearWhenTheJobReportsThem) {
  RunMetrics m;
  RankSample r = Rank(0, 5, 0.1);
  r.tokens_per_s = 1234.5;
  m.Update(Snapshot(0, 0, {r}));
  EXPECT_EQ(Sample(m.Exposition(), R"(holdfast_rank_tokens_per_second{host="n1",rank="0",run="r-1"})"), 1234.5);
}

TEST(RunMetricsTest, RunCountersGenerationAndHealth) {
  RunMetrics m;
  MetricsSnapshot s = Snapshot(0, 0, {Rank(0, 1, 0.1)});
  s.incidents = {{"crash", 0}, {"hang", 0}};
  s.health.push_back(HealthSample{"n1", "host.checkpoint_disk", "/ckpt", 0});
  m.Update(s);
  s = Snapshot(kSecond, 1, {Rank(0, 1, 0.1)});
  s.state = "running";
  s.restarts = 1;
  s.incidents = {{"crash", 1}, {"hang", 0}};
  s.health.push_back(HealthSample{"n1", "host.checkpoint_disk", "/ckpt", 1});
  m.Update(s);
  s.now_ns = 2 * kSecond;
  s.state = "stopping";
  s.restarts = 2;
  s.incidents = {{"crash", 1}, {"hang", 1}};
  m.Update(s);
  const std::string text = m.Exposition();
  EXPECT_EQ(Sample(text, R"(holdfast_generation{run="r-1"})"), 1) << text;
  EXPECT_EQ(Sample(text, R"(holdfast_attempt{run="r-1"})"), 1);
  EXPECT_EQ(Sample(text, R"(holdfast_world_size{run="r-1"})"), 1);
  EXPECT_EQ(Sample(text, R"(holdfast_restart_budget{run="r-1"})"), 3);
  EXPECT_EQ(Sample(text, R"(holdfast_restarts_total{run="r-1"})"), 2);
  EXPECT_EQ(Sample(text, R"(holdfast_incidents_total{kind="crash",run="r-1"})"), 1);
  EXPECT_EQ(Sample(text, R"(holdfast_incidents_total{kind="hang",run="r-1"})"), 1);
  EXPECT_EQ(Sample(text, R"(holdfast_run_state{run="r-1",state="stopping"})"), 1);
  EXPECT_EQ(Sample(text, R"(holdfast_run_state{run="r-1",state="running"})"), 0);
  EXPECT_EQ(Sample(text, R"(holdfast_health_check_status{check="host.checkpoint_disk",host="n1",run="r-1",subject="/ckpt"})"), 1);
}

TEST(RunMetricsTest, EffectiveTrainingTimeLeavesOutRestartsAndRedoneSteps) {
  RunMetrics m;
  m.Update(Snapshot(0, 0, {Rank(0, 0, 0.1)}));
  m.Update(Snapshot(10 * kSecond, 0, {Rank(0, 100, 0.1)}));   // 10 s of new steps
  m.Update(Snapshot(20 * kSecond, 0, {Rank(0, 100, 0.1)}));   // stuck: nothing
  m.Update(Snapshot(30 * kSecond, 1, {Rank(0, 50, 0.1)}));    // restarted from step 50: nothing
  m.Update(Snapshot(40 * kSecond, 1, {Rank(0, 150, 0.1)}));   // 50 redone + 50 new: half of 10 s
  const std::string text = m.Exposition();
  EXPECT_EQ(Sample(text, R"(holdfast_effective_training_seconds_total{run="r-1"})"), 15.0) << text;
}

TEST(RunMetricsTest, CheckpointCommitDurationSizeAndStall) {
  RunMetrics m;
  MetricsSnapshot s = Snapshot(0, 0, {Rank(0, 90, 0.1), Rank(1, 90, 0.1)});
  m.Update(s);
  s = Snapshot(kSecond, 0, {Rank(0, 100, 0.1, /*in_checkpoint=*/true), Rank(1, 100, 0.1, true)});
  m.Update(s);  // reached step 100 at 1 s, saving
  s = Snapshot(3 * kSecond, 0, {Rank(0, 110, 0.1), Rank(1, 110, 0.1)});
  s.checkpoint_step = 100;
  s.checkpoint_bytes = 4096;
  m.Update(s);  // committed at 3 s
  const std::string text = m.Exposition();
  EXPECT_EQ(Sample(text, R"(holdfast_checkpoint_step{run="r-1"})"), 100) << text;
  EXPECT_EQ(Sample(text, R"(holdfast_checkpoint_size_bytes{run="r-1"})"), 4096);
  EXPECT_EQ(Sample(text, R"(holdfast_checkpoint_commit_duration_seconds_count{run="r-1"})"), 1);
  EXPECT_EQ(Sample(text, R"(holdfast_checkpoint_commit_duration_seconds_sum{run="r-1"})"), 2.0);
  EXPECT_EQ(Sample(text, R"(holdfast_checkpoint_stall_seconds_total{run="r-1"})"), 1.0);
}

TEST(RunMetricsTest, TheCheckpointAGenerationResumesFromIsNotACommit) {
  RunMetrics m;
  MetricsSnapshot s = Snapshot(0, 0, {Rank(0, 40, 0.1)});
  s.checkpoint_step = 25;
  m.Update(s);
  s = Snapshot(kSecond, 1, {Rank(0, 50, 0.1)});  // resumed at 50 from a checkpoint the daemon did not see made
  s.checkpoint_step = 50;
  m.Update(s);
  EXPECT_EQ(Sample(m.Exposition(), R"(holdfast_checkpoint_commit_duration_seconds_count{run="r-1"})"), std::nullopt);
}

// ---- promtool ----

std::string Promtool() {
  for (const char* p : {"/usr/bin/promtool", "/usr/local/bin/promtool"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
}

MetricsSnapshot Busy() {
  MetricsSnapshot s = Snapshot(5 * kSecond, 1, {Rank(0, 120, 0.2), Rank(1, 119, 0.21)});
  RankSample tok = Rank(2, 118, 0.2);
  tok.tokens_per_s = 5000;
  s.ranks.push_back(tok);
  s.restarts = 1;
  s.incidents = {{"crash", 1}, {"hang", 0}};
  s.checkpoint_step = 100;
  s.checkpoint_bytes = 1 << 20;
  s.health.push_back(HealthSample{"n1", "host.checkpoint_disk", "/ckpt", 0});
  s.health.push_back(HealthSample{"n1", "gpu.ecc", "gpu 3", 2});
  return s;
}

RunMetrics& Fed(RunMetrics& m) {
  MetricsSnapshot s = Busy();
  s.now_ns = 0;
  for (RankSample& r : s.ranks) r.step = 90;
  m.Update(s);
  m.Update(Busy());
  return m;
}

TEST(MetricsPromtoolTest, PromtoolAcceptsTheExposition) {
  const std::string promtool = Promtool();
  if (promtool.empty()) GTEST_SKIP() << "promtool not installed (Debian package 'prometheus'; scripts/setup.sh)";
  RunMetrics m;
  TempDir dir("metrics");
  WriteFile(dir / "scrape.txt", Fed(m).Exposition());
  ProcessResult r = RunProcess({"/bin/sh", "-c", promtool + " check metrics < " + (dir / "scrape.txt")});
  EXPECT_EQ(r.exit_code, 0) << r.output << "\n" << ReadFile(dir / "scrape.txt");
}

TEST(MetricsPromtoolTest, TheTextfileIsWrittenAtomicallyAndPromtoolAcceptsIt) {
  RunMetrics m;
  TempDir dir("metrics");
  const std::string path = dir / "holdfast.prom";
  ASSERT_TRUE(WriteMetricsTextfile(path, "old\n").ok());
  ASSERT_TRUE(WriteMetricsTextfile(path, Fed(m).Exposition()).ok());
  EXPECT_EQ(ReadFile(path), m.Exposition());
  // Only the file itself is left: the temporary went by rename.
  ProcessResult ls = RunProcess({"/bin/ls", "-A", dir.path()});
  EXPECT_EQ(ls.output, "holdfast.prom\n");
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);  // node_exporter may run as another user
  EXPECT_FALSE(WriteMetricsTextfile(dir / "missing/holdfast.prom", "x\n").ok());

  const std::string promtool = Promtool();
  if (promtool.empty()) GTEST_SKIP() << "promtool not installed (Debian package 'prometheus'; scripts/setup.sh)";
  ProcessResult r = RunProcess({"/bin/sh", "-c", promtool + " check metrics < " + path});
  EXPECT_EQ(r.exit_code, 0) << r.output << "\n" << ReadFile(path);
}

// ---- the endpoint ----

// GET /metrics from 127.0.0.1:port: the response body ("" when it fails).
std::string Scrape(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    const std::string req = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[4096];
      for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  const size_t body = out.find("\r\n\r\n");
  return body == std::string::npos ? "" : out.substr(body + 4);
}

TEST(MetricsEndpointTest, ServesTheMetricsOverHttp) {
  RunMetrics m;
  Fed(m);
  auto ep = MetricsEndpoint::Start("127.0.0.1:0", &m);
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  std::smatch match;
  const std::string addr = (*ep)->address();
  ASSERT_TRUE(std::regex_match(addr, match, std::regex(R"(127\.0\.0\.1:(\d+))"))) << addr;
  const int port = std::stoi(match[1]);
  ASSERT_GT(port, 0);
  const std::string body = Scrape(port);
  EXPECT_EQ(Sample(body, R"(holdfast_rank_step{host="n1",rank="0",run="r-1"})"), 120) << body;
  // The port is taken now: a second endpoint on it says so.
  auto again = MetricsEndpoint::Start(addr, &m);
  EXPECT_FALSE(again.ok());
  EXPECT_FALSE(MetricsEndpoint::Start("no-port", &m).ok());
}

}  // namespace
}  // namespace holdfast
