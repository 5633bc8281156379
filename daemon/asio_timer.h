// AsioTimerFactory: holdfastd's timers (common/timer.h) on its asio event
// loop, each an asio::steady_timer. A fire() runs as a handler of the loop,
// never inside Arm or Cancel. A handler that was already queued when its
// timer was cancelled, re-armed or destroyed finds its arming stale and does
// nothing (asio's cancel cannot recall a handler whose wait has completed).
//
// Thread-safety: loop thread only.
#pragma once

#include <memory>

#include "common/timer.h"

namespace boost::asio {
class io_context;
}

namespace holdfast {

class AsioTimerFactory : public TimerFactory {
 public:
  // `io` is not owned and must outlive the factory and its timers.
  explicit AsioTimerFactory(boost::asio::io_context* io) : io_(io) {}
  std::unique_ptr<Timer> NewTimer() override;

 private:
  boost::asio::io_context* io_;  // not owned
};

}  // namespace holdfast
