#include "scheduler/slurmctld_epilog.h"

#include <algorithm>
#include <vector>

namespace holdfast {
namespace {

std::string Job(uint32_t id) { return "job " + std::to_string(id); }

std::string ListOf(const std::vector<std::string>& hosts) {
  return hosts.empty() ? std::string("no node") : CompressSlurmHostlist(hosts);
}

bool HeldAfterPrologFailure(const SlurmJob& job) {
  return job.priority == 0 && job.reason == kPrologFailedHoldReason;
}

}  // namespace

Status CheckRequestBinding(const RequeueRequest& r, const SlurmJob& job) {
  if (r.job_id != job.job_id) {
    return FailedPreconditionError("it names " + Job(r.job_id) + ", not this " + Job(job.job_id));
  }
  if (r.uid != job.user_id) {
    return FailedPreconditionError("it names uid " + std::to_string(r.uid) + ", and " + Job(job.job_id) +
                                   " belongs to uid " + std::to_string(job.user_id));
  }
  if (job.restart_count == r.restart) {
    return FailedPreconditionError("it was written in restart " + std::to_string(r.restart) +
                                   " and the job was not requeued since");
  }
  if (job.restart_count != r.restart + 1) {
    return FailedPreconditionError("it was written in restart " + std::to_string(r.restart) + "; the job is at restart " +
                                   std::to_string(job.restart_count) + " (a request of an earlier attempt)");
  }
  // The exclusion is not checked against the job's nodes: slurmctld shrinks a requeued job's node
  // list as its nodes finish (the Slurm suite read n[1-2] as n1 at the job's end), and an owner
  // may set any exclusion on their own pending job anyway.
  return Status::Ok();
}

EpilogPlan PlanEpilog(const SlurmJob& job) {
  EpilogPlan plan;
  plan.prolog_hold = HeldAfterPrologFailure(job);
  std::string refused;
  Result<std::optional<RequeueRequest>> read = ReadRequeueRequest(job.comment);
  if (!read.ok()) {
    refused = read.status().message();
  } else if (read->has_value()) {
    Status bound = CheckRequestBinding(**read, job);
    if (!bound.ok()) {
      refused = "requeue request refused: " + bound.message();
    } else if (!job.being_requeued()) {
      // The request of the attempt before, which Slurm ran again before a watcher could finish
      // it (and which now ended): nothing left to do.
      refused = "requeue request refused: the job ended (" + job.state + ") without being requeued";
    } else {
      plan.request = **read;
    }
  }
  const std::string unchanged = refused.empty() ? "" : refused + "; the comment is left as it is";
  if (plan.request) {
    plan.watch = true;
    plan.log = "holdfastd asked for a requeue" +
               (plan.request->exclude.empty() ? "" : " excluding " + ListOf(plan.request->exclude)) + "; watching it";
  } else if (plan.prolog_hold) {
    plan.watch = true;
    plan.log = (unchanged.empty() ? "" : unchanged + "; ") +
               "a Prolog failed (its node is drained); releasing the job once pending";
  } else {
    plan.log = unchanged;  // empty: a job that ended, or a requeue nobody asked holdfast to finish
  }
  return plan;
}

WatchStep DecideWatchStep(const SlurmJob& job, const EpilogPlan& plan) {
  WatchStep step;
  const std::optional<RequeueRequest>& req = plan.request;
  // The request is the watcher's now: out of the comment at the first look, so that none is
  // left behind however the requeue ends (the job may run and end between two looks while a
  // node that stopped answering keeps it COMPLETING, and a finished job's comment cannot be
  // changed). Later looks find it gone.
  std::optional<std::string> stripped;
  if (req && StripRequeueRequest(job.comment) != job.comment) stripped = StripRequeueRequest(job.comment);
  if (job.pending() && !job.completing) {
    step.kind = WatchStep::kFinish;
    SlurmJobUpdate u;
    std::vector<std::string> said;
    bool change = false;
    if (req && !req->exclude.empty()) {
      std::vector<std::string> excluded;
      if (!job.exc_nodes.empty()) {
        auto prior = ExpandSlurmHostlist(job.exc_nodes);
        if (prior.ok()) excluded = *prior;
      }
      for (const std::string& h : req->exclude) {
        if (std::find(excluded.begin(), excluded.end(), h) == excluded.end()) excluded.push_back(h);
      }
      u.exc_nodes = CompressSlurmHostlist(excluded);
      said.push_back("excluded " + *u.exc_nodes);
      change = true;
    }
    if (stripped) {
      u.comment = stripped;
      change = true;
    }
    // A job Slurm held after a failed Prolog shows that reason at first and JobHeldAdmin
    // once its scheduler has looked at it (0.25 s later on the loopback cluster): the plan,
    // made at the job's end, says whose hold it is.
    if (job.priority == 0 && !HeldAfterPrologFailure(job) && !(plan.prolog_hold && job.reason == "JobHeldAdmin")) {
      // Someone else's hold (an admin's, the owner's own): theirs to release, and the job
      // waits on it, so BeginTime is left alone too.
      said.push_back("held (" + job.reason + "): left held");
    } else {
      u.release = job.priority == 0;
      u.begin_now = true;
      if (u.release) said.push_back("released");
      said.push_back("begins now");
      change = true;
    }
    if (change) step.update = u;
    for (const std::string& s : said) step.log += (step.log.empty() ? "" : ", ") + s;
    return step;
  }
  if (!job.pending() && !job.completing && !job.requeue_pending) {
    // Running again (or over) without having been seen pending: Slurm started it as soon as
    // its nodes were released (a node that stopped answering, once marked down), before the
    // watcher could act. The requeue it was started for is over: take the request out of the
    // comment so that nothing acts on it later.
    step.kind = WatchStep::kOver;
    if (stripped) {
      SlurmJobUpdate u;
      u.comment = stripped;
      step.update = u;
    }
    step.log = (job.running() ? std::string("started again") : "ended (state " + job.state + ")") +
               " before it was seen pending" +
               (req && !req->exclude.empty() ? "; " + ListOf(req->exclude) + " not excluded" : "");
    return step;
  }
  step.kind = WatchStep::kWait;
  if (stripped) {
    SlurmJobUpdate u;
    u.comment = stripped;
    step.update = u;
    step.log = "request taken out of the comment";
  }
  return step;
}

std::optional<double> PollSchedule::Next() {
  if (elapsed_s_ >= deadline_s_) return std::nullopt;
  const double wait = std::min(next_s_, deadline_s_ - elapsed_s_);
  elapsed_s_ += wait;
  next_s_ = std::min(max_s_, next_s_ * growth_);
  return wait;
}

}  // namespace holdfast
