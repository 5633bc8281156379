// RewardClient: a rollout worker's synchronous connection to the reward
// service (holdfast-reward, docs/rl-reward.md).
//
// The service may die and come back on another host or port at any moment
// (holdfastd restarts it alone), so the client never holds on to an address:
// it reads HOST:PORT from the address file the service writes atomically, and
// on a failed connect, a closed connection, a reset or an attempt that gets
// no answer within attempt_timeout_s, it closes the connection, re-reads the
// file, reconnects with exponential backoff and sends the same request again
// (scoring is a pure function of the request, so a resend is harmless and a
// duplicate answer impossible: each attempt uses a fresh connection and the
// answer must carry the request's id). Score either returns one reward per
// item, in order, or an error — never part of the rewards:
//   - the service answered with an error (a bad item, a task it does not
//     serve): kInvalidArgument with its text, at once (a resend would get the
//     same answer);
//   - no answer within deadline_s: kUnavailable naming the address file, the
//     last address tried and the last error.
//
// Thread-safety: none. One client per thread; it owns one socket.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/rl/task.h"

namespace holdfast::rl {

struct RewardItem {
  uint64_t prompt_index = 0;
  Split split = Split::kTrain;
  std::string completion;
};

// What an attempt did: for logs and for tests that must act at an exact
// point (kill the service once a request is in flight).
struct RewardClientEvent {
  enum Kind { kSent, kFailed } kind = kSent;
  int attempt = 0;      // 1-based within one Score call
  std::string address;  // HOST:PORT ("" when the address file could not be read)
  std::string error;    // kFailed: what went wrong
};

struct RewardClientOptions {
  double deadline_s = 120;          // one Score call, all attempts together
  double attempt_timeout_s = 30;    // connect + send + answer of one attempt
  double initial_backoff_s = 0.02;  // pause after a failed attempt, doubling...
  double max_backoff_s = 1.0;       // ...up to this
  size_t max_response_bytes = size_t{64} << 20;
  // Called on the calling thread after each attempt's request is written and
  // after each failed attempt. May be empty.
  std::function<void(const RewardClientEvent&)> observer;
};

class RewardClient {
 public:
  // `addr_file` is read at each (re)connect, not now: the service may start later.
  explicit RewardClient(std::string addr_file, RewardClientOptions options = {});
  ~RewardClient();
  RewardClient(const RewardClient&) = delete;
  RewardClient& operator=(const RewardClient&) = delete;

  // Scores `items` for `task` (a spec string, e.g. "add2"). An empty list
  // returns an empty vector without contacting the service.
  Result<std::vector<double>> Score(const std::string& task, const std::vector<RewardItem>& items);

  // Connections opened so far (a reconnect after a failure counts): for logs.
  uint64_t connects() const { return connects_; }

 private:
  Status Connect(const std::string& address, int64_t deadline_ns);
  void Disconnect();

  const std::string addr_file_;
  const RewardClientOptions options_;
  int fd_ = -1;               // connected socket, -1 = none
  std::string connected_to_;  // its HOST:PORT
  uint64_t next_id_ = 1;
  uint64_t connects_ = 0;
};

}  // namespace holdfast::rl
