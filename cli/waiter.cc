#include "cli/waiter.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <ctime>

namespace holdfast {

int64_t RealClock::MonotonicNs() const { return RealTimeSource::Get()->MonotonicNs(); }

int64_t RealClock::UnixMs() const { return RealTimeSource::Get()->UnixMs(); }

void RealClock::SleepFor(std::chrono::nanoseconds d) {
  if (d <= std::chrono::nanoseconds::zero()) return;
  // An absolute monotonic deadline: a signal that interrupts the sleep does
  // not lengthen it, and the wall clock stepping does not move it.
  const int64_t now = MonotonicNs();
  const int64_t until = d.count() > INT64_MAX - now ? INT64_MAX : now + d.count();
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(until / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(until % 1'000'000'000);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

RealClock* RealClock::Get() {
  static RealClock* clock = new RealClock();
  return clock;
}

void FakeClock::SleepFor(std::chrono::nanoseconds d) {
  ++sleeps_;
  if (d > std::chrono::nanoseconds::zero()) {
    time_.Advance(std::chrono::duration<double>(d).count());
    slept_ += d;
  }
  if (on_sleep_) on_sleep_();
}

std::string SecondsText(std::chrono::nanoseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", std::chrono::duration<double>(d).count());
  return buf;
}

Status WaitUntil(const WaitLook& look, const WaitSpec& spec, Clock* clock) {
  using std::chrono::nanoseconds;
  const int64_t start = clock->MonotonicNs();
  // A deadline past the clock's range is no deadline.
  const bool bounded = spec.timeout < nanoseconds(INT64_MAX - start);
  const int64_t deadline = bounded ? start + spec.timeout.count() : INT64_MAX;
  for (;;) {
    const int64_t now = clock->MonotonicNs();
    WaitProgress progress;
    progress.elapsed = nanoseconds(now - start);
    progress.left = nanoseconds(now < deadline ? deadline - now : 0);
    Result<bool> done = look(progress);
    if (!done.ok()) return done.status();
    if (*done) return Status::Ok();
    const int64_t after = clock->MonotonicNs();
    if (bounded && after >= deadline) {
      return TimeoutError("waited " + SecondsText(spec.timeout) + " s for " + spec.what + " in vain");
    }
    clock->SleepFor(bounded ? std::min(spec.poll, nanoseconds(deadline - after)) : spec.poll);
  }
}

}  // namespace holdfast
