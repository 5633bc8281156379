// Runs the real runctl binary against lineage.db files built through
// LineageDb: the commands over the recorded run (runs, lineage, triage,
// recorded status, report) and bad input. The live commands are in
// runctl_live_test.cc.
#include <algorithm>

#include "cli/runctl_test_fixture.h"

namespace holdfast {
namespace {

TEST_F(RunctlTest, RunsListsEveryRunWithItsState) {
  BuildLineage();
  Outcome o = Run({"runs"});
  ASSERT_EQ(o.exit, 0) << o.err;
  EXPECT_TRUE(Has(o.out, "RUN")) << o.out;
  EXPECT_TRUE(Has(o.out, kRunA));
  EXPECT_TRUE(Has(o.out, "gpt-small"));
  EXPECT_TRUE(Has(o.out, "restart budget exhausted after a hang"));
  EXPECT_TRUE(Has(o.out, kRunB));
  EXPECT_TRUE(Has(o.out, "running"));

  json j = RunJson({"runs"});
  ASSERT_EQ(j["runs"].size(), 2u);
  json a;
  for (const json& r : j["runs"]) {
    if (r["run_id"] == kRunA) a = r;
  }
  ASSERT_TRUE(a.is_object()) << j.dump();
  EXPECT_EQ(a["state"], "failed");
  EXPECT_EQ(a["attempts"], 1);
  EXPECT_EQ(a["last_step"], 140);
  EXPECT_EQ(a["name"], "gpt-small");
}

TEST_F(RunctlTest, LineageIsATimelineOfAttemptsGenerationsCheckpointsAndEvents) {
  BuildLineage();
  Outcome o = Run({"lineage", "r-20250101-aaa"});  // a unique prefix
  ASSERT_EQ(o.exit, 0) << o.err;
  for (const char* want :
       {"attempt 1 started: fresh start", "generation 0 started from step 0",
        "checkpoint step 100 committed (3.0 MiB", "[crash] rank 1 on node0",
        "-> stopped all ranks; restarting generation 1 from step 100",
        "generation 0 ended failed at step 117: rank 1 crashed",
        "generation 1 started from step 100", "[hang]", "(runbooks/hang.md)",
        "2025-01-01 12:00:"}) {
    EXPECT_TRUE(Has(o.out, want)) << "missing '" << want << "' in\n" << o.out;
  }
  // In time order: the checkpoint before the crash, the crash before the hang.
  EXPECT_LT(o.out.find("checkpoint step 100"), o.out.find("[crash]"));
  EXPECT_LT(o.out.find("[crash]"), o.out.find("generation 1 started"));
  EXPECT_LT(o.out.find("generation 1 started"), o.out.find("[hang]"));

  json j = RunJson({"lineage", kRunA});
  EXPECT_EQ(j["run"]["run_id"], kRunA);
  ASSERT_EQ(j["attempts"].size(), 1u);
  ASSERT_EQ(j["attempts"][0]["generations"].size(), 2u);
  EXPECT_EQ(j["attempts"][0]["generations"][1]["start_step"], 100);
  ASSERT_EQ(j["checkpoints"].size(), 1u);
  EXPECT_EQ(j["checkpoints"][0]["step"], 100);
  EXPECT_EQ(j["checkpoints"][0]["state"], "committed");
  ASSERT_GE(j["events"].size(), 2u);
  EXPECT_EQ(j["events"][0]["kind"], "crash");
  EXPECT_EQ(j["events"][0]["evidence"]["signal"], 11);
}

TEST_F(RunctlTest, TriageNamesTheCulpritWhatEveryoneDidTheActionAndTheRunbook) {
  BuildLineage();
  Outcome o = Run({"triage", "latest"});  // the newest run (B) has no incident
  ASSERT_EQ(o.exit, 0) << o.err;
  EXPECT_TRUE(Has(o.out, "no incident recorded")) << o.out;

  o = Run({"triage", kRunA});
  ASSERT_EQ(o.exit, 0) << o.err;
  for (const std::string& want : std::vector<std::string>{
           "incident  hang at 2025-01-01 12:", "attempt 1, generation 1, node node0",
        "culprit   rank 1 on node 0, pid 6101: forward at step 140", "process stopped",
        "rank 0 on node 0, pid 6100: collective at step 140",
        "waiting on collective #9001 (allreduce)", "no step for 5m12s",
        "action    stopped all ranks; restart budget exhausted (3/3)",
        "runbook   hang.md  (",  // its file: runctl_runbook_test.cc
        "log       " + dir_ + "/logs/a1-g1-rank1.log (on node0)\n"}) {
    EXPECT_TRUE(Has(o.out, want)) << "missing '" << want << "' in\n" << o.out;
  }

  json j = RunJson({"triage", kRunA});
  EXPECT_EQ(j["run"]["state"], "failed");
  EXPECT_EQ(j["incident"]["kind"], "hang");
  EXPECT_EQ(j["incident"]["culprits"], json({1}));
  EXPECT_EQ(j["incident"]["runbook"], "runbooks/hang.md");
  EXPECT_EQ(j["incident"]["runbook_file"], "hang.md");
  EXPECT_EQ(j["incident"]["evidence"]["ranks"][0]["waiting_on"], 9001);
  EXPECT_EQ(j["incident"]["log_path"], dir_ + "/logs/a1-g1-rank1.log");
}

TEST_F(RunctlTest, RecordedStatusShowsTheLastIncidentsRanksAndExitsByTheRunsHealth) {
  BuildLineage();
  Outcome o = Run({"status", kRunA});
  EXPECT_EQ(o.exit, 7) << o.err;
  for (const char* want : {"ranks at the last incident (hang at 2025-01-01 12:",
                           "2 ranks on 1 node: 1 running at step 140, 1 stopped (SIGSTOP)\n",
                           "not healthy: 1 rank", "culprit, stopped (SIGSTOP)"}) {
    EXPECT_TRUE(Has(o.out, want)) << "missing '" << want << "' in\n" << o.out;
  }
  o = Run({"status", kRunA, "--rank", "1"});
  EXPECT_EQ(o.exit, 7) << o.err;
  EXPECT_TRUE(Has(o.out, "\n  rank 1 on node 0, pid 6101: forward at step 140")) << o.out;
  EXPECT_FALSE(Has(o.out, "rank 0 on node 0")) << o.out;
  o = Run({"status", kRunA, "--node", "0"});
  EXPECT_TRUE(Has(o.out, "  rank 0 on node 0") && Has(o.out, "  rank 1 on node 0")) << o.out;
  o = Run({"status", kRunA, "--all"});
  EXPECT_TRUE(Has(o.out, "  rank 0 on node 0") && Has(o.out, "  rank 1 on node 0")) << o.out;

  // Bad selections: exit 2 saying what the run has; nothing to select: 3.
  o = Run({"status", kRunA, "--rank", "5"});
  EXPECT_EQ(o.exit, 2);
  EXPECT_TRUE(Has(o.err, "--rank: no rank 5 in this run (it has ranks 0-1)")) << o.err;
  o = Run({"status", kRunA, "--node", "gpu-z9"});
  EXPECT_EQ(o.exit, 2);
  EXPECT_TRUE(Has(o.err, "--node: no node 'gpu-z9' in this run (it has node 0)")) << o.err;
  o = Run({"status", kRunA, "--rank", "1-x"});
  EXPECT_EQ(o.exit, 2);
  EXPECT_TRUE(Has(o.err, "--rank: '1-x' is not a rank or a range")) << o.err;
  o = Run({"status", kRunA, "--rank", "1", "--all"});
  EXPECT_EQ(o.exit, 2) << o.out << o.err;
  o = Run({"status", kRunB, "--rank", "1"});  // running, no incident: no rank recorded
  EXPECT_EQ(o.exit, 3) << o.out << o.err;
  EXPECT_TRUE(Has(o.err, "no rank was recorded")) << o.err;

  // Run B runs (as lineage says): 0.
  o = Run({"status", kRunB});
  EXPECT_EQ(o.exit, 0) << o.err;
  EXPECT_EQ(RunJson({"status", kRunB})["health"], "training");
  // Stopped and preempted: 8.
  ASSERT_TRUE(OpenWriter()->EndRun(kRunB, RunState::kStopped, "stopped by runctl stop").ok());
  EXPECT_EQ(Run({"status", kRunB}).exit, 8);
  EXPECT_EQ(RunJson({"status", kRunB}, 8)["health"], "stopped");
}

// A recorded 512-rank hang (64 nodes, rank 137 stopped, the others in
// allreduce #9001) through the real binary: triage's first 10 lines hold the
// culprit, its log file, the action and the runbook, the others are one line;
// --json keeps every rank; the recorded status stays on one screen.
TEST_F(RunctlTest, ARecorded512RankHangIsReadableFromTheTop) {
  {
    std::unique_ptr<LineageDb> d = OpenWriter();
    RunRecord r;
    r.run_id = kRunA;
    r.name = "gpt-512";
    r.run_dir = dir_;
    r.world_size = 512;
    ASSERT_TRUE(d->CreateRun(r).ok());
    ASSERT_TRUE(d->StartAttempt(kRunA, AttemptStart{}).ok());
    json ranks = json::array();
    for (int i = 0; i < 512; ++i) {
      char host[32];
      std::snprintf(host, sizeof(host), "gpu-a%02d", i / 8);
      json rank = {{"rank", i}, {"node", i / 8}, {"host", host}, {"pid", 7000 + i}, {"alive", true},
                   {"step", 140}, {"phase_age_s", 300.0}, {"heartbeat_age_s", 300.0}};
      if (i == 137) {
        rank.update({{"proc_state", "T"}, {"phase", "forward"}, {"collectives_issued", 9000}, {"waiting_on", 0}});
      } else {
        rank.update({{"proc_state", "S"}, {"phase", "collective"}, {"collectives_issued", 9001}, {"waiting_on", 9001},
                     {"recent_collectives", {{{"seq", 9001}, {"kind", "allreduce"}, {"done", false}}}}});
      }
      ranks.push_back(rank);
    }
    EventRecord hang;
    hang.run_id = kRunA;
    hang.kind = event_kind::kHang;
    hang.attempt = 1;
    hang.generation = 0;
    hang.node = "gpu-a17";
    hang.summary = "rank 137 never entered allreduce #9001 that 511 ranks wait in";
    hang.evidence_json = json({{"stalled_s", 301.0}, {"timeout_s", 300.0}, {"culprits", {137}}, {"ranks", ranks}}).dump();
    hang.action = "stopped all ranks; restart budget exhausted (3/3)";
    hang.runbook = "runbooks/hang.md";
    ASSERT_TRUE(d->RecordEvent(hang).ok());
    ASSERT_TRUE(d->EndRun(kRunA, RunState::kFailed, "restart budget exhausted after a hang").ok());
  }
  auto head = [](const std::string& text, int n) {
    size_t at = 0;
    for (int i = 0; i < n && at != std::string::npos; ++i) at = text.find('\n', at == 0 ? 0 : at + 1);
    return at == std::string::npos ? text : text.substr(0, at + 1);
  };
  auto lines = [](const std::string& text) { return std::count(text.begin(), text.end(), '\n'); };
  Outcome o = Run({"triage", kRunA});
  ASSERT_EQ(o.exit, 0) << o.err;
  const std::string first10 = head(o.out, 10);
  EXPECT_TRUE(Has(first10, "culprit   rank 137 on gpu-a17, pid 7137: forward at step 140")) << o.out;
  EXPECT_TRUE(Has(first10, "log       " + dir_ + "/logs/a1-g0-rank137.log (on gpu-a17)\n")) << o.out;
  EXPECT_TRUE(Has(first10, "action    stopped all ranks; restart budget exhausted (3/3)\n")) << o.out;
  EXPECT_TRUE(Has(first10, "runbook   hang.md  (")) << o.out;
  EXPECT_TRUE(Has(o.out, "  511 ranks waiting in allreduce #9001 at step 140 since ")) << o.out;
  EXPECT_LE(lines(o.out), 12) << o.out;
  json j = RunJson({"triage", kRunA});
  EXPECT_EQ(j["incident"]["evidence"]["ranks"].size(), 512u) << "--json is not folded";
  EXPECT_EQ(j["incident"]["log_path"], dir_ + "/logs/a1-g0-rank137.log");
  o = Run({"triage", kRunA, "--all"});
  EXPECT_GE(lines(o.out), 511) << o.out;

  o = Run({"status", kRunA});
  EXPECT_EQ(o.exit, 7) << o.err;
  EXPECT_LE(lines(o.out), 40) << o.out;
  EXPECT_TRUE(Has(o.out, "512 ranks on 64 nodes: 511 running at step 140, 1 stopped (SIGSTOP)\n")) << o.out;
  EXPECT_TRUE(Has(o.out, "gpu-a17  137   7137  culprit, stopped (SIGSTOP)")) << o.out;
  o = Run({"status", kRunA, "--node", "gpu-a17"});
  EXPECT_EQ(o.exit, 7) << o.err;
  std::istringstream in(o.out);
  int on_node = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("  rank ", 0) == 0) {
      ++on_node;
      EXPECT_TRUE(Has(line, " on gpu-a17, ")) << line;
    }
  }
  EXPECT_EQ(on_node, 8) << o.out;
}

TEST_F(RunctlTest, TriageOfACrashShowsTheSignalAndTheLastLogLines) {
  int64_t now = kT0;
  LineageOptions options;
  options.clock = [&now] { return now += 1000; };
  {
    auto db = LineageDb::Open(db_path(), options);
    ASSERT_TRUE(db.ok());
    RunRecord r;
    r.run_id = kRunA;
    r.name = "crashy";
    ASSERT_TRUE((*db)->CreateRun(r).ok());
    EventRecord e;
    e.run_id = kRunA;
    e.kind = event_kind::kCrash;
    e.rank = 3;
    e.summary = "rank 3 killed by signal 6 (SIGABRT)";
    e.evidence_json = R"({"rank":3,"exit_code":-1,"signal":6,"log_tail":["CUDA error: an illegal memory access"]})";
    e.action = "restarted generation 1";
    ASSERT_TRUE((*db)->RecordEvent(e).ok());
  }
  Outcome o = Run({"triage", "r-2025"});
  ASSERT_EQ(o.exit, 0) << o.err;
  EXPECT_TRUE(Has(o.out, "culprit   rank 3")) << o.out;
  EXPECT_TRUE(Has(o.out, "exit      killed by signal 6 (SIGABRT)")) << o.out;
  EXPECT_TRUE(Has(o.out, "| CUDA error: an illegal memory access")) << o.out;
  // No runbook in the event: the kind's own.
  EXPECT_TRUE(Has(o.out, "runbook   crash.md  (")) << o.out;
}

TEST_F(RunctlTest, StatusWithoutADaemonFallsBackToLineage) {
  BuildLineage();
  Outcome o = Run({"status", kRunA});
  ASSERT_EQ(o.exit, 7) << "run A failed\n" << o.err;
  EXPECT_TRUE(Has(o.out, "no holdfastd answers; last recorded state:")) << o.out;
  EXPECT_TRUE(Has(o.out, "no daemon is listening on " + dir_ + "/holdfastd.sock")) << o.out;
  EXPECT_TRUE(Has(o.out, kRunA));
  EXPECT_TRUE(Has(o.out, "failed: restart budget exhausted after a hang"));
  EXPECT_TRUE(Has(o.out, "last step 140"));
  EXPECT_TRUE(Has(o.out, "step 100, committed"));
  EXPECT_TRUE(Has(o.out, "hang at"));

  json j = RunJson({"status", kRunA}, 7);
  EXPECT_EQ(j["live"], false);
  EXPECT_EQ(j["health"], "failed");
  EXPECT_EQ(j["run"]["run_id"], kRunA);
  EXPECT_EQ(j["generation"]["last_step"], 140);
  EXPECT_EQ(j["last_checkpoint"]["step"], 100);
  EXPECT_EQ(j["last_incident"]["kind"], "hang");
}

TEST_F(RunctlTest, RecordedStatusOfASlurmRunShowsItsJobRestartCountAndHosts) {
  BuildLineage();  // run A is local: no slurm row
  const std::string run = "r-20250102-5151";
  {
    std::unique_ptr<LineageDb> d = OpenWriter();
    RunRecord r;
    r.run_id = run;
    r.name = "gpt-slurm";
    r.run_dir = dir_;
    r.world_size = 16;
    r.nodes = {"n1", "n2"};
    r.scheduler = SchedulerKind::kSlurm;
    r.slurm_job_id = "41";
    ASSERT_TRUE(d->CreateRun(r).ok());
    AttemptStart first;
    first.slurm_job_id = "41";
    first.nodes = {"n1", "n2"};
    ASSERT_TRUE(d->StartAttempt(run, first).ok());
    ASSERT_TRUE(d->EndAttempt(run, 1, RunState::kPreempted, "n2 lost; requeued without it").ok());
    AttemptStart requeued;  // Slurm requeues under the same job id, one restart on
    requeued.slurm_job_id = "41";
    requeued.restart_count = 1;
    requeued.nodes = {"n1", "n3"};
    ASSERT_TRUE(d->StartAttempt(run, requeued).ok());
  }
  Outcome o = Run({"status", run});
  ASSERT_EQ(o.exit, 0) << o.err;
  EXPECT_TRUE(Has(o.out, "no holdfastd answers; last recorded state:")) << o.out;
  EXPECT_TRUE(Has(o.out, "job 41 (restart 1) on n1,n3")) << o.out;
  EXPECT_FALSE(Has(o.out, "(restart 0)")) << "the newest attempt's, not the first's:\n" << o.out;
  EXPECT_TRUE(Has(o.out, "\nslurm ")) << "a 'slurm' row in\n" << o.out;

  json j = RunJson({"status", run});
  EXPECT_EQ(j["slurm"]["job_id"], "41");
  EXPECT_EQ(j["slurm"]["restart_count"], 1);
  EXPECT_EQ(j["slurm"]["hosts"], json::array({"n1", "n3"}));
  EXPECT_EQ(j["attempt"]["attempt"], 2);

  o = Run({"status", kRunA});
  ASSERT_EQ(o.exit, 7) << o.err;
  EXPECT_FALSE(Has(o.out, "slurm")) << o.out;
  EXPECT_TRUE(RunJson({"status", kRunA}, 7)["slurm"].is_null());
}

TEST_F(RunctlTest, BadInputGetsAClearErrorAndTheDocumentedExitCode) {
  // No lineage.db.
  Outcome o = Run({"runs"});
  EXPECT_EQ(o.exit, 3);
  EXPECT_TRUE(Has(o.err, "lineage")) << o.err;
  o = Run({"triage", "latest"});
  EXPECT_EQ(o.exit, 3);
  o = Run({"status"});  // neither daemon nor lineage
  EXPECT_EQ(o.exit, 3) << o.out << o.err;

  BuildLineage();
  o = Run({"triage", "r-19990101"});
  EXPECT_EQ(o.exit, 3);
  EXPECT_TRUE(Has(o.err, "no run 'r-19990101'")) << o.err;
  o = Run({"lineage", "r-20250101-aa"});  // matches both runs
  EXPECT_EQ(o.exit, 3);
  EXPECT_TRUE(Has(o.err, "ambiguous")) << o.err;

  o = Run({"runs", "--no-such-flag"});
  EXPECT_EQ(o.exit, 2) << o.err;
  o = Run({});
  EXPECT_EQ(o.exit, 2);
  o = Run({"lineage"});  // RUN is required
  EXPECT_EQ(o.exit, 2);
  o = Run({"resume", kRunA, "--from-step", "ten"});
  EXPECT_EQ(o.exit, 2);

  o = Run({"--help"}, {}, /*with_run_dir=*/false);
  EXPECT_EQ(o.exit, 0);
  EXPECT_TRUE(Has(o.out, "Exit codes:")) << o.out;
  EXPECT_TRUE(Has(o.out, "4  holdfastd not reachable"));
}

TEST_F(RunctlTest, ACorruptLineageDbIsAnErrorNotACrash) {
  {
    std::ofstream f(db_path());
    f << std::string(8192, 'x');
  }
  for (std::vector<std::string> args :
       {std::vector<std::string>{"runs"}, {"lineage", "latest"}, {"triage", "latest"},
        {"status"}}) {
    Outcome o = Run(args);
    EXPECT_EQ(o.exit, 1) << args[0] << ": " << o.out << o.err;
    EXPECT_FALSE(o.err.empty()) << args[0];
  }
}

TEST_F(RunctlTest, RunDirComesFromTheEnvironment) {
  BuildLineage();
  Outcome o = Run({"runs", "--json"}, {"HOLDFAST_RUN_DIR=" + dir_}, /*with_run_dir=*/false);
  ASSERT_EQ(o.exit, 0) << o.err;
  EXPECT_TRUE(Has(o.out, kRunA));
}

// ---- runctl lineage: order and steps ----

TEST_F(RunctlTest, LineageKeepsTheOrderThingsHappenedInWhenTheClockStepsBack) {
  int64_t now = kT0;
  LineageOptions options;
  options.clock = [&now] { return now += 1000; };
  {
    auto db = LineageDb::Open(db_path(), options);
    ASSERT_TRUE(db.ok());
    LineageDb& d = **db;
    RunRecord r;
    r.run_id = kRunA;
    r.name = "clocky";
    ASSERT_TRUE(d.CreateRun(r).ok());
    ASSERT_TRUE(d.StartAttempt(kRunA, {}).ok());
    ASSERT_TRUE(d.StartGeneration(kRunA, 1, 0).ok());
    ASSERT_TRUE(d.UpdateGenerationStep(kRunA, 1, 0, 50).ok());
    EventRecord crash;
    crash.run_id = kRunA;
    crash.kind = event_kind::kCrash;
    crash.summary = "rank 1 killed by signal 9";
    ASSERT_TRUE(d.RecordEvent(crash).ok());
    ASSERT_TRUE(d.EndGeneration(kRunA, 1, 0, RunState::kFailed, "rank 1 crashed").ok());
    now -= 3'600'000;  // the node's clock steps back an hour
    ASSERT_TRUE(d.StartGeneration(kRunA, 1, 0).ok());
    CheckpointRecord ck;
    ck.run_id = kRunA;
    ck.step = 25;
    ck.path = CheckpointPath(25);
    ASSERT_TRUE(d.RecordCheckpoint(ck).ok());
    EventRecord hang = crash;
    hang.kind = event_kind::kHang;
    hang.summary = "rank 0 stuck in allreduce";
    ASSERT_TRUE(d.RecordEvent(hang).ok());
    ASSERT_TRUE(d.EndRun(kRunA, RunState::kFailed, "restart budget exhausted").ok());
  }
  Outcome o = Run({"lineage", kRunA});
  ASSERT_EQ(o.exit, 0) << o.err;
  const std::vector<std::string> in_order = {
      "attempt 1 started", "generation 0 started", "[crash] rank 1 killed by signal 9",
      "generation 0 ended failed at step 50", "generation 1 started",
      "checkpoint step 25 committed", "[hang] rank 0 stuck in allreduce",
      "generation 1 ended failed", "attempt 1 ended failed"};
  size_t at = 0;
  for (const std::string& want : in_order) {
    size_t found = o.out.find(want);
    ASSERT_NE(found, std::string::npos) << "missing '" << want << "' in\n" << o.out;
    EXPECT_GT(found, at) << "'" << want << "' out of order in\n" << o.out;
    at = found;
  }
  // The times are shown as recorded: the step back is visible, not hidden.
  EXPECT_TRUE(Has(o.out, "2025-01-01 11:")) << o.out;

  json j = RunJson({"lineage", kRunA});
  ASSERT_EQ(j["events"].size(), 2u);
  EXPECT_EQ(j["events"][0]["kind"], "crash");
  EXPECT_EQ(j["events"][1]["kind"], "hang");
  o = Run({"triage", kRunA});  // the last incident is the one that happened last
  EXPECT_TRUE(Has(o.out, "incident  hang")) << o.out;
}

TEST_F(RunctlTest, AGenerationThatNeverSteppedEndsAtTheStepItResumedFrom) {
  int64_t now = kT0;
  LineageOptions options;
  options.clock = [&now] { return now += 1000; };
  {
    auto db = LineageDb::Open(db_path(), options);
    ASSERT_TRUE(db.ok());
    RunRecord r;
    r.run_id = kRunA;
    r.name = "resumed";
    ASSERT_TRUE((*db)->CreateRun(r).ok());
    AttemptStart start;
    start.resumed_from_step = 6000;
    ASSERT_TRUE((*db)->StartAttempt(kRunA, start).ok());
    ASSERT_TRUE((*db)->StartGeneration(kRunA, 1, 6000).ok());
    ASSERT_TRUE((*db)->EndGeneration(kRunA, 1, 0, RunState::kFailed, "rank 0 crashed").ok());
  }
  Outcome o = Run({"lineage", kRunA});
  ASSERT_EQ(o.exit, 0) << o.err;
  EXPECT_TRUE(Has(o.out, "generation 0 ended failed at step 6000: rank 0 crashed")) << o.out;
  EXPECT_FALSE(Has(o.out, "at step 0")) << o.out;
  EXPECT_FALSE(Has(o.out, "at step -")) << o.out;
}

// ---- report ----

// "%.1f" of a duration in ms, as the report's breakdown table shows seconds.
std::string Seconds(int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", static_cast<double>(ms) / 1000.0);
  return buf;
}

TEST_F(RunctlTest, ReportShowsEveryIncidentAndCheckpointWithLineagesNumbers) {
  BuildLineage();
  // Run A's metrics: steps 1..117 by generation 0, then 101..140 again by
  // generation 1 (appended, as the trainer does), 40 ms a step.
  {
    std::ofstream m(dir_ + "/metrics.jsonl");
    int64_t t = kT0;
    for (int s = 1; s <= 117; ++s) m << json({{"step", s}, {"loss", 5.0 - s * 0.01}, {"step_ms", 40}, {"time_ms", t += 40}}).dump() << "\n";
    for (int s = 101; s <= 140; ++s) m << json({{"step", s}, {"loss", 4.0 - s * 0.01}, {"step_ms", 40}, {"time_ms", t += 40}}).dump() << "\n";
  }
  const std::string out = dir_ + "/report.html";
  Outcome o = Run({"report", kRunA, "--out", out, "--metrics", dir_ + "/metrics.jsonl"});
  ASSERT_EQ(o.exit, 0) << o.err;
  EXPECT_TRUE(Has(o.out, out)) << o.out;
  const std::string html = ReadFile(out);
  ASSERT_FALSE(html.empty());
  EXPECT_FALSE(Has(html, "<script"));

  LineageOptions ro;
  ro.read_only = true;
  auto db = LineageDb::Open(db_path(), ro);
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  auto attempts = (*db)->Attempts(kRunA);
  auto gens = (*db)->Generations(kRunA);
  auto ckpts = (*db)->Checkpoints(kRunA);
  auto events = (*db)->Events(kRunA, 0);
  ASSERT_TRUE(attempts.ok() && gens.ok() && ckpts.ok() && events.ok());
  ASSERT_EQ(gens->size(), 2u);

  // Every incident, with its triage (the same text `runctl triage` prints).
  int incidents = 0;
  const EventRecord* crash = nullptr;
  int64_t detection_ms = 0;
  for (const EventRecord& e : *events) {
    if (!e.incident) continue;
    ++incidents;
    EXPECT_TRUE(Has(html, "id='incident-" + std::to_string(e.id) + "'")) << e.kind;
    EXPECT_TRUE(Has(html, "#" + std::to_string(incidents) + " " + e.kind)) << e.kind;
    EXPECT_TRUE(Has(html, "<div>" + e.summary + "</div>")) << e.summary;
    for (const GenerationRecord& g : *gens) {
      if (g.generation != e.generation) continue;
      // A hang: the stall its evidence records, within the generation's time (docs/report.md).
      detection_ms += e.kind == event_kind::kHang ? std::min<int64_t>(312'500, e.time_ms - g.started_ms)
                                                  : e.time_ms - *g.last_step_ms;
    }
    if (e.kind == event_kind::kCrash) crash = &e;
  }
  EXPECT_EQ(incidents, 2);
  EXPECT_TRUE(Has(html, "Incidents (2)"));
  EXPECT_TRUE(Has(html, "culprit   rank 1 on node 0, pid 6101: forward at step 140"));  // hang's triage
  EXPECT_TRUE(Has(html, "  | Segmentation fault in fused_adam"));                   // crash's triage
  // Every checkpoint.
  for (const CheckpointRecord& k : *ckpts) {
    EXPECT_TRUE(Has(html, "<title>checkpoint step " + std::to_string(k.step) + " committed")) << k.step;
    EXPECT_TRUE(Has(html, "<tr><td class='n'>" + std::to_string(k.step) + "</td>")) << k.step;
  }
  // The numbers, from lineage: wall = the attempt; detection = each incident
  // after its generation's last step report (a hang: its stall); restart = generation 1's start
  // after the crash; redone = steps 101..117 x the median step (40 ms).
  ASSERT_NE(crash, nullptr);
  const AttemptRecord& a = attempts->front();
  const int64_t wall_ms = *a.ended_ms - a.started_ms;
  const int64_t restart_ms = (*gens)[1].started_ms - crash->time_ms;
  const int64_t redone_ms = (117 - 100) * 40;
  EXPECT_TRUE(Has(html, "<td>wall time</td><td class='n'>" + Seconds(wall_ms) + "</td>")) << html;
  EXPECT_TRUE(Has(html, "<td>detection</td><td class='n'>" + Seconds(detection_ms) + "</td>"));
  EXPECT_TRUE(Has(html, "<td>restart</td><td class='n'>" + Seconds(restart_ms) + "</td>"));
  EXPECT_TRUE(Has(html, "<td>redone steps</td><td class='n'>" + Seconds(redone_ms) + "</td>"));
  EXPECT_TRUE(Has(html, "101–117 (17)"));
  const int64_t effective_ms = wall_ms - detection_ms - restart_ms - redone_ms;  // no stall: no step 101 after 100
  ASSERT_GT(effective_ms, 0);
  EXPECT_TRUE(Has(html, "<b>" + Seconds(effective_ms) + "</b>"));

  json j = RunJson({"report", kRunA, "--out", out, "--metrics", dir_ + "/metrics.jsonl"});
  EXPECT_EQ(j["report"], out);
  EXPECT_NEAR(j["effective_s"].get<double>(), effective_ms / 1000.0, 1e-6);
  EXPECT_NEAR(j["wall_s"].get<double>(), wall_ms / 1000.0, 1e-6);

  // `runs` shows the effective time (lineage's own step-time estimate).
  o = Run({"runs"});
  ASSERT_EQ(o.exit, 0) << o.err;
  EXPECT_TRUE(Has(o.out, "EFFECTIVE")) << o.out;
  json runs = RunJson({"runs"});
  for (const json& r : runs["runs"]) {
    if (r["run_id"] == kRunA) {
      EXPECT_GT(r["effective_s"].get<double>(), 0);
    }
  }
}

TEST_F(RunctlTest, ReportFindsMetricsFromTheRunsJobConfig) {
  {
    auto d = OpenWriter();
    RunRecord r;
    r.run_id = kRunA;
    r.name = "cfg";
    r.run_dir = dir_;
    r.config_text = "[job]\ncommand = [\"holdfast-train\", \"--config\", \"t.toml\", \"--set\", \"output.dir=" +
                    dir_ + "/out\"]\nnproc = 2\n";
    ASSERT_TRUE(d->CreateRun(r).ok());
    ASSERT_TRUE(d->StartAttempt(kRunA, AttemptStart{}).ok());
  }
  mkdir((dir_ + "/out").c_str(), 0755);
  std::ofstream(dir_ + "/out/metrics.jsonl") << "{\"step\":1,\"loss\":5.5,\"step_ms\":10}\n";
  Outcome o = Run({"report", "latest"});  // default --out: RUN_DIR/report-RUN.html
  ASSERT_EQ(o.exit, 0) << o.err;
  const std::string html = ReadFile(dir_ + "/report-" + kRunA + ".html");
  EXPECT_TRUE(Has(html, "metrics: " + dir_ + "/out/metrics.jsonl (1 steps)")) << html;

  o = Run({"report", "latest", "--out", dir_ + "/r.html", "--metrics", dir_ + "/nope.jsonl"});
  EXPECT_EQ(o.exit, 3);
  EXPECT_TRUE(Has(o.err, "nope.jsonl")) << o.err;
}

}  // namespace
}  // namespace holdfast
