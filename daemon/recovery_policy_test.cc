#include "daemon/recovery_policy.h"

#include "daemon/recovery_policy_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace holdfast {
namespace {

using namespace recovery_test;  // NOLINT: the suite's axes

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
const Row kTable[] = {
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
  for (const Row& r : kTable) {
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
  EXPECT_EQ(std::size(kTable), expected);
  EXPECT_EQ(expected, 160u);
}

TEST(RecoveryPolicy, Table) {
  const std::vector<std::string> host = {kHost};
  const std::vector<std::string> none;
  for (const Row& r : kTable) {
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
  // Health checks of three hosts failed, asking for a restart: each is named by its own check.
  RecoveryInput in = MakeInput(K::kHealth, kHRestart, kFresh, kAll, kLeft);
  in.hosts = {"gpu-a17", "gpu-a18", "gpu-a19", "gpu-a18"};
  in.host_incidents = {{"gpu-a18", 1}, {"gpu-a19", 2}};
  RecoveryDecision d = DecideRecovery(in);
  EXPECT_EQ(d.action, kRequeue);
  EXPECT_EQ(d.exclude_hosts, (std::vector<std::string>{"gpu-a18", "gpu-a19"}));
  EXPECT_NE(d.reason.find("gpu-a18 implicated in 2 incidents"), std::string::npos) << d.reason;
  EXPECT_NE(d.reason.find("gpu-a19 implicated in 3 incidents"), std::string::npos) << d.reason;
  EXPECT_NE(d.reason.find("health check asks for restart on gpu-a17, gpu-a18, gpu-a19"), std::string::npos)
      << d.reason;
  // Hang culprits on several hosts name none of them (recovery_blame_test.cc): a restart.
  RecoveryInput hang = in;
  hang.kind = K::kHang;
  hang.health_action = kNoHealth;
  EXPECT_EQ(DecideRecovery(hang).action, kRestart);

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

}  // namespace
}  // namespace holdfast
