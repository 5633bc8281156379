#include "daemon/control_protocol.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <type_traits>
#include <nlohmann/json.hpp>
#include <utility>

namespace holdfast {
namespace {

using json = nlohmann::json;

// Invalid UTF-8 (a path in a message, say) becomes U+FFFD instead of throwing.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// "[json.exception.parse_error.101] parse error at line 1, column 2: ..." -> "parse error at ..."
std::string CleanJsonError(const char* what) {
  std::string s(what);
  if (!s.empty() && s[0] == '[') {
    size_t end = s.find("] ");
    if (end != std::string::npos) s.erase(0, end + 2);
  }
  return s;
}

// Parses one protocol line into a JSON object. `what` names the message
// ("request", "reply") in errors. Never throws.
Result<json> ParseLine(std::string_view line, const char* what) {
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  if (line.size() + 1 > kMaxControlMessageBytes) {
    return InvalidArgumentError(std::string(what) + " is " + std::to_string(line.size() + 1) +
                                " bytes with its newline; the limit is " +
                                std::to_string(kMaxControlMessageBytes));
  }
  if (line.find('\n') != std::string_view::npos) {
    return InvalidArgumentError(std::string(what) + " must be one line: newline at byte " +
                                std::to_string(line.find('\n')));
  }
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) {
    return InvalidArgumentError(std::string(what) + " is an empty line; expected a JSON object");
  }
  bool too_deep = false;
  json::parser_callback_t limit_depth = [&too_deep](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= kMaxControlJsonDepth) {
      too_deep = true;
      return false;  // discard the subtree; the flag rejects the message below
    }
    return true;
  };
  json j;
  try {
    j = json::parse(line.begin(), line.end(), limit_depth);
  } catch (const json::exception& e) {
    return InvalidArgumentError(std::string(what) + " is not JSON: " + CleanJsonError(e.what()));
  }
  if (too_deep) {
    return InvalidArgumentError(std::string(what) + " nests deeper than " +
                                std::to_string(kMaxControlJsonDepth) + " levels");
  }
  if (!j.is_object()) {
    return InvalidArgumentError(std::string(what) + " must be a JSON object, got " +
                                std::string(j.type_name()));
  }
  return j;
}

Status CheckVersion(const json& j, const char* what) {
  auto v = j.find("v");
  if (v == j.end()) {
    return InvalidArgumentError(std::string(what) + " has no \"v\"; supported protocol versions: " +
                                std::to_string(kControlProtocolVersion));
  }
  if (!v->is_number_integer() || v->get<int64_t>() != kControlProtocolVersion) {
    return InvalidArgumentError(std::string(what) + " has protocol version " + Dump(*v) +
                                "; supported protocol versions: " +
                                std::to_string(kControlProtocolVersion));
  }
  return Status::Ok();
}

Result<uint64_t> GetId(const json& j, const char* what) {
  auto id = j.find("id");
  if (id == j.end()) return InvalidArgumentError(std::string(what) + " has no \"id\"");
  if (!id->is_number_unsigned()) {
    return InvalidArgumentError(std::string(what) + " \"id\" must be an unsigned integer, got " +
                                Dump(*id));
  }
  return id->get<uint64_t>();
}

std::string JoinedOps() {
  std::string out;
  for (const std::string& op : ControlOps()) {
    if (!out.empty()) out += ", ";
    out += op;
  }
  return out;
}

// Parses text that must be a JSON object (args_json, result_json).
bool IsJsonObjectText(const std::string& text, json* out) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return false;
  *out = std::move(j);
  return true;
}

StatusCode StatusCodeForWire(const std::string& code) {
  if (code == "InvalidArgument") return StatusCode::kInvalidArgument;
  if (code == "Unavailable") return StatusCode::kUnavailable;
  if (code == "FailedPrecondition" || code == "PermissionDenied") {
    return StatusCode::kFailedPrecondition;
  }
  return StatusCode::kInternal;
}

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
  HF_RETURN_IF_ERROR(f.OptionalDouble("last_step_ms", &r.last_step_ms));
  HF_RETURN_IF_ERROR(f.OptionalInt("waiting_on", &r.waiting_on));
  HF_RETURN_IF_ERROR(f.Int("collectives_issued", &r.collectives_issued));
  HF_RETURN_IF_ERROR(f.OptionalDouble("steps_per_s", &r.steps_per_s));
  HF_RETURN_IF_ERROR(f.OptionalDouble("step_ms_p50", &r.step_ms_p50));
  HF_RETURN_IF_ERROR(f.OptionalDouble("step_ms_p99", &r.step_ms_p99));
  HF_RETURN_IF_ERROR(f.OptionalDouble("compute_ms_p50", &r.compute_ms_p50));
  HF_RETURN_IF_ERROR(f.OptionalDouble("wait_ms_p50", &r.wait_ms_p50));
  return r;
}

}  // namespace

const std::vector<std::string>& ControlOps() {
  static const std::vector<std::string> kOps = {control_op::kPing, control_op::kStatus,
                                                control_op::kCheckpoint, control_op::kStop,
                                                control_op::kHealth};
  return kOps;
}

bool IsControlOp(std::string_view op) {
  const auto& ops = ControlOps();
  return std::find(ops.begin(), ops.end(), op) != ops.end();
}

std::string ControlSocketPath(const std::string& run_dir) {
  if (run_dir.empty()) return kControlSocketName;
  if (run_dir.back() == '/') return run_dir + kControlSocketName;
  return run_dir + "/" + kControlSocketName;
}

const char* ControlErrorCodeName(ControlErrorCode code) {
  switch (code) {
    case ControlErrorCode::kInvalidArgument: return "InvalidArgument";
    case ControlErrorCode::kPermissionDenied: return "PermissionDenied";
    case ControlErrorCode::kUnavailable: return "Unavailable";
    case ControlErrorCode::kFailedPrecondition: return "FailedPrecondition";
    case ControlErrorCode::kInternal: return "Internal";
  }
  return "Internal";
}

ControlErrorCode ControlErrorCodeFor(const Status& status) {
  switch (status.code()) {
    case StatusCode::kInvalidArgument: return ControlErrorCode::kInvalidArgument;
    case StatusCode::kUnavailable:
    case StatusCode::kTimeout: return ControlErrorCode::kUnavailable;
    case StatusCode::kFailedPrecondition:
    case StatusCode::kNotFound:
    case StatusCode::kResourceExhausted: return ControlErrorCode::kFailedPrecondition;
    default: return ControlErrorCode::kInternal;
  }
}

Result<ControlRequest> ParseControlRequest(std::string_view line) {
  HF_ASSIGN_OR_RETURN(json j, ParseLine(line, "request"));
  HF_RETURN_IF_ERROR(CheckVersion(j, "request"));
  ControlRequest req;
  HF_ASSIGN_OR_RETURN(req.id, GetId(j, "request"));
  auto op = j.find("op");
  if (op == j.end() || !op->is_string()) {
    return InvalidArgumentError("request needs \"op\" as a string, one of: " + JoinedOps());
  }
  req.op = op->get<std::string>();
  if (!IsControlOp(req.op)) {
    return InvalidArgumentError("unknown op " + Dump(*op) + "; the ops are: " + JoinedOps());
  }
  auto args = j.find("args");
  if (args == j.end()) {
    req.args_json = "{}";
  } else if (!args->is_object()) {
    return InvalidArgumentError("request \"args\" must be a JSON object, got " +
                                std::string(args->type_name()));
  } else {
    req.args_json = Dump(*args);
  }
  return req;
}

std::string EncodeRequest(const ControlRequest& request) {
  json args;
  HF_CHECK_MSG(IsJsonObjectText(request.args_json, &args),
               "ControlRequest::args_json is not a JSON object: " + request.args_json);
  json j = {{"v", kControlProtocolVersion}, {"id", request.id}, {"op", request.op}, {"args", args}};
  return Dump(j) + "\n";
}

std::string EncodeOkResponse(uint64_t id, const std::string& result_json) {
  json result;
  HF_CHECK_MSG(IsJsonObjectText(result_json, &result),
               "result_json is not a JSON object: " + result_json);
  json j = {{"v", kControlProtocolVersion}, {"id", id}, {"ok", true}, {"result", result}};
  return Dump(j) + "\n";
}

std::string EncodeErrorResponse(uint64_t id, const Status& error) {
  HF_CHECK_MSG(!error.ok(), "EncodeErrorResponse needs an error");
  return EncodeErrorResponse(id, ControlErrorCodeFor(error), error.message());
}

std::string EncodeErrorResponse(uint64_t id, ControlErrorCode code, std::string_view message) {
  json j = {{"v", kControlProtocolVersion},
            {"id", id},
            {"ok", false},
            {"error", {{"code", ControlErrorCodeName(code)}, {"message", std::string(message)}}}};
  std::string out = Dump(j);
  if (out.size() + 1 > kMaxControlMessageBytes) {
    // A huge message (a log excerpt, say) must not break the framing: cut it.
    std::string cut(message.substr(0, kMaxControlMessageBytes / 2));
    j["error"]["message"] = cut + " ... (truncated)";
    out = Dump(j);
  }
  return out + "\n";
}

Result<ControlResponse> ParseControlResponse(std::string_view line) {
  HF_ASSIGN_OR_RETURN(json j, ParseLine(line, "reply"));
  HF_RETURN_IF_ERROR(CheckVersion(j, "reply"));
  ControlResponse resp;
  HF_ASSIGN_OR_RETURN(resp.id, GetId(j, "reply"));
  auto ok = j.find("ok");
  if (ok == j.end() || !ok->is_boolean()) {
    return InvalidArgumentError("reply needs \"ok\" as true or false");
  }
  resp.ok = ok->get<bool>();
  if (resp.ok) {
    auto result = j.find("result");
    if (result == j.end() || !result->is_object()) {
      return InvalidArgumentError("reply with ok=true needs \"result\" as a JSON object");
    }
    resp.result_json = Dump(*result);
    return resp;
  }
  auto error = j.find("error");
  if (error == j.end() || !error->is_object()) {
    return InvalidArgumentError("reply with ok=false needs \"error\" as a JSON object");
  }
  auto code = error->find("code");
  auto message = error->find("message");
  if (code == error->end() || !code->is_string() || message == error->end() ||
      !message->is_string()) {
    return InvalidArgumentError("reply \"error\" needs \"code\" and \"message\" as strings");
  }
  resp.error_code = code->get<std::string>();
  std::string text = message->get<std::string>();
  if (text.empty()) text = "(no message)";
  resp.error = Status(StatusCodeForWire(resp.error_code), std::move(text));
  return resp;
}

// ---- peer credentials ----

Result<PeerCredentials> ReadPeerCredentials(int fd) {
  struct ucred cred {};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return ErrnoError("getsockopt(SO_PEERCRED) on the control socket", errno);
  }
  return PeerCredentials{cred.pid, cred.uid, cred.gid};
}

Status CheckPeerAllowed(uid_t peer, uid_t owner) {
  if (peer == 0 || peer == owner) return Status::Ok();
  return FailedPreconditionError("uid " + std::to_string(peer) +
                                 " may not act on this run: only its owner (uid " +
                                 std::to_string(owner) + ") or root may");
}

// ---- client ----

namespace {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

using Clock = std::chrono::steady_clock;

// Milliseconds left until `deadline`, rounded up so that poll never spins at 0.
int RemainingMs(Clock::time_point deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<int64_t>(left, 24LL * 3600 * 1000));
}

// Waits for `events` on fd; kTimeout at the deadline.
Status WaitFor(int fd, short events, Clock::time_point deadline, const std::string& timeout_msg) {
  for (;;) {
    int ms = RemainingMs(deadline);
    if (ms == 0) return TimeoutError(timeout_msg);
    struct pollfd p {fd, events, 0};
    int rc = ::poll(&p, 1, ms);
    if (rc > 0) return Status::Ok();
    if (rc == 0) continue;  // the loop re-checks the deadline
    if (errno != EINTR) return ErrnoError("poll on the control socket", errno);
  }
}

}  // namespace

Result<ControlResponse> CallDaemon(const std::string& socket_path, const ControlRequest& request,
                                   std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  struct sockaddr_un addr {};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(addr.sun_path)) {
    return InvalidArgumentError("control socket path " + socket_path + " is " +
                                std::to_string(socket_path.size()) + " bytes; Unix sockets allow " +
                                std::to_string(sizeof(addr.sun_path) - 1) +
                                ": use a shorter run directory");
  }
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());

  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return ErrnoError("socket(AF_UNIX)", errno);
  // A Unix connect blocks only while the daemon's backlog is full; bound it.
  int ms = std::max(1, RemainingMs(deadline));
  struct timeval tv {ms / 1000, (ms % 1000) * 1000};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));

  int rc;
  do {
    rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    int err = errno;
    switch (err) {
      case ENOENT:
      case ECONNREFUSED:
      case ENOTSOCK:
      case ENOTDIR:
        return UnavailableError("no daemon is listening on " + socket_path + " (" +
                                std::strerror(err) + ")");
      case EAGAIN:
      case EINPROGRESS:
        return UnavailableError("holdfastd on " + socket_path +
                                " is not accepting connections (its backlog is full)");
      default: return ErrnoError("connect to " + socket_path, err);
    }
  }

  const std::string out = EncodeRequest(request);
  const std::string timeout_msg = "holdfastd on " + socket_path + " did not answer '" +
                                  request.op + "' within " + std::to_string(timeout.count()) +
                                  " ms";
  size_t sent = 0;
  while (sent < out.size()) {
    ssize_t n = ::send(fd.get(), out.data() + sent, out.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      HF_RETURN_IF_ERROR(WaitFor(fd.get(), POLLOUT, deadline, timeout_msg));
    } else if (n < 0 && errno != EINTR) {
      int err = errno;
      if (err == EPIPE || err == ECONNRESET) {
        return UnavailableError("holdfastd on " + socket_path +
                                " closed the connection before reading the request");
      }
      return ErrnoError("send to " + socket_path, err);
    }
  }

  std::string in;
  char buf[4096];
  for (;;) {
    HF_RETURN_IF_ERROR(WaitFor(fd.get(), POLLIN, deadline, timeout_msg));
    ssize_t n = ::recv(fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      if (errno == ECONNRESET) n = 0;  // same as a hang-up for the caller
      else return ErrnoError("recv from " + socket_path, errno);
    }
    if (n == 0) {
      if (in.empty()) {
        return UnavailableError("holdfastd on " + socket_path +
                                " closed the connection without answering");
      }
      return UnavailableError("holdfastd on " + socket_path +
                              " closed the connection in the middle of its reply (" +
                              std::to_string(in.size()) + " bytes, no newline)");
    }
    in.append(buf, static_cast<size_t>(n));
    size_t nl = in.find('\n');
    if (nl != std::string::npos) {
      in.resize(nl + 1);  // one request, one reply: anything after is ignored
      break;
    }
    if (in.size() >= kMaxControlMessageBytes) {
      return InvalidArgumentError("reply from holdfastd on " + socket_path + " exceeds " +
                                  std::to_string(kMaxControlMessageBytes) +
                                  " bytes without a newline");
    }
  }
  HF_ASSIGN_OR_RETURN(ControlResponse resp, ParseControlResponse(in));
  if (resp.id != request.id && !(resp.id == 0 && !resp.ok)) {
    return InvalidArgumentError("reply from holdfastd carries id " + std::to_string(resp.id) +
                                ", expected " + std::to_string(request.id));
  }
  return resp;
}

// ---- the "status" result ----

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
                       {"last_step_ms", opt_int(r.last_step_ms)},
                       {"waiting_on", opt_int(r.waiting_on)},
                       {"collectives_issued", r.collectives_issued},
                       {"steps_per_s", opt_int(r.steps_per_s)},
                       {"step_ms_p50", opt_int(r.step_ms_p50)},
                       {"step_ms_p99", opt_int(r.step_ms_p99)},
                       {"compute_ms_p50", opt_int(r.compute_ms_p50)},
                       {"wait_ms_p50", opt_int(r.wait_ms_p50)}});
    }
    nodes.push_back({{"node", n.node}, {"ranks", std::move(ranks)}});
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
            {"uptime_s", s.uptime_s},
            {"nodes", std::move(nodes)},
            {"last_incident", std::move(incident)},
            {"slowest_rank", opt_int(s.slowest_rank)},
            {"slowest_rank_note", opt_int(s.slowest_rank_note)}};
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
  HF_RETURN_IF_ERROR(f.Double("uptime_s", &s.uptime_s));
  HF_ASSIGN_OR_RETURN(const json* nodes, f.Array("nodes"));
  for (size_t i = 0; i < nodes->size(); ++i) {
    const json& n = (*nodes)[i];
    std::string where = "status result: nodes[" + std::to_string(i) + "]";
    if (!n.is_object()) return InvalidArgumentError(where + " must be an object");
    Fields nf(n, where);
    NodeStatus node;
    HF_RETURN_IF_ERROR(nf.Int("node", &node.node));
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
  return s;
}

}  // namespace holdfast
