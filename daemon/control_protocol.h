// Control protocol v1: how `runctl` (and tests) talk to a running holdfastd.
//
// The daemon listens on a Unix stream socket, RUN_DIR/holdfastd.sock (bound
// and connected through UnixSocketAddress, daemon/unix_socket_address.h, so a
// RUN_DIR of any length works). Each
// message is one JSON object on one line ('\n'-terminated), at most
// kMaxControlMessageBytes including the newline. A client sends a request,
//   {"v":1,"id":7,"op":"status","args":{}}
// and the daemon answers with the same id:
//   {"v":1,"id":7,"ok":true,"result":{...}}
//   {"v":1,"id":7,"ok":false,"error":{"code":"FailedPrecondition","message":"..."}}
// (id 0 when the request was too broken to carry one). A request is at most
// kMaxControlMessageBytes, a reply at most kMaxControlReplyBytes. Only the run's owner
// and root may look at or act on the run: the daemon reads the peer's uid
// (ReadPeerCredentials) and checks it (CheckPeerAllowed). The leader also
// serves the protocol over TCP for runctl on other nodes, each request
// carrying a MUNGE credential in place of SO_PEERCRED (daemon/control_remote.h);
// CallRunDaemon picks the way. The full description, with the "status"
// result's fields and the trust rules, is docs/control-protocol.md.
//
// This header keeps nlohmann/json out: JSON payloads travel as serialized
// text (args_json, result_json), so the daemon includes it cheaply.
//
// Thread-safety: everything here is a pure function of its arguments, except
// CallDaemon, which owns one connection per call; all may be called from any
// thread at once.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace holdfast {

inline constexpr int kControlProtocolVersion = 1;
// One request, newline included (and one error reply).
inline constexpr size_t kMaxControlMessageBytes = 64 * 1024;
// One reply, newline included: a status of every rank grows with the run
// (about 330 bytes a rank: 512 ranks are some 170 KiB), so replies may be
// longer than requests.
inline constexpr size_t kMaxControlReplyBytes = 16 << 20;
// Nesting deeper than this inside a message is rejected (keeps every walk of
// a parsed message's tree shallow).
inline constexpr int kMaxControlJsonDepth = 32;
inline constexpr char kControlSocketName[] = "holdfastd.sock";
// Longest args.run_id a request may carry.
inline constexpr size_t kMaxRunIdBytes = 128;

// The operations of v1.
namespace control_op {
inline constexpr char kPing[] = "ping";              // -> {}
inline constexpr char kStatus[] = "status";          // -> RunStatus (EncodeStatusResult)
inline constexpr char kCheckpoint[] = "checkpoint";  // -> {"requested_at_step":N}
inline constexpr char kStop[] = "stop";              // -> {"stopping":true}
inline constexpr char kHealth[] = "health";          // -> the daemon's latest health results
}  // namespace control_op
// "ping, status, checkpoint, stop, health"
const std::vector<std::string>& ControlOps();
bool IsControlOp(std::string_view op);

// RUN_DIR/holdfastd.sock: the path, for messages and unlink; bind and connect
// take UnixSocketAddress::For(path), which also reaches a path past sun_path.
std::string ControlSocketPath(const std::string& run_dir);

// The error codes a response may carry. Status has no "permission denied",
// so the daemon names it explicitly (see CheckPeerAllowed).
enum class ControlErrorCode {
  kInvalidArgument,
  kPermissionDenied,
  kUnavailable,
  kFailedPrecondition,
  kInternal,
  kUnauthenticated,  // over TCP: no credential, or one that does not prove who sent the request
};
const char* ControlErrorCodeName(ControlErrorCode code);  // "PermissionDenied"
// InvalidArgument -> kInvalidArgument; Unavailable, Timeout -> kUnavailable;
// FailedPrecondition, NotFound, ResourceExhausted -> kFailedPrecondition;
// everything else -> kInternal.
ControlErrorCode ControlErrorCodeFor(const Status& status);

struct ControlRequest {
  uint64_t id = 0;
  std::string op;                 // one of control_op::*
  std::string args_json = "{}";   // a serialized JSON object
  // args.run_id, validated by ParseControlRequest: the run the request is
  // about ("latest", a run id or a prefix of one); unset = this daemon's run.
  std::optional<std::string> run_id;
};

// Whether a request's run_id (ControlRequest::run_id) names `run_id`:
// unset, "latest", the id itself or a prefix of it.
bool RequestNamesRun(const ControlRequest& request, const std::string& run_id);

struct ControlResponse {
  uint64_t id = 0;
  bool ok = false;
  std::string result_json;  // ok: a serialized JSON object
  std::string error_code;   // !ok: the wire code, e.g. "PermissionDenied"
  // !ok: the daemon's message, as a Status (PermissionDenied arrives as
  // kFailedPrecondition, an unknown code as kInternal). OK when ok.
  Status error;
};

// Requests. Any malformed line is kInvalidArgument saying what is wrong — a
// key twice in one object, an args.run_id that is not a non-empty string of
// at most kMaxRunIdBytes printable characters included; the line may end in
// one '\n'. Never throws.
Result<ControlRequest> ParseControlRequest(std::string_view line);
// One line, '\n' included. An args_json that is not a JSON object is a
// programming error (HF_CHECK).
std::string EncodeRequest(const ControlRequest& request);

// Responses, each one line with its '\n'. A result_json that is not a JSON
// object is a programming error (HF_CHECK).
std::string EncodeOkResponse(uint64_t id, const std::string& result_json);
// The code comes from ControlErrorCodeFor(error); error must not be OK.
std::string EncodeErrorResponse(uint64_t id, const Status& error);
std::string EncodeErrorResponse(uint64_t id, ControlErrorCode code, std::string_view message);
Result<ControlResponse> ParseControlResponse(std::string_view line);

// ---- peer credentials ----
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};
// SO_PEERCRED of a connected Unix socket (`fd` stays the caller's).
Result<PeerCredentials> ReadPeerCredentials(int fd);
// OK when peer is the owner or root; otherwise kFailedPrecondition whose
// message says who may look at and act on the run. The daemon answers a
// refusal with EncodeErrorResponse(id, ControlErrorCode::kPermissionDenied,
// status.message()). One rule for both ways in: the Unix socket's peer uid
// and a TCP request's MUNGE uid.
Status CheckPeerAllowed(uid_t peer, uid_t owner);

// ---- client ----
// Connects to socket_path (of any length: UnixSocketAddress), sends `request`,
// waits for the reply line, closes.
// The whole exchange is bounded by `timeout`. kUnavailable "no daemon is
// listening on PATH" when the socket is missing or refuses; kUnavailable when
// the daemon hangs up before a whole reply; kTimeout when it does not answer
// in time; kInvalidArgument for a reply that breaks the protocol. A reply with
// ok=false is a successful call: look at response.ok.
Result<ControlResponse> CallDaemon(const std::string& socket_path, const ControlRequest& request,
                                   std::chrono::milliseconds timeout);
// The same exchange for a line as it is (a test's hostile request included):
// sends `line` and a '\n', returns the reply line without its '\n'. The
// daemon hanging up while the line is sent is not an error: what it answered
// before closing is read. Errors as CallDaemon's.
Result<std::string> SendControlLine(const std::string& socket_path, const std::string& line,
                                    std::chrono::milliseconds timeout);

// How a client reaches the run's daemon.
enum class ControlVia {
  kAuto,  // the Unix socket; when it cannot be reached from here, TCP (the run dir's endpoint)
  kUnix,  // RUN_DIR/holdfastd.sock only
  kTcp,   // RUN_DIR/control-endpoint.json's address only, with a MUNGE credential
};
// "auto", "unix", "tcp"; and back (kInvalidArgument listing them).
const char* ControlViaName(ControlVia via);
Result<ControlVia> ParseControlVia(std::string_view text);

// CallDaemon on the daemon of `run_dir`, the way `via` says. kAuto tries the
// Unix socket and goes over TCP only when the socket cannot be reached at all
// (missing, refused — a socket file on a shared file system whose daemon runs
// on another host — or not permitted): never when the daemon is merely slow.
// TCP needs the endpoint the leader wrote (daemon/control_remote.h) and a
// credential from munged at `munge_socket` (MungeSocket(); "" = the default).
// Errors as CallDaemon's, kUnavailable saying what was tried and what to do
// when neither way reaches a daemon (TCP control off on the leader, munged
// not running here).
Result<ControlResponse> CallRunDaemon(const std::string& run_dir, const ControlRequest& request,
                                      std::chrono::milliseconds timeout, ControlVia via,
                                      const std::string& munge_socket);

// ---- the "status" result ----
// The daemon fills a RunStatus and sends EncodeStatusResult; runctl parses it
// back, so both sides share the keys. Optional fields travel as null.
struct RankStatus {
  int rank = 0;
  int64_t pid = 0;
  std::string state;   // "running", "exited", "hung", ...
  int64_t step = 0;
  std::string phase;   // PhaseName(), e.g. "collective"
  double heartbeat_age_s = 0;
  // A follower's rank: how old the leader's view of it is (seconds since its
  // node's last report arrived); 0 for the leader's own ranks and from older
  // daemons. Its step is as of then: runctl allows for it before calling a
  // rank lagging.
  double report_age_s = 0;
  std::optional<double> last_step_ms;     // unset before the first step
  std::optional<uint64_t> waiting_on;     // seq of the collective it waits in
  // With model parallelism (the run reports a mesh), that collective as its
  // ring entry names it: its kind ("reduce_scatter", "send/recv", ...), its
  // group ("dp", "tp", "pp", "ep", "edp", "world") and its number there.
  // ""/unset otherwise, when the entry is not in the ring or not labelled,
  // and from older daemons.
  std::string waiting_kind;
  std::string waiting_group;
  std::optional<uint64_t> waiting_group_seq;
  uint64_t collectives_issued = 0;
  // Its pace over the daemon's straggler window (daemon/straggler.h RankPace);
  // unset until the daemon has enough steps of it (and from older daemons).
  std::optional<double> steps_per_s;
  std::optional<double> step_ms_p50;
  std::optional<double> step_ms_p99;
  std::optional<double> compute_ms_p50;  // per step, outside collectives
  std::optional<double> wait_ms_p50;     // per step, blocked in collectives
  // Its coordinates in the run's device mesh, "tp 1, pp stage 0, dp 1"
  // (common/mesh.h); "" without model parallelism (and from older daemons).
  std::string place;
};

struct NodeStatus {
  int node = 0;       // index in the allocation
  std::string host;   // its host name ("" from a daemon before hosts)
  std::vector<RankStatus> ranks;
};

// One role process ([[roles]] of the job file: not a learner rank).
struct RoleStatus {
  std::string role;     // the role's name
  int index = 0;        // 0 .. count-1 (HOLDFAST_ROLE_INDEX)
  int64_t pid = 0;      // its current (or last) process; 0 before the first start
  std::string state;    // "running", "restarting", "finished", "failed", "stopped"
  std::string restart;  // "alone" or "learner" (its restart scope)
  int restarts = 0;     // restarts of this process in this attempt
  // From its progress record: unset until the process has written one.
  std::optional<int64_t> step;
  std::optional<double> heartbeat_age_s;
};

struct IncidentSummary {
  std::string kind;  // event_kind::*
  std::string summary;
  int64_t at_ms = 0;
  std::string action;
  std::string runbook;  // "runbooks/hang.md"
};

struct RunStatus {
  std::string run_id;
  std::string name;
  std::string state;
  int attempt = 0;
  int generation = 0;
  int64_t step = 0;
  int world_size = 0;
  int restarts_used = 0;
  int restart_budget = 0;
  std::optional<int64_t> last_checkpoint_step;
  // What the generation's ranks restored (RunRecorder::ObserveRestore): the
  // step and "none", "disk" or "memory"; unset until every rank has said
  // (and from daemons before the field).
  std::optional<int64_t> restored_step;
  std::optional<std::string> restore_tier;
  double uptime_s = 0;
  std::vector<NodeStatus> nodes;
  std::optional<IncidentSummary> last_incident;
  // The rank that computes longest per step against the median of the others
  // (daemon/straggler.h SlowestRank), e.g. 2 and "rank 2 computes 3.9x the
  // median of the others for 45 s (412 ms vs 106 ms a step)"; unset while
  // fewer than two ranks have a pace.
  std::optional<int> slowest_rank;
  std::optional<std::string> slowest_rank_note;
  // What gave the run its nodes (scheduler/scheduler.h Allocation): "local" or
  // "slurm", the Slurm job id and SLURM_RESTART_COUNT ("" and 0 when local),
  // and the attempt's hosts in the scheduler's order. A daemon from before
  // these fields sends none of them; they parse as "local", "", 0, {}.
  std::string scheduler = "local";
  std::string job_id;
  int restart_count = 0;
  std::vector<std::string> hosts;
  // The run's role processes, by role (file order) and index; empty for a
  // job without [[roles]] and from daemons before roles.
  std::vector<RoleStatus> roles;
  // The device mesh the ranks report, "tp=2,pp=2,dp=2" (DeviceMesh::Layout);
  // "" without model parallelism (and from older daemons).
  std::string mesh;
};

std::string EncodeStatusResult(const RunStatus& status);  // a JSON object, no newline
// kInvalidArgument names the missing or mistyped field.
Result<RunStatus> ParseStatusResult(std::string_view result_json);

}  // namespace holdfast
