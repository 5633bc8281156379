#include "cli/compare_html.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "cli/html_chart.h"
#include "cli/report.h"  // HtmlEscape

namespace holdfast {
namespace {

// Distinct colours for up to 10 curves, then again.
const char* const kColours[] = {"#0969da", "#cf222e", "#1a7f37", "#9a6700", "#8250df",
                                "#bc4c00", "#0550ae", "#bf3989", "#116329", "#57606a"};

const char* ColourOf(size_t i) { return kColours[i % (sizeof(kColours) / sizeof(kColours[0]))]; }

std::string Value(double v) { return HtmlNum(v, 4); }

// The metric over the step, a polyline and dots per run, the best point ringed.
std::string Chart(const CompareData& d) {
  const int W = 760, H = 360, L = 60, R = 16, T = 28, B = 38;
  std::ostringstream s;
  s << "<svg width='" << W << "' height='" << H << "' viewBox='0 0 " << W << " " << H << "' role='img' aria-label='"
    << HtmlEscape(d.metric) << " over the step'>";
  s << "<text x='" << L << "' y='17' font-size='13' font-weight='bold'>" << HtmlEscape(d.metric) << " ("
    << (d.higher_is_better ? "higher" : "lower") << " is better)</text>";
  bool any = false;
  int64_t x1 = 1;
  double y0 = 0, y1 = 0;
  for (const CompareSeries& r : d.runs) {
    for (const auto& [step, v] : r.points) {
      if (!any) y0 = y1 = v;
      any = true;
      x1 = std::max(x1, step);
      y0 = std::min(y0, v);
      y1 = std::max(y1, v);
    }
  }
  if (!any) {
    s << "<text x='" << L << "' y='" << H / 2 << "' fill='#57606a'>no run has a value of this metric</text></svg>";
    return s.str();
  }
  if (y1 - y0 < 1e-12) {
    y0 -= 0.5;
    y1 += 0.5;
  }
  const double ystep = NiceStep(y1 - y0, 5);
  y0 = std::floor(y0 / ystep) * ystep;
  y1 = std::ceil(y1 / ystep) * ystep;
  auto X = [&](double x) { return L + x * (W - L - R) / static_cast<double>(x1); };
  auto Y = [&](double y) { return T + (y1 - y) * (H - T - B) / (y1 - y0); };
  for (double y = y0; y <= y1 + ystep / 2; y += ystep) {
    s << "<line x1='" << L << "' x2='" << W - R << "' y1='" << HtmlNum(Y(y), 1) << "' y2='" << HtmlNum(Y(y), 1)
      << "' stroke='#eaeef2'/><text x='" << L - 6 << "' y='" << HtmlNum(Y(y) + 4, 1) << "' text-anchor='end'>"
      << HtmlTick(y) << "</text>";
  }
  const double xstep = NiceStep(static_cast<double>(x1), 6);
  for (double x = 0; x <= static_cast<double>(x1) + 1e-9; x += xstep) {
    s << "<text x='" << HtmlNum(X(x), 1) << "' y='" << H - B + 15 << "' text-anchor='middle'>" << HtmlTick(x)
      << "</text>";
  }
  s << "<text x='" << (L + W - R) / 2 << "' y='" << H - 4 << "' text-anchor='middle' fill='#57606a'>step</text>";
  s << "<rect x='" << L << "' y='" << T << "' width='" << W - L - R << "' height='" << H - T - B
    << "' fill='none' stroke='#8c959f'/>";
  for (size_t i = 0; i < d.runs.size(); ++i) {
    const CompareSeries& r = d.runs[i];
    if (r.points.empty()) continue;
    const std::string label = r.run_id + (r.name.empty() ? "" : " (" + r.name + ")");
    s << "<g class='run' data-run='" << HtmlEscape(r.run_id) << "'><polyline fill='none' stroke='" << ColourOf(i)
      << "' stroke-width='2' points='";
    for (const auto& [step, v] : r.points) {
      s << HtmlNum(X(static_cast<double>(step)), 1) << "," << HtmlNum(Y(v), 1) << " ";
    }
    s << "'><title>" << HtmlEscape(label) << "</title></polyline>";
    const int best = BestPoint(r.points, d.higher_is_better);
    for (size_t k = 0; k < r.points.size(); ++k) {
      const auto& [step, v] = r.points[k];
      s << "<circle cx='" << HtmlNum(X(static_cast<double>(step)), 1) << "' cy='" << HtmlNum(Y(v), 1) << "' r='"
        << (static_cast<int>(k) == best ? 6 : 3) << "' fill='" << (static_cast<int>(k) == best ? "#fff" : ColourOf(i))
        << "' stroke='" << ColourOf(i) << "' stroke-width='2'><title>" << HtmlEscape(label) << ": step " << step
        << ", " << HtmlEscape(d.metric) << " " << Value(v) << (static_cast<int>(k) == best ? " (best)" : "")
        << "</title></circle>";
    }
    s << "</g>";
  }
  s << "</svg>";
  return s.str();
}

}  // namespace

int BestPoint(const std::vector<std::pair<int64_t, double>>& points, bool higher_is_better) {
  int best = -1;
  for (size_t k = 0; k < points.size(); ++k) {
    const double v = points[k].second;
    if (best < 0 || (higher_is_better ? v > points[static_cast<size_t>(best)].second
                                      : v < points[static_cast<size_t>(best)].second)) {
      best = static_cast<int>(k);
    }
  }
  return best;
}

std::string RenderCompareHtml(const CompareData& d) {
  std::ostringstream h;
  h << "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'><title>runs compared by "
    << HtmlEscape(d.metric) << "</title><style>" << kPageCss << "</style></head><body>\n";
  h << "<h1>" << d.runs.size() << " run" << (d.runs.size() == 1 ? "" : "s") << " compared by "
    << HtmlEscape(d.metric) << "</h1>\n<div class='sub'>at each run's evaluated checkpoints; "
    << (d.higher_is_better ? "higher" : "lower") << " is better; made " << HtmlEscape(d.generated)
    << " by runctl compare</div>\n";
  h << "<div class='charts'>" << Chart(d) << "</div>\n";
  h << "<h2>Runs</h2>\n<table><tr><th></th><th>run</th><th>name</th><th>state</th><th>best</th><th>at step</th>"
       "<th>last</th><th>at step</th></tr>\n";
  std::set<int64_t> steps;
  for (size_t i = 0; i < d.runs.size(); ++i) {
    const CompareSeries& r = d.runs[i];
    h << "<tr><td><span class='sw' style='background:" << ColourOf(i) << "'></span></td><td>"
      << HtmlEscape(r.run_id) << "</td><td>" << HtmlEscape(r.name) << "</td><td class='st-" << HtmlEscape(r.state)
      << "'>" << HtmlEscape(r.state) << "</td>";
    const int best = BestPoint(r.points, d.higher_is_better);
    if (best < 0) {
      h << "<td>-</td><td>-</td><td>-</td><td>-</td>";
    } else {
      const auto& b = r.points[static_cast<size_t>(best)];
      h << "<td class='n'>" << Value(b.second) << "</td><td class='n'>" << b.first << "</td><td class='n'>"
        << Value(r.points.back().second) << "</td><td class='n'>" << r.points.back().first << "</td>";
    }
    h << "</tr>\n";
    for (const auto& p : r.points) steps.insert(p.first);
  }
  h << "</table>\n";
  if (!steps.empty()) {
    h << "<h2>By step</h2>\n<table><tr><th>step</th>";
    for (const CompareSeries& r : d.runs) h << "<th>" << HtmlEscape(r.run_id) << "</th>";
    h << "</tr>\n";
    for (int64_t step : steps) {
      h << "<tr><td class='n'>" << step << "</td>";
      for (const CompareSeries& r : d.runs) {
        auto it = std::find_if(r.points.begin(), r.points.end(), [&](const auto& p) { return p.first == step; });
        h << "<td class='n'>" << (it == r.points.end() ? "-" : Value(it->second)) << "</td>";
      }
      h << "</tr>\n";
    }
    h << "</table>\n";
  }
  h << "</body></html>\n";
  return h.str();
}

}  // namespace holdfast
