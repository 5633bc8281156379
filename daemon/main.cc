// holdfastd: the per-node supervisor of one training run.
//
//   holdfastd --run-dir DIR --config job.toml              start (or continue) the run in DIR
//   holdfastd --nproc-per-node 8 train.py ARGS             torchrun's form (daemon/launch_flags.h)
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

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <spdlog/spdlog.h>

#include "common/atomic_file.h"
#include "common/program_cli.h"
#include "common/secrets.h"
#include "common/time_source.h"
#include "daemon/asio_timer.h"
#include "daemon/exit_codes.h"
#include "daemon/follower.h"
#include "daemon/job_config.h"
#include "daemon/launch_flags.h"
#include "daemon/run_dir.h"
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

// The job config of the recorded run `resume` names: its file when still there, else the run's
// owner-only copy (daemon/run_dir.h), else lineage's recorded text (secrets redacted) written
// there, 0600.
holdfast::Result<std::string> RecordedConfigPath(const std::string& run_dir, const std::string& resume) {
  using namespace holdfast;
  LineageOptions lo;
  lo.read_only = true;
  auto db = LineageDb::Open(run_dir + "/lineage.db", lo);
  auto run = db.ok() ? (*db)->FindRun(resume) : Result<RunRecord>(db.status());
  if (!run.ok()) return run.status();
  std::string config_path = run->config_path;
  if (!std::filesystem::exists(config_path)) {
    config_path = JobCopyPath(run_dir, run->run_id);
    if (!std::filesystem::exists(config_path)) {
      HF_RETURN_IF_ERROR(WriteFileAtomically(config_path, run->config_text, 0600));
      if (run->config_text.find(kRedacted) != std::string::npos) {
        std::fprintf(stderr, "holdfastd: warning: %s and %s's copy are gone; resuming from lineage's job text, whose "
                     "secret-looking [job.env] values read \"%s\": edit %s to set them\n",
                     run->config_path.c_str(), run->run_id.c_str(), kRedacted, config_path.c_str());
      }
    }
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

// Every flag, parsed.
struct DaemonFlags {
  std::string run_dir, config_path, resume;
  int64_t from_step = -1;
  holdfast::LocalSchedulerOptions local;
  uint16_t cluster_port = 0;
  uint16_t control_port = 0;
  bool wait_for_lock = false;
  std::string scheduler_name = "auto", requeue_path = "auto";
  double slurm_timeout_s = 120;
  std::string metrics_addr, metrics_textfile;
  holdfast::CommandLineJob job;  // the torchrun-style launch (daemon/launch_flags.h)
  bool nodes_given = false;
};

void AddRunFlags(CLI::App& app, DaemonFlags* f) {
  app.add_option("--run-dir", f->run_dir,
                 "the run's directory (lineage.db, logs, control socket; default: holdfast-runs/NAME under "
                 "$SLURM_SUBMIT_DIR in a Slurm job, else under the current directory)");
  app.add_option("-c,--config", f->config_path, "job file (TOML; docs/job-file.md, examples/job.toml)");
  // The environment carries a resume request across a Slurm resubmission; a flag overrides it.
  app.add_option("--resume", f->resume,
                 "continue run RUN (id, unique prefix or 'latest') as a new attempt (default: $HOLDFAST_RESUME)")
      ->envname("HOLDFAST_RESUME");
  app.add_option("--from-step", f->from_step,
                 "with --resume: start from the checkpoint of step N (default: $HOLDFAST_FROM_STEP)")
      ->envname("HOLDFAST_FROM_STEP")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--nodes", f->local.nodes, "number of nodes (daemons) in the run")->check(CLI::Range(1, 100000));
  app.add_option("--node-id,--node-rank,--node_rank", f->local.node_id, "this daemon's node: 0 leads, others follow")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--leader", f->local.leader, "followers: host:port of the leader (default: read DIR/cluster.addr)");
  app.add_option("--host", f->local.host, "this node's name (default: the hostname; '<hostname>-n<K>' with --nodes > 1)");
  app.add_option("--addr", f->local.addr,
                 "the address this node binds and advertises (default 127.0.0.1 only when every node runs on this "
                 "machine; required otherwise)");
  app.add_option("--cluster-port", f->cluster_port, "leader: TCP port followers join on (0 = any)");
  app.add_option("--control-port", f->control_port,
                 "leader: TCP port runctl on other nodes reaches it on, MUNGE-authenticated (0 = any; "
                 "only where munged runs)");
  app.add_flag("--wait-for-lock", f->wait_for_lock, "wait for another holdfastd on DIR to exit instead of refusing");
  app.add_option("--scheduler", f->scheduler_name, "auto (slurm inside a Slurm job, else local), local or slurm")
      ->check(CLI::IsMember({"auto", "local", "slurm"}));
  app.add_option("--requeue-path", f->requeue_path,
                 "slurm: how a requeue keeps bad nodes out: epilog (holdfast-slurmctld-epilog is the cluster's "
                 "EpilogSlurmctld), resubmit (a new job with --exclude; needs no admin), auto (epilog when configured)")
      ->check(CLI::IsMember({"auto", "epilog", "resubmit"}));
  app.add_option("--slurm-timeout", f->slurm_timeout_s, "slurm: seconds to retry an unreachable slurmctld")
      ->check(CLI::PositiveNumber);
  app.add_option("--metrics-addr", f->metrics_addr,
                 "leader: serve Prometheus metrics at http://HOST:PORT/metrics (docs/metrics.md; default: off)");
  app.add_option("--metrics-textfile", f->metrics_textfile,
                 "leader: rewrite PATH (e.g. node_exporter's textfile directory/holdfast.prom) with the metrics every "
                 "poll, atomically (default: off)");
}

// torchrun's launch flags (daemon/launch_flags.h): the job from the command line.
void AddLaunchFlags(CLI::App& app, DaemonFlags* f) {
  app.add_option("--nproc-per-node,--nproc_per_node", f->job.nproc_per_node,
                 "ranks per node: N, or gpu (one per visible GPU); sets [job] nproc");
  app.add_option("--nnodes", f->job.nnodes,
                 "nodes: N (local: as --nodes; Slurm: the allocation must have N), or MIN:MAX (elastic)");
  app.add_option("--name", f->job.name, "the run's name ([job] name; default: the script's stem)");
  app.add_option("--checkpoint-dir", f->job.checkpoint_dir, "where the job writes checkpoints ([job] checkpoint_dir)");
  app.add_option("--max-restarts,--max_restarts", f->job.max_restarts,
                 "restarts before the attempt fails ([supervise] restart_budget)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("-m,--module", f->job.module, "run a Python module: python3 -m MODULE ARGS");
  app.add_flag("--no-python,--no_python", f->job.no_python, "run a .py first argument as a program, not with python3");
  app.add_flag("--standalone", "accepted for torchrun's sake: a local run is the default");
  app.footer(
      "The job: --config job.toml (docs/job-file.md), or torchrun's form, the command after the flags:\n"
      "  holdfastd --nproc-per-node 8 train.py ARGS         (a .py runs under python3, as with torchrun)\n"
      "  holdfastd --nproc-per-node 8 -- PROGRAM ARGS\n"
      "Both: the job file's settings with the command line's command and counts.");
  app.prefix_command();  // the first argument that is not a flag starts the job's command
}

// --version and the exit codes (daemon/exit_codes.h) at the end of --help (common/program_cli.h).
void AddConventions(CLI::App& app) {
  using namespace holdfast;
  const std::string codes = ExitCodesHelp({
      {kDaemonExitOk, "the run finished"},
      {kDaemonExitFailed, "the run failed: restart budget spent, a node lost, a requeue that failed"},
      {kDaemonExitUsage, "bad flags, job file or run directory, or bad input at a rank (never restarted)"},
      {kDaemonExitStopped, "stopped on request without a final checkpoint"},
      {kDaemonExitPreempted, "the ranks committed a final checkpoint before stopping, or the run was requeued: resume later"},
  });
#ifdef HOLDFAST_HAVE_SLURM
  AddProgramConventions(app, "holdfastd", kBuiltAgainstSlurm, codes);
#else
  AddProgramConventions(app, "holdfastd", kBuiltAgainstNothing, codes);
#endif
}

// A flag CLI11 left for the job's command because holdfastd has none of that name: named, with
// the closest holdfastd flag. "" when the command line's rest is a command (or starts with --).
std::string UnknownLeadingFlag(const CLI::App& app, const std::vector<std::string>& rest) {
  if (rest.empty() || rest[0] == "--" || rest[0].size() < 2 || rest[0][0] != '-') return "";
  const std::string name = rest[0].substr(0, rest[0].find('='));
  const std::string close = holdfast::ClosestName(name, holdfast::FlagNames(app));
  return "unknown flag '" + name + "'" + (close.empty() ? "" : "; did you mean '" + close + "'?") +
         " (holdfastd --help lists the flags; the job's own flags go after its command, or after --)";
}

// The job to supervise: a job file, the command line (on top of a job file),
// or the recorded job of the run --resume names. Usage errors say what to pass.
holdfast::Result<holdfast::JobConfig> ResolveJob(DaemonFlags& f, const std::vector<std::string>& rest) {
  using namespace holdfast;
  std::vector<std::string> command = rest;
  if (!command.empty() && command[0] == "--") {
    command.erase(command.begin());
  } else if (!command.empty() && command[0].size() > 1 && command[0][0] == '-') {
    return InvalidArgumentError("unknown flag " + command[0] + " (holdfastd --help lists the flags; the job's own "
                                "flags go after its command, or after --)");
  }
  f.job.command = std::move(command);
  if (!HasCommandLineJob(f.job)) {
    if (!f.config_path.empty()) return LoadJobConfig(f.config_path);
    if (f.resume.empty()) {
      return InvalidArgumentError("no job: give --config job.toml, or the command after the flags "
                                  "(holdfastd --nproc-per-node 8 train.py ARGS), or --resume RUN");
    }
    if (f.run_dir.empty()) return InvalidArgumentError("--resume RUN needs --run-dir DIR, the run's directory");
    auto recorded = RecordedConfigPath(f.run_dir, f.resume);
    if (!recorded.ok()) return InvalidArgumentError("cannot resume " + f.resume + ": " + recorded.status().message());
    return LoadJobConfig(*recorded);
  }
  std::string base_text;
  if (!f.config_path.empty()) {
    HF_ASSIGN_OR_RETURN(JobConfig base, LoadJobConfig(f.config_path));
    base_text = base.text;
  }
  std::error_code ec;
  f.job.workdir = std::filesystem::current_path(ec).string();
  f.job.python = FindOnPath("python3", std::getenv("PATH"));
  f.job.visible_gpus = CountVisibleGpus(std::getenv("CUDA_VISIBLE_DEVICES"));
  HF_ASSIGN_OR_RETURN(std::string text, JobTextFromFlags(f.job, base_text, f.config_path));
  return LoadJobConfigText(text, f.config_path.empty() ? "holdfastd's command line"
                                                       : "holdfastd's command line on " + f.config_path);
}

// --nnodes N: locally the number of daemons (unless --nodes says it);
// under Slurm a check of the allocation.
holdfast::Status ApplyNodeCount(const DaemonFlags& f, int allocation_nodes) {
  using namespace holdfast;
  if (f.job.nnodes.empty()) return Status::Ok();
  HF_ASSIGN_OR_RETURN(NodeRange r, ParseNodeRange(f.job.nnodes));
  if (r.min == r.max && allocation_nodes != r.min) {
    return InvalidArgumentError("--nnodes " + f.job.nnodes + " but the allocation has " +
                                std::to_string(allocation_nodes) + " node(s): ask the scheduler for " +
                                std::to_string(r.min) + " (sbatch --nodes), or drop --nnodes");
  }
  if (r.max > allocation_nodes) {
    return InvalidArgumentError("--nnodes " + f.job.nnodes + ": MAX is more than the allocation's " +
                                std::to_string(allocation_nodes) + " node(s)");
  }
  return Status::Ok();
}

int TrainingWorldSize(const holdfast::JobConfig& job, int allocation_nodes) {
  const int nodes = job.max_nodes > 0 ? std::min(job.max_nodes, allocation_nodes) : allocation_nodes;
  return nodes * job.nproc;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace holdfast;
  CLI::App app{"holdfastd: supervises a training run: launches its ranks, detects crashes and hangs, "
               "restarts from the newest checkpoint, records everything in DIR/lineage.db"};
  DaemonFlags f;
  AddRunFlags(app, &f);
  AddLaunchFlags(app, &f);
  AddConventions(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return HandleParseError(app, e, "holdfastd", argc, argv, kDaemonExitUsage);
  }
  if (std::string unknown = UnknownLeadingFlag(app, app.remaining()); !unknown.empty()) return Usage(unknown);
  f.nodes_given = app.count("--nodes") > 0;
  UseUtcLogPattern("holdfastd" + (f.local.node_id > 0 ? " node " + std::to_string(f.local.node_id) : std::string()));
  // A requeued Slurm job reruns with its first environment: a step asked for
  // by `runctl resume --from-step` applies to the first run only.
  if (const char* restarts = std::getenv("SLURM_RESTART_COUNT");
      restarts && std::atoi(restarts) > 0 && f.from_step >= 0 &&
      std::none_of(argv + 1, argv + argc, [](const char* a) { return std::strncmp(a, "--from-step", 11) == 0; })) {
    f.from_step = -1;
  }
  if (f.from_step >= 0 && f.resume.empty()) return Usage("--from-step needs --resume RUN");
  auto job = ResolveJob(f, app.remaining());
  if (!job.ok()) return Usage(job.status().message());
  if (f.run_dir.empty()) {
    std::error_code cwd_ec;
    f.run_dir = DefaultRunDir(job->name, std::filesystem::current_path(cwd_ec).string());
    std::string quoted;  // for a shell: 'it'\''s'
    for (char c : f.run_dir) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    std::fprintf(stderr, "holdfastd: run dir %s  (runctl --run-dir '%s' status)\n", f.run_dir.c_str(), quoted.c_str());
  }
  if (!f.job.nnodes.empty() && !f.nodes_given && f.scheduler_name != "slurm" && std::getenv("SLURM_STEP_ID") == nullptr) {
    if (auto r = ParseNodeRange(f.job.nnodes); r.ok()) f.local.nodes = r->max;
  }
  f.local.run_dir = f.run_dir;
  const std::string& run_dir = f.run_dir;
  // A run dir the daemon cannot use is refused before anything is recorded (daemon/run_dir.h).
  if (Status s = PrepareRunDir(run_dir); !s.ok()) return Usage(s.message());

  auto scheduler_owner = MakeScheduler(f.scheduler_name, f.local, run_dir, f.requeue_path, f.slurm_timeout_s);
  if (!scheduler_owner.ok()) return Usage(scheduler_owner.status().message());
  Scheduler& scheduler = **scheduler_owner;
  auto alloc = scheduler.Discover();
  if (!alloc.ok()) return Usage(alloc.status().message());
  if (alloc->this_node > 0) {
    UseUtcLogPattern("holdfastd node " + std::to_string(alloc->this_node) + " " + alloc->self().host);
  }
  const int allocation_nodes = static_cast<int>(alloc->nodes.size());
  if (Status s = ApplyNodeCount(f, allocation_nodes); !s.ok()) return Usage(s.message());
  ResolveSizedDefaults(&*job, TrainingWorldSize(*job, allocation_nodes));

  // The leader owns the run directory for its whole life (held until exit,
  // released by the kernel however it exits). A requeued Slurm job waits for
  // its previous daemon as long as its followers wait for it: Slurm requeues
  // a job whose node stopped answering, and the daemon on that node, cut off,
  // may still be giving up on its own requeue (--slurm-timeout).
  std::unique_ptr<RunLock> lock;
  if (alloc->leader()) {
    auto l = RunLock::Acquire(run_dir, f.wait_for_lock);
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
  so.resume_run = f.resume;
  so.from_step = f.from_step;
  so.allocation = *alloc;
  so.cluster_port = f.cluster_port;
  so.control_port = f.control_port;
  so.metrics_addr = f.metrics_addr;
  so.metrics_textfile = f.metrics_textfile;
  return RunDaemon(std::move(so), &scheduler);
}
