// libFuzzer target: ParseShardHeader must never read outside the bytes given,
// and every entry it accepts must lie inside the file.
#include <cstddef>
#include <cstdint>

#include "checkpoint/format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The first 8 bytes (when present) pick the claimed file size.
  uint64_t file_size = size;
  if (size >= 8) {
    file_size = 0;
    for (int i = 0; i < 8; ++i) file_size = (file_size << 8) | data[i];
    data += 8;
    size -= 8;
  }
  holdfast::Result<holdfast::ShardHeader> h = holdfast::ParseShardHeader(data, size, file_size);
  if (h.ok()) {
    for (const holdfast::ShardEntry& e : h->entries) HF_CHECK(e.offset + e.size <= file_size);
    HF_CHECK(h->header_size <= size);
  }
  return 0;
}
