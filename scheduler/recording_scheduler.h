// RecordingScheduler: a Scheduler test double that does nothing to any
// machine and records what it was asked — every Requeue (run id, excluded
// hosts, reason), Drain (host, reason), PublishLeader and WithdrawLeader — so
// a daemon test can assert "the run was requeued without gpu-3" directly.
//
// It behaves like a real scheduler with the capabilities it was given: a
// Requeue with hosts to exclude fails with kFailedPrecondition when
// !capabilities.exclude_hosts, a Drain when !capabilities.drain, a Requeue
// when !capabilities.requeue (the call is recorded either way). A test can
// make the next Requeue / Drain / PublishLeader fail with a chosen Status
// (FailNextRequeue etc.: one call each, then back to succeeding).
// FindLeader returns the address set by set_leader_address, else the last
// published one, else kTimeout at once. ExplainSignal answers what
// set_signal_meaning set for that signal (else nullopt, the daemon's own).
//
// Thread-safety: thread-safe (one mutex), so a test may inspect it from
// another thread while the daemon's loop calls it.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "scheduler/scheduler.h"

namespace holdfast {

struct RequeueCall {
  std::string run_id;
  std::vector<std::string> exclude_hosts;
  std::string reason;
  Status result;  // what the call returned
};

struct DrainCall {
  std::string host;
  std::string reason;
  Status result;
};

class RecordingScheduler : public Scheduler {
 public:
  RecordingScheduler(Allocation allocation, SchedulerCapabilities capabilities);

  const char* name() const override { return "recording"; }
  SchedulerCapabilities capabilities() const override;

  Result<Allocation> Discover() override;
  Status PublishLeader(const std::string& addr) override;
  void WithdrawLeader() override;
  Result<std::string> FindLeader(std::chrono::milliseconds timeout) override;
  Status Requeue(const std::string& run_id, const std::vector<std::string>& exclude_hosts,
                 const std::string& reason) override;
  Status Drain(const std::string& host, const std::string& reason) override;
  std::optional<SignalMeaning> ExplainSignal(int sig) override;

  // ---- set-up ----
  void set_leader_address(const std::string& addr);
  void set_signal_meaning(int sig, SignalMeaning meaning);
  void FailNextDiscover(Status status);
  void FailNextRequeue(Status status);
  void FailNextDrain(Status status);
  void FailNextPublish(Status status);

  // ---- what was asked (copies) ----
  std::vector<RequeueCall> requeues() const;
  std::vector<DrainCall> drains() const;
  std::vector<std::string> published() const;  // every PublishLeader address, in order
  int withdrawals() const;                     // WithdrawLeader calls
  // The address a follower would find now: published and not withdrawn.
  std::optional<std::string> current_leader() const;
  int discover_calls() const;

 private:
  mutable std::mutex mu_;
  const Allocation allocation_;
  const SchedulerCapabilities capabilities_;
  std::string leader_address_;           // guarded by mu_
  std::map<int, SignalMeaning> meanings_;  // guarded by mu_
  std::optional<Status> fail_discover_;  // guarded by mu_
  std::optional<Status> fail_requeue_;   // guarded by mu_
  std::optional<Status> fail_drain_;     // guarded by mu_
  std::optional<Status> fail_publish_;   // guarded by mu_
  std::vector<RequeueCall> requeues_;    // guarded by mu_
  std::vector<DrainCall> drains_;        // guarded by mu_
  std::vector<std::string> published_;   // guarded by mu_
  std::optional<std::string> current_;   // guarded by mu_
  int withdrawals_ = 0;                  // guarded by mu_
  int discover_calls_ = 0;               // guarded by mu_
};

}  // namespace holdfast
