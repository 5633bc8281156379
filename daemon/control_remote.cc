#include "daemon/control_remote.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/peer_auth.h"
#include "daemon/munge_credential.h"

namespace holdfast {

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr char kPayloadPrefix[] = "holdfast-control-v1";

Status Bad(const std::string& what) { return InvalidArgumentError("control endpoint: " + what); }

}  // namespace

std::string ControlEndpointPath(const std::string& run_dir) { return run_dir + "/" + kControlEndpointName; }

std::string EncodeControlEndpoint(const ControlEndpoint& e) {
  ojson j;
  j["v"] = 1;
  j["host"] = e.host;
  j["addr"] = e.addr;
  j["port"] = e.port;
  j["pid"] = e.pid;
  j["run_id"] = e.run_id;
  if (e.port != 0) {
    j["auth"] = "munge";
  } else {
    j["off"] = e.off;
  }
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n";
}

Result<ControlEndpoint> ParseControlEndpoint(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Bad("not a JSON object");
  if (j.value("v", json()) != 1) return Bad("\"v\" must be 1");
  ControlEndpoint e;
  for (const auto& [key, out] : {std::pair<const char*, std::string*>{"host", &e.host}, {"addr", &e.addr},
                                 {"run_id", &e.run_id}}) {
    if (!j.value(key, json()).is_string()) return Bad(std::string("\"") + key + "\" must be a string");
    *out = j[key].get<std::string>();
  }
  const json port = j.value("port", json());
  if (!port.is_number_unsigned() || port.get<uint64_t>() > 65535) return Bad("\"port\" must be a port (0..65535)");
  e.port = static_cast<uint16_t>(port.get<uint64_t>());
  const json pid = j.value("pid", json());
  if (!pid.is_number_integer() || pid.get<int64_t>() < 0) return Bad("\"pid\" must be a pid");
  e.pid = pid.get<int64_t>();
  if (j.contains("off")) {
    if (!j["off"].is_string()) return Bad("\"off\" must be a string");
    e.off = j["off"].get<std::string>();
  }
  if (e.port != 0 && e.addr.empty()) return Bad("a port without an address");
  return e;
}

Result<ControlEndpoint> ReadControlEndpoint(const std::string& run_dir) {
  const std::string path = ControlEndpointPath(run_dir);
  std::ifstream in(path);
  if (!in) {
    if (errno == ENOENT) return NotFoundError(path + " does not exist: no leading holdfastd has written it");
    return ErrnoError("read " + path, errno);
  }
  std::stringstream ss;
  ss << in.rdbuf();
  Result<ControlEndpoint> e = ParseControlEndpoint(ss.str());
  if (!e.ok()) return e.status().WithContext(path);
  return e;
}

std::string ControlCredentialPayload(const std::string& where, std::string_view request) {
  return std::string(kPayloadPrefix) + " " + where + " " + Sha256Hex(request);
}

Result<std::string> AuthenticatedControlLine(const std::string& munge_socket, const std::string& where,
                                             std::string_view request) {
  HF_ASSIGN_OR_RETURN(std::string cred, MungeEncode(munge_socket, ControlCredentialPayload(where, request)));
  return cred + " " + std::string(request) + "\n";
}

Result<AuthenticatedRequest> AuthenticateControlLine(const std::string& munge_socket, const std::string& where,
                                                     std::string_view line) {
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  const size_t space = line.find(' ');
  const std::string_view cred = line.substr(0, space);
  if (space == std::string_view::npos || cred.rfind("MUNGE:", 0) != 0 || cred.size() > kMaxControlCredentialBytes) {
    return InvalidArgumentError(
        "a request over TCP must start with a MUNGE credential and a space (runctl sends one; "
        "docs/control-protocol.md, Trust)");
  }
  Result<MungeIdentity> id = MungeDecode(munge_socket, cred);
  if (!id.ok()) {
    if (id.status().code() == StatusCode::kUnavailable) {
      return UnavailableError("holdfastd cannot check credentials: " + id.status().message());
    }
    return id.status();
  }
  AuthenticatedRequest out;
  out.request = std::string(line.substr(space + 1));
  if (id->payload != ControlCredentialPayload(where, out.request)) {
    return InvalidArgumentError("the MUNGE credential was made for another request or another holdfastd (its "
                                "payload does not name this request to " + where + ")");
  }
  out.uid = id->uid;
  out.gid = id->gid;
  return out;
}

}  // namespace holdfast
