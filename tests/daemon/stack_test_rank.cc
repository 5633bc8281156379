// A stand-in rank for the stacks suite (no LibTorch): writes its progress
// record as a trainer would, one step every STEP_MS milliseconds, STEPS steps,
// then exits 0. Each step's work is StackTestRankStepWork (a sleep), so a
// SIGSTOPped rank is stopped in it; with spin@R:S, rank R spins in
// StackTestRankSpinInCompute at step S of generation 0 (never again: the
// restarted generation runs clean). Both names are what the stacks must show.
//   stack_test_rank STEPS STEP_MS [spin@R:S]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "common/progress_record.h"

__attribute__((noinline)) void StackTestRankStepWork(long step_ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
  asm volatile("");  // keeps the call a call
}

[[noreturn]] __attribute__((noinline)) void StackTestRankSpinInCompute() {
  volatile unsigned long n = 0;
  for (;;) n = n + 1;
}

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: stack_test_rank STEPS STEP_MS [spin@R:S]\n");
    return 2;
  }
  const long steps = std::atol(argv[1]);
  const long step_ms = std::atol(argv[2]);
  int spin_rank = -1;
  long spin_step = -1;
  if (argc == 4 && std::sscanf(argv[3], "spin@%d:%ld", &spin_rank, &spin_step) != 2) {
    std::fprintf(stderr, "stack_test_rank: expected spin@R:S, got %s\n", argv[3]);
    return 2;
  }
  const char* path = std::getenv("HOLDFAST_PROGRESS_PATH");
  const char* rank_env = std::getenv("HOLDFAST_RANK");
  const char* generation = std::getenv("HOLDFAST_GENERATION");
  if (path == nullptr || rank_env == nullptr) {
    std::fprintf(stderr, "stack_test_rank: run me under holdfastd\n");
    return 2;
  }
  const int rank = std::atoi(rank_env);
  auto writer = holdfast::ProgressWriter::Open(path, rank);
  if (!writer.ok()) {
    std::fprintf(stderr, "stack_test_rank: %s\n", writer.status().ToString().c_str());
    return 1;
  }
  const bool first_generation = generation == nullptr || std::atoi(generation) == 0;
  for (long s = 1; s <= steps; ++s) {
    (*writer)->BeginStep();
    (*writer)->SetPhase(holdfast::Phase::kForward);
    if (first_generation && rank == spin_rank && s == spin_step) StackTestRankSpinInCompute();
    StackTestRankStepWork(step_ms);
    (*writer)->EndStep(s);
  }
  (*writer)->SetPhase(holdfast::Phase::kDone);
  return 0;
}
