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
#include "daemon/run_controller.h"
#include "tests/support/subprocess.h"

namespace holdfast {

using testing::TempDir;

// Records what the controller asked for; launches always succeed unless told.
class RecordingActions : public RunActions {
 public:
  Status LaunchGeneration(int generation, int64_t resume_step) override {
    launches.push_back({generation, resume_step});
    return launch_error;
  }
  void TerminateRanks(const std::string& why, double grace_s) override {
    terminated.push_back(why);
    graces.push_back(grace_s);
  }
  void KillRanks(const std::vector<int>& ranks) override { kills.push_back(ranks); }
  void ArmTimer(ControllerTimer t, double seconds) override { armed[t] = seconds; }
  void CancelTimer(ControllerTimer t) override { armed.erase(t); }
  Status Drain(const std::string& host, const std::string&) override {
    drained.push_back(host);
    return Status::Ok();
  }
  Status Requeue(const std::vector<std::string>& exclude, const std::string&) override {
    requeued.push_back(exclude);
    return Status::Ok();
  }
  void Finish(int code) override { finished = code; }
  int BlameRolesForStall(double stalled_s, double, const std::string& doing) override {
    stalls.push_back({stalled_s, doing});
    return roles_to_blame;
  }
  std::vector<std::string> ActiveHosts() const override { return active; }
  std::vector<std::string> SpareHosts() const override { return {}; }
  Result<int> Reshape(const std::vector<std::string>& leaving, const std::vector<std::string>& joining) override {
    reshapes.push_back(leaving);
    for (const std::string& h : leaving) active.erase(std::remove(active.begin(), active.end(), h), active.end());
    active.insert(active.end(), joining.begin(), joining.end());
    return static_cast<int>(active.size()) * 2;
  }
  std::vector<std::string> active = {"host-a", "host-b"};
  std::vector<std::vector<std::string>> reshapes;

  std::vector<std::pair<int, int64_t>> launches;
  Status launch_error = Status::Ok();
  std::vector<std::string> terminated;
  std::vector<double> graces;  // what each node's own kill timer gets
  std::vector<std::vector<int>> kills;
  std::map<ControllerTimer, double> armed;
  std::vector<std::string> drained;
  std::vector<std::vector<std::string>> requeued;
  int finished = -1;
  int roles_to_blame = 0;  // what BlameRolesForStall answers
  std::vector<std::pair<double, std::string>> stalls;
};

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
