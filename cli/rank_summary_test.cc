// Issue 24, must-show 2: 512-rank runs through runctl's real renderers
// (PrintLiveStatus, PrintTriage, cli/rank_summary.h). What on-call reads first
// stays on one screen whatever the world size: the default status is at most
// 40 lines and names the unhealthy ranks; triage's first 10 lines hold the
// culprit, its log file, the action and the runbook; the other ranks fold
// into counted lines; --rank/--node/--all select as documented.
#include "cli/rank_summary.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/format.h"

namespace holdfast {
namespace {

using json = nlohmann::json;

constexpr int kWorld = 512;
constexpr int kPerNode = 8;
constexpr int kStopped = 137;  // on gpu-a17
constexpr int64_t kT = 1735732800000;  // 2025-01-01 12:00:00Z

std::string Host(int node) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "gpu-a%02d", node);
  return buf;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::string Head(const std::string& text, size_t n) {
  std::string out;
  std::vector<std::string> lines = Lines(text);
  for (size_t i = 0; i < n && i < lines.size(); ++i) out += lines[i] + "\n";
  return out;
}

bool Has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

// The rows of a table that start with a host name (a rank's row).
size_t RankRowsIn(const std::string& text) {
  size_t n = 0;
  for (const std::string& l : Lines(text)) n += l.rfind("gpu-a", 0) == 0 ? 1 : 0;
  return n;
}

// 512 ranks on 64 nodes at step 1234, every rank waiting in allreduce #9001
// but rank 137, which a SIGSTOP froze in forward.
RunStatus Live512() {
  RunStatus s;
  s.run_id = "r-20250101-big";
  s.name = "gpt-512";
  s.state = "running";
  s.attempt = 1;
  s.generation = 2;
  s.step = 1234;
  s.world_size = kWorld;
  s.restart_budget = 3;
  for (int n = 0; n < kWorld / kPerNode; ++n) {
    NodeStatus node;
    node.node = n;
    node.host = Host(n);
    for (int i = 0; i < kPerNode; ++i) {
      RankStatus r;
      r.rank = n * kPerNode + i;
      r.pid = 10000 + r.rank;
      r.state = "running";
      r.step = 1234;
      r.phase = "collective";
      r.heartbeat_age_s = 0.2;
      r.waiting_on = 9001;
      r.collectives_issued = 9001;
      if (r.rank == kStopped) {
        r.state = "stopped (SIGSTOP)";
        r.phase = "forward";
        r.heartbeat_age_s = 62;
        r.waiting_on.reset();
        r.collectives_issued = 9000;
      }
      node.ranks.push_back(r);
    }
    s.nodes.push_back(node);
  }
  return s;
}

std::string StatusText(const RunStatus& s, const RankSelection& sel = {}) {
  std::ostringstream os;
  PrintLiveStatus(os, s, sel);
  return os.str();
}

TEST(RankSummaryTest, DefaultStatusOf512RanksIsAScreenNamingTheStoppedRank) {
  const RunStatus s = Live512();
  const std::string out = StatusText(s);
  EXPECT_LE(Lines(out).size(), 40u) << out;
  const std::string head = Head(out, 6);
  EXPECT_TRUE(Has(head, "512 ranks on 64 nodes: 511 running at step 1234, 1 stopped (SIGSTOP)\n")) << out;
  EXPECT_TRUE(Has(out, "waiting in collectives: 511 in #9001\n")) << out;
  EXPECT_TRUE(Has(out, "nodes: 63 of 64 healthy; not healthy:\n  gpu-a17  7 healthy, 1 stopped (SIGSTOP)\n")) << out;
  EXPECT_TRUE(Has(out, "not healthy: 1 rank ")) << out;
  // Its row and no other rank's.
  EXPECT_EQ(RankRowsIn(out), 1u) << out;
  EXPECT_TRUE(Has(out, "gpu-a17  137   10137  stopped (SIGSTOP)  1234  forward  1m02s ago  -")) << out;
  EXPECT_EQ(ExitForHealth(LiveHealth(s, std::nullopt)), kRunctlHung);
}

TEST(RankSummaryTest, AHealthyRunSaysSoInThreeLines) {
  RunStatus s = Live512();
  for (NodeStatus& n : s.nodes) {
    for (RankStatus& r : n.ranks) {
      r.state = "running";
      r.phase = "backward";
      r.waiting_on.reset();
      r.step = r.rank % 2 == 0 ? 1234 : 1233;  // mid-step: one behind is in step
    }
  }
  const std::string out = StatusText(s);
  EXPECT_TRUE(Has(out, "512 ranks on 64 nodes: 512 running at steps 1233-1234\nnodes: all 64 healthy\n")) << out;
  EXPECT_FALSE(Has(out, "not healthy")) << out;
  EXPECT_FALSE(Has(out, "waiting in collectives")) << out;
  EXPECT_EQ(RankRowsIn(out), 0u) << out;
  EXPECT_EQ(ExitForHealth(LiveHealth(s, std::nullopt)), kRunctlOk);
  RankRow done;
  done.state = "exited with code 0";  // a rank that finished is not a problem; one that failed is
  EXPECT_EQ(Condition(done, {}), "");
  done.state = "exited with code 1";
  EXPECT_EQ(Condition(done, {}), "exited with code 1");
}

TEST(RankSummaryTest, ManyUnhealthyRanksFoldByConditionAndStayOnAScreen) {
  RunStatus s = Live512();
  // Nodes 10-14 lost every rank (exit 1), ranks 200-203 lag, 300 has no record.
  for (NodeStatus& n : s.nodes) {
    for (RankStatus& r : n.ranks) {
      if (n.node >= 10 && n.node <= 14) r.state = "exited with code 1";
      if (r.rank >= 200 && r.rank <= 203) r.step = 1230;
      if (r.rank == 300) r.phase = "unknown (no progress record written)";
    }
  }
  const std::string out = StatusText(s);
  EXPECT_LE(Lines(out).size(), 40u) << out;
  EXPECT_TRUE(Has(Head(out, 6), "512 ranks on 64 nodes: 470 running at steps 1230-1234, 40 exited with code 1, "
                                "1 running without a progress record, 1 stopped (SIGSTOP)\n"))
      << out;
  EXPECT_TRUE(Has(out, "not healthy: 46 ranks")) << out;
  EXPECT_TRUE(Has(out, "  40 exited with code 1: ranks 80-119 on 5 nodes\n")) << out;
  EXPECT_TRUE(Has(out, "  4 lagging 4 steps: ranks 200-203 on 1 node\n")) << out;
  EXPECT_TRUE(Has(out, "  1 stopped (SIGSTOP): rank 137 on 1 node\n")) << out;
  EXPECT_TRUE(Has(out, "  1 no progress record: rank 300 on 1 node\n")) << out;
  EXPECT_TRUE(Has(out, "  ... and 2 more nodes (--all)\n")) << out;
  EXPECT_EQ(RankRowsIn(out), 0u) << out;
}

// CI, 2 cores under load: a follower's 8 ranks showed "lagging 2 steps" on a
// healthy run stepping every 20 ms, because their steps were as of the
// follower's last report (poll_ms 50) and the leader's own were current.
TEST(RankSummaryTest, AFollowersStepsAsOfItsLastReportAreNotALag) {
  RunStatus s = Live512();
  for (NodeStatus& n : s.nodes) {
    for (RankStatus& r : n.ranks) {
      r.steps_per_s = 50;
      if (n.node == 0) continue;  // the leader's own ranks are current
      r.report_age_s = 0.05;      // 2.5 steps at 50 steps/s
      r.step = 1232;
      if (r.rank >= 200 && r.rank <= 203) r.step = 1228;  // 6 behind: 3.5 beyond what the age explains
    }
  }
  std::string out = StatusText(s);
  EXPECT_TRUE(Has(out, "not healthy: 5 ranks")) << out;
  EXPECT_TRUE(Has(out, "  gpu-a25  4 healthy, 4 lagging 6 steps\n")) << out;
  EXPECT_EQ(RankRowsIn(out), 5u) << out;
  EXPECT_FALSE(Has(out, "lagging 2 steps")) << out;

  // A view that old with no pace yet (the first steps) tells nothing: not lagging.
  for (NodeStatus& n : s.nodes) {
    for (RankStatus& r : n.ranks) r.steps_per_s.reset();
  }
  out = StatusText(s);
  EXPECT_FALSE(Has(out, "lagging")) << out;
  // The leader's own ranks have a current view: 2 behind is a lag whatever the pace.
  s.nodes[0].ranks[3].step = 1232;
  out = StatusText(s);
  EXPECT_TRUE(Has(out, "  gpu-a00  7 healthy, 1 lagging 2 steps\n")) << out;
}

TEST(RankSummaryTest, RankNodeAndAllSelectFullRows) {
  const RunStatus s = Live512();
  RankSelection all;
  all.all = true;
  std::string out = StatusText(s, all);
  EXPECT_EQ(RankRowsIn(out), 512u);
  EXPECT_TRUE(Has(out, "STEPS/S")) << "--all is the full table";

  RankSelection some;
  some.ranks = *ParseRankList("3,136-137");
  out = StatusText(s, some);
  EXPECT_EQ(RankRowsIn(out), 3u) << out;
  EXPECT_TRUE(Has(out, "gpu-a00  3 ")) << out;
  EXPECT_TRUE(Has(out, "gpu-a17  136 ")) << out;
  EXPECT_TRUE(Has(out, "gpu-a17  137 ")) << out;

  for (const std::string node : {"gpu-a05", "5"}) {  // a host name or a node index
    RankSelection on;
    on.node = node;
    out = StatusText(s, on);
    EXPECT_EQ(RankRowsIn(out), 8u) << out;
    for (const std::string& l : Lines(out)) {
      if (l.rfind("gpu-a", 0) == 0) {
        EXPECT_EQ(l.rfind("gpu-a05  ", 0), 0u) << l;
      }
    }
  }
  RankSelection both;  // together: that node's ranks among them
  both.ranks = {40, 41, 200};
  both.node = "gpu-a05";
  EXPECT_EQ(RankRowsIn(StatusText(s, both)), 2u);

  const std::vector<RankRow> rows = RankRows(s);
  RankSelection bad;
  bad.ranks = {3, 600, 601};
  Status st = CheckSelection(bad, rows);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "--rank: no rank 600-601 in this run (it has ranks 0-511)");
  RankSelection nowhere;
  nowhere.node = "gpu-b01";
  st = CheckSelection(nowhere, rows);
  EXPECT_TRUE(Has(st.message(), "--node: no node 'gpu-b01' in this run (it has gpu-a00, gpu-a01,")) << st.message();
  EXPECT_TRUE(Has(st.message(), "... 56 more)")) << st.message();
  EXPECT_TRUE(CheckSelection(some, rows).ok());
}

TEST(RankSummaryTest, RankListsParseAndPrint) {
  EXPECT_EQ(*ParseRankList("3,8-11"), (std::vector<int>{3, 8, 9, 10, 11}));
  EXPECT_EQ(*ParseRankList("5,1,5"), (std::vector<int>{1, 5}));
  for (const char* bad : {"", "x", "1,,2", "5-3", "-1", "1-", "3.5", "1 2"}) {
    Result<std::vector<int>> r = ParseRankList(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_TRUE(Has(r.status().message(), "--rank")) << r.status().message();
    }
  }
  EXPECT_EQ(RankList({0, 1, 2, 3, 5, 7, 8}), "0-3,5,7-8");
  std::vector<int> odd;
  for (int r = 1; r < 40; r += 2) odd.push_back(r);
  EXPECT_EQ(RankList(odd, 3), "1,3,5,... (20 ranks)");
}

TEST(RankSummaryTest, HealthGivesStatusItsExitCode) {
  RunStatus s = Live512();
  for (NodeStatus& n : s.nodes) {
    for (RankStatus& r : n.ranks) r.state = "running";
  }
  EXPECT_EQ(LiveHealth(s, std::nullopt), RunHealth::kTraining);
  RoleStatus role;
  role.role = "reward";
  role.state = "stopped (SIGSTOP)";  // a frozen role process holds the learner up
  s.roles.push_back(role);
  EXPECT_EQ(LiveHealth(s, std::nullopt), RunHealth::kHung);
  s.roles[0].state = "stopped";  // stopped by the daemon
  EXPECT_EQ(LiveHealth(s, std::nullopt), RunHealth::kTraining);
  s.state = "stopping";
  s.last_incident = IncidentSummary{"hang", "rank 137 never entered allreduce #9001", kT, "", ""};
  EXPECT_EQ(LiveHealth(s, std::nullopt), RunHealth::kHung);
  s.state = "restarting";
  EXPECT_EQ(LiveHealth(s, std::nullopt), RunHealth::kHung);
  s.last_incident->kind = "crash";  // recovering from a crash, within its budget: training
  EXPECT_EQ(LiveHealth(s, std::nullopt), RunHealth::kTraining);
  s.state = "finished";
  EXPECT_EQ(LiveHealth(s, RunState::kFailed), RunHealth::kFailed);
  EXPECT_EQ(LiveHealth(s, RunState::kSucceeded), RunHealth::kSucceeded);
  EXPECT_EQ(ExitForHealth(RunHealth::kSucceeded), 0);
  EXPECT_EQ(ExitForHealth(RecordedHealth(RunState::kRunning)), 0);
  EXPECT_EQ(ExitForHealth(RecordedHealth(RunState::kFailed)), 7);
  EXPECT_EQ(ExitForHealth(RecordedHealth(RunState::kStopped)), 8);
  EXPECT_EQ(ExitForHealth(RecordedHealth(RunState::kPreempted)), 8);
  // Codes runctl already used keep their meaning.
  for (int code : {kRunctlHung, kRunctlRunFailed, kRunctlRunStopped}) {
    for (int old : {kRunctlOk, kRunctlFailure, kRunctlUsage, kRunctlNotFound, kRunctlUnreachable,
                    kRunctlStillRunning}) {
      EXPECT_NE(code, old);
    }
    EXPECT_TRUE(Has(kExitCodesHelp, "  " + std::to_string(code) + "  ")) << kExitCodesHelp;
  }
}

// ---- triage ----

json RankJson(int rank, const std::string& phase, uint64_t waiting_on, const char* proc_state, double age) {
  json r = {{"rank", rank},        {"node", rank / kPerNode}, {"host", Host(rank / kPerNode)},
            {"pid", 20000 + rank}, {"alive", true},           {"proc_state", proc_state},
            {"phase", phase},      {"step", 1234},            {"phase_age_s", age},
            {"heartbeat_age_s", age}, {"collectives_issued", waiting_on > 0 ? waiting_on : 9000},
            {"waiting_on", waiting_on}};
  if (waiting_on > 0) r["recent_collectives"] = {{{"seq", waiting_on}, {"kind", "allreduce"}, {"done", false}}};
  return r;
}

EventRecord Hang512(const std::vector<int>& culprits) {
  json ranks = json::array();
  for (int r = 0; r < kWorld; ++r) {
    const bool stopped = r == kStopped;
    ranks.push_back(stopped ? RankJson(r, "forward", 0, "T", 313) : RankJson(r, "collective", 9001, "S", 302 + r % 10));
  }
  EventRecord e;
  e.id = 7;
  e.time_ms = kT;
  e.kind = "hang";
  e.incident = true;
  e.attempt = 1;
  e.generation = 2;
  e.node = Host(kStopped / kPerNode);
  e.summary = "rank 137 never entered allreduce #9001 that 511 ranks wait in";
  e.evidence_json = json({{"stalled_s", 312.5}, {"timeout_s", 300.0}, {"allowance", "step"}, {"culprits", culprits},
                          {"ranks", ranks}})
                        .dump();
  e.action = "stopped all ranks; restart generation 3 from step 1200 [recovery: restart in place now]";
  e.runbook = "runbooks/hang.md";
  return e;
}

RunRecord Run512() {
  RunRecord run;
  run.run_id = "r-20250101-big";
  run.name = "gpt-512";
  run.run_dir = "/runs/r1";
  run.world_size = kWorld;
  return run;
}

std::string Triage(const EventRecord& e, const RankSelection& sel = {}) {
  std::ostringstream os;
  PrintTriage(os, Run512(), e, "", sel);
  return os.str();
}

TEST(RankSummaryTest, TriageOf512RanksOpensWithCulpritLogActionAndRunbook) {
  const std::string out = Triage(Hang512({kStopped}));
  const std::string first10 = Head(out, 10);
  EXPECT_TRUE(Has(first10, "culprit   rank 137 on gpu-a17, pid 20137: forward at step 1234 (for 5m13s)")) << out;
  EXPECT_TRUE(Has(first10, "process stopped")) << out;
  EXPECT_TRUE(Has(first10, "stalled   no step for 5m12s (step allowance 5m00s)\n")) << out;
  EXPECT_TRUE(Has(first10, "log       /runs/r1/logs/a1-g2-rank137.log (on gpu-a17)\n")) << out;
  EXPECT_TRUE(Has(first10, "action    stopped all ranks; restart generation 3")) << out;
  EXPECT_TRUE(Has(first10, "runbook   hang.md  (runbooks/hang.md in the Holdfast source tree)\n")) << out;
  // The other 511: one line, counted, with when they started waiting.
  EXPECT_TRUE(Has(out, "others (by state; --all: a line each):\n"
                       "  511 ranks waiting in allreduce #9001 at step 1234 since 2025-01-01 11:54:49Z "
                       "(for 5m02s..5m11s): ranks 0-136,138-511 on 64 nodes\n"))
      << out;
  EXPECT_LE(Lines(out).size(), 14u) << out;

  RankSelection all;
  all.all = true;
  const std::string every = Triage(Hang512({kStopped}), all);
  EXPECT_EQ(Head(every, 8), Head(out, 8)) << "--all changes only what follows the runbook";
  size_t others = 0;
  for (const std::string& l : Lines(every)) others += l.rfind("  rank ", 0) == 0 ? 1 : 0;
  EXPECT_EQ(others, 511u);
}

TEST(RankSummaryTest, TriageFoldsEachStateIntoItsOwnCountedLine) {
  EventRecord e = Hang512({kStopped});
  json ev = json::parse(e.evidence_json);
  for (json& r : ev["ranks"]) {
    const int rank = r["rank"];
    if (rank >= 300 && rank < 500) r = RankJson(rank, "backward", 0, "R", 300);  // 200 in backward
    if (rank >= 500) r["alive"] = false;                                          // 12 exited
    if (rank == 7) r["proc_state"] = "D";                                         // one in the kernel
  }
  e.evidence_json = ev.dump();
  const std::string out = Triage(e);
  EXPECT_TRUE(Has(out, "  298 ranks waiting in allreduce #9001 at step 1234 since ")) << out;
  EXPECT_TRUE(Has(out, ": ranks 0-6,8-136,138-299 on 38 nodes\n")) << out;
  EXPECT_TRUE(Has(out, "  200 ranks in backward at step 1234 since 2025-01-01 11:55:00Z (for 5m00s): "
                       "ranks 300-499 on 26 nodes\n"))
      << out;
  EXPECT_TRUE(Has(out, "  12 ranks exited since ")) << out;
  // A group of one is the rank's own line.
  EXPECT_TRUE(Has(out, "\n  rank 7 on gpu-a00, pid 20007: collective at step 1234")) << out;
  EXPECT_LE(Lines(out).size(), 16u) << out;
}

TEST(RankSummaryTest, EveryRankACulpritStillLeavesActionAndRunbookInTheFirstTenLines) {
  std::vector<int> every;
  for (int r = 0; r < kWorld; ++r) every.push_back(r);
  const std::string out = Triage(Hang512(every));
  const std::string first10 = Head(out, 10);
  EXPECT_TRUE(Has(first10, "culprit   rank 0 on gpu-a00")) << out;
  EXPECT_TRUE(Has(first10, "culprit   rank 1 on gpu-a00")) << out;
  EXPECT_TRUE(Has(first10, "culprit   and 510 more: ranks 2-511 (--all describes each")) << out;
  EXPECT_TRUE(Has(first10, "log       /runs/r1/logs/a1-g2-rank0.log (on gpu-a00); the other culprits' beside it\n"))
      << out;
  EXPECT_TRUE(Has(first10, "\naction    ")) << out;
  EXPECT_TRUE(Has(first10, "\nrunbook   hang.md")) << out;
  EXPECT_FALSE(Has(out, "others")) << "no rank is left to fold:\n" << out;
}

TEST(RankSummaryTest, ACrashWithALongLogTailKeepsItsLogLinesAfterTheRunbook) {
  EventRecord e = Hang512({});
  json ev = json::parse(e.evidence_json);
  ev.erase("culprits");
  ev.erase("stalled_s");
  ev["rank"] = 42;
  ev["signal"] = 11;
  ev["log_tail"] = json::array();
  for (int i = 0; i < 20; ++i) ev["log_tail"].push_back("line " + std::to_string(i));
  e.kind = "crash";
  e.rank = 42;
  e.summary = "rank 42 killed by signal 11 (SIGSEGV)";
  e.runbook = "runbooks/crash.md";
  e.evidence_json = ev.dump();
  const std::string out = Triage(e);
  const std::string first10 = Head(out, 10);
  EXPECT_TRUE(Has(first10, "culprit   rank 42 on gpu-a05")) << out;
  EXPECT_TRUE(Has(first10, "exit      killed by signal 11 (SIGSEGV)\n")) << out;
  EXPECT_TRUE(Has(first10, "log       /runs/r1/logs/a1-g2-rank42.log (on gpu-a05)\n")) << out;
  EXPECT_TRUE(Has(first10, "\nrunbook   crash.md")) << out;
  EXPECT_LT(out.find("runbook   "), out.find("last log lines:\n  | line 0\n")) << out;
}

TEST(RankSummaryTest, RecordedRanksSummariseTheIncidentsEvidence) {
  const EventRecord e = Hang512({kStopped});
  Result<IncidentEvidence> ev = ParseIncidentEvidence(e.evidence_json);
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  const std::vector<RankRow> rows = RankRows(*ev, Culprits(e, *ev));
  std::ostringstream os;
  PrintRankSummary(os, rows, ContextOf(rows));
  const std::string out = os.str();
  EXPECT_LE(Lines(out).size(), 12u) << out;
  EXPECT_TRUE(Has(out, "512 ranks on 64 nodes: 511 running at step 1234, 1 stopped (SIGSTOP)\n")) << out;
  EXPECT_TRUE(Has(out, "waiting in collectives: 511 in allreduce #9001\n")) << out;
  EXPECT_TRUE(Has(out, "gpu-a17  137   20137  culprit, stopped (SIGSTOP)")) << out;
}

// A model-parallel run's waits are counted by group, in each group's own
// numbers (the daemon's status names the ring entry's group): ranks of
// different dp groups in their 196th reduce-scatter fold together.
TEST(RankSummaryTest, ModelParallelWaitsAreCountedInTheirGroupsNumbers) {
  RunStatus s = Live512();
  for (NodeStatus& n : s.nodes) {
    for (RankStatus& r : n.ranks) {
      if (!r.waiting_on) continue;
      const bool first_stage = r.rank < 256;
      r.waiting_kind = first_stage ? "reduce_scatter" : "send/recv";
      r.waiting_group = first_stage ? "dp" : "pp";
      r.waiting_group_seq = first_stage ? 196 : 34;
    }
  }
  s.nodes[0].ranks[0].waiting_group.clear();  // an unlabelled entry: the global number
  s.nodes[0].ranks[0].waiting_group_seq.reset();
  const std::string out = StatusText(s);
  EXPECT_TRUE(Has(out, "waiting in collectives: 256 in send/recv #34 of pp, 254 in reduce_scatter #196 of dp, "
                       "1 in reduce_scatter #9001\n"))
      << out;
}

}  // namespace
}  // namespace holdfast
