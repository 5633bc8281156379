// The collective rings of a follower's reports as deltas (daemon/ring_delta.h),
// through the real encoder and parser: the leader ends up holding exactly the
// follower's rings, in fewer bytes; a new process or connection sends the
// whole ring; a malformed delta is refused before anything is taken from it.
#include "daemon/ring_delta.h"

#include <gtest/gtest.h>

#include <string>
#include <variant>
#include <vector>

#include "daemon/cluster_protocol_test_util.h"

namespace holdfast {
namespace {

using cluster_test::kReceiverNow;
using cluster_test::kSecond;
using cluster_test::kSenderNow;

// A rank's record as it advances: `issued` collectives so far, the newest
// `open` of them not yet complete.
RankView Advance(int rank, pid_t pid, uint64_t issued, uint64_t open) {
  RankView v = cluster_test::MakeView(rank, issued);
  v.pid = pid;
  v.progress.writer_pid = pid;
  for (CollectiveRecord& e : v.progress.ring) e.completed_ns = e.seq + open > issued ? 0 : e.issued_ns + 1000;
  return v;
}

// What the leader holds after one report: encoded, parsed on the other machine, merged.
struct Link {
  RingTrimmer trimmer;
  std::vector<RankView> held;
  size_t bytes = 0;

  void Report(std::vector<RankView> views) {
    trimmer.Trim(&views);
    const std::string line = EncodeClusterMessage(ProgressMsg{3, views}, kSenderNow);
    bytes = line.size();
    Result<ClusterMessage> got = ParseClusterMessage(line, kReceiverNow);
    ASSERT_TRUE(got.ok()) << got.status().ToString() << "\n" << line;
    std::vector<RankView> in = std::get<ProgressMsg>(*got).ranks;
    MergeRings(held, &in);
    held = std::move(in);
  }
};

// The ring as the leader can compare it with the follower's: seq, kind, bytes, done.
std::vector<std::string> Shape(const CollectiveRing& ring) {
  std::vector<std::string> out;
  for (const CollectiveRecord& e : ring) {
    out.push_back(std::to_string(e.seq) + "/" + std::to_string(static_cast<int>(e.kind)) + "/" +
                  std::to_string(e.bytes) + (e.completed() ? "/done" : "/open"));
  }
  return out;
}

TEST(RingDeltaTest, TheLeaderHoldsEachRanksWholeRingFromDeltasInFewerBytes) {
  Link link;
  size_t first_bytes = 0;
  // Two ranks stepping through 40 collectives (the ring wraps twice), each
  // report with one or two still open; the leader's copy must match each time.
  for (uint64_t issued = 1; issued <= 40; ++issued) {
    const uint64_t open = issued % 3 == 0 ? 2 : 1;
    std::vector<RankView> views = {Advance(0, 500, issued, open), Advance(1, 501, issued, 0)};
    link.Report(views);
    ASSERT_EQ(link.held.size(), 2u);
    for (size_t r = 0; r < 2; ++r) {
      EXPECT_EQ(Shape(link.held[r].progress.ring), Shape(views[r].progress.ring))
          << "rank " << r << " after " << issued << " collectives";
      EXPECT_EQ(link.held[r].ring_since, 0u);
    }
    if (issued == 16) first_bytes = link.bytes;
  }
  // A full ring's report against one of its deltas: the whole ring only once.
  Link whole;
  whole.Report({Advance(0, 500, 40, 1), Advance(1, 501, 40, 0)});
  EXPECT_LT(link.bytes * 3, whole.bytes * 2) << "a delta report is not under two thirds of the whole one";
  EXPECT_GT(first_bytes, 0u);
  // The issued age of a held entry is still right in the leader's clock.
  const CollectiveRecord& newest = link.held[0].progress.ring.back();
  EXPECT_EQ(kReceiverNow - newest.issued_ns, 1 * kSecond);
}

TEST(RingDeltaTest, ANewProcessOrConnectionSendsTheWholeRing) {
  Link link;
  link.Report({Advance(0, 500, 20, 1)});
  link.Report({Advance(0, 500, 22, 1)});
  // The rank was restarted: another pid in its slot, its ring starting over.
  link.Report({Advance(0, 777, 3, 1)});
  EXPECT_EQ(Shape(link.held[0].progress.ring), Shape(Advance(0, 777, 3, 1).progress.ring));
  // A new connection to a leader that holds nothing.
  link.trimmer.Reset();
  link.held.clear();
  link.Report({Advance(0, 777, 30, 1)});
  EXPECT_EQ(link.held[0].progress.ring.size(), static_cast<size_t>(kProgressRingSize));
  EXPECT_EQ(Shape(link.held[0].progress.ring), Shape(Advance(0, 777, 30, 1).progress.ring));
}

TEST(RingDeltaTest, ARingOutOfOrderStillMakesADeltaTheLeaderTakes) {
  // A record read while its writer wrapped the ring (torn) can hold an old
  // entry after newer ones; the delta must leave out every entry before
  // ring_since, not only a prefix (the leader refuses the report otherwise and
  // loses the node: seen at 2048 ranks on 64 nodes).
  Link link;
  link.Report({Advance(0, 900, 20, 1)});
  RankView torn = Advance(0, 900, 22, 1);
  torn.progress.torn = true;
  torn.progress.ring.back() = torn.progress.ring.front();  // #7 where #22 belongs
  torn.progress.ring.back().seq = 5;
  link.Report({torn});
  ASSERT_EQ(link.held.size(), 1u);
  for (const CollectiveRecord& e : link.held[0].progress.ring) EXPECT_NE(e.seq, 5u);
  // The next clean report makes the leader's ring whole again.
  link.Report({Advance(0, 900, 23, 1)});
  EXPECT_EQ(Shape(link.held[0].progress.ring), Shape(Advance(0, 900, 23, 1).progress.ring));
}

TEST(RingDeltaTest, AMalformedDeltaIsRefused) {
  RankView v = Advance(0, 500, 20, 1);
  const nlohmann::json line = nlohmann::json::parse(EncodeClusterMessage(ProgressMsg{3, {v}}, kSenderNow));
  auto with = [&](uint64_t since) {
    nlohmann::json l = line;
    l["ranks"][0][cluster_test::Item("ring_since")] = since;
    return l.dump();
  };
  // Entries older than ring_since were not to be sent.
  Result<ClusterMessage> older = ParseClusterMessage(with(10), kReceiverNow);
  ASSERT_FALSE(older.ok());
  EXPECT_NE(older.status().message().find("older than ring_since 10"), std::string::npos)
      << older.status().ToString();
  // The entries the delta holds (from #5 on: all 16 here) are still capped by ring_head.
  Result<ClusterMessage> fine = ParseClusterMessage(with(5), kReceiverNow);
  ASSERT_TRUE(fine.ok()) << fine.status().ToString();
  EXPECT_EQ(std::get<ProgressMsg>(*fine).ranks[0].ring_since, 5u);
  // 0: the whole ring, which then must hold min(ring_head, 16) entries.
  Result<ClusterMessage> whole = ParseClusterMessage(with(0), kReceiverNow);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(std::get<ProgressMsg>(*whole).ranks[0].ring_since, 0u);
}

}  // namespace
}  // namespace holdfast
