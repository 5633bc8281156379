// host.history: the Prolog's look at this host's record across runs — the
// cross-run host history holdfastd publishes (common/host_history.h) — so
// that a host credited with incidents in several runs within a window is
// warned about or refused before the next job starts on it.
//
// [health] history_action (or holdfast-health --history-action) chooses:
//   off     the check does not run (the default)
//   warn    a flagged host gives a warning (the Prolog's table, its log);
//           the node stays in service
//   refuse  a flagged host fails, asking for a drain: the Prolog exits 1 and
//           the drain reason names the runs
// A history that cannot be read (a missing mount, permissions) is skipped,
// never failed: a broken history must not drain every node. Files that do
// not parse are skipped and counted in the message.
//
// Thread-safety: reads files; reentrant.
#pragma once

#include <cstdint>
#include <string>

#include "health/check.h"
#include "health/config.h"

namespace holdfast::health {

// The check for `host` at `now_ms` (unix ms), from c.history_dir with
// c.history_runs / c.history_window_days. The name is "host.history".
CheckResult CheckHostHistory(const HealthConfig& c, const std::string& host, int64_t now_ms);

}  // namespace holdfast::health
