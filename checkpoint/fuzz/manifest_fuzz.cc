// libFuzzer target: ParseManifest must reject any damaged manifest cleanly.
// A parsed manifest must re-encode to text that parses to the same fields.
#include <cstddef>
#include <cstdint>
#include <string>

#include "checkpoint/format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  holdfast::Result<holdfast::Manifest> m = holdfast::ParseManifest(text);
  if (m.ok()) {
    holdfast::Result<holdfast::Manifest> again = holdfast::ParseManifest(holdfast::EncodeManifest(*m));
    HF_CHECK(again.ok());
    HF_CHECK(again->step == m->step && again->shards.size() == m->shards.size());
  }
  return 0;
}
