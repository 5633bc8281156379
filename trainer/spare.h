// The start of a holdfast-train process: its timeline (where the time from
// main() to the first step goes, logged once after that step), and the
// warm-spare path (docs/warm-restarts.md): a process started by holdfastd with
// HOLDFAST_SPARE_FD does its rank-independent start-up, then waits here for
// the rank it is to become (common/spare_assignment.h) and turns into it.
//
// No LibTorch here; the LibTorch warm-up is trainer.h's WarmUpRuntime.
// Thread-safety: single-threaded use from main().
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/spare_assignment.h"
#include "common/status.h"

namespace holdfast {

class StartupTimeline {
 public:
  StartupTimeline();
  // Milliseconds since main() (since the constructor, which main() runs first).
  double ElapsedMs() const;
  void Mark(std::string what) { marks_.emplace_back(std::move(what), ElapsedMs()); }
  // Forgets the marks (a spare: its start-up is not the rank's).
  void Restart(std::string what);
  // "main() at 2026-…Z (t0); config +3 ms, store +15 ms, …"
  std::string Describe() const;
  bool logged = false;  // the first step's line was logged

 private:
  std::chrono::steady_clock::time_point t0_;
  int64_t wall0_ms_ = 0;
  std::string base_ = "main()";
  std::vector<std::pair<std::string, double>> marks_;
};

// The process's timeline, started by main().
StartupTimeline& Startup();

// Reads the assignment on `fd_text` (the value of HOLDFAST_SPARE_FD) and turns
// this process into that rank: sets its environment, sends stdout and stderr
// to its log, drops HOLDFAST_SPARE_FD and closes the fd. NotFound when
// released (EOF before an assignment: exit 0); any other error leaves the
// process a spare that must exit with kExitFailed.
Result<SpareAssignment> BecomeAssignedRank(const char* fd_text);

}  // namespace holdfast
