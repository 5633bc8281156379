// The HTML of `runctl report` (cli/report.h RenderReportHtml): the page's
// sections, its inline CSS and SVG charts. The numbers it shows come from
// report.cc's AccountTime.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "cli/format.h"
#include "cli/html_chart.h"
#include "cli/report.h"

namespace holdfast {

namespace {

std::string Num(double v, int decimals) { return HtmlNum(v, decimals); }
std::string Tick(double v) { return HtmlTick(v); }

std::string StateClass(RunState s) { return std::string("st-") + RunStateName(s); }

const char* const kCss = kPageCss;

// Bar colours of the time breakdown, one per kind of time.
struct Slice {
  const char* name;
  const char* colour;
  double s;
};

const char* GenerationColour(RunState s) {
  switch (s) {
    case RunState::kSucceeded: return "#2da44e";
    case RunState::kFailed: return "#e5534b";
    case RunState::kRunning: return "#54aeff";
    case RunState::kStopped: return "#8c959f";
    case RunState::kPreempted: return "#d4a72c";
  }
  return "#8c959f";
}

// A line chart of y over step with checkpoints (blue dashes), incidents (red)
// and redone step ranges (shaded) marked.
std::string StepChart(const std::string& title, const std::string& unit,
                      const std::vector<std::pair<int64_t, double>>& pts, const ReportData& d,
                      const std::map<int64_t, int>& incident_steps) {
  const int W = 590, H = 260, L = 56, R = 12, T = 26, B = 36;
  std::ostringstream s;
  s << "<svg width='" << W << "' height='" << H << "' viewBox='0 0 " << W << " " << H
    << "' role='img' aria-label='" << HtmlEscape(title) << "'>";
  s << "<text x='" << L << "' y='16' font-size='13' font-weight='bold'>" << HtmlEscape(title)
    << "</text>";
  if (pts.empty()) {
    s << "<text x='" << L << "' y='" << H / 2 << "' fill='#57606a'>no metrics</text></svg>";
    return s.str();
  }
  int64_t x0 = 0, x1 = pts.back().first;
  for (const auto& k : d.checkpoints) x1 = std::max(x1, k.step);
  if (x1 <= x0) x1 = x0 + 1;
  double y0 = pts[0].second, y1 = pts[0].second;
  for (const auto& p : pts) {
    y0 = std::min(y0, p.second);
    y1 = std::max(y1, p.second);
  }
  // Step times have rare spikes (a checkpoint, start-up): scale to the 98th
  // percentile so that the common case is readable; spikes are clipped at the top.
  if (unit == "ms" && pts.size() > 20) {
    std::vector<double> v;
    for (const auto& p : pts) v.push_back(p.second);
    std::sort(v.begin(), v.end());
    y1 = v[std::min(v.size() - 1, static_cast<size_t>(v.size() * 0.98))] * 1.15;
    y0 = 0;
  }
  if (y1 - y0 < 1e-9) y1 = y0 + 1;
  const double ystep = NiceStep(y1 - y0, 5);
  y0 = std::floor(y0 / ystep) * ystep;
  y1 = std::ceil(y1 / ystep) * ystep;
  auto X = [&](double x) { return L + (x - x0) * (W - L - R) / static_cast<double>(x1 - x0); };
  auto Y = [&](double y) {
    y = std::min(std::max(y, y0), y1);
    return T + (y1 - y) * (H - T - B) / (y1 - y0);
  };
  // Redone ranges.
  for (const LossRecord& l : d.time.losses) {
    if (l.redone_to <= l.redone_from) continue;
    s << "<rect x='" << Num(X(static_cast<double>(l.redone_from)), 1) << "' y='" << T << "' width='"
      << Num(X(static_cast<double>(l.redone_to)) - X(static_cast<double>(l.redone_from)), 1)
      << "' height='" << H - T - B << "' fill='#fff1e5'><title>steps " << l.redone_from + 1 << "–"
      << l.redone_to << " redone</title></rect>";
  }
  // Grid and axes.
  for (double y = y0; y <= y1 + ystep / 2; y += ystep) {
    s << "<line x1='" << L << "' x2='" << W - R << "' y1='" << Num(Y(y), 1) << "' y2='" << Num(Y(y), 1)
      << "' stroke='#eaeef2'/><text x='" << L - 6 << "' y='" << Num(Y(y) + 4, 1)
      << "' text-anchor='end'>" << Tick(y) << "</text>";
  }
  const double xstep = NiceStep(static_cast<double>(x1 - x0), 6);
  for (double x = 0; x <= static_cast<double>(x1) + 1e-9; x += xstep) {
    s << "<text x='" << Num(X(x), 1) << "' y='" << H - B + 15 << "' text-anchor='middle'>" << Tick(x)
      << "</text>";
  }
  s << "<text x='" << (L + W - R) / 2 << "' y='" << H - 4 << "' text-anchor='middle' fill='#57606a'>step</text>";
  s << "<text x='12' y='" << (T + H - B) / 2 << "' transform='rotate(-90 12 " << (T + H - B) / 2
    << ")' text-anchor='middle' fill='#57606a'>" << HtmlEscape(unit) << "</text>";
  s << "<rect x='" << L << "' y='" << T << "' width='" << W - L - R << "' height='" << H - T - B
    << "' fill='none' stroke='#8c959f'/>";
  for (const CheckpointRecord& k : d.checkpoints) {
    s << "<line x1='" << Num(X(static_cast<double>(k.step)), 1) << "' x2='"
      << Num(X(static_cast<double>(k.step)), 1) << "' y1='" << T << "' y2='" << H - B
      << "' stroke='#0969da' stroke-dasharray='3,3' opacity='0.6'><title>checkpoint step " << k.step
      << "</title></line>";
  }
  for (const auto& [step, n] : incident_steps) {
    const std::string x = Num(X(static_cast<double>(step)), 1);
    s << "<line x1='" << x << "' x2='" << x << "' y1='" << T << "' y2='" << H - B
      << "' stroke='#cf222e' stroke-width='1.5'/><text x='" << x << "' y='" << T - 3
      << "' text-anchor='middle' fill='#cf222e' font-weight='bold'>#" << n << "</text>";
  }
  s << "<polyline fill='none' stroke='#1f2328' stroke-width='1.3' points='";
  for (const auto& p : pts) s << Num(X(static_cast<double>(p.first)), 1) << "," << Num(Y(p.second), 1) << " ";
  s << "'/></svg>";
  return s.str();
}

// Attempts as rows, their generations as bars over wall-clock time; incidents
// (red, numbered), checkpoints (blue diamonds) and actions (grey ticks) on it.
std::string Timeline(const ReportData& d, const std::map<int64_t, int>& incident_number) {
  const int W = 1200, L = 90, R = 20, T = 24, row = 46;
  const int rows = static_cast<int>(d.attempts.size());
  const int H = T + rows * row + 30 + 28;
  std::ostringstream s;
  s << "<svg width='" << W << "' height='" << H << "' viewBox='0 0 " << W << " " << H
    << "' role='img' aria-label='timeline'>";
  if (d.attempts.empty()) {
    s << "<text x='" << L << "' y='" << T + 10 << "' fill='#57606a'>no attempts recorded</text></svg>";
    return s.str();
  }
  int64_t t0 = d.attempts.front().started_ms, t1 = t0;
  auto see = [&](int64_t t) {
    if (t > 0) {
      t0 = std::min(t0, t);
      t1 = std::max(t1, t);
    }
  };
  for (const AttemptRecord& a : d.attempts) {
    see(a.started_ms);
    see(a.ended_ms.value_or(d.generated_ms));
  }
  for (const EventRecord& e : d.events) see(e.time_ms);
  for (const CheckpointRecord& k : d.checkpoints) see(k.committed_ms);
  if (t1 <= t0) t1 = t0 + 1000;
  auto X = [&](int64_t t) { return L + static_cast<double>(t - t0) * (W - L - R) / static_cast<double>(t1 - t0); };
  auto row_of = [&](std::optional<int> attempt) {
    for (int i = 0; i < rows; ++i) {
      if (attempt && d.attempts[static_cast<size_t>(i)].attempt == *attempt) return i;
    }
    return rows - 1;
  };
  // Time axis (seconds/minutes since the first attempt started).
  const double span_s = static_cast<double>(t1 - t0) / 1000.0;
  const double step_s = NiceStep(span_s, 8);
  const int axis_y = T + rows * row + 8;
  for (double x = 0; x <= span_s + 1e-9; x += step_s) {
    const double px = X(t0 + static_cast<int64_t>(x * 1000));
    s << "<line x1='" << Num(px, 1) << "' x2='" << Num(px, 1) << "' y1='" << T << "' y2='" << axis_y
      << "' stroke='#eaeef2'/><text x='" << Num(px, 1) << "' y='" << axis_y + 12
      << "' text-anchor='middle'>+" << HtmlEscape(FormatDuration(x)) << "</text>";
  }
  s << "<text x='" << L << "' y='" << axis_y + 26 << "' fill='#57606a'>wall-clock time since "
    << HtmlEscape(FormatTime(t0)) << "</text>";
  for (int i = 0; i < rows; ++i) {
    const AttemptRecord& a = d.attempts[static_cast<size_t>(i)];
    const int y = T + i * row;
    s << "<text x='4' y='" << y + 20 << "' font-weight='bold'>attempt " << a.attempt << "</text>";
    s << "<text x='4' y='" << y + 33 << "' fill='#57606a'>" << RunStateName(a.state) << "</text>";
    s << "<line x1='" << Num(X(a.started_ms), 1) << "' x2='"
      << Num(X(a.ended_ms.value_or(d.generated_ms)), 1) << "' y1='" << y + 16 << "' y2='" << y + 16
      << "' stroke='#8c959f' stroke-width='1'/>";
  }
  for (const GenerationRecord& g : d.generations) {
    const int y = T + row_of(g.attempt) * row;
    const int64_t end = g.ended_ms.value_or(d.generated_ms);
    const double x = X(g.started_ms), w = std::max(2.0, X(end) - X(g.started_ms));
    const int64_t last = g.last_step.value_or(g.start_step);
    s << "<rect x='" << Num(x, 1) << "' y='" << y + 6 << "' width='" << Num(w, 1)
      << "' height='20' rx='3' fill='" << GenerationColour(g.state) << "'><title>attempt " << g.attempt
      << " generation " << g.generation << ": steps " << g.start_step << "–" << last
      << (g.restore_tier.empty() ? "" : " (from " + RestoreTierText(g.restore_tier) + ")") << ", "
      << RunStateName(g.state) << (g.cause.empty() ? "" : ": " + HtmlEscape(g.cause)) << "</title></rect>";
    if (w > 70) {
      s << "<text x='" << Num(x + 4, 1) << "' y='" << y + 20 << "' fill='#fff'>gen " << g.generation
        << ": " << g.start_step << "–" << last << "</text>";
    }
  }
  for (const CheckpointRecord& k : d.checkpoints) {
    const int y = T + row_of(k.attempt) * row + 36;
    const double x = X(k.committed_ms);
    s << "<path d='M" << Num(x, 1) << "," << y - 5 << " l5,5 l-5,5 l-5,-5 z' fill='#0969da'><title>checkpoint step "
      << k.step << " committed " << HtmlEscape(FormatTime(k.committed_ms)) << " ("
      << CheckpointStateName(k.state) << ")</title></path>";
  }
  for (const EventRecord& e : d.events) {
    const int y = T + row_of(e.attempt) * row;
    const double x = X(e.time_ms);
    auto n = incident_number.find(e.id);
    if (n != incident_number.end()) {
      s << "<line x1='" << Num(x, 1) << "' x2='" << Num(x, 1) << "' y1='" << y << "' y2='" << y + 30
        << "' stroke='#cf222e' stroke-width='2'/><path d='M" << Num(x, 1) << "," << y + 2 << " l-6,-9 h12 z' fill='#cf222e'><title>#"
        << n->second << " " << HtmlEscape(e.kind) << ": " << HtmlEscape(e.summary) << "</title></path>"
        << "<text x='" << Num(x + 8, 1) << "' y='" << y + 1 << "' fill='#cf222e' font-weight='bold'>#"
        << n->second << " " << HtmlEscape(e.kind) << "</text>";
    } else {
      s << "<line x1='" << Num(x, 1) << "' x2='" << Num(x, 1) << "' y1='" << y + 28 << "' y2='" << y + 42
        << "' stroke='#57606a' stroke-width='1.5'><title>" << HtmlEscape(e.kind) << ": "
        << HtmlEscape(e.summary) << "</title></line>";
    }
  }
  s << "</svg>";
  return s.str();
}

std::string Card(const std::string& value, const std::string& label) {
  return "<div class='card'><b>" + HtmlEscape(value) + "</b><span>" + HtmlEscape(label) + "</span></div>";
}

std::string Percent(double part, double whole) {
  return whole > 0 ? Num(100.0 * part / whole, 1) + "%" : "-";
}

// Incidents numbered #1, #2, ... in the order they happened, and where on
// the step axis each struck: its generation's last step.
struct NumberedIncidents {
  std::vector<const EventRecord*> list;
  std::map<int64_t, int> number;  // event id -> its number
  std::map<int64_t, int> steps;   // step -> incident number
};

NumberedIncidents NumberIncidents(const ReportData& d) {
  NumberedIncidents inc;
  for (const EventRecord& e : d.events) {
    if (!e.incident) continue;
    inc.list.push_back(&e);
    inc.number[e.id] = static_cast<int>(inc.list.size());
  }
  for (const EventRecord* e : inc.list) {
    for (const GenerationRecord& g : d.generations) {
      if (e->attempt == g.attempt && e->generation == g.generation) {
        inc.steps.emplace(g.last_step.value_or(g.start_step), inc.number[e->id]);
      }
    }
  }
  return inc;
}

// The title, the run's state and the cards.
void Summary(std::ostream& h, const ReportData& d, const NumberedIncidents& inc) {
  const TimeAccount& t = d.time;
  const RunRecord& run = d.run;
  // Restarts in place: every generation after its attempt's first.
  int restarts = 0;
  for (const GenerationRecord& g : d.generations) restarts += g.generation > 0 ? 1 : 0;

  h << "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>Holdfast run "
    << HtmlEscape(run.run_id) << " (" << HtmlEscape(run.name) << ")</title><style>" << kCss
    << "</style></head><body>\n";
  h << "<h1>Run " << HtmlEscape(run.run_id) << " <span class='sub'>(" << HtmlEscape(run.name)
    << ")</span></h1>\n";
  h << "<div><b class='" << StateClass(run.state) << "'>" << RunStateName(run.state) << "</b>"
    << (run.cause.empty() ? "" : ": " + HtmlEscape(run.cause)) << "</div>\n";
  h << "<div class='sub'>" << HtmlEscape(run.run_dir) << " · world size " << run.world_size << " · "
    << SchedulerKindName(run.scheduler)
    << (run.slurm_job_id.empty() ? "" : " job " + HtmlEscape(run.slurm_job_id))
    << (run.nodes.empty() ? "" : " · nodes " + HtmlEscape([&] {
          std::string n;
          for (const std::string& x : run.nodes) n += (n.empty() ? "" : ",") + x;
          return n;
        }()))
    << " · created " << HtmlEscape(FormatTime(run.created_ms))
    << (run.ended_ms ? " · ended " + HtmlEscape(FormatTime(*run.ended_ms)) : "")
    << " · report generated " << HtmlEscape(FormatTime(d.generated_ms)) << "</div>\n";

  h << "<div class='cards'>" << Card(FormatDuration(t.effective_s), "effective training time")
    << Card(Percent(t.effective_s, t.wall_s), "of " + FormatDuration(t.wall_s) + " wall time")
    << Card(FormatDuration(t.lost_s), "lost") << Card(run.last_step ? std::to_string(*run.last_step) : "-", "last step")
    << Card(std::to_string(inc.list.size()), "incidents") << Card(std::to_string(restarts), "restarts")
    << Card(std::to_string(d.checkpoints.size()), "checkpoints")
    << Card(std::to_string(d.attempts.size()), "attempts") << "</div>\n";
}

// Where the time went: the bar, the table of kinds, the failed generations.
void TimeBreakdown(std::ostream& h, const ReportData& d, const NumberedIncidents& inc) {
  const TimeAccount& t = d.time;
  h << "<h2>Where the time went</h2>\n";
  const Slice slices[] = {{"effective", "#2da44e", t.effective_s},
                          {"detection", "#cf222e", t.detection_s},
                          {"restart", "#bf8700", t.restart_s},
                          {"redone steps", "#fb8f44", t.redone_s},
                          {"checkpoint stalls", "#0969da", t.checkpoint_stall_s}};
  {
    const int W = 1200, Hb = 26;
    h << "<svg width='" << W << "' height='" << Hb << "' viewBox='0 0 " << W << " " << Hb
      << "' role='img' aria-label='time breakdown'>";
    double x = 0;
    const double total = std::max(t.wall_s, t.effective_s + t.lost_s);
    for (const Slice& sl : slices) {
      if (total <= 0 || sl.s <= 0) continue;
      const double w = W * sl.s / total;
      h << "<rect x='" << Num(x, 1) << "' y='0' width='" << Num(w, 1) << "' height='" << Hb
        << "' fill='" << sl.colour << "'><title>" << sl.name << ": " << FormatDuration(sl.s)
        << "</title></rect>";
      x += w;
    }
    h << "</svg>\n<div class='legend'>";
    for (const Slice& sl : slices) {
      h << "<span><i class='sw' style='background:" << sl.colour << "'></i>" << sl.name << " "
        << FormatDuration(sl.s) << " (" << Percent(sl.s, t.wall_s) << ")</span>";
    }
    h << "</div>\n";
  }
  h << "<table><tr><th>kind</th><th>seconds</th><th>how it is counted (docs/report.md)</th></tr>"
    << "<tr><td>wall time</td><td class='n'>" << Num(t.wall_s, 1)
    << "</td><td>the attempts' durations summed (time between attempts, " << Num(t.between_attempts_s, 1)
    << " s, is not counted)</td></tr>"
    << "<tr><td>detection</td><td class='n'>" << Num(t.detection_s, 1)
    << "</td><td>incident time − the failed generation's last step report</td></tr>"
    << "<tr><td>restart</td><td class='n'>" << Num(t.restart_s, 1)
    << "</td><td>the next generation's start − the incident time</td></tr>"
    << "<tr><td>redone steps</td><td class='n'>" << Num(t.redone_s, 1)
    << "</td><td>(steps reached − step resumed from) × step time " << Num(t.step_ms, 1) << " ms ("
    << HtmlEscape(t.step_ms_source.empty() ? "unknown" : t.step_ms_source) << ")</td></tr>"
    << "<tr><td>checkpoint stalls</td><td class='n'>" << Num(t.checkpoint_stall_s, 1)
    << "</td><td>for each checkpoint at step k: the time from step k to k+1 over the median step "
       "interval (metrics.jsonl)"
    << (d.metrics.empty() ? "; unknown without metrics" : "") << "</td></tr>"
    << "<tr><td><b>effective</b></td><td class='n'><b>" << Num(t.effective_s, 1)
    << "</b></td><td>wall time − the four above</td></tr></table>\n";
  if (!t.losses.empty()) {
    h << "<table><tr><th>failed generation</th><th>incident</th><th>detection</th><th>restart</th>"
         "<th>redone steps</th><th>redone time</th></tr>";
    for (const LossRecord& l : t.losses) {
      std::string which = "-";
      if (l.incident_id) {
        auto n = inc.number.find(*l.incident_id);
        if (n != inc.number.end()) {
          which = "#" + std::to_string(n->second) + " " + inc.list[static_cast<size_t>(n->second - 1)]->kind;
        }
      }
      h << "<tr><td>attempt " << l.attempt << ", generation " << l.generation << "</td><td>"
        << HtmlEscape(which) << "</td><td class='n'>" << Num(l.detection_s, 1) << " s</td><td class='n'>"
        << Num(l.restart_s, 1) << " s</td><td>"
        << (l.redone_to > l.redone_from
                ? std::to_string(l.redone_from + 1) + "–" + std::to_string(l.redone_to) + " (" +
                      std::to_string(l.redone_to - l.redone_from) + ")"
                : std::string("none"))
        << "</td><td class='n'>" << Num(l.redone_s, 1) << " s</td></tr>";
    }
    h << "</table>\n";
  }
}

// Loss and step time over steps.
void Charts(std::ostream& h, const ReportData& d, const NumberedIncidents& inc) {
  h << "<h2>Training</h2>\n<div class='sub'>metrics: " << HtmlEscape(d.metrics_source)
    << (d.metrics.empty() ? "" : " (" + std::to_string(d.metrics.size()) + " steps)")
    << ". <span style='color:#0969da'>- - checkpoint</span> · <span style='color:#cf222e'>| incident "
       "(at its generation's last step)</span> · <span style='background:#fff1e5'>&nbsp;steps redone&nbsp;</span></div>\n";
  std::vector<std::pair<int64_t, double>> loss, step_ms;
  for (const MetricPoint& p : d.metrics) {
    loss.push_back({p.step, p.loss});
    step_ms.push_back({p.step, p.step_ms});
  }
  h << "<div class='charts'>" << StepChart("Loss", "loss", loss, d, inc.steps)
    << StepChart("Step time", "ms", step_ms, d, inc.steps) << "</div>\n";
}

// The timeline and the table of generations.
void TimelineSection(std::ostream& h, const ReportData& d, const NumberedIncidents& inc) {
  h << "<h2>Timeline</h2>\n<div class='legend'>"
    << "<span><i class='sw' style='background:#2da44e'></i>generation succeeded</span>"
    << "<span><i class='sw' style='background:#e5534b'></i>failed</span>"
    << "<span><i class='sw' style='background:#54aeff'></i>running</span>"
    << "<span><i class='sw' style='background:#8c959f'></i>stopped</span>"
    << "<span><i class='sw' style='background:#d4a72c'></i>preempted</span>"
    << "<span style='color:#cf222e'>▼ incident</span><span style='color:#0969da'>◆ checkpoint</span>"
    << "<span style='color:#57606a'>| action (restart, resume, …)</span></div>\n"
    << Timeline(d, inc.number) << "\n";
  h << "<table><tr><th>attempt</th><th>gen</th><th>started</th><th>ended</th><th>steps</th><th>restored from</th>"
       "<th>state</th></tr>";
  for (const GenerationRecord& g : d.generations) {
    h << "<tr><td>" << g.attempt << "</td><td>" << g.generation << "</td><td>"
      << HtmlEscape(FormatTime(g.started_ms)) << "</td><td>"
      << HtmlEscape(g.ended_ms ? FormatTime(*g.ended_ms) : "-") << "</td><td class='n'>" << g.start_step
      << "–" << g.last_step.value_or(g.start_step) << "</td><td>"
      << HtmlEscape(g.restore_tier.empty() ? "-" : RestoreTierText(g.restore_tier)) << "</td><td class='"
      << StateClass(g.state) << "'>"
      << RunStateName(g.state) << (g.cause.empty() ? "" : ": " + HtmlEscape(g.cause)) << "</td></tr>";
  }
  h << "</table>\n";
}

// Each incident with its triage text.
void IncidentsSection(std::ostream& h, const ReportData& d, const NumberedIncidents& inc) {
  h << "<h2>Incidents (" << inc.list.size() << ")</h2>\n";
  if (inc.list.empty()) h << "<p class='sub'>none recorded</p>\n";
  for (const EventRecord* e : inc.list) {
    h << "<div class='inc' id='incident-" << e->id << "'><h3>#" << inc.number.at(e->id) << " "
      << HtmlEscape(e->kind);
    if (e->rank) h << " · rank " << *e->rank;
    if (!e->node.empty()) h << " · " << HtmlEscape(e->node);
    h << " · " << HtmlEscape(FormatTime(e->time_ms));
    if (e->attempt) h << " · attempt " << *e->attempt;
    if (e->generation) h << ", generation " << *e->generation;
    h << "</h3><div>" << HtmlEscape(e->summary) << "</div>";
    if (!e->action.empty()) h << "<div class='sub'>action: " << HtmlEscape(e->action) << "</div>";
    auto tr = d.triage.find(e->id);
    if (tr != d.triage.end()) h << "<pre>" << HtmlEscape(tr->second) << "</pre>";
    h << "</div>\n";
  }
}

// The checkpoints with their stalls.
void CheckpointsSection(std::ostream& h, const ReportData& d) {
  const TimeAccount& t = d.time;
  h << "<h2>Checkpoints (" << d.checkpoints.size() << ")</h2>\n";
  if (d.checkpoints.empty()) {
    h << "<p class='sub'>none recorded</p>\n";
  } else {
    h << "<table><tr><th>step</th><th>committed</th><th>bytes</th><th>attempt/gen</th><th>state</th>"
         "<th>stall</th><th>path</th></tr>";
    for (const CheckpointRecord& k : d.checkpoints) {
      auto stall = t.checkpoint_stall_ms.find(k.step);
      h << "<tr><td class='n'>" << k.step << "</td><td>" << HtmlEscape(FormatTime(k.committed_ms))
        << "</td><td class='n'>" << k.bytes << "</td><td>"
        << (k.attempt ? std::to_string(*k.attempt) : "-") << "/"
        << (k.generation ? std::to_string(*k.generation) : "-") << "</td><td>"
        << CheckpointStateName(k.state) << (k.reason.empty() ? "" : ": " + HtmlEscape(k.reason))
        << "</td><td class='n'>"
        << (stall == t.checkpoint_stall_ms.end() ? "-" : Num(stall->second, 1) + " ms") << "</td><td>"
        << HtmlEscape(k.path) << "</td></tr>";
    }
    h << "</table>\n";
  }
}

// Every event.
void EventsSection(std::ostream& h, const ReportData& d) {
  h << "<h2>Events (" << d.events.size() << ")</h2>\n<table><tr><th>time</th><th>kind</th><th>att/gen</th>"
       "<th>summary</th><th>action</th></tr>";
  for (const EventRecord& e : d.events) {
    h << "<tr><td>" << HtmlEscape(FormatTime(e.time_ms)) << "</td><td>"
      << (e.incident ? "<b>" + HtmlEscape(e.kind) + "</b>" : HtmlEscape(e.kind)) << "</td><td>"
      << (e.attempt ? std::to_string(*e.attempt) : "-") << "/"
      << (e.generation ? std::to_string(*e.generation) : "-") << "</td><td>" << HtmlEscape(e.summary)
      << "</td><td>" << HtmlEscape(e.action) << "</td></tr>";
  }
  h << "</table>\n</body></html>\n";
}

}  // namespace

std::string RenderReportHtml(const ReportData& d) {
  const NumberedIncidents inc = NumberIncidents(d);
  std::ostringstream h;
  Summary(h, d, inc);
  TimeBreakdown(h, d, inc);
  Charts(h, d, inc);
  TimelineSection(h, d, inc);
  IncidentsSection(h, d, inc);
  CheckpointsSection(h, d);
  EventsSection(h, d);
  return h.str();
}

}  // namespace holdfast
