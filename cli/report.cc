#include "cli/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <sstream>

#include "lineage/incident.h"

namespace holdfast {

std::string RestoreTierText(const std::string& tier) {
  if (tier == "memory") return "memory snapshot";
  if (tier == "disk") return "disk checkpoint";
  if (tier == "none") return "a fresh start";
  return tier;
}

std::string FormatTime(int64_t ms) {
  if (ms <= 0) return "-";
  time_t secs = static_cast<time_t>(ms / 1000);
  struct tm tm {};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%SZ", &tm);
  return buf;
}

std::string FormatTimeMs(int64_t ms, bool iso) {
  if (ms <= 0) return "-";
  time_t secs = static_cast<time_t>(ms / 1000);
  struct tm tm {};
  gmtime_r(&secs, &tm);
  char buf[32], out[48];
  std::strftime(buf, sizeof(buf), iso ? "%Y-%m-%dT%H:%M:%S" : "%Y-%m-%d %H:%M:%S", &tm);
  std::snprintf(out, sizeof(out), "%s.%03dZ", buf, static_cast<int>(ms % 1000));
  return out;
}

std::string FormatDuration(double s) {
  char buf[64];
  if (!(s > 0)) s = 0;
  if (s < 60) {
    std::snprintf(buf, sizeof(buf), "%.1fs", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof(buf), "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  } else {
    int64_t t = static_cast<int64_t>(s);
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", static_cast<long long>(t / 3600),
                  static_cast<long long>((t % 3600) / 60));
  }
  return buf;
}

std::string HtmlEscape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// ---- metrics ----

namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

std::vector<MetricPoint> ParseMetricsJsonl(std::istream& in) {
  std::map<int64_t, MetricPoint> by_step;  // the last line of each step wins
  std::string line;
  std::optional<int64_t> previous;  // the step of the previous line
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) continue;
    MetricPoint p;
    p.step = j["step"].get<int64_t>();
    if (j.contains("loss") && j["loss"].is_number()) p.loss = j["loss"].get<double>();
    if (j.contains("step_ms") && j["step_ms"].is_number()) p.step_ms = j["step_ms"].get<double>();
    if (j.contains("time_ms") && j["time_ms"].is_number_integer()) p.time_ms = j["time_ms"].get<int64_t>();
    p.follows_previous = previous && *previous + 1 == p.step;
    previous = p.step;
    by_step[p.step] = p;
  }
  std::vector<MetricPoint> out;
  out.reserve(by_step.size());
  for (const auto& [step, p] : by_step) out.push_back(p);
  return out;
}

std::optional<double> MedianStepMs(const std::vector<MetricPoint>& points) {
  if (points.empty()) return std::nullopt;
  std::vector<double> v;
  v.reserve(points.size());
  for (const MetricPoint& p : points) v.push_back(p.step_ms);
  return Median(std::move(v));
}

// ---- time accounting ----

namespace {

// Checkpoint stalls: training waits while a save stages its state (between
// step k's end and step k+1's). With time stamps, the stall is the gap from
// step k to k+1 over the median gap; without, step k+1's step_ms over the
// median. Only where k and k+1 ran in one process (consecutive lines of
// metrics.jsonl).
void AccountCheckpointStalls(const std::vector<CheckpointRecord>& checkpoints, const std::vector<MetricPoint>& metrics,
                             TimeAccount* t) {
  if (metrics.empty()) return;
  std::map<int64_t, const MetricPoint*> by_step;
  for (const MetricPoint& p : metrics) by_step[p.step] = &p;
  std::vector<double> gaps;
  for (size_t i = 1; i < metrics.size(); ++i) {
    if (metrics[i].step == metrics[i - 1].step + 1 && metrics[i].follows_previous &&
        metrics[i].time_ms && metrics[i - 1].time_ms) {
      gaps.push_back(static_cast<double>(*metrics[i].time_ms - *metrics[i - 1].time_ms));
    }
  }
  const double median_gap = Median(gaps);
  for (const CheckpointRecord& k : checkpoints) {
    auto a = by_step.find(k.step), b = by_step.find(k.step + 1);
    if (a == by_step.end() || b == by_step.end() || !b->second->follows_previous ||
        t->checkpoint_stall_ms.count(k.step) > 0) {
      continue;
    }
    double stall = 0;
    if (a->second->time_ms && b->second->time_ms && !gaps.empty()) {
      const double gap = static_cast<double>(*b->second->time_ms - *a->second->time_ms);
      // A gap of many steps is a restart between them, not a stall.
      if (gap > 20 * std::max(median_gap, 1.0)) continue;
      stall = gap - median_gap;
    } else {
      stall = b->second->step_ms - t->step_ms;
    }
    stall = std::max(0.0, stall);
    t->checkpoint_stall_ms[k.step] = stall;
    t->checkpoint_stall_s += stall / 1000.0;
  }
}

}  // namespace

TimeAccount AccountTime(const std::vector<AttemptRecord>& attempts_in,
                        const std::vector<GenerationRecord>& generations,
                        const std::vector<CheckpointRecord>& checkpoints,
                        const std::vector<EventRecord>& events,
                        const std::vector<MetricPoint>& metrics, int64_t now_ms) {
  TimeAccount t;
  std::vector<AttemptRecord> attempts = attempts_in;
  std::sort(attempts.begin(), attempts.end(),
            [](const AttemptRecord& a, const AttemptRecord& b) { return a.attempt < b.attempt; });
  for (size_t i = 0; i < attempts.size(); ++i) {
    const AttemptRecord& a = attempts[i];
    t.wall_s += std::max<int64_t>(0, a.ended_ms.value_or(now_ms) - a.started_ms) / 1000.0;
    if (i > 0 && attempts[i - 1].ended_ms) {
      t.between_attempts_s += std::max<int64_t>(0, a.started_ms - *attempts[i - 1].ended_ms) / 1000.0;
    }
  }

  // The step time: the median of metrics.jsonl, else each generation's pace
  // from its step reports (which includes its start-up, so it errs long).
  if (std::optional<double> m = MedianStepMs(metrics); m && *m > 0) {
    t.step_ms = *m;
    t.step_ms_source = "metrics.jsonl median";
  } else {
    std::vector<double> paces;
    for (const GenerationRecord& g : generations) {
      const int64_t steps = g.last_step.value_or(g.start_step) - g.start_step;
      if (steps > 0 && g.last_step_ms && *g.last_step_ms > g.started_ms) {
        paces.push_back(static_cast<double>(*g.last_step_ms - g.started_ms) / static_cast<double>(steps));
      }
    }
    if (!paces.empty()) {
      t.step_ms = Median(std::move(paces));
      t.step_ms_source = "lineage estimate";
    }
  }

  std::vector<GenerationRecord> gens = generations;
  std::sort(gens.begin(), gens.end(), [](const GenerationRecord& a, const GenerationRecord& b) {
    return a.attempt != b.attempt ? a.attempt < b.attempt : a.generation < b.generation;
  });
  // The incident that ended g: the last of its incidents recorded before its
  // end. One that did not stop it (a failed save the run trained on after)
  // comes earlier, or g went on to succeed or still runs: then none.
  auto incident_of = [&](const GenerationRecord& g) -> const EventRecord* {
    if (!g.ended_ms || g.state == RunState::kSucceeded) return nullptr;
    const EventRecord* best = nullptr;
    for (const EventRecord& e : events) {
      if (!e.incident || e.attempt != g.attempt || e.generation != g.generation) continue;
      const bool before_end = g.ended_seq ? e.seq <= *g.ended_seq : e.time_ms <= *g.ended_ms;
      if (before_end && (best == nullptr || e.seq > best->seq)) best = &e;
    }
    return best;
  };
  auto attempt_start = [&](int attempt) -> int64_t {
    for (const AttemptRecord& a : attempts) {
      if (a.attempt == attempt) return a.started_ms;
    }
    return 0;
  };
  for (size_t i = 0; i < gens.size(); ++i) {
    const GenerationRecord& g = gens[i];
    const GenerationRecord* next = i + 1 < gens.size() ? &gens[i + 1] : nullptr;
    const EventRecord* inc = incident_of(g);
    if (next == nullptr && inc == nullptr) continue;
    LossRecord l;
    l.attempt = g.attempt;
    l.generation = g.generation;
    int64_t restart_from = g.ended_ms.value_or(next ? next->started_ms : now_ms);
    if (inc != nullptr) {
      l.incident_id = inc->id;
      const int64_t progress = std::max(g.started_ms, g.last_step_ms.value_or(g.started_ms));
      l.detection_s = std::max<int64_t>(0, inc->time_ms - progress) / 1000.0;
      // A hang's evidence holds how long no step completed before it was
      // declared (the generation's last step report is written at its end,
      // after the incident): that, within the generation's own time.
      if (Result<IncidentEvidence> ev = ParseIncidentEvidence(inc->evidence_json); ev.ok() && ev->stalled_s) {
        const double ran_s = std::max<int64_t>(0, inc->time_ms - g.started_ms) / 1000.0;
        l.detection_s = std::max(l.detection_s, std::min(*ev->stalled_s, ran_s));
      }
      restart_from = inc->time_ms;
    }
    if (next != nullptr) {
      // Within an attempt: stopping the ranks, the back-off and the relaunch.
      // A new attempt: its launch up to its ranks' start (the gap before it
      // is not wall time of any attempt).
      const int64_t from = next->attempt == g.attempt ? restart_from : attempt_start(next->attempt);
      l.restart_s = std::max<int64_t>(0, next->started_ms - from) / 1000.0;
      l.redone_from = next->start_step;
      l.redone_to = std::max(next->start_step, g.last_step.value_or(g.start_step));
      l.redone_s = static_cast<double>(l.redone_to - l.redone_from) * t.step_ms / 1000.0;
    }
    t.detection_s += l.detection_s;
    t.restart_s += l.restart_s;
    t.redone_s += l.redone_s;
    t.losses.push_back(l);
  }

  AccountCheckpointStalls(checkpoints, metrics, &t);

  t.lost_s = t.detection_s + t.restart_s + t.redone_s + t.checkpoint_stall_s;
  t.effective_s = std::max(0.0, t.wall_s - t.lost_s);
  return t;
}

}  // namespace holdfast
