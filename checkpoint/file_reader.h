// Overlapped reading: a file range read by a reader thread while the calling
// thread consumes (checksums) what has already arrived, so that verifying a
// checkpoint costs little more than reading it.
//
// ReadOverlapped splits the range into chunks. Reader threads, each with its
// own handle of the file, claim the chunks in order and read each into its
// place (the caller's memory, or a small ring of scratch buffers when the
// bytes are not kept), at most `lead` chunks ahead of the consumer; the
// calling thread hands each chunk, in file order, to `consume` (an XXH3
// update, say) as soon as it is complete. The copy out of the page cache (and
// the first touch of the destination's pages) then runs on one core while the
// checksum runs on another, and the kernel's readahead keeps the device busy
// with the chunks after them. Reads go through ReadableFile only (test
// doubles see every byte), so a short or failing read is the Status of that
// ReadAt; the first error stops the readers and is returned.
//
// One reader (the default) keeps the file's access sequential, which the
// kernel's readahead needs; several readers read alternate chunks through
// separate handles, for storage that wants several requests in flight.
//
// Thread-safety: ReadOverlapped is reentrant; `storage` must allow use from
// several threads (Storage's contract); `consume` runs on the calling thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "checkpoint/storage.h"
#include "common/status.h"

namespace holdfast {

struct OverlappedReadOptions {
  // Bytes per ReadAt.
  size_t chunk_bytes = 8u << 20;
  // Reader threads; 0 = the calling thread reads, then consumes, chunk by
  // chunk (no overlap). A range of one chunk is always read on the calling
  // thread.
  int threads = 1;
  // How many chunks the readers may be ahead of the consumer (the ring size
  // when the bytes are not kept); at least threads + 1.
  int lead = 4;
};

// Reads [offset, offset + n) of the file at `path` through `storage` (not
// owned). With dst (not owned, n bytes) the bytes land there; with dst null
// they pass through scratch buffers. Calls consume(data, len) on the calling
// thread for consecutive chunks in order (may be empty: the range is only
// read). Returns the first open or read error.
Status ReadOverlapped(Storage* storage, const std::string& path, uint64_t offset, uint64_t n, uint8_t* dst,
                      const OverlappedReadOptions& options,
                      const std::function<void(const uint8_t*, size_t)>& consume);

}  // namespace holdfast
