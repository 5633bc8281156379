// Fault injection against a real holdfastd supervising real holdfast-train
// ranks: each test breaks the run in one way and checks what a user would
// notice — the run finishes with parameters bit-identical to a fault-free
// run, and lineage.db names the right cause.
#include <sys/ptrace.h>
#include <sys/wait.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>

#include "common/host_history.h"
#include "tests/daemon/supervised_run.h"

namespace holdfast {
namespace {

using SupervisionTest = SupervisedRunTest;

TEST_F(SupervisionTest, SigkillOfARankIsACrashThatRestartsFromTheCheckpoint) {
  WriteJob();
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  auto st = WaitForStep(12, daemon);
  ASSERT_TRUE(st.has_value()) << ReadFile(dir_ / "daemon.log");
  const auto victim = st->nodes[0].ranks[1];
  ASSERT_EQ(kill(static_cast<pid_t>(victim.pid), SIGKILL), 0);
  ExpectFinishedBitExact(daemon);
  auto db = Lineage();
  ASSERT_NE(db, nullptr);
  auto run = db->LatestRun();
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->state, RunState::kSucceeded);
  auto inc = db->LastIncident(run->run_id);
  ASSERT_TRUE(inc.ok() && inc->has_value());
  EXPECT_EQ((*inc)->kind, "crash");
  EXPECT_EQ((*inc)->rank, 1);
  EXPECT_NE((*inc)->summary.find("rank 1 killed by signal 9 (SIGKILL)"), std::string::npos) << (*inc)->summary;
  EXPECT_NE((*inc)->action.find("restart generation 1 from step"), std::string::npos) << (*inc)->action;
  auto gens = db->Generations(run->run_id);
  ASSERT_TRUE(gens.ok());
  EXPECT_EQ(gens->size(), 2u);

  // The quickstart's crash written up (`runctl incident`): every field is lineage's.
  ProcessResult written = RunProcess({BuildPath("cli/runctl"), "--run-dir", dir_ / "run", "incident", "latest",
                                      "--format", "json"});
  ASSERT_EQ(written.exit_code, 0) << written.output;
  const nlohmann::json j = nlohmann::json::parse(written.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << written.output;
  const EventRecord& e = **inc;
  const GenerationRecord& failed = (*gens)[0];
  const GenerationRecord& resumed = (*gens)[1];
  EXPECT_EQ(j["title"], "Incident 1 of run " + run->run_id + " (fault-test): crash of rank 1 on " + ThisHost());
  EXPECT_EQ(j["incident"]["id"], e.id);
  EXPECT_EQ(j["incident"]["time_ms"], e.time_ms);
  EXPECT_EQ(j["incident"]["summary"], e.summary);
  EXPECT_EQ(j["incident"]["action"], e.action);
  EXPECT_EQ(j["incident"]["culprits"], nlohmann::json::array({1}));
  EXPECT_EQ(j["incident"]["log_path"], run->run_dir + "/logs/a1-g0-rank1.log");
  const nlohmann::json& im = j["impact"];
  EXPECT_EQ(im["last_progress_ms"], std::max(failed.started_ms, failed.last_step_ms.value_or(failed.started_ms)));
  EXPECT_EQ(im["resumed_ms"], resumed.started_ms);
  EXPECT_EQ(im["resumed_from_step"], resumed.start_step);
  EXPECT_EQ(im["redone_steps"], std::max<int64_t>(0, *failed.last_step - resumed.start_step));
  EXPECT_DOUBLE_EQ(im["downtime_s"].get<double>(), (resumed.started_ms - e.time_ms) / 1000.0);
  EXPECT_EQ(im["step_ms_source"], "metrics.jsonl median") << "the run's metrics.jsonl is found from its job file";
  EXPECT_NEAR(im["rank_hours"].get<double>(), im["lost_s"].get<double>() * 2 / 3600, 1e-12);
  EXPECT_EQ(im["gpus"], 0) << "CUDA_VISIBLE_DEVICES unset: the ranks ran on the CPU";
  EXPECT_TRUE(im["gpu_hours"].is_null());
  EXPECT_EQ(j["nodes"]["credited"], ThisHost());
  EXPECT_TRUE(j["slurm"]["job_ids"].empty());
  EXPECT_EQ(j["timeline"].front()["time_ms"], failed.started_ms);
  EXPECT_EQ(j["timeline"].back()["text"],
            "generation 1 started from step " + std::to_string(resumed.start_step) + " (disk checkpoint)")
      << "the ranks said where they restored it from";
  EXPECT_NE(j["triage"].get<std::string>().find("exit      killed by signal 9 (SIGKILL)"), std::string::npos);
  ProcessResult md = RunProcess({BuildPath("cli/runctl"), "--run-dir", dir_ / "run", "incident", "latest"});
  ASSERT_EQ(md.exit_code, 0) << md.output;
  for (const char* section : {"# Incident 1 of run ", "## Timeline (UTC)", "## Impact", "## Evidence",
                              "## Actions taken", "## Nodes", "## Open questions", "Who sent SIGKILL to rank 1?"}) {
    EXPECT_NE(md.output.find(section), std::string::npos) << section << " not in\n" << md.output;
  }
  // And published into the host history beside the run, credited to this host.
  Result<HostHistory> history = ReadHostHistory(dir_ / ".holdfast/hosts", ThisHost());
  ASSERT_TRUE(history.ok()) << history.status().ToString();
  ASSERT_EQ(history->incidents.size(), 1u);
  EXPECT_EQ(history->incidents[0].event_id, e.id);
  EXPECT_TRUE(history->incidents[0].credited);
}

// A SIGSTOPped rank is hung once stopped for stopped_hang_s (1 s by default),
// long before the step allowance (hang_min_s 30 s here) would run out.
TEST_F(SupervisionTest, SigstopOfARankIsAHangNamingThatRank) {
  WriteJob("", "", /*hang_min_s=*/30);
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  auto st = WaitForStep(12, daemon);
  ASSERT_TRUE(st.has_value()) << ReadFile(dir_ / "daemon.log");
  const auto victim = st->nodes[0].ranks[0];
  ASSERT_EQ(kill(static_cast<pid_t>(victim.pid), SIGSTOP), 0);
  ExpectFinishedBitExact(daemon);
  auto db = Lineage();
  ASSERT_NE(db, nullptr);
  auto run = db->LatestRun();
  ASSERT_TRUE(run.ok());
  auto inc = db->LastIncident(run->run_id);
  ASSERT_TRUE(inc.ok() && inc->has_value());
  EXPECT_EQ((*inc)->kind, "hang");
  EXPECT_EQ((*inc)->rank, 0) << (*inc)->summary;
  EXPECT_NE((*inc)->summary.find("process stopped"), std::string::npos) << (*inc)->summary;
  EXPECT_NE((*inc)->summary.find("stopped allowance 1.0 s)"), std::string::npos) << (*inc)->summary;
  EXPECT_EQ((*inc)->runbook, "runbooks/hang.md");
}

// A rank stopped by a tracer (on-call's gdb -p, py-spy, strace: state t) is
// being looked at on purpose: it is shown as traced and gets the usual
// allowance, and once the tracer lets go the run goes on as if nothing happened.
TEST_F(SupervisionTest, ARankStoppedByATracerIsNotAHang) {
  WriteJob("", "", /*hang_min_s=*/60);
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  auto st = WaitForStep(12, daemon);
  ASSERT_TRUE(st.has_value()) << ReadFile(dir_ / "daemon.log");
  const pid_t victim = static_cast<pid_t>(st->nodes[0].ranks[0].pid);
  ASSERT_EQ(ptrace(PTRACE_SEIZE, victim, nullptr, nullptr), 0) << std::strerror(errno);
  ASSERT_EQ(ptrace(PTRACE_INTERRUPT, victim, nullptr, nullptr), 0) << std::strerror(errno);
  int ws = 0;
  ASSERT_EQ(waitpid(victim, &ws, __WALL), victim) << std::strerror(errno);
  // Status shows it traced; held well past stopped_hang_s (1 s), no hang is declared.
  auto traced = testing::WaitForStatus(daemon, dir_ / "run", "rank 0 shown traced", 120, [](const RunStatus& s) {
    return !s.nodes.empty() && !s.nodes[0].ranks.empty() && s.nodes[0].ranks[0].state == "stopped (traced)";
  });
  ASSERT_TRUE(traced.has_value()) << ReadFile(dir_ / "daemon.log");
  std::this_thread::sleep_for(std::chrono::seconds(5));
  auto still = Status();
  ASSERT_TRUE(still.has_value()) << ReadFile(dir_ / "daemon.log");
  EXPECT_EQ(still->generation, 0) << ReadFile(dir_ / "daemon.log");
  EXPECT_EQ(ReadFile(dir_ / "daemon.log").find("HANG:"), std::string::npos) << ReadFile(dir_ / "daemon.log");
  ASSERT_EQ(ptrace(PTRACE_DETACH, victim, nullptr, nullptr), 0) << std::strerror(errno);
  ExpectFinishedBitExact(daemon);
  auto db = Lineage();
  ASSERT_NE(db, nullptr);
  auto run = db->LatestRun();
  ASSERT_TRUE(run.ok());
  auto gens = db->Generations(run->run_id);
  ASSERT_TRUE(gens.ok());
  EXPECT_EQ(gens->size(), 1u) << "no restart: the traced rank was never called hung";
}

// Two ranks train with ZeRO-1 (the default), so the gradients go through a
// reduce-scatter: the waiting rank is in that collective.
TEST_F(SupervisionTest, ARankStuckInComputeIsNamedWhileTheOthersWaitInTheGradientReduceScatter) {
  WriteJob("hang@1:14", "stack_timeout_s = 120\n");  // generous: a loaded machine reads LibTorch's symbols slowly
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  ExpectFinishedBitExact(daemon);
  auto db = Lineage();
  ASSERT_NE(db, nullptr);
  auto run = db->LatestRun();
  ASSERT_TRUE(run.ok());
  auto inc = db->LastIncident(run->run_id);
  ASSERT_TRUE(inc.ok() && inc->has_value());
  EXPECT_EQ((*inc)->kind, "hang");
  EXPECT_EQ((*inc)->rank, 1) << (*inc)->summary;
  EXPECT_NE((*inc)->summary.find("rank 1 never entered reduce_scatter #"), std::string::npos) << (*inc)->summary;
  EXPECT_NE((*inc)->summary.find("rank 0 waiting in it"), std::string::npos) << (*inc)->summary;
  auto ev = nlohmann::json::parse((*inc)->evidence_json);
  EXPECT_EQ(ev["ranks"].size(), 2u);
  // Its stack, read before it was killed, names the busy loop it spins in (trainer/faults.cc).
  ProcessResult triage = RunProcess({BuildPath("cli/runctl"), "--run-dir", dir_ / "run", "triage", "latest"});
  EXPECT_EQ(triage.exit_code, 0) << triage.output;
  const size_t culprit = triage.output.find("1 rank (1), culprit");
  ASSERT_NE(culprit, std::string::npos) << triage.output;
  const size_t next = triage.output.find("\n    1 rank", culprit + 1);
  EXPECT_NE(triage.output.substr(culprit, next - culprit).find("holdfast::FireHangOrCrash"), std::string::npos)
      << triage.output;
}

TEST_F(SupervisionTest, AKilledDaemonIsStartedAgainAndContinuesTheRun) {
  WriteJob();
  std::string run_id;
  {
    ChildProcess daemon(Daemon(), dir_ / "daemon.log");
    auto st = WaitForStep(12, daemon);
    ASSERT_TRUE(st.has_value()) << ReadFile(dir_ / "daemon.log");
    run_id = st->run_id;
    daemon.Signal(SIGKILL);
    EXPECT_EQ(daemon.Wait(), 128 + SIGKILL);
  }
  ChildProcess again(Daemon(), dir_ / "daemon2.log");
  ExpectFinishedBitExact(again);
  auto db = Lineage();
  ASSERT_NE(db, nullptr);
  auto run = db->LatestRun();
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->run_id, run_id) << "the restarted daemon must continue the same run";
  EXPECT_EQ(run->state, RunState::kSucceeded);
  auto attempts = db->Attempts(run_id);
  ASSERT_TRUE(attempts.ok());
  ASSERT_EQ(attempts->size(), 2u);
  EXPECT_TRUE(attempts->back().resumed_from_step.has_value());
  auto events = db->Events(run_id, 50);
  ASSERT_TRUE(events.ok());
  bool restart_recorded = false;
  for (const auto& e : *events) restart_recorded = restart_recorded || e.kind == "daemon_restart";
  EXPECT_TRUE(restart_recorded);
}

// Two daemons on one machine act as two nodes (2 ranks each); a rank on the
// follower dies; the leader restarts the ranks of both nodes.
TEST_F(SupervisionTest, TwoNodesAFollowerRankDiesAndBothNodesRestart) {
  ProcessResult ref = RunProcess({BuildPath("trainer/holdfast-train"), "--config", *shared_ / "train.toml", "--nproc",
                                  "4", "--set", "output.dir=" + (dir_ / "ref_out"), "--dump-final", dir_ / "ref4"});
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  WriteJob("crash@3:12");
  std::vector<std::string> leader = Daemon();
  leader.insert(leader.end(), {"--nodes", "2"});
  std::vector<std::string> follower = Daemon();
  follower.insert(follower.end(), {"--nodes", "2", "--node-id", "1"});
  ChildProcess lead(leader, dir_ / "daemon.log");
  ChildProcess follow(follower, dir_ / "follower.log");  // finds the leader through run/cluster.addr
  EXPECT_EQ(lead.Wait(), 0) << ReadFile(dir_ / "daemon.log");
  EXPECT_EQ(follow.Wait(), 0) << ReadFile(dir_ / "follower.log");
  EXPECT_TRUE(ReadFile(dir_ / "final/params.bin") == ReadFile(dir_ / "ref4/params.bin"))
      << "final parameters differ from the fault-free 4-rank run";
  auto db = Lineage();
  ASSERT_NE(db, nullptr);
  auto run = db->LatestRun();
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->world_size, 4);
  auto inc = db->LastIncident(run->run_id);
  ASSERT_TRUE(inc.ok() && inc->has_value());
  EXPECT_EQ((*inc)->kind, "crash");
  EXPECT_EQ((*inc)->rank, 3);
  // Nodes are hosts: two daemons on one machine are "<hostname>-n0" and "<hostname>-n1".
  EXPECT_EQ((*inc)->node, ThisHost() + "-n1");
  auto gens = db->Generations(run->run_id);
  ASSERT_TRUE(gens.ok());
  ASSERT_EQ(gens->size(), 2u);
  // Every rank said where it restored from, the follower's through the cluster protocol.
  EXPECT_EQ((*gens)[0].restore_tier, "none");
  EXPECT_EQ((*gens)[1].restore_tier, "disk");
  EXPECT_GT((*gens)[1].start_step, 0);
}

// Two nodes of one rank each: the follower's only rank dies. It is restarted
// once, and the next generation's rank lives: the follower's KILL timer for the
// dead generation once fired into the next one (found by bench/soak).
TEST_F(SupervisionTest, TwoNodesOfOneRankAFollowersCrashRestartsOnce) {
  WriteJob("crash@1:8");
  std::string job = ReadFile(dir_ / "job.toml");
  job.replace(job.find("nproc = 2"), 9, "nproc = 1");
  WriteFile(dir_ / "job.toml", job);
  std::vector<std::string> leader = Daemon();
  leader.insert(leader.end(), {"--nodes", "2"});
  std::vector<std::string> follower = Daemon();
  follower.insert(follower.end(), {"--nodes", "2", "--node-id", "1"});
  ChildProcess lead(leader, dir_ / "daemon.log");
  ChildProcess follow(follower, dir_ / "follower.log");
  ExpectFinishedBitExact(lead);
  EXPECT_EQ(follow.Wait(), 0) << ReadFile(dir_ / "follower.log");
  auto db = Lineage();
  ASSERT_NE(db, nullptr);
  auto run = db->LatestRun();
  ASSERT_TRUE(run.ok());
  auto gens = db->Generations(run->run_id);
  ASSERT_TRUE(gens.ok());
  EXPECT_EQ(gens->size(), 2u) << ReadFile(dir_ / "daemon.log");
}

// Issue 13: an elastic run (min_nodes = 2) on three local nodes of one rank
// loses a follower's daemon (SIGKILL) after a checkpoint. It goes on without
// that node from the newest checkpoint: the trainer reshards 3 -> 2 ranks
// keeping the global batch (grad_accum 2 -> 3), lineage records the node
// loss and the reshard, and the run ends with the loss of a fault-free 3-rank
// run to float tolerance (no dropout, so the samples decide everything).
TEST_F(SupervisionTest, AnElasticRunLosesANodeAndGoesOnWithTheOthers) {
  std::ostringstream tc;
  tc << "[model]\nn_layer = 2\nn_head = 4\nn_embd = 64\nblock_size = 64\ndropout = 0.0\n"
     << "[data]\nformat = \"text\"\npath = \"" << *shared_ / "corpus.txt" << "\"\n"
     << "[train]\nsteps = 30\nmicro_batch = 2\ngrad_accum = 2\nseed = 11\nthreads = 1\nlog_every = 10\n"
     << "[optim]\nlr = 1e-3\nmin_lr = 1e-4\nwarmup_steps = 5\n"
     << "[dist]\nbucket_mb = 0.05\n[checkpoint]\nevery_steps = 5\n";
  WriteFile(dir_ / "elastic.toml", tc.str());
  ProcessResult ref = RunProcess({BuildPath("trainer/holdfast-train"), "--config", dir_ / "elastic.toml", "--nproc",
                                  "3", "--set", "output.dir=" + (dir_ / "ref_out"), "--metrics", dir_ / "ref.jsonl"});
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  std::ostringstream job;
  job << "[job]\nname = \"elastic\"\ncommand = [\"" << BuildPath("trainer/holdfast-train") << "\", \"--config\", \""
      << dir_ / "elastic.toml" << "\", \"--set\", \"output.dir=" << dir_ / "out" << "\", \"--set\", \"checkpoint.dir="
      << dir_ / "ck" << "\", \"--metrics\", \"" << dir_ / "metrics.jsonl" << "\"]\n"
      << "nproc = 1\nmin_nodes = 2\ncheckpoint_dir = \"" << dir_ / "ck" << "\"\n"
      // report_ms = poll_ms: the wait below reads the followers' steps from the
      // leader's status, and steps take some 30 ms, so a report a second old
      // would let the run pass the checkpoint of step 15 before the kill.
      << "[supervise]\npoll_ms = 50\nreport_ms = 50\nhang_min_s = 5\nstartup_timeout_s = 90\nrestart_budget = 2\n"
      << "term_grace_s = 2\n"
      << "backoff_initial_s = 0.1\nprogress_dir = \"" << dir_ / "shm" << "\"\n"
      << "[health]\ncheckpoint_min_free_gb = 0.05\ncheckpoint_write_mb = 4\ncheckpoint_write_fail_mbps = 0\n";
  WriteFile(dir_ / "job.toml", job.str());
  auto daemon = [&](int node) {
    std::vector<std::string> cmd = Daemon();
    cmd.insert(cmd.end(), {"--nodes", "3"});
    if (node > 0) cmd.insert(cmd.end(), {"--node-id", std::to_string(node)});
    return cmd;
  };
  ChildProcess lead(daemon(0), dir_ / "daemon.log");
  ChildProcess first(daemon(1), dir_ / "follower1.log");
  ChildProcess second(daemon(2), dir_ / "follower2.log");
  // Wait (not a timing assertion) until every rank is past the checkpoint of step 10.
  for (;;) {
    ASSERT_FALSE(lead.Exited()) << ReadFile(dir_ / "daemon.log");
    auto st = Status();
    int past = 0;
    if (st) {
      for (const auto& n : st->nodes) {
        for (const auto& r : n.ranks) past += r.step >= 12 ? 1 : 0;
      }
    }
    if (past == 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  second.Signal(SIGKILL);  // node 2's daemon; its rank dies with it (PR_SET_PDEATHSIG)
  second.Wait();
  EXPECT_EQ(lead.Wait(), 0) << ReadFile(dir_ / "daemon.log");
  EXPECT_EQ(first.Wait(), 0) << ReadFile(dir_ / "follower1.log");
  auto db = Lineage();
  ASSERT_NE(db, nullptr);
  auto run = db->LatestRun();
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->state, RunState::kSucceeded) << run->cause;
  auto events = db->Events(run->run_id, 0);
  ASSERT_TRUE(events.ok());
  const std::string lost_host = ThisHost() + "-n2";
  bool lost = false, reshard = false;
  for (const auto& e : *events) {
    if (e.kind == "node_lost" && e.node == lost_host) {
      lost = true;
      EXPECT_NE(e.action.find("continue without " + lost_host + " on 2 of 3 nodes (min_nodes 2)"), std::string::npos)
          << e.action;
    }
    if (e.kind == "reshard") {
      reshard = true;
      EXPECT_NE(e.summary.find("world size 3 -> 2: without " + lost_host), std::string::npos) << e.summary;
      EXPECT_NE(e.action.find("from step 10"), std::string::npos) << e.action;
    }
  }
  EXPECT_TRUE(lost) << ReadFile(dir_ / "daemon.log");
  EXPECT_TRUE(reshard) << ReadFile(dir_ / "daemon.log");
  const std::string rank_log = ReadFile(dir_ / "run/logs/a1-g1-rank0.log");
  EXPECT_NE(rank_log.find("RESHARDED: checkpoint of step 10 saved by 3 ranks, resumed on 2; grad_accum 3"),
            std::string::npos)
      << rank_log;
  // The run's last step against the fault-free run's, and it went on at world 2.
  const double want = LossAtStep(dir_ / "ref.jsonl", 30), got = LossAtStep(dir_ / "metrics.jsonl", 30);
  ASSERT_GT(want, 0);
  EXPECT_NEAR(got, want, 1e-4 * want) << "the resharded run's final loss";
}

// Node health: an InfiniBand port (a fixture sysfs tree in the kernel's layout)
// goes down mid-run. The periodic monitor sees it, lineage records the result
// with its evidence, the policy's action (exclude the node) stops the run, and
// runctl triage shows it.
TEST_F(SupervisionTest, AnInfinibandPortGoingDownMidRunIsRecordedAndActedOn) {
  const std::string sysfs = dir_ / "sys";
  std::filesystem::copy(std::string(std::getenv("HOLDFAST_SOURCE_DIR")) + "/health/testdata/sysfs/healthy", sysfs,
                        std::filesystem::copy_options::recursive);
  WriteJob("", "health_poll_s = 0.2\nhealth_sysfs_root = \"" + sysfs + "\"\n");
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  auto st = WaitForStep(8, daemon);
  ASSERT_TRUE(st.has_value()) << ReadFile(dir_ / "daemon.log");
  const std::string port = sysfs + "/class/infiniband/mlx5_0/ports/1";
  WriteFile(port + "/state", "1: DOWN\n");
  WriteFile(port + "/phys_state", "2: Polling\n");
  EXPECT_EQ(daemon.Wait(), 1) << ReadFile(dir_ / "daemon.log");
  auto db = Lineage();
  ASSERT_NE(db, nullptr);
  auto run = db->LatestRun();
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->state, RunState::kFailed);
  auto inc = db->LastIncident(run->run_id);
  ASSERT_TRUE(inc.ok() && inc->has_value());
  EXPECT_EQ((*inc)->kind, "health");
  EXPECT_NE((*inc)->summary.find("ib.port_state mlx5_0/1"), std::string::npos) << (*inc)->summary;
  EXPECT_NE((*inc)->action.find("exclude_node"), std::string::npos) << (*inc)->action;
  HealthQuery q;
  q.run_id = run->run_id;
  auto results = db->HealthResults(q);
  ASSERT_TRUE(results.ok());
  bool down_recorded = false;
  for (const auto& h : *results) {
    if (h.check == "ib.port_state mlx5_0/1" && h.status == HealthStatus::kFail) {
      down_recorded = h.evidence_json.find("DOWN") != std::string::npos;
    }
  }
  EXPECT_TRUE(down_recorded);
  ProcessResult triage = RunProcess({BuildPath("cli/runctl"), "--run-dir", dir_ / "run", "triage", "latest"});
  EXPECT_EQ(triage.exit_code, 0) << triage.output;
  EXPECT_NE(triage.output.find("ib.port_state"), std::string::npos) << triage.output;
  EXPECT_NE(triage.output.find("health-ib.md"), std::string::npos) << triage.output;
}

// A node whose checkpoint disk is too full never starts the ranks.
TEST_F(SupervisionTest, APrelaunchHealthFailureKeepsTheRanksFromStarting) {
  WriteJob();
  std::string job = ReadFile(dir_ / "job.toml");
  job.replace(job.find("checkpoint_min_free_gb = 0.05"), 29, "checkpoint_min_free_gb = 1e9");
  WriteFile(dir_ / "job.toml", job);
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  EXPECT_EQ(daemon.Wait(), 1) << ReadFile(dir_ / "daemon.log");
  EXPECT_FALSE(std::filesystem::exists(dir_ / "run/logs/a1-g0-rank0.log")) << "no rank may start on a sick node";
  auto db = Lineage();
  ASSERT_NE(db, nullptr);
  auto run = db->LatestRun();
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->state, RunState::kFailed);
  EXPECT_NE(run->cause.find("host.checkpoint_space"), std::string::npos) << run->cause;
}

TEST_F(SupervisionTest, ASpentRestartBudgetStopsWithACauseAPersonCanRead) {
  WriteJob("crash@0:8", "");
  // Budget 0: the first crash ends the run.
  std::string job = ReadFile(dir_ / "job.toml");
  job.replace(job.find("restart_budget = 2"), 18, "restart_budget = 0");
  WriteFile(dir_ / "job.toml", job);
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  EXPECT_EQ(daemon.Wait(), 1) << ReadFile(dir_ / "daemon.log");
  auto db = Lineage();
  ASSERT_NE(db, nullptr);
  auto run = db->LatestRun();
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->state, RunState::kFailed);
  EXPECT_NE(run->cause.find("restart budget of 0 exhausted; last incident: rank 0 killed by signal 6 (SIGABRT)"),
            std::string::npos)
      << run->cause;
  auto inc = db->LastIncident(run->run_id);
  ASSERT_TRUE(inc.ok() && inc->has_value());
  EXPECT_EQ((*inc)->kind, "budget_exhausted");
  EXPECT_EQ((*inc)->runbook, "runbooks/restart-budget.md");
}

// A checkpoint save fails for a real filesystem reason (a regular file sits
// where the step folder goes: ENOTDIR) while the saves before and after it
// succeed. The run is not interrupted, and lineage.db, `runctl lineage` and
// `runctl triage` tell on-call which step failed and why.
TEST_F(SupervisionTest, AFailedCheckpointSaveIsRecordedAndTheRunGoesOn) {
  WriteJob();
  std::filesystem::create_directories(dir_ / "ck");
  WriteFile(dir_ / "ck/step-000000000010", "not a folder\n");  // every_steps = 5: saves 5, 10, ..., 30
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  ExpectFinishedBitExact(daemon);  // no restart, same parameters as the fault-free run
  auto db = Lineage();
  ASSERT_NE(db, nullptr);
  auto run = db->LatestRun();
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->state, RunState::kSucceeded);
  auto gens = db->Generations(run->run_id);
  ASSERT_TRUE(gens.ok());
  EXPECT_EQ(gens->size(), 1u) << "a failed save must not be treated as a crash";

  auto events = db->Events(run->run_id, 100);
  ASSERT_TRUE(events.ok());
  std::vector<EventRecord> failed;
  for (const auto& e : *events) {
    if (e.kind == "checkpoint_failed") failed.push_back(e);
    EXPECT_NE(e.kind, "crash") << e.summary;
  }
  // Both ranks report the failed save of step 10; it is one event.
  ASSERT_EQ(failed.size(), 1u) << ReadFile(dir_ / "daemon.log");
  const EventRecord& ev = failed.front();
  EXPECT_TRUE(ev.incident);
  EXPECT_TRUE(ev.rank.has_value());
  EXPECT_NE(ev.summary.find("checkpoint step 10 failed on rank"), std::string::npos) << ev.summary;
  EXPECT_NE(ev.summary.find("step-000000000010"), std::string::npos) << ev.summary;
  EXPECT_NE(ev.summary.find("Not a directory"), std::string::npos) << ev.summary;
  EXPECT_NE(ev.action.find("training continues; step 10 not committed (newest committed: 5)"), std::string::npos)
      << ev.action;
  EXPECT_EQ(ev.runbook, "runbooks/checkpoint-failed.md");
  auto evidence = nlohmann::json::parse(ev.evidence_json);
  EXPECT_EQ(evidence["step"], 10);
  ASSERT_TRUE(evidence["reports"].is_array());
  ASSERT_FALSE(evidence["reports"].empty());
  EXPECT_NE(evidence["reports"][0]["error"].get<std::string>().find("Not a directory"), std::string::npos)
      << ev.evidence_json;

  auto ckpts = db->Checkpoints(run->run_id);
  ASSERT_TRUE(ckpts.ok());
  std::set<int64_t> committed;
  for (const auto& k : *ckpts) {
    if (k.state == CheckpointState::kCommitted) committed.insert(k.step);
  }
  EXPECT_EQ(committed.count(10), 0u);
  EXPECT_EQ(committed.count(15), 1u) << "the next save after the failed one commits";
  EXPECT_EQ(committed.count(30), 1u);

  ProcessResult lineage = RunProcess({BuildPath("cli/runctl"), "--run-dir", dir_ / "run", "lineage", "latest"});
  EXPECT_EQ(lineage.exit_code, 0) << lineage.output;
  EXPECT_NE(lineage.output.find("[checkpoint_failed]"), std::string::npos) << lineage.output;
  EXPECT_NE(lineage.output.find("checkpoint step 10 failed"), std::string::npos) << lineage.output;
  EXPECT_NE(lineage.output.find("runbooks/checkpoint-failed.md"), std::string::npos) << lineage.output;
  EXPECT_NE(lineage.output.find("checkpoint step 15 committed"), std::string::npos) << lineage.output;
  ProcessResult triage = RunProcess({BuildPath("cli/runctl"), "--run-dir", dir_ / "run", "triage", "latest"});
  EXPECT_EQ(triage.exit_code, 0) << triage.output;
  EXPECT_NE(triage.output.find("incident  checkpoint_failed"), std::string::npos) << triage.output;
  EXPECT_NE(triage.output.find("Not a directory"), std::string::npos) << triage.output;
  EXPECT_NE(triage.output.find("checkpoint-failed.md"), std::string::npos) << triage.output;
}

}  // namespace
}  // namespace holdfast
