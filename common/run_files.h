// Where a run's per-process log files are, named in one place: holdfastd
// writes them (daemon/rank_group.cc, daemon/role_supervisor.cc) and
// `runctl triage` names the culprit's (cli/format.cc).
//   RUN_DIR/logs/aA-gG-rankR.log         a learner rank of attempt A, generation G
//   RUN_DIR/logs/aA-role-ROLE-I.log      role process I of ROLE ([[roles]]), attempt A
//   RUN_DIR/logs/aA-spare-nN-K.log       warm spare K of node N until assigned (docs/warm-restarts.md)
// A log is written on the node the process ran on, under its RUN_DIR (one
// shared folder under Slurm, as docs/slurm.md asks).
//
// Thread-safety: pure functions.
#pragma once

#include <string>

namespace holdfast {

inline std::string RankLogPath(const std::string& run_dir, int attempt, int generation, int rank) {
  return run_dir + "/logs/a" + std::to_string(attempt) + "-g" + std::to_string(generation) + "-rank" +
         std::to_string(rank) + ".log";
}

inline std::string RoleLogPath(const std::string& run_dir, int attempt, const std::string& role, int index) {
  return run_dir + "/logs/a" + std::to_string(attempt) + "-role-" + role + "-" + std::to_string(index) + ".log";
}

inline std::string SpareLogPath(const std::string& run_dir, int attempt, int node, int index) {
  return run_dir + "/logs/a" + std::to_string(attempt) + "-spare-n" + std::to_string(node) + "-" +
         std::to_string(index) + ".log";
}

}  // namespace holdfast
