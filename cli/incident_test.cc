// `runctl incident` on lineage recorded by the real recorder (daemon/
// run_recorder.h) into a real SQLite file, with the daemon's own triage
// (daemon/triage.h) for the evidence: a local crash restarted in place, a
// Slurm requeue excluding a host onto GPUs, an all-ranks hang with stacks, and
// a run with several incidents. Every field of the write-up is checked
// against what lineage holds, read back on its own through LineageDb.
#include "cli/incident.h"

#include <signal.h>

#include <cmath>
#include <filesystem>
#include <sstream>

#include <gtest/gtest.h>

#include "cli/commands.h"
#include "daemon/run_recorder.h"
#include "daemon/triage.h"
#include "lineage/stacks.h"
#include "tests/support/subprocess.h"

namespace holdfast {
namespace {

using json = nlohmann::json;
using testing::TempDir;

bool Has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

// What one runctl command printed and returned.
struct Said {
  int exit = -1;
  std::string out, err;
};

class IncidentTest : public ::testing::Test {
 protected:
  IncidentTest() : dir_("incident") {
    job_.name = "quickstart";
    job_.command = {"/bin/true"};
    job_.nproc = 2;
  }

  // A recorder of run dir DIR/runs/NAME on `alloc` (its first node leads).
  std::unique_ptr<RunRecorder> Recorder(const std::string& name, const Allocation& alloc, int world, int gpus) {
    RecorderOptions ro;
    ro.run_dir = dir_ / ("runs/" + name);
    std::filesystem::create_directories(ro.run_dir);
    ro.job = &job_;
    ro.allocation = alloc;
    ro.world_size = world;
    ro.gpus = gpus;
    auto rec = RunRecorder::Open(ro, &clock_);
    EXPECT_TRUE(rec.ok()) << rec.status().ToString();
    return rec.ok() ? std::move(rec).value() : nullptr;
  }

  // Every rank of `hosts` (nproc each) in a step's forward pass, having seen checkpoint `ckpt` commit.
  std::vector<RankView> Views(const std::vector<std::string>& hosts, int64_t step, int64_t ckpt) const {
    std::vector<RankView> views;
    for (size_t n = 0; n < hosts.size(); ++n) {
      for (int l = 0; l < job_.nproc; ++l) {
        RankView v;
        v.rank = static_cast<int>(n) * job_.nproc + l;
        v.node = static_cast<int>(n);
        v.host = hosts[n];
        v.pid = 4000 + v.rank;
        v.progress.valid = true;
        v.progress.writer_pid = v.pid;
        v.progress.step = step;
        v.progress.phase = Phase::kForward;
        v.progress.phase_started_ns = clock_.MonotonicNs() - 200'000'000;
        v.progress.heartbeat_ns = clock_.MonotonicNs() - 100'000'000;
        v.progress.checkpoint_step = ckpt;
        views.push_back(v);
      }
    }
    return views;
  }

  // Trains the running generation to step `to`, committing checkpoint `ckpt` (-1 none) on the way.
  void Train(RunRecorder* rec, const std::vector<std::string>& hosts, int64_t ckpt, int64_t to) {
    if (ckpt >= 0) {
      clock_.Advance(5);
      rec->UpdateStep(ckpt, true);
      rec->ObserveCheckpoints(Views(hosts, ckpt, ckpt), static_cast<int>(hosts.size()) * job_.nproc);
    }
    clock_.Advance(5);
    rec->UpdateStep(to, true);
  }

  void Crash(RunRecorder* rec, const std::vector<std::string>& hosts, int rank, int64_t step, int64_t ckpt,
             const std::string& action, const std::string& credited) {
    TriageReport t = TriageExit(clock_.MonotonicNs(), Views(hosts, step, ckpt), rank, SIGKILL, {"loss 2.31", "step 49"});
    rec->Record(t.event, t.summary, action, t.evidence, EventContext{credited, rank, {}, "", ""});
    rec->EndGeneration(RunState::kFailed, t.summary);
  }

  Said Incident(const std::string& run_name, const std::string& number = "", const std::string& format = "json") {
    Said s;
    std::ostringstream out, err;
    CliContext c;
    c.run_dir = dir_ / ("runs/" + run_name);
    c.out = &out;
    c.err = &err;
    s.exit = CmdIncident(c, "latest", number, format);
    s.out = out.str();
    s.err = err.str();
    return s;
  }

  json IncidentJsonOf(const std::string& run_name, const std::string& number = "") {
    Said s = Incident(run_name, number);
    EXPECT_EQ(s.exit, 0) << s.err;
    json j = json::parse(s.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << s.out;
    return j;
  }

  std::unique_ptr<LineageDb> Lineage(const std::string& run_name) const {
    LineageOptions o;
    o.read_only = true;
    auto db = LineageDb::Open(dir_ / ("runs/" + run_name + "/lineage.db"), o);
    EXPECT_TRUE(db.ok()) << db.status().ToString();
    return db.ok() ? std::move(db).value() : nullptr;
  }

  TempDir dir_;
  JobConfig job_;
  FakeTimeSource clock_;
};

Allocation LocalOn(const std::string& host) {
  Allocation a;
  a.nodes = {{host, "127.0.0.1"}};
  return a;
}

Allocation SlurmJob(const std::string& id, int restart, const std::vector<std::string>& hosts) {
  Allocation a;
  a.scheduler = SchedulerKind::kSlurm;
  a.job_id = id;
  a.restart_count = restart;
  for (size_t i = 0; i < hosts.size(); ++i) a.nodes.push_back({hosts[i], "10.77.0." + std::to_string(11 + i)});
  return a;
}

// The quickstart's crash: rank 1 killed at step 50, restarted in place from checkpoint 25.
TEST_F(IncidentTest, AQuickstartCrashIsWrittenUpFromLineage) {
  {
    auto rec = Recorder("quickstart", LocalOn("host-a"), 2, 0);
    ASSERT_NE(rec, nullptr);
    rec->StartGeneration(0);
    Train(rec.get(), {"host-a"}, 25, 49);
    clock_.Advance(0.4);
    Crash(rec.get(), {"host-a"}, 1, 49, 25,
          "stopped all ranks; restart generation 1 from step 25 [recovery: restart in place now (restart 1 of 3): "
          "crash on host-a]",
          "host-a");
    clock_.Advance(0.5);
    rec->StartGeneration(25);
    Train(rec.get(), {"host-a"}, -1, 200);
    rec->EndGeneration(RunState::kSucceeded, "");
    rec->EndRun(RunState::kSucceeded, "");
  }
  auto db = Lineage("quickstart");
  ASSERT_NE(db, nullptr);
  const RunRecord run = *db->LatestRun();
  const EventRecord crash = **db->LastIncident(run.run_id);
  const std::vector<GenerationRecord> gens = *db->Generations(run.run_id);
  const std::vector<AttemptRecord> attempts = *db->Attempts(run.run_id);
  ASSERT_EQ(gens.size(), 2u);

  const json j = IncidentJsonOf("quickstart");
  EXPECT_EQ(j["number"], 1);
  EXPECT_EQ(j["count"], 1);
  EXPECT_EQ(j["title"], "Incident 1 of run " + run.run_id + " (quickstart): crash of rank 1 on host-a");
  EXPECT_EQ(j["run"]["run_id"], run.run_id);
  EXPECT_EQ(j["run"]["state"], "succeeded");
  EXPECT_EQ(j["incident"]["id"], crash.id);
  EXPECT_EQ(j["incident"]["kind"], "crash");
  EXPECT_EQ(j["incident"]["summary"], crash.summary);
  EXPECT_EQ(j["incident"]["action"], crash.action);
  EXPECT_EQ(j["incident"]["time_ms"], crash.time_ms);
  EXPECT_EQ(j["incident"]["culprits"], json::array({1}));
  EXPECT_EQ(j["incident"]["evidence"]["signal"], 9);
  EXPECT_EQ(j["incident"]["log_path"], run.run_dir + "/logs/a1-g0-rank1.log");

  // Impact: every figure from lineage's times and steps.
  const json& im = j["impact"];
  EXPECT_TRUE(im["stopped_training"].get<bool>());
  EXPECT_TRUE(im["resumed"].get<bool>());
  EXPECT_EQ(im["last_progress_ms"], *gens[0].last_step_ms);
  EXPECT_EQ(im["last_step"], *gens[0].last_step);
  EXPECT_DOUBLE_EQ(im["detection_s"].get<double>(), (crash.time_ms - *gens[0].last_step_ms) / 1000.0);
  EXPECT_DOUBLE_EQ(im["downtime_s"].get<double>(), (gens[1].started_ms - crash.time_ms) / 1000.0);
  EXPECT_EQ(im["resumed_ms"], gens[1].started_ms);
  EXPECT_EQ(im["resumed_from_step"], gens[1].start_step);
  EXPECT_EQ(im["resumed_from_step"], 25);
  EXPECT_EQ(im["redone_steps"], *gens[0].last_step - gens[1].start_step);
  EXPECT_EQ(im["step_ms_source"], "lineage estimate");
  const double lost = im["detection_s"].get<double>() + im["downtime_s"].get<double>() + im["redone_s"].get<double>();
  EXPECT_NEAR(im["lost_s"].get<double>(), lost, 1e-9);
  EXPECT_EQ(im["world_size"], run.world_size);
  EXPECT_NEAR(im["rank_hours"].get<double>(), lost * run.world_size / 3600, 1e-12);
  EXPECT_EQ(im["gpus"], 0);
  EXPECT_TRUE(im["gpu_hours"].is_null());
  EXPECT_EQ(im["between_attempts_s"], 0.0);

  // Timeline: the failed generation's start to the resumed one's, with the restored checkpoint.
  std::vector<std::string> lines;
  for (const json& l : j["timeline"]) lines.push_back(l["text"]);
  ASSERT_GE(lines.size(), 5u);
  EXPECT_EQ(lines.front(), "generation 0 started from step 0");
  EXPECT_TRUE(Has(lines[1], "checkpoint step 25 committed"));
  EXPECT_EQ(lines[2], "the ranks' last progress before it (step 49)");
  EXPECT_TRUE(Has(lines[3], "[crash] rank 1 on host-a: rank 1 killed by signal 9 (SIGKILL)"));
  EXPECT_EQ(lines.back(), "generation 1 started from step 25");
  EXPECT_EQ(j["timeline"].front()["time_ms"], gens[0].started_ms);
  EXPECT_EQ(j["timeline"].back()["time_ms"], gens[1].started_ms);

  EXPECT_EQ(j["actions"].size(), 1u);
  EXPECT_EQ(j["actions"][0]["action"], crash.action);
  EXPECT_TRUE(j["slurm"]["job_ids"].empty());
  EXPECT_EQ(j["slurm"]["attempt"]["attempt"], attempts[0].attempt);
  EXPECT_EQ(j["nodes"]["credited"], "host-a");
  EXPECT_EQ(j["nodes"]["culprit_hosts"], json::array({"host-a"}));
  EXPECT_EQ(j["nodes"]["attempt_nodes"], json::array({"host-a"}));
  EXPECT_EQ(j["runbook"]["file"], "runbooks/crash.md");
  EXPECT_TRUE(Has(j["triage"], "exit      killed by signal 9 (SIGKILL)")) << j["triage"];
  ASSERT_FALSE(j["open_questions"].empty());
  EXPECT_TRUE(Has(j["open_questions"][0], "Who sent SIGKILL to rank 1?")) << j["open_questions"];

  // The Markdown has the same facts.
  Said md = Incident("quickstart", "", "md");
  ASSERT_EQ(md.exit, 0) << md.err;
  EXPECT_EQ(md.out.rfind("# Incident 1 of run " + run.run_id + " (quickstart): crash of rank 1 on host-a\n", 0), 0u)
      << md.out;
  for (const char* section : {"## Timeline (UTC)", "## Impact", "## Evidence", "## Actions taken", "## Slurm",
                              "## Nodes", "## Runbook", "## Open questions"}) {
    EXPECT_TRUE(Has(md.out, section)) << section << " missing:\n" << md.out;
  }
  EXPECT_TRUE(Has(md.out, "| GPU-hours | none: the ranks ran on the CPU |")) << md.out;
  EXPECT_TRUE(Has(md.out, "| " + FormatTimeMs(crash.time_ms) + " | 1 | 0 | [crash] rank 1 on host-a")) << md.out;
  EXPECT_TRUE(Has(md.out, "Not a Slurm run (scheduler local).")) << md.out;
  EXPECT_TRUE(Has(md.out, "```text\nrun       " + run.run_id)) << md.out;
}

// A Slurm requeue: n2 implicated, the job requeued excluding it (same job id, restart 1), resumed on n1, n3, on GPUs.
TEST_F(IncidentTest, ASlurmRequeueNamesItsJobsNodesAndActions) {
  const std::string why = "crash on n2, implicated 2 times";
  {
    auto rec = Recorder("slurm", SlurmJob("4242", 0, {"n1", "n2"}), 4, 4);
    ASSERT_NE(rec, nullptr);
    rec->StartGeneration(0);
    Train(rec.get(), {"n1", "n2"}, 20, 31);
    clock_.Advance(0.3);
    Crash(rec.get(), {"n1", "n2"}, 3, 31, 20, "stopped all ranks [recovery: requeue excluding n2: " + why + "]", "n2");
    rec->Record(event_kind::kRequeue, "requeue excluding n2: " + why, "requeued excluding n2",
                RequeueEvidence({"n2"}, true), WithoutRunbook());
    rec->EndAttempt(RunState::kFailed, why);
    rec->EndRun(RunState::kPreempted, "requeued: " + why);
  }
  clock_.Advance(20);  // in the queue
  {
    auto rec = Recorder("slurm", SlurmJob("4242", 1, {"n1", "n3"}), 4, 4);
    ASSERT_NE(rec, nullptr);
    clock_.Advance(2);
    rec->StartGeneration(20);
    Train(rec.get(), {"n1", "n3"}, -1, 60);
    rec->EndGeneration(RunState::kSucceeded, "");
    rec->EndRun(RunState::kSucceeded, "");
  }
  auto db = Lineage("slurm");
  ASSERT_NE(db, nullptr);
  const RunRecord run = *db->LatestRun();
  const std::vector<AttemptRecord> attempts = *db->Attempts(run.run_id);
  const std::vector<GenerationRecord> gens = *db->Generations(run.run_id);
  const std::vector<EventRecord> events = *db->Events(run.run_id, 0);
  ASSERT_EQ(attempts.size(), 2u);
  const EventRecord& crash = events[0];
  ASSERT_EQ(crash.kind, "crash");

  const json j = IncidentJsonOf("slurm");
  EXPECT_EQ(j["incident"]["id"], crash.id);
  EXPECT_EQ(j["slurm"]["job_ids"], json::array({attempts[0].slurm_job_id}));
  EXPECT_EQ(j["slurm"]["job_ids"], json::array({"4242"}));
  EXPECT_EQ(j["slurm"]["attempt"]["slurm_job_id"], "4242");
  EXPECT_EQ(j["slurm"]["attempt"]["restart_count"], attempts[0].restart_count);
  EXPECT_EQ(j["slurm"]["attempt"]["nodes"], json(attempts[0].nodes));
  EXPECT_EQ(j["slurm"]["resumed_attempt"]["restart_count"], attempts[1].restart_count);
  EXPECT_EQ(j["slurm"]["resumed_attempt"]["restart_count"], 1);
  EXPECT_EQ(j["slurm"]["resumed_attempt"]["nodes"], json::array({"n1", "n3"}));
  EXPECT_EQ(j["nodes"]["credited"], "n2");
  EXPECT_EQ(j["nodes"]["culprit_hosts"], json::array({"n2"}));
  EXPECT_EQ(j["nodes"]["excluded"], json::array({"n2"}));
  EXPECT_EQ(j["nodes"]["resumed_on"], json::array({"n1", "n3"}));
  // The actions: the decision, the requeue, the next attempt's resume.
  std::vector<std::string> kinds;
  for (const json& a : j["actions"]) kinds.push_back(a["kind"]);
  EXPECT_EQ(kinds, (std::vector<std::string>{"crash", "requeue", "resume"}));
  EXPECT_EQ(j["actions"][1]["action"], "requeued excluding n2");
  EXPECT_TRUE(Has(j["actions"][2]["summary"], "Slurm job 4242, restart 1")) << j["actions"][2];

  const json& im = j["impact"];
  EXPECT_EQ(im["resumed_attempt"], 2);
  EXPECT_EQ(im["resumed_generation"], 0);
  EXPECT_DOUBLE_EQ(im["downtime_s"].get<double>(), (gens[1].started_ms - crash.time_ms) / 1000.0);
  EXPECT_DOUBLE_EQ(im["between_attempts_s"].get<double>(), (attempts[1].started_ms - *attempts[0].ended_ms) / 1000.0);
  EXPECT_EQ(im["gpus"], 4);
  EXPECT_EQ(im["gpus"], *attempts[0].gpus);
  EXPECT_NEAR(im["gpu_hours"].get<double>(), im["lost_s"].get<double>() * 4 / 3600, 1e-12);
  bool asked = false;
  for (const json& q : j["open_questions"]) asked = asked || Has(q, "The requeue excluded n2 from this job only");
  EXPECT_TRUE(asked) << j["open_questions"];

  Said md = Incident("slurm", "", "md");
  ASSERT_EQ(md.exit, 0) << md.err;
  EXPECT_TRUE(Has(md.out, "| 1 | 4242 | 0 | n1,n2 | failed: " + why + " |")) << md.out;
  EXPECT_TRUE(Has(md.out, "| 2 | 4242 | 1 | n1,n3 | succeeded |")) << md.out;
  EXPECT_TRUE(Has(md.out, "| of which between attempts |")) << md.out;
  EXPECT_TRUE(Has(md.out, "- excluded afterwards: n2\n")) << md.out;
  EXPECT_TRUE(Has(md.out, "- training resumed on: n1, n3\n")) << md.out;
  EXPECT_TRUE(Has(md.out, " GPUs = ")) << md.out;
}

// All ranks in the collective: no host credited, the stacks in the evidence, a question about the fabric.
TEST_F(IncidentTest, AnAllRanksHangCreditsNoHostAndShowsItsStacks) {
  {
    auto rec = Recorder("hang", SlurmJob("77", 0, {"n1", "n2"}), 4, 0);
    ASSERT_NE(rec, nullptr);
    rec->StartGeneration(0);
    Train(rec.get(), {"n1", "n2"}, 10, 12);
    clock_.Advance(60);
    HangDetector::Verdict v;
    v.hung = true;
    v.stalled_s = 60;
    v.timeout_s = 60;
    v.allowance = "step";
    std::vector<RankView> views = Views({"n1", "n2"}, 12, 10);
    for (RankView& r : views) {
      r.progress.phase = Phase::kCollective;
      r.progress.collective_kind = CollectiveKind::kAllreduce;
      r.progress.collectives_issued = 9;
      r.progress.waiting_on = 9;
    }
    TriageReport t = TriageHang(clock_.MonotonicNs(), views, v);
    std::vector<RankStacks> stacks;
    for (int r = 0; r < 4; ++r) stacks.push_back({r, {{"native", true, {"__poll", "gloo::transport::Pair::recv", "main"}}}, {}});
    t.evidence.stacks = FoldStacks(stacks);
    t.evidence.stacks.limit_s = 10;
    rec->Record(t.event, t.summary, "stopped all ranks; restart generation 1 from step 10", t.evidence);
    rec->EndGeneration(RunState::kFailed, t.summary);
    clock_.Advance(1);
    rec->StartGeneration(10);
  }
  const json j = IncidentJsonOf("hang");
  EXPECT_EQ(j["incident"]["kind"], "hang");
  EXPECT_TRUE(j["nodes"]["credited"].is_null());
  EXPECT_EQ(j["nodes"]["culprit_hosts"], json::array({"n1", "n2"}));
  EXPECT_EQ(j["incident"]["culprits"].size(), 4u);
  EXPECT_TRUE(Has(j["triage"], "gloo::transport::Pair::recv")) << j["triage"];
  bool fabric = false, stack = false;
  for (const json& q : j["open_questions"]) {
    fabric = fabric || Has(q, "No host was credited");
    stack = stack || Has(q, "No stack");
  }
  EXPECT_TRUE(fabric) << j["open_questions"];
  EXPECT_FALSE(stack) << "its stacks were captured: " << j["open_questions"];
  EXPECT_TRUE(j["impact"]["resumed"].get<bool>());
  EXPECT_DOUBLE_EQ(j["impact"]["detection_s"].get<double>(), j["incident"]["evidence"]["stalled_s"].get<double>())
      << "a hang's detection is its stall";
  EXPECT_EQ(j["impact"]["last_progress_ms"].get<int64_t>(),
            j["incident"]["time_ms"].get<int64_t>() - static_cast<int64_t>(60 * 1000));
  EXPECT_EQ(j["run"]["state"], "running");
  Said md = Incident("hang", "", "md");
  EXPECT_TRUE(Has(md.out, "As `runctl triage` shows it (with the hung processes' stacks):")) << md.out;
  EXPECT_TRUE(Has(md.out, "- credited: none (no host is blamed for it)")) << md.out;
}

// Several incidents: N picks one (1 the first), a failed save the run trained on cost nothing, bad N refused.
TEST_F(IncidentTest, NSelectsAnIncidentAndBadArgumentsAreRefusedWithTheDocumentedCodes) {
  std::string run_id;
  {
    auto rec = Recorder("multi", LocalOn("host-a"), 2, 0);
    ASSERT_NE(rec, nullptr);
    run_id = rec->run_id();
    rec->StartGeneration(0);
    Train(rec.get(), {"host-a"}, 10, 14);
    std::vector<RankView> views = Views({"host-a"}, 15, 10);
    for (RankView& v : views) {
      v.progress.checkpoint_failures = 1;
      v.progress.checkpoint_failed_step = 15;
      v.progress.checkpoint_error = "No space left on device";
    }
    rec->ObserveCheckpoints(views, 2);
    Train(rec.get(), {"host-a"}, -1, 30);
    Crash(rec.get(), {"host-a"}, 0, 30, 10, "stopped all ranks; restart generation 1 from step 10", "host-a");
    // While the ranks stop: another node's daemon goes silent.
    rec->Record(event_kind::kNodeLost, "host-b's holdfastd is gone (no report for 30 s)", "already stopping", {},
                AtHost("host-b"));
    clock_.Advance(1);
    rec->StartGeneration(10);
  }
  json first = IncidentJsonOf("multi", "1");
  EXPECT_EQ(first["incident"]["kind"], "checkpoint_failed");
  EXPECT_FALSE(first["impact"]["stopped_training"].get<bool>());
  EXPECT_EQ(first["impact"]["lost_s"], 0.0);
  EXPECT_EQ(first["count"], 3);
  EXPECT_TRUE(Has(first["summary"], "Training went on")) << first["summary"];
  json crash = IncidentJsonOf("multi", "2");
  EXPECT_EQ(crash["incident"]["kind"], "crash");
  EXPECT_EQ(crash["incidents"].size(), 3u);
  EXPECT_TRUE(crash["impact"]["stopped_training"].get<bool>());
  EXPECT_EQ(crash["impact"]["redone_steps"], 20);  // steps 11..30, the failed save's 15 among them
  // The latest, found while the crash was handled: its cost is the crash's.
  json latest = IncidentJsonOf("multi");
  EXPECT_EQ(latest["number"], 3);
  EXPECT_EQ(latest["incident"]["kind"], "node_lost");
  EXPECT_EQ(latest["impact"]["counted_with"], 2);
  EXPECT_EQ(latest["impact"]["lost_s"], 0.0);
  EXPECT_EQ(latest["nodes"]["credited"], "host-b");
  Said md = Incident("multi", "2", "md");
  EXPECT_TRUE(Has(md.out, "## The run's incidents")) << md.out;
  EXPECT_TRUE(Has(md.out, "| 2 (this) |")) << md.out;

  Said none = Incident("multi", "4");
  EXPECT_EQ(none.exit, kRunctlNotFound);
  EXPECT_TRUE(Has(none.err, "run " + run_id + " has 3 incidents; there is no incident 4")) << none.err;
  EXPECT_TRUE(Has(none.err, "  3  ")) << none.err;
  EXPECT_TRUE(none.out.empty());
  for (const char* bad : {"0", "-1", "two", "99999999999"}) {
    Said s = Incident("multi", bad);
    EXPECT_EQ(s.exit, kRunctlUsage) << bad;
    EXPECT_TRUE(Has(s.err, "N must be an incident's number")) << s.err;
  }
  EXPECT_EQ(Incident("multi", "", "html").exit, kRunctlUsage);
  Said missing = Incident("nowhere");
  EXPECT_EQ(missing.exit, kRunctlNotFound) << missing.err;
  EXPECT_TRUE(Has(missing.err, "no lineage database")) << missing.err;
}

TEST_F(IncidentTest, ARunWithoutIncidentsHasNothingToWriteUp) {
  {
    auto rec = Recorder("clean", LocalOn("host-a"), 2, 0);
    ASSERT_NE(rec, nullptr);
    rec->StartGeneration(0);
    Train(rec.get(), {"host-a"}, -1, 10);
    rec->EndRun(RunState::kSucceeded, "");
  }
  Said s = Incident("clean");
  EXPECT_EQ(s.exit, kRunctlNotFound);
  EXPECT_TRUE(Has(s.err, "has no incident recorded")) << s.err;
}

}  // namespace
}  // namespace holdfast
