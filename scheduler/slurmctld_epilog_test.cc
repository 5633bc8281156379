// holdfast-slurmctld-epilog's decisions (scheduler/slurmctld_epilog.h) as a
// table: which requests in a job's comment it acts on (only one bound to the
// job, its owner and the attempt that asked), what it changes when the job is
// pending (never someone else's hold), and how often it asks slurmctld. The
// program itself runs under a real slurmctld in the Slurm suite (tests/slurm/).
#include "scheduler/slurmctld_epilog.h"

#include <gtest/gtest.h>

namespace holdfast {
namespace {

constexpr uint32_t kJob = 42, kOwner = 1000;

// Job 42 of uid 1000 at its epilog after one requeue: restart 1, nodes n1, n2, still completing.
SlurmJob RequeuedJob(const std::string& comment) {
  SlurmJob j;
  j.job_id = kJob;
  j.user_id = kOwner;
  j.restart_count = 1;
  j.state = "PENDING";
  j.completing = true;
  j.nodes = {"n1", "n2"};
  j.priority = 4294901759u;
  j.reason = "None";
  j.comment = comment;
  return j;
}

std::string Request(uint32_t job, uint32_t uid, int restart, const std::string& exclude = "n2") {
  RequeueRequest r;
  r.job_id = job;
  r.uid = uid;
  r.restart = restart;
  r.run_id = "r-1";
  if (!exclude.empty()) r.exclude = {exclude};
  return "lr sweep; " + FormatRequeueRequest(r);
}

TEST(PlanEpilog, ActsOnARequestBoundToTheJobItsOwnerAndTheAttempt) {
  const EpilogPlan plan = PlanEpilog(RequeuedJob(Request(kJob, kOwner, 0)));
  EXPECT_TRUE(plan.watch);
  ASSERT_TRUE(plan.request.has_value());
  EXPECT_EQ(plan.request->exclude, std::vector<std::string>{"n2"});
  EXPECT_EQ(plan.log, "holdfastd asked for a requeue excluding n2; watching it");
}

// What the job's owner (or anyone who can write its comment) might put there:
// each is refused with the reason in the log, no watcher starts, and so no
// RPC is sent and nothing about the job changes.
TEST(PlanEpilog, RefusesEveryRequestThatIsNotThisJobsOwnAndChangesNothing) {
  SlurmJob stale = RequeuedJob(Request(kJob, kOwner, 0));
  stale.restart_count = 3;
  SlurmJob never_requeued = RequeuedJob(Request(kJob, kOwner, 1));
  // Requeued once (restart 1), run again before a watcher finished, now ending on its own.
  SlurmJob ended = RequeuedJob(Request(kJob, kOwner, 0));
  ended.state = "COMPLETED";
  ended.end_time = 1764650000;
  const std::pair<SlurmJob, std::string> cases[] = {
      {ended, "requeue request refused: the job ended (COMPLETED) without being requeued"},
      {RequeuedJob(Request(41, kOwner, 0)), "it names job 41, not this job 42"},
      {RequeuedJob(Request(kJob, 0, 0)), "it names uid 0, and job 42 belongs to uid 1000"},
      {never_requeued, "written in restart 1 and the job was not requeued since"},
      {stale, "the job is at restart 3 (a request of an earlier attempt)"},
      {RequeuedJob("holdfast-requeue exclude=n2 run=r-1"), "malformed requeue request: no job="},
      {RequeuedJob("holdfast-requeue job=42 uid=1000 restart=0 priority=4294967295"), "'priority=4294967295' is not one of"},
      {RequeuedJob("holdfast-requeue job=42 uid=1000 restart=0 exclude=" + std::string(2000, 'n')), "more than 1024"},
  };
  // slurmctld shrinks a requeued job's node list as its nodes finish (seen in the Slurm suite:
  // n[1-2] read as n1): an exclusion is still what the owner could set on their pending job.
  SlurmJob shrunk = RequeuedJob(Request(kJob, kOwner, 0, "n2"));
  shrunk.nodes = {"n1"};
  EXPECT_TRUE(PlanEpilog(shrunk).request.has_value()) << PlanEpilog(shrunk).log;
  for (const auto& [job, why] : cases) {
    const EpilogPlan plan = PlanEpilog(job);
    EXPECT_FALSE(plan.watch) << job.comment;
    EXPECT_FALSE(plan.request.has_value()) << job.comment;
    EXPECT_NE(plan.log.find(why), std::string::npos) << job.comment << "\n  logged: " << plan.log;
    EXPECT_NE(plan.log.find("the comment is left as it is"), std::string::npos) << plan.log;
  }
}

TEST(PlanEpilog, LeavesAJobWithoutARequestAloneSilently) {
  for (const char* comment : {"", "lr sweep 3"}) {
    SlurmJob done = RequeuedJob(comment);
    done.restart_count = 0;
    const EpilogPlan plan = PlanEpilog(done);
    EXPECT_FALSE(plan.watch);
    EXPECT_EQ(plan.log, "");
  }
}

TEST(PlanEpilog, ReleasesAJobSlurmHeldAfterAFailedPrologWhateverItsComment) {
  for (const std::string& comment : {std::string(""), Request(41, kOwner, 0)}) {
    SlurmJob held = RequeuedJob(comment);
    held.priority = 0;
    held.reason = kPrologFailedHoldReason;
    const EpilogPlan plan = PlanEpilog(held);
    EXPECT_TRUE(plan.watch);
    EXPECT_TRUE(plan.prolog_hold);
    EXPECT_FALSE(plan.request.has_value()) << "another job's request is still not acted on";
    EXPECT_NE(plan.log.find("a Prolog failed"), std::string::npos) << plan.log;
  }
}

SlurmJob PendingNow(const EpilogPlan&, SlurmJob j) {
  j.completing = false;
  j.reason = "BeginTime";
  return j;
}

// The first look takes the request out of the comment, whatever comes next:
// a finished job's comment can no longer be changed.
TEST(DecideWatchStep, WaitsWhileTheJobIsCompletingHavingTakenTheRequestOutOfTheComment) {
  SlurmJob job = RequeuedJob(Request(kJob, kOwner, 0));
  const EpilogPlan plan = PlanEpilog(job);
  WatchStep step = DecideWatchStep(job, plan);
  EXPECT_EQ(step.kind, WatchStep::kWait);
  ASSERT_TRUE(step.update.has_value());
  EXPECT_EQ(step.update->comment, std::optional<std::string>("lr sweep"));
  EXPECT_FALSE(step.update->exc_nodes.has_value()) << "excluding waits for the job to be pending";
  EXPECT_FALSE(step.update->begin_now);
  EXPECT_FALSE(step.update->release);

  job.comment = "lr sweep";  // what slurmctld reports after that update
  step = DecideWatchStep(job, plan);
  EXPECT_EQ(step.kind, WatchStep::kWait);
  EXPECT_FALSE(step.update.has_value()) << "nothing more to change: no RPC but the look";
  SlurmJob flagged = job;
  flagged.state = "COMPLETED";
  flagged.completing = false;
  flagged.requeue_pending = true;
  EXPECT_EQ(DecideWatchStep(flagged, plan).kind, WatchStep::kWait);

  job.completing = false;  // pending now: the exclusion, BeginTime; the comment is already clean
  step = DecideWatchStep(job, plan);
  ASSERT_EQ(step.kind, WatchStep::kFinish);
  ASSERT_TRUE(step.update.has_value());
  EXPECT_EQ(step.update->exc_nodes, std::optional<std::string>("n2"));
  EXPECT_FALSE(step.update->comment.has_value());
  EXPECT_TRUE(step.update->begin_now);
}

TEST(DecideWatchStep, ExcludesRemovesTheRequestAndStartsThePendingJobNow) {
  const SlurmJob at_end = RequeuedJob(Request(kJob, kOwner, 0));
  const EpilogPlan plan = PlanEpilog(at_end);
  SlurmJob job = PendingNow(plan, at_end);
  job.exc_nodes = "n5";
  const WatchStep step = DecideWatchStep(job, plan);
  ASSERT_EQ(step.kind, WatchStep::kFinish);
  ASSERT_TRUE(step.update.has_value());
  ASSERT_TRUE(step.update->exc_nodes.has_value());
  auto excluded = ExpandSlurmHostlist(*step.update->exc_nodes);
  ASSERT_TRUE(excluded.ok());
  EXPECT_EQ(*excluded, (std::vector<std::string>{"n5", "n2"})) << "the job's own exclusions are kept";
  EXPECT_EQ(step.update->comment, std::optional<std::string>("lr sweep"));
  EXPECT_TRUE(step.update->begin_now);
  EXPECT_FALSE(step.update->release) << "the job is not held: nothing to release";
}

// The bug: an admin's `scontrol hold` (on the running job, which keeps
// it through the requeue) was undone by the epilog's release.
TEST(DecideWatchStep, NeverReleasesAHoldItDidNotComeFor) {
  const SlurmJob at_end = RequeuedJob(Request(kJob, kOwner, 0));
  const EpilogPlan plan = PlanEpilog(at_end);
  for (const char* hold : {"JobHeldAdmin", "JobHeldUser", "job_requeued_in_held_state"}) {
    SlurmJob job = PendingNow(plan, at_end);
    job.priority = 0;
    job.reason = hold;
    const WatchStep step = DecideWatchStep(job, plan);
    ASSERT_EQ(step.kind, WatchStep::kFinish) << hold;
    ASSERT_TRUE(step.update.has_value()) << hold;
    EXPECT_FALSE(step.update->release) << hold;
    EXPECT_FALSE(step.update->begin_now) << hold << ": the job waits on its hold, not on BeginTime";
    EXPECT_EQ(step.update->exc_nodes, std::optional<std::string>("n2")) << "excluding is the owner's to ask";
    EXPECT_EQ(step.update->comment, std::optional<std::string>("lr sweep"));
    EXPECT_EQ(step.log, "excluded n2, held (" + std::string(hold) + "): left held");
  }
}

TEST(DecideWatchStep, ReleasesSlurmsPrologHoldAlsoOnceSlurmCallsItJobHeldAdmin) {
  SlurmJob at_end = RequeuedJob("lr sweep");
  at_end.priority = 0;
  at_end.reason = kPrologFailedHoldReason;
  const EpilogPlan plan = PlanEpilog(at_end);
  SlurmJob job = at_end;
  job.completing = false;
  WatchStep step = DecideWatchStep(job, plan);
  ASSERT_EQ(step.kind, WatchStep::kFinish);
  ASSERT_TRUE(step.update.has_value());
  EXPECT_TRUE(step.update->release);
  EXPECT_TRUE(step.update->begin_now);
  EXPECT_FALSE(step.update->comment.has_value()) << "no request: the comment is not the epilog's to rewrite";
  EXPECT_FALSE(step.update->exc_nodes.has_value());

  // Slurm 22.05 turns the reason into JobHeldAdmin 0.25 s later (seen on the loopback
  // cluster): still the Prolog's hold, released.
  job.reason = "JobHeldAdmin";
  step = DecideWatchStep(job, plan);
  ASSERT_EQ(step.kind, WatchStep::kFinish);
  ASSERT_TRUE(step.update.has_value());
  EXPECT_TRUE(step.update->release);
  EXPECT_EQ(step.log, "released, begins now");

  // The owner's own hold is never the Prolog's.
  job.reason = "JobHeldUser";
  step = DecideWatchStep(job, plan);
  EXPECT_FALSE(step.update.has_value()) << "nothing to change: no RPC";
  EXPECT_EQ(step.log, "held (JobHeldUser): left held");
}

TEST(DecideWatchStep, AJobRunningAgainBeforeItWasSeenPendingLosesItsRequest) {
  const SlurmJob at_end = RequeuedJob(Request(kJob, kOwner, 0));
  const EpilogPlan plan = PlanEpilog(at_end);
  SlurmJob job = at_end;
  job.state = "RUNNING";
  job.completing = false;
  const WatchStep step = DecideWatchStep(job, plan);
  ASSERT_EQ(step.kind, WatchStep::kOver);
  ASSERT_TRUE(step.update.has_value());
  EXPECT_EQ(step.update->comment, std::optional<std::string>("lr sweep"));
  EXPECT_FALSE(step.update->exc_nodes.has_value());
  EXPECT_EQ(step.log, "started again before it was seen pending; n2 not excluded");
  job.comment = "lr sweep";
  EXPECT_FALSE(DecideWatchStep(job, plan).update.has_value()) << "taken out at an earlier look already";
}

TEST(PollSchedule, BacksOffFromAQuarterSecondToThirtyAndStopsAtTheDeadline) {
  PollSchedule doubling(0.25, 2, 30, 120);
  std::vector<double> waits;
  while (auto w = doubling.Next()) waits.push_back(*w);
  EXPECT_EQ(waits, (std::vector<double>{0.25, 0.5, 1, 2, 4, 8, 16, 30, 30, 28.25}));
  EXPECT_DOUBLE_EQ(doubling.elapsed_s(), 120);

  PollSchedule epilogs(0.25, 1.5, 30, 120);  // the watcher's
  std::vector<double> looks;
  double waited = 0;
  while (auto w = epilogs.Next()) {
    // A job pending just after a look is seen at the next: never more than half the wait so far
    // (plus the first quarter second) later.
    if (!looks.empty()) {
      EXPECT_LE(*w, 0.5 * looks.back() + 0.25 + 1e-9) << "after " << looks.back() << " s";
    }
    waited += *w;
    looks.push_back(waited);
  }
  EXPECT_EQ(looks.size(), 14u);
  EXPECT_DOUBLE_EQ(looks.back(), 120);
  EXPECT_LT(static_cast<int>(looks.size()) + 1, kMaxWatcherRpcs) << "every look and the update fit the budget";
}

}  // namespace
}  // namespace holdfast
