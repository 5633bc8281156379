// DaemonClient: the typed client of one run's holdfastd: its control socket
// (RUN_DIR/holdfastd.sock, daemon/control_protocol.h, docs/control-protocol.md)
// or, from another node, its TCP control port with a MUNGE credential
// (daemon/control_remote.h): CallRunDaemon picks the way (ControlVia).
//
// runctl's live commands and the integration suites (tests/support) talk to a
// daemon only through it: each call encodes one typed request, makes one
// exchange (CallDaemon: its own connection, bounded by the client's timeout)
// and returns a typed Reply that keeps apart the three outcomes a caller acts
// on differently — the daemon's answer, its refusal, and no answer at all.
// Waiting for the daemon to get somewhere is cli/waiter.h's WaitUntil.
//
// Thread-safety: a DaemonClient holds only its paths, its timeout and an
// atomic request counter; every call may be made from any thread at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "common/status.h"
#include "daemon/control_protocol.h"

namespace holdfast {

// One request's outcome: exactly one of
//   ok()       the daemon answered and did it: value() is its typed answer;
//   refused()  it answered ok=false: refusal_code() is the wire code
//              ("PermissionDenied"), status() the daemon's message as a Status;
//   otherwise  the exchange failed: status() is kUnavailable (no daemon
//              listens, or it hung up), kTimeout (no answer within the
//              client's timeout) or kInvalidArgument (a reply that breaks the
//              protocol, or an answer this client cannot read).
template <typename T>
class Reply {
 public:
  static Reply Answer(T value) { return Reply(std::move(value), Status::Ok(), ""); }
  static Reply Refused(std::string code, Status error) {
    return Reply(std::nullopt, std::move(error), std::move(code));
  }
  static Reply Failed(Status error) { return Reply(std::nullopt, std::move(error), ""); }

  bool ok() const { return value_.has_value(); }
  bool refused() const { return !ok() && !refusal_code_.empty(); }
  // No daemon answered in time: nothing listening, it hung up, or it is too
  // slow (stopped, or busy). Never true for a refusal.
  bool unreachable() const {
    return !ok() && !refused() &&
           (status_.code() == StatusCode::kUnavailable || status_.code() == StatusCode::kTimeout);
  }
  const Status& status() const { return status_; }
  const std::string& refusal_code() const { return refusal_code_; }
  const T& value() const { return *value_; }
  const T* operator->() const { return &*value_; }
  const T& operator*() const { return *value_; }

 private:
  Reply(std::optional<T> value, Status status, std::string code)
      : value_(std::move(value)), status_(std::move(status)), refusal_code_(std::move(code)) {}

  std::optional<T> value_;
  Status status_;
  std::string refusal_code_;
};

// The answers, each with the result object as the daemon sent it (runctl
// --json prints it whole, fields this client does not know included).
struct PingAnswer {
  std::string result_json;
};

struct StatusAnswer {
  std::string result_json;
  // Its "run_id": the run the daemon supervises ("" when the object has none).
  std::string run_id;
  // ParseStatusResult(result_json): an error names the field this client
  // could not read (a daemon newer or older than it).
  Result<RunStatus> status = InvalidArgumentError("no status result");
};

struct CheckpointAnswer {
  std::string result_json;
  // The step the ranks save after; unset when the daemon did not say.
  std::optional<int64_t> requested_at_step;
};

struct StopAnswer {
  std::string result_json;
};

class DaemonClient {
 public:
  // The daemon of `run_dir`, reached the way `via` says; `timeout` bounds
  // each exchange. Over TCP the credential comes from munged at MungeSocket().
  explicit DaemonClient(const std::string& run_dir,
                        std::chrono::milliseconds timeout = std::chrono::seconds(5),
                        ControlVia via = ControlVia::kAuto);
  virtual ~DaemonClient() = default;
  DaemonClient(const DaemonClient&) = delete;
  DaemonClient& operator=(const DaemonClient&) = delete;

  const std::string& socket_path() const { return socket_path_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Whether a daemon answers; `timeout` (default: the client's) bounds this one.
  Reply<PingAnswer> Ping(std::optional<std::chrono::milliseconds> timeout = std::nullopt) const;
  // The "status" op (not named Status: that is the error type).
  Reply<StatusAnswer> GetStatus() const;
  // Asks for a checkpoint now. `run_id` names the run the caller means (the
  // daemon refuses another run's); empty: the daemon's own run.
  Reply<CheckpointAnswer> Checkpoint(const std::string& run_id) const;
  // Asks the daemon to stop `run_id` (empty: its run): the ranks checkpoint
  // and stop.
  Reply<StopAnswer> Stop(const std::string& run_id) const;

  // One request of `op` with `args_json` (a JSON object); the answer is the
  // result object as sent. The seam the typed calls go through, and the one a
  // test double (a scripted daemon) overrides.
  virtual Reply<std::string> Call(const std::string& op, const std::string& args_json,
                                  std::chrono::milliseconds timeout) const;

  // Sends `line` (a '\n' is added) as it is — a hostile request included,
  // which the typed calls never send — and returns the reply line without its
  // '\n'. kUnavailable when the socket cannot be reached or closes without a
  // whole line; kTimeout when no line comes within the client's timeout.
  Result<std::string> SendLine(const std::string& line) const;

 private:
  std::string run_dir_;
  std::string socket_path_;
  std::chrono::milliseconds timeout_;
  ControlVia via_;
  std::string munge_socket_;
  mutable std::atomic<uint64_t> next_id_{1};
};

// {"run_id": ID} or {} for an empty id: the args of checkpoint and stop.
std::string RunIdArgs(const std::string& run_id);

}  // namespace holdfast
