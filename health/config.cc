#include "health/config.h"

#include <cmath>
#include <filesystem>
#include <functional>
#include <sstream>

#include <toml++/toml.h>

namespace holdfast::health {
namespace {

enum class Kind { kInt, kFloat, kString, kStringList };

// One row per key of [health]: parsing and the error messages come from this table.
struct KeyDef {
  const char* key;
  Kind kind;
  double lo;
  double hi;
  std::function<void(HealthConfig&, const toml::node&)> set;
};

#define HF_HEALTH_INT(field, lo, hi) \
  KeyDef{#field, Kind::kInt, lo, hi, [](HealthConfig& c, const toml::node& n) { c.field = n.as_integer()->get(); }}
#define HF_HEALTH_FLOAT(field, lo, hi)                                                               \
  KeyDef{#field, Kind::kFloat, lo, hi, [](HealthConfig& c, const toml::node& n) {                    \
           c.field = n.is_integer() ? static_cast<double>(n.as_integer()->get())                     \
                                    : n.as_floating_point()->get();                                  \
         }}
#define HF_HEALTH_STRING(field) \
  KeyDef{#field, Kind::kString, 0, 0, [](HealthConfig& c, const toml::node& n) { c.field = n.as_string()->get(); }}
#define HF_HEALTH_LIST(field)                                                                        \
  KeyDef{#field, Kind::kStringList, 0, 0, [](HealthConfig& c, const toml::node& n) {                 \
           c.field.clear();                                                                          \
           for (const toml::node& e : *n.as_array()) c.field.push_back(e.as_string()->get());        \
         }}

const std::vector<KeyDef>& Schema() {
  static const std::vector<KeyDef> kSchema = {
      HF_HEALTH_INT(expected_gpus, 0, 64),
      HF_HEALTH_INT(gpu_uncorrected_ecc_max, 0, 1e12),
      HF_HEALTH_INT(gpu_retired_pages_max, 0, 1e6),
      HF_HEALTH_INT(memtest_mb, 0, 1 << 20),
      HF_HEALTH_FLOAT(gemm_tflops_min, 0, 1e6),
      HF_HEALTH_INT(gemm_size, 256, 65536),
      HF_HEALTH_FLOAT(nccl_busbw_gbps_min, 0, 1e6),
      HF_HEALTH_INT(nccl_bytes, 1024, 1LL << 36),
      HF_HEALTH_FLOAT(gpu_probe_timeout_s, 1, 86400),
      HF_HEALTH_LIST(ib_devices),
      HF_HEALTH_INT(expected_ib_ports, 0, 1024),
      HF_HEALTH_FLOAT(ib_rate_gbps_min, 0, 1e5),
      HF_HEALTH_INT(ib_link_downed_max, 0, 1e12),
      HF_HEALTH_INT(ib_link_recovery_max, 0, 1e12),
      HF_HEALTH_FLOAT(ib_error_warn_per_min, 0, 1e12),
      HF_HEALTH_FLOAT(ib_error_fail_per_min, 0, 1e12),
      HF_HEALTH_FLOAT(ib_xmit_discards_warn_per_min, 0, 1e15),
      HF_HEALTH_FLOAT(ib_sample_seconds, 0, 600),
      HF_HEALTH_FLOAT(min_free_memory_gb, 0, 1e6),
      HF_HEALTH_STRING(checkpoint_dir),
      HF_HEALTH_FLOAT(checkpoint_min_free_gb, 0, 1e9),
      HF_HEALTH_INT(checkpoint_write_mb, 0, 1 << 20),
      HF_HEALTH_FLOAT(checkpoint_write_warn_mbps, 0, 1e9),
      HF_HEALTH_FLOAT(checkpoint_write_fail_mbps, 0, 1e9),
      HF_HEALTH_LIST(required_devices),
      HF_HEALTH_LIST(required_mounts),
      HF_HEALTH_INT(cpu_allreduce_elements, 1, 1LL << 30),
      HF_HEALTH_FLOAT(cpu_allreduce_timeout_s, 0.1, 3600),
  };
  return kSchema;
}

std::string Where(const std::string& source, const toml::source_region& src) {
  std::string where = source;
  if (src.begin.line > 0) where += ":" + std::to_string(src.begin.line);
  return where;
}

std::string KnownKeys() {
  std::string out;
  for (const KeyDef& d : Schema()) out += (out.empty() ? "" : ", ") + std::string(d.key);
  return out + ", [health.policy], [health.fail_actions]";
}

Status CheckType(const KeyDef& d, const toml::node& node, const std::string& where) {
  const std::string name = std::string("health.") + d.key;
  std::ostringstream range;
  range << " between " << d.lo << " and " << d.hi;
  switch (d.kind) {
    case Kind::kInt: {
      if (!node.is_integer()) return InvalidArgumentError(where + ": key '" + name + "' must be an integer");
      const int64_t x = node.as_integer()->get();
      if (static_cast<double>(x) < d.lo || static_cast<double>(x) > d.hi) {
        return InvalidArgumentError(where + ": key '" + name + "' must be" + range.str() + ", got " +
                                    std::to_string(x));
      }
      return Status::Ok();
    }
    case Kind::kFloat: {
      if (!node.is_number()) return InvalidArgumentError(where + ": key '" + name + "' must be a number");
      const double x = node.is_integer() ? static_cast<double>(node.as_integer()->get())
                                         : node.as_floating_point()->get();
      if (!std::isfinite(x) || x < d.lo || x > d.hi) {
        return InvalidArgumentError(where + ": key '" + name + "' must be" + range.str() + ", got " +
                                    FormatNumber(x));
      }
      return Status::Ok();
    }
    case Kind::kString:
      if (!node.is_string()) return InvalidArgumentError(where + ": key '" + name + "' must be a string");
      return Status::Ok();
    case Kind::kStringList: {
      const toml::array* a = node.as_array();
      bool ok = a != nullptr;
      if (ok) {
        for (const toml::node& e : *a) ok = ok && e.is_string();
      }
      if (!ok) {
        return InvalidArgumentError(where + ": key '" + name + "' must be a list of strings, e.g. [\"a\", \"b\"]");
      }
      return Status::Ok();
    }
  }
  return Status::Ok();
}

Status ApplyPolicy(const toml::table& table, const std::string& source, PolicyConfig* policy) {
  for (auto&& [key, node] : table) {
    const std::string k(key.str());
    const std::string where = Where(source, key.source());
    Action* target = k == "on_warn" ? &policy->on_warn : k == "on_skipped" ? &policy->on_skipped : nullptr;
    if (target == nullptr) {
      return InvalidArgumentError(where + ": unknown key 'health.policy." + k +
                                  "' (known keys in [health.policy]: on_warn, on_skipped)");
    }
    if (!node.is_string()) {
      return InvalidArgumentError(where + ": key 'health.policy." + k + "' must be a string naming an action");
    }
    HF_ASSIGN_OR_RETURN(*target, ParseAction(node.as_string()->get(), where + ": key 'health.policy." + k + "'"));
  }
  return Status::Ok();
}

Status ApplyFailActions(const toml::table& table, const std::string& source, PolicyConfig* policy) {
  for (auto&& [key, node] : table) {
    const std::string k(key.str());
    const std::string where = Where(source, key.source());
    if (k.find('.') == std::string::npos) {
      return InvalidArgumentError(where + ": key '" + k + "' in [health.fail_actions] must be a check name like " +
                                  "\"ib.port_state\" (quoted)");
    }
    if (!node.is_string()) {
      return InvalidArgumentError(where + ": [health.fail_actions] \"" + k + "\" must be a string naming an action");
    }
    HF_ASSIGN_OR_RETURN(Action a,
                        ParseAction(node.as_string()->get(), where + ": [health.fail_actions] \"" + k + "\""));
    policy->fail_actions[k] = a;
  }
  return Status::Ok();
}

Result<HealthConfig> FromTable(const toml::table& root, const std::string& source) {
  HealthConfig config;
  const toml::node* section = root.get("health");
  if (section == nullptr) return config;
  const toml::table* health = section->as_table();
  if (health == nullptr) {
    return InvalidArgumentError(Where(source, section->source()) + ": 'health' must be a table ([health])");
  }
  for (auto&& [key, node] : *health) {
    const std::string k(key.str());
    const std::string where = Where(source, key.source());
    if (k == "policy" || k == "fail_actions") {
      if (!node.is_table()) return InvalidArgumentError(where + ": 'health." + k + "' must be a table");
      if (k == "policy") HF_RETURN_IF_ERROR(ApplyPolicy(*node.as_table(), source, &config.policy));
      if (k == "fail_actions") HF_RETURN_IF_ERROR(ApplyFailActions(*node.as_table(), source, &config.policy));
      continue;
    }
    const KeyDef* def = nullptr;
    for (const KeyDef& d : Schema()) {
      if (k == d.key) def = &d;
    }
    if (def == nullptr) {
      return InvalidArgumentError(where + ": unknown key 'health." + k + "' (known keys in [health]: " + KnownKeys() +
                                  ")");
    }
    HF_RETURN_IF_ERROR(CheckType(*def, node, where));
    def->set(config, node);
  }
  if (config.checkpoint_write_fail_mbps > config.checkpoint_write_warn_mbps) {
    return InvalidArgumentError(source + ": health.checkpoint_write_fail_mbps (" +
                                FormatNumber(config.checkpoint_write_fail_mbps) +
                                ") must not exceed health.checkpoint_write_warn_mbps (" +
                                FormatNumber(config.checkpoint_write_warn_mbps) + ")");
  }
  if (config.ib_error_fail_per_min > 0 && config.ib_error_fail_per_min < config.ib_error_warn_per_min) {
    return InvalidArgumentError(source + ": health.ib_error_fail_per_min must be 0 (off) or at least " +
                                "health.ib_error_warn_per_min");
  }
  return config;
}

}  // namespace

Result<HealthConfig> ParseHealthConfig(const std::string& toml_text, const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(toml_text, source);
  } catch (const toml::parse_error& e) {
    return InvalidArgumentError(Where(source, e.source()) + ": TOML syntax error: " + std::string(e.description()));
  }
  return FromTable(root, source);
}

Result<HealthConfig> LoadHealthConfig(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return NotFoundError("config file " + path + " does not exist (pass --config with a TOML file)");
  }
  if (std::filesystem::is_directory(path, ec)) {
    return InvalidArgumentError("config file " + path + " is a directory; pass a TOML file");
  }
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    return InvalidArgumentError(Where(path, e.source()) + ": TOML syntax error: " + std::string(e.description()));
  }
  return FromTable(root, path);
}

}  // namespace holdfast::health
