#include "checkpoint/format.h"

#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

namespace holdfast {
namespace {

constexpr char kManifestFormatName[] = "holdfast-checkpoint";
// The manifest ends with exactly this, around 16 hex digits.
constexpr char kManifestSuffixHead[] = ",\n  \"manifest_xxh3\": \"";
constexpr char kManifestSuffixTail[] = "\"\n}\n";
constexpr size_t kSuffixHeadLen = sizeof(kManifestSuffixHead) - 1;
constexpr size_t kSuffixTailLen = sizeof(kManifestSuffixTail) - 1;
constexpr size_t kSuffixLen = kSuffixHeadLen + 16 + kSuffixTailLen;

uint32_t GetU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t AlignUp(uint64_t v) { return (v + kShardDataAlignment - 1) / kShardDataAlignment * kShardDataAlignment; }

Status ShardCorrupt(const std::string& what) { return CorruptionError("shard header: " + what); }
Status ManifestCorrupt(const std::string& what) { return CorruptionError("manifest: " + what); }

}  // namespace

uint64_t Xxh3(const void* data, size_t n) { return XXH3_64bits(data, n); }

Xxh3Stream::Xxh3Stream() : state_(XXH3_createState()) {
  HF_CHECK(state_ != nullptr);
  XXH3_64bits_reset(state_);
}
Xxh3Stream::~Xxh3Stream() { XXH3_freeState(state_); }
void Xxh3Stream::Update(const void* data, size_t n) { XXH3_64bits_update(state_, data, n); }
uint64_t Xxh3Stream::Digest() const { return XXH3_64bits_digest(state_); }

std::string HexU64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, v);
  return buf;
}

std::optional<uint64_t> ParseHexU64(const std::string& s) {
  if (s.size() != 16) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else return std::nullopt;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

std::string StepDirName(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%012" PRId64, step);
  return buf;
}

int64_t ParseStepDirName(const std::string& name) {
  if (name.size() < 6 || name.size() > 5 + 18 || name.compare(0, 5, "step-") != 0) return -1;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

int64_t ParseCorruptStepDirName(const std::string& name) {
  const size_t at = name.find(kCorruptDirSuffix);
  if (at == std::string::npos) return -1;
  const std::string rest = name.substr(at + std::strlen(kCorruptDirSuffix));
  if (!rest.empty()) {
    if (rest.size() < 2 || rest[0] != '.') return -1;
    for (size_t i = 1; i < rest.size(); ++i) {
      if (rest[i] < '0' || rest[i] > '9') return -1;
    }
  }
  return ParseStepDirName(name.substr(0, at));
}

std::string ShardFileName(int rank, int world_size) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "shard-%05d-of-%05d.bin", rank, world_size);
  return buf;
}

Result<ShardHeader> LayoutShard(int64_t step, int rank, int world_size,
                                const std::vector<std::pair<std::string, uint64_t>>& buffers) {
  if (step < 0) return InvalidArgumentError("checkpoint step must be >= 0, got " + std::to_string(step));
  if (world_size < 1 || static_cast<uint32_t>(world_size) > kMaxWorldSize || rank < 0 || rank >= world_size) {
    return InvalidArgumentError("checkpoint rank " + std::to_string(rank) + " is outside world size " +
                                std::to_string(world_size));
  }
  ShardHeader h;
  h.step = step;
  h.rank = rank;
  h.world_size = world_size;
  uint64_t header_size = kShardFixedHeaderSize + 8;
  std::set<std::string> seen;
  for (const auto& [name, size] : buffers) {
    if (name.empty() || name.size() > kMaxBufferNameLength) {
      return InvalidArgumentError("checkpoint buffer name '" + name + "' must be 1.." +
                                  std::to_string(kMaxBufferNameLength) + " bytes");
    }
    if (!seen.insert(name).second) {
      return InvalidArgumentError("checkpoint buffer name '" + name + "' appears twice");
    }
    header_size += 4 + name.size() + 16;
  }
  if (header_size > kMaxShardHeaderSize) return InvalidArgumentError("checkpoint has too many buffers");
  h.header_size = static_cast<uint32_t>(header_size);
  uint64_t offset = header_size;
  for (const auto& [name, size] : buffers) {
    offset = AlignUp(offset);
    h.entries.push_back({name, offset, size});
    offset += size;
  }
  h.file_size = offset;
  return h;
}

std::vector<uint8_t> EncodeShardHeader(const ShardHeader& h) {
  // Written through a cursor into a sized buffer (GCC 12 misreads insert() of
  // the magic after reserve() as an overflow).
  std::vector<uint8_t> out(h.header_size, 0);
  size_t pos = 0;
  auto put = [&](uint64_t v, int bytes) {
    HF_CHECK(pos + bytes <= out.size());
    for (int i = 0; i < bytes; ++i) out[pos++] = static_cast<uint8_t>(v >> (8 * i));
  };
  for (char c : kShardMagic) put(static_cast<uint8_t>(c), 1);
  put(h.format_version, 4);
  put(h.header_size, 4);
  put(static_cast<uint64_t>(h.step), 8);
  put(static_cast<uint32_t>(h.rank), 4);
  put(static_cast<uint32_t>(h.world_size), 4);
  put(h.entries.size(), 4);
  put(0, 4);
  for (const ShardEntry& e : h.entries) {
    put(e.name.size(), 4);
    for (char c : e.name) put(static_cast<uint8_t>(c), 1);
    put(e.offset, 8);
    put(e.size, 8);
  }
  HF_CHECK(pos + 8 == out.size());
  SealShardHeader(out.data(), out.size());
  return out;
}

void SealShardHeader(uint8_t* header, size_t header_size) {
  HF_CHECK(header_size >= 8);
  const uint64_t sum = Xxh3(header, header_size - 8);
  for (int i = 0; i < 8; ++i) header[header_size - 8 + i] = static_cast<uint8_t>(sum >> (8 * i));
}

Result<uint32_t> PeekShardHeaderSize(const uint8_t* data, size_t n) {
  if (n < kShardFixedHeaderSize) return ShardCorrupt("file is " + std::to_string(n) + " bytes, shorter than a header");
  if (std::memcmp(data, kShardMagic, 8) != 0) return ShardCorrupt("bad magic (not a Holdfast shard file)");
  uint32_t version = GetU32(data + 8);
  if (version != kCheckpointFormatVersion) {
    return ShardCorrupt("format version " + std::to_string(version) + ", this build reads " +
                        std::to_string(kCheckpointFormatVersion));
  }
  uint32_t header_size = GetU32(data + 12);
  if (header_size < kShardFixedHeaderSize + 8 || header_size > kMaxShardHeaderSize) {
    return ShardCorrupt("implausible header size " + std::to_string(header_size));
  }
  return header_size;
}

Result<ShardHeader> ParseShardHeader(const uint8_t* data, size_t n, uint64_t file_size) {
  HF_ASSIGN_OR_RETURN(uint32_t header_size, PeekShardHeaderSize(data, n));
  if (header_size > n || header_size > file_size) {
    return ShardCorrupt("header size " + std::to_string(header_size) + " exceeds the " +
                        std::to_string(std::min<uint64_t>(n, file_size)) + " bytes present");
  }
  uint64_t want = GetU64(data + header_size - 8);
  uint64_t got = Xxh3(data, header_size - 8);
  if (want != got) return ShardCorrupt("header checksum mismatch (" + HexU64(got) + " != " + HexU64(want) + ")");

  ShardHeader h;
  h.format_version = GetU32(data + 8);
  h.header_size = header_size;
  h.step = static_cast<int64_t>(GetU64(data + 16));
  uint32_t rank = GetU32(data + 24);
  uint32_t world = GetU32(data + 28);
  uint32_t count = GetU32(data + 32);
  if (h.step < 0) return ShardCorrupt("negative step");
  if (world < 1 || world > kMaxWorldSize || rank >= world) {
    return ShardCorrupt("rank " + std::to_string(rank) + " outside world size " + std::to_string(world));
  }
  if (GetU32(data + 36) != 0) return ShardCorrupt("reserved field is not zero");
  h.rank = static_cast<int>(rank);
  h.world_size = static_cast<int>(world);

  const size_t table_end = header_size - 8;
  size_t pos = kShardFixedHeaderSize;
  uint64_t prev_end = header_size;
  std::set<std::string> seen;
  for (uint32_t i = 0; i < count; ++i) {
    if (table_end - pos < 4) return ShardCorrupt("buffer table ends inside entry " + std::to_string(i));
    uint32_t len = GetU32(data + pos);
    pos += 4;
    if (len == 0 || len > kMaxBufferNameLength || table_end - pos < len + 16u) {
      return ShardCorrupt("bad name length " + std::to_string(len) + " in entry " + std::to_string(i));
    }
    ShardEntry e;
    e.name.assign(reinterpret_cast<const char*>(data + pos), len);
    pos += len;
    e.offset = GetU64(data + pos);
    e.size = GetU64(data + pos + 8);
    pos += 16;
    if (e.offset < prev_end || e.offset > file_size || e.size > file_size - e.offset) {
      return ShardCorrupt("buffer '" + e.name + "' at [" + std::to_string(e.offset) + ", +" +
                          std::to_string(e.size) + ") overlaps another or lies outside the " +
                          std::to_string(file_size) + "-byte file");
    }
    if (!seen.insert(e.name).second) return ShardCorrupt("buffer '" + e.name + "' appears twice");
    prev_end = e.offset + e.size;
    h.entries.push_back(std::move(e));
  }
  if (pos != table_end) return ShardCorrupt("buffer table has trailing bytes");
  h.file_size = prev_end;
  return h;
}

std::string EncodeManifest(const Manifest& m) {
  nlohmann::ordered_json j;
  j["format"] = kManifestFormatName;
  j["format_version"] = m.format_version;
  j["step"] = m.step;
  j["world_size"] = m.world_size;
  j["layout"] = m.layout;
  j["config_hash"] = m.config_hash;
  j["parent_step"] = m.parent_step ? nlohmann::ordered_json(*m.parent_step) : nlohmann::ordered_json(nullptr);
  j["created_unix_ms"] = m.created_unix_ms;
  if (!m.metrics.empty()) {
    nlohmann::ordered_json mj = nlohmann::ordered_json::object();
    for (const auto& [name, value] : m.metrics) {
      if (std::isfinite(value)) mj[name] = value;  // JSON has no NaN or infinity: such a value is left out
    }
    j["metrics"] = std::move(mj);
  }
  j["shards"] = nlohmann::ordered_json::array();
  for (const ManifestShard& s : m.shards) {
    nlohmann::ordered_json sj;
    sj["rank"] = s.rank;
    sj["file"] = s.file;
    sj["size"] = s.size;
    sj["xxh3"] = HexU64(s.xxh3);
    j["shards"].push_back(std::move(sj));
  }
  std::string body = j.dump(2);
  // dump(2) ends with "\n}"; drop it so the checksum member can close the object.
  HF_CHECK(body.size() >= 2 && body.compare(body.size() - 2, 2, "\n}") == 0);
  body.resize(body.size() - 2);
  return SealManifest(std::move(body));
}

std::string SealManifest(std::string body) {
  const uint64_t sum = Xxh3(body.data(), body.size());
  body += kManifestSuffixHead;
  body += HexU64(sum);
  body += kManifestSuffixTail;
  return body;
}

std::optional<size_t> ManifestBodySize(const std::string& text) {
  if (text.size() < kSuffixLen) return std::nullopt;
  const size_t body_len = text.size() - kSuffixLen;
  if (text.compare(body_len, kSuffixHeadLen, kManifestSuffixHead) != 0 ||
      text.compare(text.size() - kSuffixTailLen, kSuffixTailLen, kManifestSuffixTail) != 0) {
    return std::nullopt;
  }
  return body_len;
}

Result<Manifest> ParseManifest(const std::string& text) {
  if (text.size() < kSuffixLen + 1) return ManifestCorrupt("only " + std::to_string(text.size()) + " bytes");
  const std::optional<size_t> body_size = ManifestBodySize(text);
  if (!body_size) return ManifestCorrupt("does not end with its \"manifest_xxh3\" member (truncated or edited)");
  const size_t body_len = *body_size;
  std::optional<uint64_t> want = ParseHexU64(text.substr(body_len + kSuffixHeadLen, 16));
  if (!want) return ManifestCorrupt("manifest_xxh3 is not 16 lowercase hex digits");
  uint64_t got = Xxh3(text.data(), body_len);
  if (got != *want) return ManifestCorrupt("checksum mismatch (" + HexU64(got) + " != " + HexU64(*want) + ")");

  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return ManifestCorrupt("not a JSON object");
  // Type errors from nlohmann are exceptions; they stop here.
  try {
    Manifest m;
    if (j.at("format").get<std::string>() != kManifestFormatName) return ManifestCorrupt("format is not holdfast-checkpoint");
    const auto& version = j.at("format_version");
    if (!version.is_number_unsigned() || version.get<uint64_t>() != kCheckpointFormatVersion) {
      return ManifestCorrupt("format_version " + version.dump() + ", this build reads " +
                             std::to_string(kCheckpointFormatVersion));
    }
    auto get_int = [&](const nlohmann::json& v, const char* what, int64_t lo, int64_t hi) -> Result<int64_t> {
      if (!v.is_number_integer()) return ManifestCorrupt(std::string(what) + " is not an integer");
      if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)) {
        return ManifestCorrupt(std::string(what) + " out of range");
      }
      int64_t x = v.get<int64_t>();
      if (x < lo || x > hi) return ManifestCorrupt(std::string(what) + " out of range");
      return x;
    };
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    HF_ASSIGN_OR_RETURN(m.step, get_int(j.at("step"), "step", 0, kMax));
    HF_ASSIGN_OR_RETURN(int64_t world, get_int(j.at("world_size"), "world_size", 1, kMaxWorldSize));
    m.world_size = static_cast<int>(world);
    m.layout = j.at("layout").get<std::string>();
    m.config_hash = j.at("config_hash").get<std::string>();
    if (!j.at("parent_step").is_null()) {
      HF_ASSIGN_OR_RETURN(int64_t parent, get_int(j.at("parent_step"), "parent_step", 0, kMax));
      m.parent_step = parent;
    }
    HF_ASSIGN_OR_RETURN(m.created_unix_ms, get_int(j.at("created_unix_ms"), "created_unix_ms", 0, kMax));
    if (j.contains("metrics")) {
      const auto& mj = j.at("metrics");
      if (!mj.is_object()) return ManifestCorrupt("metrics is not an object");
      for (const auto& [name, value] : mj.items()) {
        const bool name_ok = !name.empty() && name.size() <= 64 &&
                             std::all_of(name.begin(), name.end(), [](char c) {
                               return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
                             });
        if (!name_ok) return ManifestCorrupt("metrics name '" + name.substr(0, 64) + "' is not [A-Za-z0-9_.]{1,64}");
        if (!value.is_number()) return ManifestCorrupt("metrics '" + name + "' is not a number");
        m.metrics[name] = value.get<double>();
      }
    }
    const auto& shards = j.at("shards");
    if (!shards.is_array() || shards.size() != static_cast<size_t>(m.world_size)) {
      return ManifestCorrupt("needs one shard entry per rank (" + std::to_string(m.world_size) + ")");
    }
    for (size_t r = 0; r < shards.size(); ++r) {
      const auto& s = shards[r];
      ManifestShard ms;
      HF_ASSIGN_OR_RETURN(int64_t rank, get_int(s.at("rank"), "shard rank", 0, m.world_size - 1));
      if (rank != static_cast<int64_t>(r)) return ManifestCorrupt("shard entries out of rank order");
      ms.rank = static_cast<int>(rank);
      ms.file = s.at("file").get<std::string>();
      if (ms.file != ShardFileName(ms.rank, m.world_size)) {
        return ManifestCorrupt("shard " + std::to_string(r) + " file name '" + ms.file + "' is not the expected " +
                               ShardFileName(ms.rank, m.world_size));
      }
      HF_ASSIGN_OR_RETURN(int64_t size, get_int(s.at("size"), "shard size", kShardFixedHeaderSize + 8, kMax));
      ms.size = static_cast<uint64_t>(size);
      std::optional<uint64_t> sum = ParseHexU64(s.at("xxh3").get<std::string>());
      if (!sum) return ManifestCorrupt("shard " + std::to_string(r) + " xxh3 is not 16 hex digits");
      ms.xxh3 = *sum;
      m.shards.push_back(std::move(ms));
    }
    return m;
  } catch (const nlohmann::json::exception& e) {
    return ManifestCorrupt(std::string("missing or mistyped field: ") + e.what());
  }
}

}  // namespace holdfast
