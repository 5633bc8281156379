// `runctl compare --html FILE` (and the page `runctl sweep` writes): runs side
// by side by an eval metric as one self-contained HTML page — the metric over
// the step, a curve per run (its best point ringed), then the tables the
// terminal shows. Pure: CmdCompare fills CompareData from lineage.
//
// Thread-safety: plain values and a pure function.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace holdfast {

struct CompareSeries {
  std::string run_id;
  std::string name;
  std::string state;                               // "succeeded", ...
  std::vector<std::pair<int64_t, double>> points;  // (step, value), ascending step
};

struct CompareData {
  std::string metric;
  bool higher_is_better = false;
  std::string generated;  // when the page was made ("2026-12-06 14:20:00Z")
  std::vector<CompareSeries> runs;  // in the order given (oldest first by default)
};

// The index of the best point of `points` (first of equals); -1 when empty.
int BestPoint(const std::vector<std::pair<int64_t, double>>& points, bool higher_is_better);

// The whole page; every text from the data is HTML-escaped.
std::string RenderCompareHtml(const CompareData& data);

}  // namespace holdfast
