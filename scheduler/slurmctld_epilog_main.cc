// holdfast-slurmctld-epilog: finishes, on the controller, a requeue that a
// job's holdfastd asked for. Install it as the cluster's EpilogSlurmctld
// (through the wrapper in examples/slurm/holdfast-slurmctld-epilog.sh):
//
//   EpilogSlurmctld=/etc/slurm/holdfast-slurmctld-epilog.sh
//
// Why it exists: a job cannot requeue itself and change its excluded nodes
// (exc_nodes changes only while the job is pending, and a requeue from inside
// the job kills the caller first), and Slurm holds a requeued job back by
// ~120 s (BeginTime). slurmctld runs this program after every job ends,
// requeues included, with SLURM_JOB_ID set. It looks at the job's comment:
// only a job whose holdfastd wrote a request bound to it (`holdfast-requeue
// job=J uid=U restart=K run=R exclude=n2`: this job, its owner, the attempt
// that asked; scheduler/slurm_scheduler.h) is touched; any other request is
// logged and left alone (scheduler/slurmctld_epilog.h: who may write a
// comment, and why the epilog does only what the job's owner could do). For
// those it forks a detached watcher and returns at once (slurmctld keeps the
// job COMPLETING while this program runs, so it must not wait here); the
// watcher waits until the job is PENDING and no longer COMPLETING, asking
// slurmctld with backoff (0.25 s, growing by half to 30 s; at most 16 RPCs), then in
// one update: adds the requested nodes to the job's excluded nodes, removes the
// request from the comment, and sets BeginTime to now, so the job runs again
// within seconds on other nodes. A job someone holds (an admin's `scontrol
// hold`, the owner's own) stays held.
//
// It also finishes what Slurm does after a failed Prolog (PrologFlags=Alloc):
// the node is drained and the job requeued *held* with the ~120 s BeginTime
// (reason launch_failed_requeued_held); the watcher releases that hold, the
// only one it releases, and starts it now, so it runs at once on healthy nodes
// (the drained one is not eligible).
//
// slurmctld gives EpilogSlurmctld no PATH and no SLURM_CONF: the default
// /etc/slurm/slurm.conf is read unless --slurm-conf names another.
//
//   holdfast-slurmctld-epilog [--job ID] [--log FILE] [--timeout SECONDS] [--slurm-conf PATH]
//
// Exit code: 0 always once the job was read (an epilog failure would drain
// nothing here, but slurmctld logs it); 2 on bad flags. What it did goes to
// --log (default /var/log/slurm/holdfast-slurmctld-epilog.log, else stderr).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>

#include "common/program_cli.h"
#include "scheduler/slurm_client.h"
#include "scheduler/slurm_scheduler.h"
#include "scheduler/slurmctld_epilog.h"

namespace {

using namespace holdfast;

void Log(const std::string& line) {
  char ts[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));  // UTC, like lineage (docs/cli.md)
  std::fprintf(stderr, "%s holdfast-slurmctld-epilog[%d]: %s\n", ts, getpid(), line.c_str());
  std::fflush(stderr);
}

// Waits for the requeued job to be pending, then does what DecideWatchStep says.
// `requeued_at`: when slurmctld ran this epilog, i.e. no earlier than the kill
// that requeued the job. Each slurmd revokes the job id's credential at that
// kill, to the second, and refuses a credential created in that same second
// ("Job credential revoked": the rerun FAILS). Slurm's own ~120 s BeginTime
// hold is what normally keeps a rerun out of that second; starting "now", the
// job could be scheduled within it, so the update waits for the next second.
// slurmctld is asked on PollSchedule's backoff, at most kMaxWatcherRpcs times.
int Watch(uint32_t job_id, const EpilogPlan& plan, double wait_s, std::time_t requeued_at, int epilog_rpcs) {
  SlurmClient slurm(SlurmClient::RetryPolicy{1, 8, 20});
  PollSchedule schedule(0.25, 1.5, 30, wait_s);
  const std::string who = "job " + std::to_string(job_id) +
                          (plan.request && !plan.request->run_id.empty() ? " (run " + plan.request->run_id + ")" : "");
  auto rpcs = [&] { return " (" + std::to_string(epilog_rpcs + slurm.rpcs()) + " RPCs to slurmctld in all)"; };
  std::string last_state = "unknown";
  while (std::optional<double> wait = schedule.Next()) {
    if (slurm.rpcs() >= kMaxWatcherRpcs) {
      Log(who + ": still " + last_state + " after " + std::to_string(slurm.rpcs()) + " RPCs, the most a watcher may send; "
          "leaving it alone" + rpcs());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(*wait));
    auto job = slurm.LoadJob(job_id);
    if (!job.ok()) {
      Log(who + ": " + job.status().message() + rpcs());
      return 1;
    }
    last_state = job->state + (job->completing ? "+COMPLETING" : "");
    const WatchStep step = DecideWatchStep(*job, plan);
    if (step.kind == WatchStep::kWait) {
      if (step.update) {
        Status s = slurm.UpdateJob(job_id, *step.update);
        if (!s.ok()) Log(who + ": could not take the request out of the comment: " + s.message());
      }
      continue;
    }
    if (step.kind == WatchStep::kFinish && step.update && step.update->begin_now) {
      while (std::time(nullptr) <= requeued_at) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    Status s = step.update ? slurm.UpdateJob(job_id, *step.update) : Status::Ok();
    char secs[32];
    std::snprintf(secs, sizeof(secs), "%.2f", schedule.elapsed_s());
    if (step.kind == WatchStep::kFinish) {
      Log(who + ": " + (s.ok() ? std::string("pending after ") + secs + " s; " + step.log
                               : "could not finish the requeue: " + s.message()) + rpcs());
      return s.ok() ? 0 : 1;
    }
    Log(who + ": " + step.log +
        (!step.update ? "" : s.ok() ? "; request removed" : "; could not remove the request: " + s.message()) + rpcs());
    return 1;
  }
  Log(who + ": not pending after " + std::to_string(static_cast<int>(wait_s)) + " s (state " + last_state +
      "): it was not requeued; leaving it alone" + rpcs());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::time_t started_at = std::time(nullptr);  // slurmctld runs us right after the job's kill
  CLI::App app{"holdfast-slurmctld-epilog: Slurm's EpilogSlurmctld; finishes a requeue holdfastd asked for "
               "(excluded nodes, no BeginTime hold)"};
  uint32_t job_id = 0;
  std::string log_path = "/var/log/slurm/holdfast-slurmctld-epilog.log";
  double wait_s = 120;
  app.add_option("--job", job_id, "the job (default: SLURM_JOB_ID, as slurmctld sets it)");
  app.add_option("--log", log_path, "append what was done here (default " + log_path + "; stderr when not writable)");
  std::string slurm_conf;
  app.add_option("--slurm-conf", slurm_conf, "the cluster's slurm.conf (default: SLURM_CONF, else /etc/slurm/slurm.conf)");
  app.add_option("--timeout", wait_s, "seconds to wait for the requeued job to become pending (default 120)")
      ->check(CLI::PositiveNumber);
  // The old spelling, hidden: a --wait is a yes/no flag in runctl (docs/cli.md).
  app.add_option("--wait", wait_s)->check(CLI::PositiveNumber)->group("");
  holdfast::AddProgramConventions(
      app, "holdfast-slurmctld-epilog", holdfast::kBuiltAgainstSlurm,
      holdfast::ExitCodesHelp({{0, "the job was read (whatever was done is in --log; a failure here drains nothing)"},
                               {2, "bad flags, or no job (SLURM_JOB_ID unset and no --job)"}}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return holdfast::HandleParseError(app, e, "holdfast-slurmctld-epilog", argc, argv, 2);
  }
  if (!slurm_conf.empty()) setenv("SLURM_CONF", slurm_conf.c_str(), 1);
  if (job_id == 0) {
    const char* env = std::getenv("SLURM_JOB_ID");
    if (env == nullptr || *env == '\0') {
      std::fprintf(stderr, "error: no job: SLURM_JOB_ID is unset (slurmctld sets it for EpilogSlurmctld); or pass --job ID\n");
      return 2;
    }
    job_id = static_cast<uint32_t>(std::strtoul(env, nullptr, 10));
  }
  const int fd = open(log_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) {
    dup2(fd, STDERR_FILENO);
    close(fd);
  }
  SlurmClient slurm(SlurmClient::RetryPolicy{1, 4, 10});  // at most 4 tries: it runs for every job end
  auto job = slurm.LoadJob(job_id);
  if (!job.ok()) {
    Log("job " + std::to_string(job_id) + ": " + job.status().message());
    return 0;
  }
  const EpilogPlan plan = PlanEpilog(*job);
  if (!plan.log.empty()) Log("job " + std::to_string(job_id) + ": " + plan.log);
  if (!plan.watch) return 0;  // a job that ended, a requeue nobody asked holdfast to finish, a refused request
  // Detach: slurmctld waits for this process, and the job stays COMPLETING until it exits.
  const pid_t child = fork();
  if (child < 0) {
    Log("fork: " + std::string(std::strerror(errno)));
    return 0;
  }
  if (child > 0) return 0;
  setsid();
  if (fork() != 0) _exit(0);
  const int null = open("/dev/null", O_RDWR);
  if (null >= 0) {
    dup2(null, STDIN_FILENO);
    dup2(null, STDOUT_FILENO);
    if (null > STDERR_FILENO) close(null);
  }
  _exit(Watch(job_id, plan, wait_s, started_at, slurm.rpcs()));
}
