// The Slurm hooks an admin installs, under a real slurmctld and slurmd (the
// Slurm suite's cluster, tests/slurm/cluster.sh): the shipped Prolog with a
// check that hangs and in report-only mode, and the EpilogSlurmctld with an
// admin's hold on a job whose comment asks for a requeue. Short jobs
// (`sbatch --wrap`), no training: each case takes seconds.
#include <pwd.h>

#include "scheduler/slurm_scheduler.h"
#include "tests/slurm/slurm_fixture.h"

namespace holdfast {
namespace {

class SlurmHooks : public SlurmSuite {
 protected:
  std::string Support(const std::string& name) const { return SuiteDir() + "/support/" + name; }

  // sbatch --wrap `command` as root on `nodes` nodes; the job id (0 and a failure on error).
  uint32_t SubmitWrap(int nodes, const std::string& command) {
    ProcessResult r = Slurm("sbatch", {"--parsable", "-N" + std::to_string(nodes), "--job-name", job_name_, "--chdir",
                                       dir_, "--output", D("job-%j.out"), "--wrap", command});
    const uint32_t id = static_cast<uint32_t>(std::strtoul(r.output.c_str(), nullptr, 10));
    if (r.exit_code != 0 || id == 0) ADD_FAILURE() << "sbatch (exit " << r.exit_code << "): " << r.output;
    return id;
  }
  // What `name` in the support folder gained since `from` (a size noted before the test acted).
  std::string LogSince(const std::string& name, size_t from) const {
    const std::string text = ReadFile(Support(name));
    return text.size() > from ? text.substr(from) : "";
  }
  size_t LogSize(const std::string& name) const { return ReadFile(Support(name)).size(); }
  std::string DrainReason(const std::string& node) {
    return Slurm("sinfo", {"-R", "-h", "-n", node, "-o", "%E"}).output;
  }
};

// A check that hangs (here host.memory reads a FIFO nobody writes, as a read
// of a wedged driver never returns) ends at the Prolog's timeout: the node is
// drained with a reason naming the check and the timeout, and the job runs on
// the other nodes. (The job runs a step on every node: a batch script that
// ended before n2's Prolog did would not be there to be requeued. Slurm starts
// the batch script once its own node's Prolog is done.)
TEST_F(SlurmHooks, AHungPrologCheckEndsAtTheTimeoutAndDrainsSayingSo) {
  WriteFile(Support("hang-prolog-nodes"), "n2\n");
  WriteFile(Support("prolog.conf"), "HOLDFAST_PROLOG_TIMEOUT=2\n");
  ScopeExit restore([&] {
    WriteFile(Support("hang-prolog-nodes"), "");
    std::filesystem::remove(Support("prolog.conf"));
    Slurm("scontrol", {"update", "nodename=n2", "state=resume"});
  });
  const size_t log_from = LogSize("prolog.log");
  const uint32_t job = SubmitWrap(2, "srun true");
  ASSERT_NE(job, 0u);
  ASSERT_TRUE(WaitForJobsToEnd(std::chrono::seconds(60)));

  EXPECT_EQ(DrainReason("n2"), "holdfast-health: host.memory hung: no answer in 2 s (driver or file system stuck)\n");
  const std::string info = ShowJob(job);
  EXPECT_EQ(Field(info, "JobState"), "COMPLETED") << info;
  EXPECT_EQ(Field(info, "NodeList"), "n[1,3]") << info;
  const std::string log = LogSince("prolog.log", log_from);
  EXPECT_NE(log.find("n2 job " + std::to_string(job) + ": drain n2: holdfast-health: host.memory hung"), std::string::npos)
      << log;
}

// A staged rollout: the Prolog finds n2's InfiniBand port down, says what it
// would do, and drains nothing; the job runs on all three nodes.
TEST_F(SlurmHooks, ReportOnlyPrologDrainsNothing) {
  WriteFile(Support("bad-prolog-nodes"), "n2\n");
  WriteFile(Support("prolog.conf"), "HOLDFAST_PROLOG_MODE=report\n");
  ScopeExit restore([&] {
    WriteFile(Support("bad-prolog-nodes"), "");
    std::filesystem::remove(Support("prolog.conf"));
    Slurm("scontrol", {"update", "nodename=n2", "state=resume"});
  });
  const size_t log_from = LogSize("prolog.log");
  const uint32_t job = SubmitWrap(3, "srun true");
  ASSERT_NE(job, 0u);
  ASSERT_TRUE(WaitForJobsToEnd(std::chrono::seconds(60)));

  const std::string info = ShowJob(job);
  EXPECT_EQ(Field(info, "JobState"), "COMPLETED") << info;
  EXPECT_EQ(Field(info, "NodeList"), "n[1-3]") << info;
  EXPECT_EQ(Field(info, "Restarts"), "0") << info;
  EXPECT_EQ(DrainReason("n2"), "") << "report-only drains nothing";
  EXPECT_EQ(Slurm("sinfo", {"-h", "-N", "-o", "%N %t"}).output, "n1 idle\nn2 idle\nn3 idle\n");
  const std::string log = LogSince("prolog.log", log_from);
  EXPECT_NE(log.find("n2 job " + std::to_string(job) +
                     ": report-only: would drain n2: holdfast-health: ib.port_state mlx5_1/1 DOWN"),
            std::string::npos)
      << log;
}

// An admin holds a job (`scontrol hold` on the running job: priority 0,
// JobHeldAdmin, kept through a requeue) whose comment carries a requeue
// request as holdfastd writes it; the job's owner then requeues it, as
// holdfastd does. The epilog, running as SlurmUser, finishes what the owner
// may ask (the exclusion, the request out of the comment) and leaves the hold.
TEST_F(SlurmHooks, AnAdminsHoldOnAJobWithARequeueRequestStaysHeld) {
  const passwd* nobody = getpwnam("nobody");
  ASSERT_NE(nobody, nullptr);
  ASSERT_FALSE(Tool("runuser").empty()) << "runuser (util-linux) is needed to act as the job's owner";
  auto as_owner = [&](const std::string& tool, std::vector<std::string> args) {
    args.insert(args.begin(), {"-u", "nobody", "--", Tool(tool)});
    return Slurm("runuser", args);
  };
  ProcessResult sub = as_owner("sbatch", {"--parsable", "-N2", "--job-name", job_name_, "--chdir", "/tmp", "--output",
                                          "/dev/null", "--wrap", "sleep 300"});
  const uint32_t job = static_cast<uint32_t>(std::strtoul(sub.output.c_str(), nullptr, 10));
  ASSERT_NE(job, 0u) << sub.output;
  ScopeExit cancel([&] { Slurm("scancel", {std::to_string(job)}); });
  ASSERT_TRUE(WaitFor("job " + std::to_string(job) + " to run", std::chrono::seconds(30),
                      [&] { return Field(ShowJob(job), "JobState") == "RUNNING"; }));
  ASSERT_EQ(Field(ShowJob(job), "NodeList"), "n[1-2]");

  RequeueRequest req;
  req.job_id = job;
  req.uid = nobody->pw_uid;
  req.restart = 0;
  req.run_id = "r-admin-hold";
  req.exclude = {"n2"};
  ProcessResult wrote = as_owner("scontrol", {"update", "jobid=" + std::to_string(job),
                                              "comment=sweep-3; " + FormatRequeueRequest(req)});
  ASSERT_EQ(wrote.exit_code, 0) << wrote.output;
  const size_t log_from = LogSize("epilog.log");
  ProcessResult hold = Slurm("scontrol", {"hold", std::to_string(job)});
  ASSERT_EQ(hold.exit_code, 0) << hold.output;
  ProcessResult requeue = as_owner("scontrol", {"requeue", std::to_string(job)});
  ASSERT_EQ(requeue.exit_code, 0) << requeue.output;

  const std::string done = "job " + std::to_string(job) + " (run r-admin-hold): pending after ";
  ASSERT_TRUE(WaitFor("the epilog's watcher to finish with job " + std::to_string(job), std::chrono::seconds(60),
                      [&] { return LogSince("epilog.log", log_from).find(done) != std::string::npos; }));
  const std::string info = ShowJob(job);
  EXPECT_EQ(Field(info, "JobState"), "PENDING") << info;
  EXPECT_EQ(Field(info, "Reason"), "JobHeldAdmin") << info;
  EXPECT_EQ(Field(info, "Priority"), "0") << info;
  EXPECT_EQ(Field(info, "Restarts"), "1") << info;
  EXPECT_EQ(Field(info, "ExcNodeList"), "n2") << "excluding its node is the owner's to ask: " << info;
  EXPECT_EQ(Field(info, "Comment"), "sweep-3") << "the request is done with: " << info;
  const std::string log = LogSince("epilog.log", log_from);
  EXPECT_NE(log.find("excluded n2, held (JobHeldAdmin): left held", log.find(done)), std::string::npos) << log;
}

}  // namespace
}  // namespace holdfast
