// StragglerDetector: which rank holds a data-parallel run back, and by how much.
//
// In data-parallel training every rank completes steps at the same rate (each
// step's allreduce waits for the slowest rank), so a slow rank does not show in
// its step count or its last step time. It shows in how each rank spends its
// step: the straggler computes longer and barely waits in collectives; the
// others compute as before and wait for it. The detector reads that from the
// progress records (common/progress_record.h) it is fed at every poll:
//
//   - step samples: each time a rank's step count rises, the time since the
//     previous rise (step ends are placed from step_started_ns/last_step_ns,
//     not at the poll, so a sample is not rounded to poll_ms) divided by the
//     steps completed;
//   - wait: time blocked in collectives, from the ring of recent collectives.
//     The rank's thread cannot issue a collective or record a completion while
//     it is blocked, so for each completion the wait is the time since the
//     rank's previous recorded event (an issue or a completion), or since it
//     was seen starting to wait on it (waiting_on), whichever is later. A
//     bucket issued during backward is therefore not counted as waiting while
//     backward still runs. Entries that the 16-entry ring dropped between two
//     polls are not seen; their share of the sample is extrapolated;
//   - compute: the rest of the step (period - wait): forward, backward,
//     optimiser, data, and whatever else the rank does between collectives.
//
// Per rank, over a sliding window (StragglerConfig::window_s, never fewer than
// min_samples step samples): steps/s, step time p50/p99 (last_step_ns),
// compute and wait per step p50. The slowest rank is the one with the largest
// compute p50, measured against the median of the others' compute p50. The
// verdict `straggler` comes once per episode, when that ratio has stayed at or
// above `factor` for at least `min_duration_s`; the episode ends (and a new
// verdict may come) when the rank's ratio falls below the clear threshold,
// halfway between 1 and factor.
//
// Pure: no clock, no I/O; time comes in as `now_ns` (CLOCK_MONOTONIC, the
// clock of the records' timestamps). Thread-safety: none; owned by the
// daemon's event-loop thread, like HangDetector.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "daemon/job_config.h"
#include "common/rank_progress.h"

namespace holdfast {

struct StragglerConfig {
  double factor = 2.0;          // compute ratio that makes a straggler; 0 = no verdicts (stats still kept)
  double min_duration_s = 30;   // ... held at least this long
  double window_s = 10;         // sliding window of step samples
  int min_samples = 3;          // a rank's stats need this many samples (the window keeps at least these)

  // factor and min_duration_s from [supervise] straggler_factor / straggler_min_duration_s.
  static StragglerConfig FromSupervise(const SuperviseConfig& supervise);
};

// One rank's pace over the window, as `runctl status` shows it.
struct RankPace {
  int rank = 0;
  int samples = 0;            // step samples in the window
  double steps_per_s = 0;
  double step_ms_p50 = 0;     // from last_step_ns (the rank's own step timer)
  double step_ms_p99 = 0;
  double compute_ms_p50 = 0;  // per step, outside collectives
  double wait_ms_p50 = 0;     // per step, blocked in collectives
};

// The slowest rank against the median of the others, now.
struct SlowestRank {
  int rank = -1;
  double ratio = 0;               // its compute p50 / the median of the others' compute p50
  double compute_ms_p50 = 0;      // its compute per step
  double others_compute_ms_p50 = 0;  // median of the others'
  double held_s = 0;              // how long ratio >= factor has held (0 when it does not)
  bool straggling = false;        // ratio >= factor (factor > 0)
  // "rank 2 computes 3.9x the median of the others for 45 s (412 ms vs 106 ms a step)";
  // without "for N s" while the ratio is below factor.
  std::string note;
};

struct StragglerVerdict {
  bool straggler = false;  // an episode reached min_duration_s at this observation (once per episode)
  bool recovered = false;  // the episode of a reported straggler ended at this observation
  int rank = -1;           // the straggler (straggler or recovered)
  double ratio = 0;        // at this observation
  double held_s = 0;       // how long the ratio has held (straggler), or the episode lasted (recovered)
  std::string summary;     // one line for on-call and lineage, SlowestRank::note style
};

class StragglerDetector {
 public:
  explicit StragglerDetector(const StragglerConfig& config) : config_(config) {}

  // A new generation of ranks starts: every rank's samples and any episode end
  // (a restarted process is a new measurement; no `recovered` is reported).
  void StartGeneration(int64_t now_ns, int world_size);

  // Feed one poll of every rank. Ranks that are dead or whose record is
  // invalid, torn or has a negative step are skipped (their earlier samples
  // stay). A record's clock readings (and last step duration) are taken as
  // unset when negative and as now_ns when past it: whatever a job writes,
  // nothing overflows.
  StragglerVerdict Observe(int64_t now_ns, const std::vector<RankView>& ranks);

  // The rank's pace at the last Observe; nullopt until it has min_samples
  // samples (or if the rank is unknown).
  std::optional<RankPace> Pace(int rank) const;
  // The slowest rank at the last Observe; nullopt with fewer than two ranks
  // that have a pace.
  const std::optional<SlowestRank>& Slowest() const { return slowest_; }

 private:
  struct Sample {
    int64_t start_ns = 0;
    int64_t end_ns = 0;
    int64_t steps = 0;
    double period_ms = 0;   // per step
    double wait_ms = 0;     // per step
    double last_step_ms = 0;  // the record's last_step_ns at the end (0 unknown)
  };
  struct Track {
    bool seen = false;
    int32_t pid = 0;
    int64_t step = -1;              // last observed completed step
    bool sampling = false;          // a step end has been placed; samples run from it
    int64_t open_start_ns = 0;      // start of the open sample (end of the last sample)
    int64_t open_wait_ns = 0;       // wait accounted to the open sample
    int64_t open_uncovered_ns = 0;  // time of the open sample whose collectives the ring dropped
    int64_t accounted_until_ns = 0; // waits are accounted up to this record time
    uint64_t max_seq = 0;           // highest collective seq seen
    uint64_t wait_seq = 0;          // the collective last seen being waited on ...
    int64_t wait_started_ns = 0;    // ... since this time (phase_started_ns)
    std::deque<Sample> samples;     // oldest first
    int64_t window_steps = 0;       // the samples' steps, summed
    std::optional<RankPace> pace;
    bool pace_stale = true;         // samples changed since `pace` was computed
    // The record of the last observation that changed anything, and the
    // observation's now: the same record again, with no reading past that now,
    // changes nothing but the window and the rate (issue 28: most polls of
    // 2048 ranks see a report that has not changed).
    RankProgress last;
    int64_t last_now_ns = -1;
  };
  // Whether observing `p` again, at any now at or after t.last_now_ns, would
  // change nothing in `t` but its window.
  static bool Unchanged(const RankProgress& p, const Track& t);
  mutable std::vector<double> scratch_[4];  // UpdatePace's samples, reused

  void ObserveRank(int64_t now_ns, const RankView& view, Track* track);
  // Blocked time since the last look, from the ring's completions, split at
  // `split_at` (a step's end) into the sample before and the one after.
  static void AccountWaits(const CollectiveRing& ring, int64_t split_at, Track* track,
                           int64_t* wait_before, int64_t* wait_after);
  // Slides the track's window and recomputes its pace (none below min_samples).
  void UpdatePace(int64_t now_ns, int rank, Track* track) const;
  void Assess(int64_t now_ns, StragglerVerdict* verdict);
  // Rank `rank`'s compute p50 over the median of the others' (with paces).
  double RatioOf(int rank, double* own_ms, double* others_ms) const;
  std::string Note(int rank, double ratio, double own_ms, double others_ms, std::optional<double> held_s) const;

  StragglerConfig config_;
  std::vector<Track> tracks_;  // by rank
  std::optional<SlowestRank> slowest_;
  // Pending: a rank at or above factor since pending_since_ns_, no verdict yet.
  int pending_rank_ = -1;
  int64_t pending_since_ns_ = 0;
  // Active episode: a verdict was given for episode_rank_.
  int episode_rank_ = -1;
  int64_t episode_since_ns_ = 0;
};

}  // namespace holdfast
