// PreemptPlan: when the stop's checkpoint should start after a scheduler's
// warning signal. Slurm's `--signal=B:USR1@N` warns N s (and on this test
// cluster up to a minute more) before the job's time limit; stopping at once
// gives the rest of the allocation away. The plan keeps the ranks training
// until the newest step can just be saved before the limit:
//
//   save_in_s = lead_time_s - (save_s + step_allowance_s + margin_s)
//
//   lead_time_s       seconds left before the limit when the warning came
//                     (SignalMeaning::lead_time_s)
//   save_s            this attempt's longest measured checkpoint save
//                     (RunController::measured_save_s)
//   step_allowance_s  two p99 step times: the step in flight when the ranks
//                     are told, and the step whose all-reduce carries the
//                     stop to every rank (docs/job-contract.md), after which
//                     the save starts
//   margin_s          [supervise] preempt_margin_s
//
// Unknown lead, save or step time, or less than kMinDeferralS to gain: the
// ranks stop at once, as without a plan. Pure: no clock, no I/O.
#pragma once

#include <string>

namespace holdfast {

struct PreemptInputs {
  double lead_time_s = -1;  // < 0 unknown
  double save_s = -1;       // < 0 no save measured yet in this attempt
  double step_s = 0;        // p99 step time; <= 0 none measured yet
  double margin_s = 0;
};

struct PreemptPlan {
  bool defer = false;              // keep training; stop after save_in_s
  double save_in_s = 0;            // from the warning to the stop (0: at once)
  double step_allowance_s = 0;     // 2 x step_s
  double save_before_limit_s = 0;  // save_s + step_allowance_s + margin_s (when known)
  // Why, in words for lineage: the plan ("train on for 96.0 s, then save:
  // ...") or why the ranks stop at once.
  std::string reason;
};

// Less gained than this is not worth the risk: stop at once.
inline constexpr double kMinDeferralS = 1.0;

PreemptPlan PlanPreemptStop(const PreemptInputs& in);

}  // namespace holdfast
