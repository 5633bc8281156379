// TimeSource: the daemon's clocks, injected (Envoy's TimeSource habit) so that
// the supervisor's state machine runs in unit tests on a fake clock that only
// moves when the test moves it — no sleeps, no flaky timing.
//
//   MonotonicNs()  CLOCK_MONOTONIC, the clock of progress records, timeouts,
//                  backoffs and allowances (never steps).
//   UnixMs()       wall clock for what people read (lineage times); may step.
//
// Thread-safety: RealTimeSource is stateless and safe from any thread;
// FakeTimeSource is for single-threaded tests.
#pragma once

#include <cstdint>

namespace holdfast {

class TimeSource {
 public:
  virtual ~TimeSource() = default;
  virtual int64_t MonotonicNs() const = 0;
  virtual int64_t UnixMs() const = 0;
};

class RealTimeSource : public TimeSource {
 public:
  int64_t MonotonicNs() const override;
  int64_t UnixMs() const override;
  // One process-wide instance (never destroyed).
  static RealTimeSource* Get();
};

// A clock that moves only when told. Both readings move together.
class FakeTimeSource : public TimeSource {
 public:
  explicit FakeTimeSource(int64_t monotonic_ns = 1'000'000'000, int64_t unix_ms = 1'767'225'600'000)
      : mono_ns_(monotonic_ns), unix_ms_(unix_ms) {}
  int64_t MonotonicNs() const override { return mono_ns_; }
  int64_t UnixMs() const override { return unix_ms_; }
  void Advance(double seconds) {
    mono_ns_ += static_cast<int64_t>(seconds * 1e9);
    unix_ms_ += static_cast<int64_t>(seconds * 1e3);
  }
  // A wall-clock step (NTP): the monotonic clock does not move.
  void StepWall(int64_t delta_ms) { unix_ms_ += delta_ms; }

 private:
  int64_t mono_ns_;
  int64_t unix_ms_;
};

}  // namespace holdfast
