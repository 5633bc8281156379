// LineageDb: the SQLite record of a run's life (runs, attempts, generations,
// checkpoints, incidents, health results) that on-call reads with `runctl`.
//
// The leading holdfastd of a run is its only writer (RUN_DIR/lineage.db);
// `runctl` opens the same file read-only, also while the daemon writes. Every
// write is one transaction, so a reader sees a write whole or not at all. The
// schema is versioned (PRAGMA user_version) and migrated forward by a writer on
// Open; a reader that finds an older file migrates an in-memory copy and never
// touches the file. docs/lineage.md describes the tables for people who query
// the file with `sqlite3`.
//
// Times are int64 unix milliseconds. Writers stamp them from the options'
// clock; a record passed in with time 0 gets "now" too. Wall clocks step (NTP,
// a node with a bad RTC), so the order things happened in is kept apart from
// them: every write that starts, ends or marks an attempt, generation,
// checkpoint or event draws the next number of one per-file counter (`seq`),
// and readers order by it (Events(), `runctl lineage`).
//
// Thread-safety: a LineageDb is a single SQLite connection and is NOT safe to
// use from two threads at once: give each thread its own LineageDb (several
// connections to one file, in one or many processes, are fine).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/scheduler_kind.h"
#include "common/status.h"
#include "lineage/event_kind.h"

struct sqlite3;
struct sqlite3_stmt;

namespace holdfast {

// State of a run, an attempt or a generation.
enum class RunState { kRunning, kSucceeded, kFailed, kStopped, kPreempted };
// kFenced: a later step of a timeline a resume to an earlier step abandoned
// (RunRecorder: moved aside on disk as evidence, never resumed from).
enum class CheckpointState { kCommitted, kCorrupt, kPruned, kFenced };
// Who owns a checkpoint's files: holdfast-train's step folder, or a path the
// job reported (docs/job-contract.md). Schema version 6.
enum class CheckpointOwner { kTrainer, kJob };
enum class HealthStatus { kPass, kWarn, kFail, kSkipped };

// Lower-case names as stored in the database ("running", "slurm", ...).
const char* RunStateName(RunState state);
const char* CheckpointStateName(CheckpointState state);
const char* CheckpointOwnerName(CheckpointOwner owner);
const char* HealthStatusName(HealthStatus status);

// "r-YYYYMMDD-xxxx": the UTC date of `unix_ms` and 16 random bits in hex.
std::string NewRunId(int64_t unix_ms);

struct RunRecord {
  std::string run_id;  // empty in CreateRun: one is generated
  std::string name;
  int64_t owner_uid = 0;
  std::string run_dir;
  std::string config_path;
  std::string config_hash;
  std::string config_text;
  int world_size = 0;
  std::vector<std::string> nodes;  // of the newest attempt
  SchedulerKind scheduler = SchedulerKind::kLocal;
  std::string slurm_job_id;  // of the newest attempt; empty when local
  int64_t created_ms = 0;
  std::optional<int64_t> ended_ms;
  RunState state = RunState::kRunning;
  std::string cause;  // why it ended, a sentence; empty while running
  // Read only: the newest step any generation reported (unset before the first).
  std::optional<int64_t> last_step;
};

// What a new attempt (daemon start, requeue, `runctl resume`) is.
struct AttemptStart {
  std::optional<int> parent_attempt;  // unset: the newest existing attempt, if any
  std::string slurm_job_id;
  int restart_count = 0;  // SLURM_RESTART_COUNT
  std::vector<std::string> nodes;
  std::optional<int64_t> resumed_from_step;  // unset: a fresh start
  // Ranks holdfastd gave a GPU (0: every rank on the CPU); unset: not known.
  std::optional<int> gpus;
};

struct AttemptRecord {
  std::string run_id;
  int attempt = 0;  // 1, 2, ...
  std::optional<int> parent_attempt;
  std::string slurm_job_id;
  int restart_count = 0;
  std::vector<std::string> nodes;
  int64_t started_ms = 0;
  std::optional<int64_t> ended_ms;
  RunState state = RunState::kRunning;
  std::string cause;
  std::optional<int64_t> resumed_from_step;
  // Ranks on a GPU (0: all on the CPU); unset: not recorded (schema < 7).
  std::optional<int> gpus;
  // Read only: write order (see the file comment); ended_seq is set with ended_ms.
  int64_t seq = 0;
  std::optional<int64_t> ended_seq;
};

struct GenerationRecord {
  std::string run_id;
  int attempt = 0;
  int generation = 0;  // 0, 1, 2, ... within the attempt
  int64_t started_ms = 0;
  std::optional<int64_t> ended_ms;
  // The checkpoint step it resumed from, or 0: the one the daemon expected
  // when it started the generation, then the one its ranks report restoring.
  int64_t start_step = 0;
  // Where the ranks restored it from: "none", "disk", "memory"; "" not reported.
  std::string restore_tier;
  // The device mesh its ranks reported ("tp=2,pp=2,dp=2"); "" for data
  // parallelism alone (or not reported).
  std::string mesh;
  // The newest step the ranks reported; a generation that ends before its
  // first report ends with start_step here.
  std::optional<int64_t> last_step;
  std::optional<int64_t> last_step_ms;  // when last_step was reported
  RunState state = RunState::kRunning;
  std::string cause;
  // Read only: write order (see the file comment); ended_seq is set with ended_ms.
  int64_t seq = 0;
  std::optional<int64_t> ended_seq;
};

struct CheckpointRecord {
  std::string run_id;
  int64_t step = 0;
  // The step folder (owner kTrainer), or the file or folder the job reported
  // (kJob; "" when it reported none).
  std::string path;
  int64_t bytes = 0;  // of the folder's files, or of the job's file or tree
  CheckpointOwner owner = CheckpointOwner::kTrainer;
  int world_size = 0;
  std::optional<int> attempt;
  std::optional<int> generation;
  int64_t committed_ms = 0;  // 0 in RecordCheckpoint: now
  CheckpointState state = CheckpointState::kCommitted;
  std::string reason;  // why corrupt or pruned
  std::optional<int64_t> state_ms;  // when marked corrupt or pruned
  // The manifest's metrics (the trainer's newest eval: "eval_loss",
  // "eval_step", ...); empty when it carried none. Schema version 4.
  std::map<std::string, double> metrics;
  // Read only: write order of the commit, and of the marking (with state_ms).
  int64_t seq = 0;
  std::optional<int64_t> state_seq;
};

struct EventRecord {
  int64_t id = 0;  // read only
  std::string run_id;
  int64_t time_ms = 0;  // 0 in RecordEvent: now
  std::string kind;     // event_kind::*
  std::optional<int> attempt;
  std::optional<int> generation;
  std::string node;  // empty: not tied to a node
  std::optional<int> rank;
  std::string summary;        // one line a person can read
  std::string evidence_json;  // a JSON value; empty is stored as {}
  std::string action;         // what the daemon did about it
  std::string runbook;        // e.g. "runbooks/hang.md"
  bool incident = false;      // read only: IsIncidentKind(kind)
  int64_t seq = 0;            // read only: write order (see the file comment)
};

struct HealthResultRecord {
  int64_t id = 0;       // read only
  std::string run_id;   // empty: not tied to a run (stored as NULL)
  int64_t time_ms = 0;  // 0 in RecordHealthResult: now
  std::string node;
  std::string check;  // e.g. "gpu_ecc"
  HealthStatus status = HealthStatus::kPass;
  std::optional<double> value;
  std::optional<double> threshold;
  std::string unit;
  std::string source;  // what measured it, e.g. "nvml", "prolog"
  std::string evidence_json;
  std::string suggested_action;
};

// Which health results to list: by run, by node, or both (empty = any).
struct HealthQuery {
  std::string run_id;
  std::string node;
  int limit = 100;  // newest first; <= 0: all
};

enum class JournalMode {
  kWal,       // default: local disk; readers never block the writer
  kDelete,    // shared filesystems (NFS, Lustre): WAL needs shared memory there
  kTruncate,  // like kDelete, truncates the journal instead of deleting it
};
const char* JournalModeName(JournalMode mode);

struct LineageOptions {
  // Readers (`runctl`) never create, migrate or modify the file; a missing
  // file is kNotFound.
  bool read_only = false;
  // Writers only: set on every open (WAL persists in the file, so readers
  // follow whatever the writer chose).
  JournalMode journal_mode = JournalMode::kWal;
  int busy_timeout_ms = 5000;
  // Unix ms; unset: the system clock. Tests inject a fake.
  std::function<int64_t()> clock;
};

class LineageDb {
 public:
  // Newest schema this build reads and writes.
  static constexpr int kSchemaVersion = 9;

  static Result<std::unique_ptr<LineageDb>> Open(const std::string& path,
                                                 const LineageOptions& options = {});
  ~LineageDb();
  LineageDb(const LineageDb&) = delete;
  LineageDb& operator=(const LineageDb&) = delete;

  const std::string& path() const { return path_; }
  // Version of the file on disk (for a reader of an old file, lower than
  // kSchemaVersion: its reads come from a migrated in-memory copy).
  int file_schema_version() const { return file_schema_version_; }
  // How long a statement waits for another process's lock before it fails
  // with kUnavailable (LineageOptions::busy_timeout_ms at Open).
  void SetBusyTimeout(int ms);

  // ---- writes (holdfastd's leader) ----
  // Returns the run id (`run.run_id`, or a new one when empty). state is set
  // to running and created_ms to now when 0. A duplicate id is an error.
  Result<std::string> CreateRun(RunRecord run);
  // Ends the run and whatever attempt and generation of it still run, all with
  // `state` (not running) and `cause`.
  Status EndRun(const std::string& run_id, RunState state, const std::string& cause);
  // Returns the new attempt's number. Puts the run back to running (a resumed
  // run is alive again) and updates its nodes/slurm job id. An attempt still
  // marked running (its daemon died without a word) is ended as failed.
  Result<int> StartAttempt(const std::string& run_id, const AttemptStart& start);
  // Also ends the attempt's running generation with the same state and cause.
  Status EndAttempt(const std::string& run_id, int attempt, RunState state,
                    const std::string& cause);
  // Returns the new generation's number (0 for the attempt's first). The
  // previous generation must have ended.
  Result<int> StartGeneration(const std::string& run_id, int attempt, int64_t start_step);
  // One cheap UPDATE; meant to be called every few seconds.
  Status UpdateGenerationStep(const std::string& run_id, int attempt, int generation,
                              int64_t step);
  // What the generation's ranks restored (all ranks agree on one step):
  // start_step becomes `start_step` (the step the daemon expected may have
  // been a snapshot the ranks passed over) and restore_tier `tier` ("none",
  // "disk" or "memory"; anything else is refused), with the device mesh the
  // ranks reported (`mesh`, DeviceMesh::Layout; "" none; not a layout: refused).
  Status SetGenerationRestore(const std::string& run_id, int attempt, int generation, int64_t start_step,
                              const std::string& tier, const std::string& mesh = "");
  // A generation that never reported a step ends with last_step = start_step.
  Status EndGeneration(const std::string& run_id, int attempt, int generation, RunState state,
                       const std::string& cause);
  // Call when the trainer reports a commit (every shard durable, manifest
  // written). Recording the same committed step twice is a no-op.
  Status RecordCheckpoint(const CheckpointRecord& checkpoint);
  // `state` is kCorrupt (found bad on load) or kPruned; `reason` says why.
  Status MarkCheckpoint(const std::string& run_id, int64_t step, CheckpointState state,
                        const std::string& reason);
  Result<int64_t> RecordEvent(const EventRecord& event);  // returns the event id
  Result<int64_t> RecordHealthResult(const HealthResultRecord& result);

  // ---- reads (runctl, and the daemon when it resumes a run) ----
  Result<std::vector<RunRecord>> ListRuns(int limit);  // newest first; <= 0: all
  // By full id or by a prefix that matches exactly one run.
  Result<RunRecord> GetRun(const std::string& run_id_or_prefix);
  Result<RunRecord> LatestRun();  // kNotFound when there is none
  // A RUN argument (common/run_spec.h): "" or "latest" = LatestRun, else
  // GetRun. kNotFound / kInvalidArgument (ambiguous) say what to give instead.
  Result<RunRecord> FindRun(const std::string& spec);
  Result<std::vector<AttemptRecord>> Attempts(const std::string& run_id);
  Result<std::vector<GenerationRecord>> Generations(const std::string& run_id);
  Result<std::vector<CheckpointRecord>> Checkpoints(const std::string& run_id);  // by step
  // The newest `limit` events (<= 0: all), oldest first, in write order (seq),
  // whatever their clock times say.
  Result<std::vector<EventRecord>> Events(const std::string& run_id, int limit);
  Result<std::optional<EventRecord>> LastIncident(const std::string& run_id);
  Result<std::vector<HealthResultRecord>> HealthResults(const HealthQuery& query);
  Result<std::optional<CheckpointRecord>> NewestCommittedCheckpoint(const std::string& run_id);

 private:
  class Stmt;
  class Tx;
  friend struct LineageRows;  // row readers in lineage_db.cc
  LineageDb(std::string path, const LineageOptions& options);
  static Result<std::unique_ptr<LineageDb>> Connect(const std::string& path,
                                                    const LineageOptions& options, bool immutable);

  Status Configure();
  Status Migrate();
  Status Exec(const char* sql);
  Result<sqlite3_stmt*> Prepare(const std::string& sql);  // cached; owned by cache_
  Status CheckWritable() const;
  int64_t Now() const;
  // Inside a write transaction: advances the file's one seq counter and
  // returns its new value.
  Result<int64_t> NextSeq();
  Status Error(int rc, const std::string& what) const;

  std::string path_;
  LineageOptions options_;
  sqlite3* db_ = nullptr;  // owned
  int file_schema_version_ = 0;
  std::map<std::string, sqlite3_stmt*> cache_;  // owned; finalized in the destructor
};

}  // namespace holdfast
