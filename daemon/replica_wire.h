// The replica protocol v1: what holdfastd daemons say to each other about
// their memory snapshots (docs/memory-snapshots.md, "Several nodes").
//
// Every node's daemon serves one TCP port (daemon/replica_service.h) on the
// address it advertises for the cluster protocol. A connection opens with the
// run key's challenge-response (common/peer_auth.h, labels below): the
// server's challenge, the client's hello with its proof, the server's welcome
// with its own; a peer without the run's key is refused before it can send a
// request. Then the client sends one request, a JSON line, and the server one
// reply line; file bytes travel raw after the line that announces them:
//
//   push      a node's own snapshot files of one step, for the server to keep
//             as the replica of that origin node; the files' bytes follow, in
//             the order listed. Reply: ok, or error (nothing kept).
//   inventory which snapshot files the server's node holds. Reply: inventory.
//   fetch     one file of one copy. Reply: file (its size, then its bytes).
//   gather    make step S whole in the server's own snapshot folder, taking
//             each file it lacks from the holders named. Reply: ok (a note
//             saying where each file came from) or error.
//
// Lines are at most kMaxReplicaLineBytes; every field is checked for type and
// range; file names are only MANIFEST.json and shard-NNNNN-of-NNNNN.bin (so no
// path, no "..", nothing longer); a push's sizes are checked against the
// receiver's budget before any byte is written. Anything else is
// kInvalidArgument saying what. Never throws.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace holdfast {

inline constexpr int kReplicaProtocolVersion = 1;
inline constexpr char kReplicaClientLabel[] = "holdfast replica v1 client";
inline constexpr char kReplicaServerLabel[] = "holdfast replica v1 server";
inline constexpr size_t kMaxReplicaLineBytes = 1 << 20;
inline constexpr size_t kMaxReplicaFiles = 4097;      // a manifest and 4096 shards of one node
inline constexpr int kMaxReplicaNodes = 4096;         // node indexes are below this
inline constexpr size_t kMaxReplicaAddrBytes = 300;   // "host:port"
inline constexpr size_t kMaxReplicaHolders = 64;      // holders named for one file of a gather
inline constexpr size_t kMaxReplicaSets = 4096;       // copies in one inventory

// Where a copy of a step's files lives in a node's snapshot folder
// (daemon/replica_store.h).
enum class CopyKind {
  kLocal,    // SNAP/step-S: the trainer's own folder
  kHeld,     // SNAP/held/step-S: this node's files kept for its replica
  kReplica,  // SNAP/replica-K/step-S: node K's files, pushed by node K
};
const char* CopyKindName(CopyKind kind);  // "local", "held", "replica"

// Whether `name` is a snapshot file's name: MANIFEST.json or
// ShardFileName(r, w) with r < w (checkpoint/format.h). Nothing else, so a
// name can never leave the folder it is put in.
bool IsSnapshotFileName(std::string_view name);
// The shard's rank and world size when `name` is a shard file's name.
bool ParseShardName(std::string_view name, int* rank, int* world);

struct ReplicaFile {
  std::string name;
  uint64_t size = 0;
  uint64_t xxh3 = 0;  // push: the bytes' XXH3-64; inventory: 0 (not read)
};

// One copy of one step on one node.
struct SnapshotCopy {
  CopyKind kind = CopyKind::kLocal;
  int origin = 0;  // the node whose ranks wrote the files (kLocal, kHeld: the holder)
  int64_t step = 0;
  std::vector<ReplicaFile> files;
};

// A node that holds a file of the step being gathered, and in which copy.
struct ReplicaHolder {
  std::string addr;  // its replica port, "host:port"
  int node = 0;      // the holder's node index (for logs)
  CopyKind kind = CopyKind::kLocal;
  int origin = 0;
};

struct GatherFile {
  std::string name;
  std::vector<ReplicaHolder> holders;  // tried in order
};

struct ReplicaRequest {
  enum class Type { kPush, kInventory, kFetch, kGather };
  Type type = Type::kInventory;
  int64_t step = -1;                // push, fetch, gather
  int origin = 0;                   // push: the sender's node; fetch: the copy's
  std::vector<ReplicaFile> files;   // push
  CopyKind kind = CopyKind::kLocal; // fetch
  std::string name;                 // fetch
  std::vector<GatherFile> gather;   // gather
};

struct ReplicaReply {
  enum class Type { kOk, kError, kInventory, kFile };
  Type type = Type::kOk;
  std::string text;                  // ok: the note; error: why
  std::vector<SnapshotCopy> copies;  // inventory
  uint64_t size = 0;                 // file: the bytes that follow
};

// The handshake's lines.
std::string EncodeChallenge(const std::string& nonce);
Result<std::string> ParseChallenge(std::string_view line);
std::string EncodeHello(const std::string& nonce, const std::string& proof);
// The hello's nonce and proof (raw bytes).
Result<std::pair<std::string, std::string>> ParseHello(std::string_view line);
std::string EncodeWelcome(const std::string& proof);
// The welcome's proof; an error reply becomes kFailedPrecondition with its text.
Result<std::string> ParseWelcome(std::string_view line);

// One line each, '\n' included.
std::string EncodeRequest(const ReplicaRequest& r);
std::string EncodeReply(const ReplicaReply& r);
Result<ReplicaRequest> ParseRequest(std::string_view line);
Result<ReplicaReply> ParseReply(std::string_view line);

}  // namespace holdfast
