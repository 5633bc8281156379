// libFuzzer target: a shard file's header, as the loader reads it.
//
// Input: 8 bytes of big-endian claimed file size (when present), then the
// header's bytes. The header ends with the XXH3-64 of the bytes before it;
// this harness rewrites it with SealShardHeader wherever the header says it
// ends, so that the buffer table behind the checksum is what gets fuzzed. An
// input whose first byte is 15 modulo 16 is parsed as it is, so that the
// checksum checks stay fuzzed too. Properties:
//   - ParseShardHeader never reads outside the bytes given; what it refuses is
//     kCorruption;
//   - every entry it accepts lies inside the claimed file, after the header,
//     in ascending order, under a unique name;
//   - the header re-encodes to exactly the bytes it was parsed from, and
//     LayoutShard lays out the same buffers into a header that parses back;
//   - the CheckpointLoader loads a checkpoint made of that header (padded to
//     the size its entries need) and a manifest that names it, and finds
//     every buffer at the size the header gives; and a Restore by a world of
//     two in which the other rank verifies that shard (its OK verdict counted
//     in the store beforehand) reads it in part, header and buffers, the same
//     bytes.
// Seeds: tests/fuzz/corpus/shard_header (headers of real shard files written
// by CheckpointWriter, with their file sizes).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "checkpoint/checkpoint_loader.h"
#include "checkpoint/format.h"
#include "checkpoint/fuzz/memory_storage.h"
#include "common/memory_store.h"

namespace holdfast {
namespace {

// Checkpoints bigger than this are not built in memory (the header alone is
// checked).
constexpr uint64_t kMaxLoadedFile = 1u << 20;
constexpr int kMaxLoadedWorld = 64;

void CheckLayout(const ShardHeader& h) {
  std::vector<std::pair<std::string, uint64_t>> buffers;
  for (const ShardEntry& e : h.entries) buffers.emplace_back(e.name, e.size);
  Result<ShardHeader> laid = LayoutShard(h.step, h.rank, h.world_size, buffers);
  HF_CHECK_MSG(laid.ok(), laid.status().ToString());
  const std::vector<uint8_t> bytes = EncodeShardHeader(*laid);
  Result<ShardHeader> back = ParseShardHeader(bytes.data(), bytes.size(), laid->file_size);
  HF_CHECK_MSG(back.ok(), back.status().ToString());
  HF_CHECK(back->entries.size() == h.entries.size());
  for (size_t i = 0; i < h.entries.size(); ++i) {
    HF_CHECK(back->entries[i].name == h.entries[i].name && back->entries[i].size == h.entries[i].size);
  }
}

// A world-size checkpoint at h.step whose manifest names this shard (the
// others are never read: verify_all_shards is off).
void CheckLoader(const uint8_t* header, const ShardHeader& h) {
  if (h.file_size > kMaxLoadedFile || h.world_size > kMaxLoadedWorld) return;
  std::string file(reinterpret_cast<const char*>(header), h.header_size);
  file.resize(h.file_size, '\0');

  Manifest m;
  m.step = h.step;
  m.world_size = h.world_size;
  for (int r = 0; r < h.world_size; ++r) {
    m.shards.push_back({r, ShardFileName(r, h.world_size), kShardFixedHeaderSize + 8, 0});
  }
  m.shards[h.rank].size = file.size();
  m.shards[h.rank].xxh3 = Xxh3(file.data(), file.size());

  const std::string root = "/ckpt";
  const std::string dir = root + "/" + StepDirName(h.step);
  MemoryStorage storage;
  storage.Put(dir + "/" + kManifestFileName, EncodeManifest(m));
  storage.Put(dir + "/" + ShardFileName(h.rank, h.world_size), file);
  CheckpointLoader loader(root, &storage);
  LoadOptions options;
  options.verify_all_shards = false;
  Result<LoadedShard> shard = loader.Load(h.step, h.rank, options);
  HF_CHECK_MSG(shard.ok(), shard.status().ToString());
  HF_CHECK(shard->header.entries.size() == h.entries.size());
  HF_CHECK(shard->Buffers().size() == h.entries.size());
  for (const ShardEntry& e : h.entries) {
    Result<ConstBufferView> view = shard->Find(e.name);
    HF_CHECK_MSG(view.ok(), view.status().ToString());
    HF_CHECK(view->size == e.size && view->data == shard->bytes.get() + e.offset);
  }
  HF_CHECK(shard->Find("").status().code() == StatusCode::kNotFound);

  // The other ranks' shards as empty ones, so that the whole checkpoint restores.
  for (int r = 0; r < h.world_size; ++r) {
    if (r == h.rank) continue;
    Result<ShardHeader> empty = LayoutShard(h.step, r, h.world_size, {});
    HF_CHECK_MSG(empty.ok(), empty.status().ToString());
    const std::vector<uint8_t> bytes = EncodeShardHeader(*empty);
    m.shards[r].size = bytes.size();
    m.shards[r].xxh3 = Xxh3(bytes.data(), bytes.size());
    storage.Put(dir + "/" + ShardFileName(r, h.world_size), std::string(bytes.begin(), bytes.end()));
  }
  storage.Put(dir + "/" + kManifestFileName, EncodeManifest(m));
  const int verifier = CheckpointLoader::VerifyingRank(h.rank, h.world_size, 2);
  RestoreOptions ro;
  ro.rank = 1 - verifier;
  ro.world_size = 2;
  ro.store = std::make_shared<InMemoryStore>();
  ro.peer_timeout = std::chrono::seconds(5);
  // The verifying rank's part, done: it found the shard good and counted itself.
  HF_CHECK(ro.store->Add("restore/" + std::to_string(h.step) + "/done", 1).ok());
  RestorePlanner everything = [](const LoadedCheckpoint& preview) -> Result<std::vector<std::vector<std::string>>> {
    std::vector<std::vector<std::string>> want(preview.shards.size());
    for (size_t i = 0; i < preview.shards.size(); ++i) {
      for (const ShardEntry& e : preview.shards[i].header.entries) want[i].push_back(e.name);
    }
    return want;
  };
  Result<LoadedCheckpoint> restored = loader.Restore(h.step, ro, everything);
  HF_CHECK_MSG(restored.ok(), restored.status().ToString());
  const LoadedShard& part = restored->shards[h.rank];
  HF_CHECK(part.bytes == nullptr && part.header.entries.size() == h.entries.size());
  for (const ShardEntry& e : h.entries) {
    Result<ConstBufferView> view = part.Find(e.name);
    HF_CHECK_MSG(view.ok(), view.status().ToString());
    HF_CHECK(view->size == e.size && (e.size == 0 || std::memcmp(view->data, file.data() + e.offset, e.size) == 0));
  }
}

}  // namespace
}  // namespace holdfast

// The loader logs every checkpoint it passes over; not per input here.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace holdfast;
  // The first 8 bytes (when present) pick the claimed file size.
  uint64_t file_size = size;
  bool repair = true;
  if (size >= 8) {
    repair = data[0] % 16 != 15;
    file_size = 0;
    for (int i = 0; i < 8; ++i) file_size = (file_size << 8) | data[i];
    data += 8;
    size -= 8;
  }
  // An exact-size copy, so that ASan sees any read past the end.
  std::vector<uint8_t> bytes(data, data + size);
  if (repair) {
    Result<uint32_t> header_size = PeekShardHeaderSize(bytes.data(), bytes.size());
    if (header_size.ok() && *header_size <= bytes.size()) SealShardHeader(bytes.data(), *header_size);
  }

  Result<ShardHeader> h = ParseShardHeader(bytes.data(), bytes.size(), file_size);
  if (!h.ok()) {
    HF_CHECK(h.status().code() == StatusCode::kCorruption);
    return 0;
  }
  HF_CHECK(h->header_size <= bytes.size() && h->header_size <= file_size);
  HF_CHECK(h->rank >= 0 && h->rank < h->world_size && h->step >= 0);
  uint64_t end = h->header_size;
  std::set<std::string> names;
  for (const ShardEntry& e : h->entries) {
    HF_CHECK(e.offset >= end && e.offset + e.size <= file_size);
    HF_CHECK(!e.name.empty() && e.name.size() <= kMaxBufferNameLength && names.insert(e.name).second);
    end = e.offset + e.size;
  }
  HF_CHECK(h->file_size == end);

  const std::vector<uint8_t> encoded = EncodeShardHeader(*h);
  HF_CHECK(encoded.size() == h->header_size && std::equal(encoded.begin(), encoded.end(), bytes.begin()));
  CheckLayout(*h);
  CheckLoader(bytes.data(), *h);
  return 0;
}
