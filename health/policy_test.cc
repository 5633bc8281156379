#include "health/policy.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace holdfast::health {
namespace {

CheckResult F(const std::string& name, Action a) { return Fail(name, "s", "m", {"x", "y", "z"}, a); }

TEST(Policy, AllPassingOrSkippedAsksForNothing) {
  const Decision d = Decide({Pass("host.memory", "", "ok", {}), Skipped("gpu.memtest", "", "no CUDA")}, {});
  EXPECT_EQ(d.action, Action::kNone);
  EXPECT_TRUE(d.causes.empty());
  EXPECT_EQ(d.reason, "");
}

TEST(Policy, TakesTheLargestActionAndNamesItsCauses) {
  const Decision d = Decide({F("ib.link_downed", Action::kExcludeNode), F("gpu.count", Action::kDrainNode),
                             F("gpu.xid", Action::kRestart), F("host.devices", Action::kDrainNode)},
                            {});
  EXPECT_EQ(d.action, Action::kDrainNode);
  ASSERT_EQ(d.causes.size(), 2u);
  EXPECT_EQ(d.causes[0].name, "gpu.count");
  EXPECT_EQ(d.causes[1].name, "host.devices");
  EXPECT_EQ(d.reason.rfind("drain_node: gpu.count s x; host.devices s x", 0), 0u) << d.reason;
}

TEST(Policy, OrderOfResultsDoesNotChangeTheAction) {
  std::vector<CheckResult> r = {F("a.x", Action::kRestart), F("b.y", Action::kExcludeNode),
                                Warn("c.z", "", "w", {})};
  const Action forward = Decide(r, {}).action;
  std::reverse(r.begin(), r.end());
  EXPECT_EQ(Decide(r, {}).action, forward);
  EXPECT_EQ(forward, Action::kExcludeNode);
}

TEST(Policy, FailureAlwaysAsksAtLeastRestart) {
  EXPECT_EQ(Decide({F("host.x", Action::kNone)}, {}).action, Action::kRestart);
}

TEST(Policy, WarnAndSkippedFollowTheConfig) {
  PolicyConfig p;
  EXPECT_EQ(Decide({Warn("ib.error_rate", "", "w", {})}, p).action, Action::kNone);
  p.on_warn = Action::kRestart;
  EXPECT_EQ(Decide({Warn("ib.error_rate", "", "w", {})}, p).action, Action::kRestart);
  p.on_skipped = Action::kExcludeNode;
  EXPECT_EQ(Decide({Skipped("gpu.count", "", "no driver")}, p).action, Action::kExcludeNode);
}

TEST(Policy, FailActionOverrideReplacesTheSuggestion) {
  PolicyConfig p;
  p.fail_actions["ib.port_state"] = Action::kDrainNode;
  p.fail_actions["gpu.count"] = Action::kRestart;
  EXPECT_EQ(Decide({F("ib.port_state", Action::kExcludeNode)}, p).action, Action::kDrainNode);
  EXPECT_EQ(Decide({F("gpu.count", Action::kDrainNode)}, p).action, Action::kRestart);
  // Overrides apply to failures only.
  EXPECT_EQ(Decide({Pass("ib.port_state", "", "ok", {})}, p).action, Action::kNone);
}

}  // namespace
}  // namespace holdfast::health
