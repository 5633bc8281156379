#include "daemon/straggler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include <gtest/gtest.h>

namespace holdfast {
namespace {

constexpr int64_t kMs = 1000000;
constexpr int64_t kSec = 1000000000;

// What holdfast-train's ProgressWriter does to its record, with the time of
// each update given instead of read from the clock.
struct Op {
  enum Kind { kBeginStep, kPhase, kIssue, kWait, kDone, kEndStep } kind;
  int64_t t = 0;
  int64_t arg = 0;  // phase, seq or step
};

class RecordReplay {
 public:
  explicit RecordReplay(int rank) {
    rec_.magic = kProgressMagic;
    rec_.version = kProgressVersion;
    rec_.size = sizeof(ProgressRecordLayout);
    rec_.rank = rank;
    rec_.pid = 1000 + rank;
    rec_.checkpoint_step = -1;
    rec_.checkpoint_failed_step = -1;
  }

  // Mirrors common/progress_record.cc.
  void Apply(const Op& op) {
    switch (op.kind) {
      case Op::kBeginStep:
        rec_.phase = static_cast<uint32_t>(Phase::kData);
        rec_.phase_started_ns = op.t;
        rec_.step_started_ns = op.t;
        break;
      case Op::kPhase:
        rec_.phase = static_cast<uint32_t>(op.arg);
        rec_.phase_started_ns = op.t;
        break;
      case Op::kIssue: {
        const uint64_t seq = ++rec_.collectives_issued;
        CollectiveEntry& e = rec_.ring[rec_.ring_head % kProgressRingSize];
        e.seq = seq;
        e.kind = static_cast<uint32_t>(CollectiveKind::kAllreduce);
        e.bytes = 1 << 20;
        e.issued_ns = op.t;
        e.completed_ns = 0;
        rec_.ring_head += 1;
        break;
      }
      case Op::kWait:
        rec_.phase = static_cast<uint32_t>(Phase::kCollective);
        rec_.phase_started_ns = op.t;
        rec_.waiting_on = static_cast<uint64_t>(op.arg);
        rec_.collective_kind = static_cast<uint32_t>(CollectiveKind::kAllreduce);
        break;
      case Op::kDone: {
        const uint64_t seq = static_cast<uint64_t>(op.arg);
        if (seq > rec_.collectives_done) rec_.collectives_done = seq;
        if (rec_.waiting_on == seq) rec_.waiting_on = 0;
        for (CollectiveEntry& e : rec_.ring) {
          if (e.seq == seq) e.completed_ns = op.t;
        }
        break;
      }
      case Op::kEndStep:
        rec_.step = op.arg;
        if (rec_.step_started_ns != 0) rec_.last_step_ns = op.t - rec_.step_started_ns;
        break;
    }
    rec_.heartbeat_ns = op.t;
  }

  const ProgressRecordLayout& record() const { return rec_; }

 private:
  ProgressRecordLayout rec_{};
};

// A data-parallel run as holdfast-train does it: each step every rank reads
// data, runs forward and backward (issuing bucketed allreduces during the
// second half of backward), waits for the buckets in order, allreduces the
// loss, and runs the optimiser. A bucket's allreduce finishes `transfer_ms`
// after the last rank issued it, so everyone waits for the slowest rank.
struct SimParams {
  int world = 4;
  int buckets = 4;
  double transfer_ms = 5;
  double loss_ms = 1;
  double optimizer_ms = 10;
  // Forward + backward time of `rank` for a step that starts at `start_s`.
  std::function<double(int rank, int64_t step, double start_s)> compute_ms;
};

class DdpSim {
 public:
  explicit DdpSim(SimParams p) : p_(std::move(p)), begin_(p_.world, 0), ops_(p_.world), cursor_(p_.world) {
    for (int r = 0; r < p_.world; ++r) replay_.emplace_back(r);
  }

  // The ranks as the daemon reads them at `t_ns`.
  std::vector<RankView> ViewsAt(int64_t t_ns) {
    while (*std::min_element(begin_.begin(), begin_.end()) <= t_ns) GenerateStep();
    std::vector<RankView> views;
    for (int r = 0; r < p_.world; ++r) {
      size_t& c = cursor_[r];
      while (c < ops_[r].size() && ops_[r][c].t <= t_ns) replay_[r].Apply(ops_[r][c++]);
      RankView v;
      v.rank = r;
      v.host = "node0";
      v.pid = 1000 + r;
      v.proc_state = ProcState::kRunning;
      ProgressSnapshot snapshot;  // what the daemon reads from the record
      snapshot.valid = true;
      snapshot.record = replay_[r].record();
      v.progress = DecodeProgress(snapshot);
      views.push_back(v);
    }
    return views;
  }

 private:
  static int64_t Ns(double ms) { return static_cast<int64_t>(ms * 1e6); }
  static constexpr int64_t kStepUs = 20000;  // 20 us between two updates of a record

  void GenerateStep() {
    const int W = p_.world, NB = p_.buckets;
    ++step_;
    std::vector<int64_t> compute(W), issue_last(W);
    std::vector<std::vector<int64_t>> issue(W, std::vector<int64_t>(NB));
    for (int r = 0; r < W; ++r) {
      const int64_t B = begin_[r];
      compute[r] = Ns(p_.compute_ms(r, step_, static_cast<double>(B) / 1e9));
      ops_[r].push_back({Op::kBeginStep, B, 0});
      ops_[r].push_back({Op::kPhase, B + compute[r] / 20, static_cast<int64_t>(Phase::kForward)});
      ops_[r].push_back({Op::kPhase, B + compute[r] / 2, static_cast<int64_t>(Phase::kBackward)});
      if (W == 1) continue;
      for (int b = 0; b < NB; ++b) {
        issue[r][b] = B + compute[r] / 2 + compute[r] * (b + 1) / (2 * NB);
        ops_[r].push_back({Op::kIssue, issue[r][b], 0});
      }
    }
    std::vector<int64_t> done_at(W);
    if (W == 1) {
      done_at[0] = begin_[0] + compute[0];
    } else {
      std::vector<int64_t> bucket_done(NB);
      for (int b = 0; b < NB; ++b) {
        int64_t last = 0;
        for (int r = 0; r < W; ++r) last = std::max(last, issue[r][b]);
        bucket_done[b] = last + Ns(p_.transfer_ms);
      }
      std::vector<int64_t> loss_issue(W);
      for (int r = 0; r < W; ++r) {
        // Backward ends: wait for the buckets in order. Each update takes a
        // few microseconds, so that no two of a rank's events share a time.
        int64_t t = begin_[r] + compute[r] + kStepUs;
        for (int b = 0; b < NB; ++b) {
          const int64_t seq = seq_base_ + b + 1;
          ops_[r].push_back({Op::kWait, t, seq});
          t = std::max(t, bucket_done[b]) + kStepUs;
          ops_[r].push_back({Op::kDone, t, seq});
        }
        loss_issue[r] = t + kStepUs;
      }
      const int64_t loss_done = *std::max_element(loss_issue.begin(), loss_issue.end()) + Ns(p_.loss_ms);
      for (int r = 0; r < W; ++r) {
        const int64_t seq = seq_base_ + NB + 1;
        ops_[r].push_back({Op::kIssue, loss_issue[r], 0});
        ops_[r].push_back({Op::kWait, loss_issue[r] + kStepUs, seq});
        ops_[r].push_back({Op::kDone, loss_done, seq});
        done_at[r] = loss_done;
      }
      seq_base_ += NB + 1;
    }
    for (int r = 0; r < W; ++r) {
      ops_[r].push_back({Op::kPhase, done_at[r], static_cast<int64_t>(Phase::kOptimizer)});
      const int64_t end = done_at[r] + Ns(p_.optimizer_ms);
      ops_[r].push_back({Op::kEndStep, end, step_});
      begin_[r] = end;
    }
  }

  SimParams p_;
  int64_t step_ = 0;
  int64_t seq_base_ = 0;
  std::vector<int64_t> begin_;  // next step's start, per rank
  std::vector<std::vector<Op>> ops_;
  std::vector<size_t> cursor_;
  std::vector<RecordReplay> replay_;
};

struct Seen {
  std::vector<std::pair<double, StragglerVerdict>> verdicts;  // (time s, verdict) with straggler or recovered
};

// Polls every poll_ms from 0 to until_s; `at` (if set) runs after each poll.
Seen Poll(DdpSim* sim, StragglerDetector* d, double until_s, const std::function<void(double)>& at = nullptr,
         int poll_ms = 200) {
  Seen seen;
  d->StartGeneration(0, 0);
  for (int64_t t = poll_ms * kMs; t <= static_cast<int64_t>(until_s * 1e9); t += poll_ms * kMs) {
    StragglerVerdict v = d->Observe(t, sim->ViewsAt(t));
    const double s = static_cast<double>(t) / 1e9;
    if (v.straggler || v.recovered) seen.verdicts.emplace_back(s, v);
    if (at) at(s);
  }
  return seen;
}

StragglerConfig Config() {
  StragglerConfig c;
  c.factor = 2.0;
  c.min_duration_s = 30;
  c.window_s = 10;
  return c;
}

TEST(StragglerTest, RankAtFourTimesComputeIsNamedAfterMinDurationNotBefore) {
  // 100 ms of forward+backward, 10 ms optimiser, 5+1 ms of transfers: a step
  // is 116 ms, of which every rank computes 110 ms and waits 6 ms, until rank
  // 2 computes 4x from 20 s on.
  SimParams p;
  p.compute_ms = [](int rank, int64_t, double start_s) { return rank == 2 && start_s >= 20 ? 400.0 : 100.0; };
  DdpSim sim(p);
  StragglerDetector d(Config());
  std::optional<RankPace> before0, after0, after2;
  std::optional<SlowestRank> slowest_before, slowest_after;
  Seen seen = Poll(&sim, &d, 80, [&](double s) {
    if (s == 19.0) {
      before0 = d.Pace(0);
      slowest_before = d.Slowest();
    }
    if (s == 80.0) {
      after0 = d.Pace(0);
      after2 = d.Pace(2);
      slowest_after = d.Slowest();
    }
  });

  // Before: every rank 8.6 steps/s, 116 ms a step, 110 ms of it computing.
  ASSERT_TRUE(before0.has_value());
  EXPECT_NEAR(before0->steps_per_s, 1000.0 / 116, 0.1);
  EXPECT_NEAR(before0->step_ms_p50, 116, 1);
  EXPECT_NEAR(before0->compute_ms_p50, 110, 3);
  EXPECT_NEAR(before0->wait_ms_p50, 6, 3);
  ASSERT_TRUE(slowest_before.has_value());
  EXPECT_LT(slowest_before->ratio, 1.1);
  EXPECT_FALSE(slowest_before->straggling);

  // One verdict: rank 2, after 30 s of slowness measured over a 10 s window.
  ASSERT_EQ(seen.verdicts.size(), 1u);
  const auto& [at, v] = seen.verdicts[0];
  EXPECT_TRUE(v.straggler);
  EXPECT_EQ(v.rank, 2);
  EXPECT_GE(at, 20 + 30);
  EXPECT_LE(at, 20 + 30 + 10);
  EXPECT_GE(v.held_s, 30);
  EXPECT_NEAR(v.ratio, 410.0 / 110, 0.3);
  EXPECT_NE(v.summary.find("rank 2 computes 3."), std::string::npos) << v.summary;
  EXPECT_NE(v.summary.find("x the median of the others for 3"), std::string::npos) << v.summary;

  // After: everyone steps at the straggler's pace (416 ms); rank 2 computes
  // 410 ms and waits 6, the others compute 110 and wait 306 for it.
  ASSERT_TRUE(after0.has_value() && after2.has_value());
  EXPECT_NEAR(after2->steps_per_s, 1000.0 / 416, 0.05);
  EXPECT_NEAR(after0->steps_per_s, 1000.0 / 416, 0.05);
  EXPECT_NEAR(after2->step_ms_p50, 416, 2);
  EXPECT_NEAR(after0->step_ms_p50, 416, 2);  // the last step time looks normal for everyone
  EXPECT_NEAR(after2->compute_ms_p50, 410, 10);
  EXPECT_NEAR(after2->wait_ms_p50, 6, 5);
  EXPECT_NEAR(after0->compute_ms_p50, 110, 10);
  EXPECT_NEAR(after0->wait_ms_p50, 306, 10);
  ASSERT_TRUE(slowest_after.has_value());
  EXPECT_EQ(slowest_after->rank, 2);
  EXPECT_TRUE(slowest_after->straggling);
  EXPECT_NEAR(slowest_after->held_s, 55, 6);
  EXPECT_NE(slowest_after->note.find("rank 2 computes 3.7x the median of the others for 5"), std::string::npos)
      << slowest_after->note;
}

TEST(StragglerTest, EqualRanksHaveNoStragglerEvenWhenTheRingOverflowsBetweenPolls) {
  // 20 ms steps with jitter: five collectives a step, about 30 between two
  // polls, so the 16-entry ring drops some and the wait is extrapolated.
  SimParams p;
  p.compute_ms = [](int rank, int64_t step, double) {
    return 20.0 * (1.0 + 0.1 * static_cast<double>((step * 7 + rank * 13) % 5 - 2) / 2);
  };
  DdpSim sim(p);
  StragglerDetector d(Config());
  std::optional<RankPace> pace;
  std::optional<SlowestRank> slowest;
  Seen seen = Poll(&sim, &d, 120, [&](double s) {
    if (s == 120.0) {
      pace = d.Pace(1);
      slowest = d.Slowest();
    }
  });
  EXPECT_TRUE(seen.verdicts.empty());
  ASSERT_TRUE(pace.has_value() && slowest.has_value());
  // A step: the slowest rank's ~22 ms + 16 ms; each rank computes ~30 ms.
  EXPECT_NEAR(pace->steps_per_s, 1000.0 / 38, 2.5);
  EXPECT_NEAR(pace->compute_ms_p50, 30, 4);
  EXPECT_LT(slowest->ratio, 1.3);
  EXPECT_FALSE(slowest->straggling);
  EXPECT_EQ(slowest->note.find(" for "), std::string::npos) << slowest->note;
}

TEST(StragglerTest, BriefSpikeIsNotAStraggler) {
  SimParams p;
  p.compute_ms = [](int rank, int64_t, double s) { return rank == 1 && s >= 30 && s < 45 ? 400.0 : 100.0; };
  DdpSim sim(p);
  StragglerDetector d(Config());
  bool shown = false;
  Seen seen = Poll(&sim, &d, 120, [&](double) {
    if (d.Slowest() && d.Slowest()->straggling) shown = d.Slowest()->rank == 1;
  });
  EXPECT_TRUE(seen.verdicts.empty());
  EXPECT_TRUE(shown);  // `runctl status` did show it while it lasted
  ASSERT_TRUE(d.Slowest().has_value());
  EXPECT_FALSE(d.Slowest()->straggling);
}

TEST(StragglerTest, RecoveryThenRelapseGivesASecondVerdict) {
  SimParams p;
  p.compute_ms = [](int rank, int64_t, double s) {
    const bool slow = (s >= 10 && s < 60) || s >= 100;
    return rank == 3 && slow ? 400.0 : 100.0;
  };
  DdpSim sim(p);
  StragglerDetector d(Config());
  Seen seen = Poll(&sim, &d, 160);
  ASSERT_EQ(seen.verdicts.size(), 3u);
  EXPECT_TRUE(seen.verdicts[0].second.straggler);
  EXPECT_EQ(seen.verdicts[0].second.rank, 3);
  EXPECT_GE(seen.verdicts[0].first, 40);
  EXPECT_LE(seen.verdicts[0].first, 50);

  EXPECT_TRUE(seen.verdicts[1].second.recovered);
  EXPECT_EQ(seen.verdicts[1].second.rank, 3);
  EXPECT_GE(seen.verdicts[1].first, 60);
  EXPECT_LE(seen.verdicts[1].first, 70);
  EXPECT_NE(seen.verdicts[1].second.summary.find("rank 3 no longer straggles after"), std::string::npos)
      << seen.verdicts[1].second.summary;

  EXPECT_TRUE(seen.verdicts[2].second.straggler);
  EXPECT_EQ(seen.verdicts[2].second.rank, 3);
  EXPECT_GE(seen.verdicts[2].first, 130);
  EXPECT_LE(seen.verdicts[2].first, 140);
}

TEST(StragglerTest, SingleRankWorldNeverHasAStraggler) {
  SimParams p;
  p.world = 1;
  p.compute_ms = [](int, int64_t, double s) { return s >= 20 ? 400.0 : 100.0; };
  DdpSim sim(p);
  StragglerDetector d(Config());
  Seen seen = Poll(&sim, &d, 90);
  EXPECT_TRUE(seen.verdicts.empty());
  EXPECT_FALSE(d.Slowest().has_value());
  std::optional<RankPace> pace = d.Pace(0);
  ASSERT_TRUE(pace.has_value());
  EXPECT_NEAR(pace->steps_per_s, 1000.0 / 410, 0.05);  // its pace is still shown
  EXPECT_NEAR(pace->compute_ms_p50, 410, 10);
  EXPECT_NEAR(pace->wait_ms_p50, 0, 0.01);
}

TEST(StragglerTest, FactorZeroIsOffButKeepsThePace) {
  SimParams p;
  p.compute_ms = [](int rank, int64_t, double) { return rank == 0 ? 400.0 : 100.0; };
  DdpSim sim(p);
  StragglerConfig c = Config();
  c.factor = 0;
  StragglerDetector d(c);
  Seen seen = Poll(&sim, &d, 60);
  EXPECT_TRUE(seen.verdicts.empty());
  ASSERT_TRUE(d.Slowest().has_value());
  EXPECT_EQ(d.Slowest()->rank, 0);
  EXPECT_FALSE(d.Slowest()->straggling);
  EXPECT_NEAR(d.Slowest()->ratio, 410.0 / 110, 0.3);
}

TEST(StragglerTest, ImpossibleReadingsInARecordAreNotMeasured) {
  // A record is the job's to write. One whose clock readings lie at the ends
  // of int64 (and whose step count runs backwards) must not overflow the
  // detector's arithmetic (HOLDFAST_SANITIZE=undefined reported it) nor make
  // a straggler of anyone; the other ranks keep their pace.
  SimParams p;
  p.compute_ms = [](int, int64_t, double) { return 100.0; };
  DdpSim sim(p);
  StragglerDetector d(Config());
  d.StartGeneration(0, p.world);
  int64_t step = 0;
  for (int64_t t = 200 * kMs; t <= 60 * kSec; t += 200 * kMs) {
    std::vector<RankView> views = sim.ViewsAt(t);
    RankProgress& r = views[3].progress;
    r.step = (step += 1000) % 7000 - 1000;
    r.step_started_ns = INT64_MAX - 1;
    r.last_step_ns = INT64_MAX - 1;
    r.heartbeat_ns = INT64_MIN;
    r.phase_started_ns = INT64_MIN;
    for (CollectiveRecord& e : r.ring) {
      e.issued_ns = INT64_MIN + 1;
      e.completed_ns = INT64_MAX;
    }
    StragglerVerdict v = d.Observe(t, views);
    EXPECT_FALSE(v.straggler) << v.summary;
  }
  for (int rank = 0; rank < p.world; ++rank) {
    std::optional<RankPace> pace = d.Pace(rank);
    if (rank < 3) {
      ASSERT_TRUE(pace.has_value()) << rank;
    }
    if (!pace) continue;
    for (double v : {pace->steps_per_s, pace->step_ms_p50, pace->compute_ms_p50, pace->wait_ms_p50}) {
      EXPECT_TRUE(std::isfinite(v) && v >= 0) << "rank " << rank << ": " << v;
    }
  }
}

TEST(StragglerTest, ConfigComesFromTheSuperviseSection) {
  SuperviseConfig s;
  s.straggler_factor = 3;
  s.straggler_min_duration_s = 90;
  StragglerConfig c = StragglerConfig::FromSupervise(s);
  EXPECT_DOUBLE_EQ(c.factor, 3);
  EXPECT_DOUBLE_EQ(c.min_duration_s, 90);
}

}  // namespace
}  // namespace holdfast
