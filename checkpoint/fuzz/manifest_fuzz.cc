// libFuzzer target: a manifest's text, as the loader reads it.
//
// The manifest ends with its own XXH3-64, so almost every mutated input would
// stop at the checksum. This harness repairs it the way the writer makes it
// (SealManifest over the body before the "manifest_xxh3" member, or over the
// whole input when it has none), so that the JSON and field checks behind the
// checksum are what gets fuzzed. An input whose first byte is 0 modulo 16
// (' ', '0', '@', 'P', ...) is parsed as it is, so that the checksum checks
// stay fuzzed too. Properties:
//   - ParseManifest never crashes; what it refuses is kCorruption, and a
//     repaired input is never refused for its checksum;
//   - what it accepts encodes to a manifest that parses to the same fields and
//     encodes to the same bytes again;
//   - the CheckpointLoader, given a root holding only that manifest at its
//     step, reads it back, and skips the checkpoint (its shards are missing)
//     without crashing, whatever sizes and world the manifest claims, in
//     every way of loading (Load*, Verify, a one-rank RestoreNewest).
// Seeds: tests/fuzz/corpus/manifest (real manifests written by CheckpointWriter).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "checkpoint/checkpoint_loader.h"
#include "checkpoint/format.h"
#include "checkpoint/fuzz/memory_storage.h"

namespace holdfast {
namespace {

bool SameShards(const std::vector<ManifestShard>& a, const std::vector<ManifestShard>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].rank != b[i].rank || a[i].file != b[i].file || a[i].size != b[i].size || a[i].xxh3 != b[i].xxh3) {
      return false;
    }
  }
  return true;
}

bool Same(const Manifest& a, const Manifest& b) {
  return a.format_version == b.format_version && a.step == b.step && a.world_size == b.world_size &&
         a.layout == b.layout && a.config_hash == b.config_hash && a.parent_step == b.parent_step &&
         a.created_unix_ms == b.created_unix_ms && SameShards(a.shards, b.shards);
}

void CheckLoader(const std::string& text, const Manifest& m) {
  const std::string root = "/ckpt";
  MemoryStorage storage;
  storage.Put(root + "/" + StepDirName(m.step) + "/" + kManifestFileName, text);
  CheckpointLoader loader(root, &storage);

  Result<Manifest> read = loader.ReadManifest(m.step);
  HF_CHECK_MSG(read.ok(), read.status().ToString());
  HF_CHECK(Same(*read, m));

  // No shard file exists: every way of loading must skip this step, naming it.
  // (Step folders of more than 18 digits, steps >= 10^18, are not listed.)
  const size_t listed = ParseStepDirName(StepDirName(m.step)) == m.step ? 1 : 0;
  std::vector<SkippedCheckpoint> skipped;
  Result<LoadedCheckpoint> all = loader.LoadNewestAll(LoadOptions{}, &skipped);
  HF_CHECK(!all.ok() && all.status().code() == StatusCode::kNotFound);
  HF_CHECK(skipped.size() == listed && (listed == 0 || skipped[0].step == m.step));
  for (int rank : {0, m.world_size - 1}) {
    skipped.clear();
    LoadOptions own_shard_only;
    own_shard_only.verify_all_shards = false;
    Result<LoadedShard> one = loader.LoadNewest(rank, own_shard_only, &skipped);
    HF_CHECK(!one.ok() && skipped.size() == listed);
  }
  HF_CHECK(!loader.Verify(m.step).ok());
  // A one-rank restore skips it the same way.
  skipped.clear();
  Result<LoadedCheckpoint> restored = loader.RestoreNewest(RestoreOptions{}, nullptr, &skipped);
  HF_CHECK(!restored.ok() && restored.status().code() == StatusCode::kNotFound);
  HF_CHECK(skipped.size() == listed && (listed == 0 || skipped[0].step == m.step));
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
  std::string text(reinterpret_cast<const char*>(data), size);
  const bool repair = size == 0 || data[0] % 16 != 0;
  if (repair) text = SealManifest(text.substr(0, ManifestBodySize(text).value_or(text.size())));

  Result<Manifest> m = ParseManifest(text);
  if (!m.ok()) {
    HF_CHECK(m.status().code() == StatusCode::kCorruption);
    HF_CHECK_MSG(!repair || m.status().message().rfind("manifest: checksum mismatch", 0) != 0,
                 m.status().ToString());
    return 0;
  }
  const std::string encoded = EncodeManifest(*m);
  Result<Manifest> again = ParseManifest(encoded);
  HF_CHECK_MSG(again.ok(), again.status().ToString());
  HF_CHECK(Same(*again, *m));
  HF_CHECK(EncodeManifest(*again) == encoded);

  CheckLoader(text, *m);
  return 0;
}
