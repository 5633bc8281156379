// The reward service's two halves (docs/rl-reward.md):
//
// RewardHandler turns one request line into one response line, a pure
// function of the tasks it was built with:
//   {"id": 7, "task": "add2", "items": [{"prompt_index": 3, "split": "train",
//    "completion": "81\n"}, ...]}
//   -> {"id": 7, "rewards": [1.0, ...]}        one reward per item, in order
//   -> {"id": 7, "error": "items[2]: ..."}     a bad request; nothing scored
// Tasks are matched by their canonical spelling (TaskSpec::ToString), so
// "add2:max=99" asks for the same task as "add2"; a task the service was not
// started with is an error that says which ones it serves.
//
// RewardServer serves RewardHandler over TCP, newline-delimited JSON, on its
// own event-loop thread: any number of connections, requests on one
// connection answered in order. A bad request gets an error line and the
// connection stays usable; only a line longer than max_line_bytes closes it
// (after an error line), since the stream cannot be resynchronised cheaply.
// With a ProgressWriter it records step = requests answered (BeginStep /
// EndStep around each) and refreshes the heartbeat every heartbeat_s while
// idle, so that a supervisor can tell a hung service from an idle one.
//
// Thread-safety: RewardHandler is immutable and safe from any thread.
// RewardServer's public methods may be called from any thread; its
// ProgressWriter is written only by its loop thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "trainer/progress_sink.h"
#include "common/status.h"
#include "common/tcp_store.h"
#include "trainer/rl/task.h"

namespace holdfast::rl {

class RewardHandler {
 public:
  // Builds a Task per spec (duplicates, by canonical spelling, are an error).
  static Result<std::unique_ptr<RewardHandler>> Create(const std::vector<TaskSpec>& specs);

  struct Answer {
    std::string line;  // the response, without '\n'
    bool ok = false;   // rewards (true) or an error (false)
    size_t items = 0;  // items scored
    double reward_sum = 0;
  };
  Answer Handle(std::string_view line) const;

  // "add2, add3:max=9": the tasks served, for messages.
  std::string TaskList() const;

 private:
  RewardHandler() = default;
  std::vector<std::unique_ptr<Task>> tasks_;
};

// Parses --listen: "HOST:PORT", "[V6ADDR]:PORT" or ":PORT" (default_host);
// port 0 asks for any free port.
Result<HostPort> ParseListenAddress(const std::string& text, const std::string& default_host);

struct RewardServerOptions {
  std::string host = "127.0.0.1";  // bind address (a name is resolved; the first address is used)
  uint16_t port = 0;               // 0 = any free port
  std::vector<TaskSpec> tasks;
  size_t max_line_bytes = size_t{64} << 20;  // a request line, newline included
  uint64_t log_every = 1000;                 // one log line per this many requests (0 = never)
  double heartbeat_s = 1.0;                  // progress heartbeat period while idle
};

struct RewardServerStats {
  uint64_t requests = 0;  // answered with rewards
  uint64_t errors = 0;    // answered with an error
  uint64_t items = 0;
  uint64_t connections_accepted = 0;
};

class RewardServer {
 public:
  // Binds, listens and starts the loop thread. `progress` (not owned) must
  // outlive the server; it hears a step per request answered and a heartbeat
  // (phase kData) every options.heartbeat_s while idle.
  static Result<std::unique_ptr<RewardServer>> Start(const RewardServerOptions& options,
                                                     ProgressSink& progress = NoProgress());
  ~RewardServer();  // Stop()
  RewardServer(const RewardServer&) = delete;
  RewardServer& operator=(const RewardServer&) = delete;

  // The bound address: options.host and the real port.
  HostPort address() const;
  RewardServerStats stats() const;
  // Closes the listener and every connection and joins the loop thread. Idempotent.
  void Stop();

  class Impl;

 private:
  explicit RewardServer(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace holdfast::rl
