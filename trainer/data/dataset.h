// Datasets and the deterministic sampler the trainer draws batches from.
//
// Three formats, all read through a read-only memory map:
//   - kText: a byte-level text file; every byte is a token (vocab 256).
//   - kBin:  pre-tokenized little-endian uint16 tokens (the nanoGPT layout).
//   - kSft:  JSONL, one {"prompt": "...", "response": "..."} object per line;
//            byte-level tokens; the loss covers response tokens only. Examples
//            are decoded into memory at Open (only their first block_size + 1
//            bytes, all a sample can use), then the map is dropped.
//
// Sampling is a pure function of (seed, global sample index): sample i of a run
// is the same whatever the world size, so a run's data cursor is one integer,
// and DP=1 and DP=2 on the same global batch see the same samples. The mapping
// is documented (and reimplemented by the Python reference) in
// docs/data-sampling.md.
//
// Thread-safety: a Dataset is immutable after Open; Sample may be called from
// any number of threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace holdfast {

enum class DataFormat { kText, kBin, kSft };

// Parses "text", "bin" or "sft"; the error lists the valid names.
Result<DataFormat> ParseDataFormat(const std::string& name);
const char* DataFormatName(DataFormat format);

struct DataOptions {
  DataFormat format = DataFormat::kText;
  std::string path;
  int block_size = 128;   // tokens per sample (context length)
  int vocab_size = 256;   // every token must be < vocab_size
  uint64_t seed = 1337;
};

// Target value for positions that carry no loss (SFT prompt and padding).
constexpr int64_t kIgnoreIndex = -1;
// End-of-text token appended to every SFT example (NUL never occurs in text).
constexpr int64_t kSftEndOfText = 0;

// SplitMix64 (Steele et al.): the mixing function behind the sampler.
uint64_t SplitMix64(uint64_t x);

// h(index) = SplitMix64(SplitMix64(seed) ^ index): the hash that picks the
// window (text, bin) or example (sft) of global sample `index`.
uint64_t SampleHash(uint64_t seed, uint64_t index);

class Dataset {
 public:
  virtual ~Dataset() = default;

  // Opens and validates the file; errors name the file, and the line or byte
  // offset where the problem is, and say what to do.
  static Result<std::unique_ptr<Dataset>> Open(const DataOptions& options);

  // Writes block_size inputs and block_size targets for global sample `index`.
  // `inputs` and `targets` (caller-owned) each hold block_size elements.
  virtual void Sample(uint64_t index, int64_t* inputs, int64_t* targets) const = 0;

  // Fills a [batch, block_size] batch with samples first_index .. first_index+batch-1;
  // `inputs` and `targets` (caller-owned) each hold batch * block_size elements.
  void FillBatch(uint64_t first_index, int batch, int64_t* inputs, int64_t* targets) const;

  virtual const DataOptions& options() const = 0;
  // Number of tokens (text, bin) or examples (sft) in the file.
  virtual uint64_t size() const = 0;
  // One line for logs: "text /path (1115394 tokens)".
  virtual std::string Describe() const = 0;
};

}  // namespace holdfast
