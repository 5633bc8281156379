#include "common/spare_assignment.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <initializer_list>

#include "common/launch_contract.h"

namespace holdfast {
namespace {

bool IsEnvName(std::string_view k) {
  if (k.empty() || (k[0] >= '0' && k[0] <= '9')) return false;
  for (char c : k) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

bool HasNewlineOrNul(std::string_view v) { return v.find('\n') != v.npos || v.find('\0') != v.npos; }

// A decimal integer in [lo, hi], or nothing.
bool ParseInt(const std::string& s, long lo, long hi, long* out) {
  if (s.empty() || s.size() > 12) return false;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size() || v < lo || v > hi) return false;
  *out = v;
  return true;
}

Status Malformed(int line, std::string_view text, const std::string& why) {
  std::string shown(text.substr(0, 80));
  return InvalidArgumentError("malformed spare assignment (line " + std::to_string(line) + ": '" + shown + "'): " +
                              why + " — holdfastd and the job must be of the same build (docs/job-contract.md)");
}

}  // namespace

Result<std::string> EncodeSpareAssignment(const SpareAssignment& a) {
  if (a.log_path.empty() || a.log_path[0] != '/' || HasNewlineOrNul(a.log_path)) {
    return InvalidArgumentError("spare assignment: the rank log path '" + a.log_path +
                                "' must be absolute and on one line");
  }
  std::string out = std::string(kSpareAssignmentHeader) + "\nlog " + a.log_path + "\n";
  for (const auto& [k, v] : a.env) {
    if (!IsEnvName(k)) return InvalidArgumentError("spare assignment: '" + k + "' is not an environment variable name");
    if (HasNewlineOrNul(v)) return InvalidArgumentError("spare assignment: the value of " + k + " holds a newline");
    out += "env " + k + "=" + v + "\n";
  }
  out += "end\n";
  if (out.size() > kMaxSpareAssignmentBytes) return InvalidArgumentError("spare assignment: over 64 KiB");
  return out;
}

Result<SpareAssignment> ParseSpareAssignment(std::string_view text) {
  if (text.size() > kMaxSpareAssignmentBytes) return Malformed(0, "", "over 64 KiB");
  SpareAssignment a;
  int n = 0;
  bool ended = false;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    if (nl == text.npos) return Malformed(n + 1, text.substr(pos), "the last line has no newline");
    const std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++n;
    if (ended) return Malformed(n, line, "text after 'end'");
    if (n == 1) {
      if (line != kSpareAssignmentHeader) return Malformed(n, line, std::string("expected '") + kSpareAssignmentHeader + "'");
    } else if (line == "end") {
      ended = true;
    } else if (line.substr(0, 4) == "log ") {
      if (!a.log_path.empty()) return Malformed(n, line, "a second 'log' line");
      a.log_path = std::string(line.substr(4));
      if (a.log_path.empty() || a.log_path[0] != '/') return Malformed(n, line, "the log path must be absolute");
    } else if (line.substr(0, 4) == "env ") {
      const std::string_view kv = line.substr(4);
      const size_t eq = kv.find('=');
      if (eq == kv.npos || !IsEnvName(kv.substr(0, eq))) return Malformed(n, line, "expected 'env KEY=VALUE'");
      if (!a.env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1))).second) {
        return Malformed(n, line, "the key is given twice");
      }
    } else {
      return Malformed(n, line, "expected 'log PATH', 'env KEY=VALUE' or 'end'");
    }
  }
  if (n == 0) return Malformed(0, "", "empty");
  if (!ended) return Malformed(n, "", "no 'end' line");
  if (a.log_path.empty()) return Malformed(n, "end", "no 'log PATH' line");
  for (const char* key : {kEnvRank, kEnvWorldSize, kEnvGeneration, kEnvProgressPath}) {
    if (a.env.count(key) == 0) return Malformed(n, "end", std::string("no ") + key);
  }
  long world = 0, rank = 0, gen = 0;
  if (!ParseInt(a.env[kEnvWorldSize], 1, 1 << 24, &world)) {
    return Malformed(n, "end", std::string(kEnvWorldSize) + " '" + a.env[kEnvWorldSize] + "' is not a count >= 1");
  }
  if (!ParseInt(a.env[kEnvRank], 0, world - 1, &rank)) {
    return Malformed(n, "end", std::string(kEnvRank) + " '" + a.env[kEnvRank] + "' is not in 0.." + std::to_string(world - 1));
  }
  if (!ParseInt(a.env[kEnvGeneration], 0, 1L << 30, &gen)) {
    return Malformed(n, "end", std::string(kEnvGeneration) + " '" + a.env[kEnvGeneration] + "' is not a generation");
  }
  return a;
}

Result<SpareAssignment> ReadSpareAssignment(int fd) {
  std::string text;
  char buf[4096];
  for (;;) {
    if (text.size() >= 4 && text.compare(text.size() - 4, 4, "end\n") == 0 &&
        (text.size() == 4 || text[text.size() - 5] == '\n')) {
      break;
    }
    if (text.size() > kMaxSpareAssignmentBytes) return ParseSpareAssignment(text);
    const ssize_t got = ::read(fd, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return ErrnoError("read the spare assignment", errno);
    if (got == 0) {
      if (text.empty()) return NotFoundError("released: the daemon closed the spare's fd before assigning a rank");
      return IoError("the spare assignment ended after " + std::to_string(text.size()) + " bytes, before its 'end'");
    }
    text.append(buf, static_cast<size_t>(got));
  }
  return ParseSpareAssignment(text);
}

}  // namespace holdfast
