// What every runctl command shares (internal to runctl's commands): the one
// error line and the exit code it maps to, printing --json, and reading the
// run's lineage.db (read-only: runctl never writes to the database holdfastd
// owns). The commands are split by what they do: recorded_commands.cc reads
// lineage, live_commands.cc talks to holdfastd, format.h words and tables.
//
// Thread-safety: none needed; runctl is single-threaded.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/status.h"
#include "lineage/lineage_db.h"

namespace holdfast {

// Prints "runctl: MESSAGE" on stderr and returns `code`.
int Fail(const CliContext& c, int code, const std::string& message);
// NotFound -> 3, everything else -> 1.
int ExitFor(const Status& s);
// An unknown or ambiguous RUN is "not found" (3); anything else (a broken
// file) is 1.
int ExitForRunLookup(const Status& s);

void PrintJson(const CliContext& c, const nlohmann::json& j);

// RUN_DIR/lineage.db
std::string DbPath(const CliContext& c);
// lineage.db opened read-only (a fresh open sees the daemon's newest commit).
Result<std::unique_ptr<LineageDb>> OpenDb(const CliContext& c);

// The folder of the running runctl ("" when /proc/self/exe cannot be read).
std::string SelfDir();
bool IsExecutable(const std::string& path);
// A Holdfast program: `env` (a test's or operator's override), next to
// runctl, ../<sibling>/ of runctl's folder (the build tree), then PATH.
// `looked` lists where it looked; "" when not found.
std::string FindTool(const std::string& name, const char* env, const std::string& sibling,
                     std::vector<std::string>* looked);
// argv for posix_spawn: pointers into `args`, null-terminated.
std::vector<char*> Argv(std::vector<std::string>& args);

// The database and the run RUN names; on failure the error is printed and
// `exit` is its exit code.
struct RunLookup {
  std::unique_ptr<LineageDb> db;
  RunRecord run;
  int exit = kRunctlOk;
};
RunLookup LookUp(const CliContext& c, const std::string& spec);

// The run's row as lineage.db holds it now (a fresh read-only open per call).
Result<RunRecord> ReadRun(const CliContext& c, const std::string& run_id);

// The last recorded state of RUN, for when no daemon answers (`why` says
// why not); returns the exit code (recorded_commands.cc).
int PrintRecordedStatus(const CliContext& c, const std::string& spec, const std::string& why,
                        const RankSelection& sel = {});

}  // namespace holdfast
