#include "daemon/job_config.h"

#include <algorithm>
#include <filesystem>

#include <toml++/toml.h>

#include "common/toml_reader.h"
#include "daemon/cluster_protocol.h"

namespace holdfast {

const char* RoleRestartName(RoleRestart restart) {
  return restart == RoleRestart::kAlone ? "alone" : "learner";
}

namespace {

bool IsRoleName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return false;
  }
  return true;
}

// [[roles]]: an array of tables, each one role group.
// Adds "section.key" for every key `r` asked for to *log (when not null).
void LogKeys(const TomlTableReader& r, const std::string& section, std::vector<std::string>* log) {
  if (log == nullptr) return;
  for (const std::string& k : r.keys_read()) {
    const std::string key = section + "." + k;
    if (std::find(log->begin(), log->end(), key) == log->end()) log->push_back(key);
  }
}

Status LoadRoles(const std::string& path, const toml::node& node, const toml::source_region& where,
                 std::vector<RoleConfig>* roles, std::vector<std::string>* keys) {
  const toml::array* array = node.as_array();
  if (array == nullptr || !array->is_array_of_tables()) {
    return InvalidArgumentError(TomlWhere(path, where) +
                                ": 'roles' must be an array of tables: declare each role group as [[roles]] "
                                "with name, command and count");
  }
  for (size_t i = 0; i < array->size(); ++i) {
    const toml::table& t = *array->get(i)->as_table();
    const std::string section = "roles[" + std::to_string(i) + "]";
    const std::string at = TomlWhere(path, t.source());
    TomlTableReader r(path, section, t);
    RoleConfig role;
    HF_RETURN_IF_ERROR(r.String("name", &role.name));
    HF_RETURN_IF_ERROR(r.StringArray("command", &role.command));
    HF_RETURN_IF_ERROR(r.Int("count", &role.count, 1, kMaxRoleCount));
    std::string restart = "alone";
    HF_RETURN_IF_ERROR(r.String("restart", &restart, "alone|learner"));
    role.restart = restart == "learner" ? RoleRestart::kLearner : RoleRestart::kAlone;
    HF_RETURN_IF_ERROR(r.Double("hang_s", &role.hang_s, 0, 86400));
    HF_RETURN_IF_ERROR(r.StringTable("env", &role.env));
    HF_RETURN_IF_ERROR(r.Int("restart_budget", &role.restart_budget, 0, 1000000));
    LogKeys(r, "roles", keys);
    HF_RETURN_IF_ERROR(r.RejectUnknown());
    const std::string name_at = t.get("name") != nullptr ? TomlWhere(path, t.get("name")->source()) : at;
    if (t.get("name") == nullptr) {
      return InvalidArgumentError(at + ": " + section + ".name is required: a name for the role group, e.g. "
                                  "name = \"rollout\" (lower-case letters, digits, '_' and '-')");
    }
    if (!IsRoleName(role.name)) {
      return InvalidArgumentError(name_at + ": key '" + section + ".name' must be 1-64 of a-z, 0-9, '_' and '-', got '" +
                                  role.name + "'");
    }
    if (role.name == "learner") {
      return InvalidArgumentError(name_at + ": key '" + section +
                                  ".name' cannot be 'learner': the learner is the [job] command's ranks; "
                                  "give this role another name");
    }
    for (const RoleConfig& other : *roles) {
      if (other.name == role.name) {
        return InvalidArgumentError(name_at + ": key '" + section + ".name': a role named '" + role.name +
                                    "' is already declared: role names must be unique");
      }
    }
    if (role.command.empty()) {
      return InvalidArgumentError(at + ": " + section + ".command is required for role '" + role.name +
                                  "': the program and arguments of one process, e.g. "
                                  "command = [\"build/rl/holdfast-rollout\", \"--config\", \"rl.toml\"]");
    }
    if (role.restart == RoleRestart::kLearner && t.get("restart_budget") != nullptr) {
      return InvalidArgumentError(TomlWhere(path, t.get("restart_budget")->source()) + ": key '" + section +
                                  ".restart_budget' is for restart = \"alone\" roles only: a restart = \"learner\" "
                                  "role's failures restart the learner and spend [supervise] restart_budget");
    }
    roles->push_back(std::move(role));
  }
  return Status::Ok();
}

// [recovery] (RecoveryConfig).
Status ReadRecovery(const toml::table& t, const std::string& path, RecoveryConfig* rc, std::vector<std::string>* keys) {
  TomlTableReader r(path, "recovery", t);
  HF_RETURN_IF_ERROR(r.Int("memory_budget_mb", &rc->memory_budget_mb, 0, int64_t{1} << 30));
  HF_RETURN_IF_ERROR(r.Int("snapshot_every", &rc->snapshot_every, 1, int64_t{1} << 50));
  HF_RETURN_IF_ERROR(r.Int("replica_mb_per_s", &rc->replica_mb_per_s, 0, int64_t{1} << 20));
  HF_RETURN_IF_ERROR(r.Int("replica_every", &rc->replica_every, 1, int64_t{1} << 20));
  HF_RETURN_IF_ERROR(r.String("memory_dir", &rc->memory_dir));
  HF_RETURN_IF_ERROR(r.Bool("warm_spares", &rc->warm_spares));
  if (rc->replica_every > (int64_t{1} << 50) / rc->snapshot_every) {
    const toml::node* at = t.get("replica_every") != nullptr ? t.get("replica_every") : t.get("snapshot_every");
    return InvalidArgumentError(TomlWhere(path, at->source()) + ": recovery.snapshot_every x recovery.replica_every (" +
                                std::to_string(rc->snapshot_every) + " x " + std::to_string(rc->replica_every) +
                                ") must be at most 2^50 steps; lower replica_every");
  }
  if (rc->memory_dir.empty() || rc->memory_dir[0] != '/') {
    return InvalidArgumentError(TomlWhere(path, t.get("memory_dir")->source()) +
                                ": key 'recovery.memory_dir' must be an absolute path on a tmpfs, e.g. "
                                "\"/dev/shm\", got '" + rc->memory_dir + "'");
  }
  LogKeys(r, "recovery", keys);
  return r.RejectUnknown();
}

Result<JobConfig> JobConfigFromTable(const toml::table& root, const std::string& path, std::string text,
                                     std::vector<std::string>* keys = nullptr) {
  JobConfig cfg;
  cfg.source = path;
  cfg.text = std::move(text);
  static const char* kSections = "[job], [supervise], [lineage], [recovery], [health], [[roles]]";
  for (auto&& [k, v] : root) {
    const std::string section(k.str());
    if (section == "roles") {
      HF_RETURN_IF_ERROR(LoadRoles(path, v, k.source(), &cfg.roles, keys));
      continue;
    }
    if (section != "job" && section != "supervise" && section != "lineage" && section != "recovery" &&
        section != "health") {
      return InvalidArgumentError(TomlWhere(path, k.source()) + ": unknown section '" + section +
                                  "' (known sections: " + kSections + ")");
    }
    if (!v.is_table()) return InvalidArgumentError(TomlWhere(path, k.source()) + ": '" + section + "' must be a table");
  }
  if (const toml::table* t = root["job"].as_table()) {
    TomlTableReader r(path, "job", *t);
    HF_RETURN_IF_ERROR(r.String("name", &cfg.name));
    HF_RETURN_IF_ERROR(r.StringArray("command", &cfg.command));
    HF_RETURN_IF_ERROR(r.Int("nproc", &cfg.nproc, 1, kMaxClusterNodeRanks));  // a node's ranks travel in one cluster message
    HF_RETURN_IF_ERROR(r.String("workdir", &cfg.workdir));
    HF_RETURN_IF_ERROR(r.StringTable("env", &cfg.env));
    HF_RETURN_IF_ERROR(r.String("checkpoint_dir", &cfg.checkpoint_dir));
    HF_RETURN_IF_ERROR(r.Int("tokens_per_step", &cfg.tokens_per_step, 0, int64_t{1} << 50));
    HF_RETURN_IF_ERROR(r.Int("min_nodes", &cfg.min_nodes, 0, 1 << 20));
    HF_RETURN_IF_ERROR(r.Int("max_nodes", &cfg.max_nodes, 0, 1 << 20));
    if (cfg.max_nodes > 0 && cfg.min_nodes > cfg.max_nodes) {
      return InvalidArgumentError(TomlWhere(path, t->get("min_nodes")->source()) + ": job.min_nodes = " +
                                  std::to_string(cfg.min_nodes) + " is more than job.max_nodes = " +
                                  std::to_string(cfg.max_nodes) + ": the run could never train");
    }
    LogKeys(r, "job", keys);
    HF_RETURN_IF_ERROR(r.RejectUnknown());
  }
  if (const toml::table* t = root["supervise"].as_table()) {
    SuperviseConfig& s = cfg.supervise;
    TomlTableReader r(path, "supervise", *t);
    HF_RETURN_IF_ERROR(r.Int("poll_ms", &s.poll_ms, 10, 60000));
    HF_RETURN_IF_ERROR(r.Int("report_ms", &s.report_ms, 10, 60000));
    HF_RETURN_IF_ERROR(r.Double("startup_timeout_s", &s.startup_timeout_s, 1, 86400));
    s.startup_timeout_given = t->contains("startup_timeout_s");
    HF_RETURN_IF_ERROR(r.Double("hang_factor", &s.hang_factor, 1.5, 1000));
    HF_RETURN_IF_ERROR(r.Double("hang_min_s", &s.hang_min_s, 0.5, 86400));
    HF_RETURN_IF_ERROR(r.Double("stopped_hang_s", &s.stopped_hang_s, 0, 86400));
    HF_RETURN_IF_ERROR(r.Double("checkpoint_allowance_s", &s.checkpoint_allowance_s, 1, 86400));
    HF_RETURN_IF_ERROR(r.Double("eval_allowance_s", &s.eval_allowance_s, 1, 86400));
    HF_RETURN_IF_ERROR(r.Int("restart_budget", &s.restart_budget, 0, 1000000));
    HF_RETURN_IF_ERROR(r.Double("backoff_initial_s", &s.backoff_initial_s, 0, 3600));
    HF_RETURN_IF_ERROR(r.Double("backoff_max_s", &s.backoff_max_s, 0, 86400));
    HF_RETURN_IF_ERROR(r.Double("term_grace_s", &s.term_grace_s, 0, 3600));
    HF_RETURN_IF_ERROR(r.Double("exit_grace_s", &s.exit_grace_s, 0, 86400));
    HF_RETURN_IF_ERROR(r.Int("max_requeues", &s.max_requeues, 0, 1000000));
    HF_RETURN_IF_ERROR(r.Int("max_excluded_nodes", &s.max_excluded_nodes, 0, 1000000));
    HF_RETURN_IF_ERROR(r.Double("node_timeout_s", &s.node_timeout_s, 0, 86400));
    HF_RETURN_IF_ERROR(r.Double("preempt_margin_s", &s.preempt_margin_s, 0, 86400));
    HF_RETURN_IF_ERROR(r.String("progress_dir", &s.progress_dir));
    HF_RETURN_IF_ERROR(r.Bool("health_prelaunch", &s.health_prelaunch));
    HF_RETURN_IF_ERROR(r.Double("health_poll_s", &s.health_poll_s, 0, 86400));
    HF_RETURN_IF_ERROR(r.String("health_sysfs_root", &s.health_sysfs_root));
    HF_RETURN_IF_ERROR(r.Double("straggler_factor", &s.straggler_factor, 0, 1000));
    HF_RETURN_IF_ERROR(r.Double("straggler_min_duration_s", &s.straggler_min_duration_s, 0, 86400));
    HF_RETURN_IF_ERROR(r.Double("stack_timeout_s", &s.stack_timeout_s, 0, 600));
    HF_RETURN_IF_ERROR(r.String("stack_tool", &s.stack_tool));
    if (s.stack_tool.empty()) {
      return InvalidArgumentError(TomlWhere(path, t->get("stack_tool")->source()) +
                                  ": key 'supervise.stack_tool' is empty: name the stack tool (\"eu-stack\", or a "
                                  "path to it), or set supervise.stack_timeout_s = 0 to capture no stacks");
    }
    if (s.straggler_factor > 0 && s.straggler_factor < 1.1) {  // below 1.1 every run has a straggler
      return InvalidArgumentError(TomlWhere(path, t->get("straggler_factor")->source()) +
                                  ": key 'supervise.straggler_factor' must be 0 (off) or between 1.1 and 1000, got " +
                                  FormatTomlNumber(s.straggler_factor));
    }
    LogKeys(r, "supervise", keys);
    HF_RETURN_IF_ERROR(r.RejectUnknown());
  }
  if (const toml::table* t = root["lineage"].as_table()) {
    TomlTableReader r(path, "lineage", *t);
    HF_RETURN_IF_ERROR(r.Enum("journal_mode",
                              {{"wal", JournalMode::kWal}, {"delete", JournalMode::kDelete},
                               {"truncate", JournalMode::kTruncate}},
                              &cfg.journal_mode));
    HF_RETURN_IF_ERROR(r.Bool("host_history", &cfg.host_history));
    HF_RETURN_IF_ERROR(r.String("history_dir", &cfg.history_dir));
    LogKeys(r, "lineage", keys);
    HF_RETURN_IF_ERROR(r.RejectUnknown());
  }
  if (const toml::table* t = root["recovery"].as_table()) {
    HF_RETURN_IF_ERROR(ReadRecovery(*t, path, &cfg.recovery, keys));
  }
  if (cfg.command.empty()) {
    return InvalidArgumentError(path + ": job.command is required: the program and arguments of one rank, e.g. "
                                "command = [\"build/trainer/holdfast-train\", \"--config\", \"run.toml\"]");
  }
  // A program that does not know the spare protocol would run as a rank-less
  // process (world 1, rank 0) while it "waits": never start one by accident.
  if (cfg.recovery.warm_spares && std::filesystem::path(cfg.command[0]).filename() != "holdfast-train") {
    return InvalidArgumentError(path + ": recovery.warm_spares = true starts [job] command as waiting spares, and "
                                "only holdfast-train speaks that protocol (docs/warm-restarts.md); the command runs '" +
                                cfg.command[0] + "': remove warm_spares or set it to false");
  }
  return cfg;
}

}  // namespace

Result<JobConfig> LoadJobConfig(const std::string& path) {
  std::string text;
  HF_ASSIGN_OR_RETURN(toml::table root, ParseTomlFile(path, &text));
  return JobConfigFromTable(root, path, std::move(text));
}

void ResolveSizedDefaults(JobConfig* job, int world_size) {
  if (!job->supervise.startup_timeout_given) {
    job->supervise.startup_timeout_s = kStartupBaseS + kStartupPerRankS * std::max(1, world_size);
  }
}

std::vector<std::string> JobConfigKeys() {
  // A job with every section once: each reader asks for all of its keys.
  const std::string text =
      "[job]\ncommand = [\"x\"]\n[supervise]\n[lineage]\n[recovery]\n[[roles]]\nname = \"r\"\ncommand = [\"x\"]\n";
  std::vector<std::string> keys;
  auto root = ParseToml(text, "keys");
  if (root.ok()) (void)JobConfigFromTable(*root, "keys", text, &keys);
  return keys;
}

Result<JobConfig> LoadJobConfigText(const std::string& text, const std::string& source) {
  HF_ASSIGN_OR_RETURN(toml::table root, ParseToml(text, source));
  return JobConfigFromTable(root, source, text);
}

}  // namespace holdfast
