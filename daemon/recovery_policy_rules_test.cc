// The recovery policy's invariants over every input: it never asks the
// scheduler for what it cannot do; elastic runs; role failures.
#include "daemon/recovery_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/recovery_policy_test_util.h"

namespace holdfast {
namespace {

using namespace recovery_test;  // NOLINT: the suite's axes

// The first rule `d` breaks for `in`, or "" when it keeps them all: the
// policy never asks the scheduler for what it cannot do, and its decision is
// internally consistent.
std::string Violation(const RecoveryInput& in, const RecoveryDecision& d) {
  const bool requeues = d.action == kRequeue || d.action == kDrainRequeue;
  if (d.action == kContinue) {
    // An elastic run goes on in place: only with min_nodes, never below it,
    // leaving only active hosts the incident named, spares only in their place.
    if (in.elastic.min_nodes <= 0) return "continues a run that is not elastic";
    if (d.exclude_hosts.empty()) return "continues without anyone leaving";
    for (const std::string& h : d.exclude_hosts) {
      if (std::find(in.hosts.begin(), in.hosts.end(), h) == in.hosts.end()) return "leaves " + h + " (not named)";
      if (std::find(in.elastic.active.begin(), in.elastic.active.end(), h) == in.elastic.active.end()) {
        return "leaves " + h + " (not active)";
      }
    }
    for (const std::string& h : d.replacement_hosts) {
      if (std::find(in.elastic.spares.begin(), in.elastic.spares.end(), h) == in.elastic.spares.end()) {
        return "joins " + h + " (not a spare)";
      }
    }
    if (d.replacement_hosts.size() > d.exclude_hosts.size()) return "more spares join than hosts leave";
    const size_t left = in.elastic.active.size() - d.exclude_hosts.size() + d.replacement_hosts.size();
    if (static_cast<int>(left) < in.elastic.min_nodes) return "below min_nodes";
    if (!d.drain_hosts.empty() && !in.caps.drain) return "drain without caps.drain";
    if (d.consumes_restart || d.backoff_s != 0) return "a continuation counted as a restart";
    if (in.kind == K::kBadInput || in.kind == K::kStopRequest || in.kind == K::kDaemonSignal ||
        in.kind == K::kPreemption) {
      return "continues after " + std::string(IncidentKindName(in.kind));
    }
    if (d.reason.find(" of " + std::to_string(in.restart_budget)) == std::string::npos) return "no restart count";
    return "";
  }
  // What the scheduler allows.
  if (requeues && !in.caps.requeue) return "requeue without caps.requeue";
  if (!d.exclude_hosts.empty() && !in.caps.exclude_hosts) return "exclusion without caps.exclude_hosts";
  if ((d.action == kDrainRequeue || !d.drain_hosts.empty()) && !in.caps.drain) return "drain without caps.drain";
  // Hosts only for the actions that use them, and only hosts the incident named.
  if (!requeues && !d.exclude_hosts.empty()) return "exclude_hosts without a requeue";
  if (d.action != kDrainRequeue && !d.drain_hosts.empty()) return "drain_hosts without a drain";
  if (d.action == kDrainRequeue && d.drain_hosts.empty()) return "a drain of no host";
  for (const std::string& h : d.exclude_hosts) {
    if (h.empty() || std::find(in.hosts.begin(), in.hosts.end(), h) == in.hosts.end()) return "excludes " + h;
    if (std::count(d.exclude_hosts.begin(), d.exclude_hosts.end(), h) != 1) return "excludes " + h + " twice";
  }
  for (const std::string& h : d.drain_hosts) {
    if (std::find(d.exclude_hosts.begin(), d.exclude_hosts.end(), h) == d.exclude_hosts.end()) {
      return "drains " + h + " without excluding it";
    }
  }
  // Blame: only named hosts are credited; a crash or hang excludes only a
  // credited host; an all-ranks hang credits none; a bound excludes none.
  for (const std::string& h : d.credited_hosts) {
    if (std::find(in.hosts.begin(), in.hosts.end(), h) == in.hosts.end()) return "credits " + h + " (not named)";
  }
  if (in.kind == K::kHang && in.all_ranks && !d.credited_hosts.empty()) return "an all-ranks hang credits a host";
  if (in.kind == K::kCrash || in.kind == K::kHang) {
    for (const std::string& h : d.exclude_hosts) {
      if (std::find(d.credited_hosts.begin(), d.credited_hosts.end(), h) == d.credited_hosts.end()) {
        return "excludes " + h + " without crediting it";
      }
    }
  }
  if (!d.bound.empty() && (d.action != kStop || !d.exclude_hosts.empty())) return "a bound that does not stop";
  // The budget.
  if (d.consumes_restart != (d.action == kRestart)) return "consumes_restart != restart in place";
  if (d.action == kRestart && in.restarts_used >= in.restart_budget) return "restart with the budget spent";
  if (d.budget_exhausted && d.action != kStop) return "budget_exhausted without a stop";
  if (d.action != kRestart && d.backoff_s != 0) return "a backoff without a restart";
  if (d.backoff_s < 0 || d.backoff_s > in.backoff_max_s) return "backoff out of [0, max]";
  // Never a restart or requeue after bad input or an operator's stop.
  if ((in.kind == K::kBadInput || in.kind == K::kStopRequest || in.kind == K::kDaemonSignal) && d.action != kStop) {
    return "does not stop";
  }
  // A readable reason naming every host and the restart count.
  if (d.reason.empty() || d.reason.find('\n') != std::string::npos) return "not one line";
  for (const std::string& h : in.hosts) {
    if (!h.empty() && d.reason.find(h) == std::string::npos) return "reason does not name " + h;
  }
  if (d.reason.find(" of " + std::to_string(in.restart_budget)) == std::string::npos) return "no restart count";
  return "";
}

// Elastic runs ([job] min_nodes): the leaving host goes and the run continues
// in place while min_nodes are left, a spare taking its place first; below
// min_nodes the non-elastic rules apply and the reason says why.
TEST(RecoveryPolicy, ElasticRunsContinueWithoutTheLeavingHost) {
  auto elastic = [](K kind, health::Action h, History history, Caps caps, std::vector<std::string> active,
                    std::vector<std::string> spares, int min_nodes) {
    RecoveryInput in = MakeInput(kind, h, history, caps, kLeft);
    in.elastic.active = std::move(active);
    in.elastic.spares = std::move(spares);
    in.elastic.min_nodes = min_nodes;
    return in;
  };
  const std::vector<std::string> three = {"gpu-a16", kHost, "gpu-a18"};
  // A lost node, no spare: 2 of 3 left with min_nodes 2.
  RecoveryInput in = elastic(K::kNodeLost, kNoHealth, kFresh, kAll, three, {}, 2);
  RecoveryDecision d = DecideRecovery(in);
  EXPECT_EQ(d.action, kContinue) << d.reason;
  EXPECT_EQ(d.exclude_hosts, std::vector<std::string>{kHost});
  EXPECT_TRUE(d.replacement_hosts.empty());
  EXPECT_FALSE(d.consumes_restart);
  EXPECT_EQ(d.reason, "continue without gpu-a17 on 2 of 3 nodes (min_nodes 2), from the newest checkpoint: "
                      "lost node gpu-a17 (1 of 3 restarts used)");
  EXPECT_EQ(Violation(in, d), "");
  // With a spare it takes the place (the world size stays), even at min_nodes = 3.
  in = elastic(K::kNodeLost, kNoHealth, kFresh, kLocal, three, {"gpu-s1", "gpu-s2"}, 3);
  d = DecideRecovery(in);
  EXPECT_EQ(d.action, kContinue) << d.reason;
  EXPECT_EQ(d.replacement_hosts, std::vector<std::string>{"gpu-s1"});
  EXPECT_NE(d.reason.find("gpu-s1 taking over on 3 of 3 nodes"), std::string::npos) << d.reason;
  EXPECT_EQ(Violation(in, d), "");
  // Below min_nodes: the old rules, saying why it did not continue.
  in = elastic(K::kNodeLost, kNoHealth, kFresh, kAll, three, {}, 3);
  d = DecideRecovery(in);
  EXPECT_EQ(d.action, kRequeue) << d.reason;
  EXPECT_NE(d.reason.find("(min_nodes 3: only 2 would be left)"), std::string::npos) << d.reason;
  in = elastic(K::kNodeLost, kNoHealth, kFresh, kLocal, {"gpu-a16", kHost}, {}, 2);
  d = DecideRecovery(in);
  EXPECT_EQ(d.action, kStop) << d.reason;
  EXPECT_NE(d.reason.find("(min_nodes 2: only 1 would be left)"), std::string::npos) << d.reason;
  // A first crash restarts in place as before; a repeated one leaves the node.
  in = elastic(K::kCrash, kNoHealth, kFresh, kAll, three, {}, 2);
  EXPECT_EQ(DecideRecovery(in).action, kRestart);
  in = elastic(K::kCrash, kNoHealth, kRepeat, kLocal, three, {}, 2);
  d = DecideRecovery(in);
  EXPECT_EQ(d.action, kContinue) << d.reason;
  EXPECT_NE(d.reason.find("implicated in 2 incidents"), std::string::npos) << d.reason;
  EXPECT_EQ(Violation(in, d), "");
  // A health check asking for a drain drains where the scheduler can.
  in = elastic(K::kHealth, kHDrain, kFresh, kAll, three, {}, 1);
  d = DecideRecovery(in);
  EXPECT_EQ(d.action, kContinue) << d.reason;
  EXPECT_EQ(d.drain_hosts, std::vector<std::string>{kHost});
  in = elastic(K::kHealth, kHExclude, kFresh, kLocal, three, {}, 1);
  d = DecideRecovery(in);
  EXPECT_EQ(d.action, kContinue) << d.reason;
  EXPECT_TRUE(d.drain_hosts.empty());
  // A host that is not training (a spare, a node already left) does not make the run leave anything.
  in = elastic(K::kNodeLost, kNoHealth, kFresh, kAll, {"gpu-a16", "gpu-a18"}, {}, 1);
  EXPECT_EQ(DecideRecovery(in).action, kRequeue);
  // Preemption, operator stops and bad input never continue.
  for (K k : {K::kPreemption, K::kStopRequest, K::kDaemonSignal, K::kBadInput}) {
    EXPECT_NE(DecideRecovery(elastic(k, kNoHealth, kRepeat, kAll, three, {"gpu-s1"}, 1)).action, kContinue)
        << IncidentKindName(k);
  }
}

TEST(RecoveryPolicy, NeverChoosesWhatTheSchedulerCannotDo) {
  const std::vector<std::vector<std::string>> host_sets = {
      {}, {"gpu-a17"}, {"gpu-a17", "gpu-a18"}, {"gpu-a17", "", "gpu-a17"}};
  const std::vector<std::map<std::string, int>> histories = {
      {}, {{"gpu-a17", 1}}, {{"gpu-a18", 3}}, {{"gpu-a17", 5}, {"gpu-a18", 1}}};
  int checked = 0;
  for (K kind : {K::kCrash, K::kHang, K::kBadInput, K::kNodeLost, K::kHealth, K::kStopRequest, K::kDaemonSignal,
                 K::kPreemption}) {
    for (health::Action ha : {kNoHealth, kHRestart, kHExclude, kHDrain}) {
      for (int caps_bits = 0; caps_bits < 8; ++caps_bits) {  // all 8, drain without requeue included
        for (const auto& hosts : host_sets) {
          for (const auto& history : histories) {
            for (int threshold : {0, 1, 2}) {
              for (int used : {0, 2, 3, 5}) {
                for (int budget : {0, 3}) {
                  for (int failures : {0, 1, 4, 40}) {
                    RecoveryInput in;
                    in.kind = kind;
                    in.health_action = ha;
                    in.hosts = hosts;
                    in.host_incidents = history;
                    in.repeat_threshold = threshold;
                    in.restarts_used = used;
                    in.restart_budget = budget;
                    in.failures_without_progress = failures;
                    in.caps.requeue = caps_bits & 1;
                    in.caps.exclude_hosts = caps_bits & 2;
                    in.caps.drain = caps_bits & 4;
                    const RecoveryDecision d = DecideRecovery(in);
                    ++checked;
                    ASSERT_EQ(Violation(in, d), "")
                        << IncidentKindName(kind) << "/" << health::ActionName(ha) << " caps=" << caps_bits
                        << " hosts=" << hosts.size() << " threshold=" << threshold << " used=" << used << "/"
                        << budget << " failures=" << failures << ": " << RecoveryActionName(d.action) << ": "
                        << d.reason;
                    // Same input, same output.
                    const RecoveryDecision again = DecideRecovery(in);
                    ASSERT_EQ(again.action, d.action);
                    ASSERT_EQ(again.reason, d.reason);
                    ASSERT_EQ(again.exclude_hosts, d.exclude_hosts);
                    // The same incident in elastic runs: three nodes training,
                    // with or without a spare, min_nodes 2 or 3.
                    for (int variant = 0; variant < 2; ++variant) {
                      RecoveryInput e = in;
                      e.elastic.active = {"gpu-a16", "gpu-a17", "gpu-a18"};
                      if (variant == 1) e.elastic.spares = {"gpu-s1"};
                      e.elastic.min_nodes = 2 + variant;
                      const RecoveryDecision ed = DecideRecovery(e);
                      ASSERT_EQ(Violation(e, ed), "")
                          << "elastic " << variant << ": " << IncidentKindName(kind) << "/"
                          << health::ActionName(ha) << " caps=" << caps_bits << " hosts=" << hosts.size()
                          << ": " << RecoveryActionName(ed.action) << ": " << ed.reason;
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 8 * 4 * 8 * 4 * 4 * 3 * 4 * 2 * 4);
}

// The rule checker itself catches what it is there to catch.
TEST(RecoveryPolicy, ViolationSpotsAForbiddenAction) {
  RecoveryInput in = MakeInput(K::kHealth, kHDrain, kFresh, kRequeueExclude, kLeft);
  RecoveryDecision d = DecideRecovery(in);
  EXPECT_EQ(Violation(in, d), "");
  d.action = kDrainRequeue;
  d.drain_hosts = {kHost};
  EXPECT_EQ(Violation(in, d), "drain without caps.drain");
  in.caps = MakeCaps(kRequeueOnly);
  EXPECT_EQ(Violation(in, DecideRecovery(in)), "");
  d = DecideRecovery(in);
  d.action = kRequeue;
  d.exclude_hosts = {kHost};
  EXPECT_EQ(Violation(in, d), "exclusion without caps.exclude_hosts");
}

}  // namespace
}  // namespace holdfast

namespace holdfast {
namespace {

// Role processes (daemon/role_policy.h): a role that cannot go on stops the
// run after a learner checkpoint, whatever the scheduler or the budget; a
// restart = "learner" role's crash implicates no host.
TEST(RecoveryPolicy, ARoleFailureStopsAfterACheckpointAndImplicatesNoHost) {
  for (Caps caps : {kLocal, kRequeueOnly, kRequeueExclude, kAll}) {
    for (Budget budget : {kLeft, kSpent}) {
      RecoveryInput in = MakeInput(K::kRoleFailed, kNoHealth, kRepeat, caps, budget);
      in.hosts.clear();
      const RecoveryDecision d = DecideRecovery(in);
      EXPECT_EQ(d.action, RecoveryAction::kStop);
      EXPECT_TRUE(d.checkpoint_first);
      EXPECT_EQ(static_cast<int>(d.outcome), static_cast<int>(StopOutcome::kFailed));
      EXPECT_FALSE(d.budget_exhausted);
      EXPECT_EQ(d.reason.rfind("stop after a checkpoint: a role process cannot go on (", 0), 0u) << d.reason;
    }
  }
  RecoveryInput crash = MakeInput(K::kCrash, kNoHealth, kRepeat, kAll, kLeft);
  crash.hosts.clear();  // a role process's crash names no host: never a requeue excluding one
  const RecoveryDecision d = DecideRecovery(crash);
  EXPECT_EQ(d.action, RecoveryAction::kRestartInPlace);
  EXPECT_NE(d.reason.find("crash (no host implicated)"), std::string::npos) << d.reason;
  EXPECT_STREQ(IncidentKindName(K::kRoleFailed), "role_failed");
}

}  // namespace
}  // namespace holdfast
