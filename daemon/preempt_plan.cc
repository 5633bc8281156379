#include "daemon/preempt_plan.h"

#include <cstdio>

namespace holdfast {
namespace {

// "12.3 s"
std::string Secs(double s) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", s);
  return text;
}

}  // namespace

PreemptPlan PlanPreemptStop(const PreemptInputs& in) {
  PreemptPlan p;
  if (in.lead_time_s < 0) {
    p.reason = "the scheduler gave no lead time (the job has no time limit to count back from)";
    return p;
  }
  if (in.save_s < 0) {
    p.reason = "no checkpoint save measured in this attempt yet, so how long the stop's save takes is unknown";
    return p;
  }
  if (in.step_s <= 0) {
    p.reason = "no step time measured in this generation yet";
    return p;
  }
  p.step_allowance_s = 2 * in.step_s;
  p.save_before_limit_s = in.save_s + p.step_allowance_s + in.margin_s;
  const std::string parts = "measured save " + Secs(in.save_s) + " + two steps " + Secs(p.step_allowance_s) +
                            " + margin " + Secs(in.margin_s);
  const double gain = in.lead_time_s - p.save_before_limit_s;
  if (gain < kMinDeferralS) {
    p.reason = "the lead time (" + Secs(in.lead_time_s) + ") leaves nothing to train: the save needs " +
               Secs(p.save_before_limit_s) + " before the limit (" + parts + ")";
    if (in.lead_time_s < in.save_s) {
      p.reason += "; the final checkpoint may not commit: give the job more warning (sbatch --signal=B:USR1@N, "
                  "KillWait) or save less state";
    }
    return p;
  }
  p.defer = true;
  p.save_in_s = gain;
  p.reason = "train on for " + Secs(gain) + ", then checkpoint and stop " + Secs(p.save_before_limit_s) +
             " before the time limit (lead " + Secs(in.lead_time_s) + "; " + parts + ")";
  return p;
}

}  // namespace holdfast
