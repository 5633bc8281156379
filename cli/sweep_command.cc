// runctl sweep: one job file run once per value of a parameter, each member
// its own holdfastd and run directory (so its own run in lineage), in turn
// or side by side, then compared (runctl compare). docs/sweeps.md.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "common/toml_reader.h"

namespace holdfast {
namespace {

using json = nlohmann::json;

struct Member {
  std::string value;
  std::string tag;       // the member's folder name: NAME-VALUE, file-name safe
  std::string dir;       // its run directory
  std::string job_path;  // its job file
  std::string job_text;
  pid_t pid = 0;
  int exit = -1;         // holdfastd's exit status; -1 while it runs or before it starts
};

std::string Replace(std::string text, const std::string& what, const std::string& with) {
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + with.size())) {
    text.replace(at, what.size(), with);
  }
  return text;
}

// `s` with every character outside [A-Za-z0-9._-] made '_' (a file name).
std::string Safe(std::string s) {
  for (char& ch : s) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '_' && ch != '-') ch = '_';
  }
  return s;
}
std::string TagOf(const std::string& name, const std::string& value) { return Safe(name + "-" + value); }

// NAME=V1,V2,... -> NAME and the values; "" on success, else what is wrong.
std::string ParseVary(const std::string& vary, std::string* name, std::vector<std::string>* values) {
  const size_t eq = vary.find('=');
  if (eq == std::string::npos || eq == 0) return "--vary must be NAME=V1,V2,... (e.g. lr=1e-4,3e-4), got '" + vary + "'";
  *name = vary.substr(0, eq);
  std::stringstream ss(vary.substr(eq + 1));
  std::string v;
  std::set<std::string> seen;
  while (std::getline(ss, v, ',')) {
    if (v.empty()) return "--vary " + vary + ": an empty value";
    if (!seen.insert(v).second) return "--vary " + vary + ": the value " + v + " is given twice";
    values->push_back(v);
  }
  if (values->size() < 2) return "--vary " + vary + ": a sweep needs two values or more";
  if (values->size() > 64) return "--vary " + vary + ": at most 64 values";
  return "";
}

Status Start(const std::string& daemon, Member* m) {
  std::vector<std::string> args = {daemon, "--run-dir", m->dir, "--config", m->job_path};
  std::vector<char*> argv = Argv(args);
  const std::string log = m->dir + "/holdfastd.log";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  const int rc = posix_spawn(&m->pid, daemon.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return ErrnoError("start " + daemon + " for " + m->tag, rc);
  return Status::Ok();
}

}  // namespace

int CmdSweep(const CliContext& c, const std::string& job_file, const std::string& vary, int side_by_side,
             const std::string& metric) {
  std::string name;
  std::vector<std::string> values;
  if (std::string bad = ParseVary(vary, &name, &values); !bad.empty()) return Fail(c, kRunctlUsage, bad);
  if (side_by_side < 1) return Fail(c, kRunctlUsage, "--side-by-side must be 1 or more");
  std::ifstream in(job_file);
  if (!in) return Fail(c, kRunctlNotFound, "cannot read the job file " + job_file);
  std::stringstream text;
  text << in.rdbuf();
  const std::string job = text.str();
  // Each member must get its value, and outputs of its own: refused before
  // anything is written.
  if (job.find("{value}") == std::string::npos) {
    return Fail(c, kRunctlUsage, job_file + " has no {value}: put it where the swept parameter goes, e.g. "
                                 "command = [..., \"--set\", \"optim.lr={value}\"]");
  }
  if (job.find("{sweep}") == std::string::npos) {
    return Fail(c, kRunctlUsage, job_file + " has no {sweep}: put it in every path a member writes, so that the "
                                 "members do not overwrite each other, e.g. \"--set\", \"output.dir=runs/dpo/{sweep}\" "
                                 "and checkpoint_dir = \"runs/dpo/{sweep}/checkpoints\"");
  }
  const std::string root = c.run_dir + "/sweep-" + Safe(name);
  std::error_code ec;
  if (std::filesystem::exists(root, ec)) {
    return Fail(c, kRunctlUsage, root + " already exists (an earlier sweep of " + name + "): move it away, or give "
                                 "another --run-dir");
  }
  std::vector<Member> members;
  for (const std::string& v : values) {
    Member m;
    m.value = v;
    m.tag = TagOf(name, v);
    m.dir = root + "/" + m.tag;
    m.job_path = m.dir + "/job.toml";
    Result<toml::table> parsed = ParseToml(Replace(Replace(job, "{value}", v), "{sweep}", m.tag), job_file);
    if (!parsed.ok()) return Fail(c, kRunctlUsage, parsed.status().message() + " (with {value} = " + v + ")");
    toml::table* section = (*parsed)["job"].as_table();
    if (section == nullptr || (*section)["command"].as_array() == nullptr) {
      return Fail(c, kRunctlUsage, job_file + " has no [job] command");
    }
    const std::string base = (*section)["name"].value_or(std::string("job"));
    section->insert_or_assign("name", base + " " + name + "=" + v);
    std::ostringstream os;
    os << *parsed << "\n";
    m.job_text = os.str();
    members.push_back(std::move(m));
  }
  std::vector<std::string> looked;
  const std::string daemon = FindTool("holdfastd", "RUNCTL_HOLDFASTD", "daemon", &looked);
  if (daemon.empty()) return Fail(c, kRunctlFailure, "holdfastd not found (looked in " + Join(looked, ", ") + ")");
  for (Member& m : members) {
    std::filesystem::create_directories(m.dir, ec);
    std::ofstream out(m.job_path);
    out << "# " << job_file << " with {value} = " << m.value << " and {sweep} = " << m.tag
        << " (runctl sweep --vary " << vary << ")\n"
        << m.job_text;
    if (ec || !out) return Fail(c, kRunctlFailure, "cannot write " + m.job_path);
  }
  std::ostream& os = *c.out;
  if (!c.json) {
    os << "sweep of " << name << " over " << values.size() << " values, " << side_by_side
       << " at a time, in " << root << "\n";
  }
  // Start members as slots free up; each member's holdfastd runs its job to
  // the end (restarts, checkpoints, lineage) as a run started by hand would.
  size_t next = 0, running = 0;
  std::map<pid_t, Member*> by_pid;
  while (next < members.size() || running > 0) {
    while (next < members.size() && running < static_cast<size_t>(side_by_side)) {
      Member& m = members[next++];
      if (Status s = Start(daemon, &m); !s.ok()) {
        m.exit = 127;
        *c.err << "runctl: " << s.message() << "\n";
        continue;
      }
      by_pid[m.pid] = &m;
      ++running;
      if (!c.json) os << "  started " << m.tag << " (holdfastd pid " << m.pid << ", log " << m.dir << "/holdfastd.log)\n" << std::flush;
    }
    if (running == 0) break;
    int ws = 0;
    const pid_t pid = waitpid(-1, &ws, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      return Fail(c, kRunctlFailure, std::string("waiting for the members: ") + std::strerror(errno));
    }
    auto it = by_pid.find(pid);
    if (it == by_pid.end()) continue;
    Member& m = *it->second;
    m.exit = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    by_pid.erase(it);
    --running;
    if (!c.json) os << "  " << m.tag << " ended: holdfastd exit " << m.exit << "\n" << std::flush;
  }
  std::vector<std::string> failed;
  std::vector<std::string> dirs;
  for (const Member& m : members) {
    if (m.exit != 0) failed.push_back(m.tag + " (exit " + std::to_string(m.exit) + ")");
    dirs.push_back(m.dir);
  }
  if (!c.json) os << "\n";
  const int compared = CmdCompare(c, dirs, metric, root + "/compare.html");
  if (!failed.empty()) {
    return Fail(c, kRunctlFailure, "members that did not succeed: " + Join(failed, ", ") +
                                       " (runctl --run-dir MEMBER_DIR triage latest says why)");
  }
  return compared;
}

}  // namespace holdfast
