// PrepareRunDir: makes sure holdfastd can use its run directory before
// anything is recorded in it. The run dir holds everything the daemon keeps
// (lineage.db, logs, the run lock, the control socket runctl talks to), so a
// run dir the daemon could not use would otherwise fail halfway through a
// start, with an attempt already recorded as running. main() calls this first
// and exits 2 with the message when it fails.
//
// Checks, in order, each with a cause that stops root too:
//   - the directory exists or can be created, and is a directory (not a
//     regular file; no parent that is a file; no component over the
//     filesystem's name limit);
//   - a file can really be created, written and removed in it (a read-only
//     mount, a full disk; permission bits alone do not stop root);
//   - a Unix socket can be bound in it, the way the control socket will be
//     (daemon/unix_socket_address.h: through the directory when the path is
//     longer than sun_path; some FUSE and vfat mounts cannot hold sockets);
//   - its lineage.db path fits SQLite's limit (lineage/lineage_path.h).
// The probes are files of its own (".hfprob.XXXXXX", ".hfsock.XXXXXX", the
// length of "holdfastd.sock") that it removes again: it never touches a live
// daemon's socket or lock, so it may run before the run lock is taken.
//
// Thread-safety: a free function of its argument; safe from any thread.
#pragma once

#include <string>

#include "common/status.h"

namespace holdfast {

// OK, or kInvalidArgument whose message names the run dir, the reason and
// what to do ("run dir /x/y cannot be used: ... : choose ...").
Status PrepareRunDir(const std::string& run_dir);

// RUN_DIR/job-RUN.toml: the owner-only (0600) copy of a run's whole job file, [job.env] secrets
// included, which lineage keeps redacted (common/secrets.h); `holdfastd --resume` reads it when
// the original job file is gone.
std::string JobCopyPath(const std::string& run_dir, const std::string& run_id);

}  // namespace holdfast
