// What every Holdfast program's command line has in common (docs/cli.md): `--version` (the
// project version, the git commit, the libraries it was built against), the exit codes at the
// end of `--help`, an unknown command or flag named with the closest valid one (exit 2), and log
// lines stamped in UTC with the date, like lineage's times.
//
// One implementation for holdfastd, runctl, holdfast-train, holdfast-rollout, holdfast-reward,
// holdfast-health and holdfast-slurmctld-epilog. Functions only; none keeps state apart from
// spdlog's global pattern (UseUtcLogPattern), so call them from main() before threads start.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

namespace holdfast {

// The libraries a program links, for its --version (bits; OR them together).
enum BuiltAgainst : unsigned {
  kBuiltAgainstNothing = 0,
  kBuiltAgainstLibTorch = 1u << 0,
  kBuiltAgainstSlurm = 1u << 1,
  kBuiltAgainstCuda = 1u << 2,
  kBuiltAgainstNccl = 1u << 3,
};

// `PROGRAM VERSION` on the first line (help2man reads it), then the commit ("unknown" outside
// git) and one line per library in `built_against` this build found, with its version:
//   runctl 0.1.0
//   commit 1a6e7f5
//   built against: Slurm 22.05.8
std::string VersionText(std::string_view program, unsigned built_against);

// An exit-code table for --help: "Exit codes:\n  0   meaning\n  ...".
std::string ExitCodesHelp(const std::vector<std::pair<int, std::string>>& codes);

// Adds --version to `app` and appends `exit_codes_help` to its footer (after any footer the
// program already set). Call after the program's own footer.
void AddProgramConventions(CLI::App& app, std::string_view program, unsigned built_against,
                           const std::string& exit_codes_help);

// The closest of `candidates` to `word` (edit distance, at most about a third of its length,
// at least 1 and at most 3 edits), or "" when none is close enough to be a likely typo.
std::string ClosestName(std::string_view word, const std::vector<std::string>& candidates);

// The first argument in argv[1..] that `app` does not know — a command where a subcommand was
// expected, or a flag no command in scope has — named with the closest valid one:
//   "runctl: unknown command 'statsu'; did you mean 'status'?"
//   "holdfast-train: unknown flag '--nprocs'; did you mean '--nproc'?"
// "" when every argument is known (the parse error was something else). `app` is the
// program's root App, after a parse that failed.
std::string UnknownArgumentMessage(CLI::App& app, std::string_view program, int argc, const char* const* argv);

// The flag names `app` (and its fallthrough parents) accept, as "--name" / "-n": for
// suggestions and for completion tests.
std::vector<std::string> FlagNames(const CLI::App& app);

// Handles what app.parse threw: --help and --version print and return 0; any other parse
// error prints the unknown argument with a suggestion (or CLI11's message) and the way to
// --help on stderr and returns `usage_exit_code`.
int HandleParseError(CLI::App& app, const CLI::ParseError& e, std::string_view program, int argc,
                     const char* const* argv, int usage_exit_code);

// The time every log line starts with: UTC, with the date, milliseconds and "Z" (lineage's times are UTC too).
inline constexpr const char kUtcLogTime[] = "[%Y-%m-%dT%H:%M:%S.%eZ]";

// spdlog's pattern for every program: "[2026-12-02T04:16:21.123Z] [TAG] [info] message", in UTC.
std::string UtcLogPattern(std::string_view tag);
// Sets that pattern (pattern_time_type::utc) on spdlog's default logger and any registered one.
void UseUtcLogPattern(std::string_view tag);

}  // namespace holdfast
