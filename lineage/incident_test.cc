// incident_test: the evidence holdfastd writes reads back, also from older
// files; the runbook map covers every event kind and names files that exist.
#include "lineage/incident.h"

#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <sys/stat.h>

#include <gtest/gtest.h>

namespace holdfast {
namespace {

// Written by daemon/triage.cc's TriageHang for daemon/triage_test.cc's
// TriageTest.NamesTheRankThatNeverEnteredTheCollective (before this file
// existed: the shape old lineage.db files have).
const char kDaemonHang[] =
    R"j({"allowance":"step","culprits":[3],"ranks":[{"alive":true,"checkpoint_step":0,"collectives_don)j"
    R"j(e":0,"collectives_issued":1287,"heartbeat_age_s":0.0,"last_step_ms":250.0,"node":0,"phase":"co)j"
    R"j(llective","phase_age_s":41.0,"pid":1000,"proc_state":"S","rank":0,"recent_collectives":[],"rec)j"
    R"j(ord_torn":false,"record_valid":true,"step":1286,"waiting_on":1287},{"alive":true,"checkpoint_s)j"
    R"j(tep":0,"collectives_done":0,"collectives_issued":1287,"heartbeat_age_s":0.0,"last_step_ms":250)j"
    R"j(.0,"node":0,"phase":"collective","phase_age_s":41.0,"pid":1001,"proc_state":"S","rank":1,"rece)j"
    R"j(nt_collectives":[],"record_torn":false,"record_valid":true,"step":1286,"waiting_on":1287},{"al)j"
    R"j(ive":true,"checkpoint_step":0,"collectives_done":0,"collectives_issued":1287,"heartbeat_age_s")j"
    R"j(:0.0,"last_step_ms":250.0,"node":0,"phase":"collective","phase_age_s":40.0,"pid":1002,"proc_st)j"
    R"j(ate":"S","rank":2,"recent_collectives":[],"record_torn":false,"record_valid":true,"step":1286,)j"
    R"j("waiting_on":1287},{"alive":true,"checkpoint_step":0,"collectives_done":0,"collectives_issued")j"
    R"j(:1286,"heartbeat_age_s":0.0,"last_step_ms":250.0,"node":0,"phase":"backward","phase_age_s":43.)j"
    R"j(0,"pid":1003,"proc_state":"S","rank":3,"recent_collectives":[],"record_torn":false,"record_val)j"
    R"j(id":true,"step":1286,"waiting_on":0}],"stalled_s":43.0,"timeout_s":5.0})j";

// TriageHang with a ring of collectives, a stopped rank and a rank that never
// reported (its record torn).
const char kDaemonHangWithRing[] =
    R"j({"allowance":"step","culprits":[1,2],"ranks":[{"alive":true,"checkpoint_step":5,"collectives_d)j"
    R"j(one":14,"collectives_issued":15,"heartbeat_age_s":2.0,"last_step_ms":250.0,"node":0,"phase":"c)j"
    R"j(ollective","phase_age_s":9.0,"pid":1000,"proc_state":"S","rank":0,"recent_collectives":[{"byte)j"
    R"j(s":4096,"done":true,"kind":"allreduce","seq":1},{"bytes":8192,"done":true,"kind":"allreduce",")j"
    R"j(seq":2},{"bytes":12288,"done":true,"kind":"broadcast","seq":3},{"bytes":16384,"done":true,"kin)j"
    R"j(d":"allreduce","seq":4},{"bytes":20480,"done":true,"kind":"allreduce","seq":5},{"bytes":24576,)j"
    R"j("done":true,"kind":"broadcast","seq":6},{"bytes":28672,"done":true,"kind":"allreduce","seq":7})j"
    R"j(,{"bytes":32768,"done":true,"kind":"allreduce","seq":8},{"bytes":36864,"done":true,"kind":"bro)j"
    R"j(adcast","seq":9},{"bytes":40960,"done":true,"kind":"allreduce","seq":10},{"bytes":45056,"done")j"
    R"j(:true,"kind":"allreduce","seq":11},{"bytes":49152,"done":true,"kind":"broadcast","seq":12},{"b)j"
    R"j(ytes":53248,"done":true,"kind":"allreduce","seq":13},{"bytes":57344,"done":true,"kind":"allred)j"
    R"j(uce","seq":14},{"bytes":61440,"done":false,"kind":"broadcast","seq":15}],"record_torn":false,")j"
    R"j(record_valid":true,"step":7,"waiting_on":15},{"alive":true,"checkpoint_step":0,"collectives_do)j"
    R"j(ne":0,"collectives_issued":14,"heartbeat_age_s":0.0,"last_step_ms":250.0,"node":0,"phase":"for)j"
    R"j(ward","phase_age_s":9.0,"pid":1001,"proc_state":"T","rank":1,"recent_collectives":[],"record_t)j"
    R"j(orn":false,"record_valid":true,"step":7,"waiting_on":0},{"alive":false,"node":1,"pid":0,"proc_)j"
    R"j(state":"?","rank":2,"record_torn":true,"record_valid":false}],"stalled_s":9.25,"timeout_s":5.0)j"
    R"j(})j";

// TriageExit for triage_test.cc's TriageTest.CrashNamesRankSignalPhaseAndKeepsTheLogTail.
const char kDaemonCrash[] =
    R"j({"exit_code":-1,"log_tail":["step 36 ...","boom"],"rank":1,"ranks":[{"alive":true,"checkpoint_)j"
    R"j(step":0,"collectives_done":0,"collectives_issued":80,"heartbeat_age_s":0.0,"last_step_ms":250.)j"
    R"j(0,"node":0,"phase":"collective","phase_age_s":0.0,"pid":1000,"proc_state":"S","rank":0,"recent)j"
    R"j(_collectives":[],"record_torn":false,"record_valid":true,"step":36,"waiting_on":80},{"alive":t)j"
    R"j(rue,"checkpoint_step":0,"collectives_done":0,"collectives_issued":79,"heartbeat_age_s":0.0,"la)j"
    R"j(st_step_ms":250.0,"node":0,"phase":"backward","phase_age_s":0.0,"pid":1001,"proc_state":"S","r)j"
    R"j(ank":1,"recent_collectives":[],"record_torn":false,"record_valid":true,"step":36,"waiting_on":)j"
    R"j(0}],"signal":9,"status":"killed by signal 9 (SIGKILL)"})j";

std::string SourceDir() {
  const char* dir = std::getenv("HOLDFAST_SOURCE_DIR");
  return dir != nullptr ? dir : "";
}

IncidentEvidence Parsed(const std::string& text) {
  Result<IncidentEvidence> e = ParseIncidentEvidence(text);
  EXPECT_TRUE(e.ok()) << e.status().ToString() << "\n" << text;
  return e.ok() ? *e : IncidentEvidence{};
}

TEST(IncidentEvidenceTest, WhatTheDaemonWroteReadsBackAndWritesTheSameBytes) {
  for (const char* text : {kDaemonHang, kDaemonHangWithRing, kDaemonCrash}) {
    IncidentEvidence e = Parsed(text);
    EXPECT_EQ(ToJson(e), text);
  }
}

TEST(IncidentEvidenceTest, AHangNamesItsCulpritAndWhatEveryRankDid) {
  IncidentEvidence e = Parsed(kDaemonHang);
  EXPECT_EQ(e.culprits, std::vector<int>{3});
  EXPECT_EQ(e.stalled_s, 43.0);
  EXPECT_EQ(e.timeout_s, 5.0);
  EXPECT_EQ(e.allowance, "step");
  EXPECT_FALSE(e.rank.has_value());
  EXPECT_TRUE(e.exit_status.empty());
  ASSERT_EQ(e.ranks.size(), 4u);
  const RankEvidence& r3 = e.ranks[3];
  EXPECT_EQ(r3.rank, 3);
  EXPECT_EQ(r3.node, 0);
  EXPECT_EQ(r3.pid, 1003);
  EXPECT_TRUE(r3.alive);
  EXPECT_EQ(r3.proc_state, "S");
  EXPECT_TRUE(r3.record_valid);
  EXPECT_EQ(r3.step, 1286);
  EXPECT_EQ(r3.phase, "backward");
  EXPECT_EQ(r3.phase_age_s, 43.0);
  EXPECT_EQ(r3.collectives_issued, 1286u);
  EXPECT_EQ(r3.waiting_on, 0u);
  EXPECT_EQ(e.ranks[0].waiting_on, 1287u);
  EXPECT_EQ(r3.last_step_ms, 250.0);
  EXPECT_EQ(r3.checkpoint_step, 0);

  IncidentEvidence ring = Parsed(kDaemonHangWithRing);
  EXPECT_EQ(ring.culprits, (std::vector<int>{1, 2}));
  EXPECT_EQ(ring.stalled_s, 9.25);
  ASSERT_EQ(ring.ranks.size(), 3u);
  ASSERT_EQ(ring.ranks[0].ring.size(), 15u);
  EXPECT_EQ(ring.ranks[0].ring.back().seq, 15u);
  EXPECT_EQ(ring.ranks[0].ring.back().kind, "broadcast");
  EXPECT_EQ(ring.ranks[0].ring.back().bytes, 61440u);
  EXPECT_FALSE(ring.ranks[0].ring.back().done);
  EXPECT_TRUE(ring.ranks[0].ring.front().done);
  EXPECT_EQ(ring.ranks[0].heartbeat_age_s, 2.0);
  EXPECT_EQ(ring.ranks[1].proc_state, "T");
  const RankEvidence& never = ring.ranks[2];
  EXPECT_FALSE(never.record_valid);
  EXPECT_TRUE(never.record_torn);
  EXPECT_FALSE(never.alive);
  EXPECT_EQ(never.node, 1);
  EXPECT_FALSE(never.step.has_value());
  EXPECT_FALSE(never.heartbeat_age_s.has_value());
  EXPECT_TRUE(never.phase.empty());
}

TEST(IncidentEvidenceTest, ACrashKeepsHowTheRankEndedAndItsLogTail) {
  IncidentEvidence e = Parsed(kDaemonCrash);
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.exit_status, "killed by signal 9 (SIGKILL)");
  EXPECT_EQ(e.exit_code, -1);
  EXPECT_EQ(e.signal, 9);
  EXPECT_EQ(e.log_tail, (std::vector<std::string>{"step 36 ...", "boom"}));
  EXPECT_TRUE(e.culprits.empty());
  EXPECT_FALSE(e.stalled_s.has_value());
  ASSERT_EQ(e.ranks.size(), 2u);
  EXPECT_EQ(e.ranks[1].phase, "backward");
}

TEST(IncidentEvidenceTest, EveryFieldRoundTrips) {
  IncidentEvidence e;
  e.culprits = {2, 5};
  e.rank = 5;
  e.exit_status = "exited with code 1";
  e.exit_code = 1;
  e.signal = 0;
  e.log_tail = {"Traceback (most recent call last):", "RuntimeError: NCCL error"};
  e.stalled_s = 312.5;
  e.timeout_s = 300;
  e.allowance = "checkpoint";
  e.step = 1200;
  e.newest_committed_step = 1100;
  e.reports = {SaveFailureEvidence{5, "gpu-a17", "write /ckpt/step-1200/shard-5: No space left on device", 2},
               SaveFailureEvidence{std::nullopt, "gpu-a18", "timed out", 0}};
  e.ratio = 2.75;
  e.held_s = 61.5;
  RankEvidence r;
  r.rank = 5;
  r.node = 1;
  r.host = "gpu-a17";
  r.pid = 424242;
  r.alive = false;
  r.proc_state = "D";
  r.record_valid = true;
  r.record_torn = true;
  r.step = 1199;
  r.phase = "checkpoint";
  r.phase_age_s = 0.125;
  r.heartbeat_age_s = 1e-3;
  r.collectives_issued = 18000000000000000000ull;  // beyond int64
  r.collectives_done = 17;
  r.waiting_on = 18;
  r.last_step_ms = 853.3333333333334;
  r.checkpoint_step = -1;
  r.ring = {CollectiveEvidence{17, "allgather", 1ull << 40, true}, CollectiveEvidence{18, "barrier", 0, false}};
  r.pace = PaceEvidence{1.17, 850.5, 910.25, 600, 250.5};
  RankEvidence bare;  // a rank that never started
  bare.rank = 6;
  e.ranks = {r, bare};

  const std::string text = ToJson(e);
  IncidentEvidence got = Parsed(text);
  EXPECT_EQ(ToJson(got), text);
  EXPECT_EQ(got.culprits, e.culprits);
  EXPECT_EQ(got.rank, e.rank);
  EXPECT_EQ(got.exit_status, e.exit_status);
  EXPECT_EQ(got.exit_code, e.exit_code);
  EXPECT_EQ(got.signal, e.signal);
  EXPECT_EQ(got.log_tail, e.log_tail);
  EXPECT_EQ(got.stalled_s, e.stalled_s);
  EXPECT_EQ(got.timeout_s, e.timeout_s);
  EXPECT_EQ(got.allowance, e.allowance);
  EXPECT_EQ(got.step, e.step);
  EXPECT_EQ(got.newest_committed_step, e.newest_committed_step);
  ASSERT_EQ(got.reports.size(), 2u);
  EXPECT_EQ(got.reports[0].rank, 5);
  EXPECT_EQ(got.reports[0].host, "gpu-a17");
  EXPECT_EQ(got.reports[0].error, e.reports[0].error);
  EXPECT_EQ(got.reports[0].missed_failures, 2u);
  EXPECT_FALSE(got.reports[1].rank.has_value());
  EXPECT_EQ(got.ratio, e.ratio);
  EXPECT_EQ(got.held_s, e.held_s);
  ASSERT_EQ(got.ranks.size(), 2u);
  const RankEvidence& g = got.ranks[0];
  EXPECT_EQ(g.rank, r.rank);
  EXPECT_EQ(g.node, r.node);
  EXPECT_EQ(g.host, r.host);
  EXPECT_EQ(g.pid, r.pid);
  EXPECT_EQ(g.alive, r.alive);
  EXPECT_EQ(g.proc_state, r.proc_state);
  EXPECT_EQ(g.record_valid, r.record_valid);
  EXPECT_EQ(g.record_torn, r.record_torn);
  EXPECT_EQ(g.step, r.step);
  EXPECT_EQ(g.phase, r.phase);
  EXPECT_EQ(g.phase_age_s, r.phase_age_s);
  EXPECT_EQ(g.heartbeat_age_s, r.heartbeat_age_s);
  EXPECT_EQ(g.collectives_issued, r.collectives_issued);
  EXPECT_EQ(g.collectives_done, r.collectives_done);
  EXPECT_EQ(g.waiting_on, r.waiting_on);
  EXPECT_EQ(g.last_step_ms, r.last_step_ms);
  EXPECT_EQ(g.checkpoint_step, r.checkpoint_step);
  ASSERT_EQ(g.ring.size(), 2u);
  EXPECT_EQ(g.ring[0].seq, 17u);
  EXPECT_EQ(g.ring[0].kind, "allgather");
  EXPECT_EQ(g.ring[0].bytes, 1ull << 40);
  EXPECT_TRUE(g.ring[0].done);
  EXPECT_FALSE(g.ring[1].done);
  ASSERT_TRUE(g.pace.has_value());
  EXPECT_EQ(g.pace->steps_per_s, 1.17);
  EXPECT_EQ(g.pace->step_ms_p99, 910.25);
  EXPECT_EQ(g.pace->wait_ms_p50, 250.5);
  const RankEvidence& b = got.ranks[1];
  EXPECT_EQ(b.rank, 6);
  EXPECT_FALSE(b.record_valid);
  EXPECT_FALSE(b.step.has_value());
  EXPECT_FALSE(b.pace.has_value());
  EXPECT_TRUE(b.ring.empty());

  // Nothing set: an empty object, which reads back as nothing set.
  EXPECT_EQ(ToJson(IncidentEvidence{}), "{}");
}

TEST(IncidentEvidenceTest, OlderAndHandWrittenEvidenceReads) {
  // Empty evidence (lineage stores it as {}).
  for (const char* text : {"", "  ", "{}"}) {
    Result<IncidentEvidence> e = ParseIncidentEvidence(text);
    ASSERT_TRUE(e.ok()) << text;
    EXPECT_TRUE(e->ranks.empty());
    EXPECT_FALSE(e->rank.has_value());
  }
  // A crash with no per-rank records and ranks without record_valid.
  IncidentEvidence e = Parsed(
      R"({"rank":3,"exit_code":-1,"signal":6,"log_tail":["CUDA error"],)"
      R"("ranks":[{"rank":0,"node":0,"pid":5100,"alive":true,"phase":"collective","step":117,"waiting_on":811},)"
      R"({"rank":1,"pid":null}]})");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.signal, 6);
  EXPECT_TRUE(e.exit_status.empty());
  ASSERT_EQ(e.ranks.size(), 2u);
  EXPECT_TRUE(e.ranks[0].record_valid);  // it has the record's fields
  EXPECT_EQ(e.ranks[0].waiting_on, 811u);
  EXPECT_FALSE(e.ranks[0].heartbeat_age_s.has_value());
  EXPECT_TRUE(e.ranks[0].proc_state.empty());
  EXPECT_FALSE(e.ranks[1].record_valid);
  EXPECT_EQ(e.ranks[1].pid, 0);  // null: unknown
  EXPECT_EQ(e.ranks[1].node, -1);
  // Whole numbers written as floats by another tool.
  EXPECT_EQ(Parsed(R"({"rank":2.0})").rank, 2);
}

TEST(IncidentEvidenceTest, OtherWritersEvidenceReads) {
  // run_recorder.cc: a failed checkpoint save.
  IncidentEvidence ck = Parsed(
      R"({"newest_committed_step":100,"rank":1,"reports":[{"error":"disk full","missed_failures":0,"node":"n1","rank":1}],"step":200})");
  EXPECT_EQ(ck.step, 200);
  EXPECT_EQ(ck.newest_committed_step, 100);
  ASSERT_EQ(ck.reports.size(), 1u);
  EXPECT_EQ(ck.reports[0].host, "n1");
  EXPECT_EQ(ck.reports[0].error, "disk full");
  // run_controller.cc: a straggler, with each rank's pace.
  IncidentEvidence st = Parsed(
      R"({"held_s":31.0,"rank":1,"ranks":[{"compute_ms_p50":100.0,"rank":0,"step_ms_p50":210.0,"step_ms_p99":230.0,)"
      R"("steps_per_s":4.7,"wait_ms_p50":110.0},{"compute_ms_p50":205.0,"rank":1,"step_ms_p50":211.0,)"
      R"("step_ms_p99":240.0,"steps_per_s":4.7,"wait_ms_p50":6.0}],"ratio":2.05})");
  EXPECT_EQ(st.ratio, 2.05);
  EXPECT_EQ(st.held_s, 31.0);
  ASSERT_EQ(st.ranks.size(), 2u);
  ASSERT_TRUE(st.ranks[1].pace.has_value());
  EXPECT_EQ(st.ranks[1].pace->compute_ms_p50, 205.0);
  EXPECT_FALSE(st.ranks[1].record_valid);
  // health/report.cc: a health report; its own keys are not modelled here.
  IncidentEvidence h = Parsed(
      R"({"decision":{"action":"drain_node","causes":["gpu.ecc 0"],"reason":"x"},"drain_reason":"d",)"
      R"("results":[{"name":"gpu.ecc"}],"status":"fail"})");
  EXPECT_TRUE(h.ranks.empty());
}

TEST(IncidentEvidenceTest, WrongTypesAreErrorsThatNameTheKey) {
  struct Case {
    const char* text;
    const char* want;
  };
  for (const Case& c : std::vector<Case>{
           {"not json", "not valid JSON"},
           {"[1,2]", "expected a JSON object, got an array"},
           {R"("a string")", "expected a JSON object, got a string"},
           {R"({"ranks":[{"rank":0,"step":"117"}]})", "evidence: ranks[0].step: expected an integer, got a string"},
           {R"({"ranks":[{"rank":0},{"rank":1,"collectives_issued":-4}]})",
            "ranks[1].collectives_issued: expected a non-negative integer"},
           {R"({"ranks":[7]})", "ranks[0]: expected an object, got a number"},
           {R"({"ranks":{"rank":0}})", "evidence: ranks: expected an array, got an object"},
           {R"({"ranks":[{"recent_collectives":[{"seq":1,"done":"yes"}]}]})",
            "ranks[0].recent_collectives[0].done: expected true or false, got a string"},
           {R"({"culprits":[1,"2"]})", "culprits[1]: expected an integer"},
           {R"({"log_tail":["a",3]})", "log_tail[1]: expected a string, got a number"},
           {R"({"stalled_s":"43"})", "stalled_s: expected a number, got a string"},
           {R"({"rank":1.5})", "rank: expected an integer, got a fractional number 1.5"},
           {R"({"rank":4294967296})", "rank: expected an integer"},
           {R"({"status":9})", "status: expected a string, got a number"},
           {R"({"reports":[{"rank":0,"node":3}]})", "reports[0].node: expected a string"},
       }) {
    Result<IncidentEvidence> e = ParseIncidentEvidence(c.text);
    ASSERT_FALSE(e.ok()) << c.text;
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(e.status().message().find(c.want), std::string::npos)
        << c.text << " -> " << e.status().message() << " (want: " << c.want << ")";
  }
}

TEST(IncidentEvidenceTest, ALogLineThatIsNotUtf8IsWrittenNotThrown) {
  IncidentEvidence e;
  e.exit_status = "exited with code 1";
  e.log_tail = {"ok", std::string("bad \xff\xfe bytes")};
  std::string text;
  EXPECT_NO_THROW(text = ToJson(e));
  IncidentEvidence got = Parsed(text);
  ASSERT_EQ(got.log_tail.size(), 2u);
  EXPECT_EQ(got.log_tail[1].rfind("bad ", 0), 0u);
}

// The event kinds declared in event_kind.h's event_kind namespace, read from
// the header itself so that a new kind cannot be added without a runbook
// decision here.
std::vector<std::string> DeclaredEventKinds() {
  std::ifstream in(SourceDir() + "/lineage/event_kind.h");
  EXPECT_TRUE(in.good()) << "cannot read lineage/event_kind.h under " << SourceDir();
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const size_t begin = text.find("namespace event_kind {");
  const size_t end = text.find("}  // namespace event_kind");
  EXPECT_NE(begin, std::string::npos);
  EXPECT_NE(end, std::string::npos);
  std::vector<std::string> kinds;
  if (begin == std::string::npos || end == std::string::npos) return kinds;
  const std::string body = text.substr(begin, end - begin);
  const std::regex decl(R"re(constexpr\s+const\s+char\s+k\w+\[\]\s*=\s*"([^"]+)")re");
  for (auto it = std::sregex_iterator(body.begin(), body.end(), decl); it != std::sregex_iterator(); ++it) {
    kinds.push_back((*it)[1].str());
  }
  return kinds;
}

TEST(RunbookTest, EveryEventKindHasAnEntryAndEveryRunbookExists) {
  ASSERT_FALSE(SourceDir().empty()) << "HOLDFAST_SOURCE_DIR is not set (ctest sets it)";
  const std::vector<std::string> kinds = DeclaredEventKinds();
  EXPECT_GE(kinds.size(), 15u);
  std::set<std::string> mapped;
  for (const EventKindInfo& e : kEventKinds) {
    EXPECT_TRUE(mapped.insert(e.kind).second) << "twice in kEventKinds: " << e.kind;
  }
  for (const std::string& k : kinds) {
    EXPECT_EQ(mapped.count(k), 1u) << "event kind '" << k << "' has no row in kEventKinds (lineage/event_kind.h)";
  }
  EXPECT_EQ(mapped.size(), kinds.size()) << "kEventKinds names a kind event_kind.h does not declare";
  for (const EventKindInfo& e : kEventKinds) {
    EXPECT_EQ(FindEventKind(e.kind), &e);
    EXPECT_EQ(IsIncidentKind(e.kind), e.is_incident) << e.kind;
    EXPECT_STREQ(RunbookFor(e.kind), e.runbook);
    if (*e.runbook == '\0') continue;
    const std::string path = SourceDir() + "/" + e.runbook;
    struct stat st {};
    EXPECT_EQ(stat(path.c_str(), &st), 0) << e.kind << ": runbook " << path << " does not exist";
    EXPECT_TRUE(S_ISREG(st.st_mode)) << path;
  }
}

TEST(RunbookTest, EachIncidentKindHasItsGuide) {
  EXPECT_STREQ(RunbookFor(event_kind::kCrash), "runbooks/crash.md");
  EXPECT_STREQ(RunbookFor(event_kind::kHang), "runbooks/hang.md");
  EXPECT_STREQ(RunbookFor(event_kind::kNodeLost), "runbooks/crash.md");
  EXPECT_STREQ(RunbookFor(event_kind::kCheckpointFailed), "runbooks/checkpoint-failed.md");
  EXPECT_STREQ(RunbookFor(event_kind::kCheckpointCorrupt), "runbooks/checkpoint-failed.md");
  EXPECT_STREQ(RunbookFor(event_kind::kBudgetExhausted), "runbooks/restart-budget.md");
  EXPECT_STREQ(RunbookFor(event_kind::kDaemonRestart), "runbooks/crash.md");
  EXPECT_STREQ(RunbookFor(event_kind::kPreempt), "runbooks/preempted.md");
  EXPECT_STREQ(RunbookFor(event_kind::kStraggler), "runbooks/straggler.md");
  EXPECT_STREQ(RunbookFor(event_kind::kStop), "");
  EXPECT_STREQ(RunbookFor(event_kind::kRestart), "");
  EXPECT_STREQ(RunbookFor("from_a_newer_daemon"), "");
  EXPECT_STREQ(RunbookFor(""), "");
  // What on-call sees as "last incident": what went wrong, not what was done about it.
  for (const char* k : {event_kind::kCrash, event_kind::kHang, event_kind::kHealth, event_kind::kNodeLost,
                        event_kind::kRoleCrash, event_kind::kRoleHang, event_kind::kCheckpointFailed}) {
    EXPECT_TRUE(IsIncidentKind(k)) << k;
  }
  for (const char* k : {event_kind::kRestart, event_kind::kRequeue, event_kind::kStop, event_kind::kStraggler,
                        event_kind::kLineageDelayed, "from_a_newer_daemon"}) {
    EXPECT_FALSE(IsIncidentKind(k)) << k;
  }
  // What a host can be blamed for (the recovery policy's history, the cross-run host history).
  for (const char* k : {event_kind::kCrash, event_kind::kHang, event_kind::kHealth, event_kind::kNodeLost}) {
    EXPECT_TRUE(CountsAgainstHost(k)) << k;
  }
  for (const char* k : {event_kind::kCheckpointFailed, event_kind::kStraggler, event_kind::kRoleCrash,
                        event_kind::kRequeue, "from_a_newer_daemon"}) {
    EXPECT_FALSE(CountsAgainstHost(k)) << k;
  }
}

TEST(IncidentEvidenceTest, CulpritsAndTheirHostsComeFromTheEvidenceThenTheEvent) {
  EventRecord e;
  e.rank = 5;
  IncidentEvidence ev;
  EXPECT_EQ(Culprits(e, ev), std::vector<int>{5});
  ev.rank = 1;
  EXPECT_EQ(Culprits(e, ev), std::vector<int>{1});
  ev.culprits = {2, 0, 3};
  for (int r = 0; r < 4; ++r) {
    RankEvidence re;
    re.rank = r;
    re.host = r < 2 ? "n1" : (r == 3 ? "" : "n2");
    ev.ranks.push_back(re);
  }
  EXPECT_EQ(Culprits(e, ev), (std::vector<int>{2, 0, 3}));
  EXPECT_EQ(CulpritHosts(e, ev), (std::vector<std::string>{"n2", "n1"}));
}

}  // namespace
}  // namespace holdfast
