#include "trainer/data/dataset.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "trainer/data/mapped_file.h"
#include "trainer/data/preference_dataset.h"
#include "trainer/data/sft_dataset.h"

namespace holdfast {

Result<DataFormat> ParseDataFormat(const std::string& name) {
  if (name == "text") return DataFormat::kText;
  if (name == "bin") return DataFormat::kBin;
  if (name == "sft") return DataFormat::kSft;
  if (name == "preference") return DataFormat::kPreference;
  return InvalidArgumentError("unknown data format '" + name + "'; valid formats: text, bin, sft, preference");
}

const char* DataFormatName(DataFormat format) {
  switch (format) {
    case DataFormat::kText:
      return "text";
    case DataFormat::kBin:
      return "bin";
    case DataFormat::kSft:
      return "sft";
    case DataFormat::kPreference:
      return "preference";
  }
  return "unknown";
}

uint64_t SplitMix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t SampleHash(uint64_t seed, uint64_t index) { return SplitMix64(SplitMix64(seed) ^ index); }

uint64_t HoldoutCount(double holdout, uint64_t size) {
  if (holdout <= 0) return 0;
  if (holdout < 1) return static_cast<uint64_t>(std::floor(holdout * static_cast<double>(size)));
  return static_cast<uint64_t>(holdout);
}

std::vector<bool> HoldoutMask(uint64_t n, uint64_t count) {
  std::vector<bool> mask(n, false);
  if (count == 0) return mask;
  HF_CHECK(count <= n);
  std::vector<std::pair<uint64_t, uint64_t>> keyed(n);
  for (uint64_t e = 0; e < n; ++e) keyed[e] = {SplitMix64(e), e};
  std::nth_element(keyed.begin(), keyed.begin() + static_cast<std::ptrdiff_t>(count - 1), keyed.end());
  for (uint64_t i = 0; i < count; ++i) mask[keyed[i].second] = true;
  return mask;
}

void Dataset::FillBatch(uint64_t first_index, int batch, int64_t* inputs, int64_t* targets) const {
  HF_CHECK(batch >= 0);
  const size_t stride = static_cast<size_t>(options().block_size) * static_cast<size_t>(rows_per_sample());
  for (int b = 0; b < batch; ++b) {
    Sample(first_index + static_cast<uint64_t>(b), inputs + b * stride, targets + b * stride);
  }
}

void Dataset::FillEvalBatch(uint64_t first_index, int batch, int64_t* inputs, int64_t* targets) const {
  HF_CHECK(batch >= 0);
  const size_t stride = static_cast<size_t>(options().block_size) * static_cast<size_t>(rows_per_sample());
  for (int b = 0; b < batch; ++b) {
    EvalSample(first_index + static_cast<uint64_t>(b), inputs + b * stride, targets + b * stride);
  }
}

namespace {

// Token layouts of the two windowed formats. Read(p, i) returns token i of p.
struct ByteTokens {
  static constexpr size_t kWidth = 1;
  static int64_t Read(const uint8_t* p, size_t i) { return p[i]; }
};
struct Uint16LeTokens {
  static constexpr size_t kWidth = 2;
  // Assembled byte by byte so the result is little-endian on any host; compilers
  // turn this into one load on little-endian machines.
  static int64_t Read(const uint8_t* p, size_t i) {
    return static_cast<int64_t>(p[2 * i]) | (static_cast<int64_t>(p[2 * i + 1]) << 8);
  }
};

// text and bin: sample i is the window of block_size + 1 tokens starting at
// h(i) % (n - H - block_size), H = the held-out tokens at the file's end;
// inputs are its first block_size tokens, targets the last block_size.
// Held-out sample j is the window starting at n - H + j * block_size.
template <typename Tokens>
class WindowDataset final : public Dataset {
 public:
  WindowDataset(DataOptions options, MappedFile file, uint64_t held_out)
      : options_(std::move(options)),
        file_(std::move(file)),
        n_tokens_(file_.size() / Tokens::kWidth),
        train_tokens_(n_tokens_ - held_out),
        positions_(train_tokens_ - static_cast<uint64_t>(options_.block_size)),
        eval_windows_(held_out == 0 ? 0 : (held_out - 1) / static_cast<uint64_t>(options_.block_size)),
        seed_hash_(SplitMix64(options_.seed)) {
    HF_CHECK(train_tokens_ >= static_cast<uint64_t>(options_.block_size) + 1);
  }

  void Sample(uint64_t index, int64_t* inputs, int64_t* targets) const override {
    // Same value as SampleHash(seed, index), with the seed's hash computed once.
    Window(SplitMix64(seed_hash_ ^ index) % positions_, inputs, targets);
  }

  uint64_t eval_size() const override { return eval_windows_; }
  void EvalSample(uint64_t index, int64_t* inputs, int64_t* targets) const override {
    HF_CHECK(index < eval_windows_);
    Window(train_tokens_ + index * static_cast<uint64_t>(options_.block_size), inputs, targets);
  }

  const DataOptions& options() const override { return options_; }
  uint64_t size() const override { return n_tokens_; }
  std::string Describe() const override {
    std::string out = std::string(DataFormatName(options_.format)) + " " + options_.path + " (" +
                      std::to_string(n_tokens_) + " tokens";
    if (eval_windows_ > 0) {
      out += ", the last " + std::to_string(n_tokens_ - train_tokens_) + " held out: " +
             std::to_string(eval_windows_) + " eval windows";
    }
    return out + ")";
  }

 private:
  void Window(uint64_t start, int64_t* inputs, int64_t* targets) const {
    const uint8_t* window = file_.data() + start * Tokens::kWidth;
    const size_t block = static_cast<size_t>(options_.block_size);
    for (size_t t = 0; t < block; ++t) inputs[t] = Tokens::Read(window, t);
    for (size_t t = 0; t < block; ++t) targets[t] = Tokens::Read(window, t + 1);
  }

  const DataOptions options_;
  const MappedFile file_;
  const uint64_t n_tokens_;
  const uint64_t train_tokens_;  // the first tokens, the ones training windows lie in
  const uint64_t positions_;  // number of valid training window starts, >= 1
  const uint64_t eval_windows_;  // held-out windows
  const uint64_t seed_hash_;  // SplitMix64(seed)
};

Status CheckLongEnough(const DataOptions& options, uint64_t n_tokens, const char* unit) {
  const uint64_t needed = static_cast<uint64_t>(options.block_size) + 1;
  if (n_tokens == 0) {
    return InvalidArgumentError(options.path +
                                ": file is empty; point data.path at a file with "
                                "at least " +
                                std::to_string(needed) + " " + unit + " (block_size + 1)");
  }
  if (n_tokens < needed) {
    return InvalidArgumentError(options.path + ": has " + std::to_string(n_tokens) + " " + unit +
                                ", but block_size " + std::to_string(options.block_size) +
                                " needs at least " + std::to_string(needed) +
                                " (block_size + 1); use a longer file or lower model.block_size");
  }
  return Status::Ok();
}

// The tokens eval.holdout keeps out of training at the file's end, checked:
// room for one eval window and for one training window.
Result<uint64_t> HeldOutTokens(const DataOptions& options, uint64_t n_tokens, const char* unit) {
  const uint64_t h = HoldoutCount(options.holdout, n_tokens);
  if (options.holdout <= 0) return h;
  const uint64_t window = static_cast<uint64_t>(options.block_size) + 1;
  if (h < window) {
    return InvalidArgumentError(options.path + ": eval.holdout holds out " + std::to_string(h) + " of " +
                                std::to_string(n_tokens) + " " + unit + ", fewer than one eval window (block_size + 1 = " +
                                std::to_string(window) + "); raise eval.holdout");
  }
  if (h > n_tokens || n_tokens - h < window) {
    return InvalidArgumentError(options.path + ": eval.holdout holds out " + std::to_string(h) + " of " +
                                std::to_string(n_tokens) + " " + unit + ", leaving fewer than one training window (" +
                                std::to_string(window) + "); lower eval.holdout");
  }
  return h;
}

Result<std::unique_ptr<Dataset>> OpenText(const DataOptions& options) {
  if (options.vocab_size != 256) {
    return InvalidArgumentError(
        options.path + ": text data is byte-level (256 tokens), but vocab_size is " +
        std::to_string(options.vocab_size) + "; set model.vocab_size = 256 for text data");
  }
  HF_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(options.path, MappedFile::Access::kRandom));
  HF_RETURN_IF_ERROR(CheckLongEnough(options, file.size(), "bytes"));
  HF_ASSIGN_OR_RETURN(uint64_t held_out, HeldOutTokens(options, file.size(), "bytes"));
  return std::unique_ptr<Dataset>(new WindowDataset<ByteTokens>(options, std::move(file), held_out));
}

Result<std::unique_ptr<Dataset>> OpenBin(const DataOptions& options) {
  // Sequential while validating every token, random afterwards for sampling.
  HF_ASSIGN_OR_RETURN(MappedFile file,
                      MappedFile::Open(options.path, MappedFile::Access::kSequential));
  if (file.size() % 2 != 0) {
    return InvalidArgumentError(
        options.path + ": size " + std::to_string(file.size()) +
        " bytes is odd, but a bin file holds 2-byte little-endian uint16 tokens (a stray byte at "
        "offset " +
        std::to_string(file.size() - 1) +
        "); is this a tokenized .bin file? For raw text set data.format = \"text\"");
  }
  const uint64_t n_tokens = file.size() / 2;
  HF_RETURN_IF_ERROR(CheckLongEnough(options, n_tokens, "tokens"));
  const int64_t vocab = options.vocab_size;
  for (uint64_t i = 0; i < n_tokens; ++i) {
    const int64_t token = Uint16LeTokens::Read(file.data(), i);
    if (token < vocab) continue;
    // Error path only: find the largest token so the message can say what to set.
    int64_t max_token = token;
    for (uint64_t j = i + 1; j < n_tokens; ++j) {
      max_token = std::max(max_token, Uint16LeTokens::Read(file.data(), j));
    }
    return InvalidArgumentError(
        options.path + ": token " + std::to_string(i) + " (byte offset " + std::to_string(2 * i) +
        ") is " + std::to_string(token) + ", not below vocab_size " + std::to_string(vocab) +
        "; the largest token in the file is " + std::to_string(max_token) +
        ", so set model.vocab_size to at least " + std::to_string(max_token + 1) +
        " or re-tokenize the data with the model's tokenizer");
  }
  HF_ASSIGN_OR_RETURN(uint64_t held_out, HeldOutTokens(options, n_tokens, "tokens"));
  file.Advise(MappedFile::Access::kRandom);
  return std::unique_ptr<Dataset>(new WindowDataset<Uint16LeTokens>(options, std::move(file), held_out));
}

}  // namespace

Result<std::unique_ptr<Dataset>> Dataset::Open(const DataOptions& options) {
  if (options.path.empty()) {
    return InvalidArgumentError("no data file given: data.path is empty; set it to a " +
                                std::string(DataFormatName(options.format)) + " file");
  }
  if (options.block_size < 1) {
    return InvalidArgumentError(options.path + ": block_size must be at least 1, got " +
                                std::to_string(options.block_size) + "; fix model.block_size");
  }
  if (options.vocab_size < 1) {
    return InvalidArgumentError(options.path + ": vocab_size must be at least 1, got " +
                                std::to_string(options.vocab_size) + "; fix model.vocab_size");
  }
  switch (options.format) {
    case DataFormat::kText:
      return OpenText(options);
    case DataFormat::kBin:
      return OpenBin(options);
    case DataFormat::kSft:
      return OpenSftDataset(options);
    case DataFormat::kPreference:
      return OpenPreferenceDataset(options);
  }
  return InvalidArgumentError(options.path + ": unknown data format");
}

}  // namespace holdfast
