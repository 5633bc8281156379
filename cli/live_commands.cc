// runctl's live commands: status, checkpoint, stop, resume and health — the
// ones that talk to the run's holdfastd (cli/daemon_client.h) or start a
// program on this node. Their waits are cli/live_waits.h's.
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/daemon_client.h"
#include "cli/format.h"
#include "cli/live_waits.h"
#include "cli/rank_summary.h"
#include "common/run_spec.h"
#include "daemon/resume_point.h"
#include "daemon/run_lock.h"
#include "lineage/lineage_db.h"
#include "scheduler/local_scheduler.h"
#ifdef HOLDFAST_HAVE_SLURM
#include "scheduler/slurm_scheduler.h"
#endif

extern char** environ;

namespace holdfast {

namespace {

using json = nlohmann::json;

// A wait's error -> runctl's exit code (cli/live_waits.h).
int ExitForWait(const Status& s) {
  switch (s.code()) {
    case StatusCode::kTimeout: return kRunctlStillRunning;
    case StatusCode::kUnavailable: return kRunctlUnreachable;
    default: return kRunctlFailure;
  }
}

// The exit code for a request the daemon did not answer.
template <typename T>
int ExitForUnanswered(const Reply<T>& r) {
  return r.unreachable() ? kRunctlUnreachable : kRunctlFailure;
}

// "CODE: message" of a refusal.
template <typename T>
std::string Refusal(const Reply<T>& r) {
  return r.refusal_code() + ": " + r.status().message();
}

// The run id to send to the daemon for RUN: lineage.db's when it can resolve
// it (the daemon refuses another run's id); without a lineage.db, RUN as
// given, or "" (the daemon alone decides). Returns an exit code on failure.
int RunIdForDaemon(const CliContext& c, const std::string& spec, std::string* run_id) {
  Result<std::unique_ptr<LineageDb>> db = OpenDb(c);
  if (db.ok()) {
    Result<RunRecord> run = (*db)->FindRun(spec);
    if (!run.ok()) return Fail(c, ExitForRunLookup(run.status()), run.status().message());
    *run_id = run->run_id;
  } else if (db.status().code() != StatusCode::kNotFound) {
    return Fail(c, kRunctlFailure, db.status().message());
  } else if (!IsLatestRunSpec(spec)) {
    *run_id = spec;
  }
  return kRunctlOk;
}

// A live line on the terminal while a person waits ("waiting for the
// checkpoint of step 140 to commit  [  ###     ]  3.2 s"), redrawn in place on
// stderr; silent when stderr is not a terminal or the output is JSON.
class WaitLine {
 public:
  WaitLine(const CliContext& c, std::string what)
      : on_(!c.json && isatty(STDERR_FILENO) == 1),
        what_(std::move(what)),
        clock_(c.clock),
        t0_ns_(clock_->MonotonicNs()) {}
  ~WaitLine() { Done(); }
  void Tick() {
    if (!on_) return;
    const double s = static_cast<double>(clock_->MonotonicNs() - t0_ns_) / 1e9;
    constexpr int kWidth = 12, kBlock = 3;
    const int pos = static_cast<int>(s * 4) % (2 * (kWidth - kBlock));  // bounces: no end is known
    const int at = pos < kWidth - kBlock ? pos : 2 * (kWidth - kBlock) - pos;
    std::string bar(kWidth, ' ');
    for (int i = 0; i < kBlock; ++i) bar[at + i] = '#';
    std::fprintf(stderr, "\r%s  [%s] %6.1f s", what_.c_str(), bar.c_str(), s);
    std::fflush(stderr);
    drawn_ = true;
  }
  // Clears the line (before anything else is printed).
  void Done() {
    if (drawn_) std::fprintf(stderr, "\r%*s\r", static_cast<int>(what_.size()) + 26, "");
    drawn_ = false;
  }

 private:
  bool on_;
  bool drawn_ = false;
  std::string what_;
  Clock* clock_;  // not owned
  int64_t t0_ns_;
};

std::string SecondsTenths(std::chrono::nanoseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", std::chrono::duration<double>(d).count());
  return buf;
}

int PrintStopped(const CliContext& c, const RunRecord& run, const json& result) {
  std::optional<int64_t> ckpt;
  if (Result<std::unique_ptr<LineageDb>> db = OpenDb(c); db.ok()) {
    Result<std::optional<CheckpointRecord>> k = (*db)->NewestCommittedCheckpoint(run.run_id);
    if (k.ok() && k->has_value()) ckpt = (*k)->step;
  }
  const int exit = run.state == RunState::kFailed ? kRunctlFailure : kRunctlOk;
  if (c.json) {
    PrintJson(c, {{"run_id", run.run_id},
                  {"result", result},
                  {"final", RunJson(run)},
                  {"last_checkpoint_step", OptJson(ckpt)}});
    return exit;
  }
  *c.out << "run " << run.run_id << " (" << run.name << ") ended "
         << StateAndCause(RunStateName(run.state), run.cause) << "\n"
         << "  last step " << OptText(run.last_step) << ", newest committed checkpoint "
         << (ckpt ? "step " + std::to_string(*ckpt) : std::string("none")) << "\n";
  if (run.state != RunState::kSucceeded) {
    *c.out << "  continue it:  runctl --run-dir " << ShellWord(c.run_dir) << " resume " << run.run_id << "\n";
  }
  return exit;
}

// `stop --wait` after the daemon accepted the stop.
int WaitForStopped(const CliContext& c, const DaemonClient& daemon, const std::string& run_id,
                   const std::string& which, std::chrono::milliseconds wait_timeout, const json& result) {
  if (!c.json) *c.out << "waiting for " << which << " to stop...\n" << std::flush;
  WaitLine line(c, "stopping " + which);
  StopWaitSpec spec;
  spec.run_id = run_id;
  spec.run_dir = c.run_dir;
  spec.read_run = [&c, &run_id] { return ReadRun(c, run_id); };
  spec.timeout = wait_timeout;
  spec.ping_timeout = c.timeout;
  Result<StopSeen> seen = WaitForStop(daemon, spec, c.clock, [&line] { line.Tick(); });
  line.Done();
  if (!seen.ok()) return Fail(c, ExitForWait(seen.status()), seen.status().message());
  if (seen->run) return PrintStopped(c, *seen->run, result);
  // Nothing to read the outcome from: the daemon's exit is all there is.
  if (c.json) {
    PrintJson(c, {{"run_id", run_id}, {"result", result}, {"final", nullptr}});
  } else {
    *c.out << "holdfastd has exited; " << DbPath(c) << " holds no record of " << which
           << ", so how it ended is not known here\n";
  }
  return kRunctlOk;
}



}  // namespace

int CmdStatus(const CliContext& c, const std::string& run, const RankSelection& sel) {
  const DaemonClient daemon(c.run_dir, c.timeout, c.via);
  Reply<StatusAnswer> reply = daemon.GetStatus();
  if (reply.unreachable()) return PrintRecordedStatus(c, run, reply.status().message(), sel);
  if (reply.refused()) return Fail(c, kRunctlFailure, "holdfastd refused 'status': " + Refusal(reply));
  if (!reply.ok()) return Fail(c, kRunctlFailure, reply.status().message());
  if (!RunSpecNames(run, reply->run_id)) {
    return PrintRecordedStatus(c, run, "holdfastd in " + c.run_dir + " supervises run " + reply->run_id +
                                           ", not " + run, sel);
  }
  if (!reply->status.ok()) {
    if (c.json) {  // as it came: a newer daemon's status is still shown whole
      PrintJson(c, {{"live", true}, {"source", "holdfastd"}, {"health", nullptr},
                    {"status", json::parse(reply->result_json, nullptr, false)}});
      return kRunctlOk;
    }
    return Fail(c, kRunctlFailure, "holdfastd's status reply is not one runctl understands (" +
                                       reply->status.status().message() + "); try --json");
  }
  const RunStatus& st = *reply->status;
  if (Status ok = CheckSelection(sel, RankRows(st)); !ok.ok()) return Fail(c, kRunctlUsage, ok.message());
  // A daemon that has finished says how through lineage.
  std::optional<RunState> recorded;
  if (st.state == "finished") {
    if (Result<RunRecord> r = ReadRun(c, st.run_id); r.ok()) recorded = r->state;
  }
  const RunHealth health = LiveHealth(st, recorded);
  if (c.json) {
    PrintJson(c, {{"live", true}, {"source", "holdfastd"}, {"health", RunHealthName(health)},
                  {"status", json::parse(reply->result_json, nullptr, false)}});
  } else {
    PrintLiveStatus(*c.out, st, sel);
  }
  return ExitForHealth(health);
}

int CmdCheckpoint(const CliContext& c, const std::string& spec, bool wait, std::chrono::milliseconds wait_timeout) {
  std::string run_id;
  if (int exit = RunIdForDaemon(c, spec, &run_id); exit != kRunctlOk) return exit;
  const DaemonClient daemon(c.run_dir, c.timeout, c.via);
  Reply<CheckpointAnswer> resp = daemon.Checkpoint(run_id);
  if (resp.refused()) return Fail(c, kRunctlFailure, "holdfastd refused: " + Refusal(resp));
  if (!resp.ok()) {
    return Fail(c, ExitForUnanswered(resp), "cannot ask holdfastd for a checkpoint: " + resp.status().message());
  }
  const json result = json::parse(resp->result_json, nullptr, false);
  const int64_t requested = resp->requested_at_step.value_or(-1);  // -1: the daemon did not say
  if (wait) {
    WaitLine line(c, "waiting for the checkpoint" +
                         (requested >= 0 ? " (requested at step " + std::to_string(requested) + ")" : std::string()) +
                         " to commit");
    Result<Waited> done = WaitForCheckpointCommit(daemon, requested, wait_timeout, c.clock, [&line] { line.Tick(); });
    line.Done();
    if (!done.ok()) return Fail(c, ExitForWait(done.status()), done.status().message());
    if (c.json) {
      PrintJson(c, {{"run_id", run_id},
                    {"result", result},
                    {"committed_step", done->step},
                    {"waited_s", std::chrono::duration<double>(done->waited).count()}});
    } else {
      *c.out << "checkpoint of step " << done->step << " committed (waited " << SecondsTenths(done->waited)
             << " s)\n";
    }
    return kRunctlOk;
  }
  if (c.json) {
    PrintJson(c, {{"run_id", run_id}, {"result", result}});
    return kRunctlOk;
  }
  std::string step = requested >= 0 ? std::to_string(requested) : "?";
  *c.out << "checkpoint requested at step " << step << "; `runctl --run-dir " << ShellWord(c.run_dir)
         << " lineage " << (run_id.empty() ? "latest" : run_id)
         << "` shows it once it is committed\n";
  return kRunctlOk;
}

int CmdStop(const CliContext& c, const std::string& spec, bool wait, std::chrono::milliseconds wait_timeout) {
  const DaemonClient daemon(c.run_dir, c.timeout, c.via);
  std::string run_id;
  if (spec.empty()) {
    // No RUN: the run the live daemon supervises, which --wait needs to name.
    Reply<StatusAnswer> st = daemon.GetStatus();
    if (!st.ok() && !st.refused()) {
      return Fail(c, ExitForUnanswered(st), "cannot ask holdfastd to stop its run: " + st.status().message() +
                                                " (`runctl status` shows the last recorded state)");
    }
    if (st.ok()) run_id = st->run_id;
  } else if (int exit = RunIdForDaemon(c, spec, &run_id); exit != kRunctlOk) {
    return exit;
  }
  const std::string which = run_id.empty() ? std::string("its run") : "run " + run_id;
  Reply<StopAnswer> resp = daemon.Stop(run_id);
  if (resp.refused()) return Fail(c, kRunctlFailure, "holdfastd refused to stop " + which + ": " + Refusal(resp));
  if (!resp.ok()) {
    return Fail(c, ExitForUnanswered(resp), "cannot ask holdfastd to stop " + which + ": " +
                                                resp.status().message() +
                                                " (`runctl status` shows the last recorded state)");
  }
  const json result = json::parse(resp->result_json, nullptr, false);
  if (!c.json) {
    *c.out << "asked holdfastd to stop " << which << ": the ranks checkpoint and stop; `runctl --run-dir "
           << ShellWord(c.run_dir) << " status` to follow\n";
  }
  if (!wait) {
    if (c.json) PrintJson(c, {{"run_id", run_id}, {"result", result}});
    return kRunctlOk;
  }
  return WaitForStopped(c, daemon, run_id, which, wait_timeout, result);
}

int CmdResume(const CliContext& c, const std::string& spec, std::optional<int64_t> from_step, bool force,
              bool wait, std::chrono::milliseconds wait_timeout) {
  RunLookup l = LookUp(c, spec);
  if (l.exit != kRunctlOk) return l.exit;
  const RunRecord& run = l.run;
  if (run.state == RunState::kSucceeded && !force) {
    return Fail(c, kRunctlFailure,
                "run " + run.run_id + " succeeded" + (run.cause.empty() ? "" : " (" + run.cause + ")") +
                    ": there is nothing left to train, and resuming it would only add an empty "
                    "attempt. To train it further anyway (e.g. after raising its step limit), "
                    "add --force");
  }
  if (from_step) {
    Result<std::vector<CheckpointRecord>> ckpts = l.db->Checkpoints(run.run_id);
    if (!ckpts.ok()) return Fail(c, kRunctlFailure, ckpts.status().message());
    // What holdfastd --from-step checks too (daemon/resume_point.h).
    if (Status ok = CheckResumeStep(run.run_id, *ckpts, *from_step, c.run_dir); !ok.ok()) {
      return Fail(c, kRunctlNotFound, ok.message());
    }
  }
  // One daemon per run directory: refuse while one holds the run's lock —
  // also when it does not answer (stopped, or busy).
  if (std::optional<pid_t> holder = RunLock::Holder(c.run_dir); holder.has_value()) {
    return Fail(c, kRunctlFailure,
                "holdfastd (pid " + std::to_string(*holder) + ") is supervising " + c.run_dir +
                    " (it holds " + RunLock::LockPath(c.run_dir, 0) +
                    ", answering or not); stop it first (runctl stop, or kill it), then resume");
  }

  if (run.scheduler == SchedulerKind::kSlurm) {
    // A Slurm run resumes as a Slurm job: its queued job released, or its saved submission again.
#ifdef HOLDFAST_HAVE_SLURM
    Result<std::string> what = ResumeSlurmRun(c.run_dir, run.run_id, run.slurm_job_id, from_step);
    if (!what.ok()) return Fail(c, kRunctlFailure, what.status().message());
    if (c.json) {
      PrintJson(c, {{"run_id", run.run_id}, {"slurm", *what}, {"from_step", OptJson(from_step)}});
      return kRunctlOk;
    }
    *c.out << *what << "\n  status:  runctl --run-dir " << ShellWord(c.run_dir) << " status\n";
    return kRunctlOk;
#else
    return Fail(c, kRunctlFailure, "run " + run.run_id + " runs under Slurm, and this runctl was built without "
                                   "libslurm: rebuild with libslurm-dev installed, or sbatch the run's script again");
#endif
  }
  std::vector<std::string> looked;
  std::string daemon_path = FindTool("holdfastd", "RUNCTL_HOLDFASTD", "daemon", &looked);
  if (daemon_path.empty()) {
    return Fail(c, kRunctlFailure, "holdfastd not found (looked in " + Join(looked, ", ") + ")");
  }
  std::vector<std::string> args = {"--run-dir", c.run_dir, "--resume", run.run_id};
  if (from_step) {
    args.push_back("--from-step");
    args.push_back(std::to_string(*from_step));
  }
  const std::string log = c.run_dir + "/holdfastd.log";
  // The local scheduler's detached start: its own session, only stdio
  // inherited, an exec failure reported here.
  if (Status s = StartDetachedDaemon(daemon_path, args, log); !s.ok()) return Fail(c, kRunctlFailure, s.message());

  const std::string from = from_step ? "step " + std::to_string(*from_step)
                                     : std::string("the newest committed checkpoint");
  json started = {{"run_id", run.run_id}, {"daemon", daemon_path}, {"from_step", OptJson(from_step)}, {"log", log}};
  if (c.json && !wait) {
    PrintJson(c, started);
    return kRunctlOk;
  }
  if (!c.json) {
    *c.out << "started holdfastd resuming run " << run.run_id << " from "
           << from << " as a new attempt\n"
           << "  follow it:  tail -f " << ShellWord(log) << "\n"
           << "  status:     runctl --run-dir " << ShellWord(c.run_dir) << " status\n";
  }
  if (!wait) return kRunctlOk;
  const DaemonClient daemon(c.run_dir, c.timeout, c.via);
  WaitLine line(c, "resuming run " + run.run_id + " (restore, then the first step)");
  Result<Waited> trained = WaitForTraining(
      daemon, [&c, &run] { return ReadRun(c, run.run_id); }, log, wait_timeout, c.clock, [&line] { line.Tick(); });
  line.Done();
  if (!trained.ok()) return Fail(c, ExitForWait(trained.status()), trained.status().message());
  if (c.json) {
    started["training_at_step"] = trained->step;
    PrintJson(c, started);
  } else {
    *c.out << "run " << run.run_id << " is training again at step " << trained->step << " (waited "
           << SecondsTenths(trained->waited) << " s)\n";
  }
  return kRunctlOk;
}

int CmdHealth(const CliContext& c, const std::vector<std::string>& passthrough) {
  std::vector<std::string> looked;
  std::string tool = FindTool("holdfast-health", "RUNCTL_HOLDFAST_HEALTH", "health", &looked);
  if (tool.empty()) {
    return Fail(c, kRunctlFailure,
                "holdfast-health not found (looked in " + Join(looked, ", ") + ")");
  }
  std::vector<std::string> args = {tool};
  if (c.json) args.push_back("--json");
  args.insert(args.end(), passthrough.begin(), passthrough.end());
  std::vector<char*> argv = Argv(args);
  c.out->flush();
  pid_t pid = 0;
  int rc = posix_spawn(&pid, tool.c_str(), nullptr, nullptr, argv.data(), environ);
  if (rc != 0) return Fail(c, kRunctlFailure, ErrnoError("run " + tool, rc).message());
  int ws = 0;
  while (waitpid(pid, &ws, 0) < 0) {
    if (errno != EINTR) return Fail(c, kRunctlFailure, ErrnoError("wait for " + tool, errno).message());
  }
  if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0) return kRunctlOk;
  if (WIFSIGNALED(ws)) {
    return Fail(c, kRunctlFailure, "holdfast-health was killed by signal " + std::to_string(WTERMSIG(ws)));
  }
  return kRunctlFailure;  // a failed check: holdfast-health has said which
}

}  // namespace holdfast
