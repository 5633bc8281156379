// Test support for the recovery policy suites: the table's axes (one
// incident on gpu-a17, a budget of 3, two failed generations in a row) and the
// input they make.
#pragma once

#include "daemon/recovery_policy.h"

namespace holdfast {
namespace recovery_test {

using K = IncidentKind;
using O = StopOutcome;

// The table's axes. Every row is one incident on gpu-a17 with a restart
// budget of 3 and two failed generations in a row (so a restart waits 0.50 s).
enum History { kFresh, kRepeat };  // gpu-a17 implicated 0 times before / once before (threshold 1)
enum Caps { kLocal, kRequeueOnly, kRequeueExclude, kAll };
enum Budget { kLeft, kSpent };  // 1 of 3 restarts used / 3 of 3
constexpr health::Action kNoHealth = health::Action::kNone;
constexpr health::Action kHRestart = health::Action::kRestart;
constexpr health::Action kHExclude = health::Action::kExcludeNode;
constexpr health::Action kHDrain = health::Action::kDrainNode;
constexpr RecoveryAction kRestart = RecoveryAction::kRestartInPlace;
constexpr RecoveryAction kRequeue = RecoveryAction::kRequeueExcluding;
constexpr RecoveryAction kDrainRequeue = RecoveryAction::kDrainAndRequeue;
constexpr RecoveryAction kStop = RecoveryAction::kStop;
constexpr RecoveryAction kContinue = RecoveryAction::kContinueWithout;

const char kHost[] = "gpu-a17";

inline SchedulerCapabilities MakeCaps(Caps c) {
  SchedulerCapabilities caps;
  caps.requeue = c != kLocal;
  caps.exclude_hosts = c == kRequeueExclude || c == kAll;
  caps.drain = c == kAll;
  return caps;
}

inline RecoveryInput MakeInput(K kind, health::Action health_action, History history, Caps caps, Budget budget) {
  RecoveryInput in;
  in.kind = kind;
  in.hosts = {kHost};
  in.health_action = health_action;
  // Another host's history never counts against gpu-a17.
  in.host_incidents = {{"gpu-b02", 4}};
  if (history == kRepeat) in.host_incidents[kHost] = 1;
  in.repeat_threshold = 1;
  in.restart_budget = 3;
  in.restarts_used = budget == kLeft ? 1 : 3;
  in.failures_without_progress = 2;
  in.backoff_initial_s = 0.25;
  in.backoff_max_s = 30;
  in.caps = MakeCaps(caps);
  return in;
}

}  // namespace recovery_test
}  // namespace holdfast
