// The fixture of the Slurm suite: a real Slurm cluster (tests/slurm/cluster.sh,
// the ctest fixture slurm_cluster: munged, slurmctld and slurmd n1..n3, each
// node in its own network namespace at 10.77.0.11..13), jobs submitted with the
// shipped examples/slurm/holdfast.sbatch, one holdfastd per node supervising
// real holdfast-train ranks, and the fault-free references (same config, 2
// ranks, no supervisor) the final parameters must equal.
//
// A test's files live in SUITE_DIR/<test name> (SUITE_DIR: HOLDFAST_SLURM_SUITE_DIR,
// default /tmp/hf-slurm-suite, the directory cluster.sh wrote the Prolog and
// EpilogSlurmctld wrappers into): every node sees them, the network namespaces
// share the file system. The folder is removed when the test passes and kept,
// for a person to read, when it fails.
//
// Waiting: the cluster is polled (squeue, scontrol, lineage.db) until what the
// test waits for is there; the upper bounds are failure guards, never asserted.
//
// Not thread-safe: one test at a time (ctest RESOURCE_LOCK slurm_cluster).
#pragma once

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "lineage/lineage_db.h"
#include "tests/support/subprocess.h"

namespace holdfast {

using testing::BuildPath;
using testing::ProcessResult;
using testing::ReadFile;
using testing::RunProcess;
using testing::WriteFile;

// The two training configurations the suite uses.
enum class Train {
  kShort,  // 30 steps, a checkpoint every 5: restarts and requeues
  kLong,   // 200 steps, a checkpoint every 20: a run that lasts while the test signals it
};

inline std::string SuiteDir() {
  const char* d = std::getenv("HOLDFAST_SLURM_SUITE_DIR");
  return d != nullptr && *d != '\0' ? d : "/tmp/hf-slurm-suite";
}
inline std::string SlurmStateDir() {
  const char* d = std::getenv("HOLDFAST_SLURM_DIR");
  return d != nullptr && *d != '\0' ? d : "/tmp/holdfast-slurm";
}
inline std::string SourcePath(const std::string& relative) {
  const char* d = std::getenv("HOLDFAST_SOURCE_DIR");
  return std::string(d != nullptr ? d : ".") + "/" + relative;
}

// The absolute path of a program on PATH or in the usual system folders; empty when missing.
inline std::string Tool(const std::string& name) {
  std::string dirs = std::getenv("PATH") != nullptr ? std::getenv("PATH") : "";
  dirs += ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  std::stringstream ss(dirs);
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) continue;
    const std::string p = dir + "/" + name;
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

// Runs a Slurm client command (scontrol, squeue, ...).
inline ProcessResult Slurm(const std::string& tool, std::vector<std::string> args) {
  args.insert(args.begin(), Tool(tool));
  if (args[0].empty()) return ProcessResult{127, tool + " not found"};
  return RunProcess(args);
}

// `KEY=VALUE` of `scontrol show job -o` (one line; values here hold no spaces).
inline std::string Field(const std::string& line, const std::string& key) {
  size_t at = 0;
  for (;;) {
    at = line.find(key + "=", at);
    if (at == std::string::npos) return "";
    if (at == 0 || line[at - 1] == ' ') break;
    at += key.size();
  }
  const size_t from = at + key.size() + 1;
  const size_t end = line.find(' ', from);
  std::string v = line.substr(from, end == std::string::npos ? std::string::npos : end - from);
  while (!v.empty() && (v.back() == '\n' || v.back() == '\r')) v.pop_back();
  return v;
}

// Runs `f` when it goes out of scope: puts the cluster back for the next test, even after a failure.
class ScopeExit {
 public:
  explicit ScopeExit(std::function<void()> f) : f_(std::move(f)) {}
  ~ScopeExit() { f_(); }
  ScopeExit(const ScopeExit&) = delete;
  ScopeExit& operator=(const ScopeExit&) = delete;

 private:
  std::function<void()> f_;
};

class SlurmSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite();
  static void TearDownTestSuite() {}

  void SetUp() override;
  void TearDown() override;

  // ---- the job ----
  // Writes D/job.toml. The ranks' command is D/rank.sh (records the rank's
  // environment and network namespace; with BAD_HOST set, crashes the ranks on
  // that host at step 8 + 6 * generation), then holdfast-train; `fault` adds
  // --inject-fault.
  void WriteJob(Train train, const std::string& fault = "", const std::string& supervise_extra = "");
  // sbatch of examples/slurm/holdfast.sbatch on 2 nodes (with `sbatch_args`,
  // e.g. --time=1, before the script); returns the job id (0 and a failure on error).
  uint32_t Submit(const std::map<std::string, std::string>& env = {}, const std::vector<std::string>& daemon_args = {},
                  const std::vector<std::string>& sbatch_args = {});

  // ---- waiting (the bounds are failure guards) ----
  // Polls `pred` every 100 ms until it holds; false (after a failure naming `what`) after `guard`.
  bool WaitFor(const std::string& what, std::chrono::seconds guard, const std::function<bool()>& pred);
  // Until no job of this test is pending, running or completing (requeues and
  // resubmissions included), seen twice in a row.
  bool WaitForJobsToEnd(std::chrono::seconds guard = std::chrono::seconds(180));
  // Until the ranks committed a checkpoint at `step` or later; returns the
  // newest step known then (the newest checkpoint, or a step lineage recorded).
  std::optional<int64_t> WaitForCheckpoint(int64_t step);
  // The newest complete checkpoint in D/ck (-1: none).
  int64_t NewestCheckpointOnDisk() const;

  // ---- what a user sees ----
  std::string ShowJob(uint32_t job);        // `scontrol show job J -o`, empty when gone
  std::string JobOutputs() const;           // every D/job-*.out, in job order
  std::string Diagnostics() const;          // outputs, logs and the cluster's view
  std::unique_ptr<LineageDb> Lineage() const;  // nullptr while there is no lineage.db
  void ExpectFinalParamsEqualReference(Train train) const;

  std::string D(const std::string& name) const { return dir_ + "/" + name; }

  static inline std::string setup_error_;
  static inline std::map<Train, std::string> reference_;
  std::string dir_;
  std::string job_name_;
};

}  // namespace holdfast
