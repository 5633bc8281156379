// How long a path SQLite can open a lineage database at. SQLite's Unix VFS
// keeps every file name it works with (the database and its "-journal",
// "-wal" and "-shm" files, made absolute, symlinks resolved) in a buffer of
// the VFS's mxPathname bytes (512 in Debian's libsqlite3): a database whose
// absolute path is longer cannot be opened ("unable to open database file").
// holdfastd checks its run directory against this before it records anything
// (daemon/run_dir.h), so a run dir that is too long is refused with the limit
// instead of failing later.
//
// Thread-safety: pure functions; call from any thread.
#pragma once

#include <cstddef>

namespace holdfast {

// The longest absolute path, in bytes, a lineage database may have: the
// default VFS's mxPathname less room for the longest suffix SQLite appends
// ("-journal"); 504 bytes with Debian's SQLite.
size_t MaxLineageDbPathBytes();

}  // namespace holdfast
