// One line of a JSON-lines protocol — the control socket (control_protocol.h)
// and the cluster port (cluster_protocol.h) — parsed into a JSON object,
// bounded in size and nesting, every failure an InvalidArgument that names
// the message (`what`) and what is wrong with it — a key that appears twice
// in one object included (JSON leaves its meaning open). Never throws.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace holdfast {

// `line` may end in one '\n'; max_bytes counts it.
Result<nlohmann::json> ParseJsonObjectLine(std::string_view line, size_t max_bytes, int max_depth,
                                           const std::string& what);

// nlohmann's exception text without its "[json.exception.parse_error.101] " tag.
std::string CleanJsonError(const char* what);

}  // namespace holdfast
