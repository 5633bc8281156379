#include "common/rank_progress.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace holdfast {
namespace {

// A record as ProgressWriter leaves it after `collectives` collectives.
ProgressSnapshot Written(uint64_t collectives) {
  ProgressSnapshot s;
  s.valid = true;
  ProgressRecordLayout& r = s.record;
  r.magic = kProgressMagic;
  r.version = kProgressVersion;
  r.pid = 321;
  r.step = 41;
  r.phase = static_cast<uint32_t>(Phase::kCollective);
  r.collective_kind = static_cast<uint32_t>(CollectiveKind::kAllgather);
  r.collectives_issued = collectives;
  r.waiting_on = collectives;
  r.checkpoint_step = 40;
  r.checkpoint_failed_step = -1;
  for (uint64_t seq = 1; seq <= collectives; ++seq) {
    CollectiveEntry& e = r.ring[r.ring_head % kProgressRingSize];
    e.seq = seq;
    e.kind = static_cast<uint32_t>(seq % 2 ? CollectiveKind::kAllreduce : CollectiveKind::kBroadcast);
    e.bytes = seq * 10;
    e.issued_ns = static_cast<int64_t>(seq) * 1000;
    e.completed_ns = seq == collectives ? 0 : e.issued_ns + 1;
    r.ring_head += 1;
  }
  return s;
}

TEST(RankProgressTest, AWrappedRingDecodesToItsNewestEntriesOldestFirst) {
  const RankProgress p = DecodeProgress(Written(40));
  ASSERT_TRUE(p.valid);
  EXPECT_TRUE(p.attached());
  EXPECT_TRUE(p.in_collective());
  EXPECT_EQ(p.step, 41);
  EXPECT_EQ(p.phase, Phase::kCollective);
  EXPECT_EQ(p.collective_kind, CollectiveKind::kAllgather);
  EXPECT_EQ(p.ring_head, 40u);
  ASSERT_EQ(p.ring.size(), static_cast<size_t>(kProgressRingSize));
  for (size_t i = 0; i < p.ring.size(); ++i) {
    const uint64_t seq = 40 - kProgressRingSize + 1 + i;
    EXPECT_EQ(p.ring[i].seq, seq) << i;
    EXPECT_EQ(p.ring[i].bytes, seq * 10) << i;
    EXPECT_EQ(p.ring[i].kind, seq % 2 ? CollectiveKind::kAllreduce : CollectiveKind::kBroadcast) << i;
  }
  EXPECT_FALSE(p.ring.back().completed());
  EXPECT_TRUE(p.ring.front().completed());

  const RankProgress short_ring = DecodeProgress(Written(3));
  ASSERT_EQ(short_ring.ring.size(), 3u);
  EXPECT_EQ(short_ring.ring.front().seq, 1u);
}

TEST(RankProgressTest, ARecordThisBuildCannotInterpretIsNotValid) {
  ProgressSnapshot phase = Written(2);
  phase.record.phase = 9;  // a phase from a newer writer
  EXPECT_FALSE(DecodeProgress(phase).valid);
  EXPECT_FALSE(DecodeProgress(phase).attached());
  ProgressSnapshot kind = Written(2);
  kind.record.collective_kind = 77;
  EXPECT_FALSE(DecodeProgress(kind).valid);
  ProgressSnapshot ring = Written(20);
  ring.record.ring[(ring.record.ring_head - 1) % kProgressRingSize].kind = 7;
  EXPECT_FALSE(DecodeProgress(ring).valid);
  ProgressSnapshot group = Written(20);  // a group from a newer writer
  group.record.ring_detail[(group.record.ring_head - 1) % kProgressRingSize].group = kCollectiveGroups + 1;
  EXPECT_FALSE(DecodeProgress(group).valid);
  ring = Written(20);
  ring.record.ring_detail[3].send_what = 9;
  EXPECT_FALSE(DecodeProgress(ring).valid);
  // An unknown kind outside the newest ring_head entries is never read.
  ProgressSnapshot stale = Written(2);
  stale.record.ring[5].kind = 99;
  EXPECT_TRUE(DecodeProgress(stale).valid);
  // A torn read says so, whatever it holds.
  ProgressSnapshot torn = Written(2);
  torn.torn = true;
  EXPECT_TRUE(DecodeProgress(torn).torn);
  EXPECT_FALSE(DecodeProgress(ProgressSnapshot{}).valid);
}

TEST(RankProgressTest, ACheckpointErrorIsValidUtf8AndNeverReadsPastTheField) {
  ProgressSnapshot s = Written(1);
  s.record.checkpoint_failures = 1;
  s.record.checkpoint_failed_step = 40;
  std::memset(s.record.checkpoint_error, 'x', sizeof(s.record.checkpoint_error));  // no NUL at all
  s.record.checkpoint_error[0] = '\xff';
  const RankProgress p = DecodeProgress(s);
  EXPECT_EQ(p.checkpoint_error.size(), 3u + kProgressErrorSize - 2) << "the field less its NUL, as the wire carries it";
  EXPECT_EQ(p.checkpoint_error.substr(0, 3), "\xEF\xBF\xBD");
  EXPECT_EQ(p.checkpoint_failed_step, 40);
}

TEST(RankProgressTest, NewestStepIsOverValidRecordsAndAtLeastWhatIsKnown) {
  std::vector<RankView> views(3);
  views[0].progress = DecodeProgress(Written(1));
  views[1].progress = DecodeProgress(Written(1));
  views[1].progress.step = 57;
  views[2].progress.step = 900;  // not valid: not read
  EXPECT_EQ(NewestStep(views, -1), 57);
  EXPECT_EQ(NewestStep(views, 60), 60);
  EXPECT_EQ(NewestStep({}, -1), -1);
}

}  // namespace
}  // namespace holdfast
