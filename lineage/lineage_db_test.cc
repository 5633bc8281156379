// LineageDb against real SQLite files in a temporary folder.
#include "lineage/lineage_db.h"

#include "common/run_spec.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "tests/support/subprocess.h"

namespace holdfast {
namespace {

// One temporary folder per test, removed after it (HOLDFAST_KEEP_TEST_DIRS keeps it).
class TempDir : public testing::TempDir {
 public:
  TempDir() : testing::TempDir("lineage_test") {}
};

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// Runs SQL on a file with plain SQLite, bypassing LineageDb; returns the first
// column of the first row (or "").
std::string RawSql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  HF_CHECK(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  std::string out;
  char* err = nullptr;
  int rc = sqlite3_exec(
      db, sql.c_str(),
      [](void* o, int n, char** v, char**) {
        auto* s = static_cast<std::string*>(o);
        if (s->empty() && n > 0 && v[0]) *s = v[0];
        return 0;
      },
      &out, &err);
  HF_CHECK_MSG(rc == SQLITE_OK, err ? err : "");
  sqlite3_close(db);
  return out;
}

// "r-20270115-" followed by four lower-case hex digits.
bool IsRunIdOf20270115(const std::string& id) {
  if (id.size() != 15 || id.compare(0, 11, "r-20270115-") != 0) return false;
  return id.find_first_not_of("0123456789abcdef", 11) == std::string::npos;
}

class LineageDbTest : public ::testing::Test {
 protected:
  std::string db_path() const { return dir_.path() + "/lineage.db"; }

  std::unique_ptr<LineageDb> OpenWriter(JournalMode mode = JournalMode::kWal) {
    LineageOptions o;
    o.journal_mode = mode;
    o.clock = [this] { return now_ms_; };
    auto db = LineageDb::Open(db_path(), o);
    HF_CHECK_MSG(db.ok(), db.status().ToString());
    return std::move(db).value();
  }
  Result<std::unique_ptr<LineageDb>> OpenReader() {
    LineageOptions o;
    o.read_only = true;
    return LineageDb::Open(db_path(), o);
  }

  static RunRecord SampleRun(const std::string& id) {
    RunRecord r;
    r.run_id = id;
    r.name = "gpt-small";
    r.owner_uid = 1000;
    r.run_dir = "/scratch/runs/gpt-small";
    r.config_path = "/scratch/runs/gpt-small/job.toml";
    r.config_hash = "9f2c";
    r.config_text = "[optim]\nlr = 3e-4\n";
    r.world_size = 16;
    r.nodes = {"node01", "node02"};
    r.scheduler = SchedulerKind::kSlurm;
    r.slurm_job_id = "4711";
    return r;
  }

  TempDir dir_;
  int64_t now_ms_ = 1'800'000'000'000;
};

TEST_F(LineageDbTest, EveryWriteReadsBack) {
  auto db = OpenWriter();
  auto id = db->CreateRun(SampleRun("r-20270115-0001"));
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  ASSERT_EQ(*id, "r-20270115-0001");

  now_ms_ += 10;
  AttemptStart as;
  as.slurm_job_id = "4711";
  as.nodes = {"node01", "node03"};
  auto a1 = db->StartAttempt(*id, as);
  ASSERT_TRUE(a1.ok()) << a1.status().ToString();
  EXPECT_EQ(*a1, 1);
  auto g0 = db->StartGeneration(*id, 1, 0);
  ASSERT_TRUE(g0.ok()) << g0.status().ToString();
  EXPECT_EQ(*g0, 0);
  now_ms_ += 1000;
  ASSERT_TRUE(db->UpdateGenerationStep(*id, 1, 0, 1290).ok());

  CheckpointRecord c;
  c.run_id = *id;
  c.step = 1200;
  c.path = "/scratch/runs/gpt-small/ckpt/step-000000001200";
  c.bytes = 123456789;
  c.world_size = 16;
  c.attempt = 1;
  c.generation = 0;
  c.metrics = {{"eval_loss", 1.25}, {"eval_step", 1200}};
  ASSERT_TRUE(db->RecordCheckpoint(c).ok());
  {
    auto ck = db->Checkpoints(*id);
    ASSERT_TRUE(ck.ok()) << ck.status().ToString();
    ASSERT_EQ(ck->size(), 1u);
    EXPECT_EQ((*ck)[0].metrics, c.metrics) << "the manifest's eval metrics are kept per checkpoint";
  }

  EventRecord e;
  e.run_id = *id;
  e.kind = event_kind::kHang;
  e.attempt = 1;
  e.generation = 0;
  e.node = "node03";
  e.rank = 3;
  e.summary = "rank 3 never entered allreduce #1287; ranks 0-2 waiting in it for 41 s";
  e.evidence_json = R"({"ranks":[{"rank":3,"step":1290,"phase":"backward"}]})";
  e.action = "restart g1 from step 1200";
  e.runbook = "runbooks/hang.md";
  auto eid = db->RecordEvent(e);
  ASSERT_TRUE(eid.ok()) << eid.status().ToString();
  ASSERT_TRUE(db->EndGeneration(*id, 1, 0, RunState::kFailed, "rank 3 hung in allreduce").ok());
  auto g1 = db->StartGeneration(*id, 1, 1200);
  ASSERT_TRUE(g1.ok());
  EXPECT_EQ(*g1, 1);

  HealthResultRecord h;
  h.run_id = *id;
  h.node = "node03";
  h.check = "gpu_ecc";
  h.status = HealthStatus::kFail;
  h.value = 3;
  h.threshold = 0;
  h.unit = "errors";
  h.source = "nvml";
  h.evidence_json = R"({"gpu":5})";
  h.suggested_action = "drain node03";
  ASSERT_TRUE(db->RecordHealthResult(h).ok());

  now_ms_ += 5;
  ASSERT_TRUE(db->EndRun(*id, RunState::kSucceeded, "reached max_steps").ok());

  auto run = db->GetRun(*id);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->name, "gpt-small");
  EXPECT_EQ(run->owner_uid, 1000);
  EXPECT_EQ(run->config_text, "[optim]\nlr = 3e-4\n");
  EXPECT_EQ(run->config_hash, "9f2c");
  EXPECT_EQ(run->world_size, 16);
  EXPECT_EQ(run->nodes, (std::vector<std::string>{"node01", "node03"}));  // newest attempt's
  EXPECT_EQ(run->scheduler, SchedulerKind::kSlurm);
  EXPECT_EQ(run->slurm_job_id, "4711");
  EXPECT_EQ(run->created_ms, 1'800'000'000'000);
  EXPECT_EQ(run->ended_ms, now_ms_);
  EXPECT_EQ(run->state, RunState::kSucceeded);
  EXPECT_EQ(run->cause, "reached max_steps");
  EXPECT_EQ(run->last_step, 1290);

  auto attempts = db->Attempts(*id);
  ASSERT_TRUE(attempts.ok());
  ASSERT_EQ(attempts->size(), 1u);
  EXPECT_EQ((*attempts)[0].parent_attempt, std::nullopt);
  EXPECT_EQ((*attempts)[0].state, RunState::kSucceeded);  // EndRun ends the live attempt
  EXPECT_EQ((*attempts)[0].resumed_from_step, std::nullopt);

  auto gens = db->Generations(*id);
  ASSERT_TRUE(gens.ok());
  ASSERT_EQ(gens->size(), 2u);
  EXPECT_EQ((*gens)[0].state, RunState::kFailed);
  EXPECT_EQ((*gens)[0].cause, "rank 3 hung in allreduce");
  EXPECT_EQ((*gens)[0].last_step, 1290);
  EXPECT_EQ((*gens)[0].last_step_ms, 1'800'000'001'010);
  EXPECT_EQ((*gens)[1].start_step, 1200);
  EXPECT_EQ((*gens)[1].state, RunState::kSucceeded);

  auto ckpts = db->Checkpoints(*id);
  ASSERT_TRUE(ckpts.ok());
  ASSERT_EQ(ckpts->size(), 1u);
  EXPECT_EQ((*ckpts)[0].path, c.path);
  EXPECT_EQ((*ckpts)[0].bytes, 123456789);
  EXPECT_EQ((*ckpts)[0].generation, 0);
  EXPECT_EQ((*ckpts)[0].state, CheckpointState::kCommitted);

  auto events = db->Events(*id, 10);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  const EventRecord& got = (*events)[0];
  EXPECT_EQ(got.id, *eid);
  EXPECT_EQ(got.kind, "hang");
  EXPECT_EQ(got.rank, 3);
  EXPECT_EQ(got.node, "node03");
  EXPECT_EQ(got.summary, e.summary);
  EXPECT_EQ(got.evidence_json, e.evidence_json);
  EXPECT_EQ(got.action, e.action);
  EXPECT_EQ(got.runbook, "runbooks/hang.md");
  EXPECT_TRUE(got.incident);

  auto health = db->HealthResults({*id, "", 10});
  ASSERT_TRUE(health.ok());
  ASSERT_EQ(health->size(), 1u);
  EXPECT_EQ((*health)[0].check, "gpu_ecc");
  EXPECT_EQ((*health)[0].status, HealthStatus::kFail);
  EXPECT_EQ((*health)[0].value, 3.0);
  EXPECT_EQ((*health)[0].threshold, 0.0);
  EXPECT_EQ((*health)[0].suggested_action, "drain node03");

  // Operators query the same file with sqlite3: the names in docs/lineage.md.
  EXPECT_EQ(RawSql(db_path(), "SELECT json_extract(evidence, '$.ranks[0].phase') FROM event"),
            "backward");
}

TEST_F(LineageDbTest, GeneratedRunIdsHaveTheDocumentedShape) {
  EXPECT_TRUE(IsRunIdOf20270115(NewRunId(1'800'000'000'000)));
  auto db = OpenWriter();
  auto id = db->CreateRun(SampleRun(""));
  ASSERT_TRUE(id.ok());
  EXPECT_TRUE(IsRunIdOf20270115(*id)) << *id;
  auto dup = db->CreateRun(SampleRun(*id));
  EXPECT_EQ(dup.status().code(), StatusCode::kFailedPrecondition) << dup.status().ToString();
}

TEST_F(LineageDbTest, ReadOnlyOpenOfMissingFileIsNotFoundAndCreatesNothing) {
  auto db = OpenReader();
  ASSERT_EQ(db.status().code(), StatusCode::kNotFound);
  EXPECT_NE(db.status().message().find(db_path()), std::string::npos) << db.status().message();
  EXPECT_FALSE(Exists(db_path()));
  EXPECT_FALSE(Exists(db_path() + "-wal"));
  EXPECT_FALSE(Exists(db_path() + "-journal"));
}

// A RUN argument means one thing everywhere (common/run_spec.h).
TEST_F(LineageDbTest, FindRunTakesLatestAnIdOrAUniquePrefix) {
  auto db = OpenWriter();
  ASSERT_TRUE(db->CreateRun(SampleRun("r-20270115-aaaa")).ok());
  ASSERT_TRUE(db->CreateRun(SampleRun("r-20270115-aabb")).ok());
  const std::string newest = db->LatestRun()->run_id;
  EXPECT_EQ(db->FindRun("")->run_id, newest);
  EXPECT_EQ(db->FindRun("latest")->run_id, newest);
  EXPECT_EQ(db->FindRun("r-20270115-aab")->run_id, "r-20270115-aabb");
  EXPECT_EQ(db->FindRun("r-20270115-aaaa")->run_id, "r-20270115-aaaa");
  EXPECT_EQ(db->FindRun("r-20270115-aa").status().code(), StatusCode::kInvalidArgument) << "ambiguous";
  EXPECT_EQ(db->FindRun("r-1999").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(RunSpecNames("r-2027", "r-20270115-aaaa"));
  EXPECT_TRUE(RunSpecNames("latest", "r-20270115-aaaa"));
  EXPECT_FALSE(RunSpecNames("r-20270115-aaaa-longer", "r-20270115-aaaa"));
  EXPECT_FALSE(RunSpecNames("r-2026", "r-20270115-aaaa"));
}

TEST_F(LineageDbTest, ReaderSeesCommittedRowsWhileWriterHoldsTheFile) {
  auto writer = OpenWriter();
  ASSERT_TRUE(writer->CreateRun(SampleRun("r-20270115-aaaa")).ok());
  ASSERT_TRUE(writer->StartAttempt("r-20270115-aaaa", {}).ok());
  ASSERT_TRUE(writer->StartGeneration("r-20270115-aaaa", 1, 0).ok());
  EXPECT_EQ(RawSql(db_path(), "PRAGMA journal_mode"), "wal");

  auto reader = OpenReader();
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  auto latest = (*reader)->LatestRun();
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->run_id, "r-20270115-aaaa");

  // Later writes become visible to the already-open reader as they commit.
  ASSERT_TRUE(writer->UpdateGenerationStep("r-20270115-aaaa", 1, 0, 77).ok());
  EventRecord e;
  e.run_id = "r-20270115-aaaa";
  e.kind = event_kind::kCrash;
  e.summary = "rank 1 exited with SIGSEGV";
  ASSERT_TRUE(writer->RecordEvent(e).ok());
  auto incident = (*reader)->LastIncident("r-20270115-aaaa");
  ASSERT_TRUE(incident.ok());
  ASSERT_TRUE(incident->has_value());
  EXPECT_EQ((*incident)->summary, "rank 1 exited with SIGSEGV");
  EXPECT_EQ((*reader)->GetRun("r-20270115-aaaa")->last_step, 77);

  // The reader cannot write.
  auto w = (*reader)->RecordEvent(e);
  EXPECT_EQ(w.status().code(), StatusCode::kFailedPrecondition);
}

// On-call reading someone else's finished run: the folder is not writable, so
// SQLite cannot create the WAL index a reader normally needs.
TEST_F(LineageDbTest, ReaderOfAFolderItCannotWriteStillReads) {
  {
    auto writer = OpenWriter();
    ASSERT_TRUE(writer->CreateRun(SampleRun("r-20270115-bbbb")).ok());
  }
  ASSERT_FALSE(Exists(db_path() + "-shm"));  // the daemon's close cleaned up
  ASSERT_EQ(::chmod(db_path().c_str(), 0444), 0);
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0555), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Root may write anywhere: become nobody to see what an operator sees.
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(3);
    auto reader = OpenReader();
    if (!reader.ok()) {
      std::fprintf(stderr, "%s\n", reader.status().ToString().c_str());
      ::_exit(1);
    }
    auto run = (*reader)->LatestRun();
    ::_exit(run.ok() && run->run_id == "r-20270115-bbbb" ? 0 : 2);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ::chmod(dir_.path().c_str(), 0700);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_FALSE(Exists(db_path() + "-shm"));
}

TEST_F(LineageDbTest, DeleteJournalModeWorksAndLeavesNoWal) {
  {
    auto writer = OpenWriter(JournalMode::kDelete);
    ASSERT_TRUE(writer->CreateRun(SampleRun("r-20270115-dddd")).ok());
    auto reader = OpenReader();
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    EXPECT_EQ((*reader)->GetRun("r-20270115-dddd")->name, "gpt-small");
    EXPECT_FALSE(Exists(db_path() + "-wal"));
  }
  EXPECT_EQ(RawSql(db_path(), "PRAGMA journal_mode"), "delete");
  {
    auto writer = OpenWriter(JournalMode::kTruncate);
    EXPECT_TRUE(writer->EndRun("r-20270115-dddd", RunState::kStopped, "operator stop").ok());
  }
  auto reader = OpenReader();
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ((*reader)->GetRun("r-20270115-dddd")->state, RunState::kStopped);
}

TEST_F(LineageDbTest, GarbageFileIsCorruptionWithAWayOut) {
  {
    std::ofstream f(db_path(), std::ios::binary);
    for (int i = 0; i < 4096; ++i) f.put(static_cast<char>(i * 7 + 3));
  }
  for (bool read_only : {true, false}) {
    LineageOptions o;
    o.read_only = read_only;
    auto db = LineageDb::Open(db_path(), o);
    ASSERT_EQ(db.status().code(), StatusCode::kCorruption) << db.status().ToString();
    EXPECT_NE(db.status().message().find("mv " + db_path()), std::string::npos)
        << db.status().message();
  }
  // The file is left as it was, for inspection.
  struct stat st;
  ASSERT_EQ(::stat(db_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 4096);
}

TEST_F(LineageDbTest, NewerSchemaIsAClearError) {
  { auto db = OpenWriter(); }
  RawSql(db_path(), "PRAGMA user_version = 99");
  for (bool read_only : {true, false}) {
    LineageOptions o;
    o.read_only = read_only;
    auto db = LineageDb::Open(db_path(), o);
    ASSERT_EQ(db.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(db.status().message().find("version 99"), std::string::npos) << db.status().message();
  }
}

TEST_F(LineageDbTest, RefusesAnotherApplicationsDatabase) {
  RawSql(db_path(), "CREATE TABLE accounts (id INTEGER)");
  auto db = LineageDb::Open(db_path());
  EXPECT_EQ(db.status().code(), StatusCode::kFailedPrecondition) << db.status().ToString();
  EXPECT_EQ(RawSql(db_path(), "SELECT count(*) FROM sqlite_master"), "1");
}

// A version-1 file as the first release wrote it, built here with plain SQLite.
void WriteV1File(const std::string& path) {
  RawSql(path, R"sql(
    CREATE TABLE run (run_id TEXT PRIMARY KEY, name TEXT NOT NULL, owner_uid INTEGER NOT NULL,
      run_dir TEXT NOT NULL, config_path TEXT NOT NULL, config_hash TEXT NOT NULL,
      config_text TEXT NOT NULL, world_size INTEGER NOT NULL, nodes TEXT NOT NULL DEFAULT '',
      scheduler TEXT NOT NULL CHECK (scheduler IN ('local', 'slurm')),
      slurm_job_id TEXT NOT NULL DEFAULT '', created_ms INTEGER NOT NULL, ended_ms INTEGER,
      state TEXT NOT NULL CHECK (state IN ('running','succeeded','failed','stopped','preempted')),
      cause TEXT NOT NULL DEFAULT '');
    CREATE TABLE attempt (run_id TEXT NOT NULL REFERENCES run(run_id), attempt INTEGER NOT NULL,
      parent_attempt INTEGER, slurm_job_id TEXT NOT NULL DEFAULT '',
      restart_count INTEGER NOT NULL DEFAULT 0, nodes TEXT NOT NULL DEFAULT '',
      started_ms INTEGER NOT NULL, ended_ms INTEGER,
      state TEXT NOT NULL CHECK (state IN ('running','succeeded','failed','stopped','preempted')),
      cause TEXT NOT NULL DEFAULT '', resumed_from_step INTEGER, PRIMARY KEY (run_id, attempt));
    CREATE TABLE generation (run_id TEXT NOT NULL, attempt INTEGER NOT NULL,
      generation INTEGER NOT NULL, started_ms INTEGER NOT NULL, ended_ms INTEGER,
      start_step INTEGER NOT NULL DEFAULT 0, last_step INTEGER,
      state TEXT NOT NULL CHECK (state IN ('running','succeeded','failed','stopped','preempted')),
      cause TEXT NOT NULL DEFAULT '', PRIMARY KEY (run_id, attempt, generation),
      FOREIGN KEY (run_id, attempt) REFERENCES attempt(run_id, attempt));
    CREATE TABLE checkpoint (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL REFERENCES run(run_id),
      step INTEGER NOT NULL, path TEXT NOT NULL, bytes INTEGER NOT NULL,
      world_size INTEGER NOT NULL, attempt INTEGER, generation INTEGER,
      committed_ms INTEGER NOT NULL,
      state TEXT NOT NULL CHECK (state IN ('committed', 'corrupt', 'pruned')),
      reason TEXT NOT NULL DEFAULT '', state_ms INTEGER);
    CREATE INDEX checkpoint_by_run ON checkpoint(run_id, step);
    CREATE TABLE event (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL REFERENCES run(run_id),
      time_ms INTEGER NOT NULL, kind TEXT NOT NULL, attempt INTEGER, generation INTEGER,
      node TEXT NOT NULL DEFAULT '', rank INTEGER, summary TEXT NOT NULL,
      evidence TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(evidence)),
      action TEXT NOT NULL DEFAULT '', runbook TEXT NOT NULL DEFAULT '');
    CREATE INDEX event_by_run ON event(run_id, time_ms);
    CREATE TABLE health_result (id INTEGER PRIMARY KEY, run_id TEXT REFERENCES run(run_id),
      time_ms INTEGER NOT NULL, node TEXT NOT NULL, check_name TEXT NOT NULL,
      status TEXT NOT NULL CHECK (status IN ('pass', 'warn', 'fail', 'skipped')), value REAL,
      threshold REAL, unit TEXT NOT NULL DEFAULT '', source TEXT NOT NULL DEFAULT '',
      evidence TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(evidence)),
      suggested_action TEXT NOT NULL DEFAULT '');
    CREATE INDEX health_by_run ON health_result(run_id, time_ms);
    CREATE INDEX health_by_node ON health_result(node, time_ms);

    INSERT INTO run VALUES ('r-20260101-0001', 'old', 1000, '/runs/old', '/runs/old/job.toml',
      'ab12', 'x = 1', 8, 'n1', 'local', '', 1000, NULL, 'running', '');
    INSERT INTO attempt VALUES ('r-20260101-0001', 1, NULL, '', 0, 'n1', 1000, NULL, 'running',
      '', NULL);
    INSERT INTO generation VALUES ('r-20260101-0001', 1, 0, 1000, NULL, 0, 500, 'running', '');
    INSERT INTO event (run_id, time_ms, kind, summary) VALUES
      ('r-20260101-0001', 2000, 'crash', 'rank 2 exited with status 1'),
      ('r-20260101-0001', 3000, 'restart', 'restarted generation 1 from step 400');
    PRAGMA user_version = 1;
  )sql");
}

TEST_F(LineageDbTest, MigratesAVersion1File) {
  WriteV1File(db_path());

  // A reader never writes the file: it reads a migrated copy.
  {
    auto reader = OpenReader();
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    EXPECT_EQ((*reader)->file_schema_version(), 1);
    auto incident = (*reader)->LastIncident("r-20260101-0001");
    ASSERT_TRUE(incident.ok()) << incident.status().ToString();
    ASSERT_TRUE(incident->has_value());
    EXPECT_EQ((*incident)->kind, "crash");
    EXPECT_EQ((*reader)->GetRun("r-20260101-0001")->last_step, 500);
  }
  EXPECT_EQ(RawSql(db_path(), "PRAGMA user_version"), "1");

  auto db = OpenWriter();
  EXPECT_EQ(db->file_schema_version(), 1);
  EXPECT_EQ(RawSql(db_path(), "PRAGMA user_version"), std::to_string(LineageDb::kSchemaVersion));
  auto incident = db->LastIncident("r-20260101-0001");
  ASSERT_TRUE(incident.ok() && incident->has_value());
  EXPECT_EQ((*incident)->summary, "rank 2 exited with status 1");  // not the later restart
  now_ms_ = 4000;
  ASSERT_TRUE(db->UpdateGenerationStep("r-20260101-0001", 1, 0, 510).ok());
  auto gens = db->Generations("r-20260101-0001");
  ASSERT_TRUE(gens.ok());
  EXPECT_EQ((*gens)[0].last_step_ms, 4000);
  // The old rows carry on: a requeue continues attempt 1.
  auto a2 = db->StartAttempt("r-20260101-0001", {});
  ASSERT_TRUE(a2.ok());
  EXPECT_EQ(*a2, 2);
}

// A version-2 file: version 1 plus the released version-2 migration, with
// rows whose times are not in rowid order (and one tie).
void WriteV2File(const std::string& path) {
  WriteV1File(path);
  RawSql(path, R"sql(
    ALTER TABLE generation ADD COLUMN last_step_ms INTEGER;
    ALTER TABLE event ADD COLUMN incident INTEGER NOT NULL DEFAULT 0;
    UPDATE event SET incident = 1 WHERE kind IN ('crash','hang');
    CREATE INDEX event_incident ON event(run_id, incident, time_ms);
    UPDATE generation SET ended_ms = 2500, state = 'failed', cause = 'rank 2 crashed';
    INSERT INTO generation VALUES ('r-20260101-0001', 1, 1, 3000, NULL, 400, NULL, 'running', '',
      NULL);
    INSERT INTO checkpoint (run_id, step, path, bytes, world_size, committed_ms, state) VALUES
      ('r-20260101-0001', 400, '/runs/old/ckpt/step-400', 10, 8, 1500, 'committed');
    INSERT INTO event (run_id, time_ms, kind, summary, incident) VALUES
      ('r-20260101-0001', 1800, 'hang', 'written late, happened early', 1),
      ('r-20260101-0001', 3000, 'stop', 'a tie with generation 1 and the restart', 0);
    PRAGMA user_version = 2;
  )sql");
}

std::vector<std::string> Summaries(const std::vector<EventRecord>& events) {
  std::vector<std::string> out;
  for (const EventRecord& e : events) out.push_back(e.summary);
  return out;
}

TEST_F(LineageDbTest, MigratesAVersion2FileNumberingOldRowsInTimeOrder) {
  WriteV2File(db_path());
  const std::string id = "r-20260101-0001";
  const std::vector<std::string> in_time_order = {
      "written late, happened early", "rank 2 exited with status 1",
      "restarted generation 1 from step 400", "a tie with generation 1 and the restart"};

  // A reader of the old file works on a migrated copy and leaves the file be.
  {
    auto reader = OpenReader();
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    EXPECT_EQ((*reader)->file_schema_version(), 2);
    auto events = (*reader)->Events(id, 0);
    ASSERT_TRUE(events.ok()) << events.status().ToString();
    EXPECT_EQ(Summaries(*events), in_time_order);
  }
  EXPECT_EQ(RawSql(db_path(), "PRAGMA user_version"), "2");

  auto db = OpenWriter();
  EXPECT_EQ(db->file_schema_version(), 2);
  EXPECT_EQ(RawSql(db_path(), "PRAGMA user_version"), std::to_string(LineageDb::kSchemaVersion));
  EXPECT_EQ(Summaries(*db->Events(id, 0)), in_time_order);
  // Every old moment got its place: attempt 1 (t=1000), generation 0 (1000),
  // checkpoint 400 (1500), hang (1800), crash (2000), generation 0's end
  // (2500), generation 1 (3000), restart (3000, id order), stop (3000).
  auto attempts = *db->Attempts(id);
  auto gens = *db->Generations(id);
  auto ckpts = *db->Checkpoints(id);
  auto events = *db->Events(id, 0);
  ASSERT_EQ(gens.size(), 2u);
  EXPECT_EQ(attempts[0].seq, 1);
  EXPECT_EQ(attempts[0].ended_seq, std::nullopt);
  EXPECT_EQ(gens[0].seq, 2);
  EXPECT_EQ(ckpts[0].seq, 3);
  EXPECT_EQ(events[0].seq, 4);
  EXPECT_EQ(events[1].seq, 5);
  EXPECT_EQ(gens[0].ended_seq, 6);
  EXPECT_EQ(gens[1].seq, 7);
  EXPECT_EQ(events[2].seq, 8);
  EXPECT_EQ(events[3].seq, 9);
  // The incident written last is the hang, but the crash happened last.
  EXPECT_EQ((*db->LastIncident(id))->summary, "rank 2 exited with status 1");

  // New writes follow the old rows, whatever the clock says.
  now_ms_ = 10;
  EventRecord e;
  e.run_id = id;
  e.kind = event_kind::kNodeLost;
  e.summary = "written after the migration";
  ASSERT_TRUE(db->RecordEvent(e).ok());
  events = *db->Events(id, 0);
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events.back().summary, "written after the migration");
  EXPECT_EQ(events.back().seq, 10);
  EXPECT_EQ((*db->LastIncident(id))->summary, "written after the migration");
}

// Version 6 had no attempt.gpus: its attempts read back with the GPUs unknown.
TEST_F(LineageDbTest, MigratesAVersion6FileWithTheGpusUnknown) {
  {
    auto db = OpenWriter();
    const std::string id = *db->CreateRun(SampleRun("r-6"));
    AttemptStart as;
    as.gpus = 8;
    ASSERT_EQ(*db->StartAttempt(id, as), 1);
  }
  RawSql(db_path(),
         "ALTER TABLE attempt DROP COLUMN gpus; ALTER TABLE generation DROP COLUMN restore_tier; ALTER TABLE generation DROP COLUMN mesh; "
         "PRAGMA user_version = 6");
  {
    auto reader = OpenReader();
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    EXPECT_EQ((*reader)->file_schema_version(), 6);
    auto attempts = (*reader)->Attempts("r-6");
    ASSERT_TRUE(attempts.ok()) << attempts.status().ToString();
    ASSERT_EQ(attempts->size(), 1u);
    EXPECT_EQ((*attempts)[0].gpus, std::nullopt);
  }
  EXPECT_EQ(RawSql(db_path(), "PRAGMA user_version"), "6");
  auto db = OpenWriter();
  EXPECT_EQ(RawSql(db_path(), "PRAGMA user_version"), std::to_string(LineageDb::kSchemaVersion));
  AttemptStart as;
  as.gpus = 0;
  ASSERT_EQ(*db->StartAttempt("r-6", as), 2);
  auto attempts = *db->Attempts("r-6");
  EXPECT_EQ(attempts[0].gpus, std::nullopt);
  EXPECT_EQ(attempts[1].gpus, 0);
}

TEST_F(LineageDbTest, MigratesAVersion7FileWithTheRestoreTierUnreported) {
  {
    auto db = OpenWriter();
    const std::string id = *db->CreateRun(SampleRun("r-7"));
    ASSERT_TRUE(db->StartAttempt(id, {}).ok());
    ASSERT_TRUE(db->StartGeneration(id, 1, 25).ok());
  }
  RawSql(db_path(),
         "ALTER TABLE generation DROP COLUMN restore_tier; ALTER TABLE generation DROP COLUMN mesh; "
         "PRAGMA user_version = 7");
  auto db = OpenWriter();
  EXPECT_EQ(RawSql(db_path(), "PRAGMA user_version"), std::to_string(LineageDb::kSchemaVersion));
  auto gens = *db->Generations("r-7");
  ASSERT_EQ(gens.size(), 1u);
  EXPECT_EQ(gens[0].start_step, 25);
  EXPECT_EQ(gens[0].restore_tier, "");
}

// The step holdfastd expected is replaced by the one the ranks restored, with
// its tier; a tier lineage does not know, a negative step or a generation
// that is not there are refused and change nothing.
TEST_F(LineageDbTest, AGenerationsRestoreReplacesTheExpectedStartStep) {
  auto db = OpenWriter();
  const std::string id = *db->CreateRun(SampleRun("r-restore"));
  ASSERT_TRUE(db->StartAttempt(id, {}).ok());
  ASSERT_TRUE(db->StartGeneration(id, 1, 14).ok());  // expected: the memory snapshot of step 14
  EXPECT_EQ((*db->Generations(id))[0].restore_tier, "");
  ASSERT_TRUE(db->SetGenerationRestore(id, 1, 0, 10, "disk").ok());  // the ranks passed it over
  EXPECT_EQ(db->SetGenerationRestore(id, 1, 0, 12, "tape").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(db->SetGenerationRestore(id, 1, 0, -1, "memory").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(db->SetGenerationRestore(id, 1, 5, 12, "memory").code(), StatusCode::kNotFound);
  EXPECT_EQ(RawSql(db_path(), "SELECT count(*) FROM generation WHERE restore_tier NOT IN ('disk')"), "0");
  ASSERT_TRUE(db->EndGeneration(id, 1, 0, RunState::kFailed, "rank 0 crashed").ok());
  auto gens = *db->Generations(id);
  ASSERT_EQ(gens.size(), 1u);
  EXPECT_EQ(gens[0].start_step, 10);
  EXPECT_EQ(gens[0].restore_tier, "disk");
  EXPECT_EQ(gens[0].last_step, 10);  // it ended before a step: where it really started
  EXPECT_EQ(gens[0].mesh, "");        // data parallelism: no mesh
}

// A model-parallel generation's mesh is kept with its restore; text that is
// not a layout is refused and changes nothing.
TEST_F(LineageDbTest, AGenerationKeepsTheMeshItsRanksReported) {
  auto db = OpenWriter();
  const std::string id = *db->CreateRun(SampleRun("r-mesh"));
  ASSERT_TRUE(db->StartAttempt(id, {}).ok());
  ASSERT_TRUE(db->StartGeneration(id, 1, 0).ok());
  EXPECT_EQ(db->SetGenerationRestore(id, 1, 0, 0, "none", "tp=2; DROP TABLE run").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*db->Generations(id))[0].restore_tier, "");
  ASSERT_TRUE(db->SetGenerationRestore(id, 1, 0, 0, "none", "tp=2,pp=2,dp=2").ok());
  EXPECT_EQ((*db->Generations(id))[0].mesh, "tp=2,pp=2,dp=2");
  EXPECT_EQ(RawSql(db_path(), "SELECT mesh FROM generation"), "tp=2,pp=2,dp=2");
}

TEST_F(LineageDbTest, AClockThatStepsBackDoesNotReorderTheRecord) {
  auto db = OpenWriter();
  const std::string id = *db->CreateRun(SampleRun("r-clock"));
  ASSERT_TRUE(db->StartAttempt(id, {}).ok());
  ASSERT_TRUE(db->StartGeneration(id, 1, 0).ok());
  EventRecord crash;
  crash.run_id = id;
  crash.kind = event_kind::kCrash;
  crash.summary = "first: rank 0 crashed";
  ASSERT_TRUE(db->RecordEvent(crash).ok());
  ASSERT_TRUE(db->EndGeneration(id, 1, 0, RunState::kFailed, "rank 0 crashed").ok());

  now_ms_ -= 3'600'000;  // NTP steps the clock back an hour
  ASSERT_TRUE(db->StartGeneration(id, 1, 0).ok());
  EventRecord hang = crash;
  hang.kind = event_kind::kHang;
  hang.summary = "second: rank 1 hung";
  ASSERT_TRUE(db->RecordEvent(hang).ok());
  ASSERT_TRUE(db->EndRun(id, RunState::kFailed, "restart budget exhausted").ok());

  auto events = *db->Events(id, 0);
  EXPECT_EQ(Summaries(events),
            (std::vector<std::string>{"first: rank 0 crashed", "second: rank 1 hung"}));
  EXPECT_EQ(Summaries(*db->Events(id, 1)), (std::vector<std::string>{"second: rank 1 hung"}));
  EXPECT_EQ((*db->LastIncident(id))->summary, "second: rank 1 hung");

  auto gens = *db->Generations(id);
  auto attempts = *db->Attempts(id);
  ASSERT_EQ(gens.size(), 2u);
  // attempt < gen 0 < crash < gen 0 ends < gen 1 < hang < gen 1 ends < attempt ends
  EXPECT_LT(attempts[0].seq, gens[0].seq);
  EXPECT_LT(gens[0].seq, events[0].seq);
  EXPECT_LT(events[0].seq, *gens[0].ended_seq);
  EXPECT_LT(*gens[0].ended_seq, gens[1].seq);
  EXPECT_LT(gens[1].seq, events[1].seq);
  EXPECT_LT(events[1].seq, *gens[1].ended_seq);
  EXPECT_LT(*gens[1].ended_seq, *attempts[0].ended_seq);
  EXPECT_LT(gens[1].started_ms, gens[0].ended_ms);  // the clock did step back
}

TEST_F(LineageDbTest, AGenerationThatEndsBeforeItsFirstStepEndsAtItsStartStep) {
  auto db = OpenWriter();
  const std::string id = *db->CreateRun(SampleRun("r-nostep"));
  ASSERT_TRUE(db->StartAttempt(id, {}).ok());
  ASSERT_TRUE(db->StartGeneration(id, 1, 6000).ok());  // resumed from step 6000, then died
  ASSERT_TRUE(db->EndGeneration(id, 1, 0, RunState::kFailed, "rank 1 crashed").ok());
  ASSERT_TRUE(db->StartGeneration(id, 1, 6000).ok());
  ASSERT_TRUE(db->UpdateGenerationStep(id, 1, 1, 6010).ok());
  ASSERT_TRUE(db->EndGeneration(id, 1, 1, RunState::kFailed, "rank 0 crashed").ok());
  ASSERT_TRUE(db->StartGeneration(id, 1, 6000).ok());
  ASSERT_TRUE(db->EndRun(id, RunState::kStopped, "runctl stop").ok());  // ends generation 2 too

  auto gens = *db->Generations(id);
  ASSERT_EQ(gens.size(), 3u);
  EXPECT_EQ(gens[0].last_step, 6000);  // not unset, and never "step 0"
  EXPECT_EQ(gens[1].last_step, 6010);  // a reported step stands
  EXPECT_EQ(gens[2].last_step, 6000);
  EXPECT_EQ(db->GetRun(id)->last_step, 6010);
}

TEST_F(LineageDbTest, GetRunByPrefix) {
  auto db = OpenWriter();
  ASSERT_TRUE(db->CreateRun(SampleRun("r-20270115-1a2b")).ok());
  now_ms_ += 1;
  ASSERT_TRUE(db->CreateRun(SampleRun("r-20270115-1a3c")).ok());
  now_ms_ += 1;
  ASSERT_TRUE(db->CreateRun(SampleRun("r-20270116-ffff")).ok());

  auto one = db->GetRun("r-20270115-1a2");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->run_id, "r-20270115-1a2b");

  auto ambiguous = db->GetRun("r-20270115-1a");
  ASSERT_EQ(ambiguous.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ambiguous.status().message().find("r-20270115-1a2b"), std::string::npos);
  EXPECT_NE(ambiguous.status().message().find("r-20270115-1a3c"), std::string::npos);
  EXPECT_EQ(ambiguous.status().message().find("r-20270116"), std::string::npos);

  EXPECT_EQ(db->GetRun("r-2099").status().code(), StatusCode::kNotFound);
  auto latest = db->LatestRun();
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->run_id, "r-20270116-ffff");
  auto runs = db->ListRuns(2);
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->size(), 2u);
  EXPECT_EQ((*runs)[1].run_id, "r-20270115-1a3c");
}

TEST_F(LineageDbTest, CorruptCheckpointIsSkippedForResume) {
  auto db = OpenWriter();
  const std::string id = *db->CreateRun(SampleRun("r-1"));
  EXPECT_FALSE(db->NewestCommittedCheckpoint(id)->has_value());
  for (int64_t step : {100, 200, 300}) {
    CheckpointRecord c;
    c.run_id = id;
    c.step = step;
    c.path = "ckpt/step-" + std::to_string(step);
    ASSERT_TRUE(db->RecordCheckpoint(c).ok());
    ASSERT_TRUE(db->RecordCheckpoint(c).ok());  // re-reported: no second row
  }
  ASSERT_TRUE(db->MarkCheckpoint(id, 300, CheckpointState::kCorrupt,
                                 "shard 3: xxh3 mismatch").ok());
  ASSERT_TRUE(db->MarkCheckpoint(id, 100, CheckpointState::kPruned, "keep_last=2").ok());
  EXPECT_EQ(db->MarkCheckpoint(id, 999, CheckpointState::kPruned, "").code(),
            StatusCode::kNotFound);

  auto newest = db->NewestCommittedCheckpoint(id);
  ASSERT_TRUE(newest.ok() && newest->has_value());
  EXPECT_EQ((*newest)->step, 200);
  auto all = db->Checkpoints(id);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[2].state, CheckpointState::kCorrupt);
  EXPECT_EQ((*all)[2].reason, "shard 3: xxh3 mismatch");
  EXPECT_EQ((*all)[0].state, CheckpointState::kPruned);
}

// Schema 6: a checkpoint the job owns keeps its owner, path and size; rows
// written without one are the trainer's.
TEST_F(LineageDbTest, ACheckpointRemembersWhoOwnsItsFiles) {
  auto db = OpenWriter();
  const std::string id = *db->CreateRun(SampleRun("r-3"));
  CheckpointRecord trainer;
  trainer.run_id = id;
  trainer.step = 10;
  trainer.path = "/ck/step-000000000010";
  ASSERT_TRUE(db->RecordCheckpoint(trainer).ok());
  CheckpointRecord job = trainer;
  job.step = 20;
  job.path = "/out/ckpt-00000020.pt";
  job.bytes = 1234567;
  job.owner = CheckpointOwner::kJob;
  ASSERT_TRUE(db->RecordCheckpoint(job).ok());
  ASSERT_TRUE(db->MarkCheckpoint(id, 20, CheckpointState::kFenced, "resumed from 10").ok());
  auto all = db->Checkpoints(id);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].owner, CheckpointOwner::kTrainer);
  EXPECT_EQ((*all)[1].owner, CheckpointOwner::kJob);
  EXPECT_EQ((*all)[1].path, "/out/ckpt-00000020.pt");
  EXPECT_EQ((*all)[1].bytes, 1234567);
  EXPECT_EQ((*all)[1].state, CheckpointState::kFenced);
  EXPECT_STREQ(CheckpointOwnerName(CheckpointOwner::kJob), "job");
}

TEST_F(LineageDbTest, NewAttemptLinksToTheOldAndClosesWhatWasLeftRunning) {
  auto db = OpenWriter();
  const std::string id = *db->CreateRun(SampleRun("r-2"));
  ASSERT_EQ(*db->StartAttempt(id, {}), 1);
  ASSERT_EQ(*db->StartGeneration(id, 1, 0), 0);
  EXPECT_EQ(db->StartGeneration(id, 1, 0).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(db->EndRun(id, RunState::kPreempted, "Slurm time limit; requeued").ok());

  AttemptStart as;
  as.restart_count = 1;
  as.resumed_from_step = 1200;
  as.gpus = 16;
  ASSERT_EQ(*db->StartAttempt(id, as), 2);
  ASSERT_EQ(*db->StartGeneration(id, 2, 1200), 0);
  // The daemon of attempt 2 is killed without a word; attempt 3 finds it running.
  ASSERT_EQ(*db->StartAttempt(id, {}), 3);

  auto run = db->GetRun(id);
  EXPECT_EQ(run->state, RunState::kRunning);
  EXPECT_EQ(run->ended_ms, std::nullopt);
  auto attempts = *db->Attempts(id);
  ASSERT_EQ(attempts.size(), 3u);
  EXPECT_EQ(attempts[0].state, RunState::kPreempted);
  EXPECT_EQ(attempts[1].parent_attempt, 1);
  EXPECT_EQ(attempts[1].restart_count, 1);
  EXPECT_EQ(attempts[1].resumed_from_step, 1200);
  EXPECT_EQ(attempts[0].gpus, std::nullopt);
  EXPECT_EQ(attempts[1].gpus, 16);
  EXPECT_EQ(attempts[1].state, RunState::kFailed);
  EXPECT_NE(attempts[1].cause.find("superseded by attempt 3"), std::string::npos);
  EXPECT_EQ(attempts[2].parent_attempt, 2);
  auto gens = *db->Generations(id);
  ASSERT_EQ(gens.size(), 2u);
  EXPECT_EQ(gens[1].state, RunState::kFailed);

  ASSERT_TRUE(db->EndAttempt(id, 3, RunState::kStopped, "runctl stop").ok());
  EXPECT_EQ(db->EndAttempt(id, 9, RunState::kStopped, "").code(), StatusCode::kNotFound);
  EXPECT_EQ(db->StartGeneration(id, 3, 0).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(db->StartAttempt("r-nope", {}).status().code(), StatusCode::kNotFound);
}

TEST_F(LineageDbTest, EventsAndHealthResultsAreFilteredAndLimited) {
  auto db = OpenWriter();
  const std::string id = *db->CreateRun(SampleRun("r-3"));
  for (int i = 0; i < 5; ++i) {
    EventRecord e;
    e.run_id = id;
    e.time_ms = 1000 + i;
    e.kind = i == 1 ? event_kind::kNodeLost : event_kind::kRestart;
    e.summary = "event " + std::to_string(i);
    ASSERT_TRUE(db->RecordEvent(e).ok());
  }
  auto events = *db->Events(id, 2);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].summary, "event 3");  // the newest two, oldest first
  EXPECT_EQ(events[1].summary, "event 4");
  EXPECT_EQ(db->Events(id, 0)->size(), 5u);
  EXPECT_EQ((*db->LastIncident(id))->summary, "event 1");

  EventRecord bad;
  bad.run_id = id;
  bad.kind = event_kind::kCrash;
  bad.summary = "x";
  bad.evidence_json = "{not json";
  EXPECT_FALSE(db->RecordEvent(bad).ok());
  bad.evidence_json = "";
  bad.run_id = "r-unknown";
  EXPECT_EQ(db->RecordEvent(bad).status().code(), StatusCode::kNotFound);

  for (const char* node : {"n1", "n2", "n1"}) {
    HealthResultRecord h;
    h.run_id = node == std::string("n2") ? "" : id;
    h.node = node;
    h.check = "disk_free";
    h.status = HealthStatus::kWarn;
    ASSERT_TRUE(db->RecordHealthResult(h).ok());
  }
  EXPECT_EQ(db->HealthResults({"", "n1", 0})->size(), 2u);
  EXPECT_EQ(db->HealthResults({"", "n1", 1})->size(), 1u);
  EXPECT_EQ(db->HealthResults({id, "", 0})->size(), 2u);
  auto n2 = *db->HealthResults({"", "n2", 0});
  ASSERT_EQ(n2.size(), 1u);
  EXPECT_EQ(n2[0].run_id, "");
  EXPECT_EQ(n2[0].value, std::nullopt);
}

}  // namespace
}  // namespace holdfast
