// The parts of the Slurm scheduler that need no cluster: host lists (through
// libslurm's own parser), the requeue request the daemon writes into a job's
// comment and the slurmctld epilog reads back, the --signal line a
// resubmission carries over, the resubmitted environment, Slurm's errors as
// ours, and Discover() refusing to run outside a job. Everything that talks to
// slurmctld is tested on a real cluster (tests/slurm/, `ctest -L slurm`).
#include "scheduler/slurm_scheduler.h"

#include <signal.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <slurm/slurm_errno.h>

namespace holdfast {
namespace {

TEST(SlurmHostlist, ExpandsRangesAndCompressesBack) {
  auto hosts = ExpandSlurmHostlist("n[1-3],gpu7");
  ASSERT_TRUE(hosts.ok()) << hosts.status().ToString();
  EXPECT_EQ(*hosts, (std::vector<std::string>{"n1", "n2", "n3", "gpu7"}));
  EXPECT_EQ(CompressSlurmHostlist({"n1", "n3"}), "n[1,3]");
  EXPECT_EQ(CompressSlurmHostlist({}), "");
}

TEST(RequeueRequest, RoundTripsThroughAJobComment) {
  RequeueRequest r;
  r.job_id = 42;
  r.uid = 1000;
  r.restart = 3;
  r.exclude = {"n2", "n5"};
  r.run_id = "r-20261130-ab12";
  const std::string text = FormatRequeueRequest(r);
  EXPECT_EQ(text, "holdfast-requeue job=42 uid=1000 restart=3 run=r-20261130-ab12 exclude=n2,n5");
  auto back = ReadRequeueRequest("my own note; " + text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_TRUE(back->has_value());
  EXPECT_EQ((*back)->job_id, 42u);
  EXPECT_EQ((*back)->uid, 1000u);
  EXPECT_EQ((*back)->restart, 3);
  EXPECT_EQ((*back)->exclude, r.exclude);
  EXPECT_EQ((*back)->run_id, r.run_id);
  EXPECT_EQ(StripRequeueRequest("my own note; " + text), "my own note");
  EXPECT_EQ(StripRequeueRequest(text), "");
}

TEST(RequeueRequest, AUserCommentIsNotARequest) {
  for (const char* comment : {"", "lr sweep 3", "holdfast-requeue job=1 uid=0 restart=0; later note",
                              "holdfast-requeuex job=1", "see holdfast-requeue job=1 uid=0 restart=0"}) {
    auto r = ReadRequeueRequest(comment);
    ASSERT_TRUE(r.ok()) << comment << ": " << r.status().ToString();
    EXPECT_FALSE(r->has_value()) << comment;
    EXPECT_EQ(StripRequeueRequest(comment), comment);
  }
}

// Whatever the owner writes after the tag is read strictly: anything but the
// daemon's own form is refused with what is wrong, never half-read.
TEST(RequeueRequest, AMalformedOrOversizedRequestIsRefusedSayingWhy) {
  const std::string ok = "holdfast-requeue job=7 uid=1000 restart=0";
  const std::string many_hosts = [] {
    std::string h;
    for (int i = 0; i < 65; ++i) h += (h.empty() ? "" : ",") + std::string("n") + std::to_string(i);
    return h;
  }();
  const std::pair<std::string, std::string> cases[] = {
      {"holdfast-requeue", "no job="},
      {"holdfast-requeue exclude=n2 run=R", "no job="},  // an older daemon's form: unbound
      {"holdfast-requeue job=7 restart=0", "no uid="},
      {"holdfast-requeue job=7 uid=1000", "no restart="},
      {ok + " job=8", "job= given twice"},
      {ok + " priority=1", "'priority=1' is not one of"},
      {ok + " release", "'release' is not one of"},
      {"holdfast-requeue job=-7 uid=1000 restart=0", "is not a job id"},
      {"holdfast-requeue job=0 uid=1000 restart=0", "is not a job id"},
      {"holdfast-requeue job=99999999999 uid=1000 restart=0", "is not a job id"},
      {"holdfast-requeue job=7 uid=root restart=0", "is not a uid"},
      {"holdfast-requeue job=7 uid=1000 restart=1x", "is not a restart count"},
      {ok + " exclude=n2,,n3", "not a node name"},
      {ok + " exclude=", "names no node"},
      {ok + " exclude=n2,$(reboot)", "not a node name"},
      {ok + " run=a;b", ""},  // ';' ends the request: "b" is a user's part, no request
      {ok + " run=r/../x", "is not a run id"},
      {ok + " exclude=" + many_hosts, "more than 64"},
      {ok + " run=" + std::string(1100, 'r'), "more than 1024"},
  };
  for (const auto& [comment, why] : cases) {
    auto r = ReadRequeueRequest("note; " + comment);
    if (why.empty()) {
      ASSERT_TRUE(r.ok()) << comment;
      EXPECT_FALSE(r->has_value()) << comment;
      continue;
    }
    ASSERT_FALSE(r.ok()) << comment << " was read as a request";
    EXPECT_NE(r.status().message().find(why), std::string::npos) << comment << ": " << r.status().message();
    EXPECT_NE(r.status().message().find("malformed requeue request"), std::string::npos) << r.status().message();
    EXPECT_LT(r.status().message().size(), 300u) << "an oversized request is not echoed back whole";
    // The daemon replaces whatever tagged part is there with its own.
    EXPECT_EQ(StripRequeueRequest("note; " + comment), "note") << comment;
  }
}

// The job's own warning (its script's --signal=B:USR1@120) comes within 120 s
// of the limit, up to 60 s early; a SIGUSR1 before that is a stop now.
TEST(IsJobsWarning, OnlyWithinTheScriptsSignalTimeAndSlurmsMinuteEarly) {
  const auto w = ScriptWarnSignal("#!/bin/bash\n#SBATCH --signal=B:USR1@120\n");
  EXPECT_TRUE(IsJobsWarning(120, w));
  EXPECT_TRUE(IsJobsWarning(175, w)) << "Slurm may send it up to 60 s early";
  EXPECT_TRUE(IsJobsWarning(0, w));
  EXPECT_FALSE(IsJobsWarning(181, w)) << "scancel --signal=USR1 an hour before the limit";
  EXPECT_FALSE(IsJobsWarning(-1, w)) << "no time limit";
  EXPECT_FALSE(IsJobsWarning(100, std::nullopt)) << "the script sets no warning";
  EXPECT_FALSE(IsJobsWarning(100, ScriptWarnSignal("#SBATCH --signal=B:USR2@300\n"))) << "another signal";
}

TEST(ScriptWarnSignal, ReadsTheSbatchSignalLine) {
  auto w = ScriptWarnSignal("#!/bin/bash\n#SBATCH -N 2\n#SBATCH --signal=B:USR1@90\nsrun x\n");
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->sig, SIGUSR1);
  EXPECT_EQ(w->time_s, 90);
  EXPECT_TRUE(w->batch_only);
  auto plain = ScriptWarnSignal("#SBATCH --signal=TERM\n");
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ(plain->sig, SIGTERM);
  EXPECT_EQ(plain->time_s, 60);  // Slurm's default
  EXPECT_FALSE(plain->batch_only);
  EXPECT_FALSE(ScriptWarnSignal("#!/bin/bash\nsrun x --signal=USR1\n").has_value());
  EXPECT_FALSE(ScriptWarnSignal("#SBATCH --signal=NOPE@10\n").has_value());
  EXPECT_EQ(ParseSignal("10"), 10);
  EXPECT_EQ(ParseSignal("SIGUSR2"), SIGUSR2);
  EXPECT_EQ(ParseSignal(""), 0);
}

TEST(ResubmitEnvironment, DropsWhatSlurmSetsForThisJobButKeepsTheConfig) {
  const char* env[] = {"PATH=/usr/bin", "SLURM_JOB_ID=42", "SLURM_CONF=/tmp/s/slurm.conf", "SLURMD_NODENAME=n1",
                       "HOME=/root", "SLURM_RESTART_COUNT=1", nullptr};
  EXPECT_EQ(ResubmitEnvironment(const_cast<char**>(env)),
            (std::vector<std::string>{"PATH=/usr/bin", "SLURM_CONF=/tmp/s/slurm.conf", "HOME=/root"}));
}

TEST(SlurmError, CarriesSlurmsMessageAndNumber) {
  Status s = SlurmError("requeue job 42", ESLURM_DISABLED);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("requeue job 42: "), std::string::npos);
  EXPECT_NE(s.message().find("(slurm error " + std::to_string(ESLURM_DISABLED) + ")"), std::string::npos);
  EXPECT_EQ(SlurmError("load job 7", ESLURM_INVALID_JOB_ID).code(), StatusCode::kNotFound);
  Status down = SlurmError("requeue job 42", SLURM_COMMUNICATIONS_CONNECTION_ERROR);
  EXPECT_EQ(down.code(), StatusCode::kUnavailable);
  EXPECT_NE(down.message().find("scontrol ping"), std::string::npos);
  EXPECT_TRUE(IsSlurmCommunicationError(SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR));
  EXPECT_FALSE(IsSlurmCommunicationError(ESLURM_INVALID_JOB_ID));
}

TEST(SlurmScheduler, RefusesToRunOutsideAJob) {
  unsetenv("SLURM_JOB_ID");
  SlurmScheduler s(SlurmSchedulerOptions{"/tmp", "", RequeuePath::kAuto, 1});
  auto a = s.Discover();
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("srun"), std::string::npos);
}

TEST(SlurmScheduler, RefusesSeveralDaemonsPerNode) {
  setenv("SLURM_JOB_ID", "42", 1);
  setenv("SLURM_STEP_NUM_TASKS", "4", 1);
  setenv("SLURM_STEP_NUM_NODES", "2", 1);
  SlurmScheduler s(SlurmSchedulerOptions{"/tmp", "", RequeuePath::kAuto, 1});
  auto a = s.Discover();
  unsetenv("SLURM_JOB_ID");
  unsetenv("SLURM_STEP_NUM_TASKS");
  unsetenv("SLURM_STEP_NUM_NODES");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("--ntasks-per-node=1"), std::string::npos);
}

TEST(RequeuePath, ParsesTheThreeChoices) {
  EXPECT_EQ(*ParseRequeuePath("epilog"), RequeuePath::kEpilog);
  EXPECT_EQ(*ParseRequeuePath("resubmit"), RequeuePath::kResubmit);
  EXPECT_EQ(*ParseRequeuePath("auto"), RequeuePath::kAuto);
  auto bad = ParseRequeuePath("scontrol");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("auto, epilog, resubmit"), std::string::npos);
}

TEST(SavedSubmission, RoundTripsAndRefusesGarbage) {
  const std::string dir = ::testing::TempDir() + "/saved-submission";
  std::filesystem::create_directories(dir);
  SlurmJob job;
  job.name = "gpt-7b";
  job.partition = "main";
  job.num_nodes = 2;
  job.ntasks_per_node = 1;
  job.time_limit_min = 90;
  job.exc_nodes = "n5";
  job.requeue_allowed = true;
  SlurmSubmission sub = SubmissionFromJob(job, "#!/bin/bash\n#SBATCH --signal=B:USR1@120\nsrun holdfastd\n",
                                          {"PATH=/usr/bin", "RUN_DIR=/shared/r1"});
  EXPECT_EQ(sub.warn_signal, SIGUSR1);
  EXPECT_EQ(sub.warn_time_s, 120);
  const std::string path = SavedSubmissionPath(dir);
  ASSERT_TRUE(SaveSubmission(path, sub).ok());
  auto back = LoadSubmission(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->script, sub.script);
  EXPECT_EQ(back->name, "gpt-7b");
  EXPECT_EQ(back->num_nodes, 2u);
  EXPECT_EQ(back->ntasks_per_node, 1);
  EXPECT_EQ(back->time_limit_min, 90u);
  EXPECT_EQ(back->exc_nodes, "n5");
  EXPECT_EQ(back->environment, sub.environment);
  EXPECT_TRUE(back->warn_batch_only);
  std::ofstream(path) << "{\"name\": 3}";
  auto bad = LoadSubmission(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kCorruption);
  EXPECT_NE(bad.status().message().find("sbatch the run's script again"), std::string::npos);
  EXPECT_EQ(LoadSubmission(dir + "/none.json").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace holdfast
