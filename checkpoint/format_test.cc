#include "checkpoint/format.h"

#include <gtest/gtest.h>

namespace holdfast {
namespace {

Manifest SampleManifest() {
  Manifest m;
  m.step = 1200;
  m.world_size = 2;
  m.layout = "dp=2";
  m.config_hash = "c0ffee";
  m.parent_step = 1100;
  m.created_unix_ms = 1700000000000;
  m.shards = {{0, ShardFileName(0, 2), 4096, 0x0123456789abcdefULL}, {1, ShardFileName(1, 2), 5000, 42}};
  return m;
}

TEST(FormatTest, NamesRoundTripAndSortAsText) {
  EXPECT_EQ(StepDirName(42), "step-000000000042");
  EXPECT_EQ(ParseStepDirName(StepDirName(42)), 42);
  EXPECT_LT(StepDirName(9), StepDirName(10));
  EXPECT_EQ(ParseStepDirName("step-12x"), -1);
  EXPECT_EQ(ParseStepDirName("MANIFEST.json"), -1);
  EXPECT_EQ(ShardFileName(3, 8), "shard-00003-of-00008.bin");
  EXPECT_EQ(ParseHexU64(HexU64(0xfeedfacecafebeefULL)), 0xfeedfacecafebeefULL);
  EXPECT_FALSE(ParseHexU64("FEEDFACECAFEBEEF").has_value());
}

TEST(FormatTest, ShardHeaderRoundTrip) {
  Result<ShardHeader> h = LayoutShard(7, 1, 4, {{"meta", 10}, {"params", 1000}, {"adam.exp_avg", 0}});
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  std::vector<uint8_t> bytes = EncodeShardHeader(*h);
  ASSERT_EQ(bytes.size(), h->header_size);
  for (const ShardEntry& e : h->entries) EXPECT_EQ(e.offset % kShardDataAlignment, 0u);

  Result<ShardHeader> back = ParseShardHeader(bytes.data(), bytes.size(), h->file_size);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->step, 7);
  EXPECT_EQ(back->rank, 1);
  EXPECT_EQ(back->world_size, 4);
  ASSERT_EQ(back->entries.size(), 3u);
  EXPECT_EQ(back->entries[1].name, "params");
  EXPECT_EQ(back->entries[1].size, 1000u);
  EXPECT_EQ(back->file_size, h->file_size);
}

TEST(FormatTest, LayoutRejectsBadNames) {
  EXPECT_EQ(LayoutShard(1, 0, 1, {{"a", 1}, {"a", 2}}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LayoutShard(1, 0, 1, {{"", 1}}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LayoutShard(1, 2, 2, {{"a", 1}}).status().code(), StatusCode::kInvalidArgument);
}

TEST(FormatTest, EveryFlippedHeaderByteIsDetected) {
  Result<ShardHeader> h = LayoutShard(3, 0, 1, {{"meta", 5}, {"params", 64}});
  ASSERT_TRUE(h.ok());
  std::vector<uint8_t> bytes = EncodeShardHeader(*h);
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::vector<uint8_t> bad = bytes;
    bad[i] ^= 0x01;
    Result<ShardHeader> r = ParseShardHeader(bad.data(), bad.size(), h->file_size);
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << "byte " << i;
  }
  // Truncated: every shorter prefix fails cleanly.
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(ParseShardHeader(bytes.data(), n, h->file_size).ok()) << n;
  }
  // An entry that runs past the end of the file.
  EXPECT_EQ(ParseShardHeader(bytes.data(), bytes.size(), h->file_size - 1).status().code(),
            StatusCode::kCorruption);
}

TEST(FormatTest, ManifestRoundTrip) {
  Manifest m = SampleManifest();
  std::string text = EncodeManifest(m);
  Result<Manifest> back = ParseManifest(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << text;
  EXPECT_EQ(back->step, 1200);
  EXPECT_EQ(back->world_size, 2);
  EXPECT_EQ(back->layout, "dp=2");
  EXPECT_EQ(back->config_hash, "c0ffee");
  EXPECT_EQ(back->parent_step, 1100);
  ASSERT_EQ(back->shards.size(), 2u);
  EXPECT_EQ(back->shards[0].xxh3, 0x0123456789abcdefULL);
  EXPECT_EQ(back->shards[1].size, 5000u);

  m.parent_step.reset();
  back = ParseManifest(EncodeManifest(m));
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(back->parent_step.has_value());
}

TEST(FormatTest, EveryFlippedManifestByteIsDetected) {
  std::string text = EncodeManifest(SampleManifest());
  for (size_t i = 0; i < text.size(); ++i) {
    std::string bad = text;
    bad[i] ^= 0x01;
    Result<Manifest> r = ParseManifest(bad);
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << "byte " << i << " '" << text[i] << "'";
  }
  for (size_t n = 0; n < text.size(); ++n) {
    EXPECT_FALSE(ParseManifest(text.substr(0, n)).ok()) << n;
  }
}

TEST(FormatTest, ManifestWithValidChecksumButWrongShapeIsRejected) {
  // A hand-edited manifest whose checksum was recomputed still has to make sense.
  Manifest m = SampleManifest();
  m.shards.pop_back();  // world_size 2, one shard
  Result<Manifest> r = ParseManifest(EncodeManifest(m));
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find("one shard entry per rank"), std::string::npos) << r.status().ToString();
}

TEST(FormatTest, SealedManifestBodyVerifies) {
  const std::string text = EncodeManifest(SampleManifest());
  std::optional<size_t> body = ManifestBodySize(text);
  ASSERT_TRUE(body.has_value());
  EXPECT_EQ(SealManifest(text.substr(0, *body)), text);
  EXPECT_FALSE(ManifestBodySize(text.substr(0, text.size() - 1)).has_value());
  EXPECT_FALSE(ManifestBodySize("{}").has_value());

  // An edited body with a recomputed checksum passes the checksum, and only
  // then meets the field checks.
  std::string edited = text.substr(0, *body);
  edited.replace(edited.find("\"step\": 1200"), 12, "\"step\": -120");
  Result<Manifest> r = ParseManifest(SealManifest(edited));
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find("step out of range"), std::string::npos) << r.status().ToString();
}

TEST(FormatTest, SealedShardHeaderVerifies) {
  Result<ShardHeader> h = LayoutShard(7, 0, 1, {{"meta", 10}});
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  std::vector<uint8_t> bytes = EncodeShardHeader(*h);
  bytes[16] = 8;  // step 7 -> 8: the checksum no longer holds ...
  EXPECT_EQ(ParseShardHeader(bytes.data(), bytes.size(), h->file_size).status().code(), StatusCode::kCorruption);
  SealShardHeader(bytes.data(), bytes.size());  // ... until it is written again
  Result<ShardHeader> back = ParseShardHeader(bytes.data(), bytes.size(), h->file_size);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->step, 8);
}

}  // namespace
}  // namespace holdfast
