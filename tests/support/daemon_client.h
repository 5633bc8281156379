// The integration suites' helpers for a real holdfastd and the run it leaves
// behind: thin wrappers over runctl's own client, so a suite asks the daemon
// exactly the way `runctl` does. Status comes over the control socket
// (cli/daemon_client.h DaemonClient: RUN_DIR/holdfastd.sock, one request per
// call); lineage is read from RUN_DIR/lineage.db opened read-only, so a test
// never writes to the database the daemon owns. Waiting is cli/waiter.h's
// WaitUntil on the real clock, looking every 20 ms until a predicate holds or
// the daemon exits: no timing assertion, the ctest timeout (or a wait's own
// deadline, a backstop) bounds a run that never gets there.
//
// Thread-safety: no shared state; every function may be called from any
// thread at once (each call opens its own socket or database handle).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/control_protocol.h"
#include "lineage/lineage_db.h"
#include "tests/support/subprocess.h"

namespace holdfast::testing {

// The daemon's live status for the run in `run_dir`; nullopt while it does not
// answer (not started yet, gone, or an answer that does not parse).
std::optional<RunStatus> DaemonStatus(const std::string& run_dir);

// Sends `line` (a '\n' is added) to the daemon's control socket as it is —
// hostile requests included — and returns the reply line; nullopt when the
// socket cannot be reached or closes without a reply.
std::optional<std::string> SendRawControlLine(const std::string& run_dir, const std::string& line);

// Polls DaemonStatus every 20 ms until `ready` holds and returns that status;
// nullopt when `daemon` exits first.
std::optional<RunStatus> WaitForStatus(ChildProcess& daemon, const std::string& run_dir,
                                       const std::function<bool(const RunStatus&)>& ready);

// The same with a deadline, for suites whose waits must each say what they
// waited for: nullopt (and a failed EXPECT naming `what`, the seconds waited
// and the daemon's exit or last status) when `daemon` exits first or
// `deadline_s` passes. The deadline is a backstop far beyond the expected
// time, so that a wait that can never end fails with its reason instead of at
// the ctest timeout — not a timing assertion.
std::optional<RunStatus> WaitForStatus(ChildProcess& daemon, const std::string& run_dir, const std::string& what,
                                       double deadline_s, const std::function<bool(const RunStatus&)>& ready);

// Polls `check` every 20 ms until it returns true; false (and a failed EXPECT
// naming `what`) when `daemon` exits first or `deadline_s` passes.
bool WaitUntil(ChildProcess& daemon, const std::string& what, double deadline_s, const std::function<bool()>& check);

// RUN_DIR/lineage.db opened read-only; nullptr (and a failed EXPECT naming the
// error) when it cannot be opened.
std::unique_ptr<LineageDb> OpenLineageReadOnly(const std::string& run_dir);

// The events of the newest run in RUN_DIR/lineage.db, oldest first; empty when
// there is no run or they cannot be read (a failed open also fails an EXPECT).
std::vector<EventRecord> LatestRunEvents(const std::string& run_dir);

// How many generations the newest run recorded; 0 when there is no run or they
// cannot be read (a failed open also fails an EXPECT).
size_t LatestRunGenerations(const std::string& run_dir);

}  // namespace holdfast::testing
