#include "daemon/straggler.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>

namespace holdfast {
namespace {

constexpr double kNsPerMs = 1e6;
// The others' compute median is floored here, so that a ratio stays finite
// when the others barely compute (their time is all waiting).
constexpr double kMinComputeMs = 0.01;

// Nearest-rank percentile of `v`, which must be sorted; 0 when empty.
double Percentile(const std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  size_t idx = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  idx = std::clamp<size_t>(idx, 1, v.size()) - 1;
  return v[idx];
}

// The median of `v`, which it reorders; 0 when empty.
double Median(std::vector<double>& v) {
  if (v.empty()) return 0;
  const size_t n = v.size();
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n / 2), v.end());
  const double upper = v[n / 2];
  if (n % 2 == 1) return upper;
  const double lower = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n / 2));
  return (lower + upper) / 2;
}

// Splits [from, to) at `at`: the part before goes to *before, the rest to *after.
void Split(int64_t from, int64_t to, int64_t at, int64_t* before, int64_t* after) {
  if (to <= from) return;
  const int64_t cut = std::clamp(at, from, to);
  *before += cut - from;
  *after += to - cut;
}

// The record is the job's to write, and may hold anything. Clock readings (and
// the last step's duration) that no CLOCK_MONOTONIC clock could give at now_ns,
// negative or past now, are moved into [0 (unset), now_ns], so that the
// differences below never overflow.
RankProgress WithReadingsUpToNow(const RankProgress& progress, int64_t now_ns) {
  RankProgress p = progress;
  for (int64_t* t : {&p.phase_started_ns, &p.step_started_ns, &p.heartbeat_ns, &p.last_step_ns}) {
    *t = std::clamp<int64_t>(*t, 0, now_ns);
  }
  for (CollectiveRecord& e : p.ring) {
    e.issued_ns = std::clamp<int64_t>(e.issued_ns, 0, now_ns);
    e.completed_ns = std::clamp<int64_t>(e.completed_ns, 0, now_ns);
  }
  return p;
}

}  // namespace

StragglerConfig StragglerConfig::FromSupervise(const SuperviseConfig& supervise) {
  StragglerConfig c;
  c.factor = supervise.straggler_factor;
  c.min_duration_s = supervise.straggler_min_duration_s;
  return c;
}

void StragglerDetector::StartGeneration(int64_t now_ns, int world_size) {
  (void)now_ns;
  tracks_.assign(static_cast<size_t>(std::max(world_size, 0)), Track{});
  slowest_.reset();
  pending_rank_ = -1;
  pending_since_ns_ = 0;
  episode_rank_ = -1;
  episode_since_ns_ = 0;
}

StragglerVerdict StragglerDetector::Observe(int64_t now_ns, const std::vector<RankView>& ranks) {
  for (const RankView& v : ranks) {
    if (v.rank < 0) continue;
    if (static_cast<size_t>(v.rank) >= tracks_.size()) tracks_.resize(static_cast<size_t>(v.rank) + 1);
    ObserveRank(now_ns, v, &tracks_[static_cast<size_t>(v.rank)]);
  }
  StragglerVerdict verdict;
  Assess(now_ns, &verdict);
  return verdict;
}

void StragglerDetector::AccountWaits(const CollectiveRing& ring, int64_t split_at, Track* t,
                                     int64_t* wait_before, int64_t* wait_after) {
  // Blocked time: for each completion not yet accounted, the time since the
  // rank's previous event (it could not issue or complete anything while
  // blocked), or since it was seen starting to wait on that collective.
  struct Event {
    int64_t t;
    bool done;
    uint64_t seq;
  };
  std::vector<Event> events;
  events.reserve(ring.size() * 2);
  for (const CollectiveRecord& e : ring) {
    events.push_back({e.issued_ns, false, e.seq});
    if (e.completed_ns != 0) events.push_back({e.completed_ns, true, e.seq});
  }
  // At equal times an issue sorts first: it cannot have happened while blocked.
  std::stable_sort(events.begin(), events.end(),
                   [](const Event& a, const Event& b) { return a.t != b.t ? a.t < b.t : !a.done && b.done; });
  int64_t last_event = INT64_MIN;
  for (const Event& ev : events) {
    if (ev.done && ev.t > t->accounted_until_ns) {
      int64_t from = std::max(last_event, t->accounted_until_ns);
      if (ev.seq == t->wait_seq) from = std::max(from, t->wait_started_ns);
      from = std::min(from, ev.t);
      Split(from, ev.t, split_at, wait_before, wait_after);
      t->accounted_until_ns = ev.t;
    }
    last_event = std::max(last_event, ev.t);
  }
}

void StragglerDetector::ObserveRank(int64_t now_ns, const RankView& view, Track* t) {
  if (!view.alive || !view.progress.valid || view.progress.torn) return;
  if (view.progress.step < 0) return;  // not a count of completed steps
  if (Unchanged(view.progress, *t)) {
    UpdatePace(now_ns, view.rank, t);
    return;
  }
  t->last = view.progress;
  t->last_now_ns = now_ns;
  const RankProgress p = WithReadingsUpToNow(view.progress, now_ns);
  if (t->seen && (p.writer_pid != t->pid || p.step < t->step)) *t = Track{};  // another process in this slot

  // The ring by sequence number (the job's to write: it may hold anything).
  CollectiveRing ring;
  for (const CollectiveRecord& e : p.ring) {
    if (e.seq != 0) ring.push_back(e);
  }
  std::sort(ring.begin(), ring.end(), [](const CollectiveRecord& a, const CollectiveRecord& b) { return a.seq < b.seq; });
  const bool waiting = p.in_collective();

  if (!t->seen) {
    // What happened before the first look is not measured.
    t->seen = true;
    t->pid = p.writer_pid;
    t->step = p.step;
    t->accounted_until_ns = p.heartbeat_ns;
    t->max_seq = ring.empty() ? p.collectives_issued : ring.back().seq;
    if (waiting) {
      t->wait_seq = p.waiting_on;
      t->wait_started_ns = p.phase_started_ns;
    }
    t->pace.reset();
    t->last_now_ns = -1;  // the first look accounts nothing: the next one must run in full
    return;
  }

  // Where the newest completed step ended (record time). Right after EndStep,
  // step_started_ns + last_step_ns is that instant. Once the rank has begun the
  // next step, step_started_ns is that step's start, just after the end; the
  // sum then lies past the last update, which tells the two cases apart.
  const bool stepped = p.step > t->step;
  int64_t end_ns = now_ns;
  if (stepped) {
    if (p.step_started_ns > 0 && p.last_step_ns > 0) {
      // step_started_ns + last_step_ns, unless that lies past the heartbeat.
      end_ns = p.last_step_ns <= p.heartbeat_ns - p.step_started_ns ? p.step_started_ns + p.last_step_ns
                                                                    : p.step_started_ns;
    }
    end_ns = std::min(end_ns, now_ns);
    if (t->sampling) end_ns = std::max(end_ns, t->open_start_ns);
  }
  const int64_t split_at = stepped ? end_ns : INT64_MAX;
  int64_t wait_before = 0, wait_after = 0, uncovered_before = 0, uncovered_after = 0;

  // Collectives issued since the last look that the ring no longer holds:
  // their time is not measured (extrapolated when the sample closes).
  if (!ring.empty() && ring.front().seq > t->max_seq + 1 && ring.front().issued_ns > t->accounted_until_ns) {
    Split(t->accounted_until_ns, ring.front().issued_ns, split_at, &uncovered_before, &uncovered_after);
    t->accounted_until_ns = ring.front().issued_ns;
  }
  if (waiting && p.waiting_on != t->wait_seq) {
    t->wait_seq = p.waiting_on;
    t->wait_started_ns = p.phase_started_ns;
  }

  AccountWaits(ring, split_at, t, &wait_before, &wait_after);
  if (!ring.empty()) t->max_seq = std::max(t->max_seq, ring.back().seq);

  if (!stepped) {
    t->open_wait_ns += wait_before;
    t->open_uncovered_ns += uncovered_before;
  } else {
    if (t->sampling && end_ns > t->open_start_ns) {
      const int64_t period_ns = end_ns - t->open_start_ns;
      const int64_t uncovered = t->open_uncovered_ns + uncovered_before;
      double wait = static_cast<double>(t->open_wait_ns + wait_before);
      if (uncovered > 0 && uncovered < period_ns) {
        wait *= static_cast<double>(period_ns) / static_cast<double>(period_ns - uncovered);
      }
      wait = std::min(wait, static_cast<double>(period_ns));
      const double steps = static_cast<double>(p.step - t->step);
      Sample s;
      s.start_ns = t->open_start_ns;
      s.end_ns = end_ns;
      s.steps = p.step - t->step;
      s.period_ms = static_cast<double>(period_ns) / kNsPerMs / steps;
      s.wait_ms = wait / kNsPerMs / steps;
      s.last_step_ms = p.last_step_ns > 0 ? static_cast<double>(p.last_step_ns) / kNsPerMs : 0;
      t->samples.push_back(s);
      t->window_steps += s.steps;
      t->pace_stale = true;
    }
    // The first step end seen only starts the samples: the step before it
    // began before we looked (and the first step of a process includes its
    // startup).
    t->sampling = true;
    t->open_start_ns = end_ns;
    t->open_wait_ns = wait_after;
    t->open_uncovered_ns = uncovered_after;
    t->step = p.step;
  }

  UpdatePace(now_ns, view.rank, t);
}

void StragglerDetector::UpdatePace(int64_t now_ns, int rank, Track* t) const {
  // Slide the window, keeping at least min_samples.
  const int64_t window_ns = static_cast<int64_t>(config_.window_s * 1e9);
  while (t->samples.size() > static_cast<size_t>(std::max(config_.min_samples, 1)) &&
         t->samples.front().end_ns <= now_ns - window_ns) {
    t->window_steps -= t->samples.front().steps;
    t->samples.pop_front();
    t->pace_stale = true;
  }

  if (t->samples.size() < static_cast<size_t>(std::max(config_.min_samples, 1))) {
    t->pace.reset();
    return;
  }
  const int64_t steps = t->window_steps;
  // The rate over the samples, decaying once the rank has gone longer than an
  // average step without completing one: the only part that moves with now.
  const double span_ns = static_cast<double>(t->samples.back().end_ns - t->samples.front().start_ns);
  const double to_now_ns =
      static_cast<double>(now_ns - t->samples.front().start_ns) - span_ns / static_cast<double>(steps);
  const double over_ns = std::max(span_ns, to_now_ns);
  const double steps_per_s = over_ns > 0 ? static_cast<double>(steps) * 1e9 / over_ns : 0;
  if (t->pace && !t->pace_stale) {
    t->pace->steps_per_s = steps_per_s;
    return;
  }
  RankPace pace;
  pace.rank = rank;
  pace.samples = static_cast<int>(t->samples.size());
  // The detector's scratch vectors: no allocation per rank and poll.
  std::vector<double>& step_ms = scratch_[0];
  std::vector<double>& period_ms = scratch_[1];
  std::vector<double>& compute_ms = scratch_[2];
  std::vector<double>& wait_ms = scratch_[3];
  for (std::vector<double>& v : scratch_) v.clear();
  for (const Sample& s : t->samples) {
    if (s.last_step_ms > 0) step_ms.push_back(s.last_step_ms);
    period_ms.push_back(s.period_ms);
    compute_ms.push_back(s.period_ms - s.wait_ms);
    wait_ms.push_back(s.wait_ms);
  }
  for (std::vector<double>& v : scratch_) std::sort(v.begin(), v.end());
  pace.steps_per_s = steps_per_s;
  const std::vector<double>& step_times = step_ms.empty() ? period_ms : step_ms;
  pace.step_ms_p50 = Percentile(step_times, 0.5);
  pace.step_ms_p99 = Percentile(step_times, 0.99);
  pace.compute_ms_p50 = Percentile(compute_ms, 0.5);
  pace.wait_ms_p50 = Percentile(wait_ms, 0.5);
  t->pace = pace;
  t->pace_stale = false;
}

bool StragglerDetector::Unchanged(const RankProgress& p, const Track& t) {
  if (!t.seen || t.last_now_ns < 0) return false;
  const RankProgress& q = t.last;
  if (p.writer_pid != q.writer_pid || p.step != q.step || p.phase != q.phase || p.waiting_on != q.waiting_on ||
      p.collectives_issued != q.collectives_issued || p.phase_started_ns != q.phase_started_ns ||
      p.step_started_ns != q.step_started_ns || p.heartbeat_ns != q.heartbeat_ns ||
      p.last_step_ns != q.last_step_ns || p.valid != q.valid || p.ring.size() != q.ring.size()) {
    return false;
  }
  // A reading past the last now was clamped to it then; now it would read further.
  const int64_t until = t.last_now_ns;
  if (p.phase_started_ns > until || p.step_started_ns > until || p.heartbeat_ns > until || p.last_step_ns > until) {
    return false;
  }
  for (size_t i = 0; i < p.ring.size(); ++i) {
    const CollectiveRecord& a = p.ring[i];
    const CollectiveRecord& b = q.ring[i];
    if (a.seq != b.seq || a.issued_ns != b.issued_ns || a.completed_ns != b.completed_ns) return false;
    if (a.issued_ns > until || a.completed_ns > until) return false;
  }
  return true;
}

std::optional<RankPace> StragglerDetector::Pace(int rank) const {
  if (rank < 0 || static_cast<size_t>(rank) >= tracks_.size()) return std::nullopt;
  return tracks_[static_cast<size_t>(rank)].pace;
}

double StragglerDetector::RatioOf(int rank, double* own_ms, double* others_ms) const {
  std::vector<double>& others = scratch_[0];
  others.clear();
  double own = -1;
  for (const Track& t : tracks_) {
    if (!t.pace) continue;
    if (t.pace->rank == rank) {
      own = t.pace->compute_ms_p50;
    } else {
      others.push_back(t.pace->compute_ms_p50);
    }
  }
  if (own < 0 || others.empty()) return -1;
  const double median = Median(others);
  *own_ms = own;
  *others_ms = median;
  return own / std::max(median, kMinComputeMs);
}

std::string StragglerDetector::Note(int rank, double ratio, double own_ms, double others_ms,
                                    std::optional<double> held_s) const {
  char buf[200];
  if (held_s) {
    std::snprintf(buf, sizeof(buf),
                  "rank %d computes %.1fx the median of the others for %.0f s (%.0f ms vs %.0f ms a step)", rank,
                  ratio, *held_s, own_ms, others_ms);
  } else {
    std::snprintf(buf, sizeof(buf), "rank %d computes %.1fx the median of the others (%.0f ms vs %.0f ms a step)", rank,
                  ratio, own_ms, others_ms);
  }
  return buf;
}

void StragglerDetector::Assess(int64_t now_ns, StragglerVerdict* verdict) {
  slowest_.reset();
  const bool judging = config_.factor > 0;
  const double clear = 1 + (config_.factor - 1) / 2;

  // An episode ends when its rank's ratio falls below the clear threshold.
  if (episode_rank_ >= 0) {
    double own = 0, others = 0;
    const double ratio = RatioOf(episode_rank_, &own, &others);
    if (ratio >= 0 && ratio < clear) {
      verdict->recovered = true;
      verdict->rank = episode_rank_;
      verdict->ratio = ratio;
      verdict->held_s = static_cast<double>(now_ns - episode_since_ns_) / 1e9;
      char buf[96];
      std::snprintf(buf, sizeof(buf), " no longer straggles after %.0f s", verdict->held_s);
      verdict->summary =
          "rank " + std::to_string(episode_rank_) + buf + ": " + Note(episode_rank_, ratio, own, others, std::nullopt);
      episode_rank_ = -1;
    }
  }

  int slow = -1;
  double slow_ms = -1;
  for (const Track& t : tracks_) {
    if (t.pace && t.pace->compute_ms_p50 > slow_ms) {
      slow = t.pace->rank;
      slow_ms = t.pace->compute_ms_p50;
    }
  }
  SlowestRank s;
  const double ratio = slow >= 0 ? RatioOf(slow, &s.compute_ms_p50, &s.others_compute_ms_p50) : -1;
  if (ratio < 0) {  // fewer than two ranks with a pace
    pending_rank_ = -1;
    return;
  }
  s.rank = slow;
  s.ratio = ratio;
  s.straggling = judging && ratio >= config_.factor;
  if (s.straggling) {
    if (pending_rank_ != slow) {
      pending_rank_ = slow;
      pending_since_ns_ = now_ns;
    }
    const int64_t since = episode_rank_ == slow ? std::min(episode_since_ns_, pending_since_ns_) : pending_since_ns_;
    s.held_s = static_cast<double>(now_ns - since) / 1e9;
  } else {
    pending_rank_ = -1;
  }
  s.note = Note(slow, ratio, s.compute_ms_p50, s.others_compute_ms_p50,
                s.straggling ? std::optional<double>(s.held_s) : std::nullopt);

  if (s.straggling && episode_rank_ < 0 && !verdict->recovered &&
      static_cast<double>(now_ns - pending_since_ns_) >= config_.min_duration_s * 1e9) {
    episode_rank_ = slow;
    episode_since_ns_ = pending_since_ns_;
    verdict->straggler = true;
    verdict->recovered = false;
    verdict->rank = slow;
    verdict->ratio = ratio;
    verdict->held_s = s.held_s;
    verdict->summary = s.note;
  }
  slowest_ = std::move(s);
}

}  // namespace holdfast
