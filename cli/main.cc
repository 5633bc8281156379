// runctl: the operator's view of a Holdfast run (flags only; cli/commands.h does the work).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <climits>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace {

using namespace holdfast;

// Absolute, so that messages and a detached holdfastd name the same folder.
std::string Absolute(const std::string& dir) {
  if (!dir.empty() && dir[0] == '/') return dir;
  char cwd[PATH_MAX];
  if (getcwd(cwd, sizeof(cwd)) == nullptr) return dir;
  if (dir.empty() || dir == ".") return cwd;
  return std::string(cwd) + "/" + dir;
}

// What the command line says, filled in by CLI11.
struct Flags {
  std::string run_dir = ".";
  bool json = false;
  int timeout_ms = 5000;
  std::string run;
  int limit = 50;
  int max_events = 500;
  std::string report_out, report_metrics;
  std::string best_metric = "eval_loss";
  bool checkpoint_wait = false;
  int checkpoint_timeout_s = 600;
  bool stop_wait = false;
  int stop_timeout_s = 600;
  int64_t from_step = -1;
  bool force = false;
  bool resume_wait = false;
  int resume_timeout_s = 600;
  std::vector<std::string> health_args;
};

// The subcommands, to tell which one was given.
struct Commands {
  CLI::App* status = nullptr;
  CLI::App* runs = nullptr;
  CLI::App* lineage = nullptr;
  CLI::App* triage = nullptr;
  CLI::App* best = nullptr;
  CLI::App* report = nullptr;
  CLI::App* checkpoint = nullptr;
  CLI::App* stop = nullptr;
  CLI::App* resume = nullptr;
  CLI::Option* from_step = nullptr;
  CLI::App* health = nullptr;
};

void AddGlobalFlags(CLI::App& app, Flags& f) {
  const char* env_dir = std::getenv("HOLDFAST_RUN_DIR");
  if (env_dir != nullptr && *env_dir != '\0') f.run_dir = env_dir;
  app.add_option("--run-dir", f.run_dir,
                 "the run directory (lineage.db, holdfastd.sock); default $HOLDFAST_RUN_DIR, "
                 "else the current directory");
  app.add_flag("--json", f.json, "print one JSON object with stable keys instead of tables");
  app.add_option("--timeout-ms", f.timeout_ms, "how long to wait for holdfastd's answer")
      ->check(CLI::PositiveNumber);
}

// The commands that show a run: live or recorded state, lineage, triage, best, report.
void AddShowCommands(CLI::App& app, Flags& f, Commands& c) {
  c.status = app.add_subcommand("status", "live state from holdfastd; the last recorded state when none answers");
  c.status->add_option("RUN", f.run, "default: the run holdfastd supervises, else latest");

  c.runs = app.add_subcommand("runs", "the runs recorded in lineage.db, newest first");
  c.runs->add_option("--limit", f.limit, "show at most N runs (0: all)");

  c.lineage = app.add_subcommand("lineage", "a run's attempts, generations, checkpoints and events as a timeline");
  c.lineage->add_option("RUN", f.run)->required();
  c.lineage->add_option("--events", f.max_events, "show the newest N events (0: all)");

  c.triage = app.add_subcommand("triage", "the run's last incident: culprit ranks, exit, logs, action, runbook");
  c.triage->add_option("RUN", f.run)->required();

  c.best = app.add_subcommand(
      "best", "RUN's best checkpoint by an eval metric (lower loss, higher accuracy/reward): step, value, path");
  c.best->add_option("RUN", f.run)->required();
  c.best->add_option("--metric", f.best_metric, "the eval metric to rank by (default eval_loss)");

  c.report = app.add_subcommand("report", "write RUN's report: one HTML file (charts, timeline, lost time, triage)");
  c.report->add_option("RUN", f.run)->required();
  c.report->add_option("--out", f.report_out, "the file to write (default: RUN_DIR/report-RUN.html)");
  c.report->add_option("--metrics", f.report_metrics,
                       "the trainer's metrics.jsonl (default: found from the run's job config)");
}

// The commands that act: checkpoint, stop, resume, health.
void AddActionCommands(CLI::App& app, Flags& f, Commands& c) {
  c.checkpoint = app.add_subcommand("checkpoint", "ask holdfastd to save a checkpoint now");
  c.checkpoint->add_option("RUN", f.run)->required();
  c.checkpoint->add_flag("--wait", f.checkpoint_wait, "wait until the checkpoint has committed");
  c.checkpoint->add_option("--timeout", f.checkpoint_timeout_s,
                           "with --wait: give up after this many seconds (exit 5); default 600")
      ->check(CLI::PositiveNumber);

  c.stop = app.add_subcommand("stop", "ask holdfastd to stop RUN: the ranks checkpoint and stop, the run ends stopped");
  c.stop->add_option("RUN", f.run, "default: the run holdfastd supervises");
  c.stop->add_flag("--wait", f.stop_wait, "wait until the run has stopped and print how it ended");
  c.stop->add_option("--timeout", f.stop_timeout_s, "with --wait: give up after this many seconds (exit 5); default 600")
      ->check(CLI::PositiveNumber);

  c.resume = app.add_subcommand("resume", "relaunch RUN here as a new attempt (a detached holdfastd --resume)");
  c.resume->add_option("RUN", f.run)->required();
  c.from_step = c.resume->add_option("--from-step", f.from_step,
                                     "start from the committed checkpoint of step N (default: newest)");
  c.resume->add_flag("--force", f.force, "resume even a run that succeeded (it trains on past the end it reached)");
  c.resume->add_flag("--wait", f.resume_wait, "wait until the resumed ranks have restored and completed a step");
  c.resume->add_option("--timeout", f.resume_timeout_s, "with --wait: give up after this many seconds (exit 5)")
      ->check(CLI::PositiveNumber);

  c.health = app.add_subcommand("health", "run holdfast-health on this node (arguments after -- are passed to it)");
  c.health->add_option("ARGS", f.health_args, "passed to holdfast-health, e.g. -- --checks gpu");
}

int Dispatch(const CliContext& ctx, const Flags& f, const Commands& c) {
  if (*c.status) return CmdStatus(ctx, f.run);
  if (*c.runs) return CmdRuns(ctx, f.limit);
  if (*c.lineage) return CmdLineage(ctx, f.run, f.max_events);
  if (*c.triage) return CmdTriage(ctx, f.run);
  if (*c.best) return CmdBest(ctx, f.run, f.best_metric);
  if (*c.report) return CmdReport(ctx, f.run, f.report_out, f.report_metrics);
  if (*c.checkpoint) {
    return CmdCheckpoint(ctx, f.run, f.checkpoint_wait, std::chrono::seconds(f.checkpoint_timeout_s));
  }
  if (*c.stop) return CmdStop(ctx, f.run, f.stop_wait, std::chrono::seconds(f.stop_timeout_s));
  if (*c.resume) {
    std::optional<int64_t> step;
    if (c.from_step->count() > 0) {
      if (f.from_step < 0) {
        std::cerr << "runctl: --from-step must be >= 0\n";
        return kRunctlUsage;
      }
      step = f.from_step;
    }
    return CmdResume(ctx, f.run, step, f.force, f.resume_wait, std::chrono::seconds(f.resume_timeout_s));
  }
  if (*c.health) return CmdHealth(ctx, f.health_args);
  return kRunctlUsage;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "runctl: status, lineage and triage of Holdfast training runs.\n"
      "RUN is a run id, a unique prefix of one, or 'latest'."};
  app.footer(std::string("\n") + kExitCodesHelp);
  app.require_subcommand(1);
  app.fallthrough();  // global flags may follow the command: `runctl runs --json`
  Flags flags;
  Commands commands;
  AddGlobalFlags(app, flags);
  AddShowCommands(app, flags, commands);
  AddActionCommands(app, flags, commands);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kRunctlUsage;
  }

  CliContext ctx;
  ctx.run_dir = Absolute(flags.run_dir);
  ctx.json = flags.json;
  ctx.timeout = std::chrono::milliseconds(flags.timeout_ms);
  ctx.out = &std::cout;
  ctx.err = &std::cerr;

  // The commands return Status-based exit codes; this only keeps a library
  // surprise (std::bad_alloc, a JSON type error) from ending in an abort.
  try {
    return Dispatch(ctx, flags, commands);
  } catch (const std::exception& e) {
    std::cerr << "runctl: internal error: " << e.what() << "\n";
    return kRunctlFailure;
  }
}
