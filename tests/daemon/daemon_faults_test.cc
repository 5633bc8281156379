// The faults holdfastd used to mishandle (issue: "holdfastd, redesigned ..."),
// each tried as a new user would, against a real holdfastd and real
// holdfast-train ranks, asserting what an operator sees: exit codes, lineage,
// runctl's words, files left behind.
#include <map>
#include <set>

#include "common/progress_record.h"
#include "tests/daemon/supervised_run.h"

namespace holdfast {
namespace {

class DaemonFaultTest : public SupervisedRunTest {
 protected:
  // Holdfast's leftovers for this test's runs: progress records and the socket.
  std::vector<std::string> Leftovers() const {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir_ / "shm", ec)) out.push_back(e.path().string());
    if (std::filesystem::exists(ControlSocketPath(dir_ / "run"))) out.push_back(ControlSocketPath(dir_ / "run"));
    return out;
  }
  void SetSupervise(const std::string& key_value_from, const std::string& to) {
    std::string job = ReadFile(dir_ / "job.toml");
    const size_t at = job.find(key_value_from);
    ASSERT_NE(at, std::string::npos) << key_value_from;
    job.replace(at, key_value_from.size(), to);
    WriteFile(dir_ / "job.toml", job);
  }
  ProcessResult Runctl(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {BuildPath("cli/runctl"), "--run-dir", dir_ / "run"};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProcess(argv);
  }
};

// 1. A second holdfastd on a run whose daemon is alive but not answering
// (SIGSTOPped) is refused — without asking the socket — and the first one
// carries on unharmed.
TEST_F(DaemonFaultTest, ASecondDaemonIsRefusedWhileTheFirstIsStoppedAndSilent) {
  WriteJob();
  ChildProcess first(Daemon(), dir_ / "daemon.log");
  ASSERT_TRUE(WaitForStep(5, first).has_value()) << ReadFile(dir_ / "daemon.log");
  first.Signal(SIGSTOP);
  ProcessResult second = RunProcess(Daemon());
  EXPECT_EQ(second.exit_code, 2) << second.output;
  EXPECT_NE(second.output.find("another holdfastd (pid " + std::to_string(first.pid())), std::string::npos)
      << second.output;
  ProcessResult resume = Runctl({"resume", "latest"});
  EXPECT_NE(resume.exit_code, 0) << resume.output;
  EXPECT_NE(resume.output.find("pid " + std::to_string(first.pid())), std::string::npos) << resume.output;
  first.Signal(SIGCONT);
  ExpectFinishedBitExact(first);
  auto rec = LatestRun();
  ASSERT_TRUE(rec.has_value());
  auto& db = rec->db;
  const RunRecord* run = &rec->run;
  auto attempts = db->Attempts(run->run_id);
  ASSERT_TRUE(attempts.ok());
  EXPECT_EQ(attempts->size(), 1u) << "nobody else took the run over";
}

// 2. SIGHUP (a closed terminal) used to kill holdfastd silently. Now it stops
// the run with a record that names it, and nothing is left behind; a daemon
// killed outright leaves files that the next start removes.
TEST_F(DaemonFaultTest, SighupStopsTheRunWithATrueRecordAndLeftoversAreCleaned) {
  WriteJob();
  {
    ChildProcess killed(Daemon(), dir_ / "daemon0.log");
    ASSERT_TRUE(WaitForStep(3, killed).has_value()) << ReadFile(dir_ / "daemon0.log");
    killed.Signal(SIGKILL);
    killed.Wait();
  }
  EXPECT_FALSE(Leftovers().empty()) << "a SIGKILLed daemon cannot clean up after itself";
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  ASSERT_TRUE(WaitForStep(8, daemon).has_value()) << ReadFile(dir_ / "daemon.log");
  EXPECT_NE(ReadFile(dir_ / "daemon.log").find("stale progress record"), std::string::npos)
      << ReadFile(dir_ / "daemon.log");
  daemon.Signal(SIGHUP);
  const int code = daemon.Wait();
  EXPECT_TRUE(code == 3 || code == 75) << code << "\n" << ReadFile(dir_ / "daemon.log");
  auto rec = LatestRun();
  ASSERT_TRUE(rec.has_value());
  const RunRecord* run = &rec->run;
  EXPECT_EQ(run->state, RunState::kStopped);
  EXPECT_NE(run->cause.find("SIGHUP"), std::string::npos) << run->cause;
  EXPECT_TRUE(Leftovers().empty()) << Leftovers().front();
}

// 3. Deterministic launch errors are bad input: exit 2, never restarted, and
// the reason is in triage.
TEST_F(DaemonFaultTest, ACommandThatCannotBeExecutedIsNotRestarted) {
  WriteJob();
  std::string job = ReadFile(dir_ / "job.toml");
  const std::string train = BuildPath("trainer/holdfast-train");
  job.replace(job.find(train), train.size(), dir_ / "no-such-trainer");
  WriteFile(dir_ / "job.toml", job);
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  EXPECT_EQ(daemon.Wait(), 2) << ReadFile(dir_ / "daemon.log");
  auto rec = LatestRun();
  ASSERT_TRUE(rec.has_value());
  auto& db = rec->db;
  const RunRecord* run = &rec->run;
  EXPECT_EQ(run->state, RunState::kFailed);
  auto gens = db->Generations(run->run_id);
  ASSERT_TRUE(gens.ok());
  EXPECT_EQ(gens->size(), 1u) << "no restart for an input that fails the same way again";
  ProcessResult triage = Runctl({"triage", "latest"});
  EXPECT_NE(triage.output.find("cannot execute"), std::string::npos) << triage.output;
  EXPECT_NE(triage.output.find("no-such-trainer"), std::string::npos) << triage.output;
}

TEST_F(DaemonFaultTest, HoldfastdsOwnFlagErrorsExitTwoNamingTheFlag) {
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--bogus"}, {"--nodes", "x"}, {"--nodes", "0"}, {"--from-step", "-3"}}) {
    std::vector<std::string> argv = {BuildPath("daemon/holdfastd"), "--run-dir", dir_ / "run"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    ProcessResult r = RunProcess(argv);
    EXPECT_EQ(r.exit_code, 2) << extra[0] << ": " << r.output;
    EXPECT_NE(r.output.find(extra[0]), std::string::npos) << r.output;
  }
  EXPECT_EQ(RunProcess({BuildPath("daemon/holdfastd"), "--help"}).exit_code, 0);
}

TEST_F(DaemonFaultTest, ATrainerFlagTypoIsNotRestarted) {
  WriteJob("", "");
  std::string job = ReadFile(dir_ / "job.toml");
  job.replace(job.find("\"--dump-final\""), 14, "\"--dump-finale\"");
  WriteFile(dir_ / "job.toml", job);
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  EXPECT_EQ(daemon.Wait(), 2) << ReadFile(dir_ / "daemon.log");
  auto rec = LatestRun();
  ASSERT_TRUE(rec.has_value());
  auto& db = rec->db;
  const RunRecord* run = &rec->run;
  auto gens = db->Generations(run->run_id);
  ASSERT_TRUE(gens.ok());
  EXPECT_EQ(gens->size(), 1u);
  auto inc = db->LastIncident(run->run_id);
  ASSERT_TRUE(inc.ok() && inc->has_value());
  EXPECT_NE((*inc)->summary.find("exited with code 2"), std::string::npos) << (*inc)->summary;
  EXPECT_NE((*inc)->summary.find("a restart cannot help"), std::string::npos) << (*inc)->summary;
  EXPECT_NE((*inc)->evidence_json.find("--dump-finale"), std::string::npos) << (*inc)->evidence_json;
}

// 4. Commits that land between two polls are each recorded (not only the
// newest); checkpoints the trainer prunes are marked pruned in lineage, and
// resuming from a pruned step is refused up front.
TEST_F(DaemonFaultTest, CommitsBetweenTwoPollsAreEachRecorded) {
  WriteJob();
  SetSupervise("poll_ms = 50", "poll_ms = 700");
  std::string job = ReadFile(dir_ / "job.toml");
  job.replace(job.find("\"--dump-final\""), 14,
              "\"--set\", \"checkpoint.every_steps=1\", \"--set\", \"checkpoint.keep_last=100\", \"--dump-final\"");
  WriteFile(dir_ / "job.toml", job);
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  ExpectFinishedBitExact(daemon);
  auto rec = LatestRun();
  ASSERT_TRUE(rec.has_value());
  auto& db = rec->db;
  const RunRecord* run = &rec->run;
  auto ckpts = db->Checkpoints(run->run_id);
  ASSERT_TRUE(ckpts.ok());
  std::set<int64_t> committed;
  for (const auto& c : *ckpts) {
    if (c.state == CheckpointState::kCommitted) committed.insert(c.step);
  }
  std::set<int64_t> every;
  for (int64_t s = 1; s <= kSteps; ++s) every.insert(s);
  EXPECT_EQ(committed, every) << "a 700 ms poll sees several commits at once; each is recorded";
}

TEST_F(DaemonFaultTest, PrunedCheckpointsAreMarkedAndCannotBeResumedFrom) {
  WriteJob();  // a checkpoint every 5 steps; the trainer keeps the newest 3
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  ExpectFinishedBitExact(daemon);
  auto rec = LatestRun();
  ASSERT_TRUE(rec.has_value());
  auto& db = rec->db;
  const RunRecord* run = &rec->run;
  auto ckpts = db->Checkpoints(run->run_id);
  ASSERT_TRUE(ckpts.ok());
  std::set<int64_t> committed, pruned;
  for (const auto& c : *ckpts) (c.state == CheckpointState::kPruned ? pruned : committed).insert(c.step);
  EXPECT_EQ(committed, (std::set<int64_t>{20, 25, 30}));
  EXPECT_EQ(pruned, (std::set<int64_t>{5, 10, 15}));
  ProcessResult resume = Runctl({"resume", run->run_id, "--from-step", "10", "--force"});
  EXPECT_NE(resume.exit_code, 0) << resume.output;
  EXPECT_NE(resume.output.find("pruned"), std::string::npos) << resume.output;
  EXPECT_NE(resume.output.find("20, 25, 30"), std::string::npos) << "names the steps it can resume from: "
                                                                  << resume.output;
  // holdfastd asked directly refuses the same way, exit 2, before anything
  // starts: no attempt is added (it used to spend a restart and train from
  // the newest checkpoint with exit 0).
  auto attempts_before = db->Attempts(run->run_id);
  ASSERT_TRUE(attempts_before.ok());
  for (const char* step : {"10", "12"}) {  // pruned; never saved
    ProcessResult direct = RunProcess({BuildPath("daemon/holdfastd"), "--run-dir", dir_ / "run", "--config",
                                       dir_ / "job.toml", "--resume", run->run_id, "--from-step", step});
    EXPECT_EQ(direct.exit_code, 2) << direct.output;
    EXPECT_NE(direct.output.find("cannot resume from step " + std::string(step)), std::string::npos) << direct.output;
    EXPECT_NE(direct.output.find("steps it can resume from: 20, 25, 30"), std::string::npos) << direct.output;
  }
  auto again = Lineage();
  ASSERT_NE(again, nullptr);
  auto attempts_after = again->Attempts(run->run_id);
  ASSERT_TRUE(attempts_after.ok());
  EXPECT_EQ(attempts_after->size(), attempts_before->size()) << "a refused resume must record no attempt";
}

// A resume to an earlier step abandons the later timeline: its checkpoints
// are fenced off (moved aside on disk, marked fenced in lineage), so that a
// crash after the resume restarts from the resumed timeline's newest step —
// it used to restart from the abandoned timeline's newest (step 30), and the
// re-save of an abandoned step was recorded as checkpoint_failed.
TEST_F(DaemonFaultTest, AResumeToAnEarlierStepFencesTheLaterCheckpointsOffAndACrashStaysOnItsTimeline) {
  WriteJob();
  {
    ChildProcess first(Daemon(), dir_ / "daemon.log");
    ExpectFinishedBitExact(first);
  }
  std::string run_id;
  {
    auto rec = LatestRun();
    ASSERT_TRUE(rec.has_value());
    run_id = rec->run.run_id;
  }
  WriteJob("crash@1:22");  // fires once, in the resumed attempt: before step 25 is saved again
  std::vector<std::string> argv = Daemon();
  argv.insert(argv.end(), {"--resume", run_id, "--from-step", "20"});
  ChildProcess resumed(argv, dir_ / "daemon2.log");
  ASSERT_EQ(resumed.Wait(), 0) << ReadFile(dir_ / "daemon2.log");
  EXPECT_TRUE(ReadFile(dir_ / "final/params.bin") == reference_) << "the resumed timeline ends as the reference";
  auto db = Lineage();
  ASSERT_NE(db, nullptr);
  auto gens = db->Generations(run_id);
  ASSERT_TRUE(gens.ok());
  std::vector<GenerationRecord> second;
  for (const GenerationRecord& g : *gens) {
    if (g.attempt == 2) second.push_back(g);
  }
  ASSERT_EQ(second.size(), 2u) << "attempt 2: the resume, and the restart after the crash";
  EXPECT_EQ(second[0].start_step, 20);
  EXPECT_EQ(second[1].start_step, 20) << "the restart went back onto the abandoned timeline";
  auto ckpts = db->Checkpoints(run_id);
  ASSERT_TRUE(ckpts.ok());
  std::set<int64_t> fenced;
  std::map<int64_t, int> rows;
  for (const CheckpointRecord& c : *ckpts) {
    ++rows[c.step];
    if (c.state == CheckpointState::kFenced) {
      fenced.insert(c.step);
      EXPECT_NE(c.reason.find("resuming from step 20"), std::string::npos) << c.reason;
    }
  }
  EXPECT_EQ(fenced, (std::set<int64_t>{25, 30}));
  EXPECT_EQ(rows[25], 2) << "step 25 was saved again on the resumed timeline, as a new row";
  for (const char* step : {"step-000000000025", "step-000000000030"}) {
    EXPECT_TRUE(std::filesystem::exists(std::string(dir_ / "ck") + "/" + step + ".fenced"))
        << step << " kept on disk as evidence";
  }
  for (const EventRecord& e : testing::LatestRunEvents(dir_ / "run")) {
    EXPECT_NE(e.kind, "checkpoint_failed") << e.summary;
  }
}

// 5. The daemon's listening sockets and lock do not leak into the ranks.
TEST_F(DaemonFaultTest, RanksInheritOnlyStdinStdoutAndStderr) {
  WriteJob();
  std::string job = ReadFile(dir_ / "job.toml");
  const size_t a = job.find("command = [");
  const size_t b = job.find("]\n", a);
  // `exec ls` lists its own descriptors: 0-2, and 3 for the directory it reads.
  job.replace(a, b - a + 1, "command = [\"/bin/sh\", \"-c\", \"exec ls /proc/self/fd\"]");
  WriteFile(dir_ / "job.toml", job);
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  EXPECT_EQ(daemon.Wait(), 0) << ReadFile(dir_ / "daemon.log");
  for (const char* rank : {"0", "1"}) {
    std::istringstream in(ReadFile(dir_ / (std::string("run/logs/a1-g0-rank") + rank + ".log")));
    std::string header;
    std::getline(in, header);  // holdfastd's line naming the run and the rank
    EXPECT_NE(header.find(std::string("holdfastd: run r-")), std::string::npos) << header;
    EXPECT_NE(header.find(std::string(": rank ") + rank + " of 2"), std::string::npos) << header;
    std::set<std::string> fds;
    for (std::string fd; in >> fd;) fds.insert(fd);
    EXPECT_EQ(fds, (std::set<std::string>{"0", "1", "2", "3"})) << "rank " << rank;
  }
}

// 6. A straggler (rank 1 computing 6x slower from step 5 on) is visible:
// runctl status names it with its pace, and lineage records the episode.
TEST_F(DaemonFaultTest, AStragglerIsNamedInStatusAndRecorded) {
  WriteJob("slow@1:5:x6", "straggler_min_duration_s = 1\n");
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  std::optional<RunStatus> seen;
  std::string shown;
  while (!daemon.Exited()) {
    auto st = Status();
    if (st && st->slowest_rank.has_value() && *st->slowest_rank == 1 && st->slowest_rank_note &&
        st->slowest_rank_note->find("x the median") != std::string::npos) {
      seen = st;
      shown = Runctl({"status"}).output;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(seen.has_value()) << "the daemon never named rank 1 the slowest\n" << ReadFile(dir_ / "daemon.log");
  // Every rank's pace is shown (no comparison here: on a loaded CI machine the
  // instantaneous numbers are noisy; the detector's verdict is what counts).
  for (const RankStatus& r : seen->nodes[0].ranks) {
    EXPECT_TRUE(r.steps_per_s && r.step_ms_p50 && r.compute_ms_p50 && r.wait_ms_p50) << "rank " << r.rank;
  }
  EXPECT_NE(shown.find("slowest"), std::string::npos) << shown;
  ExpectFinishedBitExact(daemon);
  auto rec = LatestRun();
  ASSERT_TRUE(rec.has_value());
  auto& db = rec->db;
  const RunRecord* run = &rec->run;
  auto events = db->Events(run->run_id, 0);
  ASSERT_TRUE(events.ok());
  bool recorded = false;
  for (const auto& e : *events) recorded = recorded || (e.kind == "straggler" && e.rank == 1);
  EXPECT_TRUE(recorded) << ReadFile(dir_ / "daemon.log");
}

// 7. `runctl stop` exists and ends the run as `stopped` (as documented), after
// the ranks commit a final checkpoint.
TEST_F(DaemonFaultTest, RunctlStopEndsTheRunStoppedAfterAFinalCheckpoint) {
  WriteJob();
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  ASSERT_TRUE(WaitForStep(6, daemon).has_value()) << ReadFile(dir_ / "daemon.log");
  ProcessResult stop = Runctl({"stop", "--wait"});
  EXPECT_EQ(stop.exit_code, 0) << stop.output;
  EXPECT_NE(stop.output.find("stopped"), std::string::npos) << stop.output;
  EXPECT_EQ(daemon.Wait(), 75) << "the ranks committed a final checkpoint: resume later\n"
                               << ReadFile(dir_ / "daemon.log");
  auto rec = LatestRun();
  ASSERT_TRUE(rec.has_value());
  auto& db = rec->db;
  const RunRecord* run = &rec->run;
  EXPECT_EQ(run->state, RunState::kStopped);
  EXPECT_NE(run->cause.find("stopped with runctl"), std::string::npos) << run->cause;
  auto gens = db->Generations(run->run_id);
  ASSERT_TRUE(gens.ok() && !gens->empty());
  ASSERT_TRUE(gens->back().last_step.has_value());
  EXPECT_GE(*gens->back().last_step, 6) << "the generation ended where it stopped, not at step 0";
}

// 8. `runctl checkpoint --wait` returns once a checkpoint at or after the
// requested step is committed, and says which.
TEST_F(DaemonFaultTest, RunctlCheckpointWaitReturnsOnceTheCheckpointCommitted) {
  WriteJob();
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  ASSERT_TRUE(WaitForStep(3, daemon).has_value()) << ReadFile(dir_ / "daemon.log");
  ProcessResult ck = Runctl({"--json", "checkpoint", "latest", "--wait"});
  ASSERT_EQ(ck.exit_code, 0) << ck.output;
  auto j = nlohmann::json::parse(ck.output);
  const int64_t requested = j["result"]["requested_at_step"].get<int64_t>();
  const int64_t committed = j["committed_step"].get<int64_t>();
  EXPECT_GE(committed, requested);
  char step_dir[32];
  std::snprintf(step_dir, sizeof(step_dir), "step-%012lld", static_cast<long long>(committed));
  EXPECT_TRUE(std::filesystem::exists(std::string(dir_ / "ck") + "/" + step_dir + "/MANIFEST.json"))
      << "the step runctl names is committed on disk: " << ck.output;
  EXPECT_EQ(daemon.Wait(), 0) << ReadFile(dir_ / "daemon.log");
}

// 9. `runctl resume --wait` relaunches a stopped run and returns once its
// ranks have restored and stepped; the resumed run then finishes.
TEST_F(DaemonFaultTest, RunctlResumeWaitReturnsOnceTheRunTrainsAgain) {
  WriteJob();
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  ASSERT_TRUE(WaitForStep(6, daemon).has_value()) << ReadFile(dir_ / "daemon.log");
  ASSERT_EQ(Runctl({"stop", "--wait"}).exit_code, 0);
  EXPECT_EQ(daemon.Wait(), 75);
  ProcessResult resumed = Runctl({"resume", "latest", "--wait"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output << ReadFile(dir_ / "run/holdfastd.log");
  EXPECT_NE(resumed.output.find("is training again at step"), std::string::npos) << resumed.output;
  // The detached daemon finishes the run (no time limit asserted: it ends when it ends).
  for (;;) {
    auto rec = LatestRun();
    ASSERT_TRUE(rec.has_value());
    if (rec->run.state != RunState::kRunning) {
      EXPECT_EQ(rec->run.state, RunState::kSucceeded) << rec->run.cause;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}


// 10. Hostile control requests are refused before anything changes: a stop
// whose run_id is not a string, is empty, or comes with a duplicate key used
// to be obeyed (the run-id guard ran only for string ids; an empty id matched
// every run; a repeated "op" counted by its last value). Each gets
// InvalidArgument, the run keeps training and ends bit-exact.
TEST_F(DaemonFaultTest, MalformedControlRequestsAreRefusedAndTheRunGoesOnUntouched) {
  WriteJob();
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  auto before = WaitForStep(3, daemon);
  ASSERT_TRUE(before.has_value()) << ReadFile(dir_ / "daemon.log");
  const std::vector<std::string> hostile = {
      R"({"v":1,"id":9,"op":"stop","args":{"run_id":123}})",
      R"({"v":1,"id":9,"op":"stop","args":{"run_id":null}})",
      R"({"v":1,"id":9,"op":"stop","args":{"run_id":["x"]}})",
      R"({"v":1,"id":9,"op":"stop","args":{"run_id":""}})",
      R"({"v":1,"id":9,"op":"status","op":"stop"})",
      R"({"v":1,"id":9,"op":"stop","args":{"run_id":"latest","run_id":"r-other"}})",
  };
  for (const std::string& line : hostile) {
    auto reply = testing::SendRawControlLine(dir_ / "run", line);
    ASSERT_TRUE(reply.has_value()) << line;
    auto j = nlohmann::json::parse(*reply, nullptr, false);
    ASSERT_TRUE(j.is_object()) << *reply;
    EXPECT_FALSE(j.value("ok", true)) << line << " -> " << *reply;
    EXPECT_EQ(j["error"]["code"], "InvalidArgument") << line << " -> " << *reply;
  }
  // A well-formed stop for another run is refused too.
  auto other = testing::SendRawControlLine(dir_ / "run", R"({"v":1,"id":9,"op":"stop","args":{"run_id":"r-not-this"}})");
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(nlohmann::json::parse(*other)["error"]["code"], "FailedPrecondition") << *other;
  // Still training: the step moves on past the one seen after the requests.
  auto st = Status();
  ASSERT_TRUE(st.has_value()) << ReadFile(dir_ / "daemon.log");
  EXPECT_EQ(st->state, "running");
  ASSERT_TRUE(WaitForStep(st->step + 2, daemon).has_value()) << ReadFile(dir_ / "daemon.log");
  ExpectFinishedBitExact(daemon);
  auto rec = LatestRun();
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->run.state, RunState::kSucceeded);
}


// 12. The ranks' watcher frozen is no reason to stop training: with holdfastd
// SIGSTOPped (the store it hosts answers nothing), the ranks go on through
// several checkpoint saves — their commits wait, their step loop does not —
// and once it continues every save made meanwhile commits and the run ends
// bit-exact. (A save used to wait for the previous commit, which waited on
// the store: 14.5 s of a 20 s stop without a step.)
TEST_F(DaemonFaultTest, ASigstoppedHoldfastdDoesNotStallTheRanksStepLoop) {
  WriteJob();  // 30 steps, a checkpoint every 5
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  ASSERT_TRUE(WaitForStep(1, daemon).has_value()) << ReadFile(dir_ / "daemon.log");
  daemon.Signal(SIGSTOP);
  // The ranks' own progress records (shared memory the daemon only reads).
  auto slowest = [&]() -> int64_t {
    int64_t least = -1;
    int seen = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir_ / "shm", ec)) {
      if (e.path().extension() != ".rec") continue;
      auto r = ProgressReader::Open(e.path().string());
      if (!r.ok()) continue;
      const ProgressSnapshot p = (*r)->Read();
      if (!p.valid) continue;
      least = seen++ == 0 ? p.record.step : std::min(least, p.record.step);
    }
    return seen == 2 ? least : -1;
  };
  // Where the ranks are now (at or after the stop), then at least two saves
  // further (every 5 steps) while the store does not answer.
  int64_t at_stop = -1;
  const bool read = testing::WaitUntil(daemon, "both ranks' progress records", 300,
                                       [&] { return (at_stop = slowest()) >= 0; });
  const bool trained = read && at_stop <= 19 &&
                       testing::WaitUntil(daemon, "both ranks 11 steps on while holdfastd is stopped", 300,
                                          [&] { return slowest() >= at_stop + 11; });
  daemon.Signal(SIGCONT);  // before any assertion can end the test
  ASSERT_TRUE(read);
  ASSERT_LE(at_stop, 19) << "the ranks were past step 19 when their records were first read: nothing left to show";
  ASSERT_TRUE(trained) << ReadFile(dir_ / "daemon.log");
  ExpectFinishedBitExact(daemon);
  auto rec = LatestRun();
  ASSERT_TRUE(rec.has_value());
  auto ckpts = rec->db->Checkpoints(rec->run.run_id);
  ASSERT_TRUE(ckpts.ok());
  std::set<int64_t> committed;
  for (const CheckpointRecord& c : *ckpts) {
    if (c.state == CheckpointState::kCommitted) committed.insert(c.step);
  }
  EXPECT_EQ(committed, (std::set<int64_t>{20, 25, 30})) << "the saves made during the stop committed";
  for (const EventRecord& e : testing::LatestRunEvents(dir_ / "run")) {
    EXPECT_NE(e.kind, "checkpoint_failed") << e.summary;
    EXPECT_NE(e.kind, "hang") << e.summary;
  }
}

}  // namespace
}  // namespace holdfast
