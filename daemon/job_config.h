// JobConfig: what holdfastd supervises and how (TOML, every key validated).
//
//   [job]        name, command (argv array), nproc (ranks per node), workdir, env table,
//                checkpoint_dir (where the job's checkpoints go, for lineage),
//                min_nodes, max_nodes (an elastic run: recovery_policy.h)
//   [supervise]  poll_ms, startup_timeout_s, hang_factor, hang_min_s,
//                checkpoint_allowance_s, eval_allowance_s, restart_budget,
//                backoff_initial_s, backoff_max_s, term_grace_s, progress_dir,
//                straggler_factor, straggler_min_duration_s
//   [lineage]    journal_mode (wal | delete | truncate)
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

struct SuperviseConfig {
  int poll_ms = 200;
  double startup_timeout_s = 120;
  double hang_factor = 5.0;        // hang = no step for hang_factor x p99 step time ...
  double hang_min_s = 5.0;         // ... but never less than this
  double checkpoint_allowance_s = 300;
  double eval_allowance_s = 600;
  int restart_budget = 3;          // restarts per attempt before giving up
  double backoff_initial_s = 0.25; // delay before restart n: initial * 2^(n-1), capped
  double backoff_max_s = 30;
  double term_grace_s = 3;         // TERM, then KILL after this
  // A node whose network stack answers nothing for this long (cut off, powered
  // off) is lost: its cluster connection closes (LineConnection::SetPeerTimeout).
  // 0 = the kernel's own bounds (~15 minutes with data in flight, none when idle).
  double node_timeout_s = 30;
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
  std::vector<RoleConfig> roles;  // [[roles]], in file order
  JournalMode journal_mode = JournalMode::kWal;  // [lineage] journal_mode
  std::string source;  // the file it came from
  std::string text;    // the file's contents, recorded in lineage
};

Result<JobConfig> LoadJobConfig(const std::string& path);

}  // namespace holdfast
