// What the HTML pages of runctl (report, compare) share: number formats for
// SVG coordinates and tick labels, tick spacing, and the page's CSS.
//
// Thread-safety: pure functions and constants.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

namespace holdfast {

// `v` with `decimals` digits after the point ("12.5").
inline std::string HtmlNum(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

// A tick value without trailing zeros ("0.5", "2", "1500").
inline std::string HtmlTick(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// Tick spacing of about `n` ticks over `span`: 1, 2 or 5 times a power of 10.
inline double NiceStep(double span, int n) {
  if (!(span > 0)) return 1;
  const double raw = span / n;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= m * mag) return m * mag;
  }
  return 10 * mag;
}

inline constexpr char kPageCss[] = R"(
body{font:14px/1.45 -apple-system,"Segoe UI",Helvetica,Arial,sans-serif;color:#1f2328;margin:24px 32px;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
.sub{color:#57606a}.cards{display:flex;gap:10px;flex-wrap:wrap;margin:14px 0}
.card{border:1px solid #d0d7de;border-radius:6px;padding:8px 14px;flex:1;min-width:90px}
.card b{display:block;font-size:20px}.card span{color:#57606a;font-size:12px}
table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.n{text-align:right;font-variant-numeric:tabular-nums}
.charts{display:flex;gap:16px;flex-wrap:wrap}svg{font:11px sans-serif}
pre{background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;padding:8px 10px;overflow-x:auto;font-size:12px;white-space:pre-wrap}
.inc{border-left:4px solid #cf222e;padding-left:12px;margin:14px 0}.inc h3{margin:0 0 4px;font-size:15px}
.legend span{display:inline-block;margin-right:14px}.sw{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:4px;vertical-align:-1px}
.st-succeeded{color:#1a7f37}.st-failed{color:#cf222e}.st-running{color:#0969da}.st-stopped{color:#57606a}.st-preempted{color:#9a6700}
)";

}  // namespace holdfast
