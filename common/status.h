// Status and Result<T>: how every expected failure travels in Holdfast.
//
// A Status is either OK or a code plus a message written for the person who has
// to act on it ("config.toml:12: key 'optim.lr' must be > 0, got -1"). Result<T>
// holds a T or a non-OK Status. Both are plain values: copyable, movable, no
// exceptions, safe to pass between threads (they own all their data).
//
// Broken invariants are not Statuses: HF_CHECK aborts with file and line, because
// the supervisor exists so that a dead process is cheap.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace holdfast {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // bad input from a user: config, flag, message, file contents
  kNotFound,            // a file, key or run that does not exist
  kIoError,             // the OS said no (errno)
  kCorruption,          // data that fails verification
  kTimeout,             // a peer or a wait ran out of time
  kUnavailable,         // a peer is gone or not reachable
  kFailedPrecondition,  // the system is not in a state where this can be done
  kResourceExhausted,   // out of space, memory, budget
  kInternal,            // a dependency (LibTorch, Gloo, NCCL) failed in a way we did not expect
  kCancelled,           // stopped on request (a signal) before it finished; nothing was changed
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: config.toml:3: ..." ; "OK" when ok.
  std::string ToString() const;

  // Returns a copy whose message is "context: message" (no-op when ok).
  Status WithContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgumentError(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFoundError(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status CorruptionError(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
inline Status TimeoutError(std::string m) { return {StatusCode::kTimeout, std::move(m)}; }
inline Status UnavailableError(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status FailedPreconditionError(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status ResourceExhaustedError(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status InternalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status CancelledError(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }

// The one place errno becomes a Status: "open /x/y: No such file or directory".
// ENOENT maps to kNotFound, ENOSPC/EDQUOT to kResourceExhausted, the rest to kIoError.
Status ErrnoError(const std::string& context, int err);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).ok()) {
      std::fprintf(stderr, "Result constructed from an OK Status\n");
      std::abort();
    }
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &std::get<T>(v_); }
  const T* operator->() const { return &std::get<T>(v_); }
  T& operator*() & { return std::get<T>(v_); }
  const T& operator*() const& { return std::get<T>(v_); }

 private:
  std::variant<T, Status> v_;
};

[[noreturn]] void CheckFailed(const char* file, int line, const char* expr, const std::string& msg);

}  // namespace holdfast

#define HF_CONCAT_INNER(a, b) a##b
#define HF_CONCAT(a, b) HF_CONCAT_INNER(a, b)

#define HF_RETURN_IF_ERROR(expr)                 \
  do {                                           \
    ::holdfast::Status hf_status_ = (expr);      \
    if (!hf_status_.ok()) return hf_status_;     \
  } while (0)

#define HF_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

#define HF_ASSIGN_OR_RETURN(lhs, expr) \
  HF_ASSIGN_OR_RETURN_IMPL(HF_CONCAT(hf_result_, __LINE__), lhs, expr)

// Aborts with file and line when an invariant is broken.
#define HF_CHECK(cond)                                                        \
  do {                                                                        \
    if (!(cond)) ::holdfast::CheckFailed(__FILE__, __LINE__, #cond, "");      \
  } while (0)
#define HF_CHECK_MSG(cond, msg)                                               \
  do {                                                                        \
    if (!(cond)) ::holdfast::CheckFailed(__FILE__, __LINE__, #cond, (msg));   \
  } while (0)
