#include "scheduler/recording_scheduler.h"

#include <utility>

namespace holdfast {
namespace {

// Takes the armed failure, if any (one call each).
std::optional<Status> Take(std::optional<Status>* armed) {
  std::optional<Status> s = std::move(*armed);
  armed->reset();
  return s;
}

}  // namespace

RecordingScheduler::RecordingScheduler(Allocation allocation, SchedulerCapabilities capabilities)
    : allocation_(std::move(allocation)), capabilities_(capabilities) {}

SchedulerCapabilities RecordingScheduler::capabilities() const { return capabilities_; }

Result<Allocation> RecordingScheduler::Discover() {
  std::lock_guard<std::mutex> lock(mu_);
  ++discover_calls_;
  std::optional<Status> fail = Take(&fail_discover_);
  if (fail && !fail->ok()) return *fail;
  return allocation_;
}

Status RecordingScheduler::PublishLeader(const std::string& addr) {
  std::lock_guard<std::mutex> lock(mu_);
  published_.push_back(addr);
  std::optional<Status> fail = Take(&fail_publish_);
  if (fail && !fail->ok()) return *fail;
  current_ = addr;
  return Status::Ok();
}

void RecordingScheduler::WithdrawLeader() {
  std::lock_guard<std::mutex> lock(mu_);
  ++withdrawals_;
  current_.reset();
}

Result<std::string> RecordingScheduler::FindLeader(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!leader_address_.empty()) return leader_address_;
  if (current_) return *current_;
  return TimeoutError("RecordingScheduler: no leader address configured or published (waited " +
                      std::to_string(timeout.count()) + " ms: not really)");
}

Status RecordingScheduler::Requeue(const std::string& run_id, const std::vector<std::string>& exclude_hosts,
                                   const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  Status result;
  std::optional<Status> fail = Take(&fail_requeue_);
  if (fail) {
    result = *fail;
  } else if (!capabilities_.requeue) {
    result = FailedPreconditionError("recording scheduler: requeue is not among its capabilities");
  } else if (!exclude_hosts.empty() && !capabilities_.exclude_hosts) {
    result = FailedPreconditionError("recording scheduler: cannot exclude hosts (capabilities.exclude_hosts false)");
  }
  requeues_.push_back(RequeueCall{run_id, exclude_hosts, reason, result});
  return result;
}

Status RecordingScheduler::Drain(const std::string& host, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  Status result;
  std::optional<Status> fail = Take(&fail_drain_);
  if (fail) {
    result = *fail;
  } else if (!capabilities_.drain) {
    result = FailedPreconditionError("recording scheduler: cannot drain hosts (capabilities.drain false)");
  }
  drains_.push_back(DrainCall{host, reason, result});
  return result;
}

void RecordingScheduler::set_leader_address(const std::string& addr) {
  std::lock_guard<std::mutex> lock(mu_);
  leader_address_ = addr;
}

void RecordingScheduler::set_signal_meaning(int sig, SignalMeaning meaning) {
  std::lock_guard<std::mutex> lock(mu_);
  meanings_[sig] = std::move(meaning);
}

std::optional<SignalMeaning> RecordingScheduler::ExplainSignal(int sig) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = meanings_.find(sig);
  if (it == meanings_.end()) return std::nullopt;
  return it->second;
}

void RecordingScheduler::FailNextDiscover(Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_discover_ = std::move(status);
}

void RecordingScheduler::FailNextRequeue(Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_requeue_ = std::move(status);
}

void RecordingScheduler::FailNextDrain(Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_drain_ = std::move(status);
}

void RecordingScheduler::FailNextPublish(Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_publish_ = std::move(status);
}

std::vector<RequeueCall> RecordingScheduler::requeues() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requeues_;
}

std::vector<DrainCall> RecordingScheduler::drains() const {
  std::lock_guard<std::mutex> lock(mu_);
  return drains_;
}

std::vector<std::string> RecordingScheduler::published() const {
  std::lock_guard<std::mutex> lock(mu_);
  return published_;
}

int RecordingScheduler::withdrawals() const {
  std::lock_guard<std::mutex> lock(mu_);
  return withdrawals_;
}

std::optional<std::string> RecordingScheduler::current_leader() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

int RecordingScheduler::discover_calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return discover_calls_;
}

}  // namespace holdfast
