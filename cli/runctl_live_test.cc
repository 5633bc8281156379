// Runs the real runctl binary against a stand-in daemon on a real Unix
// socket: status, checkpoint, stop, resume and health.
#include <algorithm>

#include "cli/runctl_test_fixture.h"

namespace holdfast {
namespace {

TEST_F(RunctlTest, StatusFromALiveDaemonShowsTheRanks) {
  RunStatus s;
  s.run_id = kRunA;
  s.name = "gpt-small";
  s.state = "running";
  s.attempt = 2;
  s.generation = 1;
  s.step = 1234;
  s.world_size = 2;
  s.restarts_used = 1;
  s.restart_budget = 3;
  s.last_checkpoint_step = 1200;
  s.uptime_s = 3725;
  NodeStatus n;
  RankStatus r;
  r.rank = 0;
  r.pid = 4242;
  r.state = "running";
  r.step = 1234;
  r.phase = "collective";
  r.heartbeat_age_s = 0.5;
  r.last_step_ms = 812.0;
  r.waiting_on = 9001;
  r.collectives_issued = 9001;
  n.ranks.push_back(r);
  r.rank = 1;
  r.pid = 4243;
  r.phase = "forward";
  r.waiting_on.reset();
  n.ranks.push_back(r);
  s.nodes.push_back(n);
  std::vector<std::string> ops;
  {
    FakeDaemon daemon(dir_, [&](const ControlRequest& req) {
      return EncodeOkResponse(req.id, EncodeStatusResult(s));
    });
    Outcome o = Run({"status"});  // no lineage.db needed while the daemon answers
    ASSERT_EQ(o.exit, 0) << o.err;
    for (const char* want : {"run r-20250101-aaaa (gpt-small)  running  attempt 2, generation 1, step 1234",
                             "restarts 1/3", "last checkpoint step 1200", "up 1h02m",
                             "\n\n2 ranks on 1 node: 2 running at step 1234\n",
                             "waiting in collectives: 1 in #9001\n", "nodes: the one node healthy\n"}) {
      EXPECT_TRUE(Has(o.out, want)) << "missing '" << want << "' in\n" << o.out;
    }
    EXPECT_FALSE(Has(o.out, "PID")) << "healthy ranks are summarised, not listed:\n" << o.out;
    EXPECT_FALSE(Has(o.out, "slurm")) << "a local run has no slurm line:\n" << o.out;
  }
  {
    FakeDaemon daemon(dir_, [&](const ControlRequest& req) {
      return EncodeOkResponse(req.id, EncodeStatusResult(s));
    });
    Outcome o = Run({"status", "--all"});  // every rank, every column
    ASSERT_EQ(o.exit, 0) << o.err;
    for (const char* want : {"PID", "STEPS/S", "WAITING ON", "4242", "4243", "#9001", "812 ms", "forward"}) {
      EXPECT_TRUE(Has(o.out, want)) << "missing '" << want << "' in\n" << o.out;
    }
  }
  {
    FakeDaemon daemon(dir_, [&](const ControlRequest& req) {
      return EncodeOkResponse(req.id, EncodeStatusResult(s));
    });
    json j = RunJson({"status"});
    EXPECT_EQ(j["live"], true);
    EXPECT_EQ(j["status"]["nodes"][0]["ranks"][0]["pid"], 4242);
    EXPECT_EQ(j["status"]["scheduler"], "local");
  }
  // Under Slurm: the job, its restart count (0 too) and the hosts, after the header.
  s.scheduler = "slurm";
  s.job_id = "42";
  s.restart_count = 0;
  s.hosts = {"n1", "n3"};
  {
    FakeDaemon daemon(dir_, [&](const ControlRequest& req) {
      return EncodeOkResponse(req.id, EncodeStatusResult(s));
    });
    Outcome o = Run({"status"});
    ASSERT_EQ(o.exit, 0) << o.err;
    EXPECT_TRUE(Has(o.out, "step 1234\nslurm job 42 (restart 0) on n1,n3\n")) << o.out;
  }
  {
    FakeDaemon daemon(dir_, [&](const ControlRequest& req) {
      return EncodeOkResponse(req.id, EncodeStatusResult(s));
    });
    json j = RunJson({"status"});
    EXPECT_EQ(j["status"]["scheduler"], "slurm");
    EXPECT_EQ(j["status"]["job_id"], "42");
    EXPECT_EQ(j["status"]["restart_count"], 0);
    EXPECT_EQ(j["status"]["hosts"], json::array({"n1", "n3"}));
  }
  // Where the generation's ranks restored it from, once they have said; a fresh start is not worth a word.
  s.restored_step = 1200;
  s.restore_tier = "memory";
  for (const auto& [tier, want] : std::vector<std::pair<std::string, std::string>>{
           {"memory", "attempt 2, generation 1 (from step 1200, memory snapshot), step 1234\n"},
           {"disk", "attempt 2, generation 1 (from step 1200, disk checkpoint), step 1234\n"},
           {"none", "attempt 2, generation 1, step 1234\n"}}) {
    s.restore_tier = tier;
    FakeDaemon daemon(dir_, [&](const ControlRequest& req) {
      return EncodeOkResponse(req.id, EncodeStatusResult(s));
    });
    Outcome o = Run({"status"});
    ASSERT_EQ(o.exit, 0) << o.err;
    EXPECT_TRUE(Has(o.out, want)) << o.out;
  }
  {
    FakeDaemon daemon(dir_, [&](const ControlRequest& req) {
      return EncodeOkResponse(req.id, EncodeStatusResult(s));
    });
    json j = RunJson({"status"});
    EXPECT_EQ(j["status"]["restored_step"], 1200);
    EXPECT_EQ(j["status"]["restore_tier"], "none");
  }
}

// 512 ranks on 64 nodes, rank 137 stopped (SIGSTOP): the daemon's reply is
// far past 64 KiB; runctl summarises it on one screen and exits 6 (hung).
TEST_F(RunctlTest, StatusOf512LiveRanksIsOneScreenAndExitsHung) {
  RunStatus s;
  s.run_id = kRunA;
  s.name = "gpt-512";
  s.state = "running";
  s.step = 1234;
  s.world_size = 512;
  for (int n = 0; n < 64; ++n) {
    NodeStatus node;
    node.node = n;
    char host[32];
    std::snprintf(host, sizeof(host), "gpu-a%02d", n);
    node.host = host;
    for (int i = 0; i < 8; ++i) {
      RankStatus r;
      r.rank = n * 8 + i;
      r.pid = 10000 + r.rank;
      r.state = r.rank == 137 ? "stopped (SIGSTOP)" : "running";
      r.step = 1234;
      r.phase = r.rank == 137 ? "forward" : "collective";
      r.heartbeat_age_s = r.rank == 137 ? 62 : 0.2;
      if (r.rank != 137) r.waiting_on = 9001;
      r.steps_per_s = 1.2;
      r.step_ms_p50 = 810;
      r.step_ms_p99 = 840;
      r.compute_ms_p50 = 200;
      r.wait_ms_p50 = 600;
      node.ranks.push_back(r);
    }
    s.nodes.push_back(node);
  }
  const std::string reply = EncodeOkResponse(1, EncodeStatusResult(s));
  ASSERT_GT(reply.size(), kMaxControlMessageBytes) << "the point: a reply longer than any request";
  FakeDaemon daemon(dir_, [&](const ControlRequest& req) { return EncodeOkResponse(req.id, EncodeStatusResult(s)); },
                    -1);
  auto lines = [](const std::string& text) { return std::count(text.begin(), text.end(), '\n'); };
  Outcome o = Run({"status"});
  EXPECT_EQ(o.exit, 6) << o.err;
  EXPECT_LE(lines(o.out), 40) << o.out;
  EXPECT_TRUE(Has(o.out, "512 ranks on 64 nodes: 511 running at step 1234, 1 stopped (SIGSTOP)\n")) << o.out;
  EXPECT_TRUE(Has(o.out, "gpu-a17  137   10137  stopped (SIGSTOP)")) << o.out;

  o = Run({"status", "--rank", "137,138"});
  EXPECT_EQ(o.exit, 6) << o.err;
  EXPECT_EQ(lines(o.out), 3 + 1 + 2) << "the run's lines, the table's header and two rows:\n" << o.out;
  o = Run({"status", "--node", "gpu-a17"});
  EXPECT_EQ(lines(o.out), 3 + 1 + 8) << o.out;
  o = Run({"status", "--all"});
  EXPECT_EQ(lines(o.out), 3 + 1 + 512) << o.out;
  o = Run({"status", "--rank", "512"});
  EXPECT_EQ(o.exit, 2);
  EXPECT_TRUE(Has(o.err, "--rank: no rank 512 in this run (it has ranks 0-511)")) << o.err;
  EXPECT_EQ(o.out, "");
  o = Run({"status", "--node", "gpu-b00"});
  EXPECT_EQ(o.exit, 2);

  json j = RunJson({"status"}, 6);  // --json keeps every rank
  EXPECT_EQ(j["health"], "hung");
  size_t ranks = 0;
  for (const json& n : j["status"]["nodes"]) ranks += n["ranks"].size();
  EXPECT_EQ(ranks, 512u);
}

TEST_F(RunctlTest, CheckpointAsksTheDaemonAndNeedsOne) {
  BuildLineage();
  Outcome o = Run({"checkpoint", kRunA});
  EXPECT_EQ(o.exit, 4) << o.out << o.err;
  EXPECT_TRUE(Has(o.err, "no daemon is listening")) << o.err;

  {
    FakeDaemon daemon(dir_, [](const ControlRequest& req) {
      return EncodeOkResponse(req.id, R"({"requested_at_step":120})");
    });
    o = Run({"checkpoint", "r-20250101-aaa"});
    EXPECT_EQ(o.exit, 0) << o.err;
    EXPECT_TRUE(Has(o.out, "checkpoint requested at step 120")) << o.out;
  }
  {
    FakeDaemon daemon(dir_, [](const ControlRequest& req) {
      return EncodeErrorResponse(req.id, ControlErrorCode::kPermissionDenied,
                                 "uid 1001 may not act on this run");
    });
    o = Run({"checkpoint", kRunA});
    EXPECT_EQ(o.exit, 1);
    EXPECT_TRUE(Has(o.err, "PermissionDenied: uid 1001 may not act on this run")) << o.err;
  }
}

TEST_F(RunctlTest, CheckpointNamesTheRunToTheDaemon) {
  BuildLineage();
  std::vector<ControlRequest> seen;  // written by the daemon's thread, read after it joined
  {
    FakeDaemon daemon(dir_, [&seen](const ControlRequest& req) {
      seen.push_back(req);
      return EncodeOkResponse(req.id, R"({"requested_at_step":7})");
    });
    Outcome o = Run({"checkpoint", "r-20250101-aaa"});
    EXPECT_EQ(o.exit, 0) << o.err;
  }
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].op, "checkpoint");
  EXPECT_EQ(json::parse(seen[0].args_json)["run_id"], kRunA);
}

TEST_F(RunctlTest, ResumeStartsADetachedDaemonForTheRun) {
  BuildLineage();
  MakeCheckpointDir(100, /*manifest=*/true);
  // The stand-in holdfastd writes its arguments into a FIFO that the test
  // reads, so the test awaits it without sleeping.
  std::string fifo = dir_ + "/args.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::string fake = dir_ + "/fake-holdfastd";
  {
    std::ofstream f(fake);
    f << "#!/bin/sh\necho \"started\"\necho \"$@\" > " << fifo << "\n";
  }
  ASSERT_EQ(chmod(fake.c_str(), 0755), 0);
  Outcome o = Run({"resume", "r-20250101-aaa", "--from-step", "100"}, {"RUNCTL_HOLDFASTD=" + fake});
  ASSERT_EQ(o.exit, 0) << o.err;
  EXPECT_TRUE(Has(o.out, "resuming run r-20250101-aaaa from step 100")) << o.out;
  EXPECT_TRUE(Has(o.out, "tail -f " + dir_ + "/holdfastd.log")) << o.out;
  std::string args = ReadFile(fifo);  // blocks until the daemon has run
  EXPECT_EQ(args, "--run-dir " + dir_ + " --resume r-20250101-aaaa --from-step 100\n");
  EXPECT_EQ(ReadFile(dir_ + "/holdfastd.log"), "started\n");  // its output goes to the log

  o = Run({"resume", kRunA, "--from-step", "999"}, {"RUNCTL_HOLDFASTD=" + fake});
  EXPECT_EQ(o.exit, 3);
  EXPECT_TRUE(Has(o.err, "cannot resume from step 999: no checkpoint of that step is recorded; "
                         "steps it can resume from: 100")) << o.err;

  o = Run({"resume", kRunA}, {"RUNCTL_HOLDFASTD=" + dir_ + "/nope"});
  EXPECT_EQ(o.exit, 1);
  EXPECT_TRUE(Has(o.err, "holdfastd not found")) << o.err;
}

TEST_F(RunctlTest, HealthPassesThroughHoldfastHealth) {
  std::string ok = dir_ + "/health-ok", bad = dir_ + "/health-bad";
  {
    std::ofstream f(ok);
    f << "#!/bin/sh\necho \"all 12 checks passed $@\"\n";
    std::ofstream g(bad);
    g << "#!/bin/sh\necho \"gpu_ecc FAIL\"\nexit 1\n";
  }
  ASSERT_EQ(chmod(ok.c_str(), 0755), 0);
  ASSERT_EQ(chmod(bad.c_str(), 0755), 0);
  Outcome o = Run({"health", "--json", "--", "--checks", "gpu"}, {"RUNCTL_HOLDFAST_HEALTH=" + ok});
  EXPECT_EQ(o.exit, 0) << o.err;
  EXPECT_EQ(o.out, "all 12 checks passed --json --checks gpu\n");
  o = Run({"health"}, {"RUNCTL_HOLDFAST_HEALTH=" + bad});
  EXPECT_EQ(o.exit, 1);
  EXPECT_EQ(o.out, "gpu_ecc FAIL\n");
  o = Run({"health"}, {"RUNCTL_HOLDFAST_HEALTH=" + dir_ + "/missing"});
  EXPECT_EQ(o.exit, 1);
  EXPECT_TRUE(Has(o.err, "holdfast-health not found")) << o.err;
}

// ---- runctl stop ----

TEST_F(RunctlTest, StopAsksTheDaemonToStopTheRunAndNeedsOne) {
  BuildLineage();
  Outcome o = Run({"stop", kRunB});
  EXPECT_EQ(o.exit, 4) << o.out << o.err;
  EXPECT_TRUE(Has(o.err, "cannot ask holdfastd to stop run r-20250101-aabb: no daemon is listening"))
      << o.err;

  std::vector<ControlRequest> seen;  // written by the daemon's thread, read after it joined
  {
    FakeDaemon daemon(dir_, [&seen](const ControlRequest& req) {
      seen.push_back(req);
      return EncodeOkResponse(req.id, R"({"stopping":true})");
    });
    o = Run({"stop", "r-20250101-aab"});  // a unique prefix
    EXPECT_EQ(o.exit, 0) << o.err;
    EXPECT_EQ(o.out, "asked holdfastd to stop run r-20250101-aabb: the ranks checkpoint and stop; "
                     "`runctl --run-dir " + dir_ + " status` to follow\n");
  }
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].op, "stop");
  EXPECT_EQ(json::parse(seen[0].args_json)["run_id"], kRunB);

  {
    FakeDaemon daemon(dir_, [](const ControlRequest& req) {
      return EncodeErrorResponse(req.id, ControlErrorCode::kFailedPrecondition,
                                 "this daemon supervises run r-20250101-aabb, not r-20250101-aaaa");
    });
    o = Run({"stop", kRunA});
    EXPECT_EQ(o.exit, 1);
    EXPECT_TRUE(Has(o.err, "holdfastd refused to stop run r-20250101-aaaa: FailedPrecondition: "
                           "this daemon supervises run r-20250101-aabb")) << o.err;
  }
}

TEST_F(RunctlTest, StopWithoutARunStopsTheRunTheDaemonSupervises) {
  BuildLineage();  // the newest run is B, but the daemon runs A
  RunStatus s;
  s.run_id = kRunA;
  s.state = "running";
  std::vector<ControlRequest> seen;
  {
    FakeDaemon daemon(
        dir_,
        [&](const ControlRequest& req) {
          seen.push_back(req);
          return req.op == "status" ? EncodeOkResponse(req.id, EncodeStatusResult(s))
                                    : EncodeOkResponse(req.id, R"({"stopping":true})");
        },
        2);
    Outcome o = Run({"stop"});
    EXPECT_EQ(o.exit, 0) << o.err;
    EXPECT_TRUE(Has(o.out, "asked holdfastd to stop run r-20250101-aaaa")) << o.out;
  }
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].op, "stop");
  EXPECT_EQ(json::parse(seen[1].args_json)["run_id"], kRunA);
}

TEST_F(RunctlTest, StopWaitPrintsHowTheRunEnded) {
  BuildLineage();
  {
    auto db = OpenWriter();
    CheckpointRecord ck;
    ck.run_id = kRunB;
    ck.step = 300;
    ck.path = CheckpointPath(300);
    ASSERT_TRUE(db->RecordCheckpoint(ck).ok());
  }
  // The stand-in records the stop in lineage.db before it answers, as the
  // daemon would once its ranks have checkpointed and exited.
  FakeDaemon daemon(dir_, [this](const ControlRequest& req) {
    auto db = OpenWriter();
    HF_CHECK(db->EndRun(kRunB, RunState::kStopped, "stopped on request (runctl stop)").ok());
    return EncodeOkResponse(req.id, R"({"stopping":true})");
  });
  Outcome o = Run({"stop", kRunB, "--wait", "--timeout", "60"});
  EXPECT_EQ(o.exit, 0) << o.err;
  for (const char* want :
       {"asked holdfastd to stop run r-20250101-aabb", "waiting for run r-20250101-aabb to stop",
        "run r-20250101-aabb (llama-tiny) ended stopped: stopped on request (runctl stop)",
        "newest committed checkpoint step 300", "continue it:  runctl --run-dir "}) {
    EXPECT_TRUE(Has(o.out, want)) << "missing '" << want << "' in\n" << o.out;
  }
}

TEST_F(RunctlTest, StopWaitGivesUpAfterItsTimeoutWhileTheRunStillRuns) {
  BuildLineage();
  FakeDaemon daemon(
      dir_,
      [](const ControlRequest& req) {
        return EncodeOkResponse(req.id, req.op == "stop" ? R"({"stopping":true})" : "{}");
      },
      /*connections=*/-1);
  Outcome o = Run({"stop", kRunB, "--wait", "--timeout", "1"});
  EXPECT_EQ(o.exit, 5) << o.out << o.err;
  EXPECT_TRUE(Has(o.err, "run r-20250101-aabb is still running after 1s")) << o.err;
  EXPECT_TRUE(Has(o.err, "--timeout")) << o.err;
}

TEST_F(RunctlTest, StopWaitNoticesADaemonThatExitedWithoutRecordingAnEnd) {
  BuildLineage();
  // Answers the stop, then is gone; lineage.db keeps saying "running".
  FakeDaemon daemon(dir_, [](const ControlRequest& req) {
    return EncodeOkResponse(req.id, R"({"stopping":true})");
  });
  Outcome o = Run({"stop", kRunB, "--wait", "--timeout", "60"});
  EXPECT_EQ(o.exit, 1) << o.out << o.err;
  EXPECT_TRUE(Has(o.err, "stopped answering")) << o.err;
  EXPECT_TRUE(Has(o.err, "still records run r-20250101-aabb as running")) << o.err;
  EXPECT_TRUE(Has(o.err, "holdfastd.log")) << o.err;
}

TEST_F(RunctlTest, StopBadFlagsAreUsageErrors) {
  EXPECT_EQ(Run({"stop", "--timeout", "0"}).exit, 2);
  EXPECT_EQ(Run({"stop", "--timeout", "soon"}).exit, 2);
  Outcome o = Run({"--help"}, {}, /*with_run_dir=*/false);
  EXPECT_TRUE(Has(o.out, "stop")) << o.out;
  EXPECT_TRUE(Has(o.out, "5  stop --wait or checkpoint --wait gave up")) << o.out;
}

// ---- runctl resume: what it refuses ----

TEST_F(RunctlTest, ResumeOfASucceededRunIsRefusedUnlessForced) {
  BuildLineage();
  {
    auto db = OpenWriter();
    ASSERT_TRUE(db->EndRun(kRunB, RunState::kSucceeded, "reached max_steps").ok());
  }
  FakeHoldfastd fake = MakeFakeHoldfastd(dir_);
  Outcome o = Run({"resume", kRunB}, {"RUNCTL_HOLDFASTD=" + fake.path});
  EXPECT_EQ(o.exit, 1) << o.out << o.err;
  EXPECT_TRUE(Has(o.err, "run r-20250101-aabb succeeded (reached max_steps)")) << o.err;
  EXPECT_TRUE(Has(o.err, "would only add an empty attempt")) << o.err;
  EXPECT_TRUE(Has(o.err, "--force")) << o.err;
  EXPECT_EQ(o.out, "");
  struct stat st;
  EXPECT_NE(stat((dir_ + "/holdfastd.log").c_str(), &st), 0) << "a daemon was started";

  o = Run({"resume", kRunB, "--force"}, {"RUNCTL_HOLDFASTD=" + fake.path});
  EXPECT_EQ(o.exit, 0) << o.err;
  EXPECT_TRUE(Has(o.out, "resuming run r-20250101-aabb")) << o.out;
  EXPECT_EQ(ReadFile(fake.fifo), "--run-dir " + dir_ + " --resume r-20250101-aabb\n");

  // A failed or stopped run resumes without --force.
  o = Run({"resume", kRunA, "--from-step", "999"});
  EXPECT_EQ(o.exit, 3) << o.err;  // refused for the step, not for its state
}

TEST_F(RunctlTest, ResumeFromAStepNeedsACommittedCheckpointThatIsStillOnDisk) {
  BuildLineage();  // step 100 of run A, committed
  {
    auto db = OpenWriter();
    for (int64_t step : {200, 300, 400, 500, 600}) {
      CheckpointRecord ck;
      ck.run_id = kRunA;
      ck.step = step;
      ck.path = CheckpointPath(step);
      ck.world_size = 2;
      ASSERT_TRUE(db->RecordCheckpoint(ck).ok());
    }
    ASSERT_TRUE(db->MarkCheckpoint(kRunA, 400, CheckpointState::kCorrupt,
                                   "shard 1: xxh3 mismatch").ok());
  }
  MakeCheckpointDir(100, /*manifest=*/true);
  // 200: pruned from disk, still "committed" in lineage.
  MakeCheckpointDir(400, /*manifest=*/true);
  MakeCheckpointDir(500, /*manifest=*/true);
  // 600: committed, its manifest fine, its shard truncated (a copy that ran
  // out of space): the trainer's checksum would fail and go to another step.
  {
    const std::string shard = MakeCheckpointDir(600, /*manifest=*/true) + "/" + ShardFileName(0, 1);
    std::filesystem::resize_file(shard, std::filesystem::file_size(shard) / 2);
  }
  // Last: a writer clears unfinished saves when it starts.
  MakeCheckpointDir(300, /*manifest=*/false);  // the save never finished
  FakeHoldfastd fake = MakeFakeHoldfastd(dir_);
  const std::vector<std::string> env = {"RUNCTL_HOLDFASTD=" + fake.path};

  struct Case {
    const char* step;
    std::string why;
  };
  for (const Case& k :
       {Case{"200", "its folder " + CheckpointPath(200) + " is gone (pruned or moved)"},
        Case{"300", CheckpointPath(300) + " has no MANIFEST.json"},
        Case{"600", CheckpointPath(600) + ": shard " + ShardFileName(0, 1) + " is "},
        Case{"400", "it is marked corrupt (shard 1: xxh3 mismatch)"},
        Case{"7", "no checkpoint of that step is recorded"}}) {
    Outcome o = Run({"resume", kRunA, "--from-step", k.step}, env);
    EXPECT_EQ(o.exit, 3) << k.step << ": " << o.out << o.err;
    EXPECT_TRUE(Has(o.err, std::string("run r-20250101-aaaa cannot resume from step ") + k.step +
                               ": " + k.why))
        << o.err;
    EXPECT_TRUE(Has(o.err, "steps it can resume from: 100, 500\n")) << o.err;
    EXPECT_EQ(o.out, "");
  }
  struct stat st;
  EXPECT_NE(stat((dir_ + "/holdfastd.log").c_str(), &st), 0) << "a daemon was started";

  Outcome o = Run({"resume", kRunA, "--from-step", "500"}, env);
  EXPECT_EQ(o.exit, 0) << o.err;
  EXPECT_EQ(ReadFile(fake.fifo), "--run-dir " + dir_ + " --resume r-20250101-aaaa --from-step 500\n");
}

}  // namespace
}  // namespace holdfast
