#include "daemon/replica_wire.h"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "checkpoint/format.h"
#include "common/peer_auth.h"
#include "daemon/json_line.h"

namespace holdfast {
namespace {

using json = nlohmann::json;

constexpr int kMaxDepth = 8;

// Typed, range-checked reads of one object's fields; the first error sticks.
class Fields {
 public:
  Fields(const json& j, std::string what) : j_(j), what_(std::move(what)) {}
  const Status& status() const { return status_; }

  const json* Get(const char* key, bool (json::*is)() const, const char* type) {
    if (!status_.ok()) return nullptr;
    auto it = j_.find(key);
    if (it == j_.end() || !((*it).*is)()) {
      status_ = InvalidArgumentError(what_ + ": field \"" + key + "\" must be " + type);
      return nullptr;
    }
    return &*it;
  }
  int64_t Int(const char* key, int64_t lo, int64_t hi) {
    const json* v = Get(key, &json::is_number_integer, "a whole number");
    if (v == nullptr) return lo;
    const bool in_range = v->is_number_unsigned()
                              ? v->get<uint64_t>() <= static_cast<uint64_t>(hi) &&
                                    static_cast<int64_t>(v->get<uint64_t>()) >= lo
                              : v->get<int64_t>() >= lo && v->get<int64_t>() <= hi;
    if (!in_range) {
      status_ = InvalidArgumentError(what_ + ": field \"" + key + "\" must be between " + std::to_string(lo) +
                                     " and " + std::to_string(hi));
      return lo;
    }
    return v->get<int64_t>();
  }
  std::string Text(const char* key, size_t max_bytes) {
    const json* v = Get(key, &json::is_string, "a string");
    if (v == nullptr) return "";
    std::string s = v->get<std::string>();
    if (s.size() > max_bytes) {
      status_ = InvalidArgumentError(what_ + ": field \"" + key + "\" is " + std::to_string(s.size()) +
                                     " bytes; the limit is " + std::to_string(max_bytes));
      return "";
    }
    return s;
  }
  std::string Raw(const char* key, size_t bytes) {  // hex on the wire
    const std::string hex = Text(key, 2 * bytes);
    if (!status_.ok()) return "";
    Result<std::string> raw = HexDecode(hex);
    if (!raw.ok() || raw->size() != bytes) {
      status_ = InvalidArgumentError(what_ + ": field \"" + key + "\" must be " + std::to_string(2 * bytes) +
                                     " hex digits");
      return "";
    }
    return *raw;
  }
  const json* List(const char* key, size_t max_items) {
    const json* v = Get(key, &json::is_array, "a list");
    if (v != nullptr && v->size() > max_items) {
      status_ = InvalidArgumentError(what_ + ": field \"" + key + "\" has " + std::to_string(v->size()) +
                                     " entries; the limit is " + std::to_string(max_items));
      return nullptr;
    }
    return status_.ok() ? v : nullptr;
  }
  CopyKind Kind(const char* key) {
    const std::string k = Text(key, 16);
    for (CopyKind c : {CopyKind::kLocal, CopyKind::kHeld, CopyKind::kReplica}) {
      if (k == CopyKindName(c)) return c;
    }
    if (status_.ok()) status_ = InvalidArgumentError(what_ + ": field \"" + key + "\" must be local, held or replica");
    return CopyKind::kLocal;
  }
  std::string FileName(const char* key) {
    std::string name = Text(key, 64);
    if (status_.ok() && !IsSnapshotFileName(name)) {
      status_ = InvalidArgumentError(what_ + ": \"" + name.substr(0, 64) +
                                     "\" is not a snapshot file's name (MANIFEST.json or shard-NNNNN-of-NNNNN.bin)");
    }
    return name;
  }

 private:
  const json& j_;
  std::string what_;
  Status status_;
};

Result<json> Line(std::string_view line, const char* expect_type, const std::string& what) {
  HF_ASSIGN_OR_RETURN(json j, ParseJsonObjectLine(line, kMaxReplicaLineBytes, kMaxDepth, what));
  Fields f(j, what);
  const int64_t v = f.Int("v", 0, 1 << 20);
  const std::string type = f.Text("type", 32);
  HF_RETURN_IF_ERROR(f.status());
  if (v != kReplicaProtocolVersion) {
    return InvalidArgumentError(what + " is of replica protocol v" + std::to_string(v) + "; this holdfastd speaks v" +
                                std::to_string(kReplicaProtocolVersion) + " (run one holdfast build on every node)");
  }
  if (expect_type != nullptr && type != expect_type) {
    if (type == "error") {
      return FailedPreconditionError("the peer refused: " + f.Text("why", 4096));
    }
    return InvalidArgumentError(what + " has type '" + type.substr(0, 32) + "', expected '" + expect_type + "'");
  }
  return j;
}

json Base(const char* type) { return json{{"v", kReplicaProtocolVersion}, {"type", type}}; }
std::string Out(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"; }

json FileJson(const ReplicaFile& f) { return json{{"name", f.name}, {"size", f.size}, {"xxh3", HexU64(f.xxh3)}}; }

Result<ReplicaFile> ParseFile(const json& j, const std::string& what) {
  if (!j.is_object()) return InvalidArgumentError(what + ": a file entry must be an object");
  Fields f(j, what);
  ReplicaFile out;
  out.name = f.FileName("name");
  out.size = static_cast<uint64_t>(f.Int("size", 0, int64_t{1} << 50));
  const std::string sum = f.Text("xxh3", 16);
  HF_RETURN_IF_ERROR(f.status());
  std::optional<uint64_t> x = ParseHexU64(sum);
  if (!x) return InvalidArgumentError(what + ": field \"xxh3\" must be 16 hex digits");
  out.xxh3 = *x;
  return out;
}

Result<std::vector<ReplicaFile>> ParseFiles(Fields& f, const std::string& what) {
  const json* list = f.List("files", kMaxReplicaFiles);
  HF_RETURN_IF_ERROR(f.status());
  std::vector<ReplicaFile> out;
  for (const json& e : *list) {
    HF_ASSIGN_OR_RETURN(ReplicaFile file, ParseFile(e, what));
    for (const ReplicaFile& seen : out) {
      if (seen.name == file.name) return InvalidArgumentError(what + ": the file " + file.name + " is listed twice");
    }
    out.push_back(std::move(file));
  }
  return out;
}

Result<std::vector<GatherFile>> ParseGather(Fields& f, const std::string& what) {
  const json* list = f.List("files", kMaxReplicaFiles);
  HF_RETURN_IF_ERROR(f.status());
  std::vector<GatherFile> out;
  for (const json& e : *list) {
    if (!e.is_object()) return InvalidArgumentError(what + ": a file entry must be an object");
    Fields g(e, what);
    GatherFile file;
    file.name = g.FileName("name");
    const json* holders = g.List("holders", kMaxReplicaHolders);
    HF_RETURN_IF_ERROR(g.status());
    for (const json& h : *holders) {
      if (!h.is_object()) return InvalidArgumentError(what + ": a holder must be an object");
      Fields hf(h, what);
      ReplicaHolder holder;
      holder.addr = hf.Text("addr", kMaxReplicaAddrBytes);
      holder.node = static_cast<int>(hf.Int("node", 0, kMaxReplicaNodes - 1));
      holder.kind = hf.Kind("kind");
      holder.origin = static_cast<int>(hf.Int("origin", 0, kMaxReplicaNodes - 1));
      HF_RETURN_IF_ERROR(hf.status());
      file.holders.push_back(std::move(holder));
    }
    out.push_back(std::move(file));
  }
  return out;
}

}  // namespace

const char* CopyKindName(CopyKind kind) {
  switch (kind) {
    case CopyKind::kLocal: return "local";
    case CopyKind::kHeld: return "held";
    case CopyKind::kReplica: return "replica";
  }
  return "?";
}

bool ParseShardName(std::string_view name, int* rank, int* world) {
  if (name.size() != std::string_view("shard-00000-of-00000.bin").size()) {
    // ShardFileName pads to 5 digits; more digits only for world sizes >= 100000.
    if (name.size() < 24 || name.size() > 40) return false;
  }
  int r = -1, w = -1;
  char tail[8] = {};
  const std::string text(name);
  if (std::sscanf(text.c_str(), "shard-%d-of-%d.%3s", &r, &w, tail) != 3) return false;
  if (r < 0 || w <= 0 || r >= w || w > static_cast<int>(kMaxWorldSize)) return false;
  if (ShardFileName(r, w) != text) return false;  // the one spelling: no sign, no spaces, no suffix
  *rank = r;
  *world = w;
  return true;
}

bool IsSnapshotFileName(std::string_view name) {
  if (name == kManifestFileName) return true;
  int r = 0, w = 0;
  return ParseShardName(name, &r, &w);
}

std::string EncodeChallenge(const std::string& nonce) {
  json j = Base("challenge");
  j["nonce"] = HexEncode(nonce);
  return Out(j);
}

Result<std::string> ParseChallenge(std::string_view line) {
  HF_ASSIGN_OR_RETURN(json j, Line(line, "challenge", "the replica server's challenge"));
  Fields f(j, "the replica server's challenge");
  std::string nonce = f.Raw("nonce", kAuthNonceBytes);
  HF_RETURN_IF_ERROR(f.status());
  return nonce;
}

std::string EncodeHello(const std::string& nonce, const std::string& proof) {
  json j = Base("hello");
  j["nonce"] = HexEncode(nonce);
  j["proof"] = HexEncode(proof);
  return Out(j);
}

Result<std::pair<std::string, std::string>> ParseHello(std::string_view line) {
  HF_ASSIGN_OR_RETURN(json j, Line(line, "hello", "a replica client's hello"));
  Fields f(j, "a replica client's hello");
  std::string nonce = f.Raw("nonce", kAuthNonceBytes);
  std::string proof = f.Raw("proof", kAuthProofBytes);
  HF_RETURN_IF_ERROR(f.status());
  return std::make_pair(nonce, proof);
}

std::string EncodeWelcome(const std::string& proof) {
  json j = Base("welcome");
  j["proof"] = HexEncode(proof);
  return Out(j);
}

Result<std::string> ParseWelcome(std::string_view line) {
  HF_ASSIGN_OR_RETURN(json j, Line(line, "welcome", "the replica server's welcome"));
  Fields f(j, "the replica server's welcome");
  std::string proof = f.Raw("proof", kAuthProofBytes);
  HF_RETURN_IF_ERROR(f.status());
  return proof;
}

std::string EncodeRequest(const ReplicaRequest& r) {
  switch (r.type) {
    case ReplicaRequest::Type::kPush: {
      json j = Base("push");
      j["step"] = r.step;
      j["origin"] = r.origin;
      j["files"] = json::array();
      for (const ReplicaFile& f : r.files) j["files"].push_back(FileJson(f));
      return Out(j);
    }
    case ReplicaRequest::Type::kInventory: return Out(Base("inventory"));
    case ReplicaRequest::Type::kFetch: {
      json j = Base("fetch");
      j["step"] = r.step;
      j["origin"] = r.origin;
      j["kind"] = CopyKindName(r.kind);
      j["name"] = r.name;
      return Out(j);
    }
    case ReplicaRequest::Type::kGather: {
      json j = Base("gather");
      j["step"] = r.step;
      j["files"] = json::array();
      for (const GatherFile& g : r.gather) {
        json holders = json::array();
        for (const ReplicaHolder& h : g.holders) {
          holders.push_back(json{{"addr", h.addr}, {"node", h.node}, {"kind", CopyKindName(h.kind)}, {"origin", h.origin}});
        }
        j["files"].push_back(json{{"name", g.name}, {"holders", holders}});
      }
      return Out(j);
    }
  }
  return Out(Base("inventory"));
}

Result<ReplicaRequest> ParseRequest(std::string_view line) {
  const std::string what = "a replica request";
  HF_ASSIGN_OR_RETURN(json j, Line(line, nullptr, what));
  Fields f(j, what);
  const std::string type = f.Text("type", 32);
  ReplicaRequest r;
  if (type == "inventory") {
    r.type = ReplicaRequest::Type::kInventory;
    return r;
  }
  if (f.status().ok() && type != "push" && type != "fetch" && type != "gather") {
    return InvalidArgumentError(what + " has the unknown type '" + type.substr(0, 32) +
                                "' (push, inventory, fetch, gather)");
  }
  r.step = f.Int("step", 0, int64_t{1} << 50);
  if (type == "push") {
    r.type = ReplicaRequest::Type::kPush;
    r.origin = static_cast<int>(f.Int("origin", 0, kMaxReplicaNodes - 1));
    HF_ASSIGN_OR_RETURN(r.files, ParseFiles(f, what));
    if (r.files.empty()) return InvalidArgumentError(what + ": a push of no files");
  } else if (type == "fetch") {
    r.type = ReplicaRequest::Type::kFetch;
    r.origin = static_cast<int>(f.Int("origin", 0, kMaxReplicaNodes - 1));
    r.kind = f.Kind("kind");
    r.name = f.FileName("name");
  } else if (type == "gather") {
    r.type = ReplicaRequest::Type::kGather;
    HF_ASSIGN_OR_RETURN(r.gather, ParseGather(f, what));
  }
  HF_RETURN_IF_ERROR(f.status());
  return r;
}

std::string EncodeReply(const ReplicaReply& r) {
  switch (r.type) {
    case ReplicaReply::Type::kOk: {
      json j = Base("ok");
      j["note"] = r.text;
      return Out(j);
    }
    case ReplicaReply::Type::kError: {
      json j = Base("error");
      j["why"] = r.text;
      return Out(j);
    }
    case ReplicaReply::Type::kInventory: {
      json j = Base("inventory");
      j["copies"] = json::array();
      for (const SnapshotCopy& c : r.copies) {
        json files = json::array();
        for (const ReplicaFile& f : c.files) files.push_back(FileJson(f));
        j["copies"].push_back(
            json{{"kind", CopyKindName(c.kind)}, {"origin", c.origin}, {"step", c.step}, {"files", files}});
      }
      return Out(j);
    }
    case ReplicaReply::Type::kFile: {
      json j = Base("file");
      j["size"] = r.size;
      return Out(j);
    }
  }
  return Out(Base("ok"));
}

Result<ReplicaReply> ParseReply(std::string_view line) {
  const std::string what = "a replica reply";
  HF_ASSIGN_OR_RETURN(json j, Line(line, nullptr, what));
  Fields f(j, what);
  const std::string type = f.Text("type", 32);
  ReplicaReply r;
  if (type == "ok") {
    r.type = ReplicaReply::Type::kOk;
    r.text = f.Text("note", kMaxReplicaLineBytes);
  } else if (type == "error") {
    r.type = ReplicaReply::Type::kError;
    r.text = f.Text("why", kMaxReplicaLineBytes);
  } else if (type == "file") {
    r.type = ReplicaReply::Type::kFile;
    r.size = static_cast<uint64_t>(f.Int("size", 0, int64_t{1} << 50));
  } else if (type == "inventory") {
    r.type = ReplicaReply::Type::kInventory;
    const json* copies = f.List("copies", kMaxReplicaSets);
    HF_RETURN_IF_ERROR(f.status());
    for (const json& c : *copies) {
      if (!c.is_object()) return InvalidArgumentError(what + ": a copy must be an object");
      Fields cf(c, what);
      SnapshotCopy copy;
      copy.kind = cf.Kind("kind");
      copy.origin = static_cast<int>(cf.Int("origin", 0, kMaxReplicaNodes - 1));
      copy.step = cf.Int("step", 0, int64_t{1} << 50);
      HF_ASSIGN_OR_RETURN(copy.files, ParseFiles(cf, what));
      HF_RETURN_IF_ERROR(cf.status());
      r.copies.push_back(std::move(copy));
    }
  } else if (f.status().ok()) {
    return InvalidArgumentError(what + " has the unknown type '" + type.substr(0, 32) + "'");
  }
  HF_RETURN_IF_ERROR(f.status());
  return r;
}

}  // namespace holdfast
