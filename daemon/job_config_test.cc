#include "daemon/job_config.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace holdfast {
namespace {

std::string Write(const std::string& text) {
  static int n = 0;
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("hf_job_" + std::to_string(getpid()) + "_" + std::to_string(n++) + ".toml"))
                               .string();
  std::ofstream(path) << text;
  return path;
}

TEST(JobConfigTest, ReadsEverySection) {
  auto cfg = LoadJobConfig(Write("[job]\nname = \"x\"\ncommand = [\"/bin/true\", \"-v\"]\nnproc = 4\n"
                                 "env = { A = \"1\" }\ncheckpoint_dir = \"ck\"\ntokens_per_step = 8192\n"
                                 "[supervise]\nhang_min_s = 2\nrestart_budget = 5\nhealth_prelaunch = false\n"
                                 "[lineage]\njournal_mode = \"delete\"\n"
                                 "[health]\ncheckpoint_min_free_gb = 1\n"));
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->command, (std::vector<std::string>{"/bin/true", "-v"}));
  EXPECT_EQ(cfg->nproc, 4);
  EXPECT_EQ(cfg->env.at("A"), "1");
  EXPECT_EQ(cfg->tokens_per_step, 8192);
  EXPECT_DOUBLE_EQ(cfg->supervise.hang_min_s, 2.0);
  EXPECT_EQ(cfg->supervise.restart_budget, 5);
  EXPECT_FALSE(cfg->supervise.health_prelaunch);
  EXPECT_EQ(cfg->journal_mode, JournalMode::kDelete);
  EXPECT_NE(cfg->text.find("[health]"), std::string::npos);  // recorded in lineage, read by health/
}

TEST(JobConfigTest, StragglerKeysDefaultOnAndCanBeTurnedOff) {
  auto defaults = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n"));
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_DOUBLE_EQ(defaults->supervise.straggler_factor, 2.0);
  EXPECT_DOUBLE_EQ(defaults->supervise.straggler_min_duration_s, 30.0);

  auto set = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n"
                                 "[supervise]\nstraggler_factor = 3.5\nstraggler_min_duration_s = 120\n"));
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_DOUBLE_EQ(set->supervise.straggler_factor, 3.5);
  EXPECT_DOUBLE_EQ(set->supervise.straggler_min_duration_s, 120.0);

  auto off = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n[supervise]\nstraggler_factor = 0\n"));
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_DOUBLE_EQ(off->supervise.straggler_factor, 0.0);

  // A factor near 1 would name a straggler in every run.
  auto low = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n[supervise]\nstraggler_factor = 0.5\n"));
  ASSERT_FALSE(low.ok());
  EXPECT_NE(low.status().message().find(".toml:4: key 'supervise.straggler_factor' must be 0 (off) or between 1.1"),
            std::string::npos)
      << low.status().message();

  auto negative =
      LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n[supervise]\nstraggler_min_duration_s = -1\n"));
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("key 'supervise.straggler_min_duration_s' must be between 0 and 86400"),
            std::string::npos)
      << negative.status().message();
}

TEST(JobConfigTest, NodeTimeoutDefaultsTo30SecondsAnd0TurnsItOff) {
  auto defaults = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n"));
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_DOUBLE_EQ(defaults->supervise.node_timeout_s, 30.0);
  auto off = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n[supervise]\nnode_timeout_s = 0\n"));
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_DOUBLE_EQ(off->supervise.node_timeout_s, 0.0);
  auto negative = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n[supervise]\nnode_timeout_s = -1\n"));
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("key 'supervise.node_timeout_s' must be between 0 and 86400"),
            std::string::npos)
      << negative.status().message();
}

// How long before the time limit beyond the save and two steps the stop's
// checkpoint starts after Slurm's warning (daemon/preempt_plan.h).
TEST(JobConfigTest, PreemptMarginDefaultsTo15SecondsAndANegativeOneIsRefusedWithTheRange) {
  auto defaults = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n"));
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_DOUBLE_EQ(defaults->supervise.preempt_margin_s, 15.0);
  auto set = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n[supervise]\npreempt_margin_s = 40\n"));
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_DOUBLE_EQ(set->supervise.preempt_margin_s, 40.0);
  auto negative = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n[supervise]\npreempt_margin_s = -5\n"));
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("key 'supervise.preempt_margin_s' must be between 0 and 86400, got -5"),
            std::string::npos)
      << negative.status().message();
  auto text = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n[supervise]\npreempt_margin_s = \"15s\"\n"));
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("supervise.preempt_margin_s"), std::string::npos) << text.status().message();
}

// The bounds of the exclude-and-requeue loop (daemon/recovery_policy.h "Bounds").
TEST(JobConfigTest, RequeueBoundsDefaultAndRefuseNegatives) {
  auto defaults = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n"));
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_EQ(defaults->supervise.max_requeues, 5);
  EXPECT_EQ(defaults->supervise.max_excluded_nodes, 3);
  auto set = LoadJobConfig(
      Write("[job]\ncommand = [\"/bin/true\"]\n[supervise]\nmax_requeues = 0\nmax_excluded_nodes = 8\n"));
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->supervise.max_requeues, 0);
  EXPECT_EQ(set->supervise.max_excluded_nodes, 8);
  auto negative = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n[supervise]\nmax_excluded_nodes = -1\n"));
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find(":4: key 'supervise.max_excluded_nodes' must be between 0 and 1000000"),
            std::string::npos)
      << negative.status().message();
}

TEST(JobConfigTest, BadInputNamesFileLineAndKey) {
  auto unknown = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n[supervise]\nhang_minimum = 3\n"));
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find(".toml:4: unknown key 'supervise.hang_minimum'"), std::string::npos)
      << unknown.status().message();
  EXPECT_NE(unknown.status().message().find("hang_min_s"), std::string::npos);  // lists the known keys

  auto typed = LoadJobConfig(Write("[job]\ncommand = \"/bin/true\"\n"));
  ASSERT_FALSE(typed.ok());
  EXPECT_NE(typed.status().message().find(":2: key 'job.command' must be an array of strings"), std::string::npos)
      << typed.status().message();

  auto ranged = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\nnproc = 0\n"));
  EXPECT_NE(ranged.status().message().find("key 'job.nproc' must be between 1 and 256"), std::string::npos)
      << ranged.status().message();

  auto elastic = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\nmin_nodes = 2\nmax_nodes = 3\n"));
  ASSERT_TRUE(elastic.ok()) << elastic.status().ToString();
  EXPECT_EQ(elastic->min_nodes, 2);
  EXPECT_EQ(elastic->max_nodes, 3);
  auto never = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\nmin_nodes = 4\nmax_nodes = 3\n"));
  ASSERT_FALSE(never.ok());
  EXPECT_NE(never.status().message().find(":3: job.min_nodes = 4 is more than job.max_nodes = 3"), std::string::npos)
      << never.status().message();

  auto missing = LoadJobConfig(Write("[job]\nname = \"x\"\n"));
  EXPECT_NE(missing.status().message().find("job.command is required"), std::string::npos)
      << missing.status().message();

  auto section = LoadJobConfig(Write("[jobs]\n"));
  EXPECT_NE(section.status().message().find("unknown section 'jobs'"), std::string::npos)
      << section.status().message();

  auto syntax = LoadJobConfig(Write("[job\n"));
  EXPECT_NE(syntax.status().message().find("TOML syntax error"), std::string::npos) << syntax.status().message();

  EXPECT_EQ(LoadJobConfig("/nonexistent/job.toml").status().code(), StatusCode::kNotFound);
}

// A journal mode that is not one of the choices is refused when the file
// loads, naming the key and the choices (it used to be a string compared later).
TEST(JobConfigTest, AJournalModeOutsideItsChoicesIsRefusedAtLoad) {
  auto bad = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n[lineage]\njournal_mode = \"WAL2\"\n"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("journal_mode"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("wal|delete|truncate"), std::string::npos) << bad.status().message();
  auto absent = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n"));
  ASSERT_TRUE(absent.ok()) << absent.status().ToString();
  EXPECT_EQ(absent->journal_mode, JournalMode::kWal);
  auto truncate = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n[lineage]\njournal_mode = \"truncate\"\n"));
  ASSERT_TRUE(truncate.ok()) << truncate.status().ToString();
  EXPECT_EQ(truncate->journal_mode, JournalMode::kTruncate);
}

// The stack capture's keys: read, and an empty tool or an unbounded limit refused at load.
TEST(JobConfigTest, StackCaptureKeysAreReadAndBadOnesRefused) {
  auto cfg = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n[supervise]\nstack_timeout_s = 2.5\n"
                                 "stack_tool = \"/opt/elfutils/bin/eu-stack\"\n"));
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->supervise.stack_timeout_s, 2.5);
  EXPECT_EQ(cfg->supervise.stack_tool, "/opt/elfutils/bin/eu-stack");
  auto empty = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n[supervise]\nstack_tool = \"\"\n"));
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(empty.status().message().find("stack_timeout_s = 0"), std::string::npos) << empty.status().message();
  auto unbounded = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n[supervise]\nstack_timeout_s = 3600\n"));
  ASSERT_FALSE(unbounded.ok());
  EXPECT_NE(unbounded.status().message().find("stack_timeout_s"), std::string::npos) << unbounded.status().message();
}

// The memory snapshot tier: off unless a budget is given; bad values refused at load, saying what to write.
TEST(JobConfigTest, RecoveryKeysAreReadAndBadOnesRefused) {
  auto off = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n"));
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_FALSE(off->recovery.enabled());
  auto cfg = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n[recovery]\nmemory_budget_mb = 512\n"
                                 "snapshot_every = 2\nmemory_dir = \"/run/hf\"\n"));
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_TRUE(cfg->recovery.enabled());
  EXPECT_EQ(cfg->recovery.memory_budget_mb, 512);
  EXPECT_EQ(cfg->recovery.snapshot_every, 2);
  EXPECT_EQ(cfg->recovery.memory_dir, "/run/hf");
  EXPECT_EQ(cfg->recovery.replica_step(), 20) << "every 10th snapshot by default";
  auto huge = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n[recovery]\nsnapshot_every = 1125899906842624\n"
                                  "replica_every = 3\n"));
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find(":5: recovery.snapshot_every x recovery.replica_every"), std::string::npos)
      << huge.status().message();
  auto by_default =
      LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n[recovery]\nsnapshot_every = 1125899906842624\n"));
  ASSERT_FALSE(by_default.ok()) << "x the default replica_every of 10";
  EXPECT_NE(by_default.status().message().find(
                ":4: recovery.snapshot_every x recovery.replica_every (1125899906842624 x 10)"),
            std::string::npos)
      << by_default.status().message();
  auto none = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n[recovery]\nreplica_every = 0\n"));
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("replica_every"), std::string::npos) << none.status().message();
  auto relative = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n[recovery]\nmemory_dir = \"shm\"\n"));
  ASSERT_FALSE(relative.ok());
  EXPECT_NE(relative.status().message().find(":4: key 'recovery.memory_dir' must be an absolute path on a tmpfs"),
            std::string::npos)
      << relative.status().message();
  auto never = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n[recovery]\nsnapshot_every = 0\n"));
  ASSERT_FALSE(never.ok());
  EXPECT_NE(never.status().message().find("snapshot_every"), std::string::npos) << never.status().message();
  auto typo = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n[recovery]\nmemory_budget = 5\n"));
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("memory_budget_mb"), std::string::npos) << typo.status().message();
}

// Warm spares: off by default; only for holdfast-train, which speaks the spare
// protocol: any other program would run rank-less while it "waits".
TEST(JobConfigTest, WarmSparesOnlyForHoldfastTrain) {
  auto off = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n"));
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_FALSE(off->recovery.warm_spares);
  auto on = LoadJobConfig(Write("[job]\ncommand = [\"build/trainer/holdfast-train\", \"--config\", \"t.toml\"]\n"
                                "[recovery]\nwarm_spares = true\n"));
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  EXPECT_TRUE(on->recovery.warm_spares);
  auto other = LoadJobConfig(Write("[job]\ncommand = [\"/usr/bin/python3\", \"train.py\"]\n[recovery]\nwarm_spares = true\n"));
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("only holdfast-train speaks that protocol"), std::string::npos)
      << other.status().message();
  EXPECT_NE(other.status().message().find("'/usr/bin/python3'"), std::string::npos) << other.status().message();
  auto typed = LoadJobConfig(Write("[job]\ncommand = [\"holdfast-train\"]\n[recovery]\nwarm_spares = \"yes\"\n"));
  ASSERT_FALSE(typed.ok());
  EXPECT_NE(typed.status().message().find("warm_spares"), std::string::npos) << typed.status().message();
}

TEST(JobConfigTest, ReadsRoleGroups) {
  auto cfg = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\nenv = { A = \"1\" }\n"
                                 "[[roles]]\nname = \"rollout\"\ncommand = [\"/bin/sleep\", \"9\"]\ncount = 2\n"
                                 "hang_s = 60\nenv = { B = \"2\" }\nrestart_budget = 4\n"
                                 "[[roles]]\nname = \"reward_svc-1\"\ncommand = [\"/bin/cat\"]\n"
                                 "restart = \"learner\"\n"));
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  ASSERT_EQ(cfg->roles.size(), 2u);
  const RoleConfig& r = cfg->roles[0];
  EXPECT_EQ(r.name, "rollout");
  EXPECT_EQ(r.command, (std::vector<std::string>{"/bin/sleep", "9"}));
  EXPECT_EQ(r.count, 2);
  EXPECT_EQ(r.restart, RoleRestart::kAlone);
  EXPECT_DOUBLE_EQ(r.hang_s, 60);
  EXPECT_EQ(r.env.at("B"), "2");
  EXPECT_EQ(r.restart_budget, 4);
  const RoleConfig& l = cfg->roles[1];
  EXPECT_EQ(l.name, "reward_svc-1");
  EXPECT_EQ(l.count, 1);  // defaults
  EXPECT_EQ(l.restart, RoleRestart::kLearner);
  EXPECT_DOUBLE_EQ(l.hang_s, 0);
  EXPECT_EQ(l.restart_budget, 10);

  auto none = LoadJobConfig(Write("[job]\ncommand = [\"/bin/true\"]\n"));
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->roles.empty());
}

TEST(JobConfigTest, BadRoleGroupsNameFileLineAndKey) {
  const std::string job = "[job]\ncommand = [\"/bin/true\"]\n";  // lines 1-2
  auto err = [&](const std::string& roles) {
    auto cfg = LoadJobConfig(Write(job + roles));
    EXPECT_FALSE(cfg.ok()) << roles;
    return cfg.ok() ? std::string() : cfg.status().message();
  };
  std::string m = err("[[roles]]\nname = \"a\"\ncommand = [\"/bin/true\"]\ncuont = 2\n");
  EXPECT_NE(m.find(".toml:6: unknown key 'roles[0].cuont'"), std::string::npos) << m;
  EXPECT_NE(m.find("count"), std::string::npos) << m;  // lists the known keys

  m = err("[[roles]]\nname = \"Rollout\"\ncommand = [\"/bin/true\"]\n");
  EXPECT_NE(m.find(".toml:4: key 'roles[0].name' must be 1-64 of a-z, 0-9, '_' and '-', got 'Rollout'"),
            std::string::npos) << m;
  m = err("[[roles]]\nname = \"learner\"\ncommand = [\"/bin/true\"]\n");
  EXPECT_NE(m.find(":4: key 'roles[0].name' cannot be 'learner'"), std::string::npos) << m;
  m = err("[[roles]]\ncommand = [\"/bin/true\"]\n");
  EXPECT_NE(m.find(":3: roles[0].name is required"), std::string::npos) << m;
  m = err("[[roles]]\nname = \"a\"\ncommand = [\"/bin/true\"]\n[[roles]]\nname = \"a\"\ncommand = [\"/bin/true\"]\n");
  EXPECT_NE(m.find(":7: key 'roles[1].name': a role named 'a' is already declared"), std::string::npos) << m;
  m = err("[[roles]]\nname = \"a\"\ncommand = [\"/bin/true\"]\ncount = 0\n");
  EXPECT_NE(m.find(":6: key 'roles[0].count' must be between 1 and 256, got 0"), std::string::npos) << m;
  m = err("[[roles]]\nname = \"a\"\ncommand = [\"/bin/true\"]\nrestart = \"all\"\n");
  EXPECT_NE(m.find(":6: key 'roles[0].restart'"), std::string::npos) << m;
  EXPECT_NE(m.find("alone"), std::string::npos) << m;
  m = err("[[roles]]\nname = \"a\"\n");
  EXPECT_NE(m.find(":3: roles[0].command is required for role 'a'"), std::string::npos) << m;
  m = err("[[roles]]\nname = \"a\"\ncommand = [\"/bin/true\"]\nrestart = \"learner\"\nrestart_budget = 3\n");
  EXPECT_NE(m.find(":7: key 'roles[0].restart_budget' is for restart = \"alone\" roles only"), std::string::npos) << m;
  m = err("[[roles]]\nname = \"a\"\ncommand = [\"/bin/true\"]\nhang_s = -1\n");
  EXPECT_NE(m.find(":6: key 'roles[0].hang_s' must be between 0 and 86400"), std::string::npos) << m;
  m = err("[roles]\nname = \"a\"\n");
  EXPECT_NE(m.find(":3: 'roles' must be an array of tables: declare each role group as [[roles]]"),
            std::string::npos) << m;
}

}  // namespace
}  // namespace holdfast
