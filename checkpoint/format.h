// The on-disk format of a Holdfast checkpoint: names, the shard header and the
// manifest, their encoders and their (fuzzed) parsers.
//
// A checkpoint of step S lives in ROOT/step-<S, 12 digits>/ and holds one shard
// file per rank (shard-<rank>-of-<world>.bin) and MANIFEST.json, written last
// and atomically. Only a folder with a manifest that verifies is a checkpoint.
// docs/checkpoint-format.md is the operator's description of the same bytes;
// keep the two in step (kFormatVersion bumps on any change).
//
// Shard file (all integers little-endian):
//   0   8  magic "HFCKSHRD"
//   8   4  format version (1)
//   12  4  header size H in bytes, including the trailing header checksum
//   16  8  step
//   24  4  rank
//   28  4  world size
//   32  4  buffer count N
//   36  4  reserved, 0
//   40  N entries: u32 name length, name bytes (UTF-8, 1..255), u64 offset, u64 size
//   H-8 8  XXH3-64 of header bytes [0, H-8)
//   then each buffer's bytes at its offset (64-byte aligned, zero padding between).
// The manifest records the XXH3-64 and size of each whole shard file.
//
// Parsers accept any bytes and never crash or read out of bounds (fuzz targets
// in checkpoint/fuzz/); damaged input gives kCorruption naming what is wrong.
//
// Thread-safety: pure functions; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

struct XXH3_state_s;  // libxxhash's streaming state (Xxh3Stream)

namespace holdfast {

inline constexpr uint32_t kCheckpointFormatVersion = 1;
inline constexpr char kShardMagic[8] = {'H', 'F', 'C', 'K', 'S', 'H', 'R', 'D'};
inline constexpr size_t kShardFixedHeaderSize = 40;
inline constexpr size_t kShardDataAlignment = 64;
inline constexpr size_t kMaxBufferNameLength = 255;
inline constexpr uint32_t kMaxShardHeaderSize = 64u << 20;
inline constexpr uint32_t kMaxWorldSize = 1u << 20;
inline constexpr char kManifestFileName[] = "MANIFEST.json";
inline constexpr char kTempSuffix[] = ".tmp";
// A trainer that finds a committed checkpoint corrupt while resuming writes
// the reason (one line) into the step folder as CORRUPT and moves the folder
// aside to "step-N.corrupt" (".corrupt.2", ... when taken): loaders never see
// it, the step can be saved again, and the files stay as evidence until a
// person removes them. holdfastd records each such folder in lineage.
inline constexpr char kCorruptMarkerFileName[] = "CORRUPT";
inline constexpr char kCorruptDirSuffix[] = ".corrupt";
// The step of a folder moved aside as corrupt ("step-N.corrupt[.K]"), else -1.
int64_t ParseCorruptStepDirName(const std::string& name);
// A later step of a timeline that a resume to an earlier step abandoned,
// moved aside by holdfastd ("step-N.fenced[.K]"): kept as evidence, invisible
// to every loader and to retention (its name is no step folder's).
inline constexpr char kFencedDirSuffix[] = ".fenced";

// XXH3-64 of a byte range (libxxhash).
uint64_t Xxh3(const void* data, size_t n);
// The same over bytes that arrive in pieces: Update each in order, then
// Digest (equal to Xxh3 of their concatenation). One thread at a time.
class Xxh3Stream {
 public:
  Xxh3Stream();
  ~Xxh3Stream();
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;
  void Update(const void* data, size_t n);
  uint64_t Digest() const;

 private:
  ::XXH3_state_s* state_;  // owned
};
// 16 lowercase hex digits, and back (nullopt unless exactly 16 hex digits).
std::string HexU64(uint64_t v);
std::optional<uint64_t> ParseHexU64(const std::string& s);

// "step-000000001234"; ParseStepDirName gives -1 for any other name.
std::string StepDirName(int64_t step);
int64_t ParseStepDirName(const std::string& name);
// "shard-00003-of-00008.bin"
std::string ShardFileName(int rank, int world_size);

// One entry of a shard's buffer table.
struct ShardEntry {
  std::string name;
  uint64_t offset = 0;  // from the start of the file
  uint64_t size = 0;
};

struct ShardHeader {
  uint32_t format_version = kCheckpointFormatVersion;
  uint32_t header_size = 0;
  int64_t step = 0;
  int rank = 0;
  int world_size = 1;
  std::vector<ShardEntry> entries;  // ascending offsets
  uint64_t file_size = 0;           // offset + size of the last entry (or header_size)
};

// Lays out a header for buffers of the given names and sizes: fills
// header_size, entries' offsets and file_size. kInvalidArgument for an empty,
// too long or repeated name.
Result<ShardHeader> LayoutShard(int64_t step, int rank, int world_size,
                                const std::vector<std::pair<std::string, uint64_t>>& buffers);
// The header_size bytes of `header` (as laid out by LayoutShard).
std::vector<uint8_t> EncodeShardHeader(const ShardHeader& header);
// Writes the header checksum, the XXH3-64 of header[0, header_size - 8), into
// its last 8 bytes (EncodeShardHeader's last step; the fuzz target uses it to
// let damaged tables reach the checks behind the checksum). `header` is not
// owned; header_size >= 8.
void SealShardHeader(uint8_t* header, size_t header_size);
// Reads the header size from the first kShardFixedHeaderSize bytes; checks magic
// and version only.
Result<uint32_t> PeekShardHeaderSize(const uint8_t* data, size_t n);
// Parses and validates a header. `data` holds at least the header (n bytes, not
// owned); file_size is the size of the whole shard file, which every entry must
// fit in.
Result<ShardHeader> ParseShardHeader(const uint8_t* data, size_t n, uint64_t file_size);

struct ManifestShard {
  int rank = 0;
  std::string file;
  uint64_t size = 0;
  uint64_t xxh3 = 0;
};

struct Manifest {
  uint32_t format_version = kCheckpointFormatVersion;
  int64_t step = 0;
  int world_size = 1;
  std::string layout;       // free text from the trainer, e.g. "dp=8,tp=1"
  std::string config_hash;  // free text from the trainer
  std::optional<int64_t> parent_step;
  int64_t created_unix_ms = 0;
  // Optional (written only when not empty; older manifests have none):
  // numbers the trainer attaches to the checkpoint, such as its newest
  // evaluation ("eval_loss", "eval_step"). Names are 1..64 characters of
  // [A-Za-z0-9_.]; values finite.
  std::map<std::string, double> metrics;
  std::vector<ManifestShard> shards;  // one per rank, in rank order
};

// The manifest's bytes: pretty JSON whose last member is "manifest_xxh3", the
// XXH3-64 of every byte before the line that holds it.
std::string EncodeManifest(const Manifest& m);
// A manifest's text from its body (the JSON object up to, not including, its
// closing "\n}"): the body, then the "manifest_xxh3" member holding the
// XXH3-64 of the body, then "\n}\n". EncodeManifest's last step; the fuzz
// target uses it to give any bytes a valid checksum.
std::string SealManifest(std::string body);
// The number of bytes of `text` that its checksum covers: all but its
// "manifest_xxh3" member and closing brace; nullopt when text does not end
// with such a member (16 characters of any kind as its value).
std::optional<size_t> ManifestBodySize(const std::string& text);
// Verifies the embedded checksum, parses and validates. kCorruption on any damage.
Result<Manifest> ParseManifest(const std::string& text);

}  // namespace holdfast
