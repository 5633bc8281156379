// Health check results: what one check found, the evidence behind it, and the
// action it suggests. Every check in health/ (host, InfiniBand, GPU, NCCL)
// returns these plain values; the policy (health/policy.h) folds a list of them
// into one action, the report functions render them for a person (table), for
// lineage and `runctl` (JSON), and for Slurm (a one-line drain reason).
//
// A check that could not run reports kSkipped with the reason in `message`; it
// never reports kPass for something it did not look at.
//
// Thread-safety: plain values and pure functions; safe from any thread.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace holdfast::health {

enum class CheckStatus { kPass = 0, kWarn, kFail, kSkipped };

// Ordered by severity: the policy takes the largest. Values are stable (they go to lineage).
enum class Action {
  kNone = 0,         // nothing to do
  kRestart = 1,      // restart the ranks in place; the node is fine
  kExcludeNode = 2,  // requeue the job without this node; it may recover on its own
  kDrainNode = 3,    // take the node out of service until a person has looked at it
};

const char* CheckStatusName(CheckStatus status);  // "pass", "warn", "fail", "skipped"
const char* ActionName(Action action);            // "none", "restart", "exclude_node", "drain_node"
// Parses ActionName's spelling; `where` prefixes the error ("job.toml:7: ...").
Result<Action> ParseAction(const std::string& text, const std::string& where);

// Why a check decided what it did, in units a person reads.
struct Evidence {
  std::string measured;   // "7 GPUs", "3 link_downed in 10.0 s", "2.1 GB free"
  std::string threshold;  // "== 8", "> 0 per poll fails", ">= 10 GB"
  std::string source;     // where the value came from: a file, an NVML call, a measurement
};

struct CheckResult {
  std::string name;     // stable id "class.check": "ib.port_state", "host.checkpoint_disk"
  std::string subject;  // what it is about: "mlx5_0/1", "gpu 3", "/ckpt"; may be empty
  CheckStatus status = CheckStatus::kSkipped;
  std::string message;  // one line a person can act on
  Evidence evidence;
  Action action = Action::kNone;  // suggested by a failing check; kNone otherwise
  std::string runbook;            // "runbooks/health-ib.md"

  // The class prefix of `name` ("ib" for "ib.port_state").
  std::string Class() const;
};

CheckResult Pass(std::string name, std::string subject, std::string message, Evidence evidence);
// A warning's action is the policy's on_warn; checks do not choose it.
CheckResult Warn(std::string name, std::string subject, std::string message, Evidence evidence);
CheckResult Fail(std::string name, std::string subject, std::string message, Evidence evidence, Action action);
CheckResult Skipped(std::string name, std::string subject, std::string reason);

// The worst status in `results` (fail > warn > pass > skipped); kSkipped when empty.
CheckStatus WorstStatus(const std::vector<CheckResult>& results);

// A fixed-width table for a terminal: status, check, subject, message, evidence.
std::string FormatTable(const std::vector<CheckResult>& results);

// One line of at most `max_chars` printable ASCII characters naming the failed
// checks, worst first, e.g. "holdfast: ib.port_state mlx5_0/1 DOWN; gpu.count 7/8"
// — fits Slurm's node Reason field. Empty when nothing failed.
std::string DrainReason(const std::vector<CheckResult>& results, size_t max_chars = 100);

// Numbers a person can read: "12.3", "0.5", "1234".
std::string FormatNumber(double value);

}  // namespace holdfast::health
