#include "health/config.h"

#include <toml++/toml.h>

#include "common/toml_reader.h"

namespace holdfast::health {
namespace {

// health/ has always said "list"; the job config says "array".
constexpr const char* kListOfStrings = "a list of strings, e.g. [\"a\", \"b\"]";

Status ApplyPolicy(const toml::table& table, const std::string& source, PolicyConfig* policy) {
  for (auto&& [key, node] : table) {
    const std::string k(key.str());
    const std::string where = TomlWhere(source, key.source());
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
    const std::string where = TomlWhere(source, key.source());
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

Result<HealthConfig> FromTable(const toml::table& root, const std::string& source,
                               std::vector<std::string>* keys = nullptr) {
  HealthConfig c;
  const toml::node* section = root.get("health");
  if (section == nullptr) return c;
  const toml::table* health = section->as_table();
  if (health == nullptr) {
    return InvalidArgumentError(TomlWhere(source, section->source()) + ": 'health' must be a table ([health])");
  }
  TomlTableReader r(source, "health", *health);
  HF_RETURN_IF_ERROR(r.Int("expected_gpus", &c.expected_gpus, 0, 64));
  HF_RETURN_IF_ERROR(r.Int("gpu_uncorrected_ecc_max", &c.gpu_uncorrected_ecc_max, 0, 1'000'000'000'000));
  HF_RETURN_IF_ERROR(r.Int("gpu_retired_pages_max", &c.gpu_retired_pages_max, 0, 1'000'000));
  HF_RETURN_IF_ERROR(r.Int("memtest_mb", &c.memtest_mb, 0, 1 << 20));
  HF_RETURN_IF_ERROR(r.Double("gemm_tflops_min", &c.gemm_tflops_min, 0, 1e6));
  HF_RETURN_IF_ERROR(r.Int("gemm_size", &c.gemm_size, 256, 65536));
  HF_RETURN_IF_ERROR(r.Double("nccl_busbw_gbps_min", &c.nccl_busbw_gbps_min, 0, 1e6));
  HF_RETURN_IF_ERROR(r.Int("nccl_bytes", &c.nccl_bytes, 1024, int64_t{1} << 36));
  HF_RETURN_IF_ERROR(r.Double("gpu_probe_timeout_s", &c.gpu_probe_timeout_s, 1, 86400));
  HF_RETURN_IF_ERROR(r.StringArray("ib_devices", &c.ib_devices, kListOfStrings));
  HF_RETURN_IF_ERROR(r.Int("expected_ib_ports", &c.expected_ib_ports, 0, 1024));
  HF_RETURN_IF_ERROR(r.Double("ib_rate_gbps_min", &c.ib_rate_gbps_min, 0, 1e5));
  HF_RETURN_IF_ERROR(r.Int("ib_link_downed_max", &c.ib_link_downed_max, 0, 1'000'000'000'000));
  HF_RETURN_IF_ERROR(r.Int("ib_link_recovery_max", &c.ib_link_recovery_max, 0, 1'000'000'000'000));
  HF_RETURN_IF_ERROR(r.Double("ib_error_warn_per_min", &c.ib_error_warn_per_min, 0, 1e12));
  HF_RETURN_IF_ERROR(r.Double("ib_error_fail_per_min", &c.ib_error_fail_per_min, 0, 1e12));
  HF_RETURN_IF_ERROR(r.Double("ib_xmit_discards_warn_per_min", &c.ib_xmit_discards_warn_per_min, 0, 1e15));
  HF_RETURN_IF_ERROR(r.Double("ib_sample_seconds", &c.ib_sample_seconds, 0, 600));
  HF_RETURN_IF_ERROR(r.Double("min_free_memory_gb", &c.min_free_memory_gb, 0, 1e6));
  HF_RETURN_IF_ERROR(r.String("checkpoint_dir", &c.checkpoint_dir));
  HF_RETURN_IF_ERROR(r.Double("checkpoint_min_free_gb", &c.checkpoint_min_free_gb, 0, 1e9));
  HF_RETURN_IF_ERROR(r.Int("checkpoint_write_mb", &c.checkpoint_write_mb, 0, 1 << 20));
  HF_RETURN_IF_ERROR(r.Double("checkpoint_write_warn_mbps", &c.checkpoint_write_warn_mbps, 0, 1e9));
  HF_RETURN_IF_ERROR(r.Double("checkpoint_write_fail_mbps", &c.checkpoint_write_fail_mbps, 0, 1e9));
  HF_RETURN_IF_ERROR(r.StringArray("required_devices", &c.required_devices, kListOfStrings));
  HF_RETURN_IF_ERROR(r.StringArray("required_mounts", &c.required_mounts, kListOfStrings));
  HF_RETURN_IF_ERROR(r.Int("cpu_allreduce_elements", &c.cpu_allreduce_elements, 1, int64_t{1} << 30));
  HF_RETURN_IF_ERROR(r.Double("cpu_allreduce_timeout_s", &c.cpu_allreduce_timeout_s, 0.1, 3600));
  HF_RETURN_IF_ERROR(r.String("history_dir", &c.history_dir));
  HF_RETURN_IF_ERROR(r.Enum("history_action",
                            {{"off", HistoryAction::kOff}, {"warn", HistoryAction::kWarn},
                             {"refuse", HistoryAction::kRefuse}},
                            &c.history_action));
  HF_RETURN_IF_ERROR(r.Int("history_runs", &c.history_runs, 1, 1000));
  HF_RETURN_IF_ERROR(r.Double("history_window_days", &c.history_window_days, 0.001, 3650));
  const toml::table* policy = nullptr;
  const toml::table* fail_actions = nullptr;
  HF_RETURN_IF_ERROR(r.Table("policy", &policy));
  HF_RETURN_IF_ERROR(r.Table("fail_actions", &fail_actions));
  if (keys != nullptr) {
    for (const std::string& k : r.keys_read()) keys->push_back("health." + k);
  }
  HF_RETURN_IF_ERROR(r.RejectUnknown());
  if (policy != nullptr) HF_RETURN_IF_ERROR(ApplyPolicy(*policy, source, &c.policy));
  if (fail_actions != nullptr) HF_RETURN_IF_ERROR(ApplyFailActions(*fail_actions, source, &c.policy));
  if (c.checkpoint_write_fail_mbps > c.checkpoint_write_warn_mbps) {
    return InvalidArgumentError(source + ": health.checkpoint_write_fail_mbps (" +
                                FormatNumber(c.checkpoint_write_fail_mbps) +
                                ") must not exceed health.checkpoint_write_warn_mbps (" +
                                FormatNumber(c.checkpoint_write_warn_mbps) + ")");
  }
  if (c.ib_error_fail_per_min > 0 && c.ib_error_fail_per_min < c.ib_error_warn_per_min) {
    return InvalidArgumentError(source + ": health.ib_error_fail_per_min must be 0 (off) or at least " +
                                "health.ib_error_warn_per_min");
  }
  return c;
}

}  // namespace

const char* HistoryActionName(HistoryAction action) {
  switch (action) {
    case HistoryAction::kWarn: return "warn";
    case HistoryAction::kRefuse: return "refuse";
    case HistoryAction::kOff: break;
  }
  return "off";
}

Result<HealthConfig> ParseHealthConfig(const std::string& toml_text, const std::string& source) {
  HF_ASSIGN_OR_RETURN(toml::table root, ParseToml(toml_text, source));
  return FromTable(root, source);
}

std::vector<std::string> HealthConfigKeys() {
  toml::table root;
  root.insert("health", toml::table{});
  std::vector<std::string> keys;
  (void)FromTable(root, "keys", &keys);
  for (const char* k : {"health.policy.on_warn", "health.policy.on_skipped"}) keys.push_back(k);
  return keys;
}

Result<HealthConfig> LoadHealthConfig(const std::string& path) {
  HF_ASSIGN_OR_RETURN(toml::table root, ParseTomlFile(path));
  return FromTable(root, path);
}

}  // namespace holdfast::health
