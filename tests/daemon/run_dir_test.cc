// Run directories, end to end with a real holdfastd and real holdfast-train
// ranks: a 200-character run dir with spaces and non-ASCII characters works
// for everything a user does (the live status over the control socket, a rank
// SIGKILLed and restarted, the run finishing bit-exact, `runctl status`,
// `triage` and `report` afterwards), and a run dir the daemon cannot use is
// refused before anything is recorded: exit 2, the reason, no lineage.db.
#include <sys/mount.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/daemon/supervised_run.h"

namespace holdfast {
namespace {

bool Has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

// Every lineage.db or control socket under `root`: what a refused start must not leave.
std::vector<std::string> RecordedUnder(const std::string& root) {
  std::vector<std::string> found;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("lineage.db", 0) == 0 || name == "holdfastd.sock" || name.rfind(".hf", 0) == 0) {
      found.push_back(it->path().string());
    }
  }
  return found;
}

class LongRunDirTest : public SupervisedRunTest {
 protected:
  static constexpr size_t kExtraBytes = 4;  // "ü" and "ï" are 2 bytes each, "…" 3
  // dir_/"hf long/ünïcode dir … with spaces/ppp…/run", 200 characters (more bytes).
  LongRunDirTest() {
    const std::string base = dir_ / "hf long/ünïcode dir … with spaces";
    const size_t chars = base.size() - kExtraBytes;
    run_dir_ = base + "/" + std::string(chars < 195 ? 195 - chars : 1, 'p') + "/run";
  }

  void WriteLongJob() {
    std::filesystem::create_directories(run_dir_);
    std::ostringstream os;
    os << "[job]\nname = \"long-dir\"\ncommand = [\"" << BuildPath("trainer/holdfast-train") << "\", \"--config\", \""
       << *shared_ / "train.toml" << "\", \"--set\", \"output.dir=" << run_dir_ << "/out\", \"--set\", \"checkpoint.dir="
       << run_dir_ << "/ck\", \"--dump-final\", \"" << run_dir_ << "/final\"]\nnproc = 2\ncheckpoint_dir = \""
       << run_dir_ << "/ck\"\n"
       << "[supervise]\npoll_ms = 50\nhang_min_s = 2\nstartup_timeout_s = 90\nrestart_budget = 2\nterm_grace_s = 2\n"
       << "backoff_initial_s = 0.1\nprogress_dir = \"" << dir_ / "shm" << "\"\n"
       << "[health]\ncheckpoint_min_free_gb = 0.05\ncheckpoint_write_mb = 4\ncheckpoint_write_fail_mbps = 0\n";
    WriteFile(run_dir_ + "/job.toml", os.str());
  }

  ProcessResult Runctl(std::vector<std::string> args) const {
    args.insert(args.begin(), {BuildPath("cli/runctl"), "--run-dir", run_dir_});
    return RunProcess(args);
  }

  std::string run_dir_;
};

TEST_F(LongRunDirTest, A200CharacterRunDirWithSpacesAndNonAsciiWorksEndToEnd) {
  ASSERT_EQ(run_dir_.size() - kExtraBytes, 200u) << run_dir_;  // characters
  ASSERT_GT(ControlSocketPath(run_dir_).size(), 107u);  // longer than a sockaddr_un holds
  WriteLongJob();
  ChildProcess daemon({BuildPath("daemon/holdfastd"), "--run-dir", run_dir_, "--config", run_dir_ + "/job.toml"},
                      dir_ / "daemon.log");

  // The live status comes over the control socket in the long run dir.
  auto st = testing::WaitForStatus(daemon, run_dir_, "both ranks past step 12", 300, [](const RunStatus& s) {
    if (s.nodes.empty() || s.nodes[0].ranks.size() != 2) return false;
    for (const auto& r : s.nodes[0].ranks) {
      if (r.step < 12 || r.state != "running") return false;
    }
    return true;
  });
  ASSERT_TRUE(st.has_value()) << ReadFile(dir_ / "daemon.log");
  ProcessResult live = Runctl({"status"});
  EXPECT_EQ(live.exit_code, 0) << live.output;
  EXPECT_TRUE(Has(live.output, st->run_id)) << live.output;
  EXPECT_FALSE(Has(live.output, "not running")) << live.output;

  ASSERT_EQ(kill(static_cast<pid_t>(st->nodes[0].ranks[1].pid), SIGKILL), 0);
  EXPECT_EQ(daemon.Wait(), 0) << ReadFile(dir_ / "daemon.log");
  EXPECT_TRUE(ReadFile(run_dir_ + "/final/params.bin") == reference_)
      << "final parameters differ from the fault-free run";
  EXPECT_FALSE(std::filesystem::exists(ControlSocketPath(run_dir_))) << "the daemon left its socket behind";

  ProcessResult status = Runctl({"status", "latest"});
  EXPECT_EQ(status.exit_code, 0) << status.output;
  EXPECT_TRUE(Has(status.output, "succeeded")) << status.output;
  EXPECT_TRUE(Has(status.output, "rank 1 killed by signal 9 (SIGKILL)")) << status.output;

  ProcessResult triage = Runctl({"triage", "latest"});
  EXPECT_EQ(triage.exit_code, 0) << triage.output;
  EXPECT_TRUE(Has(triage.output, "incident  crash")) << triage.output;
  EXPECT_TRUE(Has(triage.output, "culprit   rank 1")) << triage.output;
  EXPECT_TRUE(Has(triage.output, "restart generation 1")) << triage.output;

  const std::string report = run_dir_ + "/report ü.html";
  ProcessResult r = Runctl({"report", "latest", "--out", report});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const std::string html = ReadFile(report);
  EXPECT_TRUE(Has(html, st->run_id)) << report;
  EXPECT_TRUE(Has(html, "ünïcode dir … with spaces")) << "the report names the run dir";
}

// A run dir holdfastd cannot use, for a cause that stops root too.
class RefusedRunDirTest : public ::testing::Test {
 protected:
  RefusedRunDirTest() : dir_("run_dir_refused") {
    WriteFile(dir_ / "job.toml", "[job]\nname = \"refused\"\ncommand = [\"/bin/true\"]\nnproc = 1\n");
  }

  // Starts holdfastd on `run_dir`: it must exit 2 naming the run dir and
  // `reason`, with nothing recorded anywhere under the test's directory.
  void ExpectRefused(const std::string& run_dir, const std::string& reason) {
    ProcessResult r = RunProcess({BuildPath("daemon/holdfastd"), "--run-dir", run_dir, "--config", dir_ / "job.toml"});
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(Has(r.output, "run dir " + run_dir + " cannot be used: ")) << r.output;
    EXPECT_TRUE(Has(r.output, reason)) << r.output;
    EXPECT_EQ(RecordedUnder(dir_.path()), std::vector<std::string>{}) << r.output;
  }

  TempDir dir_;
};

TEST_F(RefusedRunDirTest, ARegularFile) {
  WriteFile(dir_ / "file", "not a directory\n");
  ExpectRefused(dir_ / "file", "it exists and is not a directory; remove it, or choose another path");
}

TEST_F(RefusedRunDirTest, APathUnderARegularFile) {
  WriteFile(dir_ / "file", "not a directory\n");
  ExpectRefused(dir_ / "file/run", "a component of its path is a file, not a directory");
}

TEST_F(RefusedRunDirTest, ANameLongerThanTheFilesystemAllows) {
  ExpectRefused(dir_ / (std::string(300, 'n') + "/run"), "a name in its path is longer than the filesystem allows");
}

TEST_F(RefusedRunDirTest, APathTooLongForItsLineageDatabase) {
  std::string run_dir = dir_.path();
  while (run_dir.size() < 600) run_dir += "/" + std::string(200, 'l');
  ExpectRefused(run_dir, "and SQLite opens at most 504; use a run dir of at most 493 bytes");
  std::error_code ec;
  EXPECT_FALSE(std::filesystem::exists(dir_ / std::string(200, 'l'), ec)) << "created before it was refused";
}

TEST_F(RefusedRunDirTest, AReadOnlyFilesystem) {
  const std::string ro = dir_ / "ro";
  std::filesystem::create_directories(ro);
  if (::mount("tmpfs", ro.c_str(), "tmpfs", MS_RDONLY, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a read-only tmpfs here (" << std::strerror(errno) << "; needs root)";
  }
  ExpectRefused(ro, "it is on a read-only filesystem (create a file in it: Read-only file system)");
  ExpectRefused(ro + "/run", "it is on a read-only filesystem (create it: Read-only file system)");
  ::umount(ro.c_str());
}

}  // namespace
}  // namespace holdfast
