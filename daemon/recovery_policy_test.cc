#include "daemon/recovery_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace holdfast {
namespace {

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

SchedulerCapabilities MakeCaps(Caps c) {
  SchedulerCapabilities caps;
  caps.requeue = c != kLocal;
  caps.exclude_hosts = c == kRequeueExclude || c == kAll;
  caps.drain = c == kAll;
  return caps;
}

RecoveryInput MakeInput(K kind, health::Action health_action, History history, Caps caps, Budget budget) {
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

struct Row {
  K kind;
  health::Action health_action;
  History history;
  Caps caps;
  Budget budget;
  // ->
  RecoveryAction action;
  double backoff_s;
  bool consumes_restart;
  bool exclude;  // exclude_hosts == {gpu-a17} (else empty)
  bool drain;    // drain_hosts == {gpu-a17} (else empty)
  bool checkpoint_first;
  O outcome;
  bool budget_exhausted;
  const char* says;  // the reason contains this
};

// clang-format off
const std::vector<Row>& Table() {
  static const std::vector<Row> rows = {
    // s: backoff_s, c: consumes_restart, x: exclude_hosts == {gpu-a17}, d: drain_hosts == {gpu-a17},
    // k: checkpoint_first, e: budget_exhausted (1 = true); empty host lists otherwise.
    // kind            health     history  caps             budget  action         s    c  x  d  k  outcome        e  the reason says
    // kCrash
    {K::kCrash,        kNoHealth, kFresh,  kLocal,          kLeft,  kRestart,      0.5, 1, 0, 0, 0, O::kFailed,    0, "crash on gpu-a17"},
    {K::kCrash,        kNoHealth, kFresh,  kLocal,          kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    1, "restart budget is spent"},
    {K::kCrash,        kNoHealth, kFresh,  kRequeueOnly,    kLeft,  kRestart,      0.5, 1, 0, 0, 0, O::kFailed,    0, "crash on gpu-a17"},
    {K::kCrash,        kNoHealth, kFresh,  kRequeueOnly,    kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    1, "restart budget is spent"},
    {K::kCrash,        kNoHealth, kFresh,  kRequeueExclude, kLeft,  kRestart,      0.5, 1, 0, 0, 0, O::kFailed,    0, "crash on gpu-a17"},
    {K::kCrash,        kNoHealth, kFresh,  kRequeueExclude, kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    1, "restart budget is spent"},
    {K::kCrash,        kNoHealth, kFresh,  kAll,            kLeft,  kRestart,      0.5, 1, 0, 0, 0, O::kFailed,    0, "crash on gpu-a17"},
    {K::kCrash,        kNoHealth, kFresh,  kAll,            kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    1, "restart budget is spent"},
    {K::kCrash,        kNoHealth, kRepeat, kLocal,          kLeft,  kRestart,      0.5, 1, 0, 0, 0, O::kFailed,    0, "cannot requeue the job"},
    {K::kCrash,        kNoHealth, kRepeat, kLocal,          kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    1, "restart budget is spent"},
    {K::kCrash,        kNoHealth, kRepeat, kRequeueOnly,    kLeft,  kRestart,      0.5, 1, 0, 0, 0, O::kFailed,    0, "cannot exclude hosts"},
    {K::kCrash,        kNoHealth, kRepeat, kRequeueOnly,    kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    1, "restart budget is spent"},
    {K::kCrash,        kNoHealth, kRepeat, kRequeueExclude, kLeft,  kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "gpu-a17 implicated in 2 incidents"},
    {K::kCrash,        kNoHealth, kRepeat, kRequeueExclude, kSpent, kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "gpu-a17 implicated in 2 incidents"},
    {K::kCrash,        kNoHealth, kRepeat, kAll,            kLeft,  kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "gpu-a17 implicated in 2 incidents"},
    {K::kCrash,        kNoHealth, kRepeat, kAll,            kSpent, kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "gpu-a17 implicated in 2 incidents"},
    // kHang
    {K::kHang,         kNoHealth, kFresh,  kLocal,          kLeft,  kRestart,      0.5, 1, 0, 0, 0, O::kFailed,    0, "hang on gpu-a17"},
    {K::kHang,         kNoHealth, kFresh,  kLocal,          kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    1, "restart budget is spent"},
    {K::kHang,         kNoHealth, kFresh,  kRequeueOnly,    kLeft,  kRestart,      0.5, 1, 0, 0, 0, O::kFailed,    0, "hang on gpu-a17"},
    {K::kHang,         kNoHealth, kFresh,  kRequeueOnly,    kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    1, "restart budget is spent"},
    {K::kHang,         kNoHealth, kFresh,  kRequeueExclude, kLeft,  kRestart,      0.5, 1, 0, 0, 0, O::kFailed,    0, "hang on gpu-a17"},
    {K::kHang,         kNoHealth, kFresh,  kRequeueExclude, kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    1, "restart budget is spent"},
    {K::kHang,         kNoHealth, kFresh,  kAll,            kLeft,  kRestart,      0.5, 1, 0, 0, 0, O::kFailed,    0, "hang on gpu-a17"},
    {K::kHang,         kNoHealth, kFresh,  kAll,            kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    1, "restart budget is spent"},
    {K::kHang,         kNoHealth, kRepeat, kLocal,          kLeft,  kRestart,      0.5, 1, 0, 0, 0, O::kFailed,    0, "cannot requeue the job"},
    {K::kHang,         kNoHealth, kRepeat, kLocal,          kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    1, "restart budget is spent"},
    {K::kHang,         kNoHealth, kRepeat, kRequeueOnly,    kLeft,  kRestart,      0.5, 1, 0, 0, 0, O::kFailed,    0, "cannot exclude hosts"},
    {K::kHang,         kNoHealth, kRepeat, kRequeueOnly,    kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    1, "restart budget is spent"},
    {K::kHang,         kNoHealth, kRepeat, kRequeueExclude, kLeft,  kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "gpu-a17 implicated in 2 incidents"},
    {K::kHang,         kNoHealth, kRepeat, kRequeueExclude, kSpent, kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "gpu-a17 implicated in 2 incidents"},
    {K::kHang,         kNoHealth, kRepeat, kAll,            kLeft,  kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "gpu-a17 implicated in 2 incidents"},
    {K::kHang,         kNoHealth, kRepeat, kAll,            kSpent, kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "gpu-a17 implicated in 2 incidents"},
    // kBadInput
    {K::kBadInput,     kNoHealth, kFresh,  kLocal,          kLeft,  kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "the same input would fail again"},
    {K::kBadInput,     kNoHealth, kFresh,  kLocal,          kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "the same input would fail again"},
    {K::kBadInput,     kNoHealth, kFresh,  kRequeueOnly,    kLeft,  kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "the same input would fail again"},
    {K::kBadInput,     kNoHealth, kFresh,  kRequeueOnly,    kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "the same input would fail again"},
    {K::kBadInput,     kNoHealth, kFresh,  kRequeueExclude, kLeft,  kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "the same input would fail again"},
    {K::kBadInput,     kNoHealth, kFresh,  kRequeueExclude, kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "the same input would fail again"},
    {K::kBadInput,     kNoHealth, kFresh,  kAll,            kLeft,  kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "the same input would fail again"},
    {K::kBadInput,     kNoHealth, kFresh,  kAll,            kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "the same input would fail again"},
    {K::kBadInput,     kNoHealth, kRepeat, kLocal,          kLeft,  kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "the same input would fail again"},
    {K::kBadInput,     kNoHealth, kRepeat, kLocal,          kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "the same input would fail again"},
    {K::kBadInput,     kNoHealth, kRepeat, kRequeueOnly,    kLeft,  kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "the same input would fail again"},
    {K::kBadInput,     kNoHealth, kRepeat, kRequeueOnly,    kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "the same input would fail again"},
    {K::kBadInput,     kNoHealth, kRepeat, kRequeueExclude, kLeft,  kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "the same input would fail again"},
    {K::kBadInput,     kNoHealth, kRepeat, kRequeueExclude, kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "the same input would fail again"},
    {K::kBadInput,     kNoHealth, kRepeat, kAll,            kLeft,  kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "the same input would fail again"},
    {K::kBadInput,     kNoHealth, kRepeat, kAll,            kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "the same input would fail again"},
    // kNodeLost
    {K::kNodeLost,     kNoHealth, kFresh,  kLocal,          kLeft,  kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "cannot continue without gpu-a17; requeue it or runctl resume"},
    {K::kNodeLost,     kNoHealth, kFresh,  kLocal,          kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "cannot continue without gpu-a17; requeue it or runctl resume"},
    {K::kNodeLost,     kNoHealth, kFresh,  kRequeueOnly,    kLeft,  kRequeue,      0,   0, 0, 0, 0, O::kFailed,    0, "cannot exclude gpu-a17"},
    {K::kNodeLost,     kNoHealth, kFresh,  kRequeueOnly,    kSpent, kRequeue,      0,   0, 0, 0, 0, O::kFailed,    0, "cannot exclude gpu-a17"},
    {K::kNodeLost,     kNoHealth, kFresh,  kRequeueExclude, kLeft,  kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "requeue excluding gpu-a17: lost node gpu-a17"},
    {K::kNodeLost,     kNoHealth, kFresh,  kRequeueExclude, kSpent, kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "requeue excluding gpu-a17: lost node gpu-a17"},
    {K::kNodeLost,     kNoHealth, kFresh,  kAll,            kLeft,  kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "requeue excluding gpu-a17: lost node gpu-a17"},
    {K::kNodeLost,     kNoHealth, kFresh,  kAll,            kSpent, kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "requeue excluding gpu-a17: lost node gpu-a17"},
    {K::kNodeLost,     kNoHealth, kRepeat, kLocal,          kLeft,  kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "cannot continue without gpu-a17; requeue it or runctl resume"},
    {K::kNodeLost,     kNoHealth, kRepeat, kLocal,          kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "cannot continue without gpu-a17; requeue it or runctl resume"},
    {K::kNodeLost,     kNoHealth, kRepeat, kRequeueOnly,    kLeft,  kRequeue,      0,   0, 0, 0, 0, O::kFailed,    0, "cannot exclude gpu-a17"},
    {K::kNodeLost,     kNoHealth, kRepeat, kRequeueOnly,    kSpent, kRequeue,      0,   0, 0, 0, 0, O::kFailed,    0, "cannot exclude gpu-a17"},
    {K::kNodeLost,     kNoHealth, kRepeat, kRequeueExclude, kLeft,  kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "requeue excluding gpu-a17: lost node gpu-a17"},
    {K::kNodeLost,     kNoHealth, kRepeat, kRequeueExclude, kSpent, kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "requeue excluding gpu-a17: lost node gpu-a17"},
    {K::kNodeLost,     kNoHealth, kRepeat, kAll,            kLeft,  kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "requeue excluding gpu-a17: lost node gpu-a17"},
    {K::kNodeLost,     kNoHealth, kRepeat, kAll,            kSpent, kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "requeue excluding gpu-a17: lost node gpu-a17"},
    // kHealth / kRestart
    {K::kHealth,       kHRestart, kFresh,  kLocal,          kLeft,  kRestart,      0.5, 1, 0, 0, 0, O::kFailed,    0, "health check asks for restart on gpu-a17"},
    {K::kHealth,       kHRestart, kFresh,  kLocal,          kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    1, "restart budget is spent"},
    {K::kHealth,       kHRestart, kFresh,  kRequeueOnly,    kLeft,  kRestart,      0.5, 1, 0, 0, 0, O::kFailed,    0, "health check asks for restart on gpu-a17"},
    {K::kHealth,       kHRestart, kFresh,  kRequeueOnly,    kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    1, "restart budget is spent"},
    {K::kHealth,       kHRestart, kFresh,  kRequeueExclude, kLeft,  kRestart,      0.5, 1, 0, 0, 0, O::kFailed,    0, "health check asks for restart on gpu-a17"},
    {K::kHealth,       kHRestart, kFresh,  kRequeueExclude, kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    1, "restart budget is spent"},
    {K::kHealth,       kHRestart, kFresh,  kAll,            kLeft,  kRestart,      0.5, 1, 0, 0, 0, O::kFailed,    0, "health check asks for restart on gpu-a17"},
    {K::kHealth,       kHRestart, kFresh,  kAll,            kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    1, "restart budget is spent"},
    {K::kHealth,       kHRestart, kRepeat, kLocal,          kLeft,  kRestart,      0.5, 1, 0, 0, 0, O::kFailed,    0, "cannot requeue the job"},
    {K::kHealth,       kHRestart, kRepeat, kLocal,          kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    1, "restart budget is spent"},
    {K::kHealth,       kHRestart, kRepeat, kRequeueOnly,    kLeft,  kRestart,      0.5, 1, 0, 0, 0, O::kFailed,    0, "cannot exclude hosts"},
    {K::kHealth,       kHRestart, kRepeat, kRequeueOnly,    kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    1, "restart budget is spent"},
    {K::kHealth,       kHRestart, kRepeat, kRequeueExclude, kLeft,  kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "gpu-a17 implicated in 2 incidents"},
    {K::kHealth,       kHRestart, kRepeat, kRequeueExclude, kSpent, kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "gpu-a17 implicated in 2 incidents"},
    {K::kHealth,       kHRestart, kRepeat, kAll,            kLeft,  kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "gpu-a17 implicated in 2 incidents"},
    {K::kHealth,       kHRestart, kRepeat, kAll,            kSpent, kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "gpu-a17 implicated in 2 incidents"},
    // kHealth / kExcludeNode
    {K::kHealth,       kHExclude, kFresh,  kLocal,          kLeft,  kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "gpu-a17 must leave the job"},
    {K::kHealth,       kHExclude, kFresh,  kLocal,          kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "gpu-a17 must leave the job"},
    {K::kHealth,       kHExclude, kFresh,  kRequeueOnly,    kLeft,  kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "gpu-a17 must leave the job"},
    {K::kHealth,       kHExclude, kFresh,  kRequeueOnly,    kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "gpu-a17 must leave the job"},
    {K::kHealth,       kHExclude, kFresh,  kRequeueExclude, kLeft,  kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "requeue excluding gpu-a17"},
    {K::kHealth,       kHExclude, kFresh,  kRequeueExclude, kSpent, kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "requeue excluding gpu-a17"},
    {K::kHealth,       kHExclude, kFresh,  kAll,            kLeft,  kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "requeue excluding gpu-a17"},
    {K::kHealth,       kHExclude, kFresh,  kAll,            kSpent, kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "requeue excluding gpu-a17"},
    {K::kHealth,       kHExclude, kRepeat, kLocal,          kLeft,  kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "gpu-a17 must leave the job"},
    {K::kHealth,       kHExclude, kRepeat, kLocal,          kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "gpu-a17 must leave the job"},
    {K::kHealth,       kHExclude, kRepeat, kRequeueOnly,    kLeft,  kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "gpu-a17 must leave the job"},
    {K::kHealth,       kHExclude, kRepeat, kRequeueOnly,    kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "gpu-a17 must leave the job"},
    {K::kHealth,       kHExclude, kRepeat, kRequeueExclude, kLeft,  kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "requeue excluding gpu-a17"},
    {K::kHealth,       kHExclude, kRepeat, kRequeueExclude, kSpent, kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "requeue excluding gpu-a17"},
    {K::kHealth,       kHExclude, kRepeat, kAll,            kLeft,  kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "requeue excluding gpu-a17"},
    {K::kHealth,       kHExclude, kRepeat, kAll,            kSpent, kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "requeue excluding gpu-a17"},
    // kHealth / kDrainNode
    {K::kHealth,       kHDrain,   kFresh,  kLocal,          kLeft,  kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "gpu-a17 must leave the job"},
    {K::kHealth,       kHDrain,   kFresh,  kLocal,          kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "gpu-a17 must leave the job"},
    {K::kHealth,       kHDrain,   kFresh,  kRequeueOnly,    kLeft,  kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "gpu-a17 must leave the job"},
    {K::kHealth,       kHDrain,   kFresh,  kRequeueOnly,    kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "gpu-a17 must leave the job"},
    {K::kHealth,       kHDrain,   kFresh,  kRequeueExclude, kLeft,  kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "could not be drained"},
    {K::kHealth,       kHDrain,   kFresh,  kRequeueExclude, kSpent, kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "could not be drained"},
    {K::kHealth,       kHDrain,   kFresh,  kAll,            kLeft,  kDrainRequeue, 0,   0, 1, 1, 0, O::kFailed,    0, "drain gpu-a17 and requeue"},
    {K::kHealth,       kHDrain,   kFresh,  kAll,            kSpent, kDrainRequeue, 0,   0, 1, 1, 0, O::kFailed,    0, "drain gpu-a17 and requeue"},
    {K::kHealth,       kHDrain,   kRepeat, kLocal,          kLeft,  kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "gpu-a17 must leave the job"},
    {K::kHealth,       kHDrain,   kRepeat, kLocal,          kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "gpu-a17 must leave the job"},
    {K::kHealth,       kHDrain,   kRepeat, kRequeueOnly,    kLeft,  kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "gpu-a17 must leave the job"},
    {K::kHealth,       kHDrain,   kRepeat, kRequeueOnly,    kSpent, kStop,         0,   0, 0, 0, 0, O::kFailed,    0, "gpu-a17 must leave the job"},
    {K::kHealth,       kHDrain,   kRepeat, kRequeueExclude, kLeft,  kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "could not be drained"},
    {K::kHealth,       kHDrain,   kRepeat, kRequeueExclude, kSpent, kRequeue,      0,   0, 1, 0, 0, O::kFailed,    0, "could not be drained"},
    {K::kHealth,       kHDrain,   kRepeat, kAll,            kLeft,  kDrainRequeue, 0,   0, 1, 1, 0, O::kFailed,    0, "drain gpu-a17 and requeue"},
    {K::kHealth,       kHDrain,   kRepeat, kAll,            kSpent, kDrainRequeue, 0,   0, 1, 1, 0, O::kFailed,    0, "drain gpu-a17 and requeue"},
    // kStopRequest
    {K::kStopRequest,  kNoHealth, kFresh,  kLocal,          kLeft,  kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "operator stop request"},
    {K::kStopRequest,  kNoHealth, kFresh,  kLocal,          kSpent, kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "operator stop request"},
    {K::kStopRequest,  kNoHealth, kFresh,  kRequeueOnly,    kLeft,  kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "operator stop request"},
    {K::kStopRequest,  kNoHealth, kFresh,  kRequeueOnly,    kSpent, kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "operator stop request"},
    {K::kStopRequest,  kNoHealth, kFresh,  kRequeueExclude, kLeft,  kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "operator stop request"},
    {K::kStopRequest,  kNoHealth, kFresh,  kRequeueExclude, kSpent, kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "operator stop request"},
    {K::kStopRequest,  kNoHealth, kFresh,  kAll,            kLeft,  kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "operator stop request"},
    {K::kStopRequest,  kNoHealth, kFresh,  kAll,            kSpent, kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "operator stop request"},
    {K::kStopRequest,  kNoHealth, kRepeat, kLocal,          kLeft,  kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "operator stop request"},
    {K::kStopRequest,  kNoHealth, kRepeat, kLocal,          kSpent, kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "operator stop request"},
    {K::kStopRequest,  kNoHealth, kRepeat, kRequeueOnly,    kLeft,  kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "operator stop request"},
    {K::kStopRequest,  kNoHealth, kRepeat, kRequeueOnly,    kSpent, kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "operator stop request"},
    {K::kStopRequest,  kNoHealth, kRepeat, kRequeueExclude, kLeft,  kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "operator stop request"},
    {K::kStopRequest,  kNoHealth, kRepeat, kRequeueExclude, kSpent, kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "operator stop request"},
    {K::kStopRequest,  kNoHealth, kRepeat, kAll,            kLeft,  kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "operator stop request"},
    {K::kStopRequest,  kNoHealth, kRepeat, kAll,            kSpent, kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "operator stop request"},
    // kDaemonSignal
    {K::kDaemonSignal, kNoHealth, kFresh,  kLocal,          kLeft,  kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "fatal signal"},
    {K::kDaemonSignal, kNoHealth, kFresh,  kLocal,          kSpent, kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "fatal signal"},
    {K::kDaemonSignal, kNoHealth, kFresh,  kRequeueOnly,    kLeft,  kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "fatal signal"},
    {K::kDaemonSignal, kNoHealth, kFresh,  kRequeueOnly,    kSpent, kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "fatal signal"},
    {K::kDaemonSignal, kNoHealth, kFresh,  kRequeueExclude, kLeft,  kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "fatal signal"},
    {K::kDaemonSignal, kNoHealth, kFresh,  kRequeueExclude, kSpent, kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "fatal signal"},
    {K::kDaemonSignal, kNoHealth, kFresh,  kAll,            kLeft,  kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "fatal signal"},
    {K::kDaemonSignal, kNoHealth, kFresh,  kAll,            kSpent, kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "fatal signal"},
    {K::kDaemonSignal, kNoHealth, kRepeat, kLocal,          kLeft,  kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "fatal signal"},
    {K::kDaemonSignal, kNoHealth, kRepeat, kLocal,          kSpent, kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "fatal signal"},
    {K::kDaemonSignal, kNoHealth, kRepeat, kRequeueOnly,    kLeft,  kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "fatal signal"},
    {K::kDaemonSignal, kNoHealth, kRepeat, kRequeueOnly,    kSpent, kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "fatal signal"},
    {K::kDaemonSignal, kNoHealth, kRepeat, kRequeueExclude, kLeft,  kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "fatal signal"},
    {K::kDaemonSignal, kNoHealth, kRepeat, kRequeueExclude, kSpent, kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "fatal signal"},
    {K::kDaemonSignal, kNoHealth, kRepeat, kAll,            kLeft,  kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "fatal signal"},
    {K::kDaemonSignal, kNoHealth, kRepeat, kAll,            kSpent, kStop,         0,   0, 0, 0, 1, O::kStopped,   0, "fatal signal"},
    // kPreemption
    {K::kPreemption,   kNoHealth, kFresh,  kLocal,          kLeft,  kStop,         0,   0, 0, 0, 1, O::kPreempted, 0, "cannot requeue the job"},
    {K::kPreemption,   kNoHealth, kFresh,  kLocal,          kSpent, kStop,         0,   0, 0, 0, 1, O::kPreempted, 0, "cannot requeue the job"},
    {K::kPreemption,   kNoHealth, kFresh,  kRequeueOnly,    kLeft,  kRequeue,      0,   0, 0, 0, 1, O::kPreempted, 0, "requeue after a checkpoint"},
    {K::kPreemption,   kNoHealth, kFresh,  kRequeueOnly,    kSpent, kRequeue,      0,   0, 0, 0, 1, O::kPreempted, 0, "requeue after a checkpoint"},
    {K::kPreemption,   kNoHealth, kFresh,  kRequeueExclude, kLeft,  kRequeue,      0,   0, 0, 0, 1, O::kPreempted, 0, "requeue after a checkpoint"},
    {K::kPreemption,   kNoHealth, kFresh,  kRequeueExclude, kSpent, kRequeue,      0,   0, 0, 0, 1, O::kPreempted, 0, "requeue after a checkpoint"},
    {K::kPreemption,   kNoHealth, kFresh,  kAll,            kLeft,  kRequeue,      0,   0, 0, 0, 1, O::kPreempted, 0, "requeue after a checkpoint"},
    {K::kPreemption,   kNoHealth, kFresh,  kAll,            kSpent, kRequeue,      0,   0, 0, 0, 1, O::kPreempted, 0, "requeue after a checkpoint"},
    {K::kPreemption,   kNoHealth, kRepeat, kLocal,          kLeft,  kStop,         0,   0, 0, 0, 1, O::kPreempted, 0, "cannot requeue the job"},
    {K::kPreemption,   kNoHealth, kRepeat, kLocal,          kSpent, kStop,         0,   0, 0, 0, 1, O::kPreempted, 0, "cannot requeue the job"},
    {K::kPreemption,   kNoHealth, kRepeat, kRequeueOnly,    kLeft,  kRequeue,      0,   0, 0, 0, 1, O::kPreempted, 0, "requeue after a checkpoint"},
    {K::kPreemption,   kNoHealth, kRepeat, kRequeueOnly,    kSpent, kRequeue,      0,   0, 0, 0, 1, O::kPreempted, 0, "requeue after a checkpoint"},
    {K::kPreemption,   kNoHealth, kRepeat, kRequeueExclude, kLeft,  kRequeue,      0,   0, 0, 0, 1, O::kPreempted, 0, "requeue after a checkpoint"},
    {K::kPreemption,   kNoHealth, kRepeat, kRequeueExclude, kSpent, kRequeue,      0,   0, 0, 0, 1, O::kPreempted, 0, "requeue after a checkpoint"},
    {K::kPreemption,   kNoHealth, kRepeat, kAll,            kLeft,  kRequeue,      0,   0, 0, 0, 1, O::kPreempted, 0, "requeue after a checkpoint"},
    {K::kPreemption,   kNoHealth, kRepeat, kAll,            kSpent, kRequeue,      0,   0, 0, 0, 1, O::kPreempted, 0, "requeue after a checkpoint"},
  };
  return rows;
}
// clang-format on

std::string RowName(const Row& r) {
  static const char* const kHistory[] = {"fresh", "repeat"};
  static const char* const kCaps[] = {"local", "requeue", "requeue+exclude", "requeue+exclude+drain"};
  static const char* const kBudget[] = {"budget left", "budget spent"};
  std::ostringstream out;
  out << IncidentKindName(r.kind);
  if (r.kind == K::kHealth) out << "/" << health::ActionName(r.health_action);
  out << ", " << kHistory[r.history] << ", " << kCaps[r.caps] << ", " << kBudget[r.budget];
  return out.str();
}

TEST(RecoveryPolicy, TableCoversEveryCombination) {
  std::set<std::tuple<K, health::Action, History, Caps, Budget>> seen;
  for (const Row& r : Table()) {
    EXPECT_TRUE(seen.emplace(r.kind, r.health_action, r.history, r.caps, r.budget).second) << RowName(r);
  }
  size_t expected = 0;
  for (K kind : {K::kCrash, K::kHang, K::kBadInput, K::kNodeLost, K::kHealth, K::kStopRequest, K::kDaemonSignal,
                 K::kPreemption}) {
    const std::vector<health::Action> actions =
        kind == K::kHealth ? std::vector<health::Action>{kHRestart, kHExclude, kHDrain}
                           : std::vector<health::Action>{kNoHealth};
    for (health::Action a : actions) {
      for (History h : {kFresh, kRepeat}) {
        for (Caps c : {kLocal, kRequeueOnly, kRequeueExclude, kAll}) {
          for (Budget b : {kLeft, kSpent}) {
            EXPECT_EQ(seen.count({kind, a, h, c, b}), 1u) << "no row for " << RowName({kind, a, h, c, b, kStop, 0,
                                                                                       false, false, false, false,
                                                                                       O::kFailed, false, ""});
            ++expected;
          }
        }
      }
    }
  }
  EXPECT_EQ(Table().size(), expected);
  EXPECT_EQ(expected, 160u);
}

TEST(RecoveryPolicy, Table) {
  const std::vector<std::string> host = {kHost};
  const std::vector<std::string> none;
  for (const Row& r : Table()) {
    SCOPED_TRACE(RowName(r));
    const RecoveryInput in = MakeInput(r.kind, r.health_action, r.history, r.caps, r.budget);
    const RecoveryDecision d = DecideRecovery(in);
    EXPECT_EQ(RecoveryActionName(d.action), std::string(RecoveryActionName(r.action)));
    EXPECT_DOUBLE_EQ(d.backoff_s, r.backoff_s);
    EXPECT_EQ(d.consumes_restart, r.consumes_restart);
    EXPECT_EQ(d.exclude_hosts, r.exclude ? host : none);
    EXPECT_EQ(d.drain_hosts, r.drain ? host : none);
    EXPECT_EQ(d.checkpoint_first, r.checkpoint_first);
    EXPECT_EQ(static_cast<int>(d.outcome), static_cast<int>(r.outcome));
    EXPECT_EQ(d.budget_exhausted, r.budget_exhausted);

    // The reason: one line that says what is done, names the host, counts the restarts.
    EXPECT_EQ(d.reason.find('\n'), std::string::npos) << d.reason;
    static const char* const kVerb[] = {"restart in place ", "requeue", "drain ", "stop"};
    EXPECT_EQ(d.reason.rfind(kVerb[static_cast<int>(d.action)], 0), 0u) << d.reason;
    EXPECT_NE(d.reason.find(kHost), std::string::npos) << d.reason;
    const std::string count = d.action == kRestart ? "restart " + std::to_string(in.restarts_used + 1) + " of 3"
                                                   : std::to_string(in.restarts_used) + " of 3 restarts used";
    EXPECT_NE(d.reason.find(count), std::string::npos) << d.reason;
    EXPECT_NE(d.reason.find(r.says), std::string::npos) << d.reason;
  }
}

TEST(RecoveryPolicy, ReasonsReadAsSentences) {
  RecoveryInput in = MakeInput(K::kCrash, kNoHealth, kFresh, kAll, kLeft);
  EXPECT_EQ(DecideRecovery(in).reason, "restart in place after 0.50 s (restart 2 of 3): crash on gpu-a17");
  in.failures_without_progress = 0;
  EXPECT_EQ(DecideRecovery(in).reason, "restart in place now (restart 2 of 3): crash on gpu-a17");

  in = MakeInput(K::kCrash, kNoHealth, kRepeat, kAll, kLeft);
  EXPECT_EQ(DecideRecovery(in).reason,
            "requeue excluding gpu-a17: crash on gpu-a17; gpu-a17 implicated in 2 incidents of this run "
            "(1 of 3 restarts used)");

  in = MakeInput(K::kHang, kNoHealth, kRepeat, kRequeueOnly, kLeft);
  EXPECT_EQ(DecideRecovery(in).reason,
            "restart in place after 0.50 s (restart 2 of 3): hang on gpu-a17; gpu-a17 implicated in 2 incidents "
            "of this run, but this scheduler cannot exclude hosts");

  in = MakeInput(K::kCrash, kNoHealth, kFresh, kAll, kSpent);
  EXPECT_EQ(DecideRecovery(in).reason,
            "stop: crash on gpu-a17 and the restart budget is spent (3 of 3 restarts used)");

  in = MakeInput(K::kNodeLost, kNoHealth, kFresh, kLocal, kLeft);
  EXPECT_EQ(DecideRecovery(in).reason,
            "stop: lost node gpu-a17; the run cannot continue without gpu-a17; requeue it or runctl resume "
            "(1 of 3 restarts used)");

  in = MakeInput(K::kHealth, kHDrain, kFresh, kRequeueExclude, kLeft);
  EXPECT_EQ(DecideRecovery(in).reason,
            "requeue excluding gpu-a17: health check asks for drain_node on gpu-a17; gpu-a17 could not be drained "
            "(this scheduler cannot drain) (1 of 3 restarts used)");

  in = MakeInput(K::kHealth, kHDrain, kFresh, kAll, kLeft);
  in.hosts = {"gpu-a17", "gpu-a18"};
  const RecoveryDecision drain = DecideRecovery(in);
  EXPECT_EQ(drain.reason,
            "drain gpu-a17, gpu-a18 and requeue excluding them: health check asks for drain_node on gpu-a17, "
            "gpu-a18 (1 of 3 restarts used)");
  EXPECT_EQ(drain.drain_hosts, in.hosts);
  EXPECT_EQ(drain.exclude_hosts, in.hosts);

  in = MakeInput(K::kHealth, kHExclude, kFresh, kRequeueOnly, kLeft);
  EXPECT_EQ(DecideRecovery(in).reason,
            "stop: health check asks for exclude_node on gpu-a17; gpu-a17 must leave the job, but this scheduler "
            "cannot exclude hosts (1 of 3 restarts used)");
}

TEST(RecoveryPolicy, BackoffDoublesFromTheFirstFailureWithoutProgressUpToTheCap) {
  RecoveryInput in = MakeInput(K::kCrash, kNoHealth, kFresh, kLocal, kLeft);
  in.restart_budget = 1000;
  in.backoff_initial_s = 0.25;
  in.backoff_max_s = 30;
  const std::vector<std::pair<int, double>> cases = {{0, 0},   {1, 0.25}, {2, 0.5},  {3, 1},         {4, 2},
                                                     {8, 30},  {9, 30},   {100, 30}, {1 << 30, 30}, {-1, 0}};
  for (const auto& [failures, backoff] : cases) {
    in.failures_without_progress = failures;
    const RecoveryDecision d = DecideRecovery(in);
    ASSERT_EQ(d.action, kRestart);
    EXPECT_DOUBLE_EQ(d.backoff_s, backoff) << failures << " failures without progress";
  }
  // The cap wins over the first step as well.
  in.backoff_initial_s = 5;
  in.backoff_max_s = 2;
  in.failures_without_progress = 1;
  EXPECT_DOUBLE_EQ(DecideRecovery(in).backoff_s, 2);
}

TEST(RecoveryPolicy, BudgetCountsEveryRestartInPlace) {
  RecoveryInput in = MakeInput(K::kCrash, kNoHealth, kFresh, kAll, kLeft);
  for (int used = 0; used < 3; ++used) {
    in.restarts_used = used;
    const RecoveryDecision d = DecideRecovery(in);
    EXPECT_EQ(d.action, kRestart) << used;
    EXPECT_TRUE(d.consumes_restart);
    EXPECT_NE(d.reason.find("(restart " + std::to_string(used + 1) + " of 3)"), std::string::npos) << d.reason;
  }
  in.restarts_used = 3;
  EXPECT_TRUE(DecideRecovery(in).budget_exhausted);
  in.restarts_used = 7;  // over the budget (a lowered budget on resume): still spent
  EXPECT_TRUE(DecideRecovery(in).budget_exhausted);
  in.restart_budget = 0;  // no restarts at all
  in.restarts_used = 0;
  EXPECT_EQ(DecideRecovery(in).action, kStop);
}

TEST(RecoveryPolicy, OnlyRepeatedHostsAreExcluded) {
  RecoveryInput in = MakeInput(K::kCrash, kNoHealth, kFresh, kAll, kLeft);
  in.hosts = {"gpu-a17", "gpu-a18", "gpu-a19", "gpu-a18"};
  in.host_incidents = {{"gpu-a18", 1}, {"gpu-a19", 2}};
  RecoveryDecision d = DecideRecovery(in);
  EXPECT_EQ(d.action, kRequeue);
  EXPECT_EQ(d.exclude_hosts, (std::vector<std::string>{"gpu-a18", "gpu-a19"}));
  EXPECT_NE(d.reason.find("gpu-a18 implicated in 2 incidents"), std::string::npos) << d.reason;
  EXPECT_NE(d.reason.find("gpu-a19 implicated in 3 incidents"), std::string::npos) << d.reason;
  EXPECT_NE(d.reason.find("crash on gpu-a17, gpu-a18, gpu-a19"), std::string::npos) << d.reason;

  // A higher threshold lets a host stay for one more incident.
  in.repeat_threshold = 2;
  d = DecideRecovery(in);
  EXPECT_EQ(d.exclude_hosts, (std::vector<std::string>{"gpu-a19"}));
  in.repeat_threshold = 3;
  EXPECT_EQ(DecideRecovery(in).action, kRestart);
}

TEST(RecoveryPolicy, NoImplicatedHost) {
  // A collective timeout seen by every rank: no one to exclude, so the budget decides.
  RecoveryInput in = MakeInput(K::kHang, kNoHealth, kRepeat, kAll, kLeft);
  in.hosts.clear();
  RecoveryDecision d = DecideRecovery(in);
  EXPECT_EQ(d.action, kRestart);
  EXPECT_NE(d.reason.find("hang (no host implicated)"), std::string::npos) << d.reason;

  in.kind = K::kNodeLost;
  d = DecideRecovery(in);
  EXPECT_EQ(d.action, kRequeue);
  EXPECT_TRUE(d.exclude_hosts.empty());

  in.kind = K::kHealth;
  in.health_action = kHDrain;
  d = DecideRecovery(in);
  EXPECT_EQ(d.action, kRequeue);
  EXPECT_TRUE(d.exclude_hosts.empty());
  EXPECT_TRUE(d.drain_hosts.empty());
  EXPECT_NE(d.reason.find("no host was named"), std::string::npos) << d.reason;
  in.caps = MakeCaps(kLocal);
  EXPECT_EQ(DecideRecovery(in).action, kStop);
}

TEST(RecoveryPolicy, NodeLostExcludesEveryLostHost) {
  RecoveryInput in = MakeInput(K::kNodeLost, kNoHealth, kFresh, kRequeueExclude, kSpent);
  in.hosts = {"gpu-a17", "gpu-a20"};
  const RecoveryDecision d = DecideRecovery(in);
  EXPECT_EQ(d.action, kRequeue);
  EXPECT_EQ(d.exclude_hosts, (std::vector<std::string>{"gpu-a17", "gpu-a20"}));
  EXPECT_FALSE(d.consumes_restart);
  EXPECT_EQ(d.reason, "requeue excluding gpu-a17, gpu-a20: lost node gpu-a17, gpu-a20 (3 of 3 restarts used)");
}

TEST(RecoveryPolicy, HealthNoneIsTreatedAsRestart) {
  // kNone should not reach the policy; if it does, a failed check still costs a restart.
  const RecoveryDecision d = DecideRecovery(MakeInput(K::kHealth, kNoHealth, kFresh, kAll, kLeft));
  EXPECT_EQ(d.action, kRestart);
  EXPECT_TRUE(d.consumes_restart);
}

TEST(RecoveryPolicy, Names) {
  EXPECT_STREQ(IncidentKindName(K::kCrash), "crash");
  EXPECT_STREQ(IncidentKindName(K::kHang), "hang");
  EXPECT_STREQ(IncidentKindName(K::kBadInput), "bad_input");
  EXPECT_STREQ(IncidentKindName(K::kNodeLost), "node_lost");
  EXPECT_STREQ(IncidentKindName(K::kHealth), "health");
  EXPECT_STREQ(IncidentKindName(K::kStopRequest), "stop_request");
  EXPECT_STREQ(IncidentKindName(K::kDaemonSignal), "daemon_signal");
  EXPECT_STREQ(IncidentKindName(K::kPreemption), "preemption");
  EXPECT_STREQ(RecoveryActionName(kRestart), "restart");
  EXPECT_STREQ(RecoveryActionName(kRequeue), "requeue");
  EXPECT_STREQ(RecoveryActionName(kDrainRequeue), "drain_requeue");
  EXPECT_STREQ(RecoveryActionName(kStop), "stop");
  EXPECT_STREQ(RecoveryActionName(kContinue), "continue_without");
}

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

// ---- exits: one row per class, from the waitpid status and the launcher's exec error ----

int ExitStatus(int code) { return (code & 0xff) << 8; }  // as waitpid reports exit(code)
int SignalStatus(int sig) { return sig & 0x7f; }          // as waitpid reports death by `sig`

TEST(ClassifyExit, EveryExitHasOneClass) {
  struct Row {
    int wstatus;
    const char* exec_error;
    ExitClass want;
  };
  const Row rows[] = {
      {ExitStatus(0), "", ExitClass::kClean},
      {ExitStatus(75), "", ExitClass::kCheckpointed},
      {ExitStatus(2), "", ExitClass::kBadInput},
      {ExitStatus(126), "", ExitClass::kNotExecuted},  // found, not executable (sh -c, srun)
      {ExitStatus(127), "", ExitClass::kNotExecuted},  // not found
      {ExitStatus(0), "execvp ./train: No such file or directory", ExitClass::kNotExecuted},
      {ExitStatus(1), "", ExitClass::kCrash},
      {ExitStatus(3), "", ExitClass::kCrash},
      {ExitStatus(137), "", ExitClass::kCrash},  // a wrapper reporting a SIGKILLed child
      {ExitStatus(255), "", ExitClass::kCrash},
      {SignalStatus(9), "", ExitClass::kCrash},
      {SignalStatus(11), "", ExitClass::kCrash},
      {SignalStatus(15), "", ExitClass::kCrash},  // TERM without a checkpoint exit: not a clean stop
      {SignalStatus(6) | 0x80, "", ExitClass::kCrash},  // core dumped
  };
  for (const Row& r : rows) {
    EXPECT_EQ(ClassifyExit(r.wstatus, r.exec_error), r.want)
        << "wstatus " << r.wstatus << " exec_error '" << r.exec_error << "': got "
        << ExitClassName(ClassifyExit(r.wstatus, r.exec_error)) << ", want " << ExitClassName(r.want);
  }
  EXPECT_TRUE(ExitedWithCode(ExitStatus(75), 75));
  EXPECT_FALSE(ExitedWithCode(SignalStatus(9), 0));
  EXPECT_TRUE(IsExecFailureStatus(ExitStatus(127)));
  EXPECT_FALSE(IsExecFailureStatus(SignalStatus(9)));
}

TEST(EndOfStoppedRun, StateAndExitCodeFollowTheCause) {
  struct Row {
    K cause;
    StopOutcome decided;
    bool committed;
    StopOutcome outcome;
    int exit_code;
  };
  const Row rows[] = {
      {K::kStopRequest, StopOutcome::kStopped, false, StopOutcome::kStopped, 3},
      {K::kStopRequest, StopOutcome::kStopped, true, StopOutcome::kStopped, 75},  // resumable from the final save
      {K::kDaemonSignal, StopOutcome::kStopped, false, StopOutcome::kStopped, 3},
      {K::kDaemonSignal, StopOutcome::kStopped, true, StopOutcome::kStopped, 75},
      {K::kPreemption, StopOutcome::kPreempted, false, StopOutcome::kPreempted, 75},
      {K::kPreemption, StopOutcome::kPreempted, true, StopOutcome::kPreempted, 75},
      {K::kBadInput, StopOutcome::kFailed, false, StopOutcome::kFailed, 2},
      {K::kRoleFailed, StopOutcome::kFailed, true, StopOutcome::kFailed, 1},
      {K::kCrash, StopOutcome::kFailed, false, StopOutcome::kFailed, 1},
      {K::kHang, StopOutcome::kFailed, false, StopOutcome::kFailed, 1},
      {K::kNodeLost, StopOutcome::kFailed, false, StopOutcome::kFailed, 1},
      {K::kHealth, StopOutcome::kFailed, false, StopOutcome::kFailed, 1},
  };
  for (const Row& r : rows) {
    const RunEnd end = EndOfStoppedRun(r.cause, r.decided, r.committed);
    EXPECT_EQ(static_cast<int>(end.outcome), static_cast<int>(r.outcome)) << IncidentKindName(r.cause);
    EXPECT_EQ(end.exit_code, r.exit_code) << IncidentKindName(r.cause) << " committed " << r.committed;
  }
  EXPECT_TRUE(RanksCommitted({ExitClass::kCheckpointed, ExitClass::kClean}));
  EXPECT_FALSE(RanksCommitted({ExitClass::kCheckpointed, ExitClass::kCrash}));
  EXPECT_FALSE(RanksCommitted({}));
}

// ---- incidents arriving while a decision is carried out ----

TEST(RedecideFor, AnIncidentWhileStoppingIsDecidedAgainOnlyWhereThePlanCannotStand) {
  RecoveryDecision restart;
  restart.action = RecoveryAction::kRestartInPlace;
  RecoveryDecision without;
  without.action = RecoveryAction::kContinueWithout;
  RecoveryDecision requeue;
  requeue.action = RecoveryAction::kRequeueExcluding;
  RecoveryDecision drain;
  drain.action = RecoveryAction::kDrainAndRequeue;
  RecoveryDecision stop;
  stop.action = RecoveryAction::kStop;
  RecoveryDecision stop_checkpoint = stop;
  stop_checkpoint.checkpoint_first = true;
  using P = ControllerPhase;
  using R = Redecision;
  const health::Action kRestartHealth = health::Action::kRestart;
  const health::Action kDrainHealth = health::Action::kDrainNode;
  struct Row {
    K incoming;
    health::Action health;
    bool from_role;
    P phase;
    const RecoveryDecision* pending;
    R want;
  };
  const Row rows[] = {
      // A node lost while running is decided; while stopping, it depends on the plan.
      {K::kNodeLost, kNoHealth, false, P::kRunning, nullptr, R::kDecide},
      {K::kNodeLost, kNoHealth, false, P::kStopping, &restart, R::kDecide},
      {K::kNodeLost, kNoHealth, false, P::kStopping, &without, R::kDecideWithPending},
      {K::kNodeLost, kNoHealth, false, P::kStopping, &requeue, R::kJoinPendingRequeue},
      {K::kNodeLost, kNoHealth, false, P::kStopping, &drain, R::kJoinPendingRequeue},
      {K::kNodeLost, kNoHealth, false, P::kStopping, &stop, R::kRecordOnly},
      {K::kNodeLost, kNoHealth, false, P::kStopping, nullptr, R::kRecordOnly},
      {K::kNodeLost, kNoHealth, false, P::kBackoff, &restart, R::kDecide},
      // A health finding while stopping, or a restart asked for while nothing runs: nothing to do.
      {K::kHealth, kRestartHealth, false, P::kStopping, &restart, R::kIgnore},
      {K::kHealth, kDrainHealth, false, P::kStopping, &restart, R::kIgnore},
      {K::kHealth, kRestartHealth, false, P::kIdle, nullptr, R::kIgnore},
      {K::kHealth, kRestartHealth, false, P::kBackoff, &restart, R::kIgnore},
      {K::kHealth, kDrainHealth, false, P::kBackoff, &restart, R::kDecide},  // the node must go before the restart
      {K::kHealth, kDrainHealth, false, P::kIdle, nullptr, R::kDecide},      // a prelaunch finding
      {K::kHealth, kRestartHealth, false, P::kRunning, nullptr, R::kDecide},
      // An operator's stop overrides a pending restart; a second stop changes nothing.
      {K::kStopRequest, kNoHealth, false, P::kStopping, &restart, R::kDecide},
      {K::kStopRequest, kNoHealth, false, P::kStopping, &stop_checkpoint, R::kIgnore},
      {K::kPreemption, kNoHealth, false, P::kStopping, &stop_checkpoint, R::kIgnore},
      {K::kDaemonSignal, kNoHealth, false, P::kBackoff, &restart, R::kDecide},
      {K::kStopRequest, kNoHealth, false, P::kRunning, nullptr, R::kDecide},
      // A role process: a failed role overrides a restart; its crash restarts with the learner group.
      {K::kRoleFailed, kNoHealth, true, P::kStopping, &restart, R::kDecide},
      {K::kRoleFailed, kNoHealth, true, P::kStopping, &stop_checkpoint, R::kRecordOnly},
      {K::kRoleFailed, kNoHealth, true, P::kBackoff, &restart, R::kDecide},
      {K::kCrash, kNoHealth, true, P::kRunning, nullptr, R::kDecide},
      {K::kCrash, kNoHealth, true, P::kBackoff, &restart, R::kRecordOnly},
      {K::kHang, kNoHealth, true, P::kStopping, &restart, R::kRecordOnly},
      {K::kHang, kNoHealth, true, P::kStopping, &stop, R::kRecordOnly},
      // A rank's own crash or hang is seen while running only.
      {K::kCrash, kNoHealth, false, P::kRunning, nullptr, R::kDecide},
      {K::kHang, kNoHealth, false, P::kRunning, nullptr, R::kDecide},
  };
  for (const Row& r : rows) {
    const R got = RedecideFor(r.incoming, r.health, r.from_role, r.phase, r.pending);
    EXPECT_EQ(got, r.want) << IncidentKindName(r.incoming) << (r.from_role ? " (role)" : "") << " in phase "
                           << static_cast<int>(r.phase) << " with "
                           << (r.pending ? RecoveryActionName(r.pending->action) : "nothing") << " pending: got "
                           << RedecisionName(got) << ", want " << RedecisionName(r.want);
  }
}

}  // namespace
}  // namespace holdfast
