#include "lineage/incident.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include <nlohmann/json.hpp>

namespace holdfast {

namespace {

using json = nlohmann::json;

// ---- writing ----

json RankToJson(const RankEvidence& r) {
  json j = {{"rank", r.rank},
            {"node", r.node},
            {"pid", r.pid},
            {"alive", r.alive},
            {"proc_state", r.proc_state},
            {"record_valid", r.record_valid},
            {"record_torn", r.record_torn}};
  if (!r.host.empty()) j["host"] = r.host;
  // A valid record writes every field, as holdfastd always has; otherwise
  // only those that are set.
  const bool all = r.record_valid;
  if (all || r.step) j["step"] = r.step.value_or(0);
  if (all || !r.phase.empty()) j["phase"] = r.phase;
  if (all || r.phase_age_s) j["phase_age_s"] = r.phase_age_s.value_or(0.0);
  if (all || r.heartbeat_age_s) j["heartbeat_age_s"] = r.heartbeat_age_s.value_or(0.0);
  if (all || r.collectives_issued) j["collectives_issued"] = r.collectives_issued.value_or(0);
  if (all || r.collectives_done) j["collectives_done"] = r.collectives_done.value_or(0);
  if (all || r.waiting_on != 0) j["waiting_on"] = r.waiting_on;
  if (all || r.last_step_ms) j["last_step_ms"] = r.last_step_ms.value_or(0.0);
  if (all || r.checkpoint_step) j["checkpoint_step"] = r.checkpoint_step.value_or(0);
  if (all || !r.ring.empty()) {
    json ring = json::array();
    for (const CollectiveEvidence& e : r.ring) {
      ring.push_back({{"seq", e.seq}, {"kind", e.kind}, {"bytes", e.bytes}, {"done", e.done}});
    }
    j["recent_collectives"] = std::move(ring);
  }
  if (r.pace) {
    j["steps_per_s"] = r.pace->steps_per_s;
    j["step_ms_p50"] = r.pace->step_ms_p50;
    j["step_ms_p99"] = r.pace->step_ms_p99;
    j["compute_ms_p50"] = r.pace->compute_ms_p50;
    j["wait_ms_p50"] = r.pace->wait_ms_p50;
  }
  return j;
}

template <typename T>
void PutIf(json& j, const char* key, const std::optional<T>& v) {
  if (v) j[key] = *v;
}

// ---- reading ----

const char* TypeName(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a fractional number";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "a number";
    default: return v.type_name();
  }
}

// `v` as a T, when it is a whole number in T's range.
template <typename T>
std::optional<T> IntOf(const json& v) {
  using L = std::numeric_limits<T>;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u <= static_cast<uint64_t>(L::max())) return static_cast<T>(u);
  } else if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if constexpr (std::is_signed_v<T>) {
      if (i >= static_cast<int64_t>(L::min()) && i <= static_cast<int64_t>(L::max())) return static_cast<T>(i);
    } else {
      if (i >= 0 && static_cast<uint64_t>(i) <= static_cast<uint64_t>(L::max())) return static_cast<T>(i);
    }
  } else if (v.is_number_float()) {
    // Whole numbers written as 12.0 by some other tool.
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && d >= static_cast<double>(L::min()) &&
        d < static_cast<double>(L::max())) {
      return static_cast<T>(d);
    }
  }
  return std::nullopt;
}

// Reads the known keys of one JSON object; the first type error wins and is
// reported with the path of the key.
class Reader {
 public:
  Reader(const json& object, std::string path, Status* error)
      : j_(object), path_(std::move(path)), error_(error) {}

  bool Has(const char* key) const { return Find(key) != nullptr; }

  template <typename T>
  void Int(const char* key, T* out) {
    const json* v = Find(key);
    if (v == nullptr) return;
    if (std::optional<T> got = IntOf<T>(*v)) {
      *out = *got;
    } else {
      Fail(key, std::is_unsigned_v<T> ? "a non-negative integer" : "an integer", *v);
    }
  }
  template <typename T>
  void Int(const char* key, std::optional<T>* out) {
    if (!Has(key)) return;
    T v{};
    Int(key, &v);
    if (error_->ok()) *out = v;
  }
  void Double(const char* key, double* out) {
    const json* v = Find(key);
    if (v == nullptr) return;
    if (v->is_number()) {
      *out = v->get<double>();
    } else {
      Fail(key, "a number", *v);
    }
  }
  void Double(const char* key, std::optional<double>* out) {
    if (!Has(key)) return;
    double v = 0;
    Double(key, &v);
    if (error_->ok()) *out = v;
  }
  void Bool(const char* key, bool* out) {
    const json* v = Find(key);
    if (v == nullptr) return;
    if (v->is_boolean()) {
      *out = v->get<bool>();
    } else {
      Fail(key, "true or false", *v);
    }
  }
  void String(const char* key, std::string* out) {
    const json* v = Find(key);
    if (v == nullptr) return;
    if (v->is_string()) {
      *out = v->get<std::string>();
    } else {
      Fail(key, "a string", *v);
    }
  }
  // Calls read(element, path) for each element of the array at `key`.
  template <typename F>
  void Array(const char* key, F read) {
    const json* v = Find(key);
    if (v == nullptr) return;
    if (!v->is_array()) {
      Fail(key, "an array", *v);
      return;
    }
    for (size_t i = 0; i < v->size() && error_->ok(); ++i) {
      read((*v)[i], path_ + key + "[" + std::to_string(i) + "]");
    }
  }

 private:
  // A JSON null counts as missing: nothing older wrote one, and it says "unknown".
  const json* Find(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }

  void Fail(const char* key, const char* expected, const json& got) {
    if (!error_->ok()) return;
    std::string shown = got.dump(-1, ' ', false, json::error_handler_t::replace);
    if (shown.size() > 40) shown = shown.substr(0, 37) + "...";
    *error_ = InvalidArgumentError("evidence: " + path_ + key + ": expected " + expected + ", got " +
                                   TypeName(got) + " " + shown);
  }

  const json& j_;
  std::string path_;  // "ranks[2]." or ""
  Status* error_;     // not owned; the first error
};

bool ExpectObject(const json& v, const std::string& path, Status* error) {
  if (v.is_object()) return true;
  if (error->ok()) *error = InvalidArgumentError("evidence: " + path + ": expected an object, got " + TypeName(v));
  return false;
}

RankEvidence ReadRank(const json& v, const std::string& path, Status* error) {
  RankEvidence r;
  if (!ExpectObject(v, path, error)) return r;
  Reader in(v, path + ".", error);
  in.Int("rank", &r.rank);
  in.Int("node", &r.node);
  in.String("host", &r.host);
  in.Int("pid", &r.pid);
  in.Bool("alive", &r.alive);
  in.String("proc_state", &r.proc_state);
  // Hand-written and very old evidence has the record's fields without the flag.
  r.record_valid = in.Has("step") || in.Has("phase");
  in.Bool("record_valid", &r.record_valid);
  in.Bool("record_torn", &r.record_torn);
  in.Int("step", &r.step);
  in.String("phase", &r.phase);
  in.Double("phase_age_s", &r.phase_age_s);
  in.Double("heartbeat_age_s", &r.heartbeat_age_s);
  in.Int("collectives_issued", &r.collectives_issued);
  in.Int("collectives_done", &r.collectives_done);
  in.Int("waiting_on", &r.waiting_on);
  in.Double("last_step_ms", &r.last_step_ms);
  in.Int("checkpoint_step", &r.checkpoint_step);
  in.Array("recent_collectives", [&](const json& e, const std::string& at) {
    CollectiveEvidence c;
    if (!ExpectObject(e, at, error)) return;
    Reader ce(e, at + ".", error);
    ce.Int("seq", &c.seq);
    ce.String("kind", &c.kind);
    ce.Int("bytes", &c.bytes);
    ce.Bool("done", &c.done);
    r.ring.push_back(std::move(c));
  });
  if (in.Has("steps_per_s") || in.Has("compute_ms_p50")) {
    PaceEvidence p;
    in.Double("steps_per_s", &p.steps_per_s);
    in.Double("step_ms_p50", &p.step_ms_p50);
    in.Double("step_ms_p99", &p.step_ms_p99);
    in.Double("compute_ms_p50", &p.compute_ms_p50);
    in.Double("wait_ms_p50", &p.wait_ms_p50);
    r.pace = p;
  }
  return r;
}

}  // namespace

std::string ToJson(const IncidentEvidence& e) {
  json j = json::object();
  if (!e.culprits.empty()) j["culprits"] = e.culprits;
  PutIf(j, "rank", e.rank);
  if (!e.exit_status.empty()) j["status"] = e.exit_status;
  PutIf(j, "exit_code", e.exit_code);
  PutIf(j, "signal", e.signal);
  if (!e.log_tail.empty()) j["log_tail"] = e.log_tail;
  PutIf(j, "stalled_s", e.stalled_s);
  PutIf(j, "timeout_s", e.timeout_s);
  if (!e.allowance.empty()) j["allowance"] = e.allowance;
  PutIf(j, "step", e.step);
  PutIf(j, "newest_committed_step", e.newest_committed_step);
  if (!e.reports.empty()) {
    json reports = json::array();
    for (const SaveFailureEvidence& r : e.reports) {
      json o = {{"node", r.host}, {"error", r.error}, {"missed_failures", r.missed_failures}};
      if (r.rank) o["rank"] = *r.rank;
      reports.push_back(std::move(o));
    }
    j["reports"] = std::move(reports);
  }
  PutIf(j, "ratio", e.ratio);
  PutIf(j, "held_s", e.held_s);
  if (!e.role.empty()) j["role"] = e.role;
  PutIf(j, "role_index", e.role_index);
  if (!e.path.empty()) j["path"] = e.path;
  if (!e.reason.empty()) j["reason"] = e.reason;
  PutIf(j, "newest_good_step", e.newest_good_step);
  PutIf(j, "world_size_before", e.world_size_before);
  PutIf(j, "world_size_after", e.world_size_after);
  // A reshard writes its host lists even when empty (nobody joined).
  if (e.world_size_after) {
    j["left"] = e.left;
    j["joined"] = e.joined;
    if (!e.nodes.empty()) j["nodes"] = e.nodes;
  } else if (!e.left.empty()) {
    j["left"] = e.left;  // a requeue: the hosts it excluded
  }
  PutIf(j, "locked_s", e.locked_s);
  PutIf(j, "held_records", e.held_records);
  PutIf(j, "lead_time_s", e.lead_time_s);
  PutIf(j, "save_s", e.save_s);
  PutIf(j, "step_allowance_s", e.step_allowance_s);
  PutIf(j, "margin_s", e.margin_s);
  PutIf(j, "save_in_s", e.save_in_s);
  if (!e.ranks.empty()) {
    json ranks = json::array();
    for (const RankEvidence& r : e.ranks) ranks.push_back(RankToJson(r));
    j["ranks"] = std::move(ranks);
  }
  if (!e.stacks.empty()) j["stacks"] = json::parse(StacksToJson(e.stacks));
  // Log lines are whatever the rank printed: never let a stray byte throw.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<IncidentEvidence> ParseIncidentEvidence(std::string_view text) {
  IncidentEvidence e;
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) return e;
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgumentError("evidence: not valid JSON");
  if (!j.is_object()) return InvalidArgumentError(std::string("evidence: expected a JSON object, got ") + TypeName(j));
  Status error;
  Reader in(j, "", &error);
  in.Array("culprits", [&](const json& v, const std::string& at) {
    if (std::optional<int> c = IntOf<int>(v)) {
      e.culprits.push_back(*c);
    } else if (error.ok()) {
      error = InvalidArgumentError("evidence: " + at + ": expected an integer, got " + TypeName(v));
    }
  });
  in.Int("rank", &e.rank);
  in.String("status", &e.exit_status);
  in.Int("exit_code", &e.exit_code);
  in.Int("signal", &e.signal);
  in.Array("log_tail", [&](const json& v, const std::string& at) {
    if (v.is_string()) {
      e.log_tail.push_back(v.get<std::string>());
    } else if (error.ok()) {
      error = InvalidArgumentError("evidence: " + at + ": expected a string, got " + TypeName(v));
    }
  });
  in.Double("stalled_s", &e.stalled_s);
  in.Double("timeout_s", &e.timeout_s);
  in.String("allowance", &e.allowance);
  in.Int("step", &e.step);
  in.Int("newest_committed_step", &e.newest_committed_step);
  in.Array("reports", [&](const json& v, const std::string& at) {
    if (!ExpectObject(v, at, &error)) return;
    SaveFailureEvidence r;
    Reader ri(v, at + ".", &error);
    ri.Int("rank", &r.rank);
    ri.String("node", &r.host);
    ri.String("error", &r.error);
    ri.Int("missed_failures", &r.missed_failures);
    e.reports.push_back(std::move(r));
  });
  in.Double("ratio", &e.ratio);
  in.Double("held_s", &e.held_s);
  in.String("role", &e.role);
  in.Int("role_index", &e.role_index);
  in.String("path", &e.path);
  in.String("reason", &e.reason);
  in.Int("newest_good_step", &e.newest_good_step);
  in.Int("world_size_before", &e.world_size_before);
  in.Int("world_size_after", &e.world_size_after);
  auto strings = [&](const char* key, std::vector<std::string>* out) {
    in.Array(key, [&, out](const json& v, const std::string& at) {
      if (v.is_string()) {
        out->push_back(v.get<std::string>());
      } else if (error.ok()) {
        error = InvalidArgumentError("evidence: " + at + ": expected a string, got " + TypeName(v));
      }
    });
  };
  strings("left", &e.left);
  strings("joined", &e.joined);
  strings("nodes", &e.nodes);
  in.Double("locked_s", &e.locked_s);
  in.Int("held_records", &e.held_records);
  in.Double("lead_time_s", &e.lead_time_s);
  in.Double("save_s", &e.save_s);
  in.Double("step_allowance_s", &e.step_allowance_s);
  in.Double("margin_s", &e.margin_s);
  in.Double("save_in_s", &e.save_in_s);
  in.Array("ranks", [&](const json& v, const std::string& at) { e.ranks.push_back(ReadRank(v, at, &error)); });
  if (auto it = j.find("stacks"); error.ok() && it != j.end() && !it->is_null()) {
    Result<StackEvidence> stacks = ParseStacksJson(it->dump(-1, ' ', false, json::error_handler_t::replace));
    if (!stacks.ok()) return stacks.status();
    e.stacks = std::move(*stacks);
  }
  if (!error.ok()) return error;
  return e;
}

std::vector<int> Culprits(const EventRecord& e, const IncidentEvidence& ev) {
  std::vector<int> culprits = ev.culprits;
  if (culprits.empty() && ev.rank) culprits.push_back(*ev.rank);
  if (culprits.empty() && e.rank) culprits.push_back(*e.rank);
  return culprits;
}

std::vector<std::string> CulpritHosts(const EventRecord& e, const IncidentEvidence& ev) {
  std::vector<std::string> hosts;
  for (int c : Culprits(e, ev)) {
    for (const RankEvidence& r : ev.ranks) {
      if (r.rank != c || r.host.empty()) continue;
      if (std::find(hosts.begin(), hosts.end(), r.host) == hosts.end()) hosts.push_back(r.host);
    }
  }
  return hosts;
}

}  // namespace holdfast
