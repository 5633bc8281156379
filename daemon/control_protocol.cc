// Control protocol framing: requests, responses, their error codes, and peer credentials.
#include "daemon/control_protocol.h"

#include "common/run_spec.h"
#include "daemon/json_line.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <nlohmann/json.hpp>
#include <utility>

#include "daemon/control_protocol_internal.h"

namespace holdfast {
namespace {

using json = nlohmann::json;
using control_internal::Dump;

// "[json.exception.parse_error.101] parse error at line 1, column 2: ..." -> "parse error at ..."
// Parses one protocol line into a JSON object. `what` names the message
// ("request", "reply") in errors. Never throws.
Result<json> ParseLine(std::string_view line, const char* what, size_t max_bytes = kMaxControlMessageBytes) {
  return ParseJsonObjectLine(line, max_bytes, kMaxControlJsonDepth, what);
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
  if (code == "FailedPrecondition" || code == "PermissionDenied" || code == "Unauthenticated") {
    return StatusCode::kFailedPrecondition;
  }
  return StatusCode::kInternal;
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
    case ControlErrorCode::kUnauthenticated: return "Unauthenticated";
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
    if (auto rid = args->find("run_id"); rid != args->end()) {
      // The daemon acts on its own run only when the request names it: a
      // run_id it cannot read must refuse the request, not skip the check.
      if (!rid->is_string()) {
        return InvalidArgumentError("request \"args.run_id\" must be a string (a run id, a prefix of one, or "
                                    "\"latest\"), got " + std::string(rid->type_name()) + " " + Dump(*rid));
      }
      const std::string id = rid->get<std::string>();
      if (id.empty()) {
        return InvalidArgumentError("request \"args.run_id\" is empty: name the run (a run id, a prefix of "
                                    "one, or \"latest\") or leave run_id out");
      }
      if (id.size() > kMaxRunIdBytes) {
        return InvalidArgumentError("request \"args.run_id\" is " + std::to_string(id.size()) +
                                    " bytes; run ids are at most " + std::to_string(kMaxRunIdBytes));
      }
      for (unsigned char ch : id) {
        if (ch < 0x21 || ch > 0x7e) {
          return InvalidArgumentError("request \"args.run_id\" " + Dump(*rid) +
                                      " has a character that no run id has (space, control or non-ASCII)");
        }
      }
      req.run_id = id;
    }
    req.args_json = Dump(*args);
  }
  return req;
}

bool RequestNamesRun(const ControlRequest& request, const std::string& run_id) {
  return !request.run_id || RunSpecNames(*request.run_id, run_id);  // parsing refused an empty one
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
  HF_ASSIGN_OR_RETURN(json j, ParseLine(line, "reply", kMaxControlReplyBytes));
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
                                 " may not look at or act on this run: only its owner (uid " +
                                 std::to_string(owner) + ") or root may");
}

const char* ControlViaName(ControlVia via) {
  switch (via) {
    case ControlVia::kAuto: return "auto";
    case ControlVia::kUnix: return "unix";
    case ControlVia::kTcp: return "tcp";
  }
  return "auto";
}

Result<ControlVia> ParseControlVia(std::string_view text) {
  for (ControlVia v : {ControlVia::kAuto, ControlVia::kUnix, ControlVia::kTcp}) {
    if (text == ControlViaName(v)) return v;
  }
  return InvalidArgumentError("unknown way to reach holdfastd '" + std::string(text) + "'; one of: auto, unix, tcp");
}

}  // namespace holdfast
