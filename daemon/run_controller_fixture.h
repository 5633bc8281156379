// The fixture of the RunController's tests (run_controller_test.cc,
// run_controller_exit_test.cc): the state machine on a fake clock, with a
// recording RunActions and a real lineage.db. No processes, no sleeps: time
// moves when the test moves it.
#pragma once

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>

#include <gtest/gtest.h>

#include "common/launch_contract.h"
#include "daemon/exit_codes.h"
#include "daemon/recording_actions.h"
#include "daemon/run_controller.h"
#include "tests/support/subprocess.h"

namespace holdfast {

using testing::TempDir;

inline int Exited(int code) { return code << 8; }
inline int Killed(int sig) { return sig; }

class RunControllerTest : public ::testing::Test {
 protected:
  RunControllerTest() : dir_("run_controller") {
    job_.name = "unit";
    job_.command = {"/bin/true"};
    job_.nproc = 2;
    job_.supervise.restart_budget = 2;
    job_.supervise.backoff_initial_s = 0.5;
    job_.supervise.backoff_max_s = 4;
    job_.supervise.hang_min_s = 5;
    job_.supervise.startup_timeout_s = 60;
    job_.supervise.term_grace_s = 3;
    job_.supervise.checkpoint_allowance_s = 300;
  }

  // Two nodes of two ranks each: ranks 0,1 on host-a, 2,3 on host-b.
  void Make(SchedulerCapabilities caps = {}, int min_nodes = 0) {
    alloc_.nodes = {{"host-a", "10.0.0.1"}, {"host-b", "10.0.0.2"}};
    job_.history_dir = dir_ / "history";  // in the temporary folder, not beside it
    RecorderOptions ro;
    ro.run_dir = dir_.path();
    ro.job = &job_;
    ro.allocation = alloc_;
    ro.world_size = 4;
    auto rec = RunRecorder::Open(ro, &clock_);
    ASSERT_TRUE(rec.ok()) << rec.status().ToString();
    recorder_ = std::move(rec).value();
    ControllerOptions co;
    co.supervise = job_.supervise;
    co.world_size = 4;
    co.host_of_rank = [](int rank) { return rank < 2 ? "host-a" : "host-b"; };
    co.caps = caps;
    co.min_nodes = min_nodes;
    controller_ = std::make_unique<RunController>(co, &clock_, recorder_.get(), &actions_);
  }

  // Every rank at `step`, in `phase`, last heartbeat now.
  std::vector<RankView> Views(int64_t step, Phase phase = Phase::kForward) const {
    std::vector<RankView> v(4);
    for (int r = 0; r < 4; ++r) {
      v[r].rank = r;
      v[r].node = r / 2;
      v[r].host = r < 2 ? "host-a" : "host-b";
      v[r].pid = 100 + r;
      v[r].proc_state = ProcState::kRunning;
      v[r].progress.valid = true;
      v[r].progress.writer_pid = 100 + r;  // the rank attached its progress writer
      v[r].progress.step = step;
      v[r].progress.phase = phase;
      v[r].progress.heartbeat_ns = clock_.MonotonicNs();
      v[r].progress.step_started_ns = clock_.MonotonicNs();
      v[r].progress.phase_started_ns = clock_.MonotonicNs();
      v[r].progress.checkpoint_step = -1;
    }
    return v;
  }

  // Runs steps 1..n, one second apart.
  void Train(int64_t n) {
    for (int64_t s = 1; s <= n; ++s) {
      clock_.Advance(1.0);
      controller_->OnTick(Views(s));
    }
  }

  void ExitAll(int wstatus, int64_t step) {
    for (int r = 0; r < 4; ++r) {
      if (controller_->exits().count(r) == 0) controller_->OnRankExit(RankExit{r, wstatus, "", {}}, Views(step));
    }
  }

  std::vector<EventRecord> Events() {
    LineageOptions o;
    o.read_only = true;
    auto db = LineageDb::Open(dir_.path() + "/lineage.db", o);
    EXPECT_TRUE(db.ok());
    auto ev = (*db)->Events(recorder_->run_id(), 0);
    EXPECT_TRUE(ev.ok());
    return *ev;
  }
  RunRecord Run() {
    LineageOptions o;
    o.read_only = true;
    auto db = LineageDb::Open(dir_.path() + "/lineage.db", o);
    auto run = (*db)->GetRun(recorder_->run_id());
    EXPECT_TRUE(run.ok());
    return *run;
  }

  TempDir dir_;
  JobConfig job_;
  Allocation alloc_;
  FakeTimeSource clock_;
  RecordingActions actions_;
  std::unique_ptr<RunRecorder> recorder_;
  std::unique_ptr<RunController> controller_;
};

}  // namespace holdfast
