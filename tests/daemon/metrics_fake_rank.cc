// A stand-in rank for the metrics suite (no LibTorch): writes its progress
// record as a trainer would, one step every STEP_MS milliseconds, STEPS steps,
// then exits 0.
//   metrics_fake_rank STEPS STEP_MS
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "common/progress_record.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: metrics_fake_rank STEPS STEP_MS\n");
    return 2;
  }
  const long steps = std::atol(argv[1]);
  const auto step_time = std::chrono::milliseconds(std::atol(argv[2]));
  const char* path = std::getenv("HOLDFAST_PROGRESS_PATH");
  const char* rank = std::getenv("HOLDFAST_RANK");
  if (path == nullptr || rank == nullptr) {
    std::fprintf(stderr, "metrics_fake_rank: run me under holdfastd\n");
    return 2;
  }
  auto writer = holdfast::ProgressWriter::Open(path, std::atoi(rank));
  if (!writer.ok()) {
    std::fprintf(stderr, "metrics_fake_rank: %s\n", writer.status().ToString().c_str());
    return 1;
  }
  for (long s = 1; s <= steps; ++s) {
    (*writer)->BeginStep();
    (*writer)->SetPhase(holdfast::Phase::kForward);
    std::this_thread::sleep_for(step_time);  // the "work" of a step
    (*writer)->EndStep(s);
  }
  (*writer)->SetPhase(holdfast::Phase::kDone);
  return 0;
}
