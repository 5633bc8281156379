// Waiting for something to happen, on an injected clock.
//
// A Clock is a TimeSource (common/time_source.h) that can also pass time:
// SleepFor blocks on the real clock and only moves a fake one, so a loop that
// waits through a Clock runs in a unit test without sleeping (Envoy's
// simulated-time habit). WaitUntil is the one such loop: it asks `look`
// whether what it waits for holds, between looks passes the poll interval on
// the clock, and gives up with kTimeout naming what it waited for once the
// deadline has passed. runctl's waits (checkpoint, stop and resume --wait) and
// the integration suites' waits go through it; nothing in cli/ sleeps on its
// own.
//
// Thread-safety: RealClock is stateless and safe from any thread; FakeClock
// is for single-threaded tests. WaitUntil runs `look` on the calling thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"
#include "common/time_source.h"

namespace holdfast {

class Clock : public TimeSource {
 public:
  // Returns after `d` of this clock's monotonic time (at once for d <= 0).
  virtual void SleepFor(std::chrono::nanoseconds d) = 0;
};

// The machine's clocks (RealTimeSource); SleepFor sleeps on CLOCK_MONOTONIC.
class RealClock : public Clock {
 public:
  int64_t MonotonicNs() const override;
  int64_t UnixMs() const override;
  void SleepFor(std::chrono::nanoseconds d) override;
  // One process-wide instance (never destroyed).
  static RealClock* Get();
};

// A clock that moves only when told, or when slept on: SleepFor advances both
// readings by `d` and then runs the sleep hook, where a test makes the world
// change (a daemon answers, a file appears) as time passes.
class FakeClock : public Clock {
 public:
  FakeClock() = default;
  int64_t MonotonicNs() const override { return time_.MonotonicNs(); }
  int64_t UnixMs() const override { return time_.UnixMs(); }
  void SleepFor(std::chrono::nanoseconds d) override;
  void Advance(double seconds) { time_.Advance(seconds); }
  // Called after each SleepFor has moved the clock.
  void set_on_sleep(std::function<void()> hook) { on_sleep_ = std::move(hook); }
  int sleeps() const { return sleeps_; }
  // Total time passed in SleepFor.
  std::chrono::nanoseconds slept() const { return slept_; }

 private:
  FakeTimeSource time_;
  std::function<void()> on_sleep_;
  int sleeps_ = 0;
  std::chrono::nanoseconds slept_{0};
};

// What WaitUntil tells `look` about the wait so far.
struct WaitProgress {
  std::chrono::nanoseconds elapsed{0};  // since the wait began
  std::chrono::nanoseconds left{0};     // until its deadline (0 once past it)
};

// What a wait is for and how long it may take.
struct WaitSpec {
  // What is awaited, as the timeout error names it: "the checkpoint to commit".
  std::string what;
  // From the start of the wait; nanoseconds::max(): no deadline.
  std::chrono::nanoseconds timeout = std::chrono::nanoseconds::max();
  // Between looks (shortened to what is left before the deadline).
  std::chrono::nanoseconds poll = std::chrono::milliseconds(250);
};

// true: what is awaited holds, the wait ends; false: look again after the
// poll interval; an error ends the wait with that error (say the daemon went
// away).
using WaitLook = std::function<Result<bool>(const WaitProgress&)>;

// Looks at once, then after every poll interval on `clock` (not owned),
// until `look` returns true (OK) or an error (returned as it is). When the
// deadline has passed and a last look still says false: kTimeout "waited 600 s
// for WHAT in vain" (the timeout as given). Never sleeps past the deadline.
Status WaitUntil(const WaitLook& look, const WaitSpec& spec, Clock* clock);

// "600", "0.5", "2.25": a number of seconds the way the messages print it.
std::string SecondsText(std::chrono::nanoseconds d);

}  // namespace holdfast
