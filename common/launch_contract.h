// The launch contract between a supervisor (holdfastd, or holdfast-train's
// local launcher) and the ranks (and role processes) it starts: environment variable names and the
// exit codes the supervisor acts on. One definition for both sides;
// documented for any job in docs/job-contract.md and docs/progress-record.md.
#pragma once

namespace holdfast {

inline constexpr const char* kEnvRank = "HOLDFAST_RANK";
inline constexpr const char* kEnvLocalRank = "HOLDFAST_LOCAL_RANK";
inline constexpr const char* kEnvWorldSize = "HOLDFAST_WORLD_SIZE";
inline constexpr const char* kEnvStoreAddr = "HOLDFAST_STORE_ADDR";
// The file holding the run's key (common/peer_auth.h), which the store at
// HOLDFAST_STORE_ADDR asks every client to prove it holds: RUN_DIR/cluster.key
// under holdfastd, a private temporary file under holdfast-train --nproc.
inline constexpr const char* kEnvStoreKeyFile = "HOLDFAST_STORE_KEY_FILE";
inline constexpr const char* kEnvGeneration = "HOLDFAST_GENERATION";
// Path of this rank's shared-memory progress record (common/progress_record.h).
inline constexpr const char* kEnvProgressPath = "HOLDFAST_PROGRESS_PATH";
inline constexpr const char* kEnvRunId = "HOLDFAST_RUN_ID";
inline constexpr const char* kEnvNode = "HOLDFAST_NODE";
inline constexpr const char* kEnvDevice = "HOLDFAST_DEVICE";  // the rank's device ordinal, -1 = CPU
inline constexpr const char* kEnvNodeAddr = "HOLDFAST_NODE_ADDR";  // the address the rank's node binds and advertises
inline constexpr const char* kEnvHost = "HOLDFAST_HOST";  // the rank's node's host name
// The run directory (absolute): logs/, lineage.db, and where a job's processes
// may meet (e.g. an RL job's reward.addr).
inline constexpr const char* kEnvRunDir = "HOLDFAST_RUN_DIR";
// Role groups (docs: the job file's [[roles]]): which role a process plays.
// The ranks of [job] command are the learner: HOLDFAST_ROLE=learner. A role
// process gets its role's name, its index in the role (0 .. count-1) and the
// role's count.
inline constexpr const char* kEnvRole = "HOLDFAST_ROLE";
inline constexpr const char* kEnvRoleIndex = "HOLDFAST_ROLE_INDEX";
inline constexpr const char* kEnvRoleCount = "HOLDFAST_ROLE_COUNT";
inline constexpr const char* kRoleLearner = "learner";
// The in-memory snapshot tier (docs/memory-snapshots.md), set only when the
// job file's recovery.memory_budget_mb > 0: the folder on tmpfs that this
// node's holdfastd owns for the run (removed when the daemon ends; a dead
// daemon's is swept by the next), the bytes of it one rank may fill, and how
// often (in steps) a rank snapshots its state there.
inline constexpr const char* kEnvSnapshotDir = "HOLDFAST_SNAPSHOT_DIR";
inline constexpr const char* kEnvSnapshotBudgetBytes = "HOLDFAST_SNAPSHOT_BUDGET_BYTES";
inline constexpr const char* kEnvSnapshotEvery = "HOLDFAST_SNAPSHOT_EVERY";
// Set only in a run of several nodes: the snapshots of steps that are
// multiples of it are replicated to a peer node (recovery.snapshot_every x
// recovery.replica_every), so each rank keeps the newest of them as well as
// its newest snapshot, until the next one commits.
inline constexpr const char* kEnvSnapshotReplicaEvery = "HOLDFAST_SNAPSHOT_REPLICA_EVERY";
// Set only for `runctl resume --from-step N`: the checkpoint step to resume from.
inline constexpr const char* kEnvResumeFromStep = "HOLDFAST_RESUME_FROM_STEP";

// Warm spares (docs/job-contract.md "Warm spares", the job file's
// recovery.warm_spares): set only in a spare's environment, the number of the
// inherited fd (one end of a socketpair) on which the spare reads the rank it
// is to become (common/spare_assignment.h). A spare has none of the rank
// variables above until then, and must not touch a device before it.
inline constexpr const char* kEnvSpareFd = "HOLDFAST_SPARE_FD";

// Exit codes of a rank.
inline constexpr int kRankExitOk = 0;
// A runtime failure: a peer died or timed out, a checkpoint could not be read.
inline constexpr int kRankExitFailed = 1;
// Bad input (config, flag, data): the same input fails again, so no restart.
inline constexpr int kRankExitUsage = 2;
// Stopped on SIGTERM/SIGUSR1 after committing a checkpoint of the last
// completed step (EX_TEMPFAIL): run again to resume.
inline constexpr int kRankExitPreempted = 75;

}  // namespace holdfast
