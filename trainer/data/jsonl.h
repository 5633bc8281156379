// Internal to holdfast::data: what the JSONL formats (sft, preference) share —
// reading a file one JSON object per line with errors that name the file and
// the line, string fields checked the same way, and the held-out split of
// examples (eval.holdout).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "trainer/data/dataset.h"

namespace holdfast {

// Calls `each` with every non-blank line's object and "path:LINE" (for its
// errors) in file order; stops at its first error. A line that is not JSON,
// or not an object, is an error naming the line and `shape` (what a line
// must look like, e.g. {"prompt": "...", "response": "..."}). Returns the
// number of objects; a file with none is an error saying so.
Result<uint64_t> ForEachJsonLine(const std::string& path, const std::string& shape,
                                 const std::function<Status(const nlohmann::json&, const std::string&)>& each);

// Field `key` of a line's object as a string without NUL (byte 0 is the
// end-of-text token). `where` is "path:LINE"; `shape` as above. The pointer
// points into `object`.
Status GetJsonString(const nlohmann::json& object, const char* key, const std::string& where,
                     const std::string& shape, const std::string** out);

// The split of n examples by options.holdout (HoldoutMask): the training
// examples' indexes and the held-out ones', each in file order. An error
// when a holdout is asked for but holds out none, or all.
struct ExampleSplit {
  std::vector<uint32_t> train;
  std::vector<uint32_t> eval;
};
Result<ExampleSplit> SplitExamples(const DataOptions& options, uint64_t n, const char* unit);

}  // namespace holdfast
