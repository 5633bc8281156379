#include "daemon/launch_flags.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "common/toml_reader.h"
#include "daemon/cluster_protocol.h"  // kMaxClusterNodeRanks
#include "daemon/job_config.h"
#include "scheduler/launch_plan.h"

namespace holdfast {
namespace {

constexpr int kMaxNodes = 100000;  // as holdfastd --nodes

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Result<int> ParseCount(const std::string& text, const std::string& flag, int lo, int hi) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < lo || v > hi) {
    return InvalidArgumentError(flag + " " + text + ": expected a whole number between " + std::to_string(lo) +
                                " and " + std::to_string(hi));
  }
  return static_cast<int>(v);
}

// The rank command the flags give: -m MODULE or a .py script run under the
// interpreter, as torchrun does; anything else as it is.
Result<std::vector<std::string>> RankCommand(const CommandLineJob& f) {
  std::vector<std::string> cmd;
  const bool python_script = !f.command.empty() && EndsWith(f.command[0], ".py") && !f.no_python;
  if (!f.module.empty() || python_script) {
    if (f.python.empty()) {
      return InvalidArgumentError("python3 is not on PATH, so " +
                                  (f.module.empty() ? f.command[0] : "-m " + f.module) +
                                  " cannot run: install python3, or give the interpreter after --, e.g. "
                                  "-- /usr/bin/python3 train.py");
    }
    cmd.push_back(f.python);
    if (!f.module.empty()) {
      if (f.no_python) return InvalidArgumentError("-m and --no-python exclude each other: -m runs a Python module");
      cmd.push_back("-m");
      cmd.push_back(f.module);
    }
  }
  cmd.insert(cmd.end(), f.command.begin(), f.command.end());
  return cmd;
}

}  // namespace

bool HasCommandLineJob(const CommandLineJob& f) {
  return !f.command.empty() || !f.module.empty() || !f.nproc_per_node.empty() || !f.nnodes.empty() ||
         !f.name.empty() || !f.checkpoint_dir.empty() || f.max_restarts >= 0;
}

Result<NodeRange> ParseNodeRange(const std::string& text) {
  const size_t colon = text.find(':');
  NodeRange r;
  if (colon == std::string::npos) {
    HF_ASSIGN_OR_RETURN(r.min, ParseCount(text, "--nnodes", 1, kMaxNodes));
    r.max = r.min;
    return r;
  }
  HF_ASSIGN_OR_RETURN(r.min, ParseCount(text.substr(0, colon), "--nnodes (MIN of MIN:MAX)", 1, kMaxNodes));
  HF_ASSIGN_OR_RETURN(r.max, ParseCount(text.substr(colon + 1), "--nnodes (MAX of MIN:MAX)", 1, kMaxNodes));
  if (r.min > r.max) {
    return InvalidArgumentError("--nnodes " + text + ": MIN is more than MAX; an elastic run trains on MIN to MAX nodes");
  }
  return r;
}

Result<std::string> JobTextFromFlags(const CommandLineJob& f, const std::string& base_text,
                                     const std::string& base_source) {
  toml::table root;
  if (!base_text.empty()) {
    HF_ASSIGN_OR_RETURN(root, ParseToml(base_text, base_source));
  } else if (f.command.empty() && f.module.empty()) {
    return InvalidArgumentError(
        "no job: give the command after the flags (holdfastd --nproc-per-node 8 train.py ARGS, or -- PROGRAM ARGS), "
        "or --config job.toml");
  }
  if (root.contains("job") && !root["job"].is_table()) {
    return InvalidArgumentError(base_source + ": 'job' must be a table");
  }
  toml::table& job = *root.emplace("job", toml::table{}).first->second.as_table();
  if (!f.command.empty() || !f.module.empty()) {
    HF_ASSIGN_OR_RETURN(std::vector<std::string> cmd, RankCommand(f));
    toml::array arr;
    for (const std::string& a : cmd) arr.push_back(a);
    job.insert_or_assign("command", std::move(arr));
    if (base_text.empty() && !f.workdir.empty()) job.insert_or_assign("workdir", f.workdir);
  }
  if (!f.name.empty()) {
    job.insert_or_assign("name", f.name);
  } else if (!job.contains("name")) {
    const std::vector<std::string> cmd =
        f.module.empty() ? f.command : std::vector<std::string>{"python3", "-m", f.module};
    if (!cmd.empty()) job.insert_or_assign("name", JobNameFromCommand(cmd));
  }
  if (!f.nproc_per_node.empty()) {
    int nproc = 0;
    if (f.nproc_per_node == "gpu") {
      if (f.visible_gpus <= 0) {
        return InvalidArgumentError("--nproc-per-node gpu: no GPU is visible on this node (CUDA_VISIBLE_DEVICES and "
                                    "/proc/driver/nvidia/gpus name none); give a number of ranks instead");
      }
      nproc = f.visible_gpus;
    } else {
      HF_ASSIGN_OR_RETURN(nproc, ParseCount(f.nproc_per_node, "--nproc-per-node", 1, kMaxClusterNodeRanks));
    }
    job.insert_or_assign("nproc", nproc);
  }
  if (!f.nnodes.empty()) {
    HF_ASSIGN_OR_RETURN(NodeRange r, ParseNodeRange(f.nnodes));
    if (r.min != r.max) {  // elastic; a fixed count is the allocation's (or --nodes')
      job.insert_or_assign("min_nodes", r.min);
      job.insert_or_assign("max_nodes", r.max);
    }
  }
  if (!f.checkpoint_dir.empty()) job.insert_or_assign("checkpoint_dir", f.checkpoint_dir);
  if (f.max_restarts >= 0) {
    if (root.contains("supervise") && !root["supervise"].is_table()) {
      return InvalidArgumentError(base_source + ": 'supervise' must be a table");
    }
    toml::table& sup = *root.emplace("supervise", toml::table{}).first->second.as_table();
    sup.insert_or_assign("restart_budget", f.max_restarts);
  }
  std::ostringstream out;
  out << "# holdfastd's job, from its command line" << (base_text.empty() ? "" : " on top of " + base_source)
      << " (docs/job-file.md)\n"
      << root << "\n";
  return out.str();
}

std::string DefaultRunDir(const std::string& job_name, const std::string& cwd) {
  const char* submit = std::getenv("SLURM_SUBMIT_DIR");
  const bool in_slurm = std::getenv("SLURM_JOB_ID") != nullptr && submit != nullptr && *submit != '\0';
  const std::string base = in_slurm ? std::string(submit) : cwd;
  return (std::filesystem::path(base) / "holdfast-runs" / (job_name.empty() ? "run" : job_name)).string();
}

std::string JobNameFromCommand(const std::vector<std::string>& command) {
  std::string raw;
  for (size_t i = 0; i < command.size() && raw.empty(); ++i) {
    const std::string& a = command[i];
    if (a == "-m" && i + 1 < command.size()) {
      raw = command[i + 1];
    } else if (EndsWith(a, ".py")) {
      raw = std::filesystem::path(a).stem().string();
    }
  }
  if (raw.empty() && !command.empty()) raw = std::filesystem::path(command[0]).filename().string();
  std::string name;
  for (char c : raw) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-') name += c;
  }
  while (!name.empty() && name[0] == '.') name.erase(0, 1);  // never a hidden or "." / ".." directory
  return name.empty() ? "run" : name;
}

int CountVisibleGpus(const char* cuda_visible_devices, const std::string& proc_root) {
  if (cuda_visible_devices != nullptr) {
    auto devices = ParseVisibleDevices(cuda_visible_devices);
    return devices.ok() ? static_cast<int>(devices->size()) : 0;
  }
  std::error_code ec;
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(proc_root + "/driver/nvidia/gpus", ec)) {
    (void)e;
    ++n;
  }
  return n;
}

std::string FindOnPath(const std::string& program, const char* path_env) {
  if (program.find('/') != std::string::npos) return program;
  std::stringstream dirs(path_env ? path_env : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    const std::string candidate = dir + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) {
      std::error_code ec;
      const auto abs = std::filesystem::absolute(candidate, ec);
      return ec ? candidate : abs.string();
    }
  }
  return "";
}

}  // namespace holdfast
