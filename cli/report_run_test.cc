// `runctl report` on a real run: holdfastd supervising two holdfast-train
// ranks, one of them killed mid-run (the quickstart's fault). The report must
// hold every incident and checkpoint lineage.db recorded, and lineage's numbers.
#include <cstdio>

#include "cli/report.h"
#include "tests/daemon/supervised_run.h"

namespace holdfast {
namespace {

using ReportRunTest = SupervisedRunTest;

bool Has(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

TEST_F(ReportRunTest, TheReportOfARunThatLostARankHoldsWhatLineageRecorded) {
  WriteJob();
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  auto st = WaitForStep(12, daemon);
  ASSERT_TRUE(st.has_value()) << ReadFile(dir_ / "daemon.log");
  ASSERT_EQ(kill(static_cast<pid_t>(st->nodes[0].ranks[1].pid), SIGKILL), 0);
  ASSERT_EQ(daemon.Wait(), 0) << ReadFile(dir_ / "daemon.log");

  const std::string out = dir_ / "report.html";
  ProcessResult r = RunProcess({BuildPath("cli/runctl"), "--run-dir", dir_ / "run", "report", "latest", "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string html = ReadFile(out);
  // Found from the run's job config (--set output.dir=...), not passed.
  EXPECT_TRUE(Has(html, "metrics: " + (dir_ / "out/metrics.jsonl"))) << r.output;

  auto rec = LatestRun();
  ASSERT_TRUE(rec.has_value());
  const std::string id = rec->run.run_id;
  auto attempts = rec->db->Attempts(id);
  auto gens = rec->db->Generations(id);
  auto ckpts = rec->db->Checkpoints(id);
  auto events = rec->db->Events(id, 0);
  ASSERT_TRUE(attempts.ok() && gens.ok() && ckpts.ok() && events.ok());
  ASSERT_EQ(gens->size(), 2u);
  ASSERT_FALSE(ckpts->empty());

  int incidents = 0;
  for (const EventRecord& e : *events) {
    if (!e.incident) continue;
    ++incidents;
    EXPECT_TRUE(Has(html, "id='incident-" + std::to_string(e.id) + "'"));
    EXPECT_TRUE(Has(html, "#" + std::to_string(incidents) + " " + e.kind + " · rank " + std::to_string(*e.rank)));
    EXPECT_TRUE(Has(html, HtmlEscape(e.summary))) << e.summary;
    EXPECT_TRUE(Has(html, FormatTime(e.time_ms)));
  }
  EXPECT_EQ(incidents, 1);
  EXPECT_TRUE(Has(html, "killed by signal 9 (SIGKILL)"));
  for (const CheckpointRecord& k : *ckpts) {
    EXPECT_TRUE(Has(html, "<title>checkpoint step " + std::to_string(k.step) + " committed")) << k.step;
    EXPECT_TRUE(Has(html, "<tr><td class='n'>" + std::to_string(k.step) + "</td>")) << k.step;
  }
  // Lineage's numbers: the wall time of the one attempt, the restart after
  // the crash, the steps redone from the checkpoint generation 1 resumed from.
  const AttemptRecord& a = attempts->front();
  const GenerationRecord &g0 = (*gens)[0], &g1 = (*gens)[1];
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1f", static_cast<double>(*a.ended_ms - a.started_ms) / 1000.0);
  EXPECT_TRUE(Has(html, std::string("<td>wall time</td><td class='n'>") + buf + "</td>"));
  if (*g0.last_step > g1.start_step) {
    EXPECT_TRUE(Has(html, std::to_string(g1.start_step + 1) + "–" + std::to_string(*g0.last_step) + " (" +
                              std::to_string(*g0.last_step - g1.start_step) + ")"));
  }
  EXPECT_TRUE(Has(html, "attempt 1, generation 0"));
}

}  // namespace
}  // namespace holdfast
