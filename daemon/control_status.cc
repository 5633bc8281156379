// Control protocol: the "status" op's result (RunStatus) to and from its JSON text.
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/control_protocol.h"
#include "daemon/control_protocol_internal.h"

namespace holdfast {
namespace {

using json = nlohmann::json;
using control_internal::Dump;

// ---- typed field access for the status result ----
class Fields {
 public:
  Fields(const json& j, std::string where) : j_(j), where_(std::move(where)) {}

  template <typename T>
  Status Int(const char* key, T* out) {
    const json* v = Find(key);
    if (v == nullptr) return Missing(key);
    if (!v->is_number_integer()) return Wrong(key, "an integer", *v);
    if (std::is_unsigned_v<T> && !v->is_number_unsigned()) return Wrong(key, "unsigned", *v);
    *out = v->get<T>();
    return Status::Ok();
  }
  template <typename T>
  Status OptionalInt(const char* key, std::optional<T>* out) {
    const json* v = Find(key);
    if (v == nullptr || v->is_null()) {
      out->reset();
      return Status::Ok();
    }
    if (!v->is_number_integer()) return Wrong(key, "an integer or null", *v);
    if (std::is_unsigned_v<T> && !v->is_number_unsigned()) return Wrong(key, "unsigned", *v);
    *out = v->get<T>();
    return Status::Ok();
  }
  Status Double(const char* key, double* out) {
    const json* v = Find(key);
    if (v == nullptr) return Missing(key);
    if (!v->is_number()) return Wrong(key, "a number", *v);
    *out = v->get<double>();
    return Status::Ok();
  }
  Status OptionalDouble(const char* key, std::optional<double>* out) {
    const json* v = Find(key);
    if (v == nullptr || v->is_null()) {
      out->reset();
      return Status::Ok();
    }
    if (!v->is_number()) return Wrong(key, "a number or null", *v);
    *out = v->get<double>();
    return Status::Ok();
  }
  Status String(const char* key, std::string* out) {
    const json* v = Find(key);
    if (v == nullptr) return Missing(key);
    if (!v->is_string()) return Wrong(key, "a string", *v);
    *out = v->get<std::string>();
    return Status::Ok();
  }
  Status OptionalString(const char* key, std::optional<std::string>* out) {
    const json* v = Find(key);
    if (v == nullptr || v->is_null()) {
      out->reset();
      return Status::Ok();
    }
    if (!v->is_string()) return Wrong(key, "a string or null", *v);
    *out = v->get<std::string>();
    return Status::Ok();
  }
  // Absent or null: `out` keeps its default.
  Status OptionalStringOr(const char* key, std::string* out) {
    const json* v = Find(key);
    if (v == nullptr || v->is_null()) return Status::Ok();
    if (!v->is_string()) return Wrong(key, "a string or null", *v);
    *out = v->get<std::string>();
    return Status::Ok();
  }
  template <typename T>
  Status OptionalIntOr(const char* key, T* out) {
    std::optional<T> v;
    HF_RETURN_IF_ERROR(OptionalInt(key, &v));
    if (v) *out = *v;
    return Status::Ok();
  }
  Status OptionalStrings(const char* key, std::vector<std::string>* out) {
    const json* v = Find(key);
    if (v == nullptr || v->is_null()) return Status::Ok();
    if (!v->is_array()) return Wrong(key, "an array of strings or null", *v);
    std::vector<std::string> items;
    for (const json& item : *v) {
      if (!item.is_string()) return Wrong(key, "an array of strings or null", *v);
      items.push_back(item.get<std::string>());
    }
    *out = std::move(items);
    return Status::Ok();
  }
  Result<const json*> Array(const char* key) {
    const json* v = Find(key);
    if (v == nullptr) return Missing(key);
    if (!v->is_array()) return Wrong(key, "an array", *v);
    return v;
  }
  const std::string& where() const { return where_; }

 private:
  const json* Find(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  Status Missing(const char* key) const {
    return InvalidArgumentError(where_ + ": missing \"" + key + "\"");
  }
  Status Wrong(const char* key, const char* want, const json& got) const {
    std::string text = Dump(got);
    if (text.size() > 40) text = text.substr(0, 40) + "...";
    return InvalidArgumentError(where_ + ": \"" + key + "\" must be " + want + ", got " + text);
  }

  const json& j_;
  std::string where_;
};

Result<RankStatus> ParseRank(const json& j, const std::string& where) {
  if (!j.is_object()) return InvalidArgumentError(where + " must be an object");
  Fields f(j, where);
  RankStatus r;
  HF_RETURN_IF_ERROR(f.Int("rank", &r.rank));
  HF_RETURN_IF_ERROR(f.Int("pid", &r.pid));
  HF_RETURN_IF_ERROR(f.String("state", &r.state));
  HF_RETURN_IF_ERROR(f.Int("step", &r.step));
  HF_RETURN_IF_ERROR(f.String("phase", &r.phase));
  HF_RETURN_IF_ERROR(f.Double("heartbeat_age_s", &r.heartbeat_age_s));
  std::optional<double> report_age;  // absent from daemons before it
  HF_RETURN_IF_ERROR(f.OptionalDouble("report_age_s", &report_age));
  if (report_age && !(*report_age >= 0)) {
    return InvalidArgumentError(where + ": \"report_age_s\" must be 0 or more, got " + std::to_string(*report_age));
  }
  r.report_age_s = report_age.value_or(0);
  HF_RETURN_IF_ERROR(f.OptionalDouble("last_step_ms", &r.last_step_ms));
  HF_RETURN_IF_ERROR(f.OptionalInt("waiting_on", &r.waiting_on));
  HF_RETURN_IF_ERROR(f.OptionalStringOr("waiting_kind", &r.waiting_kind));  // absent from older daemons
  HF_RETURN_IF_ERROR(f.OptionalStringOr("waiting_group", &r.waiting_group));
  HF_RETURN_IF_ERROR(f.OptionalInt("waiting_group_seq", &r.waiting_group_seq));
  HF_RETURN_IF_ERROR(f.Int("collectives_issued", &r.collectives_issued));
  HF_RETURN_IF_ERROR(f.OptionalDouble("steps_per_s", &r.steps_per_s));
  HF_RETURN_IF_ERROR(f.OptionalDouble("step_ms_p50", &r.step_ms_p50));
  HF_RETURN_IF_ERROR(f.OptionalDouble("step_ms_p99", &r.step_ms_p99));
  HF_RETURN_IF_ERROR(f.OptionalDouble("compute_ms_p50", &r.compute_ms_p50));
  HF_RETURN_IF_ERROR(f.OptionalDouble("wait_ms_p50", &r.wait_ms_p50));
  HF_RETURN_IF_ERROR(f.OptionalStringOr("place", &r.place));  // absent from daemons before the mesh
  return r;
}

Result<RoleStatus> ParseRole(const json& j, const std::string& where) {
  if (!j.is_object()) return InvalidArgumentError(where + " must be an object");
  Fields f(j, where);
  RoleStatus r;
  HF_RETURN_IF_ERROR(f.String("role", &r.role));
  HF_RETURN_IF_ERROR(f.Int("index", &r.index));
  HF_RETURN_IF_ERROR(f.Int("pid", &r.pid));
  HF_RETURN_IF_ERROR(f.String("state", &r.state));
  HF_RETURN_IF_ERROR(f.String("restart", &r.restart));
  HF_RETURN_IF_ERROR(f.Int("restarts", &r.restarts));
  HF_RETURN_IF_ERROR(f.OptionalInt("step", &r.step));
  HF_RETURN_IF_ERROR(f.OptionalDouble("heartbeat_age_s", &r.heartbeat_age_s));
  return r;
}

}  // namespace

std::string EncodeStatusResult(const RunStatus& s) {
  auto opt_int = [](const auto& o) { return o ? json(*o) : json(nullptr); };
  json nodes = json::array();
  for (const NodeStatus& n : s.nodes) {
    json ranks = json::array();
    for (const RankStatus& r : n.ranks) {
      ranks.push_back({{"rank", r.rank},
                       {"pid", r.pid},
                       {"state", r.state},
                       {"step", r.step},
                       {"phase", r.phase},
                       {"heartbeat_age_s", r.heartbeat_age_s},
                       {"report_age_s", r.report_age_s},
                       {"last_step_ms", opt_int(r.last_step_ms)},
                       {"waiting_on", opt_int(r.waiting_on)},
                       {"waiting_kind", r.waiting_kind},
                       {"waiting_group", r.waiting_group},
                       {"waiting_group_seq", opt_int(r.waiting_group_seq)},
                       {"collectives_issued", r.collectives_issued},
                       {"steps_per_s", opt_int(r.steps_per_s)},
                       {"step_ms_p50", opt_int(r.step_ms_p50)},
                       {"step_ms_p99", opt_int(r.step_ms_p99)},
                       {"compute_ms_p50", opt_int(r.compute_ms_p50)},
                       {"wait_ms_p50", opt_int(r.wait_ms_p50)},
                       {"place", r.place}});
    }
    nodes.push_back({{"node", n.node}, {"host", n.host}, {"ranks", std::move(ranks)}});
  }
  json incident = nullptr;
  if (s.last_incident) {
    const IncidentSummary& i = *s.last_incident;
    incident = {{"kind", i.kind},
                {"summary", i.summary},
                {"at_ms", i.at_ms},
                {"action", i.action},
                {"runbook", i.runbook}};
  }
  json roles = json::array();
  for (const RoleStatus& r : s.roles) {
    roles.push_back({{"role", r.role},
                     {"index", r.index},
                     {"pid", r.pid},
                     {"state", r.state},
                     {"restart", r.restart},
                     {"restarts", r.restarts},
                     {"step", opt_int(r.step)},
                     {"heartbeat_age_s", opt_int(r.heartbeat_age_s)}});
  }
  json j = {{"run_id", s.run_id},
            {"name", s.name},
            {"state", s.state},
            {"attempt", s.attempt},
            {"generation", s.generation},
            {"step", s.step},
            {"world_size", s.world_size},
            {"restarts_used", s.restarts_used},
            {"restart_budget", s.restart_budget},
            {"last_checkpoint_step", opt_int(s.last_checkpoint_step)},
            {"restored_step", opt_int(s.restored_step)},
            {"restore_tier", opt_int(s.restore_tier)},
            {"uptime_s", s.uptime_s},
            {"nodes", std::move(nodes)},
            {"last_incident", std::move(incident)},
            {"slowest_rank", opt_int(s.slowest_rank)},
            {"slowest_rank_note", opt_int(s.slowest_rank_note)},
            {"scheduler", s.scheduler},
            {"job_id", s.job_id},
            {"restart_count", s.restart_count},
            {"hosts", s.hosts},
            {"mesh", s.mesh},
            {"roles", std::move(roles)}};
  return Dump(j);
}

Result<RunStatus> ParseStatusResult(std::string_view result_json) {
  json j = json::parse(result_json.begin(), result_json.end(), nullptr, false);
  if (!j.is_object()) return InvalidArgumentError("status result is not a JSON object");
  Fields f(j, "status result");
  RunStatus s;
  HF_RETURN_IF_ERROR(f.String("run_id", &s.run_id));
  HF_RETURN_IF_ERROR(f.String("name", &s.name));
  HF_RETURN_IF_ERROR(f.String("state", &s.state));
  HF_RETURN_IF_ERROR(f.Int("attempt", &s.attempt));
  HF_RETURN_IF_ERROR(f.Int("generation", &s.generation));
  HF_RETURN_IF_ERROR(f.Int("step", &s.step));
  HF_RETURN_IF_ERROR(f.Int("world_size", &s.world_size));
  HF_RETURN_IF_ERROR(f.Int("restarts_used", &s.restarts_used));
  HF_RETURN_IF_ERROR(f.Int("restart_budget", &s.restart_budget));
  HF_RETURN_IF_ERROR(f.OptionalInt("last_checkpoint_step", &s.last_checkpoint_step));
  HF_RETURN_IF_ERROR(f.OptionalInt("restored_step", &s.restored_step));  // absent from older daemons
  HF_RETURN_IF_ERROR(f.OptionalString("restore_tier", &s.restore_tier));
  HF_RETURN_IF_ERROR(f.Double("uptime_s", &s.uptime_s));
  HF_ASSIGN_OR_RETURN(const json* nodes, f.Array("nodes"));
  for (size_t i = 0; i < nodes->size(); ++i) {
    const json& n = (*nodes)[i];
    std::string where = "status result: nodes[" + std::to_string(i) + "]";
    if (!n.is_object()) return InvalidArgumentError(where + " must be an object");
    Fields nf(n, where);
    NodeStatus node;
    HF_RETURN_IF_ERROR(nf.Int("node", &node.node));
    std::optional<std::string> host;
    HF_RETURN_IF_ERROR(nf.OptionalString("host", &host));  // absent from older daemons
    node.host = host.value_or("");
    HF_ASSIGN_OR_RETURN(const json* ranks, nf.Array("ranks"));
    for (size_t k = 0; k < ranks->size(); ++k) {
      HF_ASSIGN_OR_RETURN(RankStatus r,
                          ParseRank((*ranks)[k], where + ".ranks[" + std::to_string(k) + "]"));
      node.ranks.push_back(std::move(r));
    }
    s.nodes.push_back(std::move(node));
  }
  auto inc = j.find("last_incident");
  if (inc != j.end() && !inc->is_null()) {
    if (!inc->is_object()) {
      return InvalidArgumentError("status result: \"last_incident\" must be an object or null");
    }
    Fields inf(*inc, "status result: last_incident");
    IncidentSummary i;
    HF_RETURN_IF_ERROR(inf.String("kind", &i.kind));
    HF_RETURN_IF_ERROR(inf.String("summary", &i.summary));
    HF_RETURN_IF_ERROR(inf.Int("at_ms", &i.at_ms));
    HF_RETURN_IF_ERROR(inf.String("action", &i.action));
    HF_RETURN_IF_ERROR(inf.String("runbook", &i.runbook));
    s.last_incident = std::move(i);
  }
  HF_RETURN_IF_ERROR(f.OptionalInt("slowest_rank", &s.slowest_rank));
  HF_RETURN_IF_ERROR(f.OptionalString("slowest_rank_note", &s.slowest_rank_note));
  // Absent from daemons before Slurm support.
  HF_RETURN_IF_ERROR(f.OptionalStringOr("scheduler", &s.scheduler));
  HF_RETURN_IF_ERROR(f.OptionalStringOr("job_id", &s.job_id));
  HF_RETURN_IF_ERROR(f.OptionalStringOr("mesh", &s.mesh));  // absent from daemons before the mesh
  HF_RETURN_IF_ERROR(f.OptionalIntOr("restart_count", &s.restart_count));
  HF_RETURN_IF_ERROR(f.OptionalStrings("hosts", &s.hosts));
  // Absent from daemons before role groups.
  auto roles = j.find("roles");
  if (roles != j.end() && !roles->is_null()) {
    if (!roles->is_array()) return InvalidArgumentError("status result: \"roles\" must be an array or null");
    for (size_t i = 0; i < roles->size(); ++i) {
      HF_ASSIGN_OR_RETURN(RoleStatus r, ParseRole((*roles)[i], "status result: roles[" + std::to_string(i) + "]"));
      s.roles.push_back(std::move(r));
    }
  }
  return s;
}

}  // namespace holdfast
