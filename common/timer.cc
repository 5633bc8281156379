#include "common/timer.h"

#include <tuple>
#include <utility>

#include "common/status.h"

namespace holdfast {

namespace {

class FakeTimer : public Timer {
 public:
  FakeTimer(FakeTimerFactory* factory, const FakeTimeSource* clock, uint64_t id)
      : factory_(factory), clock_(clock), id_(id) {}
  ~FakeTimer() override { factory_->CancelTimer(id_); }
  void Arm(double seconds, std::function<void()> fire) override {
    const int64_t delay_ns = seconds > 0 ? static_cast<int64_t>(seconds * 1e9) : 0;
    factory_->ArmTimer(id_, clock_->MonotonicNs() + delay_ns, std::move(fire));
  }
  void Cancel() override { factory_->CancelTimer(id_); }

 private:
  FakeTimerFactory* factory_;     // not owned
  const FakeTimeSource* clock_;   // not owned
  const uint64_t id_;
};

}  // namespace

FakeTimerFactory::~FakeTimerFactory() {
  // A pending fire() may own what owns a timer of ours (a shared_ptr in its
  // capture): destroy them outside the map, whose entries those timers erase.
  std::map<uint64_t, Pending> pending = std::move(armed_);
  armed_.clear();
  pending.clear();
}

std::unique_ptr<Timer> FakeTimerFactory::NewTimer() {
  return std::make_unique<FakeTimer>(this, clock_, next_timer_id_++);
}

void FakeTimerFactory::ArmTimer(uint64_t timer_id, int64_t deadline_ns, std::function<void()> fire) {
  armed_[timer_id] = Pending{deadline_ns, next_order_++, std::move(fire)};
}

std::optional<int64_t> FakeTimerFactory::next_deadline_ns() const {
  std::optional<int64_t> next;
  for (const auto& [id, p] : armed_) {
    if (!next || p.deadline_ns < *next) next = p.deadline_ns;
  }
  return next;
}

void FakeTimerFactory::MoveClockTo(int64_t ns) {
  // FakeTimeSource moves in seconds (a double): step until it is there.
  while (clock_->MonotonicNs() < ns) {
    const int64_t left = ns - clock_->MonotonicNs();
    clock_->Advance(left > 1 ? static_cast<double>(left) / 1e9 : 1e-9);
  }
}

int FakeTimerFactory::Advance(double seconds) {
  const int64_t target = clock_->MonotonicNs() + (seconds > 0 ? static_cast<int64_t>(seconds * 1e9) : 0);
  int fired = 0;
  for (;;) {
    auto due = armed_.end();
    for (auto it = armed_.begin(); it != armed_.end(); ++it) {
      if (it->second.deadline_ns > target) continue;
      if (due == armed_.end() || std::tie(it->second.deadline_ns, it->second.order) <
                                     std::tie(due->second.deadline_ns, due->second.order)) {
        due = it;
      }
    }
    if (due == armed_.end()) break;
    MoveClockTo(due->second.deadline_ns);
    std::function<void()> fire = std::move(due->second.fire);
    armed_.erase(due);
    fire();
    // A timer that re-arms itself for 0 s from its own fire() would never let
    // the clock move: a bug in the code under test, not a test to wait out.
    HF_CHECK(++fired < 1'000'000);
  }
  MoveClockTo(target);
  return fired;
}

}  // namespace holdfast
