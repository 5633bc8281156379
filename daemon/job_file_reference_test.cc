// docs/job-file.md against the loaders: every key they read has a row, every
// row names a key they read, and each default written there is the code's.
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "common/toml_reader.h"
#include "daemon/job_config.h"
#include "health/config.h"

namespace holdfast {
namespace {

struct Row {
  std::vector<std::string> keys;  // the first cell's `dotted.keys`
  std::string default_cell;       // the third cell, as written
};

// The reference's table rows: "| `key` | type | default | meaning |".
std::vector<Row> ReferenceRows(const std::string& text) {
  std::vector<Row> rows;
  std::istringstream in(text);
  std::string line;
  const std::regex key_re("`([a-z_]+(\\.[a-z_]+)+)`");
  while (std::getline(in, line)) {
    if (line.rfind("| `", 0) != 0) continue;
    std::vector<std::string> cells;
    std::string cell;
    std::istringstream cs(line.substr(1));
    while (std::getline(cs, cell, '|')) {
      const size_t b = cell.find_first_not_of(' '), e = cell.find_last_not_of(' ');
      cells.push_back(b == std::string::npos ? "" : cell.substr(b, e - b + 1));
    }
    if (cells.size() < 4) continue;
    Row row;
    for (std::sregex_iterator it(cells[0].begin(), cells[0].end(), key_re), end; it != end; ++it) {
      row.keys.push_back((*it)[1]);
    }
    row.default_cell = cells[2];
    rows.push_back(row);
  }
  return rows;
}

std::string ReadReference() {
  const char* src = std::getenv("HOLDFAST_SOURCE_DIR");
  if (src == nullptr) return "";
  std::ifstream in(std::string(src) + "/docs/job-file.md");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Num(double v) { return "`" + FormatTomlNumber(v) + "`"; }
std::string Str(const std::string& v) { return "`\"" + v + "\"`"; }

// The defaults the code has, as the reference writes them.
std::map<std::string, std::string> CodeDefaults() {
  const JobConfig j;
  const SuperviseConfig& s = j.supervise;
  const RoleConfig r;
  const health::HealthConfig h;
  return {
      {"job.name", Str(j.name)}, {"job.nproc", Num(j.nproc)}, {"job.workdir", Str(j.workdir)},
      {"job.checkpoint_dir", Str(j.checkpoint_dir)}, {"job.tokens_per_step", Num(j.tokens_per_step)},
      {"job.min_nodes", Num(j.min_nodes)}, {"job.max_nodes", Num(j.max_nodes)},
      {"supervise.poll_ms", Num(s.poll_ms)}, {"supervise.hang_factor", Num(s.hang_factor)},
      {"supervise.hang_min_s", Num(s.hang_min_s)},
      {"supervise.stopped_hang_s", Num(s.stopped_hang_s)},
      {"supervise.checkpoint_allowance_s", Num(s.checkpoint_allowance_s)},
      {"supervise.eval_allowance_s", Num(s.eval_allowance_s)},
      {"supervise.restart_budget", Num(s.restart_budget)},
      {"supervise.backoff_initial_s", Num(s.backoff_initial_s)}, {"supervise.backoff_max_s", Num(s.backoff_max_s)},
      {"supervise.term_grace_s", Num(s.term_grace_s)}, {"supervise.node_timeout_s", Num(s.node_timeout_s)},
      {"supervise.max_requeues", Num(s.max_requeues)}, {"supervise.max_excluded_nodes", Num(s.max_excluded_nodes)},
      {"supervise.progress_dir", Str(s.progress_dir)},
      {"supervise.health_prelaunch", s.health_prelaunch ? "`true`" : "`false`"},
      {"supervise.health_poll_s", Num(s.health_poll_s)}, {"supervise.health_sysfs_root", Str(s.health_sysfs_root)},
      {"supervise.straggler_factor", Num(s.straggler_factor)},
      {"supervise.straggler_min_duration_s", Num(s.straggler_min_duration_s)},
      {"supervise.stack_timeout_s", Num(s.stack_timeout_s)}, {"supervise.stack_tool", Str(s.stack_tool)},
      {"lineage.journal_mode", Str("wal")},
      {"recovery.memory_budget_mb", Num(static_cast<double>(j.recovery.memory_budget_mb))},
      {"recovery.snapshot_every", Num(static_cast<double>(j.recovery.snapshot_every))},
      {"recovery.memory_dir", Str(j.recovery.memory_dir)},
      {"recovery.replica_mb_per_s", Num(static_cast<double>(j.recovery.replica_mb_per_s))},
      {"recovery.warm_spares", j.recovery.warm_spares ? "`true`" : "`false`"},
      {"roles.count", Num(r.count)}, {"roles.restart", Str(RoleRestartName(r.restart))},
      {"roles.hang_s", Num(r.hang_s)}, {"roles.restart_budget", Num(r.restart_budget)},
      {"health.expected_gpus", Num(h.expected_gpus)},
      {"health.gpu_uncorrected_ecc_max", Num(static_cast<double>(h.gpu_uncorrected_ecc_max))},
      {"health.gpu_retired_pages_max", Num(static_cast<double>(h.gpu_retired_pages_max))},
      {"health.memtest_mb", Num(static_cast<double>(h.memtest_mb))}, {"health.gemm_tflops_min", Num(h.gemm_tflops_min)},
      {"health.gemm_size", Num(static_cast<double>(h.gemm_size))},
      {"health.nccl_busbw_gbps_min", Num(h.nccl_busbw_gbps_min)},
      {"health.nccl_bytes", Num(static_cast<double>(h.nccl_bytes))},
      {"health.gpu_probe_timeout_s", Num(h.gpu_probe_timeout_s)},
      {"health.expected_ib_ports", Num(h.expected_ib_ports)}, {"health.ib_rate_gbps_min", Num(h.ib_rate_gbps_min)},
      {"health.ib_link_downed_max", Num(static_cast<double>(h.ib_link_downed_max))},
      {"health.ib_link_recovery_max", Num(static_cast<double>(h.ib_link_recovery_max))},
      {"health.ib_error_warn_per_min", Num(h.ib_error_warn_per_min)},
      {"health.ib_error_fail_per_min", Num(h.ib_error_fail_per_min)},
      {"health.ib_xmit_discards_warn_per_min", Num(h.ib_xmit_discards_warn_per_min)},
      {"health.ib_sample_seconds", Num(h.ib_sample_seconds)}, {"health.min_free_memory_gb", Num(h.min_free_memory_gb)},
      {"health.checkpoint_dir", Str(h.checkpoint_dir)},
      {"health.checkpoint_min_free_gb", Num(h.checkpoint_min_free_gb)},
      {"health.checkpoint_write_mb", Num(static_cast<double>(h.checkpoint_write_mb))},
      {"health.checkpoint_write_warn_mbps", Num(h.checkpoint_write_warn_mbps)},
      {"health.checkpoint_write_fail_mbps", Num(h.checkpoint_write_fail_mbps)},
      {"health.cpu_allreduce_elements", Num(static_cast<double>(h.cpu_allreduce_elements))},
      {"health.cpu_allreduce_timeout_s", Num(h.cpu_allreduce_timeout_s)},
      {"health.policy.on_warn", Str(health::ActionName(h.policy.on_warn))},
      {"health.policy.on_skipped", Str(health::ActionName(h.policy.on_skipped))},
  };
}

TEST(JobFileReferenceTest, EveryKeyTheLoadersReadHasARowAndEveryRowAKey) {
  const std::string text = ReadReference();
  ASSERT_FALSE(text.empty()) << "docs/job-file.md not found: run under ctest (HOLDFAST_SOURCE_DIR)";
  std::set<std::string> documented;
  for (const Row& row : ReferenceRows(text)) documented.insert(row.keys.begin(), row.keys.end());
  std::set<std::string> read;
  for (const std::string& k : JobConfigKeys()) read.insert(k);
  for (const std::string& k : health::HealthConfigKeys()) read.insert(k);
  ASSERT_GT(read.size(), 50u);  // the loaders were asked: every section's keys are there
  EXPECT_TRUE(read.count("supervise.startup_timeout_s") && read.count("roles.restart") && read.count("health.policy"));
  for (const std::string& k : read) {
    EXPECT_TRUE(documented.count(k)) << "the loader reads '" << k << "' but docs/job-file.md has no row for it";
  }
  for (const std::string& k : documented) {
    EXPECT_TRUE(read.count(k)) << "docs/job-file.md documents '" << k << "', which no loader reads";
  }
}

TEST(JobFileReferenceTest, EveryDefaultWrittenThereIsTheCodes) {
  const std::string text = ReadReference();
  ASSERT_FALSE(text.empty()) << "docs/job-file.md not found: run under ctest (HOLDFAST_SOURCE_DIR)";
  const auto defaults = CodeDefaults();
  size_t compared = 0;
  for (const Row& row : ReferenceRows(text)) {
    ASSERT_EQ(row.keys.size(), 1u) << "one key per row: " << row.default_cell;
    auto it = defaults.find(row.keys[0]);
    if (it == defaults.end()) continue;  // arrays, tables, required or derived: said in words
    ++compared;
    EXPECT_EQ(row.default_cell, it->second) << "the default of '" << row.keys[0] << "'";
  }
  EXPECT_EQ(compared, defaults.size());
}

TEST(JobFileReferenceTest, TheDerivedStartupTimeoutIsTheOneDocumented) {
  auto job = LoadJobConfigText("[job]\ncommand = [\"x\"]\n", "t");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ResolveSizedDefaults(&*job, 512);
  EXPECT_DOUBLE_EQ(job->supervise.startup_timeout_s, 428);  // the reference's 428 s at 512 ranks
  auto given = LoadJobConfigText("[job]\ncommand = [\"x\"]\n[supervise]\nstartup_timeout_s = 45\n", "t");
  ASSERT_TRUE(given.ok());
  ResolveSizedDefaults(&*given, 4096);
  EXPECT_DOUBLE_EQ(given->supervise.startup_timeout_s, 45);  // a value the job set is never derived
}

}  // namespace
}  // namespace holdfast
