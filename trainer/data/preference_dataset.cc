#include "trainer/data/preference_dataset.h"

#include <utility>
#include <vector>

#include "trainer/data/jsonl.h"
#include "trainer/data/sft_dataset.h"

namespace holdfast {
namespace {

constexpr const char kShape[] = "{\"prompt\": \"...\", \"chosen\": \"...\", \"rejected\": \"...\"}";

// A pair: the chosen and the rejected response, each kept like an sft example.
struct Pair {
  SftSequence chosen;
  SftSequence rejected;
};

class PreferenceDataset final : public Dataset {
 public:
  PreferenceDataset(DataOptions options, std::string bytes, std::vector<Pair> pairs, ExampleSplit split,
                    uint64_t truncated)
      : options_(std::move(options)),
        bytes_(std::move(bytes)),
        pairs_(std::move(pairs)),
        split_(std::move(split)),
        truncated_(truncated),
        seed_hash_(SplitMix64(options_.seed)) {
    HF_CHECK(!split_.train.empty());
  }

  int rows_per_sample() const override { return 2; }
  void Sample(uint64_t index, int64_t* inputs, int64_t* targets) const override {
    Rows(split_.train[SplitMix64(seed_hash_ ^ index) % split_.train.size()], inputs, targets);
  }
  uint64_t eval_size() const override { return split_.eval.size(); }
  void EvalSample(uint64_t index, int64_t* inputs, int64_t* targets) const override {
    HF_CHECK(index < split_.eval.size());
    Rows(split_.eval[index], inputs, targets);
  }

  const DataOptions& options() const override { return options_; }
  uint64_t size() const override { return pairs_.size(); }
  std::string Describe() const override {
    std::string out = "preference " + options_.path + " (" + std::to_string(pairs_.size()) + " pairs";
    if (!split_.eval.empty()) out += ", " + std::to_string(split_.eval.size()) + " held out";
    if (truncated_ > 0) out += ", " + std::to_string(truncated_) + " cut to block_size";
    return out + ")";
  }

 private:
  void Rows(uint32_t pair, int64_t* inputs, int64_t* targets) const {
    const size_t block = static_cast<size_t>(options_.block_size);
    const auto* bytes = reinterpret_cast<const uint8_t*>(bytes_.data());
    SftRow(pairs_[pair].chosen, bytes, block, inputs, targets);
    SftRow(pairs_[pair].rejected, bytes, block, inputs + block, targets + block);
  }

  const DataOptions options_;
  const std::string bytes_;  // the kept sequences, back to back
  const std::vector<Pair> pairs_;
  const ExampleSplit split_;  // indexes into pairs_
  const uint64_t truncated_;  // pairs with a response cut to fit block_size + 1
  const uint64_t seed_hash_;  // SplitMix64(seed)
};

}  // namespace

Result<std::unique_ptr<Dataset>> OpenPreferenceDataset(const DataOptions& options) {
  if (options.vocab_size != 256) {
    return InvalidArgumentError(options.path + ": preference data is byte-level (256 tokens), but vocab_size is " +
                                std::to_string(options.vocab_size) +
                                "; set model.vocab_size = 256 for preference data");
  }
  const size_t block = static_cast<size_t>(options.block_size);
  std::string bytes;
  std::vector<Pair> pairs;
  uint64_t truncated = 0;
  auto each = [&](const nlohmann::json& object, const std::string& where) -> Status {
    const std::string* prompt = nullptr;
    const std::string* chosen = nullptr;
    const std::string* rejected = nullptr;
    HF_RETURN_IF_ERROR(GetJsonString(object, "prompt", where, kShape, &prompt));
    HF_RETURN_IF_ERROR(GetJsonString(object, "chosen", where, kShape, &chosen));
    HF_RETURN_IF_ERROR(GetJsonString(object, "rejected", where, kShape, &rejected));
    for (const auto& [key, value] : {std::pair<const char*, const std::string*>{"chosen", chosen}, {"rejected", rejected}}) {
      if (value->empty()) {
        return InvalidArgumentError(where + ": \"" + key + "\" is empty; both responses of a pair need at least one "
                                    "byte");
      }
    }
    if (*chosen == *rejected) {
      return InvalidArgumentError(where + ": \"chosen\" and \"rejected\" are the same text, so the pair states no "
                                  "preference; remove the line or fix one of the responses");
    }
    if (prompt->size() >= block) {
      return InvalidArgumentError(where + ": prompt is " + std::to_string(prompt->size()) +
                                  " bytes, but block_size is " + std::to_string(block) +
                                  ", which leaves no room for a response token; raise model.block_size above " +
                                  std::to_string(prompt->size()) + " or shorten the prompt");
    }
    const size_t keep = block + 1;  // the bytes of prompt + response + end-of-text a row can hold
    const bool cut = prompt->size() + chosen->size() + 1 > keep || prompt->size() + rejected->size() + 1 > keep;
    Pair p;
    p.chosen = AppendSftSequence(*prompt, *chosen, block, &bytes);
    p.rejected = AppendSftSequence(*prompt, *rejected, block, &bytes);
    if (cut) {
      const std::string a = bytes.substr(p.chosen.offset, p.chosen.length);
      const std::string b = bytes.substr(p.rejected.offset, p.rejected.length);
      if (a == b) {
        return InvalidArgumentError(where + ": \"chosen\" and \"rejected\" differ only after byte " +
                                    std::to_string(block + 1) + " of prompt + response (block_size + 1), where "
                                    "both are cut, so the pair states no preference; raise model.block_size or "
                                    "shorten the prompt");
      }
      ++truncated;
    }
    pairs.push_back(p);
    return Status::Ok();
  };
  HF_RETURN_IF_ERROR(ForEachJsonLine(options.path, kShape, each).status());
  HF_ASSIGN_OR_RETURN(ExampleSplit split, SplitExamples(options, pairs.size(), "pairs"));
  bytes.shrink_to_fit();
  return std::unique_ptr<Dataset>(
      new PreferenceDataset(options, std::move(bytes), std::move(pairs), std::move(split), truncated));
}

}  // namespace holdfast
