// libFuzzer target: ParseClusterMessage must reject any line cleanly (no
// crash, no throw, no abort), and whatever it accepts must encode to a line
// that parses back and encodes to the same bytes again (a stable round trip),
// under two clocks: an ordinary one and one younger than every age.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/cluster_protocol.h"

namespace {

void CheckRoundTrip(std::string_view line, int64_t now) {
  holdfast::Result<holdfast::ClusterMessage> m = holdfast::ParseClusterMessage(line, now);
  if (!m.ok()) {
    HF_CHECK(m.status().code() == holdfast::StatusCode::kInvalidArgument);
    HF_CHECK(!m.status().message().empty());
    return;
  }
  const std::string encoded = holdfast::EncodeClusterMessage(*m, now);
  HF_CHECK(encoded.size() <= holdfast::kMaxClusterMessageBytes);
  holdfast::Result<holdfast::ClusterMessage> again = holdfast::ParseClusterMessage(encoded, now);
  HF_CHECK_MSG(again.ok(), again.status().ToString());
  HF_CHECK(again->index() == m->index());
  HF_CHECK(holdfast::EncodeClusterMessage(*again, now) == encoded);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view line(reinterpret_cast<const char*>(data), size);
  CheckRoundTrip(line, 5'000'000'000'000);
  CheckRoundTrip(line, 1);
  return 0;
}
