// WaitUntil on a fake clock: what it returns when what it waits for holds,
// when a look fails, and when the deadline passes — and that it never sleeps
// for real or past the deadline.
#include "cli/waiter.h"

#include <gtest/gtest.h>

#include <vector>

namespace holdfast {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;

WaitSpec Spec(const std::string& what, nanoseconds timeout, nanoseconds poll = milliseconds(250)) {
  WaitSpec spec;
  spec.what = what;
  spec.timeout = timeout;
  spec.poll = poll;
  return spec;
}

TEST(WaitUntilTest, ReturnsOnceWhatItWaitsForHolds) {
  FakeClock clock;
  int looks = 0;
  const Status s = WaitUntil([&](const WaitProgress&) -> Result<bool> { return ++looks == 3; },
                             Spec("the third look", seconds(10)), &clock);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(looks, 3);
  // Looked at once, then after each poll interval: two intervals passed.
  EXPECT_EQ(clock.sleeps(), 2);
  EXPECT_EQ(clock.slept(), milliseconds(500));
}

TEST(WaitUntilTest, ADeadlineReachedIsATimeoutNamingWhatWasAwaited) {
  FakeClock clock;
  int looks = 0;
  const Status s = WaitUntil([&](const WaitProgress&) -> Result<bool> {
    ++looks;
    return false;
  }, Spec("the checkpoint to commit", seconds(1), milliseconds(300)), &clock);
  EXPECT_EQ(s.code(), StatusCode::kTimeout);
  EXPECT_EQ(s.message(), "waited 1 s for the checkpoint to commit in vain");
  // 300 + 300 + 300 + the last 100: never past the deadline, and a last look at it.
  EXPECT_EQ(clock.slept(), seconds(1));
  EXPECT_EQ(looks, 5);
}

TEST(WaitUntilTest, AFailedLookEndsTheWaitWithItsError) {
  FakeClock clock;
  int looks = 0;
  const Status s = WaitUntil([&](const WaitProgress&) -> Result<bool> {
    if (++looks < 2) return false;
    return UnavailableError("the daemon has gone");
  }, Spec("the run to stop", seconds(600)), &clock);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "the daemon has gone");
  EXPECT_EQ(looks, 2);
}

TEST(WaitUntilTest, EachLookIsToldHowLongItHasWaitedAndHowLongIsLeft) {
  FakeClock clock;
  std::vector<WaitProgress> seen;
  const Status s = WaitUntil([&](const WaitProgress& p) -> Result<bool> {
    seen.push_back(p);
    return seen.size() == 3;
  }, Spec("three looks", seconds(2), milliseconds(500)), &clock);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].elapsed, nanoseconds(0));
  EXPECT_EQ(seen[0].left, seconds(2));
  EXPECT_EQ(seen[2].elapsed, seconds(1));
  EXPECT_EQ(seen[2].left, seconds(1));
}

TEST(WaitUntilTest, WithoutADeadlineItWaitsAsLongAsItTakes) {
  FakeClock clock;
  int looks = 0;
  WaitSpec spec;
  spec.what = "a slow thing";
  spec.poll = seconds(3600);
  const Status s = WaitUntil([&](const WaitProgress&) -> Result<bool> { return ++looks == 1000; }, spec, &clock);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(clock.slept(), std::chrono::hours(999));
}

TEST(WaitUntilTest, TheWorldMovesWhileTheFakeClockSleeps) {
  FakeClock clock;
  bool committed = false;
  clock.set_on_sleep([&] { committed = clock.sleeps() == 4; });
  const Status s = WaitUntil([&](const WaitProgress&) -> Result<bool> { return committed; },
                             Spec("the commit", seconds(60)), &clock);
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(clock.slept(), seconds(1));
}

TEST(WaitUntilTest, SecondsReadAsTheMessagesPrintThem) {
  EXPECT_EQ(SecondsText(seconds(600)), "600");
  EXPECT_EQ(SecondsText(milliseconds(500)), "0.5");
  EXPECT_EQ(SecondsText(milliseconds(2250)), "2.25");
}

}  // namespace
}  // namespace holdfast
