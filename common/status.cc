#include "common/status.h"

#include <cerrno>
#include <cstring>

namespace holdfast {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kIoError: return "IoError";
    case StatusCode::kCorruption: return "Corruption";
    case StatusCode::kTimeout: return "Timeout";
    case StatusCode::kUnavailable: return "Unavailable";
    case StatusCode::kFailedPrecondition: return "FailedPrecondition";
    case StatusCode::kResourceExhausted: return "ResourceExhausted";
    case StatusCode::kInternal: return "Internal";
    case StatusCode::kCancelled: return "Cancelled";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

Status ErrnoError(const std::string& context, int err) {
  std::string msg = context + ": " + std::strerror(err);
  switch (err) {
    case ENOENT: return NotFoundError(std::move(msg));
    case ENOSPC:
    case EDQUOT: return ResourceExhaustedError(std::move(msg));
    case ETIMEDOUT: return TimeoutError(std::move(msg));
    case ECONNREFUSED:
    case ECONNRESET:
    case EPIPE: return UnavailableError(std::move(msg));
    default: return IoError(std::move(msg));
  }
}

void CheckFailed(const char* file, int line, const char* expr, const std::string& msg) {
  std::fprintf(stderr, "%s:%d: check failed: %s%s%s\n", file, line, expr, msg.empty() ? "" : ": ",
               msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace holdfast
