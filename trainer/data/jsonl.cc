#include "trainer/data/jsonl.h"

#include <algorithm>
#include <cstring>

#include "trainer/data/mapped_file.h"

namespace holdfast {
namespace {

bool IsBlank(const char* begin, const char* end) {
  return std::all_of(begin, end, [](char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
  });
}

// "column 5: syntax error while parsing value - invalid literal; last read: 'x'"
// from nlohmann's "[json.exception.parse_error.101] parse error at line 1,
// column 5: ..." (its line is always 1: we parse one line at a time). Bytes
// outside printable ASCII are escaped so a stray binary byte cannot garble logs.
std::string DescribeParseError(const nlohmann::json::exception& e) {
  std::string what = e.what();
  const size_t column = what.find("column ");
  const size_t colon = column == std::string::npos ? column : what.find(": ", column);
  if (colon != std::string::npos) {
    what = what.substr(column, colon - column) + ": " + what.substr(colon + 2);
  } else if (what.rfind("[json.exception.", 0) == 0 && what.find("] ") != std::string::npos) {
    what = what.substr(what.find("] ") + 2);
  }
  std::string out;
  for (const char c : what) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7F) {
      out.push_back(c);
    } else {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out.push_back(kHex[byte >> 4]);
      out.push_back(kHex[byte & 0xF]);
    }
  }
  return out;
}

}  // namespace

Result<uint64_t> ForEachJsonLine(const std::string& path, const std::string& shape,
                                 const std::function<Status(const nlohmann::json&, const std::string&)>& each) {
  HF_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path, MappedFile::Access::kSequential));
  const char* const file_begin = reinterpret_cast<const char*>(file.data());
  const char* const file_end = file_begin + file.size();
  uint64_t line_number = 0;
  uint64_t objects = 0;
  for (const char* line = file_begin; line < file_end;) {
    ++line_number;
    const char* newline = static_cast<const char*>(std::memchr(line, '\n', file_end - line));
    const char* line_end = newline != nullptr ? newline : file_end;
    const char* next = newline != nullptr ? newline + 1 : file_end;
    if (IsBlank(line, line_end)) {
      line = next;
      continue;
    }
    const std::string where = path + ":" + std::to_string(line_number);
    nlohmann::json object;
    try {
      object = nlohmann::json::parse(line, line_end);
    } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e999
      return InvalidArgumentError(where + ": invalid JSON (" + DescribeParseError(e) +
                                  "); each line must be one JSON object");
    }
    if (!object.is_object()) {
      return InvalidArgumentError(where + ": expected a JSON object " + shape + ", got " +
                                  std::string(object.type_name()));
    }
    HF_RETURN_IF_ERROR(each(object, where));
    ++objects;
    line = next;
  }
  if (objects == 0) {
    return InvalidArgumentError(path + ": no examples (" + (file.size() == 0 ? "the file is empty" : "only blank lines") +
                                "); write one " + shape + " object per line");
  }
  return objects;
}

Status GetJsonString(const nlohmann::json& object, const char* key, const std::string& where,
                     const std::string& shape, const std::string** out) {
  const auto it = object.find(key);
  if (it == object.end()) {
    return InvalidArgumentError(where + ": missing \"" + key + "\"; each line must be " + shape);
  }
  if (!it->is_string()) {
    return InvalidArgumentError(where + ": \"" + key + "\" must be a string, got " + it->type_name());
  }
  const std::string& value = it->get_ref<const std::string&>();
  const size_t nul = value.find('\0');
  if (nul != std::string::npos) {
    return InvalidArgumentError(where + ": \"" + key + "\" contains a NUL character (\\u0000) at byte " +
                                std::to_string(nul) + "; byte 0 is the end-of-text token, so remove it from the data");
  }
  *out = &value;
  return Status::Ok();
}

Result<ExampleSplit> SplitExamples(const DataOptions& options, uint64_t n, const char* unit) {
  const uint64_t held = HoldoutCount(options.holdout, n);
  if (options.holdout > 0 && held == 0) {
    return InvalidArgumentError(options.path + ": eval.holdout = " + std::to_string(options.holdout) + " of " +
                                std::to_string(n) + " " + unit + " holds out none; raise it (a fraction of at least " +
                                "1/" + std::to_string(n) + ", or a count)");
  }
  if (held >= n && n > 0) {
    return InvalidArgumentError(options.path + ": eval.holdout holds out " + std::to_string(held) + " of " +
                                std::to_string(n) + " " + unit + ", leaving none to train on; lower eval.holdout");
  }
  const std::vector<bool> mask = HoldoutMask(n, held);
  ExampleSplit split;
  for (uint64_t e = 0; e < n; ++e) (mask[e] ? split.eval : split.train).push_back(static_cast<uint32_t>(e));
  return split;
}

}  // namespace holdfast
