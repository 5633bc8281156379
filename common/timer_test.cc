// FakeTimerFactory: timers fire when the test moves the clock, in order, and
// a cancelled, re-armed or destroyed timer's old fire never runs.
#include "common/timer.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace holdfast {
namespace {

TEST(FakeTimerFactoryTest, DueTimersFireInDeadlineOrderWithTheClockAtTheirDeadline) {
  FakeTimeSource clock;
  FakeTimerFactory timers(&clock);
  const int64_t t0 = clock.MonotonicNs();
  std::vector<std::pair<std::string, int64_t>> fired;
  auto a = timers.NewTimer(), b = timers.NewTimer(), c = timers.NewTimer();
  a->Arm(2.0, [&] { fired.push_back({"a", clock.MonotonicNs() - t0}); });
  b->Arm(0.5, [&] { fired.push_back({"b", clock.MonotonicNs() - t0}); });
  c->Arm(5.0, [&] { fired.push_back({"c", clock.MonotonicNs() - t0}); });
  EXPECT_EQ(timers.FireDue(), 0);
  EXPECT_EQ(timers.Advance(3.0), 2);
  EXPECT_EQ(fired, (std::vector<std::pair<std::string, int64_t>>{{"b", 500'000'000}, {"a", 2'000'000'000}}));
  EXPECT_EQ(clock.MonotonicNs() - t0, 3'000'000'000);
  EXPECT_EQ(timers.armed(), 1u);
  EXPECT_EQ(*timers.next_deadline_ns(), t0 + 5'000'000'000);
}

TEST(FakeTimerFactoryTest, CancelledReArmedAndDestroyedTimersDoNotFireTheirOldCallback) {
  FakeTimeSource clock;
  FakeTimerFactory timers(&clock);
  std::vector<std::string> fired;
  auto a = timers.NewTimer(), b = timers.NewTimer();
  auto c = timers.NewTimer();
  a->Arm(1, [&] { fired.push_back("a"); });
  a->Cancel();
  b->Arm(1, [&] { fired.push_back("b-old"); });
  b->Arm(2, [&] { fired.push_back("b-new"); });
  c->Arm(1, [&] { fired.push_back("c"); });
  c.reset();
  timers.Advance(10);
  EXPECT_EQ(fired, (std::vector<std::string>{"b-new"}));
}

TEST(FakeTimerFactoryTest, ATimerArmedByAFireFiresInTheSameAdvanceWhenItFallsDue) {
  FakeTimeSource clock;
  FakeTimerFactory timers(&clock);
  auto poll = timers.NewTimer();
  int polls = 0;
  std::function<void()> tick = [&] {
    ++polls;
    poll->Arm(1.0, tick);
  };
  poll->Arm(1.0, tick);
  EXPECT_EQ(timers.Advance(10.5), 10);
  EXPECT_EQ(polls, 10);
  EXPECT_EQ(timers.Advance(0.4), 0);
  EXPECT_EQ(timers.Advance(0.1), 1);
}

TEST(FakeTimerFactoryTest, TiesFireInArmingOrder) {
  FakeTimeSource clock;
  FakeTimerFactory timers(&clock);
  std::string order;
  auto a = timers.NewTimer(), b = timers.NewTimer();
  b->Arm(1, [&] { order += "b"; });
  a->Arm(1, [&] { order += "a"; });
  timers.Advance(1);
  EXPECT_EQ(order, "ba");
}

}  // namespace
}  // namespace holdfast
