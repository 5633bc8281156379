// Timer and TimerFactory: one-shot timers for an event loop, injected beside
// TimeSource (common/time_source.h) so that code which waits — a poll
// interval, a kill grace, a restart backoff, a retry — is tested on a fake
// clock: the test moves FakeTimeSource and the timers that fall due fire, in
// order, with no sleeping and nothing left to chance.
//
//   Timer::Arm(s, fire)  fire() once, s seconds from now (on the factory's
//                        loop); arming again replaces the pending one
//   Timer::Cancel()      the pending fire() never runs (safe when none is)
//
// A fire() that has not run when its Timer is cancelled, re-armed or
// destroyed never runs: a callback can rely on "my timer is still armed".
// Implementations: AsioTimerFactory (daemon/asio_timer.h, holdfastd's
// asio::steady_timer) and FakeTimerFactory below.
//
// Thread-safety: a Timer belongs to its loop's thread. FakeTimerFactory and
// its timers are for single-threaded tests.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>

#include "common/time_source.h"

namespace holdfast {

class Timer {
 public:
  virtual ~Timer() = default;
  virtual void Arm(double seconds, std::function<void()> fire) = 0;
  virtual void Cancel() = 0;
};

class TimerFactory {
 public:
  virtual ~TimerFactory() = default;
  // A new, unarmed timer. The factory must outlive it.
  virtual std::unique_ptr<Timer> NewTimer() = 0;
};

// Timers on a FakeTimeSource: nothing fires until the test advances the
// clock through this factory (or calls FireDue). Due timers fire in deadline
// order (ties: the order they were armed), the clock standing at each one's
// deadline while it fires; a timer armed by a fire() fires in the same
// Advance when it falls due within it.
class FakeTimerFactory : public TimerFactory {
 public:
  // `clock` is not owned and must outlive the factory.
  explicit FakeTimerFactory(FakeTimeSource* clock) : clock_(clock) {}
  ~FakeTimerFactory() override;

  std::unique_ptr<Timer> NewTimer() override;

  // Moves the clock `seconds` forward, firing what falls due on the way.
  // Returns how many timers fired.
  int Advance(double seconds);
  // Fires the timers due now (deadline <= now) without moving the clock.
  int FireDue() { return Advance(0); }
  // How many timers are armed, and the earliest deadline (monotonic ns).
  size_t armed() const { return armed_.size(); }
  std::optional<int64_t> next_deadline_ns() const;

  // For FakeTimer.
  void ArmTimer(uint64_t timer_id, int64_t deadline_ns, std::function<void()> fire);
  void CancelTimer(uint64_t timer_id) { armed_.erase(timer_id); }

 private:
  struct Pending {
    int64_t deadline_ns = 0;
    uint64_t order = 0;  // arming order: ties fire first-armed first
    std::function<void()> fire;
  };
  void MoveClockTo(int64_t ns);

  FakeTimeSource* clock_;  // not owned
  uint64_t next_timer_id_ = 1;
  uint64_t next_order_ = 1;
  std::map<uint64_t, Pending> armed_;  // timer id -> its pending fire
};

}  // namespace holdfast
