// RecordingActions: the RunActions of the run controller's tests
// (daemon/run_controller_fixture.h): records what the controller asked for,
// answers what the test set. Single-threaded, like the controller.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "daemon/run_controller.h"

namespace holdfast {

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
  int64_t NewestMemorySnapshot() const override { return memory_snapshot; }
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
  int64_t memory_snapshot = -1;  // NewestMemorySnapshot
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

}  // namespace holdfast
