// runctl: the operator's view of a Holdfast run (flags only; cli/commands.h does the work).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <climits>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/rank_summary.h"
#include "common/program_cli.h"

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
  std::string via = "auto";
  std::string run;
  int limit = 50;
  int max_events = 500;
  std::string report_out, report_metrics;
  std::string best_metric = "eval_loss";
  std::vector<std::string> compare_runs;  // compare RUN...
  std::string compare_metric;             // compare --metric
  std::string compare_html;               // compare --html
  std::string sweep_job, sweep_vary;      // sweep JOB --vary
  int sweep_side_by_side = 1;
  bool checkpoint_wait = false;
  int checkpoint_timeout_s = 600;
  bool stop_wait = false;
  int stop_timeout_s = 600;
  int64_t from_step = -1;
  bool force = false;
  bool resume_wait = false;
  int resume_timeout_s = 600;
  std::vector<std::string> health_args;
  std::string ranks;      // status --rank
  std::string node;       // status --node
  bool all_ranks = false;  // status, triage --all
  std::string incident_number;        // incident N
  std::string incident_format = "md";  // incident --format
  std::string host;                   // node HOST
  std::string runs_all;               // runs --all ROOT
  std::string history_dir;            // node, runs --all --history-dir
  holdfast::HistoryRule history_rule;  // --history-runs, --history-window-days
};

// The subcommands, to tell which one was given.
struct Commands {
  CLI::App* status = nullptr;
  CLI::App* runs = nullptr;
  CLI::App* lineage = nullptr;
  CLI::App* triage = nullptr;
  CLI::App* best = nullptr;
  CLI::App* compare = nullptr;
  CLI::App* sweep = nullptr;
  CLI::App* report = nullptr;
  CLI::App* incident = nullptr;
  CLI::App* node = nullptr;
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
  app.add_option("--via", f.via,
                 "how to reach holdfastd: auto (its socket on this node, else over TCP from another node, "
                 "MUNGE-authenticated), unix, tcp; default auto")
      ->check(CLI::IsMember({"auto", "unix", "tcp"}));
}

// --history-dir, --history-runs, --history-window-days of `cmd`.
void AddHistoryFlags(CLI::App* cmd, Flags& f, const char* dir_default) {
  cmd->add_option("--history-dir", f.history_dir, std::string("the host history (default: ") + dir_default + ")");
  cmd->add_option("--history-runs", f.history_rule.runs,
                  "flag a host credited with incidents in this many runs or more (default 3)");
  cmd->add_option("--history-window-days", f.history_rule.window_days,
                  "... within this many days before now (default 7)");
}

// The write-up of an incident, and the history of hosts across runs.
void AddHistoryCommands(CLI::App& app, Flags& f, Commands& c) {
  c.incident = app.add_subcommand("incident", "the write-up of one of RUN's incidents for a postmortem: timeline, "
                                              "impact, evidence, actions, Slurm jobs, nodes, runbook, open questions");
  c.incident->add_option("RUN", f.run)->required();
  c.incident->add_option("N", f.incident_number, "which incident: 1 is the run's first (default: the latest)");
  c.incident->add_option("--format", f.incident_format, "md (Markdown, the default) or json (same fields as --json)")
      ->check(CLI::IsMember({"md", "json"}));
  c.node = app.add_subcommand("node", "HOST's incidents across runs and jobs, from the host history; says whether it "
                                      "is flagged");
  c.node->add_option("HOST", f.host, "the host name, as the scheduler names it")->required();
  AddHistoryFlags(c.node, f, "the nearest .holdfast/hosts at or above --run-dir");
  AddHistoryFlags(c.runs, f, "ROOT/.holdfast/hosts");
}

// The commands that show a run: live or recorded state, lineage, triage, best, report.
void AddShowCommands(CLI::App& app, Flags& f, Commands& c) {
  c.status = app.add_subcommand("status", "live state from holdfastd (the last recorded state when none answers): the "
                                          "ranks by state and node, those not healthy; exits 6 hung, 7 failed, 8 stopped");
  c.status->add_option("RUN", f.run, "default: the run holdfastd supervises, else latest");
  CLI::Option* all = c.status->add_flag("--all", f.all_ranks, "every rank a row, every column (default: the ranks "
                                                              "summarised by state and node, only the unhealthy listed)");
  c.status->add_option("--rank", f.ranks, "only these ranks' full rows: R[,R..], ranges too (--rank 3,8-11)")
      ->excludes(all);
  c.status->add_option("--node", f.node, "only the full rows of the ranks on this node (host name or index)")
      ->excludes(all);

  c.runs = app.add_subcommand("runs", "the runs recorded in lineage.db, newest first (--all ROOT: every run dir "
                                      "under ROOT, and the hosts flagged across them)");
  c.runs->add_option("--limit", f.limit, "show at most N runs (0: all); with --all, per run directory");
  c.runs->add_option("--all", f.runs_all, "every run directory (a folder with a lineage.db) under this folder, at "
                                          "most 3 levels down, and the hosts its host history flags");

  c.lineage = app.add_subcommand("lineage", "a run's attempts, generations, checkpoints and events as a timeline");
  c.lineage->add_option("RUN", f.run)->required();
  c.lineage->add_option("--events", f.max_events, "show the newest N events (0: all)");

  c.triage = app.add_subcommand("triage", "the run's last incident: culprit ranks, exit, logs, action, runbook");
  c.triage->add_option("RUN", f.run)->required();
  c.triage->add_flag("--all", f.all_ranks, "every other rank a line (default: folded by state)");

  c.best = app.add_subcommand(
      "best", "RUN's best checkpoint by an eval metric (lower loss, higher accuracy/reward): step, value, path");
  c.best->add_option("RUN", f.run)->required();
  c.best->add_option("--metric", f.best_metric, "the eval metric to rank by (default eval_loss)");

  c.compare = app.add_subcommand(
      "compare", "runs side by side by an eval metric: each run's best and last value, then the metric at every "
                 "evaluated checkpoint, a column per run (a sweep's members)");
  c.compare->add_option("RUN", f.compare_runs, "the runs (default: every run of the run directory, oldest first)");
  c.compare->add_option("--metric", f.compare_metric,
                        "the eval metric (default: eval_loss where recorded, else the first one the runs carry)");
  c.compare->add_option("--html", f.compare_html,
                        "also write the comparison as an HTML page here: the metric's curve per run, the tables");

  c.sweep = app.add_subcommand("sweep", "run JOB once per value of a parameter, each member its own holdfastd and run "
                                        "directory (RUN_DIR/sweep-NAME/NAME-VALUE), then compare them");
  c.sweep->add_option("JOB", f.sweep_job, "the job file; {value} is replaced by each value, {sweep} by the member's "
                                          "tag (put it in every output path)")->required();
  c.sweep->add_option("--vary", f.sweep_vary, "NAME=V1,V2,... (e.g. lr=1e-4,3e-4,1e-3)")->required();
  c.sweep->add_option("--side-by-side", f.sweep_side_by_side, "members run at a time (default 1: in turn)");
  c.sweep->add_option("--metric", f.compare_metric, "the eval metric the members are compared by (as compare's)");

  c.report = app.add_subcommand("report", "write RUN's report: one HTML file (charts, timeline, lost time, triage)");
  c.report->add_option("RUN", f.run)->required();
  c.report->add_option("--out", f.report_out, "the file to write (default: RUN_DIR/report-RUN.html)");
  c.report->add_option("--metrics", f.report_metrics,
                       "the trainer's metrics.jsonl (default: found from the run's job config)");
  AddHistoryCommands(app, f, c);
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
  RankSelection sel;
  sel.all = f.all_ranks;
  sel.node = f.node;
  if (!f.ranks.empty()) {
    Result<std::vector<int>> ranks = ParseRankList(f.ranks);
    if (!ranks.ok()) {
      std::cerr << "runctl: " << ranks.status().message() << "\n";
      return kRunctlUsage;
    }
    sel.ranks = *ranks;
  }
  if (*c.status) return CmdStatus(ctx, f.run, sel);
  if (*c.runs && !f.runs_all.empty()) return CmdRunsAll(ctx, f.runs_all, f.limit, f.history_dir, f.history_rule);
  if (*c.runs) return CmdRuns(ctx, f.limit);
  if (*c.incident) return CmdIncident(ctx, f.run, f.incident_number, f.incident_format);
  if (*c.node) return CmdNode(ctx, f.host, f.history_dir, f.history_rule);
  if (*c.lineage) return CmdLineage(ctx, f.run, f.max_events);
  if (*c.triage) return CmdTriage(ctx, f.run, sel);
  if (*c.best) return CmdBest(ctx, f.run, f.best_metric);
  if (*c.compare) return CmdCompare(ctx, f.compare_runs, f.compare_metric, f.compare_html);
  if (*c.sweep) return CmdSweep(ctx, f.sweep_job, f.sweep_vary, f.sweep_side_by_side, f.compare_metric);
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
#ifdef HOLDFAST_HAVE_SLURM
  AddProgramConventions(app, "runctl", kBuiltAgainstSlurm, kExitCodesHelp);  // --version, codes in --help
#else
  AddProgramConventions(app, "runctl", kBuiltAgainstNothing, kExitCodesHelp);
#endif
  app.require_subcommand(1);
  app.fallthrough();  // global flags may follow the command: `runctl runs --json`
  Flags flags;
  Commands commands;
  AddGlobalFlags(app, flags);
  AddShowCommands(app, flags, commands);
  AddActionCommands(app, flags, commands);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help/--version exit 0; an unknown command or flag is named with the closest valid one.
    return HandleParseError(app, e, "runctl", argc, argv, kRunctlUsage);
  }

  CliContext ctx;
  ctx.run_dir = Absolute(flags.run_dir);
  ctx.json = flags.json;
  ctx.timeout = std::chrono::milliseconds(flags.timeout_ms);
  ctx.via = *ParseControlVia(flags.via);  // CLI11 checked it
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
