// Role groups ([[roles]] of the job file) under a real holdfastd: stand-in
// learner ranks and role processes (tests/daemon/role_test_process.cc) that
// write progress records, and real signals. Each case checks what on-call
// would notice: which pids changed, the generation, `runctl status`,
// lineage's events and `runctl triage`, and that nothing outlives the run.
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/daemon_client.h"
#include "tests/support/subprocess.h"

namespace holdfast {
namespace {

using testing::BuildPath;
using testing::ChildProcess;
using testing::LatestRunEvents;
using testing::OpenLineageReadOnly;
using testing::ProcessResult;
using testing::ReadFile;
using testing::RunProcess;
using testing::TempDir;
using testing::WaitForStatus;
using testing::WriteFile;

bool Gone(int64_t pid) { return kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH; }

class RolesTest : public ::testing::Test {
 protected:
  RolesTest() : dir_("roles") {}

  // Learner: 2 stand-in ranks. `roles`: the [[roles]] text.
  void WriteJob(const std::string& roles, const std::string& supervise_extra = "") {
    const std::string prog = BuildPath("tests/role_test_process");
    std::ostringstream os;
    os << "[job]\nname = \"roles-test\"\ncommand = [\"" << prog << "\", \"learner\"]\nnproc = 2\n"
       << "[supervise]\npoll_ms = 50\nhang_min_s = 30\nstartup_timeout_s = 60\nrestart_budget = 3\n"
       << "term_grace_s = 2\nbackoff_initial_s = 0.1\nhealth_prelaunch = false\nhealth_poll_s = 0\n"
       << "progress_dir = \"" << dir_ / "shm" << "\"\n"
       << supervise_extra << roles;
    WriteFile(dir_ / "job.toml", os.str());
  }
  std::string RoleText(const std::string& name, int count, const std::string& extra = "") const {
    return "[[roles]]\nname = \"" + name + "\"\ncommand = [\"" + BuildPath("tests/role_test_process") +
           "\", \"role\"]\ncount = " + std::to_string(count) + "\n" + extra;
  }

  std::vector<std::string> Daemon() const {
    return {BuildPath("daemon/holdfastd"), "--run-dir", dir_ / "run", "--config", dir_ / "job.toml"};
  }

  // Every rank running with a step, every role process running with a step.
  static bool AllStepping(const RunStatus& s, size_t roles) {
    if (s.state != "running" || s.nodes.empty() || s.nodes[0].ranks.size() != 2 || s.roles.size() != roles) {
      return false;
    }
    for (const auto& r : s.nodes[0].ranks) {
      if (r.state != "running" || r.step < 1) return false;
    }
    for (const auto& r : s.roles) {
      if (r.state != "running" || !r.step || *r.step < 1) return false;
    }
    return true;
  }
  static std::vector<int64_t> RankPids(const RunStatus& s) {
    std::vector<int64_t> out;
    for (const auto& r : s.nodes[0].ranks) out.push_back(r.pid);
    return out;
  }

  ProcessResult Runctl(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {BuildPath("cli/runctl"), "--run-dir", dir_ / "run"};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProcess(argv);
  }

  TempDir dir_;
};

// The whole story of an RL-like job: two "alone" role processes beside a
// 2-rank learner. A killed role process restarts alone; a stopped one is found
// hung, killed and restarted alone; a killed learner rank restarts the
// learner's generation and nothing else; the run ends succeeded with no
// process left behind.
TEST_F(RolesTest, AloneRolesRestartAloneAndSurviveALearnerRestart) {
  WriteJob(RoleText("rollout", 2, "hang_s = 1.5\nenv = { ROLE_SETTING = \"x\" }\n"));
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  auto st = WaitForStatus(daemon, dir_ / "run", [](const RunStatus& s) { return AllStepping(s, 2); });
  ASSERT_TRUE(st.has_value()) << ReadFile(dir_ / "daemon.log");
  EXPECT_EQ(st->generation, 0);
  EXPECT_EQ(st->roles[0].role, "rollout");
  EXPECT_EQ(st->roles[1].index, 1);
  EXPECT_EQ(st->roles[0].restart, "alone");
  const std::vector<int64_t> ranks = RankPids(*st);
  const int64_t r0 = st->roles[0].pid, r1 = st->roles[1].pid;

  // The launch contract of a role process and of a learner rank.
  const std::string env = ReadFile(dir_ / "run/env-rollout-1.txt");
  EXPECT_NE(env.find("HOLDFAST_ROLE=rollout\n"), std::string::npos) << env;
  EXPECT_NE(env.find("HOLDFAST_ROLE_INDEX=1\n"), std::string::npos) << env;
  EXPECT_NE(env.find("HOLDFAST_ROLE_COUNT=2\n"), std::string::npos) << env;
  EXPECT_NE(env.find("HOLDFAST_RUN_ID=" + st->run_id + "\n"), std::string::npos) << env;
  EXPECT_NE(env.find("HOLDFAST_RUN_DIR=" + dir_ / "run\n"), std::string::npos) << env;
  EXPECT_NE(env.find("HOLDFAST_STORE_ADDR=127.0.0.1:"), std::string::npos) << env;  // the local node's address
  EXPECT_NE(env.find("HOLDFAST_NODE_ADDR=127.0.0.1\n"), std::string::npos) << env;
  EXPECT_NE(env.find("HOLDFAST_PROGRESS_PATH=" + dir_ / "shm/"), std::string::npos) << env;
  EXPECT_NE(env.find("HOLDFAST_RANK=\n"), std::string::npos) << "a role process is not a rank: " << env;
  EXPECT_NE(ReadFile(dir_ / "run/env-learner-0.txt").find("HOLDFAST_ROLE=learner\n"), std::string::npos);
  EXPECT_NE(ReadFile(dir_ / "run/logs/a1-role-rollout-0.log").find("role rollout process 0 of 2"), std::string::npos);

  // `runctl status` shows the roles.
  ProcessResult status = Runctl({"status"});
  EXPECT_EQ(status.exit_code, 0) << status.output;
  EXPECT_NE(status.output.find("ROLE"), std::string::npos) << status.output;
  EXPECT_NE(status.output.find("rollout"), std::string::npos) << status.output;
  EXPECT_NE(status.output.find(std::to_string(r1)), std::string::npos) << status.output;

  // 1. SIGKILL of rollout[0]: only it restarts.
  ASSERT_EQ(kill(static_cast<pid_t>(r0), SIGKILL), 0);
  st = WaitForStatus(daemon, dir_ / "run", [&](const RunStatus& s) {
    return AllStepping(s, 2) && s.roles[0].pid != r0 && s.roles[0].restarts == 1;
  });
  ASSERT_TRUE(st.has_value()) << ReadFile(dir_ / "daemon.log");
  EXPECT_EQ(st->generation, 0);
  EXPECT_EQ(RankPids(*st), ranks) << "the learner's ranks must not restart";
  EXPECT_EQ(st->roles[1].pid, r1) << "the other role process must not restart";
  EXPECT_EQ(st->restarts_used, 0) << "the learner's budget is not spent by a role";
  const int64_t r0b = st->roles[0].pid;

  // 2. SIGSTOP of rollout[1] (hang_s 1.5): found hung, killed, restarted alone.
  ASSERT_EQ(kill(static_cast<pid_t>(r1), SIGSTOP), 0);
  st = WaitForStatus(daemon, dir_ / "run", [&](const RunStatus& s) {
    return AllStepping(s, 2) && s.roles[1].pid != r1 && s.roles[1].restarts == 1;
  });
  ASSERT_TRUE(st.has_value()) << ReadFile(dir_ / "daemon.log");
  EXPECT_TRUE(Gone(r1)) << "the hung process must be killed";
  EXPECT_EQ(st->generation, 0);
  EXPECT_EQ(RankPids(*st), ranks);
  EXPECT_EQ(st->roles[0].pid, r0b);
  const int64_t r1b = st->roles[1].pid;
  ProcessResult triage = Runctl({"triage", "latest"});
  EXPECT_EQ(triage.exit_code, 0) << triage.output;
  EXPECT_NE(triage.output.find("incident  role_hang"), std::string::npos) << triage.output;
  EXPECT_NE(triage.output.find("role rollout[1] hung: no heartbeat or step for"), std::string::npos) << triage.output;
  EXPECT_NE(triage.output.find("culprit   role rollout[1] on "), std::string::npos) << triage.output;
  EXPECT_NE(triage.output.find(", pid " + std::to_string(r1) + ": "), std::string::npos) << triage.output;
  EXPECT_NE(triage.output.find("process stopped"), std::string::npos) << triage.output;
  EXPECT_NE(triage.output.find("restart alone"), std::string::npos) << triage.output;
  EXPECT_NE(triage.output.find("roles.md"), std::string::npos) << triage.output;

  // 3. SIGKILL of learner rank 1: the learner's generation restarts; the roles run on.
  ASSERT_EQ(kill(static_cast<pid_t>(ranks[1]), SIGKILL), 0);
  st = WaitForStatus(daemon, dir_ / "run", [&](const RunStatus& s) { return s.generation == 1 && AllStepping(s, 2); });
  ASSERT_TRUE(st.has_value()) << ReadFile(dir_ / "daemon.log");
  EXPECT_NE(RankPids(*st), ranks);
  EXPECT_EQ(st->roles[0].pid, r0b) << "an \"alone\" role keeps running through a learner restart";
  EXPECT_EQ(st->roles[1].pid, r1b);
  EXPECT_EQ(st->roles[0].restarts, 1);
  EXPECT_EQ(st->roles[1].restarts, 1);

  // 4. The learner finishes: the run succeeds, the roles are stopped.
  WriteFile(dir_ / "run/finish", "");
  EXPECT_EQ(daemon.Wait(), 0) << ReadFile(dir_ / "daemon.log");
  for (int64_t pid : {r0b, r1b}) EXPECT_TRUE(Gone(pid)) << "role process " << pid << " outlived the run";
  for (int64_t pid : RankPids(*st)) EXPECT_TRUE(Gone(pid));

  auto db = OpenLineageReadOnly(dir_ / "run");
  ASSERT_NE(db, nullptr);
  auto run = db->LatestRun();
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->state, RunState::kSucceeded) << run->cause;
  std::vector<EventRecord> crash, hang, rank_crash;
  for (const EventRecord& e : LatestRunEvents(dir_ / "run")) {
    if (e.kind == "role_crash") crash.push_back(e);
    if (e.kind == "role_hang") hang.push_back(e);
    if (e.kind == "crash") rank_crash.push_back(e);
  }
  ASSERT_EQ(crash.size(), 1u);
  EXPECT_TRUE(crash[0].incident);
  EXPECT_FALSE(crash[0].rank.has_value());
  EXPECT_NE(crash[0].summary.find("role rollout[0] killed by signal 9 (SIGKILL)"), std::string::npos)
      << crash[0].summary;
  EXPECT_NE(crash[0].action.find("restart alone"), std::string::npos) << crash[0].action;
  EXPECT_NE(crash[0].action.find("(restart 1 of 10)"), std::string::npos) << crash[0].action;
  auto ev = nlohmann::json::parse(crash[0].evidence_json);
  EXPECT_EQ(ev["role"], "rollout");
  EXPECT_EQ(ev["role_index"], 0);
  EXPECT_EQ(ev["signal"], 9);
  ASSERT_EQ(hang.size(), 1u);
  ev = nlohmann::json::parse(hang[0].evidence_json);
  EXPECT_EQ(ev["role"], "rollout");
  EXPECT_EQ(ev["role_index"], 1);
  EXPECT_EQ(ev["allowance"], "hang_s");
  EXPECT_EQ(ev["ranks"][0]["proc_state"], "T");
  EXPECT_NE(hang[0].action.find("killed it (SIGKILL); restart alone"), std::string::npos) << hang[0].action;
  ASSERT_EQ(rank_crash.size(), 1u);
  EXPECT_EQ(rank_crash[0].rank, 1);
  auto gens = db->Generations(run->run_id);
  ASSERT_TRUE(gens.ok());
  EXPECT_EQ(gens->size(), 2u);

  ProcessResult lineage = Runctl({"lineage", "latest"});
  EXPECT_EQ(lineage.exit_code, 0) << lineage.output;
  EXPECT_NE(lineage.output.find("[role_crash] "), std::string::npos) << lineage.output;
  EXPECT_NE(lineage.output.find("role rollout[0] killed by signal 9"), std::string::npos) << lineage.output;
  EXPECT_NE(lineage.output.find("[role_hang] "), std::string::npos) << lineage.output;
}

// A role whose budget is spent stops the run with a cause on-call can read;
// the learner checkpoints (exits 75) on its way out.
TEST_F(RolesTest, ASpentRoleBudgetStopsTheRunWithACause) {
  WriteJob(RoleText("reward", 1, "restart_budget = 0\n"));
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  auto st = WaitForStatus(daemon, dir_ / "run", [](const RunStatus& s) { return AllStepping(s, 1); });
  ASSERT_TRUE(st.has_value()) << ReadFile(dir_ / "daemon.log");
  const std::vector<int64_t> ranks = RankPids(*st);
  ASSERT_EQ(kill(static_cast<pid_t>(st->roles[0].pid), SIGKILL), 0);
  EXPECT_EQ(daemon.Wait(), 1) << ReadFile(dir_ / "daemon.log");
  for (int64_t pid : ranks) EXPECT_TRUE(Gone(pid));
  auto db = OpenLineageReadOnly(dir_ / "run");
  ASSERT_NE(db, nullptr);
  auto run = db->LatestRun();
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->state, RunState::kFailed);
  EXPECT_NE(run->cause.find("role reward[0] spent its restart budget of 0; last: role reward[0] killed by signal 9"),
            std::string::npos)
      << run->cause;
  ProcessResult triage = Runctl({"triage", "latest"});
  EXPECT_EQ(triage.exit_code, 0) << triage.output;
  EXPECT_NE(triage.output.find("incident  budget_exhausted"), std::string::npos) << triage.output;
  EXPECT_NE(triage.output.find("culprit   role reward[0]"), std::string::npos) << triage.output;
  EXPECT_NE(triage.output.find("roles.md"), std::string::npos) << triage.output;
  // The learner's ranks were asked to checkpoint and stop, not killed.
  EXPECT_NE(ReadFile(dir_ / "daemon.log").find("exited with code 75"), std::string::npos) << ReadFile(dir_ / "daemon.log");
}

// restart = "learner": the role process's failure restarts the learner group
// (generation + 1) and it with it; an "alone" role keeps its pid.
TEST_F(RolesTest, ALearnerScopedRoleRestartsWithTheLearner) {
  WriteJob(RoleText("helper", 1, "restart = \"learner\"\n") + RoleText("rollout", 1));
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  auto st = WaitForStatus(daemon, dir_ / "run", [](const RunStatus& s) { return AllStepping(s, 2); });
  ASSERT_TRUE(st.has_value()) << ReadFile(dir_ / "daemon.log");
  ASSERT_EQ(st->roles[0].role, "helper");
  EXPECT_EQ(st->roles[0].restart, "learner");
  const int64_t helper = st->roles[0].pid, rollout = st->roles[1].pid;
  const std::vector<int64_t> ranks = RankPids(*st);
  ASSERT_EQ(kill(static_cast<pid_t>(helper), SIGKILL), 0);
  st = WaitForStatus(daemon, dir_ / "run", [&](const RunStatus& s) { return s.generation == 1 && AllStepping(s, 2); });
  ASSERT_TRUE(st.has_value()) << ReadFile(dir_ / "daemon.log");
  EXPECT_NE(st->roles[0].pid, helper);
  EXPECT_EQ(st->roles[0].restarts, 1);
  EXPECT_EQ(st->roles[1].pid, rollout) << "an \"alone\" role keeps running";
  EXPECT_NE(RankPids(*st), ranks);
  EXPECT_EQ(st->restarts_used, 1) << "the learner's budget pays for a restart = \"learner\" role";
  EXPECT_NE(ReadFile(dir_ / "run/env-helper-0.txt").find("HOLDFAST_GENERATION=1\n"), std::string::npos);
  WriteFile(dir_ / "run/finish", "");
  EXPECT_EQ(daemon.Wait(), 0) << ReadFile(dir_ / "daemon.log");
  EXPECT_TRUE(Gone(st->roles[0].pid));
  EXPECT_TRUE(Gone(rollout));
  bool recorded = false;
  for (const EventRecord& e : LatestRunEvents(dir_ / "run")) {
    if (e.kind == "role_crash") {
      recorded = true;
      EXPECT_NE(e.summary.find("role helper[0] killed by signal 9"), std::string::npos) << e.summary;
      EXPECT_NE(e.action.find("restart generation 1"), std::string::npos) << e.action;
    }
  }
  EXPECT_TRUE(recorded);
}

}  // namespace
}  // namespace holdfast
