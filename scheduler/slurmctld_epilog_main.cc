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
// only a job whose holdfastd wrote a request (`holdfast-requeue exclude=n2
// run=R`, scheduler/slurm_scheduler.h) is touched. For those it forks a
// detached watcher and returns at once (slurmctld keeps the job COMPLETING
// while this program runs, so it must not wait here); the watcher waits until
// the job is PENDING and no longer COMPLETING, then in one update: adds the
// requested nodes to the job's excluded nodes, removes the request from the
// comment, and sets BeginTime to now (releasing it if held), so the job runs
// again within seconds on other nodes.
//
// It also finishes what Slurm does after a failed Prolog (PrologFlags=Alloc):
// the node is drained and the job requeued *held* with the ~120 s BeginTime
// (reason launch_failed_requeued_held); the watcher releases it and starts it
// now, so it runs at once on healthy nodes (the drained one is not eligible).
//
// slurmctld gives EpilogSlurmctld no PATH and no SLURM_CONF: the default
// /etc/slurm/slurm.conf is read unless --slurm-conf names another.
//
//   holdfast-slurmctld-epilog [--job ID] [--log FILE] [--wait SECONDS] [--slurm-conf PATH]
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

#include "scheduler/slurm_client.h"
#include "scheduler/slurm_scheduler.h"

namespace {

using namespace holdfast;

void Log(const std::string& line) {
  char ts[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", std::localtime(&now));
  std::fprintf(stderr, "%s holdfast-slurmctld-epilog[%d]: %s\n", ts, getpid(), line.c_str());
  std::fflush(stderr);
}

// Waits for the requeued job to be pending, then excludes, releases, starts now.
// `requeued_at`: when slurmctld ran this epilog, i.e. no earlier than the kill
// that requeued the job. Each slurmd revokes the job id's credential at that
// kill, to the second, and refuses a credential created in that same second
// ("Job credential revoked": the rerun FAILS). Slurm's own ~120 s BeginTime
// hold is what normally keeps a rerun out of that second; starting "now", the
// job could be scheduled within it, so the update waits for the next second.
int Watch(uint32_t job_id, const RequeueRequest& req, double wait_s, std::time_t requeued_at) {
  SlurmClient slurm(SlurmClient::RetryPolicy{0.2, 2, 30});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    auto job = slurm.LoadJob(job_id);
    if (!job.ok()) {
      Log("job " + std::to_string(job_id) + ": " + job.status().message());
      return 1;
    }
    if (job->pending() && !job->completing) {
      while (std::time(nullptr) <= requeued_at) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      std::vector<std::string> excluded;
      if (!job->exc_nodes.empty()) {
        auto prior = ExpandSlurmHostlist(job->exc_nodes);
        if (prior.ok()) excluded = *prior;
      }
      for (const std::string& h : req.exclude) {
        if (std::find(excluded.begin(), excluded.end(), h) == excluded.end()) excluded.push_back(h);
      }
      SlurmJobUpdate u;
      if (!req.exclude.empty()) u.exc_nodes = CompressSlurmHostlist(excluded);
      u.comment = StripRequeueRequest(job->comment);
      u.begin_now = true;
      u.release = job->priority == 0;
      Status s = slurm.UpdateJob(job_id, u);
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      char secs[32];
      std::snprintf(secs, sizeof(secs), "%.2f", waited);
      Log("job " + std::to_string(job_id) + (req.run_id.empty() ? "" : " (run " + req.run_id + ")") + ": " +
          (s.ok() ? std::string("pending after ") + secs + " s; " +
                        (req.exclude.empty() ? "" : "excluded " + CompressSlurmHostlist(excluded) + ", ") +
                        (u.release ? "released, " : "") + "begins now"
                  : "could not finish the requeue: " + s.message()));
      return s.ok() ? 0 : 1;
    }
    if (!job->pending() && !job->completing && !job->requeue_pending) {
      // Running again (or over) without having been seen pending: Slurm started it as soon as
      // its nodes were released (a node that stopped answering, once marked down), before this
      // watcher could act. The requeue it was started for is over: take the request out of the
      // comment, or the job's next requeue would act on it (found by bench/soak_slurm.py: a
      // stale "exclude=n2" left a later requeue, with another node down, too few nodes).
      SlurmJobUpdate u;
      u.comment = StripRequeueRequest(job->comment);
      Status s = slurm.UpdateJob(job_id, u);
      Log("job " + std::to_string(job_id) + (req.run_id.empty() ? "" : " (run " + req.run_id + ")") +
          (job->running() ? ": started again" : ": ended (state " + job->state + ")") + " before it was seen pending" +
          (req.exclude.empty() ? "" : "; " + CompressSlurmHostlist(req.exclude) + " not excluded") +
          (s.ok() ? "; request removed" : "; could not remove the request: " + s.message()));
      return 1;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      Log("job " + std::to_string(job_id) + ": not pending after " + std::to_string(static_cast<int>(wait_s)) +
          " s (state " + job->state + (job->completing ? "+COMPLETING" : "") +
          "): it was not requeued; leaving it alone");
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
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
  app.add_option("--wait", wait_s, "seconds to wait for the requeued job to become pending")->check(CLI::PositiveNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "error: %s\nRun with --help for the flags.\n", e.what());
    return 2;
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
  SlurmClient slurm(SlurmClient::RetryPolicy{0.2, 1, 10});
  auto job = slurm.LoadJob(job_id);
  if (!job.ok()) {
    Log("job " + std::to_string(job_id) + ": " + job.status().message());
    return 0;
  }
  std::optional<RequeueRequest> req = ParseRequeueRequest(job->comment);
  if (req) {
    Log("job " + std::to_string(job_id) + ": holdfastd asked for a requeue" +
        (req->exclude.empty() ? "" : " excluding " + CompressSlurmHostlist(req->exclude)) + "; watching it");
  } else if (job->reason == "launch_failed_requeued_held") {
    req = RequeueRequest{};
    Log("job " + std::to_string(job_id) + ": a Prolog failed (its node is drained); releasing the job once pending");
  } else {
    return 0;  // a job that ended, or a requeue nobody asked holdfast to finish
  }
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
  _exit(Watch(job_id, *req, wait_s, started_at));
}
