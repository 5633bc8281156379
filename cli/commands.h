// runctl's commands: what on-call runs against a run directory.
//
// Each command reads DIR/lineage.db (read-only, through LineageDb) and/or asks
// the run's holdfastd over DIR/holdfastd.sock (cli/daemon_client.h), prints a
// table for people or, with --json, one JSON object with stable keys on
// stdout, and returns a documented exit code (kExitCodesHelp). Errors go to
// stderr as one line a person can act on. main.cc only parses the flags.
// The commands over the recorded run are in recorded_commands.cc, the ones
// that talk to the daemon in live_commands.cc (their waits: live_waits.h),
// words and tables in format.h; time is read and waited on through
// CliContext::clock (cli/waiter.h), never directly.
//
// Thread-safety: none needed; runctl is single-threaded.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "cli/waiter.h"
#include "common/host_history.h"
#include "daemon/control_protocol.h"  // ControlVia

namespace holdfast {

enum RunctlExit : int {
  kRunctlOk = 0,
  kRunctlFailure = 1,      // the daemon reported a failure, or lineage.db is unreadable
  kRunctlUsage = 2,        // bad flags or arguments
  kRunctlNotFound = 3,     // the run (unknown or ambiguous id) or lineage.db not found
  kRunctlUnreachable = 4,  // no holdfastd answers, for a command that needs one
  kRunctlStillRunning = 5,  // `stop --wait` gave up: the run still runs after --timeout
  // `status`: the run's health (cli/rank_summary.h RunHealth); 0 while it trains or once it succeeded.
  kRunctlHung = 6,        // a rank or role process is stopped, or the daemon is recovering from a hang
  kRunctlRunFailed = 7,   // the run ended failed
  kRunctlRunStopped = 8,  // the run ended stopped or preempted
};

// The "Exit codes" block of `runctl --help` and the README.
extern const char kExitCodesHelp[];

struct CliContext {
  std::string run_dir;  // where lineage.db and holdfastd.sock are
  bool json = false;
  std::chrono::milliseconds timeout{5000};  // for each call to the daemon
  ControlVia via = ControlVia::kAuto;        // how to reach it (--via)
  std::ostream* out = nullptr;  // not owned
  std::ostream* err = nullptr;  // not owned
  // What the commands read the time from and wait on (not owned).
  Clock* clock = RealClock::Get();
};

// Which ranks `status` and `triage` show one by one. Default (nothing set):
// status summarises by state and node and lists only the ranks that are not
// healthy; triage folds the other ranks by state. `all`: every rank, a row
// each. `ranks` (--rank) or `node` (--node, a host name or a node index):
// status shows only those ranks' full rows.
struct RankSelection {
  bool all = false;
  std::vector<int> ranks;
  std::string node;
  bool any() const { return all || !ranks.empty() || !node.empty(); }
};

// RUN everywhere: a full run id, a unique prefix of one, or "latest" (also
// when empty).
// Exits by the run's health: 0 training or succeeded, 6 hung, 7 failed, 8 stopped.
int CmdStatus(const CliContext& ctx, const std::string& run, const RankSelection& sel = {});
int CmdRuns(const CliContext& ctx, int limit);
int CmdLineage(const CliContext& ctx, const std::string& run, int max_events);
// `sel.all`: every other rank a line, not folded by state (--json always has every rank).
int CmdTriage(const CliContext& ctx, const std::string& run, const RankSelection& sel = {});
// The committed checkpoint of RUN with the best eval `metric` measured at its
// own step (its manifest's metrics, recorded in lineage): lower is better for
// a loss, higher for a name with accuracy, reward or margin. Prints step,
// value and path. An unknown metric: exit 2 listing the metrics present.
int CmdBest(const CliContext& ctx, const std::string& run, const std::string& metric);
// Runs side by side by an eval metric (`metric` empty: eval_loss where a run
// has it, else the first one they carry): per run its best and last value,
// then the metric at every evaluated checkpoint step, a column per run.
// `runs` empty: every run of the run directory, oldest first; a RUN that is
// a run directory (holding a lineage.db) stands for its newest run (a
// sweep's members). Metrics come from lineage (each checkpoint's eval at its own
// step). An unknown metric: exit 2 listing those present. `html` non-empty:
// also writes the comparison as an HTML page there (cli/compare_html.h: the
// metric's curves; written aside and renamed).
int CmdCompare(const CliContext& ctx, const std::vector<std::string>& runs, const std::string& metric,
               const std::string& html = "");
// Runs JOB_FILE once per value of `vary` (NAME=V1,V2,...): each member's job
// file is JOB_FILE with {value} replaced by its value and {sweep} by its tag
// (NAME-VALUE), its [job] name suffixed NAME=VALUE, in its own run directory
// RUN_DIR/sweep-NAME/TAG under its own holdfastd; `side_by_side` members at
// a time (1: in turn). Then compares them (CmdCompare over their run
// directories, by `metric`: as CmdCompare's; the page in
// RUN_DIR/sweep-NAME/compare.html). A job file without {value} or {sweep}, or an existing sweep
// folder: exit 2 before anything is written. Exit 1 when a member failed.
int CmdSweep(const CliContext& ctx, const std::string& job_file, const std::string& vary, int side_by_side,
             const std::string& metric);
// Writes RUN's report (cli/report.h) to `out` (empty: RUN_DIR/report-RUN.html).
// `metrics` is the trainer's metrics.jsonl; empty: found from the run's job
// config (docs/report.md).
int CmdReport(const CliContext& ctx, const std::string& run, const std::string& out,
              const std::string& metrics);
// wait: until the checkpoint commits (a live line on a terminal), at most wait_timeout (exit 5).
int CmdCheckpoint(const CliContext& ctx, const std::string& run, bool wait = false,
                  std::chrono::milliseconds wait_timeout = std::chrono::minutes(10));
// Asks holdfastd to stop RUN (empty: the run it supervises): the ranks
// checkpoint and stop. With `wait`, polls lineage.db and the daemon until the
// run no longer runs (at most `wait_timeout`) and prints how it ended.
int CmdStop(const CliContext& ctx, const std::string& run, bool wait,
            std::chrono::milliseconds wait_timeout);
// Refuses a run that succeeded unless `force`, and a --from-step that is not
// a committed checkpoint still on disk.
// wait: until the resumed ranks have restored and completed a step (a live line on a terminal).
int CmdResume(const CliContext& ctx, const std::string& run, std::optional<int64_t> from_step, bool force,
              bool wait = false, std::chrono::milliseconds wait_timeout = std::chrono::minutes(10));
int CmdHealth(const CliContext& ctx, const std::vector<std::string>& passthrough);

// The commands over incidents and hosts (history_commands.cc, docs/incident.md).
// The write-up of RUN's incident `number` ("": the latest; 1 is the first) as
// Markdown (`format` "md") or JSON ("json", or --json). No incident, or no
// such one: exit 3 listing the run's incidents; a bad N or format: exit 2.
int CmdIncident(const CliContext& ctx, const std::string& run, const std::string& number, const std::string& format);
// HOST's incidents across runs from the host history (`history_dir`; "": the
// nearest .holdfast/hosts at or above the run dir), flagged by `rule`.
int CmdNode(const CliContext& ctx, const std::string& host, const std::string& history_dir, const HistoryRule& rule);
// Every run of every run directory under `root` (read-only), and the hosts
// `rule` flags in its host history (`history_dir`; "": ROOT/.holdfast/hosts).
int CmdRunsAll(const CliContext& ctx, const std::string& root, int limit, const std::string& history_dir,
               const HistoryRule& rule);

}  // namespace holdfast
