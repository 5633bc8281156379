// stacks_test: identical stacks fold into one group with their ranks, the
// outlier is shown apart, the evidence stays bounded, and it reads back.
#include "lineage/stacks.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "lineage/incident.h"

namespace holdfast {
namespace {

ThreadStack Main(std::vector<std::string> frames, const char* kind = "native") {
  ThreadStack t;
  t.kind = kind;
  t.main_thread = true;
  t.frames = std::move(frames);
  return t;
}

std::string Joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

// Eight ranks: seven wait in the allreduce, rank 3 spins in its own function.
std::vector<RankStacks> EightRanks() {
  std::vector<RankStacks> ranks;
  for (int r = 0; r < 8; ++r) {
    RankStacks rs;
    rs.rank = r;
    if (r == 3) {
      rs.threads.push_back(Main({"spin_in_compute", "train_step", "main"}));
    } else {
      rs.threads.push_back(Main({"__futex_abstimed_wait_common", "gloo::AllreduceWait", "train_step", "main"}));
    }
    ThreadStack worker;  // the same helper thread everywhere
    worker.frames = {"epoll_wait", "gloo::transport::tcp::Loop::run"};
    rs.threads.push_back(worker);
    ranks.push_back(std::move(rs));
  }
  ranks[3].notes.push_back("python stack not available: the process is stopped");
  return ranks;
}

TEST(FoldStacks, IdenticalStacksFoldIntoOneGroupWithTheirRanks) {
  const StackEvidence s = FoldStacks(EightRanks());
  ASSERT_EQ(s.groups.size(), 3u);
  // Main threads first, the most shared first.
  EXPECT_TRUE(s.groups[0].main_thread);
  EXPECT_EQ(s.groups[0].ranks, (std::vector<int>{0, 1, 2, 4, 5, 6, 7}));
  EXPECT_EQ(s.groups[0].threads, 7u);
  EXPECT_EQ(s.groups[1].ranks, (std::vector<int>{3}));
  EXPECT_EQ(s.groups[1].frames.front(), "spin_in_compute");
  EXPECT_FALSE(s.groups[2].main_thread);
  EXPECT_EQ(s.groups[2].threads, 8u);
  ASSERT_EQ(s.notes.size(), 1u);
  EXPECT_EQ(s.notes[0].rank, 3);
}

TEST(RenderStacks, CountsIdenticalStacksAndShowsTheOutlierAndCulpritFirst) {
  StackEvidence s = FoldStacks(EightRanks());
  s.limit_s = 10;
  s.took_s = 0.4;
  const std::string text = Joined(RenderStacks(s, {3}));
  EXPECT_NE(text.find("limit 10 s"), std::string::npos) << text;
  EXPECT_NE(text.find("  native, main thread:\n    1 rank (3), culprit, outlier:\n      spin_in_compute\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("    7 ranks (0-2,4-7):\n      __futex_abstimed_wait_common\n"), std::string::npos) << text;
  EXPECT_LT(text.find("spin_in_compute"), text.find("7 ranks"));
  EXPECT_NE(text.find("other threads: 8 stacks, 1 distinct"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 3: python stack not available"), std::string::npos) << text;
  EXPECT_TRUE(RenderStacks(StackEvidence{}, {}).empty());
}

TEST(FoldStacks, KeepsTheEvidenceBounded) {
  std::vector<RankStacks> ranks;
  for (int r = 0; r < 512; ++r) {
    RankStacks rs;
    rs.rank = r;
    std::vector<std::string> frames;
    for (int f = 0; f < 100; ++f) frames.push_back("frame_" + std::to_string(r) + "_" + std::string(300, 'x'));
    rs.threads.push_back(Main(frames));
    ranks.push_back(std::move(rs));
  }
  StackLimits limits;
  const StackEvidence s = FoldStacks(ranks, limits);
  EXPECT_LE(s.groups.size(), limits.max_groups);
  size_t bytes = 0;
  for (const StackGroup& g : s.groups) {
    EXPECT_LE(g.frames.size(), limits.max_frames);
    EXPECT_TRUE(g.cut);
    for (const std::string& f : g.frames) {
      EXPECT_LE(f.size(), limits.max_frame_chars);
      bytes += f.size();
    }
  }
  EXPECT_LE(bytes, limits.max_bytes);
  EXPECT_EQ(s.dropped_threads + s.groups.size(), 512u);
  EXPECT_NE(Joined(RenderStacks(s, {})).find("more stacks not kept"), std::string::npos);
  // A 512-rank record stays small enough for a lineage row.
  IncidentEvidence ev;
  ev.stacks = s;
  EXPECT_LT(ToJson(ev).size(), 2 * limits.max_bytes);
}

TEST(StacksJson, ReadsBackThroughTheIncidentEvidence) {
  IncidentEvidence ev;
  ev.culprits = {3};
  ev.stacks = FoldStacks(EightRanks());
  ev.stacks.limit_s = 10;
  ev.stacks.took_s = 1.25;
  Result<IncidentEvidence> back = ParseIncidentEvidence(ToJson(ev));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->stacks.groups.size(), 3u);
  EXPECT_EQ(back->stacks.groups[0].ranks, ev.stacks.groups[0].ranks);
  EXPECT_EQ(back->stacks.groups[1].frames, ev.stacks.groups[1].frames);
  EXPECT_EQ(back->stacks.took_s, 1.25);
  EXPECT_EQ(back->stacks.notes[0].note, ev.stacks.notes[0].note);
  EXPECT_EQ(Joined(RenderStacks(back->stacks, {3})), Joined(RenderStacks(ev.stacks, {3})));
  // Evidence without stacks (every older file) writes no key and reads none.
  EXPECT_EQ(ToJson(IncidentEvidence{}).find("stacks"), std::string::npos);
  // A wrong type is named.
  Result<IncidentEvidence> bad = ParseIncidentEvidence(R"({"stacks":{"groups":[{"ranks":"0-7"}]}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("stacks.groups[0].ranks"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace holdfast
