// Cluster protocol v3: what the leading holdfastd (node 0) and its follower
// daemons (one per other node) say to each other over TCP.
//
// Each follower connects to the leader's cluster port and keeps one
// connection for the life of the run. The connection opens with the run
// key's challenge-response (common/peer_auth.h): the leader's challenge, the
// follower's hello carrying its proof, the leader's welcome carrying its own;
// a peer without the run's key is rejected before it counts as a node. Each message is one JSON object on one
// line ('\n'-terminated), at most kMaxClusterMessageBytes including the
// newline (framing: daemon/line_connection.h). Every line carries the
// protocol version and a type:
//   {"v":3,"type":"hello","node":1,"host":"gpu-a17","nproc":8,"pid":4242,"health_report":"","nonce":"…","proof":"…"}
// Both ends must speak the same version: a line of another version is refused
// with a message that names both versions (there is no negotiation; every
// node runs the same holdfast build). v1 was the untyped JSON of holdfast
// before this header; its lines carry no "v"; v2 had no challenge-response. The full description, field by
// field, with the order of a generation, is docs/cluster-protocol.md.
//
// Messages are plain structs in one std::variant. ParseClusterMessage checks
// every field's type and range and never throws; EncodeClusterMessage makes
// text valid UTF-8 and cuts it to its bound, so that whatever it writes
// parses back. Clock readings of a RankView travel as ages against the
// sender's clock (CLOCK_MONOTONIC is per machine) and are turned back into
// the receiver's clock on parse: pass MonotonicNowNs() as now_ns on both ends.
//
// This header keeps nlohmann/json out; health reports travel as JSON text.
//
// Thread-safety: pure functions of their arguments; call from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.h"
#include "common/rank_progress.h"  // RankView
#include "scheduler/launch_plan.h"  // RankPlacement

namespace holdfast {

inline constexpr int kClusterProtocolVersion = 5;

// A rank view travels as an array (v4): these are its items' names, in order
// (docs/cluster-protocol.md, "Rank view"); errors name an item by them.
const std::vector<std::string_view>& ClusterRankViewItems();

// The labels of the two proofs of the handshake (RunKey::Proof over the
// leader's nonce, then the follower's).
inline constexpr char kClusterFollowerLabel[] = "holdfast cluster v3 follower";
inline constexpr char kClusterLeaderLabel[] = "holdfast cluster v3 leader";

// ---- limits (a line that breaks one is refused; docs/cluster-protocol.md) ----
// One message, newline included.
inline constexpr size_t kMaxClusterMessageBytes = 4 << 20;
// Objects and arrays nest at most this deep (the deepest message needs 5).
inline constexpr int kMaxClusterJsonDepth = 16;
// Node indexes are below this; global ranks and world_size below/at the next.
inline constexpr int kMaxClusterNodes = 4096;
inline constexpr int kMaxClusterWorldSize = 1 << 20;
// Ranks of one node: nproc, and the entries of any list of ranks, views or
// placements in one message. With the string bounds below this keeps every
// message that respects them under kMaxClusterMessageBytes.
inline constexpr int kMaxClusterNodeRanks = 256;
// Ranks in one KillMsg (global ranks: a hang's culprits may be anywhere).
inline constexpr int kMaxClusterKillRanks = 65536;
// Text bounds, in bytes of UTF-8.
inline constexpr size_t kMaxClusterHostBytes = 255;     // host names
inline constexpr size_t kMaxClusterTextBytes = 4096;    // why, run_id, state, store_addr, exec_error
inline constexpr size_t kMaxClusterLogLineBytes = 1024; // one line of a rank's log tail
inline constexpr size_t kMaxClusterLogLines = 100;      // lines in a log tail
inline constexpr size_t kMaxClusterReportBytes = 512 * 1024;  // a health report (JSON text)
// Signal numbers carried by SignalMsg: 1..kMaxClusterSignal (SIGRTMAX on Linux).
inline constexpr int kMaxClusterSignal = 64;

// ---- follower -> leader ----

// First message on a new connection: who this follower is.
struct HelloMsg {
  int version = kClusterProtocolVersion;  // the sender's protocol version ("v")
  int node = 0;          // this node's index in the allocation, >= 1 for a follower
  std::string host;      // this node's host name
  int nproc = 0;         // ranks this node runs
  int64_t pid = 0;       // the follower daemon's pid (for logs)
  std::string health_report_json;  // "" = none; else a JSON text from health/report.h
  // The handshake (raw bytes; hex on the wire): the follower's own nonce,
  // and RunKey::Proof(kClusterFollowerLabel, the challenge's nonce, nonce).
  std::string nonce;  // kAuthNonceBytes
  std::string proof;  // kAuthProofBytes
};

// Periodic: this node's ranks as its daemon sees them.
struct ProgressMsg {
  int generation = 0;
  std::vector<RankView> ranks;
};

// One of this node's ranks ended (or could not be started).
struct RankExitMsg {
  int generation = 0;
  int rank = 0;           // global rank
  int wstatus = 0;        // as from waitpid, 0..0xffff
  std::string exec_error;  // "" or why the rank's command could not be executed
  std::vector<std::string> log_tail;  // the rank's last log lines, oldest first
  std::vector<RankView> ranks;        // this node's ranks, as in ProgressMsg
};

// A periodic health check on this node changed a result.
struct HealthMsg {
  int generation = 0;  // -1 before the first start
  std::string report_json;  // a JSON text from health/report.h
};

// ---- leader -> follower ----

// The leader will not take this follower; it closes the connection next.
// Its shape is frozen across versions ({"type":"reject","why":...}) so that
// a follower of any version can show why: it is accepted whatever its "v".
struct RejectMsg {
  std::string why;
};

// Start generation `generation`: launch this node's ranks.
struct StartMsg {
  GenerationSpec spec;  // the generation (scheduler/launch_plan.h); node_addr is not sent
  std::vector<RankPlacement> ranks;  // this node's ranks
};

// Stop this generation's ranks: SIGTERM, then SIGKILL after grace_s.
struct StopMsg {
  int generation = 0;
  std::string why;
  double grace_s = 0;
};

// Send `sig` to every rank of this generation on this node.
struct SignalMsg {
  int generation = 0;
  int sig = 0;
};

// SIGKILL these ranks now (global ranks; a hang's culprits).
struct KillMsg {
  int generation = 0;
  std::vector<int> ranks;
};

// The run is over: exit with `code` once the ranks are gone. state is the
// run's final state (RunStateName), for the follower's log.
struct FinishMsg {
  int code = 0;  // 0..255
  std::string state;
};

// First message on a new connection, before the follower's hello: prove you
// hold the run's key against this nonce (raw bytes; hex on the wire).
struct ChallengeMsg {
  std::string nonce;  // kAuthNonceBytes
};

// The hello was accepted: the leader's proof that it holds the run's key,
// RunKey::Proof(kClusterLeaderLabel, the challenge's nonce, the hello's nonce).
// A follower acts on nothing the leader sends before it.
struct WelcomeMsg {
  std::string proof;  // kAuthProofBytes
  // The run's id, so that a node can ready its memory snapshots before it is
  // given ranks (a spare takes a lost node's shards before its ranks start);
  // "" from a leader of an older build, which does not send it.
  std::string run_id;
};

using ClusterMessage = std::variant<HelloMsg, ProgressMsg, RankExitMsg, HealthMsg,  // follower -> leader
                                    RejectMsg, StartMsg, StopMsg, SignalMsg, KillMsg, FinishMsg, ChallengeMsg,
                                    WelcomeMsg>;

// "hello", "progress", "rank_exit", "health", "reject", "start", "stop",
// "signal", "kill", "finish", "challenge", "welcome": the message's "type" on
// the wire.
const char* ClusterMessageTypeName(const ClusterMessage& m);
// True for the messages a follower sends (hello, progress, rank_exit,
// health); a message that arrives from the wrong side is a bad message.
bool IsFollowerMessage(const ClusterMessage& m);

// One line, '\n' included, never longer than kMaxClusterMessageBytes.
// Text is made valid UTF-8 (U+FFFD for bad bytes) and cut to its bound at a
// character boundary; a log tail keeps its newest kMaxClusterLogLines lines;
// a health report over kMaxClusterReportBytes is sent as "" (none). A
// RankView's progress record, written by the job, is sent as it is, except
// that clock readings after now_ns count as now, and a record whose phase or
// collective kinds this build does not know travels as valid=false (zeroed).
// Everything the daemon itself sets — ranks, nodes, generations, counts,
// signals, codes — must be within the bounds above: a message that breaks
// one is a programming error (HF_CHECK), because its receiver would drop the
// connection. HelloMsg::version is sent as is (tests use it to play an old
// peer).
std::string EncodeClusterMessage(const ClusterMessage& m, int64_t now_ns);

// Parses one line (a trailing '\n' is allowed). Anything wrong — not JSON,
// too long or deep, another version, an unknown type, a missing, mistyped or
// out-of-range field — is kInvalidArgument whose message says what. Keys it
// does not know are ignored. Never throws.
Result<ClusterMessage> ParseClusterMessage(std::string_view line, int64_t now_ns);

}  // namespace holdfast
