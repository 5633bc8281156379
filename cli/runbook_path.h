// Where runctl finds the runbooks it names. Lineage records a runbook by its
// place in the Holdfast tree ("runbooks/hang.md", lineage/event_kind.h), the
// same on every machine that reads the run; runctl prints the file a person can
// open on this one: the installed copy (<prefix>/share/holdfast/runbooks/, found
// from runctl's own location, <prefix>/bin/runctl, through the folder offset
// cmake/HoldfastInstall.cmake compiles in), else, for a runctl in a build tree,
// the runbooks/ of the source tree it was built from.
//
// Thread-safety: RunbookDir* read /proc/self/exe and the file system; all are safe
// from any thread.
#pragma once

#include <string>

namespace holdfast {

// The runbooks folder for a program at `exe` (an absolute path): the installed
// one beside it, else the source tree's; "" when neither exists.
std::string RunbookDirFor(const std::string& exe);
// RunbookDirFor the running program (/proc/self/exe).
std::string RunbookDir();
// The file of a recorded runbook ("runbooks/hang.md") in `dir` (RunbookDir()):
// "DIR/hang.md"; `recorded` as it is when `dir` is "" or `recorded` is not under
// runbooks/. Pure.
std::string RunbookFile(const std::string& dir, const std::string& recorded);

}  // namespace holdfast
