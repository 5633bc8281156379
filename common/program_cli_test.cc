#include "common/program_cli.h"

#include <gtest/gtest.h>

#include <regex>

#include "common/build_info.h"

namespace holdfast {
namespace {

// An App shaped like runctl's: global flags falling through, subcommands with a positional.
struct RunctlLike {
  CLI::App app{"test"};
  std::string run_dir, run;
  bool json = false, wait = false;
  int timeout = 0;
  RunctlLike() {
    app.fallthrough();
    app.add_option("--run-dir", run_dir);
    app.add_flag("--json", json);
    app.add_option("--old-json", run_dir)->group("");  // hidden: accepted, never suggested
    CLI::App* status = app.add_subcommand("status");
    status->add_option("RUN", run);
    CLI::App* stop = app.add_subcommand("stop");
    stop->add_option("RUN", run);
    stop->add_flag("--wait", wait);
    stop->add_option("--timeout", timeout);
    app.add_subcommand("triage")->add_option("RUN", run)->required();
  }
  std::string Unknown(std::vector<const char*> args) {
    args.insert(args.begin(), "runctl");
    return UnknownArgumentMessage(app, "runctl", static_cast<int>(args.size()), args.data());
  }
};

TEST(ClosestName, TyposAndAbbreviationsAreSuggestedFarWordsAreNot) {
  const std::vector<std::string> commands = {"status", "runs", "lineage", "triage", "stop"};
  EXPECT_EQ(ClosestName("statsu", commands), "status");  // a transposition
  EXPECT_EQ(ClosestName("stauts", commands), "status");
  EXPECT_EQ(ClosestName("lineag", commands), "lineage");
  EXPECT_EQ(ClosestName("triag", commands), "triage");
  EXPECT_EQ(ClosestName("bogus", commands), "");
  EXPECT_EQ(ClosestName("x", commands), "");
  EXPECT_EQ(ClosestName("--nprocs", {"--nproc", "--config"}), "--nproc");
  EXPECT_EQ(ClosestName("--bogus", {"--nproc", "--config", "--json"}), "");
}

TEST(UnknownArgumentMessage, NamesTheUnknownCommandWithTheClosest) {
  RunctlLike r;
  EXPECT_EQ(r.Unknown({"statsu"}), "runctl: unknown command 'statsu'; did you mean 'status'?");
  EXPECT_EQ(r.Unknown({"--json", "trage", "x"}), "runctl: unknown command 'trage'; did you mean 'triage'?");
  EXPECT_EQ(r.Unknown({"frobnicate"}), "runctl: unknown command 'frobnicate'");
}

TEST(UnknownArgumentMessage, NamesTheUnknownFlagOfTheCommandItFollows) {
  RunctlLike r;
  EXPECT_EQ(r.Unknown({"--bogus"}), "runctl: unknown flag '--bogus'");
  EXPECT_EQ(r.Unknown({"--jsno"}), "runctl: unknown flag '--jsno'; did you mean '--json'?");
  EXPECT_EQ(r.Unknown({"stop", "--wiat"}), "runctl stop: unknown flag '--wiat'; did you mean '--wait'?");
  // Global flags fall through to commands; values (separate or after '=') are skipped.
  EXPECT_EQ(r.Unknown({"stop", "RUN1", "--run-dir", "statsu", "--timeout=5", "--json"}), "");
  // A flag of another command is unknown here.
  EXPECT_EQ(r.Unknown({"status", "--wait"}), "runctl status: unknown flag '--wait'");
  // Hidden old spellings are accepted and never suggested.
  EXPECT_EQ(r.Unknown({"--old-json", "d", "status"}), "");
  EXPECT_EQ(r.Unknown({"--old-jsn"}), "runctl: unknown flag '--old-jsn'");
  // Past "--" nothing is ours.
  EXPECT_EQ(r.Unknown({"status", "--", "--anything"}), "");
}

TEST(UnknownArgumentMessage, ExtraPositionalIsNamed) {
  RunctlLike r;
  EXPECT_EQ(r.Unknown({"status", "RUN1", "RUN2"}), "runctl status: unexpected argument 'RUN2'");
}

TEST(HandleParseError, UnknownCommandExitsWithTheUsageCode) {
  RunctlLike r;
  std::vector<const char*> args = {"runctl", "statsu"};
  r.app.require_subcommand(1);
  testing::internal::CaptureStderr();
  int rc = -1;
  try {
    r.app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::ParseError& e) {
    rc = HandleParseError(r.app, e, "runctl", static_cast<int>(args.size()), args.data(), 2);
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 2);
  EXPECT_NE(err.find("runctl: unknown command 'statsu'; did you mean 'status'?"), std::string::npos) << err;
  EXPECT_NE(err.find("runctl --help"), std::string::npos) << err;
}

TEST(VersionText, FirstLineIsProgramAndVersionThenTheCommit) {
  const std::string text = VersionText("runctl", kBuiltAgainstSlurm | kBuiltAgainstLibTorch);
  EXPECT_EQ(text.rfind("runctl " + GetBuildInfo().version + "\ncommit ", 0), 0u) << text;
  EXPECT_FALSE(GetBuildInfo().version.empty());
  EXPECT_FALSE(GetBuildInfo().commit.empty());
  // Only the libraries the program says it links.
  EXPECT_EQ(VersionText("x", kBuiltAgainstNothing).find("built against"), std::string::npos);
  if (!GetBuildInfo().slurm.empty()) {
    EXPECT_NE(text.find("Slurm " + GetBuildInfo().slurm), std::string::npos) << text;
    EXPECT_EQ(text.find("CUDA"), std::string::npos) << text;
  }
}

TEST(ExitCodesHelp, OneLinePerCode) {
  EXPECT_EQ(ExitCodesHelp({{0, "ok"}, {75, "preempted"}}), "Exit codes:\n  0   ok\n  75  preempted\n");
}

TEST(UtcLogPattern, DateTimeMillisecondsAndZ) {
  const std::string p = UtcLogPattern("holdfastd");
  EXPECT_EQ(p, "[%Y-%m-%dT%H:%M:%S.%eZ] [holdfastd] [%^%l%$] %v");
}

}  // namespace
}  // namespace holdfast
