// Internal to holdfast::data: the JSONL prompt/response dataset (DataFormat::kSft).
// Dataset::Open dispatches here; see dataset.h for the contract and
// docs/data-sampling.md for the exact sample layout.
#pragma once

#include <memory>

#include "trainer/data/dataset.h"

namespace holdfast {

// Parses and validates options.path; errors name the file and the line.
Result<std::unique_ptr<Dataset>> OpenSftDataset(const DataOptions& options);

}  // namespace holdfast
