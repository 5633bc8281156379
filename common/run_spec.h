// What a RUN argument means — `runctl status RUN`, `holdfastd --resume RUN`,
// a control request's args.run_id: "latest" (or nothing) for the newest run,
// else a run id or a prefix of one. The one place that says so; LineageDb::
// FindRun resolves a spec against a database, RunSpecNames checks one
// against a known id (a daemon that supervises one run).
//
// Thread-safety: pure functions.
#pragma once

#include <string>

namespace holdfast {

inline constexpr char kLatestRun[] = "latest";

// "" or "latest".
inline bool IsLatestRunSpec(const std::string& spec) { return spec.empty() || spec == kLatestRun; }

// Whether `spec` names `run_id`: the newest run (which a daemon's own run is,
// to its requests), the id itself, or a prefix of it.
inline bool RunSpecNames(const std::string& spec, const std::string& run_id) {
  return IsLatestRunSpec(spec) || run_id.compare(0, spec.size(), spec) == 0;
}

}  // namespace holdfast
