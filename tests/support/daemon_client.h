// DaemonClient: what the integration suites that drive a real holdfastd ask
// of it and of the run it leaves behind. Status comes over the control socket
// (RUN_DIR/holdfastd.sock, one request per call, the way `runctl status` asks);
// lineage is read from RUN_DIR/lineage.db opened read-only, so a test never
// writes to the database the daemon owns. Waiting polls the daemon until a
// predicate holds or the daemon exits: no timing assertion, the ctest timeout
// bounds a run that never gets there.
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

// Polls DaemonStatus every 20 ms until `ready` holds and returns that status;
// nullopt when `daemon` exits first.
std::optional<RunStatus> WaitForStatus(ChildProcess& daemon, const std::string& run_dir,
                                       const std::function<bool(const RunStatus&)>& ready);

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
