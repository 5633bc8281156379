// RunRecorder while another process holds lineage.db locked: supervision is
// not held up, nothing is lost, order and times are kept. Its incidents in
// the cross-run host history: which hosts, credited or involved, once
// lineage has the event.
#include "daemon/run_recorder.h"

#include <sqlite3.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <thread>

#include <gtest/gtest.h>

#include "common/host_history.h"
#include "tests/support/subprocess.h"

namespace holdfast {
namespace {

using testing::TempDir;

// Another connection (as an `sqlite3` shell would be) inside BEGIN EXCLUSIVE.
class Locker {
 public:
  explicit Locker(const std::string& path) {
    EXPECT_EQ(sqlite3_open(path.c_str(), &db_), SQLITE_OK);
    EXPECT_EQ(sqlite3_exec(db_, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db_);
  }
  ~Locker() {
    sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr);
    sqlite3_close(db_);
  }

 private:
  sqlite3* db_ = nullptr;
};

class RunRecorderTest : public ::testing::Test {
 protected:
  RunRecorderTest() : dir_("run_recorder") {
    job_.name = "unit";
    job_.command = {"/bin/true"};
    job_.nproc = 2;
    job_.history_dir = dir_ / "history";  // not beside the temporary folder: in it
    alloc_.nodes = {{"host-a", "127.0.0.1"}};
    RecorderOptions ro;
    ro.run_dir = dir_.path();
    ro.job = &job_;
    ro.allocation = alloc_;
    ro.world_size = 2;
    auto rec = RunRecorder::Open(ro, &clock_);
    EXPECT_TRUE(rec.ok()) << rec.status().ToString();
    if (rec.ok()) recorder_ = std::move(rec).value();
  }

  std::unique_ptr<LineageDb> Reader() const {
    LineageOptions o;
    o.read_only = true;
    auto db = LineageDb::Open(dir_ / "lineage.db", o);
    EXPECT_TRUE(db.ok()) << db.status().ToString();
    return db.ok() ? std::move(db).value() : nullptr;
  }

  // A run in DIR/runs/NAME whose host history goes where it goes by default
  // (DIR/runs/.holdfast/hosts), or, with `keep_history_dir`, to job_'s.
  std::unique_ptr<RunRecorder> RunBeside(const std::string& name, int gpus, bool keep_history_dir = false) {
    beside_job_ = job_;
    if (!keep_history_dir) beside_job_.history_dir.clear();
    RecorderOptions ro;
    ro.run_dir = dir_ / ("runs/" + name);
    std::filesystem::create_directories(ro.run_dir);
    ro.job = &beside_job_;
    ro.allocation = alloc_;
    ro.world_size = 4;
    ro.gpus = gpus;
    auto rec = RunRecorder::Open(ro, &clock_);
    EXPECT_TRUE(rec.ok()) << rec.status().ToString();
    return rec.ok() ? std::move(rec).value() : nullptr;
  }

  TempDir dir_;
  JobConfig job_;
  JobConfig beside_job_;
  Allocation alloc_;
  FakeTimeSource clock_;
  std::unique_ptr<RunRecorder> recorder_;
};

// Every event goes through Record: the runbook comes from the kind's row of
// lineage/event_kind.h unless the context names another, the evidence is the
// typed value as lineage/incident.h writes it, and incidents become the last one.
TEST_F(RunRecorderTest, RecordFillsInTheRunbookAndWritesTypedEvidence) {
  ASSERT_NE(recorder_, nullptr);
  recorder_->StartGeneration(0);
  IncidentEvidence reshard;
  reshard.world_size_before = 4;
  reshard.world_size_after = 2;
  reshard.left = {"node-b"};
  recorder_->Record(event_kind::kReshard, "world size 4 -> 2", "restart generation 1", reshard, AtHost("node-b"));
  recorder_->Record(event_kind::kRequeue, "requeued", "requeued excluding node-b", {}, WithoutRunbook());
  EventContext signalled;
  signalled.runbook_of = event_kind::kCrash;
  recorder_->Record(event_kind::kStop, "holdfastd got SIGTERM", "stopped", {}, signalled);
  EventContext health;
  health.host = "node-a";
  health.runbook = "runbooks/health-gpu.md";
  health.report_json = "{\"status\":\"fail\"}";
  recorder_->Record(event_kind::kHealth, "gpu_ecc failed on node-a", "drain", {}, health);
  recorder_->Flush();

  auto db = Reader();
  ASSERT_NE(db, nullptr);
  auto events = db->Events(recorder_->run_id(), 0);
  ASSERT_TRUE(events.ok()) << events.status().ToString();
  ASSERT_EQ(events->size(), 4u);
  const EventRecord& r = (*events)[0];
  EXPECT_EQ(r.runbook, "runbooks/elastic.md");
  EXPECT_EQ(r.node, "node-b");
  EXPECT_FALSE(r.incident);
  Result<IncidentEvidence> back = ParseIncidentEvidence(r.evidence_json);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->world_size_before, 4);
  EXPECT_EQ(back->world_size_after, 2);
  EXPECT_EQ(back->left, std::vector<std::string>{"node-b"});
  EXPECT_EQ((*events)[1].runbook, "") << "a requeue done needs no guide";
  EXPECT_EQ((*events)[2].runbook, "runbooks/crash.md");
  EXPECT_EQ((*events)[3].runbook, "runbooks/health-gpu.md");
  EXPECT_EQ((*events)[3].evidence_json, "{\"status\":\"fail\"}");
  EXPECT_TRUE((*events)[3].incident);
  ASSERT_TRUE(recorder_->last_incident().has_value());
  EXPECT_EQ(recorder_->last_incident()->summary, "gpu_ecc failed on node-a");
  EXPECT_EQ(recorder_->incident_counts().at(event_kind::kHealth), 1);
  EXPECT_EQ(recorder_->incident_counts().count(event_kind::kReshard), 0u);
}

// Views of a world of 2 whose ranks said what they restored (tier kUnreported: not yet).
std::vector<RankView> Restored(RestoreTier tier0, int64_t step0, RestoreTier tier1, int64_t step1,
                               uint32_t passed_over) {
  std::vector<RankView> views(2);
  for (int r = 0; r < 2; ++r) {
    views[r].rank = r;
    views[r].pid = 100 + r;
    views[r].progress.valid = true;
    views[r].progress.writer_pid = 100 + r;
    views[r].progress.restore_tier = r == 0 ? tier0 : tier1;
    views[r].progress.restored_step = r == 0 ? step0 : step1;
    views[r].progress.restore_skipped = passed_over;
  }
  return views;
}

// The generation's start is the step its ranks restored once every rank has
// said, with the tier, once per generation; snapshots passed over leave a
// note (not an incident), and status has it.
TEST_F(RunRecorderTest, AGenerationStartsWhereItsRanksSayTheyRestoredIt) {
  ASSERT_NE(recorder_, nullptr);
  recorder_->StartGeneration(14);  // expected: the memory snapshot of step 14
  EXPECT_EQ(recorder_->ObserveRestore(Restored(RestoreTier::kDisk, 10, RestoreTier::kUnreported, -1, 0), 2),
            std::nullopt)
      << "rank 1 has not said yet";
  EXPECT_FALSE(recorder_->restore().has_value());
  EXPECT_EQ(recorder_->ObserveRestore(Restored(RestoreTier::kDisk, 10, RestoreTier::kDisk, 10, 1), 2), 10);
  EXPECT_EQ(recorder_->ObserveRestore(Restored(RestoreTier::kMemory, 14, RestoreTier::kMemory, 14, 0), 2),
            std::nullopt)
      << "once per generation";
  ASSERT_TRUE(recorder_->restore().has_value());
  EXPECT_EQ(recorder_->restore()->tier, "disk");
  recorder_->EndGeneration(RunState::kFailed, "rank 1 crashed");
  recorder_->StartGeneration(20);
  EXPECT_FALSE(recorder_->restore().has_value()) << "a new generation has not said yet";
  EXPECT_EQ(recorder_->ObserveRestore(Restored(RestoreTier::kMemory, 20, RestoreTier::kMemory, 20, 0), 2), 20);
  recorder_->Flush();

  auto db = Reader();
  ASSERT_NE(db, nullptr);
  auto gens = *db->Generations(recorder_->run_id());
  ASSERT_EQ(gens.size(), 2u);
  EXPECT_EQ(gens[0].start_step, 10);
  EXPECT_EQ(gens[0].restore_tier, "disk");
  EXPECT_EQ(gens[1].start_step, 20);
  EXPECT_EQ(gens[1].restore_tier, "memory");
  auto events = *db->Events(recorder_->run_id(), 0);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, event_kind::kSnapshotPassedOver);
  EXPECT_EQ(events[0].generation, 0);
  EXPECT_FALSE(events[0].incident);
  EXPECT_EQ(events[0].runbook, "runbooks/memory-snapshots.md");
  EXPECT_EQ(events[0].summary,
            "generation 0 passed over 1 memory snapshot (damaged, or not held by every rank) and restored step 10 "
            "from the disk");
  EXPECT_FALSE(recorder_->last_incident().has_value());
}

TEST_F(RunRecorderTest, RecordsMadeWhileLineageIsLockedAreWrittenInOrderOnceItIsFree) {
  ASSERT_NE(recorder_, nullptr);
  recorder_->StartGeneration(0);
  const int64_t crash_ms = clock_.UnixMs();
  {
    Locker lock(dir_ / "lineage.db");
    recorder_->Record(event_kind::kCrash, "rank 1 killed by signal 9 (SIGKILL)", "restart",
                      {}, EventContext{"host-a", 1, {}, "", ""});
    recorder_->EndGeneration(RunState::kFailed, "rank 1 crashed");
    clock_.Advance(3);
    recorder_->StartGeneration(10);
    recorder_->Flush();  // a poll while still locked
    EXPECT_EQ(recorder_->held(), 3u) << "the event and both generation writes wait for the lock";
  }
  clock_.Advance(2);
  recorder_->Flush();  // the next poll
  EXPECT_EQ(recorder_->held(), 0u);

  auto db = Reader();
  ASSERT_NE(db, nullptr);
  auto events = db->Events(recorder_->run_id(), 0);
  ASSERT_TRUE(events.ok()) << events.status().ToString();
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[0].kind, event_kind::kCrash);
  EXPECT_EQ((*events)[0].time_ms, crash_ms) << "an event keeps the time it happened";
  EXPECT_EQ((*events)[1].kind, event_kind::kLineageDelayed);
  EXPECT_NE((*events)[1].summary.find("locked by another process for 5.0 s; 3 record(s)"), std::string::npos)
      << (*events)[1].summary;
  EXPECT_EQ((*events)[1].runbook, "runbooks/lineage-locked.md");
  auto gens = db->Generations(recorder_->run_id());
  ASSERT_TRUE(gens.ok());
  ASSERT_EQ(gens->size(), 2u);
  EXPECT_EQ((*gens)[0].state, RunState::kFailed);
  EXPECT_EQ((*gens)[1].start_step, 10);
  auto inc = db->LastIncident(recorder_->run_id());
  ASSERT_TRUE(inc.ok() && inc->has_value());
  EXPECT_EQ((*inc)->kind, event_kind::kCrash) << "the note is not an incident";
}

TEST_F(RunRecorderTest, TheEndOfTheRunIsWrittenWhenTheLockGoesBeforeTheExitWait) {
  ASSERT_NE(recorder_, nullptr);
  recorder_->StartGeneration(0);
  auto lock = std::make_unique<Locker>(dir_ / "lineage.db");
  recorder_->EndGeneration(RunState::kSucceeded, "");
  EXPECT_EQ(recorder_->held(), 1u);
  std::thread release([&lock] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    lock.reset();
  });
  recorder_->EndRun(RunState::kSucceeded, "");  // waits for the lock (up to kExitWaitMs)
  release.join();
  EXPECT_EQ(recorder_->held(), 0u);
  auto db = Reader();
  ASSERT_NE(db, nullptr);
  auto run = db->GetRun(recorder_->run_id());
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->state, RunState::kSucceeded);
}

// A requeue onto another number of nodes resumes a checkpoint saved by
// another world size: the new attempt records a reshard naming both sizes.
TEST_F(RunRecorderTest, AResumeOnAnotherWorldSizeIsRecordedAsAReshard) {
  ASSERT_NE(recorder_, nullptr);
  const std::string run_id = recorder_->run_id();
  recorder_->EndRun(RunState::kPreempted, "requeued");
  recorder_.reset();
  {
    auto db = LineageDb::Open(dir_ / "lineage.db", LineageOptions{});
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    CheckpointRecord c;
    c.run_id = run_id;
    c.step = 20;
    c.path = dir_ / "ck/step-000000000020";
    c.world_size = 2;
    ASSERT_TRUE((*db)->RecordCheckpoint(c).ok());
  }
  RecorderOptions ro;
  ro.run_dir = dir_.path();
  ro.job = &job_;
  alloc_.nodes.push_back({"host-b", "127.0.0.2"});
  ro.allocation = alloc_;
  ro.world_size = 4;
  auto rec = RunRecorder::Open(ro, &clock_);
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  (*rec)->Flush();
  auto db = Reader();
  ASSERT_NE(db, nullptr);
  auto events = db->Events((*rec)->run_id(), 0);
  ASSERT_TRUE(events.ok());
  bool found = false;
  for (const EventRecord& e : *events) {
    if (e.kind != "reshard") continue;
    found = true;
    EXPECT_EQ(e.summary, "world size 2 -> 4: checkpoint 20 was saved by 2 ranks, attempt 2 has 4");
    EXPECT_NE(e.action.find("reshards checkpoint 20 to 4 ranks"), std::string::npos) << e.action;
  }
  EXPECT_TRUE(found);
}

// Evidence of an incident on ranks 0..3, two a host: host-a has 0 and 1, host-b 2 and 3.
IncidentEvidence FourRanks(std::vector<int> culprits) {
  IncidentEvidence ev;
  ev.culprits = std::move(culprits);
  for (int r = 0; r < 4; ++r) {
    RankEvidence re;
    re.rank = r;
    re.host = r < 2 ? "host-a" : "host-b";
    ev.ranks.push_back(re);
  }
  return ev;
}

TEST_F(RunRecorderTest, ACreditedIncidentIsPublishedForItsHostAndAnUncreditedOneForEachCulpritsHost) {
  std::unique_ptr<RunRecorder> rec = RunBeside("r1", 4);
  ASSERT_NE(rec, nullptr);
  rec->StartGeneration(0);
  const std::string history = dir_ / "runs/.holdfast/hosts";
  EXPECT_EQ(rec->history_dir(), history);
  rec->Record(event_kind::kCrash, "rank 3 killed by signal 9 (SIGKILL)", "restart", FourRanks({3}),
              EventContext{"host-b", 3, {}, "", ""});
  clock_.Advance(1);
  rec->Record(event_kind::kHang, "all ranks entered allreduce #9 but it has not completed", "restart",
              FourRanks({0, 1, 2, 3}));
  // Not of a kind that counts against a host: not published.
  rec->Record(event_kind::kCheckpointFailed, "checkpoint step 20 failed on rank 2", "training continues", {},
              AtHost("host-b"));
  rec->Record(event_kind::kStraggler, "rank 2 is slow", "reported", {}, AtHost("host-b"));

  auto db = Reader();
  ASSERT_NE(db, nullptr);
  LineageOptions o;
  o.read_only = true;
  auto lineage = LineageDb::Open(dir_ / "runs/r1/lineage.db", o);
  ASSERT_TRUE(lineage.ok());
  auto events = (*lineage)->Events(rec->run_id(), 0);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 4u);
  auto a = ReadHostHistory(history, "host-a");
  auto b = ReadHostHistory(history, "host-b");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(a->skipped.empty() && b->skipped.empty());
  ASSERT_EQ(b->incidents.size(), 2u);
  const HostIncident& crash = b->incidents[0];
  EXPECT_TRUE(crash.credited);
  EXPECT_EQ(crash.kind, "crash");
  EXPECT_EQ(crash.event_id, (*events)[0].id);
  EXPECT_EQ(crash.time_ms, (*events)[0].time_ms);
  EXPECT_EQ(crash.run_id, rec->run_id());
  EXPECT_EQ(crash.run_name, "unit");
  EXPECT_EQ(crash.run_dir, dir_ / "runs/r1");
  EXPECT_EQ(crash.rank, 3);
  EXPECT_EQ(crash.attempt, 1);
  EXPECT_EQ(crash.generation, 0);
  EXPECT_EQ(crash.summary, "rank 3 killed by signal 9 (SIGKILL)");
  // The all-ranks hang credits no host: each host is recorded as involved only.
  const HostIncident& hang = b->incidents[1];
  EXPECT_EQ(hang.kind, "hang");
  EXPECT_FALSE(hang.credited);
  EXPECT_EQ(hang.event_id, (*events)[1].id);
  ASSERT_EQ(a->incidents.size(), 1u);
  EXPECT_EQ(a->incidents[0].kind, "hang");
  EXPECT_FALSE(a->incidents[0].credited);

  auto attempts = (*lineage)->Attempts(rec->run_id());
  ASSERT_TRUE(attempts.ok());
  EXPECT_EQ((*attempts)[0].gpus, 4);
}

TEST_F(RunRecorderTest, AnIncidentHeldWhileLineageIsLockedIsPublishedWithItsEventOnceWritten) {
  ASSERT_NE(recorder_, nullptr);
  recorder_->StartGeneration(0);
  const std::string history = dir_ / "history";
  {
    Locker lock(dir_ / "lineage.db");
    recorder_->Record(event_kind::kNodeLost, "host-b's holdfastd is gone", "requeue", {}, AtHost("host-b"));
    EXPECT_EQ(recorder_->held(), 1u);
    EXPECT_FALSE(std::filesystem::exists(history + "/host-b")) << "published before lineage has the event";
  }
  recorder_->Flush();
  auto b = ReadHostHistory(history, "host-b");
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->incidents.size(), 1u);
  auto db = Reader();
  ASSERT_NE(db, nullptr);
  auto inc = db->LastIncident(recorder_->run_id());
  ASSERT_TRUE(inc.ok() && inc->has_value());
  EXPECT_EQ(b->incidents[0].event_id, (*inc)->id);
  EXPECT_TRUE(b->incidents[0].credited);
}

TEST_F(RunRecorderTest, WithTheHostHistoryOffNothingIsPublished) {
  job_.host_history = false;
  std::unique_ptr<RunRecorder> rec = RunBeside("r2", 0);
  ASSERT_NE(rec, nullptr);
  EXPECT_EQ(rec->history_dir(), "");
  rec->StartGeneration(0);
  rec->Record(event_kind::kCrash, "rank 1 exited with code 1", "restart", FourRanks({1}), AtHost("host-a"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "runs/.holdfast"));
}

TEST_F(RunRecorderTest, AHistoryThatCannotBeWrittenIsLoggedAndTheRecordGoesOn) {
  testing::WriteFile(dir_ / "not-a-folder", "x");
  job_.history_dir = dir_ / "not-a-folder";
  std::unique_ptr<RunRecorder> rec = RunBeside("r3", 0, /*keep_history_dir=*/true);
  ASSERT_NE(rec, nullptr);
  rec->StartGeneration(0);
  rec->Record(event_kind::kCrash, "rank 1 exited with code 1", "restart", FourRanks({1}), AtHost("host-a"));
  rec->Record(event_kind::kCrash, "rank 1 exited with code 1 again", "restart", FourRanks({1}), AtHost("host-a"));
  LineageOptions o;
  o.read_only = true;
  auto lineage = LineageDb::Open(dir_ / "runs/r3/lineage.db", o);
  ASSERT_TRUE(lineage.ok());
  auto events = (*lineage)->Events(rec->run_id(), 0);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->size(), 2u) << "lineage has every incident though the history could not be written";
  EXPECT_EQ(rec->held(), 0u);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "runs/.holdfast")) << "and nothing went anywhere else";
}

}  // namespace
}  // namespace holdfast
