// Datasets and the deterministic sampler the trainer draws batches from.
//
// Four formats, all read through a read-only memory map:
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
#include <vector>

#include "common/status.h"

namespace holdfast {

enum class DataFormat { kText, kBin, kSft, kPreference };

// Parses "text", "bin", "sft" or "preference"; the error lists the valid names.
Result<DataFormat> ParseDataFormat(const std::string& name);
const char* DataFormatName(DataFormat format);

struct DataOptions {
  DataFormat format = DataFormat::kText;
  std::string path;
  int block_size = 128;   // tokens per sample (context length)
  int vocab_size = 256;   // every token must be < vocab_size
  uint64_t seed = 1337;
  // eval.holdout: a fraction (< 1) or a count (>= 1) of the examples (sft,
  // preference) or tokens (text, bin) held out; 0 = none.
  double holdout = 0;
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

// The number of samples eval.holdout keeps out of a dataset of `size`
// examples (sft, preference) or tokens (text, bin): floor(holdout * size)
// for a fraction (< 1), else the count itself. 0 when holdout is 0.
uint64_t HoldoutCount(double holdout, uint64_t size);

// Which of n examples are held out when `count` are: the `count` examples e
// with the smallest SplitMix64(e) (a bijection: no ties). Independent of the
// seed, so runs with other seeds hold out the same examples. mask[e] = true
// for a held-out example.
std::vector<bool> HoldoutMask(uint64_t n, uint64_t count);

class Dataset {
 public:
  virtual ~Dataset() = default;

  // Opens and validates the file; errors name the file, and the line or byte
  // offset where the problem is, and say what to do.
  static Result<std::unique_ptr<Dataset>> Open(const DataOptions& options);

  // Rows of block_size tokens one sample fills: 1, or 2 for a preference
  // pair (the chosen response's row, then the rejected one's).
  virtual int rows_per_sample() const { return 1; }

  // Writes rows_per_sample() rows of block_size inputs and targets for
  // global training sample `index` (never a held-out one). `inputs` and
  // `targets` (caller-owned) each hold rows_per_sample() * block_size elements.
  virtual void Sample(uint64_t index, int64_t* inputs, int64_t* targets) const = 0;

  // Held-out samples, 0 .. eval_size()-1, in a fixed order; EvalSample
  // writes one like Sample. Requires index < eval_size().
  virtual uint64_t eval_size() const = 0;
  virtual void EvalSample(uint64_t index, int64_t* inputs, int64_t* targets) const = 0;

  // Fills a [batch * rows_per_sample(), block_size] batch with samples
  // first_index .. first_index+batch-1; `inputs` and `targets` (caller-owned)
  // each hold batch * rows_per_sample() * block_size elements.
  void FillBatch(uint64_t first_index, int batch, int64_t* inputs, int64_t* targets) const;
  // The same for held-out samples first_index .. first_index+batch-1.
  void FillEvalBatch(uint64_t first_index, int batch, int64_t* inputs, int64_t* targets) const;

  virtual const DataOptions& options() const = 0;
  // Number of tokens (text, bin), examples (sft) or pairs (preference) in
  // the file, held-out ones included.
  virtual uint64_t size() const = 0;
  // One line for logs: "text /path (1115394 tokens)".
  virtual std::string Describe() const = 0;
};

}  // namespace holdfast
