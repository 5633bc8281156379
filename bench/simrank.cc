// holdfast-simrank: a simulated rank for the scale harness (bench/scale_bench.py,
// docs/benchmarks.md "What supervision costs at scale"). No LibTorch: it
// writes the real progress record through the real writer
// (common/progress_record.h) — steps, phases, a data-parallel allreduce per
// step with its bytes — and answers holdfastd's signals as holdfast-train does
// (docs/job-contract.md): SIGUSR2 checkpoints after the current step and
// trains on, SIGTERM ends it (exit 75 after its "save" of the last completed
// step), SIGUSR1 stays as the daemon left it (ignored). So holdfastd cannot
// tell it from a trainer, and thousands of them fit on one machine.
//
// The allreduce is a real barrier of every rank of the generation, in shared
// memory (one futex word per step slot in /dev/shm/holdfast-sim-<run>-g<gen>,
// the nodes of the harness sharing one machine): a rank that stops stepping
// holds every other rank in allreduce #N, as a real collective would, so a
// hang's triage sees what it sees on a real run. What the network would cost
// is not simulated: the harness measures the supervisor, not the collective.
//
// Faults, as the harness (or a person) asks for them, read at each step's
// start from the control folder:
//   CONTROL/hang.<rank>      hang in compute (forward) from this step on; the file is
//                            removed, so the next generation steps again
//   CONTROL/slow.<rank>      a straggler: this rank's compute takes 3x as long (kept)
//   CONTROL/exit.<rank>      exit with the code the file holds (default 1), file removed
// A crash is a real signal: the harness SIGKILLs the rank.
//
//   holdfast-simrank [--step-ms 200] [--jitter-ms 20] [--bytes 67108864]
//                    [--checkpoint-every 0] [--checkpoint-ms 50] [--steps 0]
//                    [--control DIR]
//
// Exit codes: 0 after --steps steps (0: train forever), 1 on a failure (the
// barrier cannot be mapped), 2 on a usage error or when not run by holdfastd,
// 75 on SIGTERM.
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>

#include "common/launch_contract.h"
#include "common/progress_record.h"

namespace holdfast {
namespace {

volatile sig_atomic_t g_checkpoint = 0;
volatile sig_atomic_t g_stop = 0;

void OnUsr2(int) { g_checkpoint = 1; }
void OnTerm(int) { g_stop = 1; }

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// The generation's barrier: kSlots step slots of one arrival counter each. A
// slot is reused kSlots steps later; the last rank into step s's barrier
// clears slot s + 2, which no rank can have entered (every rank must pass
// step s + 1 first) and none still waits in (step s - 2 finished before any
// rank could arrive at step s).
constexpr int kSlots = 4;
struct Barrier {
  alignas(64) std::atomic<uint32_t> arrived[kSlots];
  alignas(64) std::atomic<uint32_t> released[kSlots];
};

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const struct timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

Barrier* MapBarrier(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return nullptr;
  if (::ftruncate(fd, sizeof(Barrier)) != 0) {  // zero-filled the first time; a no-op after
    ::close(fd);
    return nullptr;
  }
  void* map = ::mmap(nullptr, sizeof(Barrier), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  return map == MAP_FAILED ? nullptr : static_cast<Barrier*>(map);
}

// Waits until all `world` ranks have arrived for `step`; false when SIGTERM came meanwhile.
bool Arrive(Barrier* b, int64_t step, uint32_t world) {
  const int slot = static_cast<int>(step % kSlots);
  if (b->arrived[slot].fetch_add(1) + 1 == world) {
    b->arrived[(step + 2) % kSlots].store(0);
    b->released[(step + 2) % kSlots].store(0);
    b->released[slot].store(1);
    Futex(&b->released[slot], FUTEX_WAKE, INT32_MAX, nullptr);
    return true;
  }
  const struct timespec tick {0, 200'000'000};  // wake to look at g_stop
  while (b->released[slot].load() == 0) {
    if (g_stop) return false;
    Futex(&b->released[slot], FUTEX_WAIT, 0, &tick);
  }
  return true;
}

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

int ReadExitCode(const std::string& path) {
  std::ifstream in(path);
  int code = 1;
  if (!(in >> code)) code = 1;
  return code;
}

void SleepMs(double ms) { std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(ms * 1000))); }

// The step's simulated compute: ends early on SIGTERM, as a trainer abandons
// the step it is in to save the last completed one (std::this_thread::sleep_for
// would sleep on through the signal: the stop would wait up to a step).
void ComputeMs(double ms) {
  const int64_t ns = static_cast<int64_t>(ms * 1e6);
  struct timespec left {static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  while (!g_stop && ::nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
}

}  // namespace
}  // namespace holdfast

int main(int argc, char** argv) {
  using namespace holdfast;
  CLI::App app{"holdfast-simrank: a simulated rank (no LibTorch) for the scale harness, bench/scale_bench.py"};
  double step_ms = 200, jitter_ms = 20, checkpoint_ms = 50;
  uint64_t bytes = 64ull << 20;
  int64_t checkpoint_every = 0, steps = 0;
  std::string control;
  app.add_option("--step-ms", step_ms, "compute per step, milliseconds")->check(CLI::PositiveNumber);
  app.add_option("--jitter-ms", jitter_ms, "uniform jitter added to each step's compute")->check(CLI::NonNegativeNumber);
  app.add_option("--bytes", bytes, "the step's allreduce size, as recorded");
  app.add_option("--checkpoint-every", checkpoint_every, "checkpoint every N steps (0: only on SIGUSR2)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--checkpoint-ms", checkpoint_ms, "how long a checkpoint's staging takes")->check(CLI::NonNegativeNumber);
  app.add_option("--steps", steps, "stop after N steps (0: forever)")->check(CLI::NonNegativeNumber);
  app.add_option("--control", control, "folder of fault requests (hang.<rank>, slow.<rank>, exit.<rank>)");
  CLI11_PARSE(app, argc, argv);

  const std::string path = Env(kEnvProgressPath), rank_text = Env(kEnvRank), world_text = Env(kEnvWorldSize);
  const std::string run_id = Env(kEnvRunId), generation = Env(kEnvGeneration);
  if (path.empty() || rank_text.empty() || world_text.empty() || run_id.empty()) {
    std::fprintf(stderr, "holdfast-simrank: run me under holdfastd (%s, %s, %s and %s are not all set)\n",
                 kEnvProgressPath, kEnvRank, kEnvWorldSize, kEnvRunId);
    return 2;
  }
  const int rank = std::atoi(rank_text.c_str());
  const auto world = static_cast<uint32_t>(std::atol(world_text.c_str()));
  auto writer = ProgressWriter::Open(path, rank);
  if (!writer.ok()) {
    std::fprintf(stderr, "holdfast-simrank: %s\n", writer.status().ToString().c_str());
    return 1;
  }
  ProgressWriter& progress = **writer;
  const std::string barrier_path = "/dev/shm/holdfast-sim-" + run_id + "-g" + generation;
  Barrier* barrier = MapBarrier(barrier_path);
  if (barrier == nullptr) {
    std::fprintf(stderr, "holdfast-simrank: cannot map %s: %s\n", barrier_path.c_str(), std::strerror(errno));
    return 1;
  }
  if (rank == 0 && !generation.empty() && generation != "0") {  // the previous generation's barrier
    ::unlink(("/dev/shm/holdfast-sim-" + run_id + "-g" + std::to_string(std::atol(generation.c_str()) - 1)).c_str());
  }
  struct sigaction sa {};
  sa.sa_handler = OnUsr2;
  sigaction(SIGUSR2, &sa, nullptr);
  sa.sa_handler = OnTerm;
  sigaction(SIGTERM, &sa, nullptr);
  std::printf("holdfast-simrank %d of %u: pid %d, %.0f ms steps\n", rank, world, static_cast<int>(getpid()), step_ms);
  std::fflush(stdout);
  progress.SetRestored(-1, RestoreTier::kNone, 0);

  std::mt19937 rng(static_cast<uint32_t>(rank) * 2654435761u + 1);
  std::uniform_real_distribution<double> jitter(0.0, jitter_ms);
  const std::string mine = "." + std::to_string(rank);
  int64_t completed = 0;
  for (int64_t s = 1; steps == 0 || s <= steps; ++s) {
    progress.BeginStep();
    if (!control.empty()) {
      if (Exists(control + "/exit" + mine)) {
        const int code = ReadExitCode(control + "/exit" + mine);
        ::unlink((control + "/exit" + mine).c_str());
        std::fprintf(stderr, "holdfast-simrank %d: exiting with %d at step %lld, as asked\n", rank, code,
                     static_cast<long long>(s));
        return code;
      }
      if (Exists(control + "/hang" + mine)) {
        ::unlink((control + "/hang" + mine).c_str());
        std::fprintf(stderr, "holdfast-simrank %d: hanging in forward of step %lld, as asked\n", rank,
                     static_cast<long long>(s));
        progress.SetPhase(Phase::kForward);
        while (!g_stop) SleepMs(100);
        return kRankExitPreempted;
      }
    }
    const bool slow = !control.empty() && Exists(control + "/slow" + mine);
    progress.SetPhase(Phase::kForward);
    ComputeMs((step_ms * 0.33 + jitter(rng)) * (slow ? 3 : 1));
    progress.SetPhase(Phase::kBackward);
    ComputeMs(step_ms * 0.67 * (slow ? 3 : 1));
    if (g_stop) break;
    const uint64_t seq = progress.IssueCollective(CollectiveKind::kAllreduce, bytes);
    progress.WaitCollective(seq, CollectiveKind::kAllreduce);
    if (!Arrive(barrier, s, world)) break;
    progress.CollectiveDone(seq);
    progress.SetPhase(Phase::kOptimizer);
    progress.EndStep(s);
    completed = s;
    if (g_stop) break;
    if (g_checkpoint || (checkpoint_every > 0 && s % checkpoint_every == 0)) {
      g_checkpoint = 0;
      progress.SetPhase(Phase::kCheckpoint);
      SleepMs(checkpoint_ms);
      progress.SetCheckpointStep(s);
    }
  }
  // The generation is over for every rank (stopped or finished together):
  // rank 0 removes the barrier; a mapping still held stays valid.
  if (rank == 0) ::unlink(barrier_path.c_str());
  if (g_stop) {
    progress.SetPhase(Phase::kCheckpoint);
    SleepMs(checkpoint_ms);
    progress.SetCheckpointStep(completed);
    return kRankExitPreempted;
  }
  progress.SetPhase(Phase::kDone);
  return 0;
}
