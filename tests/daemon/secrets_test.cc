// Secrets (docs/cli.md, "Secrets"), end to end with a real holdfastd: a job whose [job.env]
// holds HF_TOKEN runs, its rank sees the real value, and what is kept for reading — lineage.db
// (its -wal too), `runctl lineage`, the HTML report — holds it redacted; the files that hold a
// job's environment or job file are owner-only (0600): lineage.db, its -wal/-shm, the job file
// copy for a later resume, and slurm-job.json as the Slurm scheduler writes it.
#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/subprocess.h"
#ifdef HOLDFAST_TEST_HAVE_SLURM
#include "scheduler/slurm_scheduler.h"
#endif

namespace holdfast {
namespace {

using testing::BuildPath;
using testing::ProcessResult;
using testing::ReadFile;
using testing::RunProcess;
using testing::TempDir;
using testing::WriteFile;

constexpr char kToken[] = "hf_SeCrEt0123456789abcdef";

bool Has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

// The permission bits of `path`; -1 when it does not exist.
int Mode(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int>(st.st_mode & 07777) : -1;
}

// The newest run's id from `runctl runs --json` ({"runs": [...]}, newest first).
std::string RunIdOf(const std::string& runs_json) {
  const nlohmann::json j = nlohmann::json::parse(runs_json, nullptr, false);
  if (!j.is_object() || !j.contains("runs") || !j["runs"].is_array() || j["runs"].empty()) return "";
  return j["runs"][0].value("run_id", "");
}

TEST(SecretsTest, TheRankGetsTheTokenLineageAndReportsHoldItRedactedAndTheFilesAreOwnerOnly) {
  TempDir dir("secrets");
  const std::string run_dir = dir / "run";
  // The rank writes what it was given, then exits 0: the run succeeds.
  WriteFile(dir / "job.toml",
            "[job]\nname = \"secret-job\"\nnproc = 1\ncommand = [\"/bin/sh\", \"-c\", "
            "\"printf %s \\\"$HF_TOKEN\\\" > " + dir / "seen" + "; printf %s \\\"$NCCL_DEBUG\\\" > " + dir / "plain" +
            "\"]\n[job.env]\nHF_TOKEN = \"" + kToken + "\"\nNCCL_DEBUG = \"WARN\"\n"
            "[supervise]\nhealth_prelaunch = false\npoll_ms = 50\nprogress_dir = \"" + dir / "shm" + "\"\n");
  ProcessResult d = RunProcess({BuildPath("daemon/holdfastd"), "--run-dir", run_dir, "--config", dir / "job.toml"});
  ASSERT_EQ(d.exit_code, 0) << d.output;

  // The running job got the real values.
  EXPECT_EQ(ReadFile(dir / "seen"), kToken);
  EXPECT_EQ(ReadFile(dir / "plain"), "WARN");

  // Owner-only files: lineage.db (and its -wal/-shm where they are left), the job file copy.
  EXPECT_EQ(Mode(run_dir + "/lineage.db"), 0600);
  for (const char* suffix : {"-wal", "-shm"}) {
    const int mode = Mode(run_dir + "/lineage.db" + suffix);
    if (mode != -1) {
      EXPECT_EQ(mode, 0600) << suffix;
    }
  }
  ProcessResult runs = RunProcess({BuildPath("cli/runctl"), "--run-dir", run_dir, "runs", "--json"});
  ASSERT_EQ(runs.exit_code, 0) << runs.output;
  const std::string run_id = RunIdOf(runs.output);
  ASSERT_FALSE(run_id.empty()) << runs.output;
  const std::string copy = run_dir + "/job-" + run_id + ".toml";
  EXPECT_EQ(Mode(copy), 0600) << copy;
  EXPECT_TRUE(Has(ReadFile(copy), kToken)) << "the copy a resume reads has the real value";

  // Nothing kept for reading has the token: not lineage's bytes, nor runctl's output, nor the report.
  for (const char* f : {"/lineage.db", "/lineage.db-wal"}) {
    EXPECT_FALSE(Has(ReadFile(run_dir + f), kToken)) << f;
  }
  std::string lineage_db;
  {
    ProcessResult q = RunProcess({"/usr/bin/sqlite3", run_dir + "/lineage.db", "SELECT config_text FROM run"});
    ASSERT_EQ(q.exit_code, 0) << q.output;
    lineage_db = q.output;
  }
  EXPECT_TRUE(Has(lineage_db, "HF_TOKEN = \"<redacted>\"")) << lineage_db;
  EXPECT_TRUE(Has(lineage_db, "NCCL_DEBUG = \"WARN\"")) << lineage_db;
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {"lineage", run_id}, {"--json", "lineage", run_id}, {"status"}, {"--json", "status"}, {"triage", run_id}}) {
    args.insert(args.begin(), {BuildPath("cli/runctl"), "--run-dir", run_dir});
    ProcessResult r = RunProcess(args);
    EXPECT_FALSE(Has(r.output, kToken)) << args[3] << ":\n" << r.output;
  }
  ProcessResult report = RunProcess({BuildPath("cli/runctl"), "--run-dir", run_dir, "report", run_id, "--out",
                                     dir / "report.html"});
  ASSERT_EQ(report.exit_code, 0) << report.output;
  EXPECT_FALSE(Has(ReadFile(dir / "report.html"), kToken));
  EXPECT_FALSE(Has(ReadFile(dir / "report.html"), std::string("hf_SeCrEt")));

  // With the original job file gone, a resume runs the job from the owner-only copy: the
  // rank gets the real token again, not "<redacted>".
  std::filesystem::remove(dir / "job.toml");
  std::filesystem::remove(dir / "seen");
  ProcessResult resumed = RunProcess({BuildPath("daemon/holdfastd"), "--run-dir", run_dir, "--resume", run_id});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(ReadFile(dir / "seen"), kToken) << resumed.output;
  EXPECT_EQ(Mode(copy), 0600);
}

TEST(SecretsTest, ALineageDbLeftWorldReadableIsNarrowedWhenItsOwnerOpensIt) {
  TempDir dir("secrets_old");
  const std::string run_dir = dir / "run";
  WriteFile(dir / "job.toml", "[job]\nname = \"old\"\ncommand = [\"/bin/true\"]\n[supervise]\nhealth_prelaunch = false\n"
                              "progress_dir = \"" + dir / "shm" + "\"\n");
  ASSERT_EQ(RunProcess({BuildPath("daemon/holdfastd"), "--run-dir", run_dir, "--config", dir / "job.toml"}).exit_code, 0);
  ASSERT_EQ(::chmod((run_dir + "/lineage.db").c_str(), 0644), 0);  // as a build before this one left it
  ProcessResult d = RunProcess({BuildPath("daemon/holdfastd"), "--run-dir", run_dir, "--config", dir / "job.toml"});
  ASSERT_EQ(d.exit_code, 0) << d.output;
  EXPECT_EQ(Mode(run_dir + "/lineage.db"), 0600);
}

#ifdef HOLDFAST_TEST_HAVE_SLURM
TEST(SecretsTest, TheSavedSlurmSubmissionIsOwnerOnlyEvenOverAnOldWorldReadableOne) {
  TempDir dir("secrets_slurm");
  const std::string path = SavedSubmissionPath(dir.path());
  WriteFile(path, "{}\n");
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  SlurmSubmission sub;
  sub.script = "#!/bin/sh\nsrun holdfastd\n";
  sub.environment = {"HF_TOKEN=" + std::string(kToken), "PATH=/usr/bin"};
  ASSERT_TRUE(SaveSubmission(path, sub).ok());
  EXPECT_EQ(Mode(path), 0600);
  // The resubmission needs the real environment: the file has it, readable by its owner alone.
  auto loaded = LoadSubmission(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->environment, sub.environment);
}
#endif

}  // namespace
}  // namespace holdfast
