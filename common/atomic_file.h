// WriteFileAtomically: a reader of `path` sees the old file or the whole new
// one, never a part. The text goes to a temporary file beside it (same
// filesystem; named PATH.tmp.PID, so a reader globbing *.prom or the exact name
// never picks it up), which is renamed over `path`; on failure the temporary
// file is removed and the error names the step (create, write, close, rename).
// Used for the leader stamps, the saved Slurm submission, the metrics
// textfile and the host history's files (common/host_history.h). `durable`:
// the file is fsynced before the rename and its directory after, so that a
// power cut leaves the old file or the whole new one, never an empty one.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/status.h"

namespace holdfast {

Status WriteFileAtomically(const std::string& path, const std::string& text, mode_t mode = 0644,
                           bool durable = false);

}  // namespace holdfast
