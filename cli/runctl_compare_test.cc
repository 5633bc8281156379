// runctl compare over a lineage.db built through LineageDb: runs side by
// side by an eval metric (a sweep's members), and what it refuses.
#include "cli/runctl_test_fixture.h"

namespace holdfast {
namespace {

// A sweep's members side by side (runctl compare): each run's best and last
// value of an eval metric, then the metric at every evaluated checkpoint, a
// column per run, oldest run first; a checkpoint evaluated at another step
// does not count; what cannot be compared is refused with what to give.
TEST_F(RunctlTest, CompareShowsRunsSideBySideByAnEvalMetric) {
  {
    int64_t now = kT0;
    LineageOptions options;
    options.clock = [&now] { return now += 1000; };
    Result<std::unique_ptr<LineageDb>> db = LineageDb::Open(db_path(), options);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    // Accuracy per lr at steps 50, 100, 150 (NAN: not evaluated there).
    const std::vector<std::pair<std::string, std::vector<double>>> sweep = {
        {"dpo lr=1e-4", {0.53, 0.565, 0.573}}, {"dpo lr=3e-4", {0.53, 0.54, 0.573}}, {"dpo lr=1e-3", {0.41, 0.62, 0.60}}};
    for (size_t i = 0; i < sweep.size(); ++i) {
      RunRecord r;
      r.run_id = "r-20250101-s00" + std::to_string(i + 1);
      r.name = sweep[i].first;
      r.run_dir = dir_;
      ASSERT_TRUE((*db)->CreateRun(r).ok());
      for (size_t k = 0; k < 3; ++k) {
        CheckpointRecord ck;
        ck.run_id = r.run_id;
        ck.step = 50 * static_cast<int64_t>(k + 1);
        ck.path = dir_ + "/ck";
        ck.world_size = 1;
        ck.metrics = {{"eval_reward_accuracy", sweep[i].second[k]}, {"eval_loss", 1.0 - sweep[i].second[k]},
                      {"eval_step", static_cast<double>(ck.step)}};
        ASSERT_TRUE((*db)->RecordCheckpoint(ck).ok());
      }
      ASSERT_TRUE((*db)->EndRun(r.run_id, RunState::kSucceeded, "").ok());
    }
    // A fourth run: one checkpoint whose metrics are of an earlier step, one without any.
    RunRecord r;
    r.run_id = "r-20250101-s004";
    r.name = "dpo lr=3e-3";
    r.run_dir = dir_;
    ASSERT_TRUE((*db)->CreateRun(r).ok());
    CheckpointRecord ck;
    ck.run_id = r.run_id;
    ck.step = 60;
    ck.path = dir_ + "/ck";
    ck.world_size = 1;
    ck.metrics = {{"eval_reward_accuracy", 0.9}, {"eval_step", 50}};
    ASSERT_TRUE((*db)->RecordCheckpoint(ck).ok());
  }
  Outcome o = Run({"compare", "--metric", "eval_reward_accuracy"});
  ASSERT_EQ(o.exit, 0) << o.err;
  for (const char* want : {"eval_reward_accuracy (higher is better)", "dpo lr=1e-4", "succeeded",
                           "0.6200", "0.5730", "r-20250101-s004"}) {
    EXPECT_TRUE(Has(o.out, want)) << "missing '" << want << "' in\n" << o.out;
  }
  EXPECT_FALSE(Has(o.out, "0.9000")) << "measured at step 50, recorded with step 60:\n" << o.out;
  // Oldest first, in both tables.
  EXPECT_LT(o.out.find("dpo lr=1e-4"), o.out.find("dpo lr=3e-4"));
  EXPECT_LT(o.out.find("STEP"), o.out.rfind("0.6000"));
  json j = RunJson({"compare", "--metric", "eval_reward_accuracy"});
  ASSERT_EQ(j["runs"].size(), 4u);
  EXPECT_EQ(j["higher_is_better"], true);
  EXPECT_EQ(j["runs"][0]["run_id"], "r-20250101-s001");
  EXPECT_EQ(j["runs"][2]["best"]["step"], 100);   // lr 1e-3 peaked at step 100
  EXPECT_EQ(j["runs"][2]["last"]["value"], 0.60);
  EXPECT_EQ(j["runs"][1]["values"].size(), 3u);
  EXPECT_TRUE(j["runs"][3]["best"].is_null());

  // Two named runs, the default metric (eval_loss: lower is better).
  j = RunJson({"compare", "r-20250101-s003", "r-20250101-s001"});
  EXPECT_EQ(j["metric"], "eval_loss");
  EXPECT_EQ(j["higher_is_better"], false);
  ASSERT_EQ(j["runs"].size(), 2u);
  EXPECT_EQ(j["runs"][0]["run_id"], "r-20250101-s003");
  EXPECT_EQ(j["runs"][0]["best"]["step"], 100);

  // The page: a curve per run with points (one that has none draws none), each
  // run's best point ringed, the tables; written whole.
  const std::string page = dir_ + "/compare.html";
  o = Run({"compare", "--metric", "eval_reward_accuracy", "--html", page});
  ASSERT_EQ(o.exit, 0) << o.err;
  EXPECT_TRUE(Has(o.out, "curves: " + page)) << o.out;
  const std::string html = ReadFile(page);
  EXPECT_TRUE(Has(html, "4 runs compared by eval_reward_accuracy")) << html.substr(0, 400);
  size_t curves = 0;
  for (size_t at = html.find("<polyline"); at != std::string::npos; at = html.find("<polyline", at + 1)) ++curves;
  EXPECT_EQ(curves, 3u) << "three runs have values, the fourth none";
  EXPECT_TRUE(Has(html, "r-20250101-s003 (dpo lr=1e-3)")) << "a curve names its run";
  EXPECT_TRUE(Has(html, "step 100, eval_reward_accuracy 0.6200 (best)")) << "lr 1e-3's best point is ringed";
  EXPECT_FALSE(Has(html, "0.9000"));
  EXPECT_FALSE(std::filesystem::exists(page + ".tmp"));
  o = Run({"compare", "--metric", "eval_reward_accuracy", "--html", dir_ + "/no/such/folder/c.html"});
  EXPECT_EQ(o.exit, 1);
  EXPECT_TRUE(Has(o.err, "cannot write")) << o.err;

  o = Run({"compare", "--metric", "eval_bleu"});
  EXPECT_EQ(o.exit, 2);
  EXPECT_TRUE(Has(o.err, "eval_loss, eval_reward_accuracy")) << o.err;
  o = Run({"compare", "r-20250101-s001", "r-nope"});
  EXPECT_EQ(o.exit, 3) << o.err;
  o = Run({"compare", "r-20250101-s00"});  // ambiguous prefix
  EXPECT_NE(o.exit, 0);
  EXPECT_NE(o.err, "");
}

}  // namespace
}  // namespace holdfast
