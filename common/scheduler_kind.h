// SchedulerKind: which scheduler gave a run its nodes. Decided once, when the
// daemon picks its scheduler (holdfastd --scheduler), and carried as this
// value: the allocation (scheduler/scheduler.h), lineage's run row
// (lineage/lineage_db.h) and the status runctl prints all name it from here.
//
// Thread-safety: constants and pure functions.
#pragma once

namespace holdfast {

enum class SchedulerKind { kLocal, kSlurm };

// "local", "slurm": as stored in lineage.db and sent in a run's status.
inline const char* SchedulerKindName(SchedulerKind kind) { return kind == SchedulerKind::kSlurm ? "slurm" : "local"; }

}  // namespace holdfast
