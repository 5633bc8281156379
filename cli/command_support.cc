#include "cli/command_support.h"

#include <utility>

namespace holdfast {

const char kExitCodesHelp[] =
    "Exit codes:\n"
    "  0  ok\n"
    "  1  failure reported by the daemon, a request runctl refuses (the message says why),\n"
    "     or lineage.db unreadable/corrupt\n"
    "  2  usage error (bad flag or argument)\n"
    "  3  run or lineage.db not found (unknown or ambiguous RUN, no such checkpoint or\n"
    "     incident, no host history)\n"
    "  4  holdfastd not reachable (checkpoint and stop need a live daemon)\n"
    "  5  stop --wait or checkpoint --wait gave up after --timeout\n"
    "  status only, by the run's health (0: training, or succeeded):\n"
    "  6  hung: a rank or role process is stopped (SIGSTOP, a tracer), or holdfastd is\n"
    "     recovering from a hang\n"
    "  7  the run failed\n"
    "  8  the run was stopped or preempted (runctl resume continues it)\n";

int Fail(const CliContext& c, int code, const std::string& message) {
  *c.err << "runctl: " << message << "\n";
  return code;
}

int ExitFor(const Status& s) { return s.code() == StatusCode::kNotFound ? kRunctlNotFound : kRunctlFailure; }

int ExitForRunLookup(const Status& s) {
  return s.code() == StatusCode::kNotFound || s.code() == StatusCode::kInvalidArgument ? kRunctlNotFound
                                                                                        : kRunctlFailure;
}

void PrintJson(const CliContext& c, const nlohmann::json& j) {
  *c.out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

std::string DbPath(const CliContext& c) { return c.run_dir + "/lineage.db"; }

Result<std::unique_ptr<LineageDb>> OpenDb(const CliContext& c) {
  LineageOptions options;
  options.read_only = true;
  return LineageDb::Open(DbPath(c), options);
}

RunLookup LookUp(const CliContext& c, const std::string& spec) {
  RunLookup r;
  Result<std::unique_ptr<LineageDb>> db = OpenDb(c);
  if (!db.ok()) {
    r.exit = Fail(c, ExitFor(db.status()), db.status().message());
    return r;
  }
  r.db = std::move(db).value();
  Result<RunRecord> run = r.db->FindRun(spec);
  if (!run.ok()) {
    r.exit = Fail(c, ExitForRunLookup(run.status()), run.status().message());
    return r;
  }
  r.run = std::move(run).value();
  return r;
}

Result<RunRecord> ReadRun(const CliContext& c, const std::string& run_id) {
  HF_ASSIGN_OR_RETURN(std::unique_ptr<LineageDb> db, OpenDb(c));
  return db->GetRun(run_id);
}

}  // namespace holdfast
