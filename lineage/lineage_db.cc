#include "lineage/lineage_db.h"

#include "common/run_spec.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>
#include <utility>

#include <nlohmann/json.hpp>

namespace holdfast {
namespace {

// The incident kinds of schema version 2, frozen with its migration (the
// incident column of newer rows comes from kEventKinds, lineage/event_kind.h).
constexpr const char* kIncidentKinds[] = {
    event_kind::kCrash,           event_kind::kHang,
    event_kind::kHealth,          event_kind::kPreempt,
    event_kind::kNodeLost,        event_kind::kCheckpointFailed,
    event_kind::kCheckpointCorrupt, event_kind::kBudgetExhausted,
    event_kind::kDaemonRestart,
};

// Schema version 1, as first released. Never edit a released migration: add
// the next one.
constexpr const char kSchemaV1[] = R"sql(
CREATE TABLE run (
  run_id       TEXT PRIMARY KEY,
  name         TEXT NOT NULL,
  owner_uid    INTEGER NOT NULL,
  run_dir      TEXT NOT NULL,
  config_path  TEXT NOT NULL,
  config_hash  TEXT NOT NULL,
  config_text  TEXT NOT NULL,
  world_size   INTEGER NOT NULL,
  nodes        TEXT NOT NULL DEFAULT '',
  scheduler    TEXT NOT NULL CHECK (scheduler IN ('local', 'slurm')),
  slurm_job_id TEXT NOT NULL DEFAULT '',
  created_ms   INTEGER NOT NULL,
  ended_ms     INTEGER,
  state        TEXT NOT NULL
               CHECK (state IN ('running','succeeded','failed','stopped','preempted')),
  cause        TEXT NOT NULL DEFAULT ''
);
CREATE TABLE attempt (
  run_id            TEXT NOT NULL REFERENCES run(run_id),
  attempt           INTEGER NOT NULL,
  parent_attempt    INTEGER,
  slurm_job_id      TEXT NOT NULL DEFAULT '',
  restart_count     INTEGER NOT NULL DEFAULT 0,
  nodes             TEXT NOT NULL DEFAULT '',
  started_ms        INTEGER NOT NULL,
  ended_ms          INTEGER,
  state             TEXT NOT NULL
                    CHECK (state IN ('running','succeeded','failed','stopped','preempted')),
  cause             TEXT NOT NULL DEFAULT '',
  resumed_from_step INTEGER,
  PRIMARY KEY (run_id, attempt)
);
CREATE TABLE generation (
  run_id     TEXT NOT NULL,
  attempt    INTEGER NOT NULL,
  generation INTEGER NOT NULL,
  started_ms INTEGER NOT NULL,
  ended_ms   INTEGER,
  start_step INTEGER NOT NULL DEFAULT 0,
  last_step  INTEGER,
  state      TEXT NOT NULL CHECK (state IN ('running','succeeded','failed','stopped','preempted')),
  cause      TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (run_id, attempt, generation),
  FOREIGN KEY (run_id, attempt) REFERENCES attempt(run_id, attempt)
);
CREATE TABLE checkpoint (
  id           INTEGER PRIMARY KEY,
  run_id       TEXT NOT NULL REFERENCES run(run_id),
  step         INTEGER NOT NULL,
  path         TEXT NOT NULL,
  bytes        INTEGER NOT NULL,
  world_size   INTEGER NOT NULL,
  attempt      INTEGER,
  generation   INTEGER,
  committed_ms INTEGER NOT NULL,
  state        TEXT NOT NULL CHECK (state IN ('committed', 'corrupt', 'pruned')),
  reason       TEXT NOT NULL DEFAULT '',
  state_ms     INTEGER
);
CREATE INDEX checkpoint_by_run ON checkpoint(run_id, step);
CREATE TABLE event (
  id         INTEGER PRIMARY KEY,
  run_id     TEXT NOT NULL REFERENCES run(run_id),
  time_ms    INTEGER NOT NULL,
  kind       TEXT NOT NULL,
  attempt    INTEGER,
  generation INTEGER,
  node       TEXT NOT NULL DEFAULT '',
  rank       INTEGER,
  summary    TEXT NOT NULL,
  evidence   TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(evidence)),
  action     TEXT NOT NULL DEFAULT '',
  runbook    TEXT NOT NULL DEFAULT ''
);
CREATE INDEX event_by_run ON event(run_id, time_ms);
CREATE TABLE health_result (
  id               INTEGER PRIMARY KEY,
  run_id           TEXT REFERENCES run(run_id),
  time_ms          INTEGER NOT NULL,
  node             TEXT NOT NULL,
  check_name       TEXT NOT NULL,
  status           TEXT NOT NULL CHECK (status IN ('pass', 'warn', 'fail', 'skipped')),
  value            REAL,
  threshold        REAL,
  unit             TEXT NOT NULL DEFAULT '',
  source           TEXT NOT NULL DEFAULT '',
  evidence         TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(evidence)),
  suggested_action TEXT NOT NULL DEFAULT ''
);
CREATE INDEX health_by_run ON health_result(run_id, time_ms);
CREATE INDEX health_by_node ON health_result(node, time_ms);
)sql";

// Version 2: when the last step was seen (how long a generation has been
// silent), and an `incident` flag on events so LastIncident and operators'
// queries need no list of kinds.
std::string SchemaV2() {
  std::string kinds;
  for (const char* k : kIncidentKinds) kinds += std::string(kinds.empty() ? "'" : ",'") + k + "'";
  return "ALTER TABLE generation ADD COLUMN last_step_ms INTEGER;\n"
         "ALTER TABLE event ADD COLUMN incident INTEGER NOT NULL DEFAULT 0;\n"
         "UPDATE event SET incident = 1 WHERE kind IN (" + kinds + ");\n"
         "CREATE INDEX event_incident ON event(run_id, incident, time_ms);\n";
}

// Version 3: write order. One counter per file (`lineage_seq`, one row) numbers
// every start, end and marking of an attempt, generation, checkpoint and event,
// so that readers order by what happened first rather than by a wall clock that
// may have stepped. Rows of an older file are numbered in the order the
// timeline showed them: by time, at equal times starts before checkpoints
// before events before ends, then by rowid.
constexpr const char kSchemaV3[] = R"sql(
ALTER TABLE attempt ADD COLUMN seq INTEGER;
ALTER TABLE attempt ADD COLUMN ended_seq INTEGER;
ALTER TABLE generation ADD COLUMN seq INTEGER;
ALTER TABLE generation ADD COLUMN ended_seq INTEGER;
ALTER TABLE checkpoint ADD COLUMN seq INTEGER;
ALTER TABLE checkpoint ADD COLUMN state_seq INTEGER;
ALTER TABLE event ADD COLUMN seq INTEGER;
CREATE TABLE lineage_seq (
  one  INTEGER PRIMARY KEY CHECK (one = 1),
  last INTEGER NOT NULL
);
CREATE TEMP TABLE v3_moment AS
  SELECT what, rid, row_number() OVER (ORDER BY t, ord, rid) AS n FROM (
    SELECT 'a' AS what, rowid AS rid, started_ms AS t, 0 AS ord FROM attempt
    UNION ALL SELECT 'g', rowid, started_ms, 1 FROM generation
    UNION ALL SELECT 'c', rowid, committed_ms, 2 FROM checkpoint
    UNION ALL SELECT 'cm', rowid, coalesce(state_ms, committed_ms), 2 FROM checkpoint
      WHERE state <> 'committed'
    UNION ALL SELECT 'e', rowid, time_ms, 3 FROM event
    UNION ALL SELECT 'ge', rowid, ended_ms, 4 FROM generation WHERE ended_ms IS NOT NULL
    UNION ALL SELECT 'ae', rowid, ended_ms, 5 FROM attempt WHERE ended_ms IS NOT NULL);
CREATE INDEX temp.v3_moment_by_row ON v3_moment(what, rid);
UPDATE attempt SET
  seq = (SELECT n FROM v3_moment WHERE what = 'a' AND rid = attempt.rowid),
  ended_seq = (SELECT n FROM v3_moment WHERE what = 'ae' AND rid = attempt.rowid);
UPDATE generation SET
  seq = (SELECT n FROM v3_moment WHERE what = 'g' AND rid = generation.rowid),
  ended_seq = (SELECT n FROM v3_moment WHERE what = 'ge' AND rid = generation.rowid);
UPDATE checkpoint SET
  seq = (SELECT n FROM v3_moment WHERE what = 'c' AND rid = checkpoint.rowid),
  state_seq = (SELECT n FROM v3_moment WHERE what = 'cm' AND rid = checkpoint.rowid);
UPDATE event SET seq = (SELECT n FROM v3_moment WHERE what = 'e' AND rid = event.rowid);
INSERT INTO lineage_seq (one, last) VALUES (1, (SELECT coalesce(max(n), 0) FROM v3_moment));
DROP TABLE temp.v3_moment;
CREATE INDEX event_by_seq ON event(run_id, seq);
)sql";

// Version 4: the eval metrics a checkpoint's manifest carries (a JSON
// object of numbers, checkpoint/format.h Manifest::metrics), for "best
// checkpoint by eval" (runctl best).
constexpr const char kSchemaV4[] = R"sql(
ALTER TABLE checkpoint ADD COLUMN metrics TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metrics));
)sql";

// Version 5: a checkpoint can be "fenced": a later step of a timeline that a
// resume to an earlier step abandoned (kept on disk as evidence, never
// resumed from). SQLite cannot change a CHECK in place: the table is rebuilt
// with its columns in the same order.
constexpr const char kSchemaV5[] = R"sql(
CREATE TABLE checkpoint_v5 (
  id           INTEGER PRIMARY KEY,
  run_id       TEXT NOT NULL REFERENCES run(run_id),
  step         INTEGER NOT NULL,
  path         TEXT NOT NULL,
  bytes        INTEGER NOT NULL,
  world_size   INTEGER NOT NULL,
  attempt      INTEGER,
  generation   INTEGER,
  committed_ms INTEGER NOT NULL,
  state        TEXT NOT NULL CHECK (state IN ('committed', 'corrupt', 'pruned', 'fenced')),
  reason       TEXT NOT NULL DEFAULT '',
  state_ms     INTEGER,
  seq          INTEGER,
  state_seq    INTEGER,
  metrics      TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metrics))
);
INSERT INTO checkpoint_v5 (id, run_id, step, path, bytes, world_size, attempt, generation, committed_ms, state,
                           reason, state_ms, seq, state_seq, metrics)
  SELECT id, run_id, step, path, bytes, world_size, attempt, generation, committed_ms, state, reason, state_ms, seq,
         state_seq, metrics FROM checkpoint;
DROP TABLE checkpoint;
ALTER TABLE checkpoint_v5 RENAME TO checkpoint;
CREATE INDEX checkpoint_by_run ON checkpoint(run_id, step);
)sql";

// Version 6: who owns a checkpoint's files. 'trainer': holdfast-train's step
// folder under [job] checkpoint_dir (manifest-checked, pruned by the trainer);
// 'job': a path the job reported itself (docs/job-contract.md), which the
// daemon sizes and checks exists but never calls pruned.
constexpr const char kSchemaV6[] = R"sql(
ALTER TABLE checkpoint ADD COLUMN owner TEXT NOT NULL DEFAULT 'trainer' CHECK (owner IN ('trainer', 'job'));
)sql";

// Version 7: how many of an attempt's ranks holdfastd gave a GPU (0: all on
// the CPU; NULL in older rows: not recorded), for an incident's GPU-hours.
constexpr const char kSchemaV7[] = R"sql(
ALTER TABLE attempt ADD COLUMN gpus INTEGER;
)sql";

// Version 8: where a generation's ranks restored their state from, as they
// reported it ('none': a fresh start, 'disk', 'memory'; NULL: not reported, a
// job without the progress record's restore fields, or an older daemon).
constexpr const char kSchemaV8[] = R"sql(
ALTER TABLE generation ADD COLUMN restore_tier TEXT CHECK (restore_tier IN ('none', 'disk', 'memory'));
)sql";

// Version 9: the device mesh a generation's ranks reported ("tp=2,pp=2,dp=2",
// common/mesh.h; NULL: data parallelism alone, not reported, an older daemon).
constexpr const char kSchemaV9[] = R"sql(
ALTER TABLE generation ADD COLUMN mesh TEXT;
)sql";

// The migration that takes a file from version `from` to `from + 1`.
std::string Migration(int from) {
  switch (from) {
    case 0: return kSchemaV1;
    case 1: return SchemaV2();
    case 2: return kSchemaV3;
    case 3: return kSchemaV4;
    case 4: return kSchemaV5;
    case 5: return kSchemaV6;
    case 6: return kSchemaV7;
    case 7: return kSchemaV8;
    default: return kSchemaV9;
  }
}

std::string JoinNodes(const std::vector<std::string>& nodes) {
  std::string out;
  for (const auto& n : nodes) out += (out.empty() ? "" : ",") + n;
  return out;
}

std::vector<std::string> SplitNodes(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

template <typename E, size_t N>
std::optional<E> ParseName(const char* const (&names)[N], const std::string& s) {
  for (size_t i = 0; i < N; ++i) {
    if (s == names[i]) return static_cast<E>(i);
  }
  return std::nullopt;
}

constexpr const char* kRunStateNames[] = {"running", "succeeded", "failed", "stopped", "preempted"};
constexpr const char* kSchedulerNames[] = {"local", "slurm"};  // SchedulerKindName, in enum order
constexpr const char* kCheckpointStateNames[] = {"committed", "corrupt", "pruned", "fenced"};
constexpr const char* kCheckpointOwnerNames[] = {"trainer", "job"};
constexpr const char* kHealthStatusNames[] = {"pass", "warn", "fail", "skipped"};
constexpr const char* kJournalModeNames[] = {"wal", "delete", "truncate"};

int64_t SystemNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

const char* RunStateName(RunState s) { return kRunStateNames[static_cast<int>(s)]; }
const char* CheckpointStateName(CheckpointState s) {
  return kCheckpointStateNames[static_cast<int>(s)];
}
const char* CheckpointOwnerName(CheckpointOwner o) { return kCheckpointOwnerNames[static_cast<int>(o)]; }
const char* HealthStatusName(HealthStatus s) { return kHealthStatusNames[static_cast<int>(s)]; }
const char* JournalModeName(JournalMode m) { return kJournalModeNames[static_cast<int>(m)]; }

std::string NewRunId(int64_t unix_ms) {
  std::time_t secs = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  std::random_device rd;
  char buf[32];
  std::snprintf(buf, sizeof buf, "r-%04d%02d%02d-%04x", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, static_cast<unsigned>(rd() & 0xffff));
  return buf;
}

// ---- statements and transactions ----------------------------------------

// A cached prepared statement in use: binds on the way in, resets on the way
// out so the cache can hand it out again.
class LineageDb::Stmt {
 public:
  static Result<Stmt> Make(LineageDb* db, const std::string& sql) {
    HF_ASSIGN_OR_RETURN(sqlite3_stmt * s, db->Prepare(sql));
    return Stmt(db, s);
  }
  Stmt(Stmt&& o) noexcept : db_(o.db_), s_(std::exchange(o.s_, nullptr)) {}
  Stmt& operator=(Stmt&&) = delete;
  ~Stmt() {
    if (s_ != nullptr) {
      sqlite3_reset(s_);
      sqlite3_clear_bindings(s_);
    }
  }

  template <typename... A>
  Stmt& Bind(const A&... args) {
    int i = 0;
    (BindOne(++i, args), ...);
    return *this;
  }

  // True when a row is ready, false when done.
  Result<bool> Step(const std::string& what) {
    int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return db_->Error(rc, what);
  }
  // Runs a statement that returns no rows; returns the number of rows changed.
  Result<int> Run(const std::string& what) {
    HF_ASSIGN_OR_RETURN(bool row, Step(what));
    HF_CHECK(!row);
    return sqlite3_changes(db_->db_);
  }

  int64_t Int(int c) const { return sqlite3_column_int64(s_, c); }
  bool Null(int c) const { return sqlite3_column_type(s_, c) == SQLITE_NULL; }
  std::optional<int64_t> OptInt(int c) const {
    return Null(c) ? std::nullopt : std::optional<int64_t>(Int(c));
  }
  std::optional<int> OptInt32(int c) const {
    return Null(c) ? std::nullopt : std::optional<int>(static_cast<int>(Int(c)));
  }
  std::optional<double> OptReal(int c) const {
    return Null(c) ? std::nullopt : std::optional<double>(sqlite3_column_double(s_, c));
  }
  std::string Text(int c) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s_, c));
    return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(s_, c))) : std::string();
  }
  // An enum column; a value this build does not know is reported by status().
  template <typename E, size_t N>
  E Enum(int c, const char* const (&names)[N]) {
    std::string s = Text(c);
    auto e = ParseName<E>(names, s);
    if (!e && status_.ok()) {
      status_ = CorruptionError(db_->path_ + ": column " + sqlite3_column_name(s_, c) +
                                " holds '" + s + "', which this build does not know");
    }
    return e.value_or(static_cast<E>(0));
  }
  const Status& status() const { return status_; }

 private:
  Stmt(LineageDb* db, sqlite3_stmt* s) : db_(db), s_(s) {}

  // Bind failures are our bugs (wrong index) or a >1 GB string: both fatal.
  void BindOne(int i, int64_t v) { HF_CHECK(sqlite3_bind_int64(s_, i, v) == SQLITE_OK); }
  void BindOne(int i, int v) { BindOne(i, static_cast<int64_t>(v)); }
  void BindOne(int i, double v) { HF_CHECK(sqlite3_bind_double(s_, i, v) == SQLITE_OK); }
  void BindOne(int i, const std::string& v) {
    HF_CHECK(sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT) ==
             SQLITE_OK);
  }
  void BindOne(int i, const char* v) { BindOne(i, std::string(v)); }
  void BindOne(int i, std::nullptr_t) { HF_CHECK(sqlite3_bind_null(s_, i) == SQLITE_OK); }
  template <typename T>
  void BindOne(int i, const std::optional<T>& v) {
    if (v) {
      BindOne(i, *v);
    } else {
      BindOne(i, nullptr);
    }
  }

  LineageDb* db_;
  sqlite3_stmt* s_;  // owned by db_->cache_
  Status status_;
};

// BEGIN IMMEDIATE ... COMMIT; rolls back unless committed.
class LineageDb::Tx {
 public:
  explicit Tx(LineageDb* db) : db_(db) {}
  ~Tx() {
    if (open_) sqlite3_exec(db_->db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  Status Begin() {
    HF_RETURN_IF_ERROR(db_->CheckWritable());
    HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(db_, "BEGIN IMMEDIATE"));
    HF_RETURN_IF_ERROR(st.Run("begin a write").status());
    open_ = true;
    return Status::Ok();
  }
  Status Commit() {
    HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(db_, "COMMIT"));
    HF_RETURN_IF_ERROR(st.Run("commit").status());
    open_ = false;
    return Status::Ok();
  }

 private:
  LineageDb* db_;
  bool open_ = false;
};

// The one place an SQLite result code becomes a Status.
Status LineageDb::Error(int rc, const std::string& what) const {
  const bool same = db_ != nullptr && sqlite3_extended_errcode(db_) == rc;
  std::string msg = path_ + ": " + what + ": " + (same ? sqlite3_errmsg(db_) : sqlite3_errstr(rc));
  switch (rc & 0xff) {
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      return CorruptionError(
          msg + ". The file is not a lineage database or is damaged. Keep it for inspection "
                "(mv " + path_ + " " + path_ + ".bad; `sqlite3 " + path_ +
          ".bad .recover` may salvage rows); the daemon then starts a fresh lineage.db, and the "
          "checkpoints on disk are not affected");
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return UnavailableError(msg + " (still locked after " +
                              std::to_string(options_.busy_timeout_ms) +
                              " ms: another process is writing; is a second daemon running "
                              "for this run? `fuser " + path_ + "` shows who holds it)");
    case SQLITE_FULL:
      return ResourceExhaustedError(msg + " (free space on that filesystem)");
    case SQLITE_NOMEM:
      return ResourceExhaustedError(msg);
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return FailedPreconditionError(msg +
                                     " (the file or its folder is not writable by this user)");
    case SQLITE_CANTOPEN:
      return IoError(msg + " (does the folder exist, and may this user write it? a reader of a "
                           "WAL database needs its -shm file or a writable folder)");
    case SQLITE_IOERR:
      if (rc == SQLITE_IOERR_SHMOPEN || rc == SQLITE_IOERR_SHMSIZE ||
          rc == SQLITE_IOERR_SHMLOCK || rc == SQLITE_IOERR_SHMMAP) {
        return IoError(msg + " (WAL needs shared memory, which network filesystems do not "
                             "provide: set the journal mode to delete for this run folder)");
      }
      return IoError(msg);
    case SQLITE_CONSTRAINT:
      if (rc == SQLITE_CONSTRAINT_FOREIGNKEY) {
        return NotFoundError(msg + " (the run or attempt it refers to is not recorded)");
      }
      if (rc == SQLITE_CONSTRAINT_PRIMARYKEY || rc == SQLITE_CONSTRAINT_UNIQUE) {
        return FailedPreconditionError(msg + " (already recorded)");
      }
      return InvalidArgumentError(msg);
    default:
      return InternalError(msg);
  }
}

// ---- open, configure, migrate ---------------------------------------------

LineageDb::LineageDb(std::string path, const LineageOptions& options)
    : path_(std::move(path)), options_(options) {}

LineageDb::~LineageDb() {
  for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
  sqlite3_close_v2(db_);
}

Result<std::unique_ptr<LineageDb>> LineageDb::Open(const std::string& path,
                                                   const LineageOptions& options) {
  if (options.read_only) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) {
        return NotFoundError("no lineage database at " + path +
                             ": no run has been started in that run folder (holdfastd writes "
                             "RUN_DIR/lineage.db), or the path is wrong");
      }
      return ErrnoError("stat " + path, errno);
    }
  }
  auto db = Connect(path, options, /*immutable=*/false);
  // A reader of a WAL file needs its -shm index, and creates it when no writer
  // has; in a folder it may not write (someone else's run) that fails. With no
  // -shm there is no writer, so reading the file as immutable is safe.
  if (!db.ok() && options.read_only && db.status().code() != StatusCode::kCorruption) {
    struct stat st;
    if (::stat((path + "-shm").c_str(), &st) != 0 && errno == ENOENT) {
      auto retry = Connect(path, options, /*immutable=*/true);
      if (retry.ok()) return retry;
    }
  }
  return db;
}

namespace {

// lineage.db holds the job file ([job.env] included; its secret-looking values are redacted,
// the rest is not): owner-only, 0600. SQLite gives -wal and -shm the database's mode; files a
// build before this one left group- or world-readable are narrowed when their owner opens them.
// Errors are SQLite's to report (it opens a write-protected file read-only).
void MakeOwnerOnly(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd >= 0) ::close(fd);
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    const std::string p = path + suffix;
    struct stat st;
    if (::stat(p.c_str(), &st) == 0 && st.st_uid == ::geteuid() && (st.st_mode & 077) != 0) {
      ::chmod(p.c_str(), st.st_mode & 0700);
    }
  }
}

}  // namespace

Result<std::unique_ptr<LineageDb>> LineageDb::Connect(const std::string& path,
                                                      const LineageOptions& options,
                                                      bool immutable) {
  std::unique_ptr<LineageDb> db(new LineageDb(path, options));
  int flags = SQLITE_OPEN_NOMUTEX;  // one connection per thread (see the header)
  std::string name = path;
  if (immutable) {
    name = "file:";
    for (char ch : path) {
      if (ch == '%' || ch == '?' || ch == '#') {
        char hex[4];
        std::snprintf(hex, sizeof hex, "%%%02x", static_cast<unsigned char>(ch));
        name += hex;
      } else {
        name += ch;
      }
    }
    name += "?immutable=1";
    flags |= SQLITE_OPEN_URI;
  }
  flags |= options.read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  if (!options.read_only && !immutable && path != ":memory:" && path.rfind("file:", 0) != 0) MakeOwnerOnly(path);
  int rc = sqlite3_open_v2(name.c_str(), &db->db_, flags, nullptr);
  if (rc != SQLITE_OK) return db->Error(rc, "open");
  sqlite3_extended_result_codes(db->db_, 1);
  HF_RETURN_IF_ERROR(db->Configure());
  HF_RETURN_IF_ERROR(db->Migrate());
  return db;
}

Status LineageDb::Exec(const char* sql) {
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
  return rc == SQLITE_OK ? Status::Ok() : Error(rc, std::string("run '") + sql + "'");
}

Result<sqlite3_stmt*> LineageDb::Prepare(const std::string& sql) {
  auto it = cache_.find(sql);
  if (it != cache_.end()) return it->second;
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql.c_str(), static_cast<int>(sql.size()),
                              SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) return Error(rc, "prepare '" + sql + "'");
  cache_.emplace(sql, stmt);
  return stmt;
}

void LineageDb::SetBusyTimeout(int ms) {
  options_.busy_timeout_ms = ms;
  sqlite3_busy_timeout(db_, ms);
}

Status LineageDb::Configure() {
  sqlite3_busy_timeout(db_, options_.busy_timeout_ms);
  if (options_.read_only) return Exec("PRAGMA query_only = 1");
  // WAL needs shared memory between processes, which NFS/Lustre do not give;
  // there a rollback journal with ordinary file locks is the safe choice.
  const bool wal = options_.journal_mode == JournalMode::kWal;
  if (!wal) HF_RETURN_IF_ERROR(Exec("PRAGMA locking_mode = NORMAL"));
  const std::string want = JournalModeName(options_.journal_mode);
  HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, "PRAGMA journal_mode = " + want));
  HF_ASSIGN_OR_RETURN(bool row, st.Step("set journal_mode=" + want));
  if (!row || st.Text(0) != want) {
    return FailedPreconditionError(path_ + ": SQLite refused journal_mode=" + want + " (got '" +
                                   (row ? st.Text(0) : "") +
                                   "'); on a shared filesystem choose delete");
  }
  HF_RETURN_IF_ERROR(Exec(wal ? "PRAGMA synchronous = NORMAL" : "PRAGMA synchronous = FULL"));
  return Exec("PRAGMA foreign_keys = ON");
}

Status LineageDb::Migrate() {
  auto version = [this]() -> Result<int> {
    HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, "PRAGMA user_version"));
    HF_ASSIGN_OR_RETURN(bool row, st.Step("read the schema version"));
    HF_CHECK(row);
    return static_cast<int>(st.Int(0));
  };
  HF_ASSIGN_OR_RETURN(int v, version());
  file_schema_version_ = v;
  if (v > kSchemaVersion) {
    return FailedPreconditionError(path_ + " has lineage schema version " + std::to_string(v) +
                                   "; this build knows versions up to " +
                                   std::to_string(kSchemaVersion) +
                                   ": use the holdfast release that wrote it, or a newer one");
  }
  if (v == 0) {
    HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, "SELECT count(*) FROM sqlite_master"));
    HF_ASSIGN_OR_RETURN(bool row, st.Step("list tables"));
    if (row && st.Int(0) > 0) {
      return FailedPreconditionError(path_ + " is an SQLite database but not a lineage database "
                                             "(it has tables and no lineage schema version); "
                                             "refusing to touch it");
    }
    if (options_.read_only) {
      return NotFoundError(path_ + " holds no lineage yet (an empty database): the daemon has "
                                   "not recorded a run in it");
    }
  }
  if (v == kSchemaVersion) return Status::Ok();

  if (options_.read_only) {
    // Never write a reader's file: migrate a private in-memory copy instead.
    sqlite3* mem = nullptr;
    int rc =
        sqlite3_open_v2(":memory:", &mem, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
    if (rc == SQLITE_OK) {
      sqlite3_backup* b = sqlite3_backup_init(mem, "main", db_, "main");
      rc = b ? sqlite3_backup_step(b, -1) : sqlite3_errcode(mem);
      if (b) sqlite3_backup_finish(b);
      if (rc == SQLITE_DONE) rc = SQLITE_OK;
    }
    for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
    cache_.clear();
    std::swap(db_, mem);
    sqlite3_close_v2(mem);
    if (rc != SQLITE_OK) return Error(rc, "copy the old-version database into memory");
    sqlite3_extended_result_codes(db_, 1);
  }
  for (;;) {
    Tx tx(this);
    // Check the version inside the write lock: another writer may have migrated.
    if (!options_.read_only) HF_RETURN_IF_ERROR(tx.Begin());
    HF_ASSIGN_OR_RETURN(int now, version());
    if (now >= kSchemaVersion) break;
    HF_RETURN_IF_ERROR(Exec(Migration(now).c_str()).WithContext(
        "migrate lineage schema " + std::to_string(now) + " -> " + std::to_string(now + 1)));
    HF_RETURN_IF_ERROR(Exec(("PRAGMA user_version = " + std::to_string(now + 1)).c_str()));
    if (!options_.read_only) HF_RETURN_IF_ERROR(tx.Commit());
  }
  return options_.read_only ? Exec("PRAGMA query_only = 1") : Status::Ok();
}

Status LineageDb::CheckWritable() const {
  if (options_.read_only) {
    return FailedPreconditionError(path_ + " is open read-only; only the run's leading daemon "
                                           "writes its lineage");
  }
  return Status::Ok();
}

int64_t LineageDb::Now() const { return options_.clock ? options_.clock() : SystemNowMs(); }

Result<int64_t> LineageDb::NextSeq() {
  {
    HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, "UPDATE lineage_seq SET last = last + 1"));
    HF_ASSIGN_OR_RETURN(int n, st.Run("advance the write-order counter"));
    HF_CHECK(n == 1);  // the migration to version 3 inserts its one row
  }
  HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, "SELECT last FROM lineage_seq"));
  HF_ASSIGN_OR_RETURN(bool row, st.Step("read the write-order counter"));
  HF_CHECK(row);
  return st.Int(0);
}

namespace {
// Ending a generation: one that never reported a step ended where it started.
constexpr const char kEndGenerationSet[] =
    "ended_ms=?, ended_seq=?, state=?, cause=?, last_step=coalesce(last_step, start_step)";
}  // namespace

// ---- writes ----------------------------------------------------------------

Result<std::string> LineageDb::CreateRun(RunRecord run) {
  HF_RETURN_IF_ERROR(CheckWritable());
  if (run.created_ms == 0) run.created_ms = Now();
  if (run.run_id.empty()) run.run_id = NewRunId(run.created_ms);
  HF_ASSIGN_OR_RETURN(
      Stmt st, Stmt::Make(this,
                          "INSERT INTO run (run_id, name, owner_uid, run_dir, config_path, "
                          "config_hash, config_text, world_size, nodes, scheduler, slurm_job_id, "
                          "created_ms, state) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,'running')"));
  st.Bind(run.run_id, run.name, run.owner_uid, run.run_dir, run.config_path, run.config_hash,
          run.config_text, run.world_size, JoinNodes(run.nodes), SchedulerKindName(run.scheduler),
          run.slurm_job_id, run.created_ms);
  HF_RETURN_IF_ERROR(st.Run("create run " + run.run_id).status());
  return run.run_id;
}

Status LineageDb::EndRun(const std::string& run_id, RunState state, const std::string& cause) {
  if (state == RunState::kRunning) return InvalidArgumentError("EndRun needs a final state");
  Tx tx(this);
  HF_RETURN_IF_ERROR(tx.Begin());
  const int64_t now = Now();
  for (const char* table : {"generation", "attempt"}) {
    const bool gen = std::string_view(table) == "generation";
    HF_ASSIGN_OR_RETURN(int64_t seq, NextSeq());
    HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, std::string("UPDATE ") + table + " SET " +
                                                      (gen ? kEndGenerationSet
                                                           : "ended_ms=?, ended_seq=?, state=?, "
                                                             "cause=?") +
                                                      " WHERE run_id=? AND state='running'"));
    HF_RETURN_IF_ERROR(
        st.Bind(now, seq, RunStateName(state), cause, run_id).Run("end run").status());
  }
  HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, "UPDATE run SET ended_ms=?, state=?, cause=? "
                                                "WHERE run_id=?"));
  HF_ASSIGN_OR_RETURN(int n, st.Bind(now, RunStateName(state), cause, run_id).Run("end run"));
  if (n == 0) return NotFoundError(path_ + ": no run " + run_id + " to end");
  return tx.Commit();
}

Result<int> LineageDb::StartAttempt(const std::string& run_id, const AttemptStart& start) {
  Tx tx(this);
  HF_RETURN_IF_ERROR(tx.Begin());
  const int64_t now = Now();
  int prev = 0;
  {
    HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, "SELECT (SELECT count(*) FROM run WHERE "
                                                  "run_id=?1), (SELECT max(attempt) FROM attempt "
                                                  "WHERE run_id=?1)"));
    HF_ASSIGN_OR_RETURN(bool row, st.Bind(run_id).Step("start attempt"));
    HF_CHECK(row);
    if (st.Int(0) == 0) {
      return NotFoundError(path_ + ": no run " + run_id + " to start an attempt of");
    }
    prev = static_cast<int>(st.Int(1));
  }
  const int n = prev + 1;
  std::optional<int> parent = start.parent_attempt;
  if (!parent && prev > 0) parent = prev;
  if (parent && (*parent < 1 || *parent > prev)) {
    return InvalidArgumentError("run " + run_id + " has no attempt " + std::to_string(*parent) +
                                " to continue from (it has " + std::to_string(prev) + ")");
  }
  const std::string stale =
      "no end was recorded (its daemon died?); superseded by attempt " + std::to_string(n);
  for (const char* table : {"generation", "attempt"}) {
    const bool gen = std::string_view(table) == "generation";
    HF_ASSIGN_OR_RETURN(int64_t seq, NextSeq());
    HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, std::string("UPDATE ") + table + " SET " +
                                                      (gen ? kEndGenerationSet
                                                           : "ended_ms=?, ended_seq=?, state=?, "
                                                             "cause=?") +
                                                      " WHERE run_id=? AND state='running'"));
    HF_RETURN_IF_ERROR(
        st.Bind(now, seq, "failed", stale, run_id).Run("close stale attempt").status());
  }
  {
    HF_ASSIGN_OR_RETURN(int64_t seq, NextSeq());
    HF_ASSIGN_OR_RETURN(
        Stmt st, Stmt::Make(this, "INSERT INTO attempt (run_id, attempt, parent_attempt, "
                                  "slurm_job_id, restart_count, nodes, started_ms, state, "
                                  "resumed_from_step, seq, gpus) VALUES (?,?,?,?,?,?,?,'running',?,?,?)"));
    st.Bind(run_id, n, parent, start.slurm_job_id, start.restart_count, JoinNodes(start.nodes),
            now, start.resumed_from_step, seq, start.gpus);
    HF_RETURN_IF_ERROR(st.Run("start attempt " + std::to_string(n)).status());
  }
  {
    HF_ASSIGN_OR_RETURN(
        Stmt st, Stmt::Make(this, "UPDATE run SET state='running', ended_ms=NULL, cause='', "
                                  "nodes=coalesce(nullif(?1,''), nodes), "
                                  "slurm_job_id=coalesce(nullif(?2,''), slurm_job_id) "
                                  "WHERE run_id=?3"));
    st.Bind(JoinNodes(start.nodes), start.slurm_job_id, run_id);
    HF_RETURN_IF_ERROR(st.Run("revive run").status());
  }
  HF_RETURN_IF_ERROR(tx.Commit());
  return n;
}

Status LineageDb::EndAttempt(const std::string& run_id, int attempt, RunState state,
                             const std::string& cause) {
  if (state == RunState::kRunning) return InvalidArgumentError("EndAttempt needs a final state");
  Tx tx(this);
  HF_RETURN_IF_ERROR(tx.Begin());
  const int64_t now = Now();
  {
    HF_ASSIGN_OR_RETURN(int64_t seq, NextSeq());
    HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, std::string("UPDATE generation SET ") +
                                                      kEndGenerationSet +
                                                      " WHERE run_id=? AND attempt=? AND "
                                                      "state='running'"));
    st.Bind(now, seq, RunStateName(state), cause, run_id, attempt);
    HF_RETURN_IF_ERROR(st.Run("end attempt").status());
  }
  HF_ASSIGN_OR_RETURN(int64_t seq, NextSeq());
  HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, "UPDATE attempt SET ended_ms=?, ended_seq=?, "
                                                "state=?, cause=? WHERE run_id=? AND attempt=?"));
  HF_ASSIGN_OR_RETURN(int n, st.Bind(now, seq, RunStateName(state), cause, run_id, attempt)
                                 .Run("end attempt"));
  if (n == 0) {
    return NotFoundError(path_ + ": run " + run_id + " has no attempt " + std::to_string(attempt));
  }
  return tx.Commit();
}

Result<int> LineageDb::StartGeneration(const std::string& run_id, int attempt, int64_t start_step) {
  Tx tx(this);
  HF_RETURN_IF_ERROR(tx.Begin());
  const std::string where = "attempt " + std::to_string(attempt) + " of run " + run_id;
  {
    HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, "SELECT state FROM attempt WHERE run_id=? AND "
                                                  "attempt=?"));
    HF_ASSIGN_OR_RETURN(bool row, st.Bind(run_id, attempt).Step("start generation"));
    if (!row) return NotFoundError(path_ + ": no " + where);
    if (st.Text(0) != "running") {
      return FailedPreconditionError(where + " has ended (" + st.Text(0) +
                                     "); start a new attempt");
    }
  }
  int n = 0;
  {
    HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, "SELECT generation, state FROM generation WHERE "
                                                  "run_id=? AND attempt=? ORDER BY generation "
                                                  "DESC LIMIT 1"));
    HF_ASSIGN_OR_RETURN(bool row, st.Bind(run_id, attempt).Step("start generation"));
    if (row) {
      if (st.Text(1) == "running") {
        return FailedPreconditionError("generation " + std::to_string(st.Int(0)) + " of " + where +
                                       " is still running; end it first");
      }
      n = static_cast<int>(st.Int(0)) + 1;
    }
  }
  {
    HF_ASSIGN_OR_RETURN(int64_t seq, NextSeq());
    HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, "INSERT INTO generation (run_id, attempt, "
                                                  "generation, started_ms, start_step, state, "
                                                  "seq) VALUES (?,?,?,?,?,'running',?)"));
    st.Bind(run_id, attempt, n, Now(), start_step, seq);
    HF_RETURN_IF_ERROR(st.Run("start generation").status());
  }
  HF_RETURN_IF_ERROR(tx.Commit());
  return n;
}

Status LineageDb::UpdateGenerationStep(const std::string& run_id, int attempt, int generation,
                                       int64_t step) {
  HF_RETURN_IF_ERROR(CheckWritable());
  // One autocommit UPDATE through a cached statement: cheap enough for every
  // few seconds (WAL + synchronous=NORMAL does not fsync it).
  HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, "UPDATE generation SET last_step=?, "
                                                "last_step_ms=? WHERE run_id=? AND attempt=? AND "
                                                "generation=?"));
  HF_ASSIGN_OR_RETURN(int n, st.Bind(step, Now(), run_id, attempt, generation).Run("update step"));
  if (n == 0) {
    return NotFoundError(path_ + ": no generation " + std::to_string(generation) + " of attempt " +
                         std::to_string(attempt) + " of run " + run_id);
  }
  return Status::Ok();
}

Status LineageDb::SetGenerationRestore(const std::string& run_id, int attempt, int generation, int64_t start_step,
                                       const std::string& tier, const std::string& mesh) {
  HF_RETURN_IF_ERROR(CheckWritable());
  if (tier != "none" && tier != "disk" && tier != "memory") {
    return InvalidArgumentError("restore tier must be none, disk or memory, got \"" + tier + "\"");
  }
  // A layout as DeviceMesh::Layout writes it: "tp=2,pp=2,dp=2" (",ep=E").
  const bool layout_chars = std::all_of(mesh.begin(), mesh.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '=' || c == ',';
  });
  if (mesh.size() > 64 || !layout_chars) {
    return InvalidArgumentError("a generation's mesh must be a layout such as tp=2,pp=2,dp=2, got \"" + mesh + "\"");
  }
  if (start_step < 0) {
    return InvalidArgumentError("a generation's start step must be >= 0, got " + std::to_string(start_step));
  }
  HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, "UPDATE generation SET start_step=?, restore_tier=?, mesh=nullif(?, '') "
                                                "WHERE run_id=? AND attempt=? AND generation=?"));
  HF_ASSIGN_OR_RETURN(int n, st.Bind(start_step, tier, mesh, run_id, attempt, generation).Run("record the restore"));
  if (n == 0) {
    return NotFoundError(path_ + ": no generation " + std::to_string(generation) + " of attempt " +
                         std::to_string(attempt) + " of run " + run_id);
  }
  return Status::Ok();
}

Status LineageDb::EndGeneration(const std::string& run_id, int attempt, int generation,
                                RunState state, const std::string& cause) {
  if (state == RunState::kRunning) return InvalidArgumentError("EndGeneration needs a final state");
  Tx tx(this);
  HF_RETURN_IF_ERROR(tx.Begin());
  HF_ASSIGN_OR_RETURN(int64_t seq, NextSeq());
  HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, std::string("UPDATE generation SET ") +
                                                    kEndGenerationSet +
                                                    " WHERE run_id=? AND attempt=? AND "
                                                    "generation=?"));
  HF_ASSIGN_OR_RETURN(int n, st.Bind(Now(), seq, RunStateName(state), cause, run_id, attempt,
                                     generation).Run("end generation"));
  if (n == 0) {
    return NotFoundError(path_ + ": no generation " + std::to_string(generation) + " of attempt " +
                         std::to_string(attempt) + " of run " + run_id);
  }
  return tx.Commit();
}

Status LineageDb::RecordCheckpoint(const CheckpointRecord& c) {
  Tx tx(this);
  HF_RETURN_IF_ERROR(tx.Begin());
  {
    HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, "SELECT 1 FROM checkpoint WHERE run_id=? AND "
                                                  "step=? AND state='committed'"));
    HF_ASSIGN_OR_RETURN(bool dup, st.Bind(c.run_id, c.step).Step("record checkpoint"));
    if (dup) return Status::Ok();  // a re-reported commit (e.g. after a daemon restart)
  }
  HF_ASSIGN_OR_RETURN(int64_t seq, NextSeq());
  nlohmann::json metrics = nlohmann::json::object();
  for (const auto& [name, value] : c.metrics) {
    if (std::isfinite(value)) metrics[name] = value;
  }
  HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, "INSERT INTO checkpoint (run_id, step, path, "
                                                "bytes, world_size, attempt, generation, "
                                                "committed_ms, state, seq, metrics, owner) VALUES "
                                                "(?,?,?,?,?,?,?,?,'committed',?,?,?)"));
  st.Bind(c.run_id, c.step, c.path, c.bytes, c.world_size, c.attempt, c.generation,
          c.committed_ms != 0 ? c.committed_ms : Now(), seq, metrics.dump(), CheckpointOwnerName(c.owner));
  HF_RETURN_IF_ERROR(st.Run("record checkpoint at step " + std::to_string(c.step) +
                                      " of run " + c.run_id).status());
  return tx.Commit();
}

Status LineageDb::MarkCheckpoint(const std::string& run_id, int64_t step, CheckpointState state,
                                 const std::string& reason) {
  if (state == CheckpointState::kCommitted) {
    return InvalidArgumentError("MarkCheckpoint marks corrupt or pruned; RecordCheckpoint commits");
  }
  Tx tx(this);
  HF_RETURN_IF_ERROR(tx.Begin());
  HF_ASSIGN_OR_RETURN(int64_t seq, NextSeq());
  HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, "UPDATE checkpoint SET state=?, reason=?, "
                                                "state_ms=?, state_seq=? WHERE id=(SELECT "
                                                "max(id) FROM checkpoint WHERE run_id=? AND "
                                                "step=?)"));
  HF_ASSIGN_OR_RETURN(int n, st.Bind(CheckpointStateName(state), reason, Now(), seq, run_id, step)
                                 .Run("mark checkpoint"));
  if (n == 0) {
    return NotFoundError(path_ + ": run " + run_id + " has no checkpoint recorded at step " +
                         std::to_string(step));
  }
  return tx.Commit();
}

Result<int64_t> LineageDb::RecordEvent(const EventRecord& e) {
  if (e.kind.empty() || e.summary.empty()) {
    return InvalidArgumentError("an event needs a kind and a summary");
  }
  Tx tx(this);
  HF_RETURN_IF_ERROR(tx.Begin());
  HF_ASSIGN_OR_RETURN(int64_t seq, NextSeq());
  HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, "INSERT INTO event (run_id, time_ms, kind, "
                                                "attempt, generation, node, rank, summary, "
                                                "evidence, action, runbook, incident, seq) "
                                                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)"));
  st.Bind(e.run_id, e.time_ms != 0 ? e.time_ms : Now(), e.kind, e.attempt, e.generation, e.node,
          e.rank, e.summary, e.evidence_json.empty() ? std::string("{}") : e.evidence_json,
          e.action, e.runbook, IsIncidentKind(e.kind) ? 1 : 0, seq);
  HF_RETURN_IF_ERROR(st.Run("record " + e.kind + " event for run " + e.run_id +
                                      " (evidence must be JSON)").status());
  const auto id = static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
  HF_RETURN_IF_ERROR(tx.Commit());
  return id;
}

Result<int64_t> LineageDb::RecordHealthResult(const HealthResultRecord& h) {
  HF_RETURN_IF_ERROR(CheckWritable());
  if (h.node.empty() || h.check.empty()) {
    return InvalidArgumentError("a health result needs a node and a check name");
  }
  HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, "INSERT INTO health_result (run_id, time_ms, node, "
                                                "check_name, status, value, threshold, unit, "
                                                "source, evidence, suggested_action) VALUES "
                                                "(nullif(?,''),?,?,?,?,?,?,?,?,?,?)"));
  st.Bind(h.run_id, h.time_ms != 0 ? h.time_ms : Now(), h.node, h.check, HealthStatusName(h.status),
          h.value, h.threshold, h.unit, h.source,
          h.evidence_json.empty() ? std::string("{}") : h.evidence_json, h.suggested_action);
  HF_RETURN_IF_ERROR(st.Run("record health check " + h.check + " on " + h.node +
                                      " (evidence must be JSON)").status());
  return static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
}

// ---- reads -------------------------------------------------------------------

namespace {

constexpr const char kRunCols[] =
    "run_id, name, owner_uid, run_dir, config_path, config_hash, config_text, world_size, nodes, "
    "scheduler, slurm_job_id, created_ms, ended_ms, state, cause, "
    "(SELECT max(last_step) FROM generation g WHERE g.run_id = run.run_id)";
constexpr const char kAttemptCols[] =
    "run_id, attempt, parent_attempt, slurm_job_id, restart_count, nodes, started_ms, ended_ms, "
    "state, cause, resumed_from_step, coalesce(seq, 0) AS seq, ended_seq, gpus";
constexpr const char kGenerationCols[] =
    "run_id, attempt, generation, started_ms, ended_ms, start_step, last_step, last_step_ms, "
    "state, cause, coalesce(seq, 0) AS seq, ended_seq, coalesce(restore_tier, ''), coalesce(mesh, '')";
constexpr const char kCheckpointCols[] =
    "run_id, step, path, bytes, world_size, attempt, generation, committed_ms, state, reason, "
    "state_ms, coalesce(seq, 0) AS seq, state_seq, metrics, owner";
constexpr const char kEventCols[] =
    "id, run_id, time_ms, kind, attempt, generation, node, rank, summary, evidence, action, "
    "runbook, incident, coalesce(seq, 0) AS seq";
constexpr const char kHealthCols[] =
    "id, coalesce(run_id, ''), time_ms, node, check_name, status, value, threshold, unit, source, "
    "evidence, suggested_action";

}  // namespace

// Row readers; the column order is the matching k*Cols above.
struct LineageRows {
  using Stmt = LineageDb::Stmt;
  static RunRecord Run(Stmt& s) {
    RunRecord r;
    r.run_id = s.Text(0);
    r.name = s.Text(1);
    r.owner_uid = s.Int(2);
    r.run_dir = s.Text(3);
    r.config_path = s.Text(4);
    r.config_hash = s.Text(5);
    r.config_text = s.Text(6);
    r.world_size = static_cast<int>(s.Int(7));
    r.nodes = SplitNodes(s.Text(8));
    r.scheduler = s.Enum<SchedulerKind>(9, kSchedulerNames);
    r.slurm_job_id = s.Text(10);
    r.created_ms = s.Int(11);
    r.ended_ms = s.OptInt(12);
    r.state = s.Enum<RunState>(13, kRunStateNames);
    r.cause = s.Text(14);
    r.last_step = s.OptInt(15);
    return r;
  }
  static AttemptRecord Attempt(Stmt& s) {
    AttemptRecord a;
    a.run_id = s.Text(0);
    a.attempt = static_cast<int>(s.Int(1));
    a.parent_attempt = s.OptInt32(2);
    a.slurm_job_id = s.Text(3);
    a.restart_count = static_cast<int>(s.Int(4));
    a.nodes = SplitNodes(s.Text(5));
    a.started_ms = s.Int(6);
    a.ended_ms = s.OptInt(7);
    a.state = s.Enum<RunState>(8, kRunStateNames);
    a.cause = s.Text(9);
    a.resumed_from_step = s.OptInt(10);
    a.seq = s.Int(11);
    a.ended_seq = s.OptInt(12);
    a.gpus = s.OptInt32(13);
    return a;
  }
  static GenerationRecord Generation(Stmt& s) {
    GenerationRecord g;
    g.run_id = s.Text(0);
    g.attempt = static_cast<int>(s.Int(1));
    g.generation = static_cast<int>(s.Int(2));
    g.started_ms = s.Int(3);
    g.ended_ms = s.OptInt(4);
    g.start_step = s.Int(5);
    g.last_step = s.OptInt(6);
    g.last_step_ms = s.OptInt(7);
    g.state = s.Enum<RunState>(8, kRunStateNames);
    g.cause = s.Text(9);
    g.seq = s.Int(10);
    g.ended_seq = s.OptInt(11);
    g.restore_tier = s.Text(12);
    g.mesh = s.Text(13);
    return g;
  }
  static CheckpointRecord Checkpoint(Stmt& s) {
    CheckpointRecord c;
    c.run_id = s.Text(0);
    c.step = s.Int(1);
    c.path = s.Text(2);
    c.bytes = s.Int(3);
    c.world_size = static_cast<int>(s.Int(4));
    c.attempt = s.OptInt32(5);
    c.generation = s.OptInt32(6);
    c.committed_ms = s.Int(7);
    c.state = s.Enum<CheckpointState>(8, kCheckpointStateNames);
    c.reason = s.Text(9);
    c.state_ms = s.OptInt(10);
    c.seq = s.Int(11);
    c.state_seq = s.OptInt(12);
    const nlohmann::json m = nlohmann::json::parse(s.Text(13), nullptr, /*allow_exceptions=*/false);
    if (m.is_object()) {
      for (const auto& [name, value] : m.items()) {
        if (value.is_number()) c.metrics[name] = value.get<double>();
      }
    }
    c.owner = s.Enum<CheckpointOwner>(14, kCheckpointOwnerNames);
    return c;
  }
  static EventRecord Event(Stmt& s) {
    EventRecord e;
    e.id = s.Int(0);
    e.run_id = s.Text(1);
    e.time_ms = s.Int(2);
    e.kind = s.Text(3);
    e.attempt = s.OptInt32(4);
    e.generation = s.OptInt32(5);
    e.node = s.Text(6);
    e.rank = s.OptInt32(7);
    e.summary = s.Text(8);
    e.evidence_json = s.Text(9);
    e.action = s.Text(10);
    e.runbook = s.Text(11);
    e.incident = s.Int(12) != 0;
    e.seq = s.Int(13);
    return e;
  }
  static HealthResultRecord Health(Stmt& s) {
    HealthResultRecord h;
    h.id = s.Int(0);
    h.run_id = s.Text(1);
    h.time_ms = s.Int(2);
    h.node = s.Text(3);
    h.check = s.Text(4);
    h.status = s.Enum<HealthStatus>(5, kHealthStatusNames);
    h.value = s.OptReal(6);
    h.threshold = s.OptReal(7);
    h.unit = s.Text(8);
    h.source = s.Text(9);
    h.evidence_json = s.Text(10);
    h.suggested_action = s.Text(11);
    return h;
  }

  // Every row of a bound statement.
  template <typename T>
  static Result<std::vector<T>> All(Stmt& s, T (*read)(Stmt&), const std::string& what) {
    std::vector<T> out;
    for (;;) {
      HF_ASSIGN_OR_RETURN(bool row, s.Step(what));
      if (!row) return out;
      out.push_back(read(s));
      HF_RETURN_IF_ERROR(s.status());
    }
  }
};

namespace {
// SQLite: a negative LIMIT means none.
int64_t SqlLimit(int limit) { return limit > 0 ? limit : -1; }
}  // namespace

Result<std::vector<RunRecord>> LineageDb::ListRuns(int limit) {
  HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, std::string("SELECT ") + kRunCols +
                                                    " FROM run ORDER BY created_ms DESC, rowid "
                                                    "DESC LIMIT ?"));
  st.Bind(SqlLimit(limit));
  return LineageRows::All(st, &LineageRows::Run, "list runs");
}

Result<RunRecord> LineageDb::GetRun(const std::string& id) {
  if (id.empty()) return InvalidArgumentError("an empty run id matches nothing");
  // Exact first, so that a full id that is also another id's prefix still works.
  for (const char* where : {"run_id = ?1", "substr(run_id, 1, length(?1)) = ?1"}) {
    HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, std::string("SELECT ") + kRunCols +
                                                      " FROM run WHERE " + where +
                                                      " ORDER BY created_ms DESC LIMIT 11"));
    st.Bind(id);
    HF_ASSIGN_OR_RETURN(auto runs, LineageRows::All(st, &LineageRows::Run, "find run " + id));
    if (runs.size() == 1) return runs[0];
    if (runs.size() > 1) {
      std::string list;
      for (size_t i = 0; i < runs.size() && i < 10; ++i) {
        list += (i ? ", " : "") + runs[i].run_id + " (" + runs[i].name + ")";
      }
      if (runs.size() > 10) list += ", and more";
      return InvalidArgumentError("run id '" + id + "' is ambiguous in " + path_ + ": it matches " +
                                  list + "; give more of the id");
    }
  }
  return NotFoundError("no run '" + id + "' in " + path_ +
                       "; `runctl runs` lists the runs it holds");
}

Result<RunRecord> LineageDb::FindRun(const std::string& spec) {
  return IsLatestRunSpec(spec) ? LatestRun() : GetRun(spec);
}

Result<RunRecord> LineageDb::LatestRun() {
  HF_ASSIGN_OR_RETURN(auto runs, ListRuns(1));
  if (runs.empty()) return NotFoundError(path_ + " holds no runs yet");
  return runs[0];
}

Result<std::vector<AttemptRecord>> LineageDb::Attempts(const std::string& run_id) {
  HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, std::string("SELECT ") + kAttemptCols +
                                                    " FROM attempt WHERE run_id=? ORDER BY "
                                                    "attempt"));
  st.Bind(run_id);
  return LineageRows::All(st, &LineageRows::Attempt, "list attempts");
}

Result<std::vector<GenerationRecord>> LineageDb::Generations(const std::string& run_id) {
  HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, std::string("SELECT ") + kGenerationCols +
                                                    " FROM generation WHERE run_id=? ORDER BY "
                                                    "attempt, generation"));
  st.Bind(run_id);
  return LineageRows::All(st, &LineageRows::Generation, "list generations");
}

Result<std::vector<CheckpointRecord>> LineageDb::Checkpoints(const std::string& run_id) {
  HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, std::string("SELECT ") + kCheckpointCols +
                                                    " FROM checkpoint WHERE run_id=? ORDER BY "
                                                    "step, id"));
  st.Bind(run_id);
  return LineageRows::All(st, &LineageRows::Checkpoint, "list checkpoints");
}

Result<std::optional<CheckpointRecord>> LineageDb::NewestCommittedCheckpoint(
    const std::string& run_id) {
  HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, std::string("SELECT ") + kCheckpointCols +
                                                    " FROM checkpoint WHERE run_id=? AND "
                                                    "state='committed' ORDER BY step DESC, id "
                                                    "DESC LIMIT 1"));
  st.Bind(run_id);
  HF_ASSIGN_OR_RETURN(auto rows, LineageRows::All(st, &LineageRows::Checkpoint, "find checkpoint"));
  if (rows.empty()) return std::optional<CheckpointRecord>();
  return std::optional<CheckpointRecord>(std::move(rows[0]));
}

Result<std::vector<EventRecord>> LineageDb::Events(const std::string& run_id, int limit) {
  HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, std::string("SELECT * FROM (SELECT ") +
                                                    kEventCols +
                                                    " FROM event WHERE run_id=? ORDER BY seq "
                                                    "DESC, id DESC LIMIT ?) ORDER BY seq, id"));
  st.Bind(run_id, SqlLimit(limit));
  return LineageRows::All(st, &LineageRows::Event, "list events");
}

Result<std::optional<EventRecord>> LineageDb::LastIncident(const std::string& run_id) {
  HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, std::string("SELECT ") + kEventCols +
                                                    " FROM event WHERE run_id=? AND incident=1 "
                                                    "ORDER BY seq DESC, id DESC LIMIT 1"));
  st.Bind(run_id);
  HF_ASSIGN_OR_RETURN(auto rows, LineageRows::All(st, &LineageRows::Event, "find last incident"));
  if (rows.empty()) return std::optional<EventRecord>();
  return std::optional<EventRecord>(std::move(rows[0]));
}

Result<std::vector<HealthResultRecord>> LineageDb::HealthResults(const HealthQuery& q) {
  HF_ASSIGN_OR_RETURN(Stmt st, Stmt::Make(this, std::string("SELECT ") + kHealthCols +
                                                    " FROM health_result WHERE (?1='' OR "
                                                    "run_id=?1) AND (?2='' OR node=?2) ORDER BY "
                                                    "time_ms DESC, id DESC LIMIT ?3"));
  st.Bind(q.run_id, q.node, SqlLimit(q.limit));
  return LineageRows::All(st, &LineageRows::Health, "list health results");
}

}  // namespace holdfast
