// Private to the control protocol's .cc files (control_protocol.cc,
// control_status.cc): the one JSON helper both codecs share. Not part of any
// public header: it brings in nlohmann/json.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace holdfast {
namespace control_internal {

// Invalid UTF-8 (a path in a message, say) becomes U+FFFD instead of throwing.
inline std::string Dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace control_internal
}  // namespace holdfast
