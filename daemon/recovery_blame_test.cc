// The recovery policy's blame rules (recovery_policy.h, "Blame", "The job's
// own failure", "Bounds"): a host is credited only on evidence naming it; the
// same failure at the same step on different hosts is the job's; requeues and
// exclusions per run are bounded, and the stop says which bound.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "daemon/recovery_policy.h"
#include "daemon/recovery_policy_test_util.h"

namespace holdfast {
namespace {

using namespace recovery_test;  // NOLINT: the suite's axes
using Hosts = std::vector<std::string>;

// Which hosts each incident counts against.
TEST(RecoveryBlame, AHostIsCreditedOnlyOnEvidenceNamingIt) {
  struct Row {
    K kind;
    health::Action health_action;
    Hosts hosts;
    bool all_ranks;
    Hosts credited;
  };
  const Row rows[] = {
      {K::kCrash, kNoHealth, {"gpu-a17"}, false, {"gpu-a17"}},             // the rank that ended ran there
      {K::kBadInput, kNoHealth, {"gpu-a17"}, false, {"gpu-a17"}},
      {K::kHang, kNoHealth, {"gpu-a17"}, false, {"gpu-a17"}},              // the culprits are its ranks only
      {K::kHang, kNoHealth, {"gpu-a17"}, true, {}},                        // one node, every rank hung
      {K::kHang, kNoHealth, {"gpu-a16", "gpu-a17", "gpu-a18"}, true, {}},  // all ranks in collective #N
      {K::kHang, kNoHealth, {"gpu-a16", "gpu-a17"}, false, {}},            // culprits on two hosts
      {K::kHang, kNoHealth, {}, false, {}},
      {K::kNodeLost, kNoHealth, {"gpu-a17", "gpu-a18"}, false, {"gpu-a17", "gpu-a18"}},
      {K::kHealth, kHExclude, {"gpu-a17"}, false, {"gpu-a17"}},            // its own check failed
      {K::kHealth, kHRestart, {"gpu-a17"}, false, {"gpu-a17"}},
      {K::kPreemption, kNoHealth, {"gpu-a17"}, false, {}},
      {K::kStopRequest, kNoHealth, {"gpu-a17"}, false, {}},
      {K::kRoleFailed, kNoHealth, {"gpu-a17"}, false, {}},
  };
  for (const Row& row : rows) {
    RecoveryInput in = MakeInput(row.kind, row.health_action, kFresh, kAll, kLeft);
    in.hosts = row.hosts;
    in.all_ranks = row.all_ranks;
    EXPECT_EQ(CreditedHosts(in), row.credited) << IncidentKindName(row.kind) << " hosts=" << row.hosts.size();
    EXPECT_EQ(DecideRecovery(in).credited_hosts, row.credited) << IncidentKindName(row.kind);
  }
}

// The case: every rank entered collective #N and none completed. The
// first such hang credited rank 0's node, and the second then excluded it.
TEST(RecoveryBlame, AnAllRanksCollectiveHangCreditsNoHostAndExcludesNone) {
  RecoveryInput in = MakeInput(K::kHang, kNoHealth, kFresh, kAll, kLeft);
  in.hosts = {"gpu-a16", kHost, "gpu-a18"};
  in.all_ranks = true;
  // Each host was implicated before (an earlier crash each): still not a reason.
  in.host_incidents = {{"gpu-a16", 1}, {kHost, 2}, {"gpu-a18", 1}};
  RecoveryDecision d = DecideRecovery(in);
  EXPECT_EQ(d.action, kRestart) << d.reason;
  EXPECT_TRUE(d.exclude_hosts.empty());
  EXPECT_TRUE(d.credited_hosts.empty());
  EXPECT_EQ(d.reason, "restart in place after 0.50 s (restart 2 of 3): hang on gpu-a16, gpu-a17, gpu-a18");
  // With the budget spent it stops; it never requeues away a host.
  in.restarts_used = 3;
  d = DecideRecovery(in);
  EXPECT_EQ(d.action, kStop) << d.reason;
  EXPECT_TRUE(d.budget_exhausted);
  EXPECT_TRUE(d.exclude_hosts.empty());
  // A hang whose culprits are one host's ranks, implicated before, does exclude it.
  in = MakeInput(K::kHang, kNoHealth, kRepeat, kAll, kLeft);
  d = DecideRecovery(in);
  EXPECT_EQ(d.action, kRequeue) << d.reason;
  EXPECT_EQ(d.exclude_hosts, Hosts{kHost});
}

FailureRecord Failed(const std::string& host, int64_t step, int exit_code, int signal, int attempt) {
  return FailureRecord{host, step, exit_code, signal, attempt};
}

// What counts as the same failure: same known step, same exit code, same signal.
TEST(RecoveryBlame, TheSameFailureIsStepExitCodeAndSignal) {
  const FailureRecord a = Failed("gpu-a16", 8, 1, 0, 1);
  EXPECT_TRUE(SameFailure(a, Failed("gpu-a17", 8, 1, 0, 2)));
  EXPECT_FALSE(SameFailure(a, Failed("gpu-a17", 9, 1, 0, 1)));   // another step
  EXPECT_FALSE(SameFailure(a, Failed("gpu-a17", 8, 3, 0, 1)));   // another exit code
  EXPECT_FALSE(SameFailure(a, Failed("gpu-a17", 8, -1, 6, 1)));  // a signal, not an exit
  EXPECT_FALSE(SameFailure(Failed("gpu-a16", -1, 1, 0, 1), Failed("gpu-a17", -1, 1, 0, 1)));  // step unknown
  EXPECT_TRUE(SameFailure(Failed("gpu-a16", 8, -1, 11, 1), Failed("gpu-a17", 8, -1, 11, 1)));  // both SIGSEGV
  // Sent from outside (the OOM killer, an operator, a test killing ranks at checkpoints): never the job's.
  EXPECT_FALSE(SameFailure(Failed("gpu-a16", 8, -1, 9, 1), Failed("gpu-a17", 8, -1, 9, 1)));
  EXPECT_FALSE(SameFailure(Failed("gpu-a16", 8, -1, 15, 1), Failed("gpu-a17", 8, -1, 15, 1)));
  EXPECT_EQ(DescribeFailure(a), "exit code 1");
  EXPECT_EQ(DescribeFailure(Failed("h", 8, -1, 6, 1)), "signal 6 (SIGABRT)");
}

// A crash with the history of one earlier failure on gpu-a16.
RecoveryInput CrashAfter(const FailureRecord& earlier, const FailureRecord& now) {
  RecoveryInput in = MakeInput(K::kCrash, kNoHealth, kFresh, kAll, kLeft);
  in.hosts = {now.host};
  in.failure = now;
  in.history.failures = {earlier};
  return in;
}

TEST(RecoveryBlame, TheSameFailureOnAnotherHostIsTheJobs) {
  // Within an attempt's restarts: rank 0 on gpu-a16 exited 1 in step 8, now rank 1 on gpu-a17 did.
  RecoveryInput in = CrashAfter(Failed("gpu-a16", 8, 1, 0, 1), Failed(kHost, 8, 1, 0, 1));
  in.host_incidents = {{"gpu-a16", 1}};
  RecoveryDecision d = DecideRecovery(in);
  EXPECT_EQ(d.action, kStop);
  EXPECT_EQ(d.outcome, O::kFailed);
  EXPECT_EQ(d.bound, "job_failure");
  EXPECT_FALSE(d.budget_exhausted);
  EXPECT_TRUE(d.exclude_hosts.empty());
  EXPECT_TRUE(d.credited_hosts.empty());  // not gpu-a17's fault either
  EXPECT_EQ(d.reason, "stop: the job fails at step 8 wherever it runs: exit code 1 at step 8 on gpu-a17, as on "
                      "gpu-a16 (attempt 1); no host is excluded (1 of 3 restarts used)");
  // Also when gpu-a17 itself was implicated before (it would have been excluded).
  in.host_incidents[kHost] = 3;
  EXPECT_EQ(DecideRecovery(in).bound, "job_failure");
  // Not the same failure: the usual rules (a restart, or gpu-a17's exclusion).
  for (const FailureRecord& other : {Failed("gpu-a16", 9, 1, 0, 1), Failed("gpu-a16", 8, 3, 0, 1),
                                     Failed("gpu-a16", 8, -1, 11, 1), Failed(kHost, 8, 1, 0, 1)}) {
    RecoveryInput o = CrashAfter(other, Failed(kHost, 8, 1, 0, 1));
    d = DecideRecovery(o);
    EXPECT_EQ(d.action, kRestart) << other.host << " step " << other.step << ": " << d.reason;
    EXPECT_TRUE(d.bound.empty());
  }
  // A step the rank never reported matches nothing.
  in = CrashAfter(Failed("gpu-a16", -1, 1, 0, 1), Failed(kHost, -1, 1, 0, 1));
  EXPECT_TRUE(DecideRecovery(in).bound.empty());
  // Only crashes: a hang with the same step is left to the other rules.
  in = CrashAfter(Failed("gpu-a16", 8, 1, 0, 1), Failed(kHost, 8, 1, 0, 1));
  in.kind = K::kHang;
  EXPECT_TRUE(DecideRecovery(in).bound.empty());
}

// The loop, played through the policy as holdfastd carries it out: a
// rank exits 1 at step 8 wherever it runs. Each attempt gets two fresh hosts
// of a pool; the first to fail is always the attempt's first host (the worst
// case: its repeat is what gets it excluded). The run is requeued at most once
// and stops with the job's cause; only the host that failed twice is excluded.
TEST(RecoveryBlame, ADeterministicJobFailureCostsAtMostOneRequeue) {
  const Hosts pool = {"n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8"};
  RunHistory history;
  std::map<std::string, int> incidents;
  int attempt = 1, restarts_used = 0, requeues = 0;
  size_t next_host = 0;
  std::string host = pool[next_host];
  RecoveryDecision d;
  for (int incident = 0; incident < 20; ++incident) {
    RecoveryInput in = MakeInput(K::kCrash, kNoHealth, kFresh, kAll, kLeft);
    in.hosts = {host};
    in.host_incidents = incidents;
    in.restarts_used = restarts_used;
    in.failure = Failed(host, 8, 1, 0, attempt);
    in.history = history;
    d = DecideRecovery(in);
    if (d.action == kStop) break;
    for (const std::string& h : d.credited_hosts) ++incidents[h];
    history.failures.push_back(*in.failure);
    if (d.action == kRestart) {
      ++restarts_used;
      continue;
    }
    ASSERT_EQ(d.action, kRequeue) << d.reason;
    ++requeues;
    ++history.requeues;
    for (const std::string& h : d.exclude_hosts) history.excluded_hosts.push_back(h);
    ++attempt;
    restarts_used = 0;
    next_host += 2;
    host = pool[next_host];
  }
  EXPECT_EQ(d.action, kStop) << d.reason;
  EXPECT_EQ(d.bound, "job_failure");
  EXPECT_EQ(requeues, 1);
  EXPECT_EQ(history.excluded_hosts, Hosts{"n1"});
  EXPECT_EQ(d.reason, "stop: the job fails at step 8 wherever it runs: exit code 1 at step 8 on n3, as on n1 "
                      "(attempt 1); no host is excluded (0 of 3 restarts used)");
}

TEST(RecoveryBlame, EachBoundStopsTheRunAndSaysWhich) {
  // max_requeues: a repeated host would be excluded, but the run was requeued enough.
  RecoveryInput in = MakeInput(K::kCrash, kNoHealth, kRepeat, kAll, kLeft);
  in.history.requeues = 5;
  RecoveryDecision d = DecideRecovery(in);
  EXPECT_EQ(d.action, kStop);
  EXPECT_EQ(d.bound, "max_requeues");
  EXPECT_TRUE(d.exclude_hosts.empty());
  EXPECT_EQ(d.reason, "stop: max_requeues reached (5 of 5 requeues after failures used): crash on gpu-a17; "
                      "instead of: requeue excluding gpu-a17: crash on gpu-a17; gpu-a17 implicated in 2 incidents "
                      "of this run (1 of 3 restarts used)");
  in.history.requeues = 4;
  EXPECT_EQ(DecideRecovery(in).action, kRequeue);
  in.max_requeues = 0;  // never requeue after a failure
  in.history.requeues = 0;
  EXPECT_EQ(DecideRecovery(in).bound, "max_requeues");
  // A lost node with a scheduler that cannot exclude: a requeue all the same, bounded the same.
  in = MakeInput(K::kNodeLost, kNoHealth, kFresh, kRequeueOnly, kLeft);
  in.history.requeues = 5;
  EXPECT_EQ(DecideRecovery(in).bound, "max_requeues");

  // max_excluded_nodes: three hosts already excluded, a fourth would be one more.
  in = MakeInput(K::kHealth, kHDrain, kFresh, kAll, kLeft);
  in.history.requeues = 3;
  in.history.excluded_hosts = {"gpu-a01", "gpu-a02", "gpu-a03"};
  d = DecideRecovery(in);
  EXPECT_EQ(d.action, kStop);
  EXPECT_EQ(d.bound, "max_excluded_nodes");
  EXPECT_TRUE(d.drain_hosts.empty());
  EXPECT_EQ(d.reason, "stop: max_excluded_nodes reached (gpu-a01, gpu-a02, gpu-a03 excluded, at most 3; gpu-a17 "
                      "would be 1 more): health check asks for drain_node on gpu-a17; instead of: drain gpu-a17 and "
                      "requeue excluding it: health check asks for drain_node on gpu-a17 (1 of 3 restarts used)");
  // A host excluded before counts once.
  in.history.excluded_hosts = {"gpu-a01", "gpu-a02", kHost};
  EXPECT_EQ(DecideRecovery(in).action, kDrainRequeue);
  in.max_excluded_nodes = 0;
  in.history.excluded_hosts = {};
  EXPECT_EQ(DecideRecovery(in).bound, "max_excluded_nodes");

  // Preemptions are requeued whatever the bounds: they are nobody's failure.
  in = MakeInput(K::kPreemption, kNoHealth, kFresh, kAll, kLeft);
  in.history.requeues = 50;
  in.max_requeues = 0;
  d = DecideRecovery(in);
  EXPECT_EQ(d.action, kRequeue) << d.reason;
  EXPECT_TRUE(d.bound.empty());
}

}  // namespace
}  // namespace holdfast
