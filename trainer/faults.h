// Fault injection for Holdfast's own tests, drills and soak (bench/soak): the
// faults a rank can do to itself, because from outside only signals reach it.
//
// Two ways to ask for one:
// - --inject-fault KIND@RANK:STEP, fixed when the run starts: "hang@1:12"
//   spins rank 1 in compute at the start of step 12 (its peers then wait in the
//   next allreduce), "crash@0:7" aborts rank 0 at step 7, "slow@2:10" makes
//   rank 2 a straggler from step 10 on for the rest of that process's life
//   (4x its compute time; "slow@2:10:x3": 3x). It fires once per run: a marker
//   file in output.dir records that it fired, so a restarted generation runs clean.
//   "exit@0:7" is the job's own failure: rank 0 exits 1 at step 7 every time it
//   gets there, in every generation and on every host (no marker).
//   "stop@6:14" puts rank 6 in job-control stop (SIGSTOP to itself) at the
//   start of step 14: a SIGSTOP from outside, at a point a test can name.
// - --drill-dir DIR, while the run goes on: before each step rank R looks for
//   DIR/rank-R (one stat), takes it (renames it to DIR/rank-R.taken-STEP, so
//   it fires once) and does what it says: "hang", "crash", or "slow xF N"
//   (compute F times as long for the next N steps; N 0 = for the rest of
//   the process). A file that cannot be read as one of those is logged and
//   ignored: a drill never stops the run by accident.
//
// The step loop reaches both through one FaultHook (MakeFaultHook), called at
// named points whether or not a fault was asked for: BeforeStep (a hang or a
// crash fires, a slowdown starts), BeforeUpdate (a slowdown sleeps) and
// AfterStep (a slowdown measures). Without --inject-fault and --drill-dir the
// hook does nothing at any point.
//
// Thread-safety: a FaultHook is driven by one thread (the training thread; its
// BeforeUpdate runs inside Trainer::Step on that thread). The free functions
// are safe to call from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"

namespace holdfast {

struct Fault {
  std::string kind;  // hang, crash, exit, stop or slow
  int rank = -1;
  int64_t step = -1;
  double factor = 4;         // slow: compute time multiplier
  int64_t slow_steps = 0;    // slow: for how many steps (0: the rest of the process)
  std::string marker;        // --inject-fault: the file that records it fired
};

// --inject-fault's KIND@RANK:STEP[:xF]; the marker goes into out_dir.
Result<Fault> ParseFault(const std::string& text, const std::string& out_dir);

// Records in the fault's marker that it fired. False when it fired before (a
// restarted generation runs clean) or the marker cannot be written (it would
// fire in every generation): then nothing is injected.
bool ClaimFault(const Fault& f);

// A drill file's text: "hang", "crash" or "slow xF N" (whitespace-separated).
Result<Fault> ParseDrill(const std::string& text);

// The drill waiting for `rank` in `dir` before step `next_step`, taken (it
// will not fire again); nullopt when there is none or it cannot be read.
std::optional<Fault> TakeDrill(const std::string& dir, int rank, int64_t next_step);

// Hangs (spins in compute, forever) or aborts, as `f` says; returns for slow.
void FireHangOrCrash(const Fault& f, int rank, int64_t next_step);

// The slow fault: from its step on, the rank sleeps (F-1) x the compute time
// it measured in its previous step (step time minus the gradient allreduce
// wait minus its own injected sleep) in the before-update hook, i.e. after the
// step's collectives and before the optimizer: outside any collective, inside
// the step's time. Its peers then wait for it in the next step's allreduce.
struct Slowdown {
  bool active = false;
  double factor = 1;
  int64_t until_step = 0;      // last slow step; 0 = no end
  double last_compute_ms = 0;  // measured in the previous step
  double sleep_ms = 0;         // to sleep in this step
  double slept_ms = 0;         // slept in this step

  void Start(const Fault& f, int rank, int64_t first_step);
  // Before step `next_step`: how long its hook sleeps.
  void BeforeStep(int64_t next_step);
  // After the step: its measured time and its allreduce wait.
  void AfterStep(double step_ms, double comm_wait_ms);
};

// Where the step loop lets injected faults act (see the top of this file).
class FaultHook {
 public:
  virtual ~FaultHook() = default;
  // Before step `next_step`, nothing of it run yet: a hang or a crash asked
  // for at this step fires (and does not return); a slowdown starts or ends.
  virtual void BeforeStep(int64_t next_step) = 0;
  // Inside the step, after its collectives, right before the optimizer update
  // (Trainer::SetBeforeUpdateHook): a slowdown sleeps here.
  virtual void BeforeUpdate() = 0;
  // After the step completed: its time and its gradient-allreduce wait.
  virtual void AfterStep(double step_ms, double comm_wait_ms) = 0;
};

struct FaultOptions {
  int rank = 0;
  std::string inject_fault;  // --inject-fault's KIND@RANK:STEP[:xF]; empty = none
  std::string out_dir;       // output.dir: where --inject-fault's fired-once marker goes
  std::string drill_dir;     // --drill-dir; empty = none
  // How a slowdown sleeps; empty = std::this_thread::sleep_for (tests record it instead).
  std::function<void(double ms)> sleep;
};

// The hook for `options`: one that does nothing when no fault is asked for,
// else the injected faults. kInvalidArgument for a malformed --inject-fault.
Result<std::unique_ptr<FaultHook>> MakeFaultHook(const FaultOptions& options);

}  // namespace holdfast
