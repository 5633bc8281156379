// The report's pure parts: the time accounting from lineage records and the
// HTML page rendered from a ReportData.
#include "cli/report.h"

#include <gtest/gtest.h>

#include <sstream>

namespace holdfast {
namespace {

constexpr int64_t kT0 = 1735732800000;  // 2025-01-01 12:00:00Z

bool Has(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// One attempt of 100 s: generation 0 runs steps 0..57 and crashes (reported
// at +30 s, last step report at +29 s), generation 1 starts at +33 s from the
// step-50 checkpoint and succeeds at step 100. Steps take 500 ms.
ReportData Sample() {
  ReportData d;
  d.run.run_id = "r-20250101-abcd";
  d.run.name = "gpt <small> & \"quoted\"";
  d.run.run_dir = "/runs/x";
  d.run.world_size = 2;
  d.run.created_ms = kT0;
  d.run.ended_ms = kT0 + 100000;
  d.run.state = RunState::kSucceeded;
  d.run.last_step = 100;

  AttemptRecord a;
  a.attempt = 1;
  a.started_ms = kT0;
  a.ended_ms = kT0 + 100000;
  a.state = RunState::kSucceeded;
  d.attempts = {a};

  GenerationRecord g0;
  g0.attempt = 1;
  g0.generation = 0;
  g0.started_ms = kT0 + 1000;
  g0.ended_ms = kT0 + 31000;
  g0.start_step = 0;
  g0.last_step = 57;
  g0.last_step_ms = kT0 + 29000;
  g0.state = RunState::kFailed;
  g0.cause = "rank 1 crashed";
  GenerationRecord g1 = g0;
  g1.generation = 1;
  g1.started_ms = kT0 + 33000;
  g1.ended_ms = kT0 + 100000;
  g1.start_step = 50;
  g1.last_step = 100;
  g1.last_step_ms = kT0 + 99000;
  g1.state = RunState::kSucceeded;
  g1.cause = "";
  d.generations = {g0, g1};

  for (int64_t step : {25, 50, 75, 100}) {
    CheckpointRecord k;
    k.run_id = d.run.run_id;
    k.step = step;
    k.path = "/runs/x/checkpoints/step-" + std::to_string(step);
    k.bytes = 1024 * step;
    k.attempt = 1;
    k.generation = step <= 50 ? 0 : 1;
    k.committed_ms = kT0 + 2000 + step * 600;
    d.checkpoints.push_back(k);
  }

  EventRecord crash;
  crash.id = 7;
  crash.time_ms = kT0 + 30000;
  crash.kind = event_kind::kCrash;
  crash.attempt = 1;
  crash.generation = 0;
  crash.node = "host<a>";
  crash.rank = 1;
  crash.summary = "rank 1 killed by signal 9 (SIGKILL)";
  crash.action = "stopped all ranks; restart generation 1 from step 50";
  crash.incident = true;
  crash.seq = 10;
  EventRecord restart;
  restart.id = 8;
  restart.time_ms = kT0 + 32000;
  restart.kind = event_kind::kRestart;
  restart.attempt = 1;
  restart.generation = 1;
  restart.summary = "restart generation 1";
  restart.seq = 11;
  d.events = {crash, restart};
  d.triage[7] = "incident  crash at ...\nculprit   rank 1 <killed>\n";

  // Steps 1..57 by generation 0, then 51..100 by generation 1; every step
  // 500 ms apart, except after the checkpoint at 75 (a 300 ms stall).
  int64_t t = kT0 + 1000;
  for (int64_t s = 1; s <= 57; ++s) d.metrics.push_back({s, 5.0 - s * 0.01, 500, t += 500});
  t = kT0 + 33000;
  std::vector<MetricPoint> second;
  for (int64_t s = 51; s <= 100; ++s) {
    t += s == 76 ? 800 : 500;
    second.push_back({s, 5.0 - s * 0.02, 500, t});
  }
  // What ParseMetricsJsonl would keep: the last line of each step.
  second[0].follows_previous = false;  // after step 57 in the file
  std::vector<MetricPoint> merged(d.metrics.begin(), d.metrics.begin() + 50);
  merged.insert(merged.end(), second.begin(), second.end());
  d.metrics = merged;
  d.generated_ms = kT0 + 120000;
  d.time = AccountTime(d.attempts, d.generations, d.checkpoints, d.events, d.metrics, d.generated_ms);
  return d;
}

TEST(ReportTest, MetricsKeepTheLastLineOfEachStepAndSkipTornLines) {
  std::istringstream in(
      "{\"step\":1,\"loss\":5.0,\"step_ms\":100,\"time_ms\":1000}\n"
      "{\"step\":2,\"loss\":4.9,\"step_ms\":110,\"time_ms\":1100}\n"
      "{\"step\":2,\"loss\":4.8,\"step_ms\":120,\"time_ms\":9000}\n"
      "{\"step\":3,\"loss\":4.7,\"step_ms\":130}\n"
      "{\"step\":4,\"lo");
  std::vector<MetricPoint> m = ParseMetricsJsonl(in);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[1].step, 2);
  EXPECT_DOUBLE_EQ(m[1].loss, 4.8);
  EXPECT_EQ(m[1].time_ms, 9000);
  EXPECT_FALSE(m[2].time_ms.has_value());
  EXPECT_FALSE(m[1].follows_previous);  // its kept line came after step 2's first
  EXPECT_TRUE(m[2].follows_previous);
  EXPECT_FALSE(m[0].follows_previous);  // the first line
  EXPECT_DOUBLE_EQ(*MedianStepMs(m), 120);
}

TEST(ReportTest, TimeIsSplitIntoDetectionRestartRedoneStepsAndCheckpointStalls) {
  const TimeAccount t = Sample().time;
  EXPECT_DOUBLE_EQ(t.wall_s, 100);
  EXPECT_DOUBLE_EQ(t.detection_s, 1);  // crash at +30 s, last report at +29 s
  EXPECT_DOUBLE_EQ(t.restart_s, 3);    // generation 1 started at +33 s
  EXPECT_DOUBLE_EQ(t.step_ms, 500);
  EXPECT_EQ(t.step_ms_source, "metrics.jsonl median");
  ASSERT_EQ(t.losses.size(), 1u);
  EXPECT_EQ(t.losses[0].redone_from, 50);
  EXPECT_EQ(t.losses[0].redone_to, 57);
  EXPECT_DOUBLE_EQ(t.redone_s, 3.5);  // 7 steps x 500 ms
  // Step 75 -> 76 took 800 ms against a median of 500; the checkpoint at 50
  // has no step 51 of the same process right after it, 100 has no step 101.
  EXPECT_DOUBLE_EQ(t.checkpoint_stall_s, 0.3);
  EXPECT_DOUBLE_EQ(t.checkpoint_stall_ms.at(75), 300);
  EXPECT_DOUBLE_EQ(t.lost_s, 1 + 3 + 3.5 + 0.3);
  EXPECT_DOUBLE_EQ(t.effective_s, 100 - 7.8);
}

TEST(ReportTest, WithoutMetricsTheStepTimeComesFromLineage) {
  ReportData d = Sample();
  const TimeAccount t = AccountTime(d.attempts, d.generations, d.checkpoints, d.events, {}, d.generated_ms);
  // Generation 0: 57 steps in 28 s; generation 1: 50 steps in 66 s.
  EXPECT_EQ(t.step_ms_source, "lineage estimate");
  EXPECT_NEAR(t.step_ms, (28000.0 / 57 + 66000.0 / 50) / 2, 1e-9);
  EXPECT_DOUBLE_EQ(t.checkpoint_stall_s, 0);
  EXPECT_NEAR(t.redone_s, 7 * t.step_ms / 1000, 1e-9);
}

TEST(ReportTest, TheTimeOfARunningAttemptCountsUpToNow) {
  ReportData d = Sample();
  d.attempts[0].ended_ms.reset();
  const TimeAccount t = AccountTime(d.attempts, d.generations, d.checkpoints, d.events, d.metrics, kT0 + 150000);
  EXPECT_DOUBLE_EQ(t.wall_s, 150);
}

// Run dirs and checkpoint paths may hold any character: they are text on the page, never markup.
TEST(ReportTest, PathsWithMarkupQuotesSpacesAndNonAsciiAreEscaped) {
  ReportData d = Sample();
  d.run.run_dir = "/tmp/hf long/ünïcode <b>dir</b> & 'it' \"q\"/run";
  ASSERT_FALSE(d.checkpoints.empty());
  d.checkpoints[0].path = d.run.run_dir + "/ck/step-25";
  const std::string html = RenderReportHtml(d);
  const std::string escaped = "/tmp/hf long/ünïcode &lt;b&gt;dir&lt;/b&gt; &amp; &#39;it&#39; &quot;q&quot;/run";
  EXPECT_TRUE(Has(html, escaped)) << "the run dir, escaped";
  EXPECT_TRUE(Has(html, escaped + "/ck/step-25")) << "the checkpoint path, escaped";
  EXPECT_FALSE(Has(html, "<b>dir"));
  EXPECT_FALSE(Has(html, "'it'"));
}

TEST(ReportTest, ThePageHasEveryIncidentCheckpointAndNumberEscaped) {
  const std::string html = RenderReportHtml(Sample());
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_FALSE(Has(html, "<script"));
  EXPECT_FALSE(Has(html, "http://"));
  EXPECT_FALSE(Has(html, "https://"));
  // Escaped text, never raw.
  EXPECT_TRUE(Has(html, "gpt &lt;small&gt; &amp; &quot;quoted&quot;"));
  EXPECT_FALSE(Has(html, "gpt <small>"));
  EXPECT_TRUE(Has(html, "host&lt;a&gt;"));
  EXPECT_TRUE(Has(html, "culprit   rank 1 &lt;killed&gt;"));  // the triage text
  // The incident with its kind, rank, time and action.
  EXPECT_TRUE(Has(html, "id='incident-7'"));
  EXPECT_TRUE(Has(html, "#1 crash · rank 1 · host&lt;a&gt; · 2025-01-01 12:00:30Z"));
  EXPECT_TRUE(Has(html, "rank 1 killed by signal 9 (SIGKILL)"));
  EXPECT_TRUE(Has(html, "restart generation 1 from step 50"));
  // Every checkpoint, in the table and on the timeline.
  for (int64_t step : {25, 50, 75, 100}) {
    EXPECT_TRUE(Has(html, "<tr><td class='n'>" + std::to_string(step) + "</td>")) << step;
    EXPECT_TRUE(Has(html, "<title>checkpoint step " + std::to_string(step) + " committed")) << step;
  }
  EXPECT_TRUE(Has(html, "300.0 ms"));  // the stall of the checkpoint at 75
  // The numbers of the breakdown.
  EXPECT_TRUE(Has(html, "<td>wall time</td><td class='n'>100.0</td>"));
  EXPECT_TRUE(Has(html, "<td>detection</td><td class='n'>1.0</td>"));
  EXPECT_TRUE(Has(html, "<td>restart</td><td class='n'>3.0</td>"));
  EXPECT_TRUE(Has(html, "<td>redone steps</td><td class='n'>3.5</td>"));
  EXPECT_TRUE(Has(html, "<td>checkpoint stalls</td><td class='n'>0.3</td>"));
  EXPECT_TRUE(Has(html, "<b>92.2</b>"));
  EXPECT_TRUE(Has(html, "1m32s"));  // the effective time card
  EXPECT_TRUE(Has(html, "92.2%"));
  EXPECT_TRUE(Has(html, "51–57 (7)"));  // the redone steps
  // Both charts are drawn.
  EXPECT_TRUE(Has(html, "aria-label='Loss'"));
  EXPECT_TRUE(Has(html, "aria-label='Step time'"));
  EXPECT_TRUE(Has(html, "<polyline"));
}

TEST(ReportTest, ARunWithNothingRecordedStillRenders) {
  ReportData d;
  d.run.run_id = "r-20250101-0000";
  d.metrics_source = "no metrics.jsonl found";
  const std::string html = RenderReportHtml(d);
  EXPECT_TRUE(Has(html, "no attempts recorded"));
  EXPECT_TRUE(Has(html, "no metrics"));
  EXPECT_TRUE(Has(html, "Incidents (0)"));
}

}  // namespace
}  // namespace holdfast
