// WriteFileAtomically: a reader of `path` sees the old file or the whole new
// one, never a part. The text goes to a temporary file beside it (same
// filesystem; named PATH.tmp.PID, so a reader globbing *.prom or the exact name
// never picks it up), which is renamed over `path`; on failure the temporary
// file is removed and the error names the step (create, write, close, rename).
// Used for the leader stamps, the saved Slurm submission and the metrics
// textfile.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/status.h"

namespace holdfast {

Status WriteFileAtomically(const std::string& path, const std::string& text, mode_t mode = 0644);

}  // namespace holdfast
