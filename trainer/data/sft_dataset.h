// Internal to holdfast::data: the JSONL prompt/response dataset (DataFormat::kSft)
// and the row layout the preference format shares with it. Dataset::Open
// dispatches here; see dataset.h for the contract and docs/data-sampling.md for
// the exact sample layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "trainer/data/dataset.h"

namespace holdfast {

// One kept sequence: seq = bytes(prompt) + bytes(response) + [kSftEndOfText],
// of which only the first block_size + 1 bytes are kept (a sample never reads
// further).
struct SftSequence {
  uint64_t offset;      // into the dataset's byte store
  uint32_t length;      // L = min(len(seq), block_size + 1)
  uint32_t prompt_len;  // len(prompt) < block_size
};

// Appends the kept bytes of prompt + response + end-of-text to *bytes.
// Requires prompt.size() < block.
SftSequence AppendSftSequence(const std::string& prompt, const std::string& response, size_t block,
                              std::string* bytes);

// Writes one row (block inputs and targets) of a kept sequence: targets on
// the response and end-of-text positions, kIgnoreIndex elsewhere.
void SftRow(const SftSequence& seq, const uint8_t* bytes, size_t block, int64_t* inputs, int64_t* targets);

// Parses and validates options.path; errors name the file and the line.
Result<std::unique_ptr<Dataset>> OpenSftDataset(const DataOptions& options);

}  // namespace holdfast
