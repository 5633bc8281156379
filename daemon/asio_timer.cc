#include "daemon/asio_timer.h"

#include <chrono>
#include <cstdint>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

namespace holdfast {

namespace {

class AsioTimer : public Timer {
 public:
  explicit AsioTimer(boost::asio::io_context* io) : timer_(*io), arming_(std::make_shared<uint64_t>(0)) {}
  ~AsioTimer() override { Cancel(); }

  void Arm(double seconds, std::function<void()> fire) override {
    const uint64_t mine = ++*arming_;
    timer_.expires_after(std::chrono::nanoseconds(seconds > 0 ? static_cast<int64_t>(seconds * 1e9) : 0));
    // The handler holds the arming counter, not the timer: it may run after
    // this AsioTimer is gone, and must then do nothing.
    timer_.async_wait([arming = arming_, mine, fire = std::move(fire)](const boost::system::error_code& e) {
      if (!e && *arming == mine) fire();
    });
  }

  void Cancel() override {
    ++*arming_;
    timer_.cancel();
  }

 private:
  boost::asio::steady_timer timer_;
  std::shared_ptr<uint64_t> arming_;  // bumped by every Arm and Cancel
};

}  // namespace

std::unique_ptr<Timer> AsioTimerFactory::NewTimer() { return std::make_unique<AsioTimer>(io_); }

}  // namespace holdfast
