#include "trainer/spare.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include <fmt/format.h>

#include "common/launch_contract.h"

namespace holdfast {

StartupTimeline::StartupTimeline()
    : t0_(std::chrono::steady_clock::now()),
      wall0_ms_(std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count()) {}

double StartupTimeline::ElapsedMs() const {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
}

void StartupTimeline::Restart(std::string what) {
  const StartupTimeline fresh;
  t0_ = fresh.t0_;
  wall0_ms_ = fresh.wall0_ms_;
  marks_.clear();
  logged = false;
  base_ = std::move(what);
}

std::string StartupTimeline::Describe() const {
  const std::time_t secs = static_cast<std::time_t>(wall0_ms_ / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
  std::string out = fmt::format("{} at {}.{:03d}Z; ", base_, when, static_cast<int>(wall0_ms_ % 1000));
  for (size_t i = 0; i < marks_.size(); ++i) {
    out += fmt::format("{}{} +{:.1f} ms", i == 0 ? "" : ", ", marks_[i].first, marks_[i].second);
  }
  return out;
}

StartupTimeline& Startup() {
  static StartupTimeline timeline;
  return timeline;
}

Result<SpareAssignment> BecomeAssignedRank(const char* fd_text) {
  char* end = nullptr;
  const long fd = std::strtol(fd_text, &end, 10);
  if (end == fd_text || *end != '\0' || fd < 3 || fd > 1 << 20 || ::fcntl(static_cast<int>(fd), F_GETFD) < 0) {
    return InvalidArgumentError(std::string(kEnvSpareFd) + "='" + fd_text +
                                "' is not an open fd: only holdfastd starts spares (recovery.warm_spares)");
  }
  Result<SpareAssignment> a = ReadSpareAssignment(static_cast<int>(fd));
  ::close(static_cast<int>(fd));
  ::unsetenv(kEnvSpareFd);
  if (!a.ok()) return a.status();
  const int log = ::open(a->log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) return ErrnoError("open the assigned rank's log " + a->log_path, errno);
  std::fflush(stdout);
  std::fflush(stderr);
  ::dup2(log, 1);
  ::dup2(log, 2);
  ::close(log);
  for (const auto& [k, v] : a->env) ::setenv(k.c_str(), v.c_str(), /*overwrite=*/1);
  return a;
}

}  // namespace holdfast
