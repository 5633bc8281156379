// The replica protocol's parsing, the restore plan and the gather of a step
// in a real snapshot folder (daemon/replica_wire.h, replica_plan.h,
// replica_store.h).
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "checkpoint/format.h"
#include "daemon/replica_plan.h"
#include "daemon/replica_store.h"
#include "daemon/replica_wire.h"
#include "tests/support/subprocess.h"

namespace holdfast {
namespace {

namespace fs = std::filesystem;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

TEST(ReplicaWireTest, OnlySnapshotFileNamesPass) {
  EXPECT_TRUE(IsSnapshotFileName("MANIFEST.json"));
  EXPECT_TRUE(IsSnapshotFileName("shard-00001-of-00002.bin"));
  for (const char* bad : {"../MANIFEST.json", "a/MANIFEST.json", "shard-00002-of-00002.bin", "shard-1-of-2.bin",
                          "shard-00001-of-00002.bin.tmp", "shard-0000a-of-00002.bin", "..", "", "owner.lock",
                          "shard--0001-of-00002.bin"}) {
    EXPECT_FALSE(IsSnapshotFileName(bad)) << bad;
  }
  EXPECT_FALSE(IsSnapshotFileName(std::string(300, 'a')));
}

TEST(ReplicaWireTest, RequestsRoundTripAndBadOnesAreRefusedWithAReason) {
  ReplicaRequest push;
  push.type = ReplicaRequest::Type::kPush;
  push.step = 14;
  push.origin = 1;
  push.files = {{"shard-00001-of-00002.bin", 4096, 0x1234abcd}};
  auto back = ParseRequest(EncodeRequest(push));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->step, 14);
  EXPECT_EQ(back->origin, 1);
  ASSERT_EQ(back->files.size(), 1u);
  EXPECT_EQ(back->files[0].xxh3, 0x1234abcdu);

  auto refused = [](const std::string& line, const std::string& says) {
    auto r = ParseRequest(line);
    ASSERT_FALSE(r.ok()) << line;
    EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status().ToString();
  };
  refused(R"({"v":1,"type":"push","step":3,"origin":1,"files":[{"name":"../../etc/passwd","size":1,"xxh3":"0000000000000000"}]})",
          "is not a snapshot file's name");
  refused(R"({"v":1,"type":"push","step":3,"origin":1,"files":[{"name":")" + std::string(200, 'x') +
              R"(","size":1,"xxh3":"0000000000000000"}]})",
          "the limit is 64");
  refused(R"({"v":1,"type":"push","step":-3,"origin":1,"files":[]})", "\"step\" must be between");
  refused(R"({"v":2,"type":"inventory"})", "replica protocol v2");
  refused(R"({"v":1,"type":"delete"})", "unknown type 'delete'");
  refused("not json", "is not JSON");
  refused(R"({"v":1,"type":"fetch","step":3,"origin":0,"kind":"elsewhere","name":"MANIFEST.json"})",
          "must be local, held or replica");
  refused(R"({"v":1,"type":"push","step":3,"origin":1,"files":[{"name":"MANIFEST.json","size":1,"xxh3":"00"},)"
          R"({"name":"MANIFEST.json","size":1,"xxh3":"0000000000000000"}]})",
          "16 hex digits");
  refused(std::string(kMaxReplicaLineBytes + 10, ' '), "the limit is");
}

NodeInventory Inv(int node, std::vector<SnapshotCopy> copies) {
  return NodeInventory{node, "10.0.0." + std::to_string(node) + ":7000", std::move(copies)};
}
ReplicaFile F(const std::string& name) { return ReplicaFile{name, 10, 0}; }

TEST(ReplicaPlanTest, TheNewestWholeStepOnTheLiveNodesAndWhereALostNodesShardsAre) {
  const std::map<int, std::string> hosts = {{0, "a"}, {1, "b"}, {2, "c"}};
  // Node 2 is gone. Step 20: node 2's shard nowhere; step 18: its replica is on node 0.
  std::vector<NodeInventory> live = {
      Inv(0, {{CopyKind::kLocal, 0, 20, {F("MANIFEST.json"), F("shard-00000-of-00003.bin")}},
              {CopyKind::kHeld, 0, 18, {F("MANIFEST.json"), F("shard-00000-of-00003.bin")}},
              {CopyKind::kReplica, 2, 18, {F("shard-00002-of-00003.bin")}}}),
      Inv(1, {{CopyKind::kLocal, 1, 20, {F("shard-00001-of-00003.bin")}},
              {CopyKind::kHeld, 1, 18, {F("shard-00001-of-00003.bin")}},
              {CopyKind::kReplica, 0, 18, {F("MANIFEST.json"), F("shard-00000-of-00003.bin")}}}),
  };
  auto plan = PlanMemoryRestore(live, hosts);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->step, 18);
  ASSERT_EQ(plan->files.size(), 4u);
  EXPECT_EQ(plan->files[0].name, "MANIFEST.json");
  ASSERT_EQ(plan->files[1].holders.size(), 2u);
  EXPECT_EQ(plan->files[1].holders[0].kind, CopyKind::kHeld) << "a node's own copy before a replica";
  EXPECT_EQ(plan->files[3].holders[0].addr, "10.0.0.0:7000");
  EXPECT_EQ(plan->note, "node 2 (c)'s shards from the replica on node 0 (a)");

  // All three alive at step 20: no replica is needed, nothing to note.
  live.push_back(Inv(2, {{CopyKind::kLocal, 2, 20, {F("shard-00002-of-00003.bin")}}}));
  plan = PlanMemoryRestore(live, hosts);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->step, 20);
  EXPECT_EQ(plan->note, "");

  // No manifest anywhere: nothing to restore from memory.
  EXPECT_FALSE(PlanMemoryRestore({Inv(1, {{CopyKind::kLocal, 1, 20, {F("shard-00000-of-00001.bin")}}})}, hosts));
}

// A step folder with a manifest over `shards` (name -> bytes) at root/step-S.
void WriteStep(const std::string& dir, int64_t step, const std::map<std::string, std::string>& shards,
               bool manifest) {
  fs::create_directories(dir);
  Manifest m;
  m.step = step;
  m.world_size = static_cast<int>(shards.size());
  int r = 0;
  for (const auto& [name, bytes] : shards) {
    WriteFile(dir + "/" + name, bytes);
    m.shards.push_back(ManifestShard{r++, name, bytes.size(), Xxh3(bytes.data(), bytes.size())});
  }
  if (manifest) WriteFile(dir + "/" + kManifestFileName, EncodeManifest(m));
}

TEST(ReplicaStoreTest, AGatherTakesWhatIsMissingAndReplacesAFlippedShardWithAGoodCopy) {
  TempDir tmp("replica_store");
  const std::map<std::string, std::string> shards = {{"shard-00000-of-00002.bin", std::string(5000, 'a')},
                                                     {"shard-00001-of-00002.bin", std::string(7000, 'b')}};
  const std::string zero = tmp.path() + "/n0", one = tmp.path() + "/n1";
  WriteStep(zero + "/step-000000000006", 6, shards, /*manifest=*/true);
  ReplicaStore node0(zero, 0, 1 << 20), node1(one, 1, 1 << 20);
  // Node 1 holds a replica of node 0's step 6; its own folder has its shard, flipped.
  WriteStep(one + "/replica-0/step-000000000006", 6, {{"shard-00000-of-00002.bin", shards.at("shard-00000-of-00002.bin")}},
            false);
  std::string flipped = shards.at("shard-00001-of-00002.bin");
  flipped[100] ^= 1;
  WriteFile(one + "/step-000000000006/shard-00001-of-00002.bin", flipped);
  WriteStep(one + "/step-000000000009", 9, {{"shard-00001-of-00002.bin", "x"}}, false);  // a timeline that ended
  std::vector<std::string> fetched;
  auto fetch = [&](const ReplicaHolder& h, int64_t step, const std::string& name, const std::string& dest) -> Status {
    fetched.push_back(name + "@" + std::to_string(h.node));
    auto path = node0.PathOf(h.kind, h.origin, step, name);
    if (!path.ok()) return path.status();
    fs::copy_file(*path, dest);
    return Status::Ok();
  };
  std::vector<GatherFile> files = {{"MANIFEST.json", {{"n0", 0, CopyKind::kLocal, 0}}},
                                   {"shard-00000-of-00002.bin", {{"n0", 0, CopyKind::kLocal, 0}}},
                                   {"shard-00001-of-00002.bin", {{"n0", 0, CopyKind::kLocal, 0}}}};
  auto note = node1.Gather(6, files, fetch);
  ASSERT_TRUE(note.ok()) << note.status().ToString();
  for (const auto& [name, bytes] : shards) {
    EXPECT_TRUE(ReadFile(one + "/step-000000000006/" + name) == bytes) << name;
  }
  // The manifest came from node 0; shard 0 from the replica here; the flipped shard 1 from node 0.
  EXPECT_EQ(fetched, (std::vector<std::string>{"MANIFEST.json@0", "shard-00001-of-00002.bin@0"}));
  EXPECT_NE(note->find("shard-00001-of-00002.bin from the local on node 0"), std::string::npos) << *note;
  EXPECT_FALSE(fs::exists(one + "/step-000000000009")) << "a later step is a timeline that ended";

  // Nothing that verifies anywhere: the gather fails, naming the file.
  WriteFile(zero + "/step-000000000006/shard-00001-of-00002.bin", flipped);
  fs::remove(one + "/step-000000000006/shard-00001-of-00002.bin");
  note = node1.Gather(6, files, fetch);
  ASSERT_FALSE(note.ok());
  EXPECT_NE(note.status().message().find("no copy of shard-00001-of-00002.bin"), std::string::npos)
      << note.status().ToString();
}

TEST(ReplicaStoreTest, HeldStepsSurviveTheTrainersRetentionAndOnlyTheNewestAreKept) {
  TempDir tmp("replica_store");
  ReplicaStore store(tmp.path(), 1, 1 << 20);
  for (int64_t s : {3, 4, 5}) {
    WriteStep(tmp.path() + "/" + StepDirName(s), s, {{"shard-00001-of-00002.bin", "data" + std::to_string(s)}}, false);
  }
  const std::vector<std::string> names = {"shard-00001-of-00002.bin"};
  EXPECT_EQ(store.CompleteLocalSteps(names), (std::vector<int64_t>{5, 4, 3}));
  for (int64_t s : {3, 4, 5}) ASSERT_TRUE(store.Hold(s, names).ok());
  fs::remove_all(tmp.path() + "/" + StepDirName(5));  // the trainer's retention
  EXPECT_EQ(store.HeldSteps(), (std::vector<int64_t>{5, 4}));
  EXPECT_EQ(ReadFile(*store.PathOf(CopyKind::kHeld, 1, 5, names[0])), "data5");
  EXPECT_FALSE(store.Hold(7, names).ok()) << "a step that is not there cannot be held";
  EXPECT_EQ(store.HeldSteps(), (std::vector<int64_t>{5, 4}));
}

}  // namespace
}  // namespace holdfast
