#include "daemon/cluster_protocol.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <iterator>
#include <limits>
#include <type_traits>
#include <utility>

#include <nlohmann/json.hpp>

namespace holdfast {
namespace {

using json = nlohmann::json;
// Encoding keeps keys in the order written, so that a line reads
// {"v":2,"type":"progress",...} in a log.
using ojson = nlohmann::ordered_json;

constexpr int64_t kIntMax = std::numeric_limits<int>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kPidMax = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxWaitStatus = 0xffff;
constexpr double kMaxGraceSeconds = 1e6;
// The checkpoint error text, without the record's terminating NUL.
constexpr size_t kMaxCheckpointErrorBytes = kProgressErrorSize - 1;
constexpr uint32_t kMaxPhase = static_cast<uint32_t>(Phase::kDone);
constexpr uint32_t kMaxCollectiveKind = static_cast<uint32_t>(CollectiveKind::kAllgather);

constexpr char kSameBuild[] = "run the same holdfast build on every node";

template <typename J>
std::string Dump(const J& j) {
  return j.dump(-1, ' ', false, J::error_handler_t::replace);
}

// ---- UTF-8 ----

// Length of the well-formed UTF-8 sequence at s[0..n) (Unicode table 3-7:
// no overlongs, no surrogates, nothing above U+10FFFF), or 0 when there is none.
size_t Utf8SequenceLength(const unsigned char* s, size_t n) {
  const unsigned char c = s[0];
  if (c < 0x80) return 1;
  auto cont = [&](size_t i, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
    return i < n && s[i] >= lo && s[i] <= hi;
  };
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c == 0xE0) return cont(1, 0xA0) && cont(2) ? 3 : 0;
  if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) return cont(1) && cont(2) ? 3 : 0;
  if (c == 0xED) return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;
  if (c == 0xF0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
  if (c >= 0xF1 && c <= 0xF3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (c == 0xF4) return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

// `s` with every byte that does not start a well-formed sequence replaced by U+FFFD.
std::string ValidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    const size_t len = Utf8SequenceLength(p + i, s.size() - i);
    if (len == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.data() + i, len);
      i += len;
    }
  }
  return out;
}

// Valid UTF-8 of at most max_bytes: cut at a character boundary.
std::string Text(std::string_view raw, size_t max_bytes) {
  std::string s = ValidUtf8(raw);
  if (s.size() <= max_bytes) return s;
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  s.resize(cut);
  return s;
}

// ---- clocks: local times <-> ages ----

// A local CLOCK_MONOTONIC reading as an age at now; -1 when unset (<= 0). A
// reading after now (the record was written after now was taken) is age 0.
int64_t Age(int64_t t, int64_t now) {
  if (t <= 0) return -1;
  if (t >= now) return 0;
  return now - t;
}

// An age back into a local reading; 0 (unset) for -1. An age older than this
// machine's clock becomes 1, the oldest reading that still means "set".
int64_t Back(int64_t age, int64_t now) {
  if (age < 0) return 0;
  if (age >= now) return 1;
  return now - age;
}

// ---- encoding ----

void CheckRange(int64_t v, int64_t lo, int64_t hi, const char* what) {
  HF_CHECK_MSG(v >= lo && v <= hi, std::string("EncodeClusterMessage: ") + what + " = " + std::to_string(v) +
                                       " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

void CheckCount(size_t n, size_t max, const char* what) {
  HF_CHECK_MSG(n <= max, std::string("EncodeClusterMessage: ") + std::to_string(n) + " " + what +
                             "; at most " + std::to_string(max) + " fit one message");
}

// A record the receiver can interpret: every enumerated value known to this build.
bool KnownRecord(const ProgressRecordLayout& p) {
  if (p.phase > kMaxPhase || p.collective_kind > kMaxCollectiveKind) return false;
  const uint64_t n = std::min<uint64_t>(p.ring_head, kProgressRingSize);
  for (uint64_t i = 0; i < n; ++i) {
    if (p.ring[(p.ring_head - n + i) % kProgressRingSize].kind > kMaxCollectiveKind) return false;
  }
  return true;
}

ojson ViewToJson(const RankView& v, int64_t now) {
  CheckRange(v.rank, 0, kMaxClusterWorldSize - 1, "RankView::rank");
  CheckRange(v.node, 0, kMaxClusterNodes - 1, "RankView::node");
  CheckRange(v.pid, 0, kPidMax, "RankView::pid");
  const bool known = KnownRecord(v.progress.record);
  const ProgressRecordLayout p = known ? v.progress.record : ProgressRecordLayout{};
  const unsigned char state = static_cast<unsigned char>(v.proc_state);
  ojson ring = ojson::array();
  const uint64_t n = std::min<uint64_t>(p.ring_head, kProgressRingSize);
  for (uint64_t i = 0; i < n; ++i) {
    const CollectiveEntry& e = p.ring[(p.ring_head - n + i) % kProgressRingSize];
    ring.push_back(ojson::array({e.seq, e.kind, e.bytes, Age(e.issued_ns, now), Age(e.completed_ns, now)}));
  }
  const std::string error(p.checkpoint_error, strnlen(p.checkpoint_error, sizeof(p.checkpoint_error)));
  ojson j;
  j["rank"] = v.rank;
  j["node"] = v.node;
  j["host"] = Text(v.host, kMaxClusterHostBytes);
  j["pid"] = static_cast<int64_t>(v.pid);
  j["alive"] = v.alive;
  j["state"] = std::string(1, state > 0x20 && state < 0x7f ? v.proc_state : '?');
  j["valid"] = known && v.progress.valid;
  j["torn"] = v.progress.torn;
  j["step"] = p.step;
  j["phase"] = p.phase;
  j["kind"] = p.collective_kind;
  j["issued"] = p.collectives_issued;
  j["done"] = p.collectives_done;
  j["waiting_on"] = p.waiting_on;
  j["phase_age"] = Age(p.phase_started_ns, now);
  j["step_age"] = Age(p.step_started_ns, now);
  j["heartbeat_age"] = Age(p.heartbeat_ns, now);
  j["last_step_ns"] = p.last_step_ns;
  j["checkpoint_step"] = p.checkpoint_step;
  j["checkpoint_failures"] = p.checkpoint_failures;
  j["checkpoint_failed_step"] = p.checkpoint_failed_step;
  j["checkpoint_error"] = Text(error, kMaxCheckpointErrorBytes);
  j["ring_head"] = p.ring_head;
  j["ring"] = std::move(ring);
  return j;
}

ojson ViewsToJson(const std::vector<RankView>& views, int64_t now) {
  CheckCount(views.size(), kMaxClusterNodeRanks, "rank views");
  ojson out = ojson::array();
  for (const RankView& v : views) out.push_back(ViewToJson(v, now));
  return out;
}

ojson Header(const char* type, int version = kClusterProtocolVersion) {
  ojson j;
  j["v"] = version;
  j["type"] = type;
  return j;
}

struct Encoder {
  int64_t now;

  ojson operator()(const HelloMsg& m) const {
    CheckRange(m.node, 0, kMaxClusterNodes - 1, "HelloMsg::node");
    CheckRange(m.nproc, 1, kMaxClusterNodeRanks, "HelloMsg::nproc");
    CheckRange(m.pid, 1, kPidMax, "HelloMsg::pid");
    ojson j = Header("hello", m.version);
    j["node"] = m.node;
    j["host"] = Text(m.host, kMaxClusterHostBytes);
    j["nproc"] = m.nproc;
    j["pid"] = m.pid;
    std::string report = ValidUtf8(m.health_report_json);
    if (report.size() > kMaxClusterReportBytes) report.clear();
    j["health_report"] = std::move(report);
    return j;
  }
  ojson operator()(const ProgressMsg& m) const {
    CheckRange(m.generation, -1, kIntMax, "ProgressMsg::generation");
    ojson j = Header("progress");
    j["generation"] = m.generation;
    j["ranks"] = ViewsToJson(m.ranks, now);
    return j;
  }
  ojson operator()(const RankExitMsg& m) const {
    CheckRange(m.generation, -1, kIntMax, "RankExitMsg::generation");
    CheckRange(m.rank, 0, kMaxClusterWorldSize - 1, "RankExitMsg::rank");
    CheckRange(m.wstatus, 0, kMaxWaitStatus, "RankExitMsg::wstatus");
    ojson j = Header("rank_exit");
    j["generation"] = m.generation;
    j["rank"] = m.rank;
    j["wstatus"] = m.wstatus;
    j["exec_error"] = Text(m.exec_error, kMaxClusterTextBytes);
    ojson tail = ojson::array();
    const size_t skip = m.log_tail.size() > kMaxClusterLogLines ? m.log_tail.size() - kMaxClusterLogLines : 0;
    for (size_t i = skip; i < m.log_tail.size(); ++i) tail.push_back(Text(m.log_tail[i], kMaxClusterLogLineBytes));
    j["log_tail"] = std::move(tail);
    j["ranks"] = ViewsToJson(m.ranks, now);
    return j;
  }
  ojson operator()(const HealthMsg& m) const {
    CheckRange(m.generation, -1, kIntMax, "HealthMsg::generation");
    ojson j = Header("health");
    j["generation"] = m.generation;
    std::string report = ValidUtf8(m.report_json);
    if (report.size() > kMaxClusterReportBytes) report.clear();
    j["report"] = std::move(report);
    return j;
  }
  ojson operator()(const RejectMsg& m) const {
    ojson j = Header("reject");
    j["why"] = Text(m.why, kMaxClusterTextBytes);
    return j;
  }
  ojson operator()(const StartMsg& m) const {
    CheckRange(m.attempt, 0, kIntMax, "StartMsg::attempt");
    CheckRange(m.generation, 0, kIntMax, "StartMsg::generation");
    CheckRange(m.world_size, 1, kMaxClusterWorldSize, "StartMsg::world_size");
    CheckRange(m.resume_step, -1, kInt64Max, "StartMsg::resume_step");
    CheckCount(m.ranks.size(), kMaxClusterNodeRanks, "rank placements");
    ojson j = Header("start");
    j["run_id"] = Text(m.run_id, kMaxClusterTextBytes);
    j["attempt"] = m.attempt;
    j["generation"] = m.generation;
    j["world_size"] = m.world_size;
    j["store_addr"] = Text(m.store_addr, kMaxClusterTextBytes);
    j["master_port"] = m.master_port;
    j["resume_step"] = m.resume_step;
    ojson ranks = ojson::array();
    for (const RankPlacement& r : m.ranks) {
      CheckRange(r.global_rank, 0, m.world_size - 1, "RankPlacement::global_rank");
      CheckRange(r.local_rank, 0, kMaxClusterNodeRanks - 1, "RankPlacement::local_rank");
      CheckRange(r.node, 0, kMaxClusterNodes - 1, "RankPlacement::node");
      CheckRange(r.device, -1, kMaxClusterNodeRanks - 1, "RankPlacement::device");
      ojson p;
      p["global_rank"] = r.global_rank;
      p["local_rank"] = r.local_rank;
      p["node"] = r.node;
      p["host"] = Text(r.host, kMaxClusterHostBytes);
      p["device"] = r.device;
      ranks.push_back(std::move(p));
    }
    j["ranks"] = std::move(ranks);
    return j;
  }
  ojson operator()(const StopMsg& m) const {
    CheckRange(m.generation, -1, kIntMax, "StopMsg::generation");
    HF_CHECK_MSG(std::isfinite(m.grace_s) && m.grace_s >= 0 && m.grace_s <= kMaxGraceSeconds,
                 "EncodeClusterMessage: StopMsg::grace_s = " + std::to_string(m.grace_s) +
                     " is outside [0, " + std::to_string(kMaxGraceSeconds) + "]");
    ojson j = Header("stop");
    j["generation"] = m.generation;
    j["why"] = Text(m.why, kMaxClusterTextBytes);
    j["grace_s"] = m.grace_s;
    return j;
  }
  ojson operator()(const SignalMsg& m) const {
    CheckRange(m.generation, -1, kIntMax, "SignalMsg::generation");
    CheckRange(m.sig, 1, kMaxClusterSignal, "SignalMsg::sig");
    ojson j = Header("signal");
    j["generation"] = m.generation;
    j["sig"] = m.sig;
    return j;
  }
  ojson operator()(const KillMsg& m) const {
    CheckRange(m.generation, -1, kIntMax, "KillMsg::generation");
    CheckCount(m.ranks.size(), kMaxClusterKillRanks, "ranks to kill");
    for (int r : m.ranks) CheckRange(r, 0, kMaxClusterWorldSize - 1, "KillMsg::ranks[]");
    ojson j = Header("kill");
    j["generation"] = m.generation;
    j["ranks"] = m.ranks;
    return j;
  }
  ojson operator()(const FinishMsg& m) const {
    CheckRange(m.code, 0, 255, "FinishMsg::code");
    ojson j = Header("finish");
    j["code"] = m.code;
    j["state"] = Text(m.state, kMaxClusterTextBytes);
    return j;
  }
};

// ---- parsing ----

// "[json.exception.parse_error.101] parse error at line 1, column 2: ..." -> "parse error at ..."
std::string CleanJsonError(const char* what) {
  std::string s(what);
  if (!s.empty() && s[0] == '[') {
    const size_t end = s.find("] ");
    if (end != std::string::npos) s.erase(0, end + 2);
  }
  return s;
}

// A JSON value in a message, quoted for an error message (cut when long).
std::string Shown(const json& v) {
  std::string text = Dump(v);
  if (text.size() > 40) text = text.substr(0, 40) + "...";
  return text;
}

std::string RangeText(int64_t lo, int64_t hi) {
  if (hi == kInt64Max) return ">= " + std::to_string(lo);
  return "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

// Reads an integer JSON value in [lo, hi]; false when it is not one.
bool IntIn(const json& v, int64_t lo, int64_t hi, int64_t* out) {
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(kInt64Max)) return false;
    x = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else {
    return false;
  }
  if (x < lo || x > hi) return false;
  *out = x;
  return true;
}

// Typed, range-checked access to the keys of one JSON object; errors name
// the place ("progress: ranks[2]") and the key.
class Fields {
 public:
  Fields(const json& j, std::string where) : j_(j), where_(std::move(where)) {}

  template <typename T>
  Status Int(const char* key, int64_t lo, int64_t hi, T* out) {
    HF_ASSIGN_OR_RETURN(const json* v, Find(key, "an integer"));
    int64_t x = 0;
    if (!IntIn(*v, lo, hi, &x)) return Wrong(key, "an integer " + RangeText(lo, hi), *v);
    *out = static_cast<T>(x);
    return Status::Ok();
  }
  template <typename T>
  Status Unsigned(const char* key, T* out) {
    HF_ASSIGN_OR_RETURN(const json* v, Find(key, "an unsigned integer"));
    if (!v->is_number_unsigned() || v->get<uint64_t>() > std::numeric_limits<T>::max()) {
      return Wrong(key, "an integer in [0, " + std::to_string(std::numeric_limits<T>::max()) + "]", *v);
    }
    *out = v->get<T>();
    return Status::Ok();
  }
  Status Bool(const char* key, bool* out) {
    HF_ASSIGN_OR_RETURN(const json* v, Find(key, "true or false"));
    if (!v->is_boolean()) return Wrong(key, "true or false", *v);
    *out = v->get<bool>();
    return Status::Ok();
  }
  Status Double(const char* key, double lo, double hi, double* out) {
    HF_ASSIGN_OR_RETURN(const json* v, Find(key, "a number"));
    const std::string want = "a number in [" + Dump(json(lo)) + ", " + Dump(json(hi)) + "]";
    if (!v->is_number()) return Wrong(key, want, *v);
    const double x = v->get<double>();
    if (!(x >= lo && x <= hi)) return Wrong(key, want, *v);
    *out = x;
    return Status::Ok();
  }
  Status Text(const char* key, size_t max_bytes, std::string* out) {
    HF_ASSIGN_OR_RETURN(const json* v, Find(key, "a string"));
    if (!v->is_string()) return Wrong(key, "a string", *v);
    const std::string& s = v->get_ref<const std::string&>();
    if (s.size() > max_bytes) {
      return InvalidArgumentError(where_ + ": \"" + key + "\" is " + std::to_string(s.size()) +
                                  " bytes; the limit is " + std::to_string(max_bytes));
    }
    *out = s;
    return Status::Ok();
  }
  Result<const json*> Array(const char* key, size_t max_entries) {
    HF_ASSIGN_OR_RETURN(const json* v, Find(key, "an array"));
    if (!v->is_array()) return Wrong(key, "an array", *v);
    if (v->size() > max_entries) {
      return InvalidArgumentError(where_ + ": \"" + key + "\" has " + std::to_string(v->size()) +
                                  " entries; the limit is " + std::to_string(max_entries));
    }
    return v;
  }
  Status Error(const std::string& what) const { return InvalidArgumentError(where_ + ": " + what); }

 private:
  Result<const json*> Find(const char* key, const char* want) const {
    auto it = j_.find(key);
    if (it == j_.end()) return InvalidArgumentError(where_ + ": missing \"" + key + "\" (" + want + ")");
    return &*it;
  }
  Status Wrong(const char* key, const std::string& want, const json& got) const {
    return InvalidArgumentError(where_ + ": \"" + key + "\" must be " + want + ", got " + Shown(got));
  }

  const json& j_;
  std::string where_;
};

Result<RankView> ParseView(const json& j, const std::string& where, int64_t now) {
  if (!j.is_object()) return InvalidArgumentError(where + " must be an object, got " + Shown(j));
  Fields f(j, where);
  RankView v;
  ProgressRecordLayout& p = v.progress.record;
  HF_RETURN_IF_ERROR(f.Int("rank", 0, kMaxClusterWorldSize - 1, &v.rank));
  HF_RETURN_IF_ERROR(f.Int("node", 0, kMaxClusterNodes - 1, &v.node));
  HF_RETURN_IF_ERROR(f.Text("host", kMaxClusterHostBytes, &v.host));
  HF_RETURN_IF_ERROR(f.Int("pid", 0, kPidMax, &v.pid));
  HF_RETURN_IF_ERROR(f.Bool("alive", &v.alive));
  std::string state;
  HF_RETURN_IF_ERROR(f.Text("state", 1, &state));
  if (state.size() != 1 || static_cast<unsigned char>(state[0]) <= 0x20 || static_cast<unsigned char>(state[0]) >= 0x7f) {
    return f.Error("\"state\" must be one printable ASCII character (R, S, D, T, Z, ?...), got " + Shown(state));
  }
  v.proc_state = state[0];
  HF_RETURN_IF_ERROR(f.Bool("valid", &v.progress.valid));
  HF_RETURN_IF_ERROR(f.Bool("torn", &v.progress.torn));
  HF_RETURN_IF_ERROR(f.Int("step", kInt64Min, kInt64Max, &p.step));
  HF_RETURN_IF_ERROR(f.Int("phase", 0, kMaxPhase, &p.phase));
  HF_RETURN_IF_ERROR(f.Int("kind", 0, kMaxCollectiveKind, &p.collective_kind));
  HF_RETURN_IF_ERROR(f.Unsigned("issued", &p.collectives_issued));
  HF_RETURN_IF_ERROR(f.Unsigned("done", &p.collectives_done));
  HF_RETURN_IF_ERROR(f.Unsigned("waiting_on", &p.waiting_on));
  int64_t age = 0;
  HF_RETURN_IF_ERROR(f.Int("phase_age", -1, kInt64Max, &age));
  p.phase_started_ns = Back(age, now);
  HF_RETURN_IF_ERROR(f.Int("step_age", -1, kInt64Max, &age));
  p.step_started_ns = Back(age, now);
  HF_RETURN_IF_ERROR(f.Int("heartbeat_age", -1, kInt64Max, &age));
  p.heartbeat_ns = Back(age, now);
  HF_RETURN_IF_ERROR(f.Int("last_step_ns", kInt64Min, kInt64Max, &p.last_step_ns));
  HF_RETURN_IF_ERROR(f.Int("checkpoint_step", kInt64Min, kInt64Max, &p.checkpoint_step));
  HF_RETURN_IF_ERROR(f.Unsigned("checkpoint_failures", &p.checkpoint_failures));
  HF_RETURN_IF_ERROR(f.Int("checkpoint_failed_step", kInt64Min, kInt64Max, &p.checkpoint_failed_step));
  std::string error;
  HF_RETURN_IF_ERROR(f.Text("checkpoint_error", kMaxCheckpointErrorBytes, &error));
  if (error.find('\0') != std::string::npos) return f.Error("\"checkpoint_error\" must not contain NUL");
  std::memcpy(p.checkpoint_error, error.data(), error.size());  // the rest stays zero
  HF_RETURN_IF_ERROR(f.Unsigned("ring_head", &p.ring_head));
  HF_ASSIGN_OR_RETURN(const json* ring, f.Array("ring", kProgressRingSize));
  const uint64_t n = std::min<uint64_t>(p.ring_head, kProgressRingSize);
  if (ring->size() != n) {
    return f.Error("\"ring\" has " + std::to_string(ring->size()) + " entries; ring_head " +
                   std::to_string(p.ring_head) + " means " + std::to_string(n));
  }
  for (uint64_t i = 0; i < n; ++i) {
    const json& e = (*ring)[i];
    const std::string at = where + ": ring[" + std::to_string(i) + "]";
    if (!e.is_array() || e.size() != 5) {
      return InvalidArgumentError(at + " must be [seq, kind, bytes, issued_age, completed_age], got " + Shown(e));
    }
    CollectiveEntry& c = p.ring[(p.ring_head - n + i) % kProgressRingSize];
    int64_t kind = 0;
    int64_t issued = 0;
    int64_t completed = 0;
    if (!e[0].is_number_unsigned() || !IntIn(e[1], 0, kMaxCollectiveKind, &kind) || !e[2].is_number_unsigned() ||
        !IntIn(e[3], -1, kInt64Max, &issued) || !IntIn(e[4], -1, kInt64Max, &completed)) {
      return InvalidArgumentError(at + " must be [seq >= 0, kind in [0, " + std::to_string(kMaxCollectiveKind) +
                                  "], bytes >= 0, issued_age >= -1, completed_age >= -1], got " + Shown(e));
    }
    c.seq = e[0].get<uint64_t>();
    c.kind = static_cast<uint32_t>(kind);
    c.bytes = e[2].get<uint64_t>();
    c.issued_ns = Back(issued, now);
    c.completed_ns = Back(completed, now);
  }
  p.rank = v.rank;
  p.pid = v.pid;
  return v;
}

Result<std::vector<RankView>> ParseViews(Fields& f, const std::string& where, int64_t now) {
  HF_ASSIGN_OR_RETURN(const json* ranks, f.Array("ranks", kMaxClusterNodeRanks));
  std::vector<RankView> out;
  out.reserve(ranks->size());
  for (size_t i = 0; i < ranks->size(); ++i) {
    HF_ASSIGN_OR_RETURN(RankView v, ParseView((*ranks)[i], where + ": ranks[" + std::to_string(i) + "]", now));
    out.push_back(std::move(v));
  }
  return out;
}

Result<ClusterMessage> ParseHello(const json& j, int version) {
  Fields f(j, "hello");
  HelloMsg m;
  m.version = version;
  HF_RETURN_IF_ERROR(f.Int("node", 0, kMaxClusterNodes - 1, &m.node));
  HF_RETURN_IF_ERROR(f.Text("host", kMaxClusterHostBytes, &m.host));
  HF_RETURN_IF_ERROR(f.Int("nproc", 1, kMaxClusterNodeRanks, &m.nproc));
  HF_RETURN_IF_ERROR(f.Int("pid", 1, kPidMax, &m.pid));
  HF_RETURN_IF_ERROR(f.Text("health_report", kMaxClusterReportBytes, &m.health_report_json));
  return ClusterMessage(std::move(m));
}

Result<ClusterMessage> ParseProgress(const json& j, int64_t now) {
  Fields f(j, "progress");
  ProgressMsg m;
  HF_RETURN_IF_ERROR(f.Int("generation", -1, kIntMax, &m.generation));
  HF_ASSIGN_OR_RETURN(m.ranks, ParseViews(f, "progress", now));
  return ClusterMessage(std::move(m));
}

Result<ClusterMessage> ParseRankExit(const json& j, int64_t now) {
  Fields f(j, "rank_exit");
  RankExitMsg m;
  HF_RETURN_IF_ERROR(f.Int("generation", -1, kIntMax, &m.generation));
  HF_RETURN_IF_ERROR(f.Int("rank", 0, kMaxClusterWorldSize - 1, &m.rank));
  HF_RETURN_IF_ERROR(f.Int("wstatus", 0, kMaxWaitStatus, &m.wstatus));
  HF_RETURN_IF_ERROR(f.Text("exec_error", kMaxClusterTextBytes, &m.exec_error));
  HF_ASSIGN_OR_RETURN(const json* tail, f.Array("log_tail", kMaxClusterLogLines));
  for (size_t i = 0; i < tail->size(); ++i) {
    const json& line = (*tail)[i];
    const std::string at = "rank_exit: log_tail[" + std::to_string(i) + "]";
    if (!line.is_string()) return InvalidArgumentError(at + " must be a string, got " + Shown(line));
    if (line.get_ref<const std::string&>().size() > kMaxClusterLogLineBytes) {
      return InvalidArgumentError(at + " is " + std::to_string(line.get_ref<const std::string&>().size()) +
                                  " bytes; the limit is " + std::to_string(kMaxClusterLogLineBytes));
    }
    m.log_tail.push_back(line.get<std::string>());
  }
  HF_ASSIGN_OR_RETURN(m.ranks, ParseViews(f, "rank_exit", now));
  return ClusterMessage(std::move(m));
}

Result<ClusterMessage> ParseHealth(const json& j) {
  Fields f(j, "health");
  HealthMsg m;
  HF_RETURN_IF_ERROR(f.Int("generation", -1, kIntMax, &m.generation));
  HF_RETURN_IF_ERROR(f.Text("report", kMaxClusterReportBytes, &m.report_json));
  return ClusterMessage(std::move(m));
}

Result<ClusterMessage> ParseReject(const json& j) {
  Fields f(j, "reject");
  RejectMsg m;
  HF_RETURN_IF_ERROR(f.Text("why", kMaxClusterTextBytes, &m.why));
  return ClusterMessage(std::move(m));
}

Result<ClusterMessage> ParseStart(const json& j) {
  Fields f(j, "start");
  StartMsg m;
  HF_RETURN_IF_ERROR(f.Text("run_id", kMaxClusterTextBytes, &m.run_id));
  HF_RETURN_IF_ERROR(f.Int("attempt", 0, kIntMax, &m.attempt));
  HF_RETURN_IF_ERROR(f.Int("generation", 0, kIntMax, &m.generation));
  HF_RETURN_IF_ERROR(f.Int("world_size", 1, kMaxClusterWorldSize, &m.world_size));
  HF_RETURN_IF_ERROR(f.Text("store_addr", kMaxClusterTextBytes, &m.store_addr));
  HF_RETURN_IF_ERROR(f.Int("master_port", 0, 65535, &m.master_port));
  HF_RETURN_IF_ERROR(f.Int("resume_step", -1, kInt64Max, &m.resume_step));
  HF_ASSIGN_OR_RETURN(const json* ranks, f.Array("ranks", kMaxClusterNodeRanks));
  for (size_t i = 0; i < ranks->size(); ++i) {
    const json& r = (*ranks)[i];
    const std::string at = "start: ranks[" + std::to_string(i) + "]";
    if (!r.is_object()) return InvalidArgumentError(at + " must be an object, got " + Shown(r));
    Fields pf(r, at);
    RankPlacement p;
    HF_RETURN_IF_ERROR(pf.Int("global_rank", 0, m.world_size - 1, &p.global_rank));
    HF_RETURN_IF_ERROR(pf.Int("local_rank", 0, kMaxClusterNodeRanks - 1, &p.local_rank));
    HF_RETURN_IF_ERROR(pf.Int("node", 0, kMaxClusterNodes - 1, &p.node));
    HF_RETURN_IF_ERROR(pf.Text("host", kMaxClusterHostBytes, &p.host));
    HF_RETURN_IF_ERROR(pf.Int("device", -1, kMaxClusterNodeRanks - 1, &p.device));
    m.ranks.push_back(std::move(p));
  }
  return ClusterMessage(std::move(m));
}

Result<ClusterMessage> ParseStop(const json& j) {
  Fields f(j, "stop");
  StopMsg m;
  HF_RETURN_IF_ERROR(f.Int("generation", -1, kIntMax, &m.generation));
  HF_RETURN_IF_ERROR(f.Text("why", kMaxClusterTextBytes, &m.why));
  HF_RETURN_IF_ERROR(f.Double("grace_s", 0, kMaxGraceSeconds, &m.grace_s));
  return ClusterMessage(std::move(m));
}

Result<ClusterMessage> ParseSignal(const json& j) {
  Fields f(j, "signal");
  SignalMsg m;
  HF_RETURN_IF_ERROR(f.Int("generation", -1, kIntMax, &m.generation));
  HF_RETURN_IF_ERROR(f.Int("sig", 1, kMaxClusterSignal, &m.sig));
  return ClusterMessage(std::move(m));
}

Result<ClusterMessage> ParseKill(const json& j) {
  Fields f(j, "kill");
  KillMsg m;
  HF_RETURN_IF_ERROR(f.Int("generation", -1, kIntMax, &m.generation));
  HF_ASSIGN_OR_RETURN(const json* ranks, f.Array("ranks", kMaxClusterKillRanks));
  for (size_t i = 0; i < ranks->size(); ++i) {
    int64_t r = 0;
    if (!IntIn((*ranks)[i], 0, kMaxClusterWorldSize - 1, &r)) {
      return InvalidArgumentError("kill: ranks[" + std::to_string(i) + "] must be a rank in [0, " +
                                  std::to_string(kMaxClusterWorldSize - 1) + "], got " + Shown((*ranks)[i]));
    }
    m.ranks.push_back(static_cast<int>(r));
  }
  return ClusterMessage(std::move(m));
}

Result<ClusterMessage> ParseFinish(const json& j) {
  Fields f(j, "finish");
  FinishMsg m;
  HF_RETURN_IF_ERROR(f.Int("code", 0, 255, &m.code));
  HF_RETURN_IF_ERROR(f.Text("state", kMaxClusterTextBytes, &m.state));
  return ClusterMessage(std::move(m));
}

constexpr char kTypes[] = "hello, progress, rank_exit, health, reject, start, stop, signal, kill, finish";

Result<ClusterMessage> Parse(std::string_view line, int64_t now) {
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  if (line.size() + 1 > kMaxClusterMessageBytes) {
    return InvalidArgumentError("cluster message is " + std::to_string(line.size() + 1) +
                                " bytes with its newline; the limit is " + std::to_string(kMaxClusterMessageBytes));
  }
  if (line.find('\n') != std::string_view::npos) {
    return InvalidArgumentError("cluster message must be one line: newline at byte " +
                                std::to_string(line.find('\n')));
  }
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) {
    return InvalidArgumentError("cluster message is an empty line; expected a JSON object");
  }
  bool too_deep = false;
  json::parser_callback_t limit_depth = [&too_deep](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= kMaxClusterJsonDepth) {
      too_deep = true;
      return false;  // discard the subtree; the flag rejects the message below
    }
    return true;
  };
  json j;
  try {
    j = json::parse(line.begin(), line.end(), limit_depth);
  } catch (const json::exception& e) {
    return InvalidArgumentError("cluster message is not JSON: " + CleanJsonError(e.what()));
  }
  if (too_deep) {
    return InvalidArgumentError("cluster message nests deeper than " + std::to_string(kMaxClusterJsonDepth) +
                                " levels");
  }
  if (!j.is_object()) {
    return InvalidArgumentError("cluster message must be a JSON object, got " + std::string(j.type_name()));
  }
  auto type_it = j.find("type");
  if (type_it == j.end() || !type_it->is_string()) {
    return InvalidArgumentError("cluster message needs \"type\" as a string, one of: " + std::string(kTypes));
  }
  const std::string& type = type_it->get_ref<const std::string&>();
  // A reject reads the same in every version, so that any follower can say why.
  if (type == "reject") return ParseReject(j);

  auto v = j.find("v");
  if (v == j.end()) {
    return InvalidArgumentError("cluster message " + Shown(*type_it) +
                                " has no \"v\": the peer speaks holdfast cluster protocol v1, this holdfastd "
                                "speaks v" + std::to_string(kClusterProtocolVersion) + ": " + kSameBuild);
  }
  int64_t version = 0;
  if (!IntIn(*v, 0, kIntMax, &version)) {
    return InvalidArgumentError("cluster message \"v\" must be a protocol version (an integer), got " + Shown(*v) +
                                "; this holdfastd speaks v" + std::to_string(kClusterProtocolVersion));
  }
  if (version != kClusterProtocolVersion) {
    return InvalidArgumentError("the peer speaks holdfast cluster protocol v" + std::to_string(version) +
                                ", this holdfastd speaks v" + std::to_string(kClusterProtocolVersion) + ": " +
                                kSameBuild);
  }
  if (type == "hello") return ParseHello(j, static_cast<int>(version));
  if (type == "progress") return ParseProgress(j, now);
  if (type == "rank_exit") return ParseRankExit(j, now);
  if (type == "health") return ParseHealth(j);
  if (type == "start") return ParseStart(j);
  if (type == "stop") return ParseStop(j);
  if (type == "signal") return ParseSignal(j);
  if (type == "kill") return ParseKill(j);
  if (type == "finish") return ParseFinish(j);
  return InvalidArgumentError("unknown cluster message type " + Shown(*type_it) + "; v" +
                              std::to_string(kClusterProtocolVersion) + " types: " + kTypes);
}

}  // namespace

const char* ClusterMessageTypeName(const ClusterMessage& m) {
  static constexpr const char* kNames[] = {"hello", "progress", "rank_exit", "health", "reject",
                                           "start", "stop",     "signal",    "kill",   "finish"};
  static_assert(std::size(kNames) == std::variant_size_v<ClusterMessage>);
  return kNames[m.index()];
}

bool IsFollowerMessage(const ClusterMessage& m) {
  return std::holds_alternative<HelloMsg>(m) || std::holds_alternative<ProgressMsg>(m) ||
         std::holds_alternative<RankExitMsg>(m) || std::holds_alternative<HealthMsg>(m);
}

std::string EncodeClusterMessage(const ClusterMessage& m, int64_t now_ns) {
  const std::string line = Dump(std::visit(Encoder{now_ns}, m)) + "\n";
  HF_CHECK_MSG(line.size() <= kMaxClusterMessageBytes,
               std::string("EncodeClusterMessage: a ") + ClusterMessageTypeName(m) + " message of " +
                   std::to_string(line.size()) + " bytes");
  return line;
}

Result<ClusterMessage> ParseClusterMessage(std::string_view line, int64_t now_ns) {
  // Parse checks types before it reads; this is the last line of defence of
  // "never throws" (an allocation failure, say).
  try {
    return Parse(line, now_ns);
  } catch (const std::exception& e) {
    return InvalidArgumentError(std::string("cluster message could not be read: ") + e.what());
  }
}

}  // namespace holdfast
