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
// connection answered in order. With a TextScorer (a learned reward model,
// trainer/reward_model.h) the rewards are the scorer's instead of the task's
// rule: requests are validated on the loop thread, and every request waiting
// when the scorer is free goes into its next batch (up to max_batch texts),
// scored on the server's scoring thread while new requests queue for the
// batch after it. A bad request gets an error line and the
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
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "trainer/progress_sink.h"
#include "common/status.h"
#include "common/tcp_store.h"
#include "trainer/rl/task.h"

namespace holdfast::rl {

// A learned reward: scores texts (a prompt followed by a completion up to and
// with its first newline) in batches. Called on one thread at a time.
class TextScorer {
 public:
  virtual ~TextScorer() = default;
  // One reward per text, in order. A text's reward must not depend on the
  // others in the call (the server batches whatever requests are waiting).
  virtual Result<std::vector<double>> Score(const std::vector<std::string>& texts) = 0;
  // Texts the scorer takes in one call at its best; the server's batches are
  // at most this many (a larger request is one batch of its own).
  virtual size_t max_batch() const = 0;
  // For logs: "reward model runs/rm/final (2 layers, 64 wide)".
  virtual std::string Describe() const = 0;
};

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

  // For a TextScorer: the request's id (as JSON text) and each item's text
  // (its prompt, then its completion up to and with the first '\n'), or the
  // error response to send (nothing is scored then).
  struct TextRequest {
    std::string id;
    std::vector<std::string> texts;
  };
  Result<TextRequest> ParseTexts(std::string_view line, Answer* error) const;
  // The response lines of a request with id `id` (JSON text).
  static std::string RewardsLine(const std::string& id, const std::vector<double>& rewards);
  static std::string ErrorLine(const std::string& id, const std::string& why);

  // "add2, add3:max=9": the tasks served, for messages.
  std::string TaskList() const;

 private:
  RewardHandler() = default;
  // Validates a request and calls item(task, prompt, completion) for each of
  // its items, in order; an error (the response line in *error) stops it.
  using ItemFn = std::function<void(const Task&, const TaskPrompt&, const std::string&)>;
  bool Visit(std::string_view line, const ItemFn& item, std::string* id, Answer* error) const;
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
  // A learned reward instead of the tasks' rules (null = the rules). The
  // tasks still define the prompts and validate requests.
  std::shared_ptr<TextScorer> scorer;
};

struct RewardServerStats {
  uint64_t requests = 0;  // answered with rewards
  uint64_t errors = 0;    // answered with an error
  uint64_t items = 0;
  uint64_t connections_accepted = 0;
  uint64_t batches = 0;  // scorer calls (with a TextScorer)
  uint64_t waiting = 0;  // requests queued for the scorer's next batch, now
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
