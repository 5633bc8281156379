// JobConfig: what holdfastd supervises and how (TOML, every key validated).
//
//   [job]        name, command (argv array), nproc (ranks per node), workdir, env table,
//                checkpoint_dir (where the job's checkpoints go, for lineage),
//                min_nodes, max_nodes (an elastic run: recovery_policy.h)
//   [supervise]  poll_ms, report_ms, startup_timeout_s, hang_factor, hang_min_s, stopped_hang_s,
//                checkpoint_allowance_s, eval_allowance_s, restart_budget,
//                backoff_initial_s, backoff_max_s, term_grace_s, exit_grace_s, progress_dir,
//                straggler_factor, straggler_min_duration_s, stack_timeout_s, stack_tool,
//                preempt_margin_s
//   [lineage]    journal_mode (wal | delete | truncate), host_history, history_dir
//   [recovery]   memory_budget_mb, snapshot_every, memory_dir: the in-memory
//                snapshot tier (docs/memory-snapshots.md)
//   [[roles]]    role groups beside the learner (the [job] command ranks):
//                name, command, count, restart (alone | learner), hang_s,
//                env, restart_budget — each a RoleConfig below
//   [health], [health.policy], [health.fail_actions]: node health thresholds
//                and policy, validated by health/ (docs/health.md)
//
// The launch contract is generic: the daemon supervises a command, which
// reads its rank from HOLDFAST_RANK / RANK and reports progress through
// HOLDFAST_PROGRESS_PATH (docs/progress-record.md). Plain data.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "lineage/lineage_db.h"  // JournalMode

namespace holdfast {

// The derived startup_timeout_s: 300 s + 0.25 s per rank (302 s at 8 ranks,
// 428 s at 512, 1324 s at 4096): imports from a shared file system, NCCL's
// init and a restore all grow with the run (docs/job-file.md).
inline constexpr double kStartupBaseS = 300;
inline constexpr double kStartupPerRankS = 0.25;

struct SuperviseConfig {
  int poll_ms = 200;
  // A follower's periodic report of its ranks' progress to the leader, at
  // most this often (never more often than it polls); a rank that exits,
  // stops (T) or is replaced is reported at its next poll regardless. The
  // leader times a stall from the rank's own heartbeat, not from the report,
  // so this costs hang detection nothing (docs/benchmarks.md, "Supervision
  // at scale": the leader's work grows with ranks x reports per second).
  int report_ms = 1000;
  // The first step of a generation may take this long (start-up, rendezvous,
  // NCCL init, restore). Unset in the job file: derived from the run's size by
  // ResolveSizedDefaults — kStartupBaseS + kStartupPerRankS x world size.
  double startup_timeout_s = kStartupBaseS;
  bool startup_timeout_given = false;  // the job file set it: never derived
  double hang_factor = 5.0;        // hang = no step for hang_factor x p99 step time ...
  double hang_min_s = 60.0;        // ... but never less than this
  // A rank in job-control stop (state T: SIGSTOP, SIGTSTP; not a tracer's t)
  // for this long is hung at once, whatever the step allowance (0 = no such
  // rule: a stopped rank waits out the allowance like any other stall).
  double stopped_hang_s = 1.0;
  double checkpoint_allowance_s = 300;
  double eval_allowance_s = 600;
  int restart_budget = 3;          // restarts per attempt before giving up
  double backoff_initial_s = 0.25; // delay before restart n: initial * 2^(n-1), capped
  double backoff_max_s = 30;
  double term_grace_s = 3;         // TERM, then KILL after this
  // Once a rank has exited cleanly (0, or 75 after a stop's checkpoint), how
  // long its peers may take to follow once they report the same work done (the
  // same final step, the same committed checkpoint): a rank stuck in its
  // teardown (destroy_process_group, an atexit hook, a non-daemon thread) is
  // then terminated and its peers' result stands (0 = wait for the allowance).
  double exit_grace_s = 30;
  // Bounds of the exclude-and-requeue loop, per run (daemon/recovery_policy.h
  // "Bounds"): requeues after failures, and hosts those requeues exclude.
  int max_requeues = 5;
  int max_excluded_nodes = 3;
  // A node whose network stack answers nothing for this long (cut off, powered
  // off) is lost: its cluster connection closes (LineConnection::SetPeerTimeout).
  // 0 = the kernel's own bounds (~15 minutes with data in flight, none when idle).
  double node_timeout_s = 30;
  // Slurm's warning signal with a known lead time: the ranks train on until
  // the stop's checkpoint can just commit before the limit, this much to
  // spare beyond the measured save and two steps (daemon/preempt_plan.h).
  double preempt_margin_s = 15;
  std::string progress_dir = "/dev/shm";
  // Node health (health/): pre-launch checks before the first generation, then
  // the light periodic monitor every health_poll_s (0 = off). Thresholds and
  // the policy come from the job file's [health] sections (docs/health.md).
  bool health_prelaunch = true;
  double health_poll_s = 10;
  std::string health_sysfs_root = "/sys";
  // Straggler (daemon/straggler.h): a rank whose compute per step stays at or
  // above straggler_factor x the median of the others' for
  // straggler_min_duration_s is named (0 = off).
  double straggler_factor = 2.0;
  double straggler_min_duration_s = 30;
  // Before the ranks of a hang are stopped, their stacks are captured
  // (daemon/stack_capture.h) within this limit (0 = off), with this tool.
  double stack_timeout_s = 10;
  std::string stack_tool = "eu-stack";
};

// How far a role process's failure reaches.
enum class RoleRestart {
  kAlone,    // only that process restarts; the learner's ranks are untouched
  kLearner,  // the learner group restarts too (as after a rank failure), and it with them
};
const char* RoleRestartName(RoleRestart restart);  // "alone", "learner"

// One [[roles]] entry: `count` processes of one command beside the learner's
// ranks (an RL job's rollout workers, its reward service). They run on the
// leading node (docs/roles: spreading them over nodes is not supported yet).
struct RoleConfig {
  std::string name;  // [a-z0-9_-]+, unique, not "learner"
  std::vector<std::string> command;
  int count = 1;
  RoleRestart restart = RoleRestart::kAlone;
  // A process whose progress record shows no heartbeat or step for this long
  // is hung (killed and restarted as its `restart` says); 0 = no hang check.
  double hang_s = 0;
  std::map<std::string, std::string> env;  // on top of [job] env
  // restart = "alone": restarts per process per attempt before the run stops
  // with a cause. restart = "learner" roles spend [supervise] restart_budget.
  int restart_budget = 10;
};
inline constexpr int kMaxRoleCount = 256;  // processes of one role

// [recovery]: the in-memory snapshot tier (docs/memory-snapshots.md). With
// memory_budget_mb > 0 each node's holdfastd owns a folder on tmpfs for the
// run (memory_dir/holdfast-snap-RUN-PID) and tells its ranks its path, their
// share of the budget and snapshot_every (common/launch_contract.h); a rank
// restarts from the newest snapshot every rank holds before the disk.
struct RecoveryConfig {
  int64_t memory_budget_mb = 0;  // per node, MiB; 0 = no memory snapshots
  int64_t snapshot_every = 1;    // steps between snapshots
  // Several nodes: each node's daemon pushes its ranks' newest snapshot to
  // the next node at most this fast (MiB/s; 0 = unlimited), so that a lost
  // node's state is on a peer (docs/memory-snapshots.md, "Several nodes").
  int64_t replica_mb_per_s = 200;
  // Which snapshots are replicated: every replica_every-th (the steps that
  // are multiples of snapshot_every x replica_every), the same steps on every
  // node, so that a lost node's replica meets its peers' own copies of that
  // step; each rank also keeps the newest such step until the next one
  // commits. A lost node costs up to two of these intervals.
  int64_t replica_every = 10;
  int64_t replica_step() const { return snapshot_every * replica_every; }
  std::string memory_dir = "/dev/shm";
  // One pre-started holdfast-train per local rank that waits for a rank
  // assignment, so that a restart skips the cold start (docs/warm-restarts.md).
  bool warm_spares = false;
  bool enabled() const { return memory_budget_mb > 0; }
};

struct JobConfig {
  std::string name = "run";
  std::vector<std::string> command;
  int nproc = 1;
  std::string workdir;  // "" = the daemon's working directory
  std::map<std::string, std::string> env;
  std::string checkpoint_dir;  // optional; relative to workdir
  // Tokens one rank processes per optimizer step (micro batch x grad accum x
  // context), when the job says so: holdfastd then exports tokens/s per rank
  // from the progress record's step times. 0 = unknown (no tokens/s metric).
  int64_t tokens_per_step = 0;
  // Elastic runs (torchrun's --nnodes=MIN:MAX): train on at most max_nodes of
  // the allocation's nodes (the rest stand by as spares; 0 = all of them),
  // and when a node is lost or must leave, go on without it — a spare taking
  // its place where one is left — as long as at least min_nodes train (0 =
  // not elastic: the run needs every node it started with). The trainer
  // reshards from the newest checkpoint, keeping the global batch.
  int min_nodes = 0;
  int max_nodes = 0;
  SuperviseConfig supervise;
  RecoveryConfig recovery;
  std::vector<RoleConfig> roles;  // [[roles]], in file order
  JournalMode journal_mode = JournalMode::kWal;  // [lineage] journal_mode
  // [lineage] host_history: publish each incident that names hosts into the
  // cross-run host history (common/host_history.h), in history_dir ("": beside
  // the run directory, RUN_DIR/../.holdfast/hosts).
  bool host_history = true;
  std::string history_dir;
  std::string source;  // the file it came from
  std::string text;    // the file's contents, recorded in lineage
};

Result<JobConfig> LoadJobConfig(const std::string& path);
// The same from a job file's text (`source` names it in messages and is
// recorded as its origin): what a job given by holdfastd's flags loads from.
Result<JobConfig> LoadJobConfigText(const std::string& text, const std::string& source);

// Every key of [job], [supervise], [lineage] and [[roles]] ("job.nproc",
// "roles.count", ...), as the loader reads them: docs/job-file.md must list
// each ([health] keys: health::HealthConfigKeys).
std::vector<std::string> JobConfigKeys();

// Keys a job does not set that follow from its size once the allocation is
// known: [supervise] startup_timeout_s (see kStartupTimeoutAuto). `world_size`
// = ranks that train.
void ResolveSizedDefaults(JobConfig* job, int world_size);

}  // namespace holdfast
