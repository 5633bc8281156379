#include "cli/command_support.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>
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

std::string SelfDir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  std::string path(buf, static_cast<size_t>(n));
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

bool IsExecutable(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

// `env` (a test's or operator's override), next to runctl, ../<sibling>/ of
// runctl's folder (the build tree), then PATH. `looked` lists where it looked.
std::string FindTool(const std::string& name, const char* env, const std::string& sibling,
                     std::vector<std::string>* looked) {
  const char* forced = std::getenv(env);
  if (forced != nullptr && *forced != '\0') {
    looked->push_back(std::string("$") + env + "=" + forced);
    return IsExecutable(forced) ? forced : "";
  }
  std::string self = SelfDir();
  if (!self.empty()) {
    for (const std::string& p : {self + "/" + name, self + "/../" + sibling + "/" + name}) {
      looked->push_back(p);
      if (IsExecutable(p)) return p;
    }
  }
  looked->push_back("PATH");
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) continue;
    std::string p = dir + "/" + name;
    if (IsExecutable(p)) return p;
  }
  return "";
}

std::vector<char*> Argv(std::vector<std::string>& args) {
  std::vector<char*> v;
  for (std::string& a : args) v.push_back(a.data());
  v.push_back(nullptr);
  return v;
}

}  // namespace holdfast
