// Control from any node (docs/control-protocol.md, "Trust"): the leading
// holdfastd also serves the control protocol over TCP, on the address it
// advertises to its followers, for runctl on a login node or another node of
// the job, where RUN_DIR/holdfastd.sock cannot be reached.
//
// Where: RUN_DIR/control-endpoint.json (ControlEndpoint), written atomically
// by the leader when it starts and removed when it ends; the file says where
// it listens, or why it does not (TCP control is off where munged is not
// running: nothing could prove who asks).
//
// How: every request line over TCP starts with a MUNGE credential and one
// space, then the request as on the Unix socket:
//   MUNGE:AwQDAA...: {"v":1,"id":7,"op":"status","args":{}}
// The credential's payload is ControlCredentialPayload: the endpoint and the
// SHA-256 of the request text, so a credential is good for that request to
// that daemon only, and munged decodes it once (its replay cache). The leader
// decodes it (AuthenticateControlLine) and hands the request and the
// credential's uid to the same handler as the Unix socket's, which applies
// the same owner-or-root rule (CheckPeerAllowed).
//
// Thread-safety: pure functions of their arguments, except the file reads
// and MUNGE calls, which are safe from any thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace holdfast {

inline constexpr char kControlEndpointName[] = "control-endpoint.json";
// The longest credential a request line may carry (munged's are some 150
// bytes for a 100-byte payload).
inline constexpr size_t kMaxControlCredentialBytes = 4096;

struct ControlEndpoint {
  std::string host;     // the leader's host name (the scheduler's)
  std::string addr;     // the address it listens on
  uint16_t port = 0;    // 0: TCP control is off, `off` says why
  int64_t pid = 0;      // the leader's pid, on `host`
  std::string run_id;   // the run it supervises
  std::string off;      // why TCP control is off ("" when on)
  std::string Where() const { return addr + ":" + std::to_string(port); }
};

// RUN_DIR/control-endpoint.json.
std::string ControlEndpointPath(const std::string& run_dir);
// One JSON object and a newline:
//   {"v":1,"host":"n1","addr":"10.77.0.11","port":40123,"pid":4242,"run_id":"r-...","auth":"munge"}
// or, TCP control off: "port":0 and "off":"munged is not reachable on n1: ...".
std::string EncodeControlEndpoint(const ControlEndpoint& endpoint);
// kInvalidArgument naming the bad field.
Result<ControlEndpoint> ParseControlEndpoint(std::string_view text);
// kNotFound when the run directory has no endpoint file (no leader wrote one:
// a daemon from before TCP control, or none started yet).
Result<ControlEndpoint> ReadControlEndpoint(const std::string& run_dir);

// "holdfast-control-v1 ADDR:PORT SHA256HEX": what a credential for `request`
// (the request's JSON text, no newline) to the daemon at `where` binds.
std::string ControlCredentialPayload(const std::string& where, std::string_view request);

// `request` (no newline) prefixed by a fresh credential from munged at
// `munge_socket`, with its '\n'. MungeEncode's errors.
Result<std::string> AuthenticatedControlLine(const std::string& munge_socket, const std::string& where,
                                             std::string_view request);

struct AuthenticatedRequest {
  uid_t uid = 0;
  gid_t gid = 0;
  std::string request;  // the request's JSON text
};

// Checks one line that arrived on the TCP control port of the daemon at
// `where`: a credential, a space, a request. kInvalidArgument saying what is
// wrong when it carries no credential, one that does not decode (malformed,
// another cluster's key, expired, replayed), or one made for another request
// or another daemon — the peer is not authenticated; kUnavailable when this
// node's munged cannot be reached to check it.
Result<AuthenticatedRequest> AuthenticateControlLine(const std::string& munge_socket, const std::string& where,
                                                     std::string_view line);

}  // namespace holdfast
