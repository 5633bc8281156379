// Internal to holdfast::data: the JSONL preference-pair dataset
// (DataFormat::kPreference) that DPO trains on. Dataset::Open dispatches here;
// see dataset.h for the contract and docs/data-sampling.md for the layout.
#pragma once

#include <memory>

#include "trainer/data/dataset.h"

namespace holdfast {

// Parses and validates options.path; errors name the file and the line.
Result<std::unique_ptr<Dataset>> OpenPreferenceDataset(const DataOptions& options);

}  // namespace holdfast
