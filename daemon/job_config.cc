#include "daemon/job_config.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <toml++/toml.h>

namespace holdfast {
namespace {

std::string At(const std::string& file, const toml::source_region& src) {
  return file + ":" + std::to_string(src.begin.line);
}

// Reads one table's keys with typed setters; unknown keys are errors.
class TableReader {
 public:
  TableReader(const std::string& file, const std::string& section, const toml::table& table)
      : file_(file), section_(section), table_(table) {}

  Status Int(const char* key, int* out, int lo, int hi) {
    const toml::node* n = Find(key);
    if (n == nullptr) return Status::Ok();
    if (!n->is_integer()) return TypeError(key, *n, "an integer");
    const int64_t v = n->as_integer()->get();
    if (v < lo || v > hi) return RangeError(key, *n, std::to_string(lo), std::to_string(hi));
    *out = static_cast<int>(v);
    return Status::Ok();
  }
  Status Double(const char* key, double* out, double lo, double hi) {
    const toml::node* n = Find(key);
    if (n == nullptr) return Status::Ok();
    double v;
    if (n->is_floating_point()) {
      v = n->as_floating_point()->get();
    } else if (n->is_integer()) {
      v = static_cast<double>(n->as_integer()->get());
    } else {
      return TypeError(key, *n, "a number");
    }
    if (!(v >= lo && v <= hi)) {
      std::ostringstream a, b;
      a << lo;
      b << hi;
      return RangeError(key, *n, a.str(), b.str());
    }
    *out = v;
    return Status::Ok();
  }
  Status String(const char* key, std::string* out, const char* choices = nullptr) {
    const toml::node* n = Find(key);
    if (n == nullptr) return Status::Ok();
    if (!n->is_string()) return TypeError(key, *n, "a string");
    std::string v = n->as_string()->get();
    if (choices != nullptr) {
      std::string all = std::string("|") + choices + "|";
      if (all.find("|" + v + "|") == std::string::npos) {
        return InvalidArgumentError(At(file_, n->source()) + ": key '" + section_ + "." + key + "' must be one of " +
                                    choices + ", got '" + v + "'");
      }
    }
    *out = v;
    return Status::Ok();
  }
  Status Bool(const char* key, bool* out) {
    const toml::node* n = Find(key);
    if (n == nullptr) return Status::Ok();
    if (!n->is_boolean()) return TypeError(key, *n, "true or false");
    *out = n->as_boolean()->get();
    return Status::Ok();
  }
  Status StringArray(const char* key, std::vector<std::string>* out) {
    const toml::node* n = Find(key);
    if (n == nullptr) return Status::Ok();
    const toml::array* arr = n->as_array();
    if (arr == nullptr) return TypeError(key, *n, "an array of strings");
    out->clear();
    for (const toml::node& e : *arr) {
      if (!e.is_string()) return TypeError(key, e, "an array of strings");
      out->push_back(e.as_string()->get());
    }
    return Status::Ok();
  }
  Status StringTable(const char* key, std::map<std::string, std::string>* out) {
    const toml::node* n = Find(key);
    if (n == nullptr) return Status::Ok();
    const toml::table* t = n->as_table();
    if (t == nullptr) return TypeError(key, *n, "a table of strings");
    for (auto&& [k, v] : *t) {
      if (!v.is_string()) return TypeError(key, v, "a table of strings");
      (*out)[std::string(k.str())] = v.as_string()->get();
    }
    return Status::Ok();
  }
  // After all reads: anything not read is an unknown key.
  Status RejectUnknown(const std::string& known) const {
    for (auto&& [k, v] : table_) {
      const std::string key(k.str());
      if (read_.find("|" + key + "|") == std::string::npos) {
        return InvalidArgumentError(At(file_, k.source()) + ": unknown key '" + section_ + "." + key +
                                    "' (known keys in [" + section_ + "]: " + known + ")");
      }
    }
    return Status::Ok();
  }

 private:
  const toml::node* Find(const char* key) {
    read_ += std::string("|") + key + "|";
    return table_.get(key);
  }
  Status TypeError(const char* key, const toml::node& n, const char* what) const {
    return InvalidArgumentError(At(file_, n.source()) + ": key '" + section_ + "." + key + "' must be " + what);
  }
  Status RangeError(const char* key, const toml::node& n, const std::string& lo, const std::string& hi) const {
    return InvalidArgumentError(At(file_, n.source()) + ": key '" + section_ + "." + key + "' must be between " + lo +
                                " and " + hi);
  }

  const std::string& file_;
  std::string section_;
  const toml::table& table_;
  std::string read_;
};

}  // namespace

Result<JobConfig> LoadJobConfig(const std::string& path) {
  JobConfig cfg;
  cfg.source = path;
  std::ifstream in(path);
  if (!in) return NotFoundError("job config " + path + " cannot be read (pass --config with a TOML file, see examples/)");
  std::stringstream ss;
  ss << in.rdbuf();
  cfg.text = ss.str();
  toml::table root;
  try {
    root = toml::parse(cfg.text, path);
  } catch (const toml::parse_error& e) {
    return InvalidArgumentError(At(path, e.source()) + ": TOML syntax error: " + std::string(e.description()));
  }
  static const char* kSections = "[job], [supervise], [lineage], [health]";
  for (auto&& [k, v] : root) {
    const std::string section(k.str());
    if (section != "job" && section != "supervise" && section != "lineage" && section != "health") {
      return InvalidArgumentError(At(path, k.source()) + ": unknown section '" + section + "' (known sections: " +
                                  kSections + ")");
    }
    if (!v.is_table()) return InvalidArgumentError(At(path, k.source()) + ": '" + section + "' must be a table");
  }
  if (const toml::table* t = root["job"].as_table()) {
    TableReader r(path, "job", *t);
    HF_RETURN_IF_ERROR(r.String("name", &cfg.name));
    HF_RETURN_IF_ERROR(r.StringArray("command", &cfg.command));
    HF_RETURN_IF_ERROR(r.Int("nproc", &cfg.nproc, 1, 4096));
    HF_RETURN_IF_ERROR(r.String("workdir", &cfg.workdir));
    HF_RETURN_IF_ERROR(r.StringTable("env", &cfg.env));
    HF_RETURN_IF_ERROR(r.String("checkpoint_dir", &cfg.checkpoint_dir));
    HF_RETURN_IF_ERROR(r.RejectUnknown("name, command, nproc, workdir, env, checkpoint_dir"));
  }
  if (const toml::table* t = root["supervise"].as_table()) {
    SuperviseConfig& s = cfg.supervise;
    TableReader r(path, "supervise", *t);
    HF_RETURN_IF_ERROR(r.Int("poll_ms", &s.poll_ms, 10, 60000));
    HF_RETURN_IF_ERROR(r.Double("startup_timeout_s", &s.startup_timeout_s, 1, 86400));
    HF_RETURN_IF_ERROR(r.Double("hang_factor", &s.hang_factor, 1.5, 1000));
    HF_RETURN_IF_ERROR(r.Double("hang_min_s", &s.hang_min_s, 0.5, 86400));
    HF_RETURN_IF_ERROR(r.Double("checkpoint_allowance_s", &s.checkpoint_allowance_s, 1, 86400));
    HF_RETURN_IF_ERROR(r.Double("eval_allowance_s", &s.eval_allowance_s, 1, 86400));
    HF_RETURN_IF_ERROR(r.Int("restart_budget", &s.restart_budget, 0, 1000000));
    HF_RETURN_IF_ERROR(r.Double("backoff_initial_s", &s.backoff_initial_s, 0, 3600));
    HF_RETURN_IF_ERROR(r.Double("backoff_max_s", &s.backoff_max_s, 0, 86400));
    HF_RETURN_IF_ERROR(r.Double("term_grace_s", &s.term_grace_s, 0, 3600));
    HF_RETURN_IF_ERROR(r.String("progress_dir", &s.progress_dir));
    HF_RETURN_IF_ERROR(r.Bool("health_prelaunch", &s.health_prelaunch));
    HF_RETURN_IF_ERROR(r.Double("health_poll_s", &s.health_poll_s, 0, 86400));
    HF_RETURN_IF_ERROR(r.String("health_sysfs_root", &s.health_sysfs_root));
    HF_RETURN_IF_ERROR(r.RejectUnknown(
        "poll_ms, startup_timeout_s, hang_factor, hang_min_s, checkpoint_allowance_s, eval_allowance_s, "
        "restart_budget, backoff_initial_s, backoff_max_s, term_grace_s, progress_dir, health_prelaunch, "
        "health_poll_s, health_sysfs_root"));
  }
  if (const toml::table* t = root["lineage"].as_table()) {
    TableReader r(path, "lineage", *t);
    HF_RETURN_IF_ERROR(r.String("journal_mode", &cfg.journal_mode, "wal|delete|truncate"));
    HF_RETURN_IF_ERROR(r.RejectUnknown("journal_mode"));
  }
  if (cfg.command.empty()) {
    return InvalidArgumentError(path + ": job.command is required: the program and arguments of one rank, e.g. "
                                "command = [\"build/trainer/holdfast-train\", \"--config\", \"run.toml\"]");
  }
  return cfg;
}

}  // namespace holdfast
