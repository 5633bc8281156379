// The Slurm suite (`ctest -L slurm`, as root): holdfastd under a real Slurm
// cluster whose nodes live in separate network namespaces. Each test submits
// examples/slurm/holdfast.sbatch, injects a fault the way it happens in
// production (a rank crash, a bad node, a failing Prolog, Slurm's warning
// signal, a controller outage, a failed submission) and checks what a user
// would see: the job's state in Slurm, the run's lineage, and final
// parameters bit-identical to a fault-free run.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <set>

#include <nlohmann/json.hpp>

#include "lineage/incident.h"
#include "tests/slurm/slurm_fixture.h"

namespace holdfast {
namespace {

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

// examples/pytorch_ddp's checkpoint file name for a step: ckpt-00000020.pt.
std::string Padded(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%08lld", static_cast<long long>(step));
  return buf;
}

// The run as lineage.db has it: the run, its attempts and events.
struct Recorded {
  RunRecord run;
  std::vector<RunRecord> runs;
  std::vector<AttemptRecord> attempts;
  std::vector<EventRecord> events;

  // The first event of `kind` whose summary or action contains `text`; nullptr when none.
  const EventRecord* Find(const std::string& kind, const std::string& text) const {
    for (const auto& e : events) {
      if (e.kind == kind && (e.summary.find(text) != std::string::npos || e.action.find(text) != std::string::npos)) {
        return &e;
      }
    }
    return nullptr;
  }
  std::string EventList() const {
    std::string s;
    for (const auto& e : events) s += "  " + e.kind + " [" + e.node + "] " + e.summary + " -> " + e.action + "\n";
    return s;
  }
};

class SlurmJobs : public SlurmSuite {
 protected:
  // Fails (and returns nullopt) when there is no run in lineage.db.
  std::optional<Recorded> Record() const {
    auto db = Lineage();
    if (db == nullptr) {
      ADD_FAILURE() << "no lineage.db in " << D("run");
      return std::nullopt;
    }
    Recorded r;
    auto run = db->LatestRun();
    auto runs = db->ListRuns(0);
    if (!run.ok() || !runs.ok()) {
      ADD_FAILURE() << "lineage: " << (run.ok() ? runs.status() : run.status()).ToString();
      return std::nullopt;
    }
    r.run = *run;
    r.runs = *runs;
    auto attempts = db->Attempts(r.run.run_id);
    auto events = db->Events(r.run.run_id, 0);
    if (!attempts.ok() || !events.ok()) {
      ADD_FAILURE() << "lineage: " << (attempts.ok() ? events.status() : attempts.status()).ToString();
      return std::nullopt;
    }
    r.attempts = *attempts;
    r.events = *events;
    return r;
  }

  // Pids of this test's holdfastd processes (not the srun that started them).
  std::vector<pid_t> Daemons() const {
    ProcessResult r = RunProcess({Tool("pgrep"), "-f", "^" + BuildPath("daemon/holdfastd") + " --run-dir " + D("run") + "( |$)"});
    std::vector<pid_t> pids;
    std::stringstream ss(r.output);
    for (long pid; ss >> pid;) pids.push_back(static_cast<pid_t>(pid));
    return pids;
  }
};

// Whether slurmctld (from its pid file) is alive: a zombie counts as gone.
bool ControllerAlive(pid_t* pid_out = nullptr) {
  const std::string text = ReadFile(SlurmStateDir() + "/run/slurmctld.pid");
  const pid_t pid = static_cast<pid_t>(std::strtol(text.c_str(), nullptr, 10));
  if (pid_out != nullptr) *pid_out = pid;
  if (pid <= 0) return false;
  const std::string status = ReadFile("/proc/" + std::to_string(pid) + "/status");
  return ReadFile("/proc/" + std::to_string(pid) + "/comm") == "slurmctld\n" &&
         status.find("State:\tZ") == std::string::npos && status.find("State:\tX") == std::string::npos;
}

// (a) A rank crashes once: holdfastd restarts it in place, inside the same job.
TEST_F(SlurmJobs, RankCrashRestartsInPlace) {
  WriteJob(Train::kShort, "crash@1:8");
  const uint32_t job = Submit();
  ASSERT_NE(job, 0u);
  ASSERT_TRUE(WaitForJobsToEnd());

  const std::string info = ShowJob(job);
  EXPECT_EQ(Field(info, "JobState"), "COMPLETED") << info;
  EXPECT_EQ(Field(info, "Restarts"), "0") << "a crash is restarted in place, not requeued: " << info;
  auto rec = Record();
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->run.state, RunState::kSucceeded) << rec->run.cause;
  ASSERT_EQ(rec->attempts.size(), 1u);
  EXPECT_EQ(rec->attempts[0].slurm_job_id, std::to_string(job));
  EXPECT_NE(rec->Find(event_kind::kCrash, "rank 1"), nullptr) << rec->EventList();
  EXPECT_NE(JobOutputs().find("restart in place"), std::string::npos);
  ExpectFinalParamsEqualReference(Train::kShort);
}

// The nodes are separate network namespaces; the run is wired over their
// own addresses (10.77.0.x), never loopback.
TEST_F(SlurmJobs, NodesInSeparateNetworkNamespacesJoinOneRun) {
  WriteJob(Train::kShort);
  const uint32_t job = Submit();
  ASSERT_NE(job, 0u);
  ASSERT_TRUE(WaitForJobsToEnd());

  const std::string out = JobOutputs();
  EXPECT_NE(out.find("node 0 of 2 (n1, 10.77.0.11)"), std::string::npos) << out;
  EXPECT_NE(out.find("node 1 of 2 (n2, 10.77.0.12)"), std::string::npos) << out;
  EXPECT_NE(out.find("waiting for followers on 10.77.0.11:"), std::string::npos) << out;
  EXPECT_EQ(out.find("127.0.0.1"), std::string::npos) << out;

  // What each rank was given, and which network it lived in.
  const std::string n1 = ReadFile(D("env/n1-g0-r0")), n2 = ReadFile(D("env/n2-g0-r1"));
  ASSERT_FALSE(n1.empty() || n2.empty()) << "rank 0 on n1 and rank 1 on n2 recorded nothing";
  EXPECT_NE(n1.find("HOLDFAST_NODE_ADDR=10.77.0.11\n"), std::string::npos) << n1;
  EXPECT_NE(n2.find("HOLDFAST_NODE_ADDR=10.77.0.12\n"), std::string::npos) << n2;
  EXPECT_NE(n1.find("HOLDFAST_STORE_ADDR=10.77.0.11:"), std::string::npos) << n1;
  EXPECT_NE(n2.find("HOLDFAST_STORE_ADDR=10.77.0.11:"), std::string::npos) << "rank 1 dials the store on n1: " << n2;
  EXPECT_EQ((n1 + n2).find("127.0.0.1"), std::string::npos) << n1 << n2;
  const std::string here = "NETNS=" + std::filesystem::read_symlink("/proc/self/ns/net").string() + "\n";
  const std::string ns1 = n1.substr(n1.find("NETNS=")), ns2 = n2.substr(n2.find("NETNS="));
  EXPECT_NE(ns1, ns2) << "the two ranks share a network namespace";
  EXPECT_NE(ns1, here);
  EXPECT_NE(ns2, here);

  auto rec = Record();
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->run.state, RunState::kSucceeded) << rec->run.cause;
  EXPECT_EQ(rec->run.scheduler, SchedulerKind::kSlurm);
  EXPECT_EQ(Join(rec->run.nodes), "n1,n2");
  ExpectFinalParamsEqualReference(Train::kShort);
}

// (b) Ranks on n2 crash twice: n2 is kept out and the job requeued through
// holdfast-slurmctld-epilog (same job id), and the run finishes on n1, n3.
TEST_F(SlurmJobs, NodeImplicatedTwiceIsExcludedAndTheJobRequeued) {
  WriteJob(Train::kShort);
  const uint32_t job = Submit({{"BAD_HOST", "n2"}});
  ASSERT_NE(job, 0u);
  ASSERT_TRUE(WaitForJobsToEnd());

  const std::string info = ShowJob(job);
  EXPECT_EQ(Field(info, "JobState"), "COMPLETED") << info;
  EXPECT_EQ(Field(info, "Restarts"), "1") << info;
  EXPECT_EQ(Field(info, "NodeList"), "n[1,3]") << info;
  EXPECT_EQ(Field(info, "ExcNodeList"), "n2") << info;
  auto rec = Record();
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->run.state, RunState::kSucceeded) << rec->run.cause << "\n" << rec->EventList();
  const EventRecord* requeue = rec->Find(event_kind::kRequeue, "excluding n2");
  EXPECT_NE(requeue, nullptr) << rec->EventList();
  ASSERT_EQ(rec->attempts.size(), 2u) << rec->EventList();
  EXPECT_EQ(Join(rec->attempts[0].nodes), "n1,n2");
  EXPECT_EQ(Join(rec->attempts[1].nodes), "n1,n3");
  EXPECT_EQ(rec->attempts[1].slurm_job_id, std::to_string(job)) << "the epilog path keeps the job id";
  EXPECT_EQ(rec->attempts[1].restart_count, 1);
  ExpectFinalParamsEqualReference(Train::kShort);

  // The incident that requeued the job, written up (`runctl incident RUN N`): its Slurm job and
  // restarts, the hosts, the action, all as lineage has them.
  int number = 0, n = 0;
  const EventRecord* requeued = nullptr;
  for (const EventRecord& e : rec->events) {
    if (!e.incident) continue;
    ++n;
    if (requeued == nullptr && e.action.find("requeue excluding n2") != std::string::npos) {
      requeued = &e;
      number = n;
    }
  }
  ASSERT_NE(requeued, nullptr) << rec->EventList();
  ProcessResult written = RunProcess({BuildPath("cli/runctl"), "--run-dir", D("run"), "incident", rec->run.run_id,
                                      std::to_string(number), "--format", "json"});
  ASSERT_EQ(written.exit_code, 0) << written.output;
  const nlohmann::json j = nlohmann::json::parse(written.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << written.output;
  EXPECT_EQ(j["incident"]["id"], requeued->id);
  EXPECT_EQ(j["incident"]["action"], requeued->action);
  EXPECT_EQ(j["slurm"]["job_ids"], nlohmann::json::array({std::to_string(job)}));
  EXPECT_EQ(j["slurm"]["attempt"]["attempt"], rec->attempts[0].attempt);
  EXPECT_EQ(j["slurm"]["attempt"]["restart_count"], rec->attempts[0].restart_count);
  EXPECT_EQ(j["slurm"]["attempt"]["nodes"], nlohmann::json(rec->attempts[0].nodes));
  EXPECT_EQ(j["slurm"]["resumed_attempt"]["restart_count"], rec->attempts[1].restart_count);
  EXPECT_EQ(j["slurm"]["resumed_attempt"]["nodes"], nlohmann::json::array({"n1", "n3"}));
  EXPECT_EQ(j["nodes"]["credited"], "n2");
  EXPECT_EQ(j["nodes"]["excluded"], nlohmann::json::array({"n2"}));
  EXPECT_EQ(j["nodes"]["resumed_on"], nlohmann::json::array({"n1", "n3"}));
  bool requeue_action = false;
  for (const auto& a : j["actions"]) {
    requeue_action = requeue_action || (requeue != nullptr && a["action"] == requeue->action);
  }
  EXPECT_TRUE(requeue_action) << j["actions"].dump(2);
  EXPECT_EQ(j["impact"]["resumed_attempt"], rec->attempts[1].attempt);
  EXPECT_DOUBLE_EQ(j["impact"]["between_attempts_s"].get<double>(),
                   std::max<int64_t>(0, rec->attempts[1].started_ms - *rec->attempts[0].ended_ms) / 1000.0);
  EXPECT_EQ(j["impact"]["gpus"], 0);
  ProcessResult md = RunProcess({BuildPath("cli/runctl"), "--run-dir", D("run"), "incident", rec->run.run_id,
                                 std::to_string(number)});
  EXPECT_NE(md.output.find("| 2 | " + std::to_string(job) + " | 1 | n1,n3 |"), std::string::npos) << md.output;
  // n2's record across runs: this job's crashes on it, credited.
  ProcessResult node = RunProcess({BuildPath("cli/runctl"), "--run-dir", D("run"), "--json", "node", "n2"});
  ASSERT_EQ(node.exit_code, 0) << node.output;
  const nlohmann::json h = nlohmann::json::parse(node.output, nullptr, false);
  ASSERT_FALSE(h.is_discarded()) << node.output;
  int credited = 0;
  for (const auto& i : h["incidents"]) {
    EXPECT_EQ(i["run_id"], rec->run.run_id);
    EXPECT_EQ(i["slurm_job_id"], std::to_string(job));
    credited += i["credited"].get<bool>() ? 1 : 0;
  }
  EXPECT_GE(credited, 2) << node.output;
}

// The job's own failure: every rank exits 1 at step 8, on whichever node it
// runs. Nodes are not to blame: the run is requeued at most once (when the
// first failures happen to be on one node, which then leaves) and stops with
// the job's cause; no further node is excluded and none is drained.
TEST_F(SlurmJobs, AJobThatFailsAtTheSameStepOnEveryHostStopsWithoutBlamingNodes) {
  WriteJob(Train::kShort);
  const uint32_t job = Submit({{"JOB_FAILS_AT", "8"}});
  ASSERT_NE(job, 0u);
  ASSERT_TRUE(WaitForJobsToEnd());

  const std::string info = ShowJob(job);
  EXPECT_EQ(Field(info, "JobState"), "FAILED") << info;
  EXPECT_LE(std::atoi(Field(info, "Restarts").c_str()), 1) << info;
  auto rec = Record();
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->run.state, RunState::kFailed) << rec->run.cause << "\n" << rec->EventList();
  EXPECT_NE(rec->run.cause.find("the job fails at step 8 wherever it runs"), std::string::npos)
      << rec->run.cause << "\n" << rec->EventList();
  EXPECT_LE(rec->attempts.size(), 2u) << rec->EventList();
  // At most one requeue, excluding at most the one node that failed twice.
  std::set<std::string> excluded;
  int requeues = 0;
  for (const EventRecord& e : rec->events) {
    if (e.kind != event_kind::kRequeue || e.action.rfind("requeued", 0) != 0) continue;
    ++requeues;
    auto ev = ParseIncidentEvidence(e.evidence_json);
    ASSERT_TRUE(ev.ok()) << e.evidence_json;
    excluded.insert(ev->left.begin(), ev->left.end());
  }
  EXPECT_LE(requeues, 1) << rec->EventList();
  EXPECT_LE(excluded.size(), 1u) << rec->EventList();
  const std::string exc = Field(info, "ExcNodeList");
  EXPECT_TRUE(exc == "(null)" || exc.empty() || (excluded.size() == 1 && exc == *excluded.begin())) << info;
  // The last crash is the job's: no node is credited with it, and it has the job-failure guide.
  const EventRecord* last = rec->Find(event_kind::kCrash, "wherever it runs");
  ASSERT_NE(last, nullptr) << rec->EventList();
  EXPECT_EQ(last->node, "") << rec->EventList();
  EXPECT_EQ(last->runbook, "runbooks/job-failure.md");
  // No node was drained for it.
  ProcessResult nodes = Slurm("sinfo", {"-h", "-N", "-o", "%N %t"});
  EXPECT_EQ(nodes.output.find(" dr"), std::string::npos) << nodes.output;  // drain, drng
}

// (b) again, without the controller's epilog: holdfastd submits the job's
// script again with n2 excluded; the new job continues the same run.
TEST_F(SlurmJobs, ResubmitPathNeedsNoAdminSetting) {
  WriteJob(Train::kShort);
  const uint32_t job = Submit({{"BAD_HOST", "n2"}}, {"--requeue-path", "resubmit"});
  ASSERT_NE(job, 0u);
  ASSERT_TRUE(WaitForJobsToEnd());

  auto rec = Record();
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->runs.size(), 1u) << "the resubmitted job must continue the run, not start another";
  EXPECT_EQ(rec->run.state, RunState::kSucceeded) << rec->run.cause << "\n" << rec->EventList();
  EXPECT_NE(rec->Find(event_kind::kRequeue, "excluding n2"), nullptr) << rec->EventList();
  ASSERT_EQ(rec->attempts.size(), 2u) << rec->EventList();
  EXPECT_EQ(rec->attempts[0].slurm_job_id, std::to_string(job));
  const std::string next = rec->attempts[1].slurm_job_id;
  EXPECT_NE(next, std::to_string(job)) << "a resubmission is a new job";
  EXPECT_EQ(Join(rec->attempts[1].nodes), "n1,n3");
  const std::string info = ShowJob(static_cast<uint32_t>(std::strtoul(next.c_str(), nullptr, 10)));
  EXPECT_EQ(Field(info, "JobState"), "COMPLETED") << info;
  EXPECT_EQ(Field(info, "ExcNodeList"), "n2") << info;
  EXPECT_EQ(Field(info, "NodeList"), "n[1,3]") << info;
  EXPECT_EQ(Field(ShowJob(job), "Restarts"), "0") << "the first job itself is not requeued";
  ExpectFinalParamsEqualReference(Train::kShort);
}

// The shipped Prolog finds n2 unhealthy: it drains n2 with holdfast-health's
// reason and the job runs on healthy nodes (the epilog releases the job Slurm
// requeued held).
TEST_F(SlurmJobs, FailingPrologDrainsItsNodeAndTheJobRunsElsewhere) {
  const std::string bad = SuiteDir() + "/support/bad-prolog-nodes";
  WriteFile(bad, "n2\n");
  ScopeExit restore([&] {
    WriteFile(bad, "");
    Slurm("scontrol", {"update", "nodename=n2", "state=resume"});
  });
  WriteJob(Train::kShort);
  const uint32_t job = Submit();
  ASSERT_NE(job, 0u);
  ASSERT_TRUE(WaitForJobsToEnd());

  const std::string reason = Slurm("sinfo", {"-R", "-h", "-n", "n2", "-o", "%E"}).output;
  EXPECT_NE(reason.find("holdfast-health: "), std::string::npos) << "n2's drain reason: " << reason;
  EXPECT_NE(reason.find("ib.port_state mlx5_1/1 DOWN"), std::string::npos) << "n2's drain reason: " << reason;
  const std::string info = ShowJob(job);
  EXPECT_EQ(Field(info, "JobState"), "COMPLETED") << info;
  EXPECT_EQ(Field(info, "NodeList"), "n[1,3]") << info;
  auto rec = Record();
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->run.state, RunState::kSucceeded) << rec->run.cause << "\n" << rec->EventList();
  ASSERT_FALSE(rec->attempts.empty());
  EXPECT_EQ(Join(rec->attempts.back().nodes), "n1,n3");
  ExpectFinalParamsEqualReference(Train::kShort);
}

// holdfastd's own health gate (the Prolog is not rerun after a requeue): n2's
// daemon finds an InfiniBand port down before launch, the site's policy says
// drain_node, so the leader drains n2 through libslurm with a reason and
// requeues the job without it.
TEST_F(SlurmJobs, NodeFailingTheDaemonsHealthCheckIsDrainedAndTheJobRequeued) {
  ScopeExit restore([] { Slurm("scontrol", {"update", "nodename=n2", "state=resume"}); });
  const std::string policy = "[health.fail_actions]\n\"ib.port_state\" = \"drain_node\"\n";
  WriteJob(Train::kShort, "", "health_sysfs_root = \"" + SourcePath("health/testdata/sysfs/port_down") + "\"\n");
  WriteFile(D("job-n2.toml"), ReadFile(D("job.toml")) + policy);
  WriteJob(Train::kShort);
  WriteFile(D("job.toml"), ReadFile(D("job.toml")) + policy);
  // The daemon on n2 reads the config whose health checks see a port down.
  WriteFile(D("holdfastd.sh"), "#!/bin/bash\nargs=(\"$@\")\n"
                               "if [ \"$SLURMD_NODENAME\" = n2 ]; then\n"
                               "  for i in \"${!args[@]}\"; do\n"
                               "    [ \"${args[$i]}\" = '" + D("job.toml") + "' ] && args[$i]='" + D("job-n2.toml") + "'\n"
                               "  done\n"
                               "fi\n"
                               "exec '" + BuildPath("daemon/holdfastd") + "' \"${args[@]}\"\n");
  std::filesystem::permissions(D("holdfastd.sh"), std::filesystem::perms::owner_all);
  const uint32_t job = Submit({{"HOLDFASTD", D("holdfastd.sh")}});
  ASSERT_NE(job, 0u);
  ASSERT_TRUE(WaitForJobsToEnd());

  const std::string reason = Slurm("sinfo", {"-R", "-h", "-n", "n2", "-o", "%E"}).output;
  EXPECT_NE(reason.find("holdfast: "), std::string::npos) << "n2's drain reason: " << reason;
  EXPECT_NE(reason.find("ib.port_state"), std::string::npos) << "n2's drain reason: " << reason;
  const std::string info = ShowJob(job);
  EXPECT_EQ(Field(info, "JobState"), "COMPLETED") << info;
  EXPECT_EQ(Field(info, "Restarts"), "1") << info;
  auto rec = Record();
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->run.state, RunState::kSucceeded) << rec->run.cause << "\n" << rec->EventList();
  EXPECT_NE(rec->Find(event_kind::kRequeue, "drained n2"), nullptr) << rec->EventList();
  ASSERT_EQ(rec->attempts.size(), 2u) << rec->EventList();
  EXPECT_EQ(Join(rec->attempts[1].nodes), "n1,n3");
  ExpectFinalParamsEqualReference(Train::kShort);
}

// (c) Slurm's warning signal (what --signal=B:USR1@N sends): the ranks
// commit a checkpoint, the job is requeued, and attempt 2 resumes from it.
TEST_F(SlurmJobs, PreemptionSignalCheckpointsRequeuesAndLosesNothing) {
  WriteJob(Train::kLong);
  const uint32_t job = Submit();
  ASSERT_NE(job, 0u);
  const std::optional<int64_t> seen = WaitForCheckpoint(40);
  ASSERT_TRUE(seen);
  ProcessResult sig = Slurm("scancel", {"--signal=USR1", "--batch", std::to_string(job)});
  ASSERT_EQ(sig.exit_code, 0) << sig.output;
  ASSERT_TRUE(WaitForJobsToEnd());

  const std::string info = ShowJob(job);
  EXPECT_EQ(Field(info, "JobState"), "COMPLETED") << info;
  EXPECT_EQ(Field(info, "Restarts"), "1") << info;
  auto rec = Record();
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->run.state, RunState::kSucceeded) << rec->run.cause << "\n" << rec->EventList();
  EXPECT_NE(rec->Find(event_kind::kRequeue, "requeue after a checkpoint: preemption"), nullptr) << rec->EventList();
  ASSERT_EQ(rec->attempts.size(), 2u) << rec->EventList();
  EXPECT_EQ(rec->attempts[0].state, RunState::kPreempted);
  ASSERT_TRUE(rec->attempts[1].resumed_from_step.has_value());
  EXPECT_GE(*rec->attempts[1].resumed_from_step, *seen) << "attempt 2 must resume from the checkpoint the signal asked for";
  EXPECT_NE(JobOutputs().find("exited with code 75"), std::string::npos);
  ExpectFinalParamsEqualReference(Train::kLong);
}

// (c') Slurm's own warning of a job with a time limit (--time=1
// --signal=B:USR1@20; Slurm sends it up to a minute early): Slurm signals every
// process of the step, the ranks ignore it and train on, and the leader stops
// them once the newest step can just be saved before the limit, here with
// supervise.preempt_margin_s = 10 (daemon/preempt_plan.h). The plan is in
// lineage, the job is requeued, and nothing is lost.
TEST_F(SlurmJobs, WarningWithALeadTimeTrainsOnThenCheckpointsBeforeTheLimit) {
  // Rank 0 computes 40x as long from step 25 in attempt 1 (the fault fires
  // once per run): a checkpoint is measured early (Slurm sends this warning
  // 10 s after the start at the earliest), attempt 1 outlasts the planned
  // stop (x15 did not: the run finished first), attempt 2 runs at full speed.
  WriteJob(Train::kLong, "slow@0:25:x40", "preempt_margin_s = 10\n");
  const uint32_t job = Submit({}, {}, {"--time=1", "--signal=B:USR1@20"});
  ASSERT_NE(job, 0u);
  ASSERT_TRUE(WaitForJobsToEnd(std::chrono::seconds(300)));

  auto rec = Record();
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->run.state, RunState::kSucceeded) << rec->run.cause << "\n" << rec->EventList();
  const EventRecord* plan = rec->Find(event_kind::kPreempt, "train on for");
  ASSERT_NE(plan, nullptr) << "the ranks did not train on after the warning:\n" << rec->EventList();
  auto ev = ParseIncidentEvidence(plan->evidence_json);
  ASSERT_TRUE(ev.ok()) << plan->evidence_json;
  ASSERT_TRUE(ev->step && ev->lead_time_s && ev->save_s && ev->margin_s && ev->save_in_s) << plan->evidence_json;
  EXPECT_GT(*ev->save_in_s, 0) << plan->action;
  EXPECT_EQ(*ev->margin_s, 10);
  ASSERT_EQ(rec->attempts.size(), 2u) << rec->EventList();
  EXPECT_EQ(rec->attempts[0].state, RunState::kPreempted);
  EXPECT_NE(rec->attempts[0].cause.find("trained on for"), std::string::npos) << rec->attempts[0].cause;
  ASSERT_TRUE(rec->attempts[1].resumed_from_step.has_value());
  // Stopped at once, the ranks would have saved the step in flight or the next.
  EXPECT_GT(*rec->attempts[1].resumed_from_step, *ev->step + 2)
      << "the stop's checkpoint is of a step trained after the warning:\n" << rec->EventList();
  ExpectFinalParamsEqualReference(Train::kLong);
}

// The warning signal arrives while slurmctld is down: holdfastd checkpoints,
// retries its requeue with backoff, and the requeue goes through once the
// controller is back (restarted with its state).
TEST_F(SlurmJobs, RequeueWhileSlurmctldIsDownIsRetried) {
  WriteJob(Train::kLong);
  const uint32_t job = Submit();
  ASSERT_NE(job, 0u);
  const std::optional<int64_t> seen = WaitForCheckpoint(40);
  ASSERT_TRUE(seen);

  // Whatever happens below, the next test gets a controller (its state kept: no -i).
  ScopeExit restart([] {
    if (!ControllerAlive()) RunProcess({Tool("slurmctld"), "-f", std::getenv("SLURM_CONF")});
  });
  pid_t ctld = 0;
  ASSERT_TRUE(ControllerAlive(&ctld));
  ASSERT_EQ(kill(ctld, SIGTERM), 0);
  ASSERT_TRUE(WaitFor("slurmctld to stop", std::chrono::seconds(30), [] { return !ControllerAlive(); }));
  const auto down = std::chrono::steady_clock::now();

  // What srun forwards: USR1 to the holdfastd on each node.
  const std::vector<pid_t> daemons = Daemons();
  ASSERT_EQ(daemons.size(), 2u) << "one holdfastd per node";
  for (pid_t pid : daemons) ASSERT_EQ(kill(pid, SIGUSR1), 0);
  // Each libslurm attempt against a dead controller takes ~18 s here, so the
  // first retry shows ~40 s after the signal; bring the controller back then.
  ASSERT_TRUE(WaitFor("holdfastd to retry its requeue (\"retrying in\")", std::chrono::seconds(150), [&] {
    return JobOutputs().find("retrying in") != std::string::npos;
  }));
  const double outage_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - down).count();
  ProcessResult up = RunProcess({Tool("slurmctld"), "-f", std::getenv("SLURM_CONF")});
  ASSERT_EQ(up.exit_code, 0) << up.output;
  ASSERT_TRUE(WaitFor("slurmctld to answer", std::chrono::seconds(30),
                      [] { return Slurm("scontrol", {"ping"}).output.find("is UP") != std::string::npos; }));
  ASSERT_TRUE(WaitForJobsToEnd());

  const std::string info = ShowJob(job);
  EXPECT_EQ(Field(info, "JobState"), "COMPLETED") << info;
  EXPECT_EQ(Field(info, "Restarts"), "1") << info;
  auto rec = Record();
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->run.state, RunState::kSucceeded) << rec->run.cause << "\n" << rec->EventList();
  EXPECT_NE(rec->Find(event_kind::kRequeue, "requeue after a checkpoint"), nullptr) << rec->EventList();
  ASSERT_EQ(rec->attempts.size(), 2u) << rec->EventList();
  ASSERT_TRUE(rec->attempts[1].resumed_from_step.has_value());
  EXPECT_GE(*rec->attempts[1].resumed_from_step, *seen);
  ExpectFinalParamsEqualReference(Train::kLong);
  std::cerr << "slurmctld was down " << outage_s << " s\n";
}

// A follower's node is cut off the network (its veth down): nothing closes its
// cluster connection, so the leader finds it lost when it has answered nothing
// for node_timeout_s, and requeues the job without it (found by
// bench/soak_slurm.py: the leader waited on it until Slurm killed the job).
TEST_F(SlurmJobs, FollowerCutOffTheNetworkIsFoundLostAndTheJobRequeuedWithoutIt) {
  WriteJob(Train::kLong, "", "node_timeout_s = 10\n");
  const uint32_t job = Submit();
  ASSERT_NE(job, 0u);
  ASSERT_TRUE(WaitForCheckpoint(40));
  // The link back, and n2 back in service for the next test: once it answers again Slurm may
  // drain it ("Kill task failed": the cut-off step could not report), so resume until idle.
  ScopeExit heal([this] {
    RunProcess({Tool("ip"), "link", "set", "hfv2", "up"});
    WaitFor("n2 back in service", std::chrono::seconds(120), [] {
      const std::string state = Slurm("sinfo", {"-h", "-n", "n2", "-o", "%t"}).output;
      if (state == "idle\n") return true;
      Slurm("scontrol", {"update", "nodename=n2", "state=resume"});
      return false;
    });
  });
  ProcessResult cut = RunProcess({Tool("ip"), "link", "set", "hfv2", "down"});
  ASSERT_EQ(cut.exit_code, 0) << cut.output;
  ASSERT_TRUE(WaitForJobsToEnd(std::chrono::seconds(300)));

  const std::string info = ShowJob(job);
  EXPECT_EQ(Field(info, "JobState"), "COMPLETED") << info;
  EXPECT_EQ(Field(info, "Restarts"), "1") << info;
  // Not ExcNodeList: the job stays COMPLETING until Slurm finds n2 not responding, and Slurm may
  // start it again (n2 down) before the epilog's watcher sees it pending. Either way the request
  // is gone from the comment: a later requeue must not act on it.
  EXPECT_EQ(Field(info, "NodeList"), "n[1,3]") << info;
  EXPECT_EQ(info.find("holdfast-requeue"), std::string::npos) << info;
  auto rec = Record();
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->run.state, RunState::kSucceeded) << rec->run.cause << "\n" << rec->EventList();
  const EventRecord* lost = rec->Find(event_kind::kNodeLost, "no answer from the peer for 10 s");
  ASSERT_NE(lost, nullptr) << rec->EventList();
  EXPECT_EQ(lost->node, "n2") << rec->EventList();
  EXPECT_NE(rec->Find(event_kind::kRequeue, "excluding n2"), nullptr) << rec->EventList();
  ASSERT_EQ(rec->attempts.size(), 2u) << rec->EventList();
  EXPECT_EQ(Join(rec->attempts[0].nodes), "n1,n2");
  EXPECT_EQ(Join(rec->attempts[1].nodes), "n1,n3");
  ExpectFinalParamsEqualReference(Train::kLong);
}

// A run directory submitted twice: the first job fails (no restart budget),
// the second continues the same run from its newest checkpoint.
TEST_F(SlurmJobs, TwoSubmissionsOfOneRunDirectoryContinueOneRun) {
  WriteJob(Train::kShort, "crash@1:18", "restart_budget = 0\n");
  const uint32_t first = Submit();
  ASSERT_NE(first, 0u);
  ASSERT_TRUE(WaitForJobsToEnd());
  const std::string first_info = ShowJob(first);
  EXPECT_EQ(Field(first_info, "JobState"), "FAILED") << first_info;
  EXPECT_EQ(Field(first_info, "ExitCode"), "1:0") << "holdfastd: 1, the run failed: " << first_info;
  auto failed = Record();
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->run.state, RunState::kFailed);
  ASSERT_EQ(failed->attempts.size(), 1u);
  // The newest checkpoint on disk: the one a resume must pick (later ones are pruned).
  const int64_t newest = NewestCheckpointOnDisk();
  ASSERT_GT(newest, 0) << "the failed job committed no checkpoint";

  WriteJob(Train::kShort);
  const uint32_t second = Submit();
  ASSERT_NE(second, 0u);
  ASSERT_TRUE(WaitForJobsToEnd());
  EXPECT_EQ(Field(ShowJob(second), "JobState"), "COMPLETED");
  auto rec = Record();
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->runs.size(), 1u);
  EXPECT_EQ(rec->run.run_id, failed->run.run_id);
  EXPECT_EQ(rec->run.state, RunState::kSucceeded) << rec->run.cause << "\n" << rec->EventList();
  ASSERT_EQ(rec->attempts.size(), 2u) << rec->EventList();
  EXPECT_EQ(rec->attempts[1].slurm_job_id, std::to_string(second));
  ASSERT_TRUE(rec->attempts[1].resumed_from_step.has_value());
  EXPECT_EQ(*rec->attempts[1].resumed_from_step, newest) << "the second job must resume from the newest checkpoint";
  ExpectFinalParamsEqualReference(Train::kShort);
}

// `runctl resume` of a failed Slurm run, from outside any job: the run's
// saved submission goes to Slurm again and continues the same run.
TEST_F(SlurmJobs, RunctlResumeSubmitsTheRunAgain) {
  WriteJob(Train::kShort, "crash@1:18", "restart_budget = 0\n");
  const uint32_t first = Submit();
  ASSERT_NE(first, 0u);
  ASSERT_TRUE(WaitForJobsToEnd());
  auto failed = Record();
  ASSERT_TRUE(failed);
  ASSERT_EQ(failed->run.state, RunState::kFailed);
  const int64_t newest = NewestCheckpointOnDisk();
  ASSERT_GT(newest, 0);

  WriteJob(Train::kShort);  // the fault is gone; the saved submission runs this config
  ProcessResult r = RunProcess({BuildPath("cli/runctl"), "--run-dir", D("run"), "resume", "latest"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("submitted job"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(failed->run.run_id), std::string::npos) << r.output;
  ASSERT_TRUE(WaitFor("the resubmitted job to start", std::chrono::seconds(60),
                      [&] { return !ShowJob(first + 1).empty(); }));
  ASSERT_TRUE(WaitForJobsToEnd());
  auto rec = Record();
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->runs.size(), 1u);
  EXPECT_EQ(rec->run.state, RunState::kSucceeded) << rec->run.cause << "\n" << rec->EventList();
  ASSERT_EQ(rec->attempts.size(), 2u) << rec->EventList();
  EXPECT_EQ(rec->attempts[1].slurm_job_id, std::to_string(first + 1));
  ASSERT_TRUE(rec->attempts[1].resumed_from_step.has_value());
  EXPECT_EQ(*rec->attempts[1].resumed_from_step, newest);
  ExpectFinalParamsEqualReference(Train::kShort);
}


// A user's own PyTorch script (examples/pytorch_ddp) through the GPU template
// (examples/slurm/holdfast-gpu.sbatch, CPU ranks here: NPROC=1 on each of 2
// nodes, --gpus-per-node=0), launched in torchrun's form with no job file:
// Slurm's time-limit warning reaches the script as the signal contract's
// stop (docs/job-contract.md), the script commits a checkpoint and exits 75,
// the job is requeued, and the same run finishes with the parameters of a
// fault-free run.
TEST_F(SlurmJobs, AUsersPythonJobThroughTheGpuTemplateCheckpointsOnTheWarningAndFinishesAfterTheRequeue) {
  std::string text;
  for (const char* name : {"GPL-3", "LGPL-2.1", "Apache-2.0"}) {
    text += ReadFile(std::string("/usr/share/common-licenses/") + name);
  }
  WriteFile(D("corpus.txt"), text);
  const std::string python = "/usr/bin/python3";
  auto script_args = [&](const std::string& out) {
    return std::vector<std::string>{python, SourcePath("examples/pytorch_ddp/train.py"), "--data", D("corpus.txt"),
                                    "--out", out, "--steps", "80", "--checkpoint-every", "10", "--step-sleep", "0.1"};
  };
  const std::map<std::string, std::string> env = {{"PYTHONPATH", SourcePath("common/python")},
                                                  {"OMP_NUM_THREADS", "1"}};
  // The fault-free reference: the same script, 2 ranks on this machine, supervised the same way.
  std::vector<std::string> ref = {BuildPath("daemon/holdfastd"), "--scheduler", "local", "--run-dir", D("ref-run"),
                                  "--nproc-per-node", "2", "--"};
  for (const std::string& a : script_args(D("ref-out"))) ref.push_back(a);
  ProcessResult r = RunProcess(ref, env);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json reference = nlohmann::json::parse(ReadFile(D("ref-out/final.json")));

  std::vector<std::string> argv = {Tool("sbatch"), "--parsable", "-N2", "--gpus-per-node=0", "--cpus-per-task=2",
                                   "--job-name", job_name_, "--chdir", dir_, "--output", D("job-%j.out"),
                                   SourcePath("examples/slurm/holdfast-gpu.sbatch"), "--max-restarts", "2", "--"};
  for (const std::string& a : script_args(D("out"))) argv.push_back(a);
  std::map<std::string, std::string> job_env = env;
  job_env["RUN_DIR"] = D("run");
  job_env["HOLDFASTD"] = BuildPath("daemon/holdfastd");
  job_env["NPROC"] = "1";
  r = RunProcess(argv, job_env);
  const uint32_t job = static_cast<uint32_t>(std::strtoul(r.output.c_str(), nullptr, 10));
  ASSERT_TRUE(r.exit_code == 0 && job != 0) << "sbatch of the GPU template failed: " << r.output;
  ASSERT_TRUE(WaitFor("the script's checkpoint of step 20", std::chrono::seconds(180),
                      [&] { return std::filesystem::exists(D("out/ckpt-00000020.pt")); }))
      << Diagnostics();
  ProcessResult sig = Slurm("scancel", {"--signal=USR1", "--batch", std::to_string(job)});
  ASSERT_EQ(sig.exit_code, 0) << sig.output;
  ASSERT_TRUE(WaitForJobsToEnd()) << Diagnostics();

  const std::string info = ShowJob(job);
  EXPECT_EQ(Field(info, "JobState"), "COMPLETED") << info;
  EXPECT_EQ(Field(info, "Restarts"), "1") << info;
  auto rec = Record();
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->run.state, RunState::kSucceeded) << rec->run.cause << "\n" << rec->EventList();
  EXPECT_EQ(rec->Find(event_kind::kCrash, ""), nullptr) << "the warning is no crash:\n" << rec->EventList();
  ASSERT_EQ(rec->attempts.size(), 2u) << rec->EventList();
  EXPECT_EQ(rec->attempts[0].state, RunState::kPreempted) << rec->EventList();
  ASSERT_TRUE(rec->attempts[1].resumed_from_step.has_value()) << rec->EventList();
  EXPECT_GT(*rec->attempts[1].resumed_from_step, 20) << "the warning's own checkpoint, past the periodic one";
  EXPECT_NE(JobOutputs().find("exited with code 75"), std::string::npos) << JobOutputs();
  // The checkpoint the warning asked for is in lineage at the script's own path.
  auto db = Lineage();
  ASSERT_NE(db, nullptr);
  auto cks = db->Checkpoints(rec->run.run_id);
  ASSERT_TRUE(cks.ok()) << cks.status().ToString();
  bool found = false;
  for (const auto& c : *cks) {
    if (c.step == *rec->attempts[1].resumed_from_step) {
      found = true;
      EXPECT_EQ(c.path, D("out/ckpt-" + Padded(c.step) + ".pt"));
      EXPECT_EQ(c.bytes, static_cast<int64_t>(std::filesystem::file_size(c.path)));
    }
  }
  EXPECT_TRUE(found) << "no lineage checkpoint at the resumed step";
  const nlohmann::json final_state = nlohmann::json::parse(ReadFile(D("out/final.json")));
  EXPECT_EQ(final_state["step"], 80);
  EXPECT_EQ(final_state["params_sum"].get<double>(), reference["params_sum"].get<double>());
  EXPECT_EQ(final_state["loss"].get<double>(), reference["loss"].get<double>());
}

}  // namespace
}  // namespace holdfast
