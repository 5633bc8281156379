#include "trainer/data/sft_dataset.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "trainer/data/jsonl.h"

namespace holdfast {

void SftRow(const SftSequence& ex, const uint8_t* bytes, size_t block, int64_t* inputs, int64_t* targets) {
  const uint8_t* seq = bytes + ex.offset;
  const size_t len = ex.length;
  const size_t prompt = ex.prompt_len;
  // inputs[t] = seq[t] for t < L - 1, else padding (0).
  for (size_t t = 0; t < block; ++t) inputs[t] = t + 1 < len ? seq[t] : kSftEndOfText;
  // targets[t] = seq[t + 1] where t + 1 is a response (or end-of-text) position
  // inside the kept sequence; everything else carries no loss.
  for (size_t t = 0; t < block; ++t) {
    targets[t] = (t + 1 >= prompt && t + 1 < len) ? static_cast<int64_t>(seq[t + 1]) : kIgnoreIndex;
  }
}

SftSequence AppendSftSequence(const std::string& prompt, const std::string& response, size_t block,
                              std::string* bytes) {
  // Keep only the bytes a sample can read: L = min(len(seq), block_size + 1).
  const size_t seq_len = prompt.size() + response.size() + 1;
  const size_t kept = std::min(seq_len, block + 1);
  SftSequence ex;
  ex.offset = bytes->size();
  ex.length = static_cast<uint32_t>(kept);
  ex.prompt_len = static_cast<uint32_t>(prompt.size());
  *bytes += prompt;
  bytes->append(response, 0, std::min(response.size(), kept - prompt.size()));
  if (bytes->size() - ex.offset < kept) bytes->push_back(static_cast<char>(kSftEndOfText));
  HF_CHECK(bytes->size() - ex.offset == kept);
  return ex;
}

namespace {

constexpr const char kShape[] = "{\"prompt\": \"...\", \"response\": \"...\"}";

class SftDataset final : public Dataset {
 public:
  SftDataset(DataOptions options, std::string bytes, std::vector<SftSequence> examples, ExampleSplit split)
      : options_(std::move(options)),
        bytes_(std::move(bytes)),
        examples_(std::move(examples)),
        split_(std::move(split)),
        seed_hash_(SplitMix64(options_.seed)) {
    HF_CHECK(!split_.train.empty());
  }

  void Sample(uint64_t index, int64_t* inputs, int64_t* targets) const override {
    Row(split_.train[SplitMix64(seed_hash_ ^ index) % split_.train.size()], inputs, targets);
  }
  uint64_t eval_size() const override { return split_.eval.size(); }
  void EvalSample(uint64_t index, int64_t* inputs, int64_t* targets) const override {
    HF_CHECK(index < split_.eval.size());
    Row(split_.eval[index], inputs, targets);
  }

  const DataOptions& options() const override { return options_; }
  uint64_t size() const override { return examples_.size(); }
  std::string Describe() const override {
    std::string out = "sft " + options_.path + " (" + std::to_string(examples_.size()) + " examples";
    if (!split_.eval.empty()) out += ", " + std::to_string(split_.eval.size()) + " held out";
    return out + ")";
  }

 private:
  void Row(uint32_t example, int64_t* inputs, int64_t* targets) const {
    SftRow(examples_[example], reinterpret_cast<const uint8_t*>(bytes_.data()),
           static_cast<size_t>(options_.block_size), inputs, targets);
  }

  const DataOptions options_;
  const std::string bytes_;  // the kept sequences, back to back
  const std::vector<SftSequence> examples_;
  const ExampleSplit split_;  // indexes into examples_
  const uint64_t seed_hash_;  // SplitMix64(seed)
};

}  // namespace

Result<std::unique_ptr<Dataset>> OpenSftDataset(const DataOptions& options) {
  if (options.vocab_size != 256) {
    return InvalidArgumentError(options.path + ": sft data is byte-level (256 tokens), but vocab_size is " +
                                std::to_string(options.vocab_size) + "; set model.vocab_size = 256 for sft data");
  }
  const size_t block = static_cast<size_t>(options.block_size);
  std::string bytes;
  std::vector<SftSequence> examples;
  auto each = [&](const nlohmann::json& object, const std::string& where) -> Status {
    const std::string* prompt = nullptr;
    const std::string* response = nullptr;
    HF_RETURN_IF_ERROR(GetJsonString(object, "prompt", where, kShape, &prompt));
    HF_RETURN_IF_ERROR(GetJsonString(object, "response", where, kShape, &response));
    if (response->empty()) {
      return InvalidArgumentError(where + ": \"response\" is empty; every example needs at least one response byte "
                                  "to train on");
    }
    if (prompt->size() >= block) {
      return InvalidArgumentError(where + ": prompt is " + std::to_string(prompt->size()) +
                                  " bytes, but block_size is " + std::to_string(block) +
                                  ", which leaves no room for a response token; raise model.block_size above " +
                                  std::to_string(prompt->size()) + " or shorten the prompt");
    }
    examples.push_back(AppendSftSequence(*prompt, *response, block, &bytes));
    return Status::Ok();
  };
  HF_RETURN_IF_ERROR(ForEachJsonLine(options.path, kShape, each).status());
  HF_ASSIGN_OR_RETURN(ExampleSplit split, SplitExamples(options, examples.size(), "examples"));
  bytes.shrink_to_fit();
  return std::unique_ptr<Dataset>(new SftDataset(options, std::move(bytes), std::move(examples), std::move(split)));
}

}  // namespace holdfast
