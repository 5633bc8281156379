// holdfastd: the per-node supervisor of one training run.
//
//   holdfastd --run-dir DIR --config job.toml              start (or continue) the run in DIR
//   holdfastd --run-dir DIR --resume RUN [--from-step N]   a new attempt of RUN
//   holdfastd ... --nodes N --node-id K                    one of N daemons (0 leads)
//   holdfastd ... --metrics-addr 0.0.0.0:9400              Prometheus metrics (docs/metrics.md)
//   srun --ntasks-per-node=1 holdfastd --run-dir DIR -c job.toml   under Slurm (examples/slurm/)
//
// main() only wires objects together: flags, the job config, the scheduler,
// the run lock, the event loop, and the Supervisor (leader) or Follower.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <spdlog/spdlog.h>

#include "common/time_source.h"
#include "daemon/asio_timer.h"
#include "daemon/exit_codes.h"
#include "daemon/follower.h"
#include "daemon/job_config.h"
#include "daemon/run_lock.h"
#include "daemon/supervisor.h"
#include "lineage/lineage_db.h"
#include "scheduler/local_scheduler.h"
#ifdef HOLDFAST_HAVE_SLURM
#include "scheduler/slurm_scheduler.h"
#endif

namespace {

int Usage(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return holdfast::kDaemonExitUsage;
}

// The scheduler --scheduler names ("auto": Slurm inside a Slurm job step);
// an error is a usage error whose message says what to change.
holdfast::Result<std::unique_ptr<holdfast::Scheduler>> MakeScheduler(const std::string& scheduler_name,
                                                                     const holdfast::LocalSchedulerOptions& local,
                                                                     const std::string& run_dir,
                                                                     const std::string& requeue_path,
                                                                     double slurm_timeout_s) {
  using namespace holdfast;
  const bool in_slurm_job = std::getenv("SLURM_JOB_ID") != nullptr && std::getenv("SLURM_STEP_ID") != nullptr;
  const bool use_slurm = scheduler_name == "slurm" || (scheduler_name == "auto" && in_slurm_job);
  if (use_slurm) {
#ifdef HOLDFAST_HAVE_SLURM
    if (local.nodes != 1 || local.node_id != 0 || !local.leader.empty() || !local.host.empty()) {
      return holdfast::InvalidArgumentError("--nodes, --node-id, --leader and --host come from Slurm under --scheduler slurm: drop them "
                   "(or use --scheduler local)");
    }
    SlurmSchedulerOptions so;
    so.run_dir = run_dir;
    so.addr = local.addr;
    so.requeue_path = ParseRequeuePath(requeue_path).value();
    so.rpc_deadline_s = slurm_timeout_s;
    return std::unique_ptr<Scheduler>(std::make_unique<SlurmScheduler>(so));
#else
    return holdfast::InvalidArgumentError("this holdfastd was built without libslurm (install libslurm-dev and rebuild), so --scheduler slurm "
                 "is not available; use --scheduler local");
#endif
  } else {
    return std::unique_ptr<Scheduler>(std::make_unique<LocalScheduler>(local));
  }
}

// The job config of the recorded run `resume` names, as lineage keeps it: its
// file when still there, else a copy of the recorded text in the run dir.
holdfast::Result<std::string> RecordedConfigPath(const std::string& run_dir, const std::string& resume) {
  using namespace holdfast;
  LineageOptions lo;
  lo.read_only = true;
  auto db = LineageDb::Open(run_dir + "/lineage.db", lo);
  auto run = db.ok() ? (*db)->FindRun(resume) : Result<RunRecord>(db.status());
  if (!run.ok()) return run.status();
  std::string config_path = run->config_path;
  if (!std::filesystem::exists(config_path)) {
    config_path = run_dir + "/job-" + run->run_id + ".toml";
    std::ofstream(config_path) << run->config_text;
  }
  return config_path;
}

// Runs this node's daemon — the leader's Supervisor, or a Follower (the
// allocation says which) — on one event loop until the run is over.
int RunDaemon(holdfast::SupervisorOptions so, holdfast::Scheduler* scheduler) {
  using namespace holdfast;
  boost::asio::io_context io;
  const TimeSource* clock = RealTimeSource::Get();
  AsioTimerFactory timers(&io);
  auto fail = [](const Status& s) {
    spdlog::error("{}", s.ToString());
    return s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kFailedPrecondition ||
                   s.code() == StatusCode::kNotFound
               ? kDaemonExitUsage
               : kDaemonExitFailed;
  };
  if (!so.allocation.leader()) {
    FollowerOptions fo;
    fo.run_dir = so.run_dir;
    fo.job = std::move(so.job);
    fo.allocation = so.allocation;
    Follower follower(&io, std::move(fo), scheduler, clock, &timers);
    if (Status s = follower.Start(); !s.ok()) return fail(s);
    io.run();
    return follower.exit_code();
  }
  Supervisor supervisor(&io, std::move(so), scheduler, clock, &timers);
  if (Status s = supervisor.Start(); !s.ok()) return fail(s);
  io.run();
  return supervisor.exit_code();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace holdfast;
  CLI::App app{"holdfastd: supervises a training run: launches its ranks, detects crashes and hangs, "
               "restarts from the newest checkpoint, records everything in DIR/lineage.db"};
  std::string run_dir, config_path, resume;
  int64_t from_step = -1;
  LocalSchedulerOptions local;
  uint16_t cluster_port = 0;
  bool wait_for_lock = false;
  app.add_option("--run-dir", run_dir, "the run's directory (lineage.db, logs, control socket)")->required();
  app.add_option("-c,--config", config_path, "job config (TOML; see examples/job.toml)");
  // The environment carries a resume request across a Slurm resubmission; a flag overrides it.
  app.add_option("--resume", resume,
                 "continue run RUN (id, unique prefix or 'latest') as a new attempt (default: $HOLDFAST_RESUME)")
      ->envname("HOLDFAST_RESUME");
  app.add_option("--from-step", from_step,
                 "with --resume: start from the checkpoint of step N (default: $HOLDFAST_FROM_STEP)")
      ->envname("HOLDFAST_FROM_STEP")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--nodes", local.nodes, "number of nodes (daemons) in the run")->check(CLI::Range(1, 100000));
  app.add_option("--node-id", local.node_id, "this daemon's node: 0 leads, others follow")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--leader", local.leader, "followers: host:port of the leader (default: read DIR/cluster.addr)");
  app.add_option("--host", local.host, "this node's name (default: the hostname; '<hostname>-n<K>' with --nodes > 1)");
  app.add_option("--addr", local.addr,
                 "the address this node binds and advertises (default 127.0.0.1 only when every node runs on this "
                 "machine; required otherwise)");
  app.add_option("--cluster-port", cluster_port, "leader: TCP port followers join on (0 = any)");
  app.add_flag("--wait-for-lock", wait_for_lock, "wait for another holdfastd on DIR to exit instead of refusing");
  std::string scheduler_name = "auto", requeue_path = "auto";
  double slurm_timeout_s = 120;
  app.add_option("--scheduler", scheduler_name,
                 "auto (slurm inside a Slurm job, else local), local or slurm")
      ->check(CLI::IsMember({"auto", "local", "slurm"}));
  app.add_option("--requeue-path", requeue_path,
                 "slurm: how a requeue keeps bad nodes out: epilog (holdfast-slurmctld-epilog is the cluster's "
                 "EpilogSlurmctld), resubmit (a new job with --exclude; needs no admin), auto (epilog when configured)")
      ->check(CLI::IsMember({"auto", "epilog", "resubmit"}));
  app.add_option("--slurm-timeout", slurm_timeout_s, "slurm: seconds to retry an unreachable slurmctld")
      ->check(CLI::PositiveNumber);
  std::string metrics_addr, metrics_textfile;
  app.add_option("--metrics-addr", metrics_addr,
                 "leader: serve Prometheus metrics at http://HOST:PORT/metrics (docs/metrics.md; default: off)");
  app.add_option("--metrics-textfile", metrics_textfile,
                 "leader: rewrite PATH (e.g. node_exporter's textfile directory/holdfast.prom) with the metrics every "
                 "poll, atomically (default: off)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "error: %s\nRun with --help for the flags.\n", e.what());
    return kDaemonExitUsage;
  }
  local.run_dir = run_dir;
  spdlog::set_pattern("[%H:%M:%S.%e] [holdfastd" +
                      (local.node_id > 0 ? " node " + std::to_string(local.node_id) : std::string()) +
                      "] [%^%l%$] %v");
  // A requeued Slurm job reruns with its first environment: a step asked for
  // by `runctl resume --from-step` applies to the first run only.
  if (const char* restarts = std::getenv("SLURM_RESTART_COUNT");
      restarts && std::atoi(restarts) > 0 && from_step >= 0 &&
      std::none_of(argv + 1, argv + argc, [](const char* a) { return std::strncmp(a, "--from-step", 11) == 0; })) {
    from_step = -1;
  }
  if (from_step >= 0 && resume.empty()) return Usage("--from-step needs --resume RUN");
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  if (ec) return Usage("cannot create run dir " + run_dir + ": " + ec.message());

  auto scheduler_owner = MakeScheduler(scheduler_name, local, run_dir, requeue_path, slurm_timeout_s);
  if (!scheduler_owner.ok()) return Usage(scheduler_owner.status().message());
  Scheduler& scheduler = **scheduler_owner;
  auto alloc = scheduler.Discover();
  if (!alloc.ok()) return Usage(alloc.status().message());
  if (alloc->this_node > 0) {
    spdlog::set_pattern("[%H:%M:%S.%e] [holdfastd node " + std::to_string(alloc->this_node) + " " + alloc->self().host +
                        "] [%^%l%$] %v");
  }

  if (config_path.empty()) {
    if (resume.empty()) return Usage("--config job.toml is required (or --resume RUN to continue a recorded run)");
    auto recorded = RecordedConfigPath(run_dir, resume);
    if (!recorded.ok()) return Usage("cannot resume " + resume + ": " + recorded.status().message());
    config_path = *recorded;
  }
  auto job = LoadJobConfig(config_path);
  if (!job.ok()) return Usage(job.status().message());

  // The leader owns the run directory for its whole life (held until exit,
  // released by the kernel however it exits). A requeued Slurm job waits for
  // its previous daemon as long as its followers wait for it: Slurm requeues
  // a job whose node stopped answering, and the daemon on that node, cut off,
  // may still be giving up on its own requeue (--slurm-timeout).
  std::unique_ptr<RunLock> lock;
  if (alloc->leader()) {
    auto l = RunLock::Acquire(run_dir, wait_for_lock);
    if (!l.ok() && l.status().code() == StatusCode::kFailedPrecondition && alloc->restart_count > 0) {
      spdlog::warn("{}: this job was requeued; waiting up to {:.0f} s (startup_timeout_s) for it to exit",
                   l.status().message(), job->supervise.startup_timeout_s);
      l = RunLock::AcquireWithin(run_dir,
                                 std::chrono::milliseconds(static_cast<int64_t>(job->supervise.startup_timeout_s * 1000)));
    }
    if (!l.ok()) return Usage(l.status().message());
    lock = std::move(l).value();
  }

  SupervisorOptions so;
  so.run_dir = run_dir;
  so.job = std::move(job).value();
  so.resume_run = resume;
  so.from_step = from_step;
  so.allocation = *alloc;
  so.cluster_port = cluster_port;
  so.metrics_addr = metrics_addr;
  so.metrics_textfile = metrics_textfile;
  return RunDaemon(std::move(so), &scheduler);
}
