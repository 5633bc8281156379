#include "common/time_source.h"

#include <chrono>

#include "common/progress_record.h"

namespace holdfast {

int64_t RealTimeSource::MonotonicNs() const { return MonotonicNowNs(); }

int64_t RealTimeSource::UnixMs() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

RealTimeSource* RealTimeSource::Get() {
  static RealTimeSource* instance = new RealTimeSource();
  return instance;
}

}  // namespace holdfast
