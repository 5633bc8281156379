// Cluster protocol messages: each message type to and from its JSON line, and the version/type dispatch.
#include "daemon/cluster_protocol.h"
#include "daemon/json_line.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <exception>
#include <iterator>
#include <limits>
#include <type_traits>
#include <utility>

#include "common/peer_auth.h"
#include "daemon/cluster_protocol_internal.h"

namespace holdfast {
namespace cluster_internal {
namespace {

constexpr int64_t kIntMax = std::numeric_limits<int>::max();
constexpr int64_t kMaxWaitStatus = 0xffff;
constexpr double kMaxGraceSeconds = 1e6;

constexpr char kSameBuild[] = "run the same holdfast build on every node";

// ---- encoding ----

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
    HF_CHECK_MSG(m.nonce.size() == kAuthNonceBytes && m.proof.size() == kAuthProofBytes,
                 "EncodeClusterMessage: a hello without its handshake nonce and proof");
    j["nonce"] = HexEncode(m.nonce);
    j["proof"] = HexEncode(m.proof);
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
    CheckRange(m.spec.attempt, 0, kIntMax, "StartMsg::attempt");
    CheckRange(m.spec.generation, 0, kIntMax, "StartMsg::generation");
    CheckRange(m.spec.world_size, 1, kMaxClusterWorldSize, "StartMsg::world_size");
    CheckRange(m.spec.resume_step, -1, kInt64Max, "StartMsg::resume_step");
    CheckCount(m.ranks.size(), kMaxClusterNodeRanks, "rank placements");
    ojson j = Header("start");
    j["run_id"] = Text(m.spec.run_id, kMaxClusterTextBytes);
    j["attempt"] = m.spec.attempt;
    j["generation"] = m.spec.generation;
    j["world_size"] = m.spec.world_size;
    j["store_addr"] = Text(m.spec.store_addr, kMaxClusterTextBytes);
    j["master_port"] = m.spec.master_port;
    j["resume_step"] = m.spec.resume_step;
    ojson ranks = ojson::array();
    for (const RankPlacement& r : m.ranks) {
      CheckRange(r.global_rank, 0, m.spec.world_size - 1, "RankPlacement::global_rank");
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
  ojson operator()(const ChallengeMsg& m) const {
    HF_CHECK_MSG(m.nonce.size() == kAuthNonceBytes, "EncodeClusterMessage: a challenge without its nonce");
    ojson j = Header("challenge");
    j["nonce"] = HexEncode(m.nonce);
    return j;
  }
  ojson operator()(const WelcomeMsg& m) const {
    HF_CHECK_MSG(m.proof.size() == kAuthProofBytes, "EncodeClusterMessage: a welcome without its proof");
    ojson j = Header("welcome");
    j["proof"] = HexEncode(m.proof);
    if (!m.run_id.empty()) j["run_id"] = Text(m.run_id, kMaxClusterTextBytes);
    return j;
  }
};

// ---- parsing ----

// A run id names files and folders on every node (progress records, the
// memory snapshot folder): what the leader sends must be one, never a path.
Status RunIdField(Fields& f, const char* where, std::string* out) {
  HF_RETURN_IF_ERROR(f.Text("run_id", kMaxClusterTextBytes, out));
  const bool ok = !out->empty() && out->size() <= 128 && out->front() != '.' &&
                  std::all_of(out->begin(), out->end(), [](char c) {
                    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
                  });
  if (ok) return Status::Ok();
  return InvalidArgumentError(std::string(where) + ": run_id " + Shown(json(*out)) +
                              " is not a run id (1 to 128 of A-Z a-z 0-9 - _ ., not starting with '.')");
}

// A handshake field: `bytes` raw bytes as 2 * bytes hex digits.
Status HexField(Fields& f, const char* key, size_t bytes, std::string* out) {
  std::string hex;
  HF_RETURN_IF_ERROR(f.Text(key, 2 * bytes, &hex));
  Result<std::string> raw = HexDecode(hex);
  if (!raw.ok() || raw->size() != bytes) {
    return f.Error(std::string("\"") + key + "\" must be " + std::to_string(2 * bytes) + " hex digits");
  }
  *out = std::move(raw).value();
  return Status::Ok();
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
  HF_RETURN_IF_ERROR(HexField(f, "nonce", kAuthNonceBytes, &m.nonce));
  HF_RETURN_IF_ERROR(HexField(f, "proof", kAuthProofBytes, &m.proof));
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
  HF_RETURN_IF_ERROR(RunIdField(f, "start", &m.spec.run_id));
  HF_RETURN_IF_ERROR(f.Int("attempt", 0, kIntMax, &m.spec.attempt));
  HF_RETURN_IF_ERROR(f.Int("generation", 0, kIntMax, &m.spec.generation));
  HF_RETURN_IF_ERROR(f.Int("world_size", 1, kMaxClusterWorldSize, &m.spec.world_size));
  HF_RETURN_IF_ERROR(f.Text("store_addr", kMaxClusterTextBytes, &m.spec.store_addr));
  HF_RETURN_IF_ERROR(f.Int("master_port", 0, 65535, &m.spec.master_port));
  HF_RETURN_IF_ERROR(f.Int("resume_step", -1, kInt64Max, &m.spec.resume_step));
  HF_ASSIGN_OR_RETURN(const json* ranks, f.Array("ranks", kMaxClusterNodeRanks));
  for (size_t i = 0; i < ranks->size(); ++i) {
    const json& r = (*ranks)[i];
    const std::string at = "start: ranks[" + std::to_string(i) + "]";
    if (!r.is_object()) return InvalidArgumentError(at + " must be an object, got " + Shown(r));
    Fields pf(r, at);
    RankPlacement p;
    HF_RETURN_IF_ERROR(pf.Int("global_rank", 0, m.spec.world_size - 1, &p.global_rank));
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

Result<ClusterMessage> ParseChallenge(const json& j) {
  Fields f(j, "challenge");
  ChallengeMsg m;
  HF_RETURN_IF_ERROR(HexField(f, "nonce", kAuthNonceBytes, &m.nonce));
  return ClusterMessage(std::move(m));
}

Result<ClusterMessage> ParseWelcome(const json& j) {
  Fields f(j, "welcome");
  WelcomeMsg m;
  HF_RETURN_IF_ERROR(HexField(f, "proof", kAuthProofBytes, &m.proof));
  if (j.contains("run_id")) HF_RETURN_IF_ERROR(RunIdField(f, "welcome", &m.run_id));  // absent: an older leader
  return ClusterMessage(std::move(m));
}

constexpr char kTypes[] =
    "hello, progress, rank_exit, health, reject, start, stop, signal, kill, finish, challenge, welcome";

Result<ClusterMessage> Parse(std::string_view line, int64_t now) {
  HF_ASSIGN_OR_RETURN(json j, ParseJsonObjectLine(line, kMaxClusterMessageBytes, kMaxClusterJsonDepth, "cluster message"));
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
  if (type == "challenge") return ParseChallenge(j);
  if (type == "welcome") return ParseWelcome(j);
  return InvalidArgumentError("unknown cluster message type " + Shown(*type_it) + "; v" +
                              std::to_string(kClusterProtocolVersion) + " types: " + kTypes);
}

}  // namespace
}  // namespace cluster_internal

const char* ClusterMessageTypeName(const ClusterMessage& m) {
  static constexpr const char* kNames[] = {"hello",  "progress", "rank_exit", "health", "reject",    "start",
                                           "stop",   "signal",   "kill",      "finish", "challenge", "welcome"};
  static_assert(std::size(kNames) == std::variant_size_v<ClusterMessage>);
  return kNames[m.index()];
}

bool IsFollowerMessage(const ClusterMessage& m) {
  return std::holds_alternative<HelloMsg>(m) || std::holds_alternative<ProgressMsg>(m) ||
         std::holds_alternative<RankExitMsg>(m) || std::holds_alternative<HealthMsg>(m);
}

std::string EncodeClusterMessage(const ClusterMessage& m, int64_t now_ns) {
  const std::string line = cluster_internal::Dump(std::visit(cluster_internal::Encoder{now_ns}, m)) + "\n";
  HF_CHECK_MSG(line.size() <= kMaxClusterMessageBytes,
               std::string("EncodeClusterMessage: a ") + ClusterMessageTypeName(m) + " message of " +
                   std::to_string(line.size()) + " bytes");
  return line;
}

Result<ClusterMessage> ParseClusterMessage(std::string_view line, int64_t now_ns) {
  // Parse checks types before it reads; this is the last line of defence of
  // "never throws" (an allocation failure, say).
  try {
    return cluster_internal::Parse(line, now_ns);
  } catch (const std::exception& e) {
    return InvalidArgumentError(std::string("cluster message could not be read: ") + e.what());
  }
}

}  // namespace holdfast
