#include "trainer/data/sft_dataset.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "trainer/data/mapped_file.h"

namespace holdfast {
namespace {

// One example: seq = bytes(prompt) + bytes(response) + [kSftEndOfText], of which
// only the first block_size + 1 bytes are kept (a sample never reads further).
struct Example {
  uint64_t offset;      // into SftDataset::bytes_
  uint32_t length;      // L = min(len(seq), block_size + 1)
  uint32_t prompt_len;  // len(prompt) < block_size
};

class SftDataset final : public Dataset {
 public:
  SftDataset(DataOptions options, std::string bytes, std::vector<Example> examples)
      : options_(std::move(options)),
        bytes_(std::move(bytes)),
        examples_(std::move(examples)),
        seed_hash_(SplitMix64(options_.seed)) {
    HF_CHECK(!examples_.empty());
  }

  void Sample(uint64_t index, int64_t* inputs, int64_t* targets) const override {
    const Example& ex = examples_[SplitMix64(seed_hash_ ^ index) % examples_.size()];
    const auto* seq = reinterpret_cast<const uint8_t*>(bytes_.data()) + ex.offset;
    const size_t len = ex.length;
    const size_t prompt = ex.prompt_len;
    const size_t block = static_cast<size_t>(options_.block_size);
    // inputs[t] = seq[t] for t < L - 1, else padding (0).
    for (size_t t = 0; t < block; ++t) inputs[t] = t + 1 < len ? seq[t] : kSftEndOfText;
    // targets[t] = seq[t + 1] where t + 1 is a response (or end-of-text) position
    // inside the kept sequence; everything else carries no loss.
    for (size_t t = 0; t < block; ++t) {
      targets[t] =
          (t + 1 >= prompt && t + 1 < len) ? static_cast<int64_t>(seq[t + 1]) : kIgnoreIndex;
    }
  }

  const DataOptions& options() const override { return options_; }
  uint64_t size() const override { return examples_.size(); }
  std::string Describe() const override {
    return "sft " + options_.path + " (" + std::to_string(examples_.size()) + " examples)";
  }

 private:
  const DataOptions options_;
  const std::string bytes_;  // the kept sequences, back to back
  const std::vector<Example> examples_;
  const uint64_t seed_hash_;  // SplitMix64(seed)
};

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

// Checks field `key` of a line's object and returns it through `out`.
Status GetString(const nlohmann::json& object, const char* key, const std::string& where,
                 const std::string** out) {
  const auto it = object.find(key);
  if (it == object.end()) {
    return InvalidArgumentError(
        where + ": missing \"" + key +
        "\"; each line must be {\"prompt\": \"...\", \"response\": \"...\"}");
  }
  if (!it->is_string()) {
    return InvalidArgumentError(where + ": \"" + key + "\" must be a string, got " +
                                it->type_name());
  }
  const std::string& value = it->get_ref<const std::string&>();
  const size_t nul = value.find('\0');
  if (nul != std::string::npos) {
    return InvalidArgumentError(
        where + ": \"" + key + "\" contains a NUL character (\\u0000) at byte " +
        std::to_string(nul) + "; byte 0 is the end-of-text token, so remove it from the data");
  }
  *out = &value;
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Dataset>> OpenSftDataset(const DataOptions& options) {
  if (options.vocab_size != 256) {
    return InvalidArgumentError(
        options.path + ": sft data is byte-level (256 tokens), but vocab_size is " +
        std::to_string(options.vocab_size) + "; set model.vocab_size = 256 for sft data");
  }
  HF_ASSIGN_OR_RETURN(MappedFile file,
                      MappedFile::Open(options.path, MappedFile::Access::kSequential));
  const size_t block = static_cast<size_t>(options.block_size);
  std::string bytes;
  std::vector<Example> examples;
  const char* const file_begin = reinterpret_cast<const char*>(file.data());
  const char* const file_end = file_begin + file.size();
  uint64_t line_number = 0;
  for (const char* line = file_begin; line < file_end;) {
    ++line_number;
    const char* newline = static_cast<const char*>(std::memchr(line, '\n', file_end - line));
    const char* line_end = newline != nullptr ? newline : file_end;
    const char* next = newline != nullptr ? newline + 1 : file_end;
    if (IsBlank(line, line_end)) {
      line = next;
      continue;
    }
    const std::string where = options.path + ":" + std::to_string(line_number);
    nlohmann::json object;
    try {
      object = nlohmann::json::parse(line, line_end);
    } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e999
      return InvalidArgumentError(where + ": invalid JSON (" + DescribeParseError(e) +
                                  "); each line must be one JSON object");
    }
    if (!object.is_object()) {
      return InvalidArgumentError(where +
                                  ": expected a JSON object {\"prompt\": \"...\", "
                                  "\"response\": \"...\"}, got " +
                                  std::string(object.type_name()));
    }
    const std::string* prompt = nullptr;
    const std::string* response = nullptr;
    HF_RETURN_IF_ERROR(GetString(object, "prompt", where, &prompt));
    HF_RETURN_IF_ERROR(GetString(object, "response", where, &response));
    if (response->empty()) {
      return InvalidArgumentError(where +
                                  ": \"response\" is empty; every example needs at least "
                                  "one response byte to train on");
    }
    if (prompt->size() >= block) {
      return InvalidArgumentError(
          where + ": prompt is " + std::to_string(prompt->size()) + " bytes, but block_size is " +
          std::to_string(block) + ", which leaves no room for a response token; raise " +
          "model.block_size above " + std::to_string(prompt->size()) + " or shorten the prompt");
    }
    // Keep only the bytes a sample can read: L = min(len(seq), block_size + 1).
    const size_t seq_len = prompt->size() + response->size() + 1;
    const size_t kept = std::min(seq_len, block + 1);
    Example ex;
    ex.offset = bytes.size();
    ex.length = static_cast<uint32_t>(kept);
    ex.prompt_len = static_cast<uint32_t>(prompt->size());
    bytes += *prompt;
    bytes.append(*response, 0, std::min(response->size(), kept - prompt->size()));
    if (bytes.size() - ex.offset < kept) bytes.push_back(static_cast<char>(kSftEndOfText));
    HF_CHECK(bytes.size() - ex.offset == kept);
    examples.push_back(ex);
    line = next;
  }
  if (examples.empty()) {
    return InvalidArgumentError(
        options.path + ": no examples (" +
        (file.size() == 0 ? "the file is empty" : "only blank lines") +
        "); write one {\"prompt\": \"...\", \"response\": \"...\"} object per line");
  }
  bytes.shrink_to_fit();
  return std::unique_ptr<Dataset>(new SftDataset(options, std::move(bytes), std::move(examples)));
}

}  // namespace holdfast
