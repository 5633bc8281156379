// The warm-spare protocol (docs/job-contract.md "Warm spares"): how holdfastd
// hands a pre-started process (a spare, started with HOLDFAST_SPARE_FD in its
// environment) the rank it is to become. One definition for both sides: the
// daemon encodes (daemon/spare_pool.h), holdfast-train reads and parses
// (trainer/spare.h).
//
// On the spare's fd (one end of a socketpair) the daemon writes, once:
//
//   holdfast-spare-assignment 1
//   log /abs/path/of/the/rank.log
//   env HOLDFAST_RANK=1
//   env KEY=VALUE            (the rest of the rank's launch-contract environment)
//   end
//
// and closes its end. EOF before the first byte means "released": the run
// ended or the daemon no longer needs the spare; the spare exits 0.
//
// Thread-safety: pure functions; ReadSpareAssignment blocks its caller.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "common/status.h"

namespace holdfast {

inline constexpr const char kSpareAssignmentHeader[] = "holdfast-spare-assignment 1";
// An assignment is a few hundred bytes; anything near this is not one.
inline constexpr size_t kMaxSpareAssignmentBytes = 64 * 1024;

struct SpareAssignment {
  std::string log_path;                    // where the rank's stdout and stderr go from now on (absolute)
  std::map<std::string, std::string> env;  // set in the spare's environment, overriding
};

// The bytes of `a`. InvalidArgument when a value holds a newline or NUL, a key
// is not an environment variable name, or the log path is not absolute (the
// caller starts the rank cold instead).
Result<std::string> EncodeSpareAssignment(const SpareAssignment& a);
// Parses what EncodeSpareAssignment wrote. InvalidArgument, naming the line,
// for anything else: another header (a daemon of another build), an unknown
// line, a missing "end", no log path, a required key (HOLDFAST_RANK,
// HOLDFAST_WORLD_SIZE, HOLDFAST_GENERATION, HOLDFAST_PROGRESS_PATH) missing, or
// a rank that is not in 0 .. world-1.
Result<SpareAssignment> ParseSpareAssignment(std::string_view text);
// Reads one assignment from `fd` up to its "end" line, then parses it.
// NotFound when the fd reached EOF before any byte (released); IoError on a
// read error or EOF in the middle; InvalidArgument as ParseSpareAssignment.
Result<SpareAssignment> ReadSpareAssignment(int fd);

}  // namespace holdfast
