// holdfastd's Prometheus metrics on a live run: a real daemon supervising two
// stand-in ranks (metrics_fake_rank: progress records, no LibTorch) with
// --metrics-addr and --metrics-textfile; the test scrapes /metrics over HTTP
// while the run goes on and sees the step advance, and promtool accepts what
// was served and the textfile.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "tests/support/subprocess.h"

namespace holdfast {
namespace {

using testing::BuildPath;
using testing::ChildProcess;
using testing::ProcessResult;
using testing::ReadFile;
using testing::RunProcess;
using testing::TempDir;
using testing::WriteFile;

// A port free right now on 127.0.0.1 (the daemon binds it a moment later).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

// GET /metrics: the body, or "" when nothing answers (yet).
std::string Scrape(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
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

// The value of rank 0's step in an exposition (any labels), if present.
std::optional<double> RankZeroStep(const std::string& text) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("holdfast_rank_step{", 0) == 0 && line.find("rank=\"0\"") != std::string::npos) {
      return std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  return std::nullopt;
}

std::string Promtool() {
  for (const char* p : {"/usr/bin/promtool", "/usr/local/bin/promtool"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
}

TEST(MetricsScrapeTest, ScrapesSeeTheStepAdvanceAndPromtoolAcceptsThem) {
  TempDir dir("metrics_scrape");
  std::ostringstream job;
  job << "[job]\nname = \"metrics\"\ncommand = [\"" << BuildPath("tests/metrics_fake_rank") << "\", \"400\", \"20\"]\n"
      << "nproc = 2\n[supervise]\npoll_ms = 50\nhealth_prelaunch = false\nhealth_poll_s = 0\nprogress_dir = \""
      << dir / "shm" << "\"\n";
  WriteFile(dir / "job.toml", job.str());
  const int port = FreePort();
  ASSERT_GT(port, 0);
  const std::string textfile = dir / "holdfast.prom";
  ChildProcess daemon({BuildPath("daemon/holdfastd"), "--run-dir", dir / "run", "--config", dir / "job.toml",
                       "--metrics-addr", "127.0.0.1:" + std::to_string(port), "--metrics-textfile", textfile},
                      dir / "daemon.log");
  // Two scrapes during the run, the second after the step has moved on.
  std::optional<double> first, second;
  std::string first_body, second_body;
  while (!daemon.Exited()) {
    std::string body = Scrape(port);
    std::optional<double> step = RankZeroStep(body);
    if (step && *step > 0) {
      if (!first) {
        first = step;
        first_body = body;
      } else if (*step > *first) {
        second = step;
        second_body = body;
        break;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(first && second) << "the step did not advance between two scrapes\n" << ReadFile(dir / "daemon.log");
  EXPECT_GT(*second, *first);
  EXPECT_NE(second_body.find("holdfast_rank_step_duration_seconds_count{"), std::string::npos) << second_body;
  const std::string during = ReadFile(textfile);
  EXPECT_NE(during.find("holdfast_rank_step{"), std::string::npos) << during;
  EXPECT_EQ(daemon.Wait(), 0) << ReadFile(dir / "daemon.log");
  // The textfile keeps how the run ended.
  const std::string after = ReadFile(textfile);
  EXPECT_NE(after.find("state=\"finished\"} 1"), std::string::npos) << after;
  EXPECT_NE(after.find("holdfast_rank_step{host=\""), std::string::npos) << after;

  const std::string promtool = Promtool();
  if (promtool.empty()) GTEST_SKIP() << "promtool not installed (Debian package 'prometheus'; scripts/setup.sh)";
  WriteFile(dir / "scrape.txt", second_body);
  for (const std::string& f : {dir / "scrape.txt", textfile}) {
    ProcessResult r = RunProcess({"/bin/sh", "-c", promtool + " check metrics < " + f});
    EXPECT_EQ(r.exit_code, 0) << f << ":\n" << r.output << "\n" << ReadFile(f);
  }
}

TEST(MetricsScrapeTest, AnAddressThatCannotBeBoundIsAConfigurationError) {
  TempDir dir("metrics_scrape");
  WriteFile(dir / "job.toml", "[job]\ncommand = [\"/bin/true\"]\n[supervise]\nhealth_prelaunch = false\nprogress_dir = \"" +
                                  (dir / "shm") + "\"\n");
  ProcessResult r = RunProcess({BuildPath("daemon/holdfastd"), "--run-dir", dir / "run", "--config", dir / "job.toml",
                                "--metrics-addr", "192.0.2.1:9"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("cannot serve metrics on 192.0.2.1:9"), std::string::npos) << r.output;
  r = RunProcess({BuildPath("daemon/holdfastd"), "--run-dir", dir / "run2", "--config", dir / "job.toml",
                  "--metrics-textfile", dir / "no/such/dir/holdfast.prom"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("metrics textfile"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace holdfast
