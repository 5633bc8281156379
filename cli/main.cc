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

// Absolute, so that messages and a detached holdfastd name the same folder.
std::string Absolute(const std::string& dir) {
  if (!dir.empty() && dir[0] == '/') return dir;
  char cwd[PATH_MAX];
  if (getcwd(cwd, sizeof(cwd)) == nullptr) return dir;
  if (dir.empty() || dir == ".") return cwd;
  return std::string(cwd) + "/" + dir;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace holdfast;
  CLI::App app{
      "runctl: status, lineage and triage of Holdfast training runs.\n"
      "RUN is a run id, a unique prefix of one, or 'latest'."};
  app.footer(std::string("\n") + kExitCodesHelp);
  app.require_subcommand(1);
  app.fallthrough();  // global flags may follow the command: `runctl runs --json`

  const char* env_dir = std::getenv("HOLDFAST_RUN_DIR");
  std::string run_dir = env_dir != nullptr && *env_dir != '\0' ? env_dir : ".";
  bool json = false;
  int timeout_ms = 5000;
  app.add_option("--run-dir", run_dir,
                 "the run directory (lineage.db, holdfastd.sock); default $HOLDFAST_RUN_DIR, "
                 "else the current directory");
  app.add_flag("--json", json, "print one JSON object with stable keys instead of tables");
  app.add_option("--timeout-ms", timeout_ms, "how long to wait for holdfastd's answer")
      ->check(CLI::PositiveNumber);

  std::string run;
  auto* status = app.add_subcommand(
      "status", "live state from holdfastd; the last recorded state when none answers");
  status->add_option("RUN", run, "default: the run holdfastd supervises, else latest");

  int limit = 50;
  auto* runs = app.add_subcommand("runs", "the runs recorded in lineage.db, newest first");
  runs->add_option("--limit", limit, "show at most N runs (0: all)");

  int max_events = 500;
  auto* lineage = app.add_subcommand(
      "lineage", "a run's attempts, generations, checkpoints and events as a timeline");
  lineage->add_option("RUN", run)->required();
  lineage->add_option("--events", max_events, "show the newest N events (0: all)");

  auto* triage = app.add_subcommand(
      "triage", "the run's last incident: culprit ranks, exit, logs, action, runbook");
  triage->add_option("RUN", run)->required();

  std::string report_out, report_metrics;
  std::string best_metric = "eval_loss";
  auto* best = app.add_subcommand(
      "best", "RUN's best checkpoint by an eval metric (lower loss, higher accuracy/reward): step, value, path");
  best->add_option("RUN", run)->required();
  best->add_option("--metric", best_metric, "the eval metric to rank by (default eval_loss)");

  auto* report = app.add_subcommand(
      "report", "write RUN's report: one HTML file (charts, timeline, lost time, triage)");
  report->add_option("RUN", run)->required();
  report->add_option("--out", report_out, "the file to write (default: RUN_DIR/report-RUN.html)");
  report->add_option("--metrics", report_metrics,
                     "the trainer's metrics.jsonl (default: found from the run's job config)");

  auto* checkpoint = app.add_subcommand("checkpoint", "ask holdfastd to save a checkpoint now");
  checkpoint->add_option("RUN", run)->required();
  bool checkpoint_wait = false;
  int checkpoint_timeout_s = 600;
  checkpoint->add_flag("--wait", checkpoint_wait, "wait until the checkpoint has committed");
  checkpoint->add_option("--timeout", checkpoint_timeout_s,
                         "with --wait: give up after this many seconds (exit 5); default 600")
      ->check(CLI::PositiveNumber);

  bool stop_wait = false;
  int stop_timeout_s = 600;
  auto* stop = app.add_subcommand(
      "stop", "ask holdfastd to stop RUN: the ranks checkpoint and stop, the run ends stopped");
  stop->add_option("RUN", run, "default: the run holdfastd supervises");
  stop->add_flag("--wait", stop_wait, "wait until the run has stopped and print how it ended");
  stop->add_option("--timeout", stop_timeout_s,
                   "with --wait: give up after this many seconds (exit 5); default 600")
      ->check(CLI::PositiveNumber);

  int64_t from_step = -1;
  bool force = false;
  auto* resume = app.add_subcommand(
      "resume", "relaunch RUN here as a new attempt (a detached holdfastd --resume)");
  resume->add_option("RUN", run)->required();
  auto* from_step_opt = resume->add_option(
      "--from-step", from_step, "start from the committed checkpoint of step N (default: newest)");
  resume->add_flag("--force", force,
                   "resume even a run that succeeded (it trains on past the end it reached)");
  bool resume_wait = false;
  int resume_timeout_s = 600;
  resume->add_flag("--wait", resume_wait, "wait until the resumed ranks have restored and completed a step");
  resume->add_option("--timeout", resume_timeout_s, "with --wait: give up after this many seconds (exit 5)")
      ->check(CLI::PositiveNumber);

  auto* health = app.add_subcommand(
      "health", "run holdfast-health on this node (arguments after -- are passed to it)");
  std::vector<std::string> health_args;
  health->add_option("ARGS", health_args, "passed to holdfast-health, e.g. -- --checks gpu");

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
  ctx.run_dir = Absolute(run_dir);
  ctx.json = json;
  ctx.timeout = std::chrono::milliseconds(timeout_ms);
  ctx.out = &std::cout;
  ctx.err = &std::cerr;

  // The commands return Status-based exit codes; this only keeps a library
  // surprise (std::bad_alloc, a JSON type error) from ending in an abort.
  try {
    if (*status) return CmdStatus(ctx, run);
    if (*runs) return CmdRuns(ctx, limit);
    if (*lineage) return CmdLineage(ctx, run, max_events);
    if (*triage) return CmdTriage(ctx, run);
    if (*best) return CmdBest(ctx, run, best_metric);
    if (*report) return CmdReport(ctx, run, report_out, report_metrics);
    if (*checkpoint) return CmdCheckpoint(ctx, run, checkpoint_wait, std::chrono::seconds(checkpoint_timeout_s));
    if (*stop) return CmdStop(ctx, run, stop_wait, std::chrono::seconds(stop_timeout_s));
    if (*resume) {
      std::optional<int64_t> step;
      if (from_step_opt->count() > 0) {
        if (from_step < 0) {
          std::cerr << "runctl: --from-step must be >= 0\n";
          return kRunctlUsage;
        }
        step = from_step;
      }
      return CmdResume(ctx, run, step, force, resume_wait, std::chrono::seconds(resume_timeout_s));
    }
    if (*health) return CmdHealth(ctx, health_args);
  } catch (const std::exception& e) {
    std::cerr << "runctl: internal error: " << e.what() << "\n";
    return kRunctlFailure;
  }
  return kRunctlUsage;
}
