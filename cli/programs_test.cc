// The command-line conventions (docs/cli.md) on every real program binary: --version, the exit
// codes in --help, an unknown command or flag named with the closest one (exit 2), the man
// pages help2man made at build time rendered by man, and the bash completion of runctl and
// holdfastd sourced into a real bash.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"

namespace holdfast {
namespace {

using testing::ProcessResult;
using testing::RunProcess;

struct Program {
  std::string name;
  std::string path;  // "" when this build has no such program (no LibTorch, no libslurm)
  int man_section;
  std::vector<std::string> libraries;  // what its --version must name ("built against: ...")
  std::vector<std::string> typo;       // arguments with one typo...
  std::string suggestion;              // ...and the message naming it
};

std::vector<Program> Programs() {
  std::vector<std::string> slurm;
#ifdef HOLDFAST_TEST_HAVE_SLURM
  slurm = {"Slurm "};
#endif
  return {
      {"holdfastd", HOLDFASTD_PATH, 1, slurm, {"--run-dri", "/tmp/x"}, "unknown flag '--run-dri'; did you mean '--run-dir'?"},
      {"runctl", RUNCTL_PATH, 1, slurm, {"statsu"}, "runctl: unknown command 'statsu'; did you mean 'status'?"},
      {"holdfast-train", TRAIN_PATH, 1, {"LibTorch "}, {"--nprocs", "2"},
       "holdfast-train: unknown flag '--nprocs'; did you mean '--nproc'?"},
      {"holdfast-rollout", ROLLOUT_PATH, 1, {"LibTorch "}, {"-c", "x.toml", "--workrs", "2"},
       "holdfast-rollout: unknown flag '--workrs'; did you mean '--workers'?"},
      {"holdfast-reward", REWARD_PATH, 1, {}, {"--task", "add2", "--emti", "sft"},
       "holdfast-reward: unknown flag '--emti'; did you mean '--emit'?"},
      {"holdfast-health", HEALTH_PATH, 1, {}, {"--chekcs", "host"},
       "holdfast-health: unknown flag '--chekcs'; did you mean '--checks'?"},
      {"holdfast-slurmctld-epilog", EPILOG_PATH, 8, slurm, {"--jbo", "7"},
       "holdfast-slurmctld-epilog: unknown flag '--jbo'; did you mean '--job'?"},
  };
}

std::string FirstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

class ProgramsTest : public ::testing::TestWithParam<Program> {
 protected:
  void SetUp() override {
    if (GetParam().path.empty()) GTEST_SKIP() << GetParam().name << " is not built here";
  }
};

TEST_P(ProgramsTest, VersionNamesTheProgramVersionCommitAndLibraries) {
  const Program& p = GetParam();
  ProcessResult r = RunProcess({p.path, "--version"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(FirstLine(r.output), p.name + " " + HOLDFAST_TEST_VERSION) << r.output;
  EXPECT_NE(r.output.find("\ncommit " + std::string(HOLDFAST_TEST_COMMIT) + "\n"), std::string::npos) << r.output;
  for (const std::string& lib : p.libraries) {
    EXPECT_NE(r.output.find(lib), std::string::npos) << "no " << lib << "in\n" << r.output;
  }
}

TEST_P(ProgramsTest, HelpListsTheExitCodes) {
  const Program& p = GetParam();
  ProcessResult r = RunProcess({p.path, "--help"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t codes = r.output.find("Exit codes:\n");
  ASSERT_NE(codes, std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\n  0 ", codes), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\n  2 ", codes), std::string::npos) << r.output;
}

TEST_P(ProgramsTest, ATypoIsNamedWithTheClosestAndExitsTwo) {
  const Program& p = GetParam();
  std::vector<std::string> argv = {p.path};
  argv.insert(argv.end(), p.typo.begin(), p.typo.end());
  ProcessResult r = RunProcess(argv);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(p.suggestion), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(p.name + " --help"), std::string::npos) << r.output;
}

TEST_P(ProgramsTest, ManPageWasMadeAtBuildTimeAndRenders) {
#ifndef HOLDFAST_TEST_MAN_DIR
  GTEST_SKIP() << "this build makes no man pages (no help2man, or a sanitizer/fuzz build)";
#else
  const Program& p = GetParam();
  const std::string page =
      std::string(HOLDFAST_TEST_MAN_DIR) + "/man" + std::to_string(p.man_section) + "/" + p.name + "." +
      std::to_string(p.man_section);
  struct stat st;
  ASSERT_EQ(::stat(page.c_str(), &st), 0) << page;
  // man -l renders the file as a reader would see it (no pager); groff where man is absent.
  ProcessResult r = ::access("/usr/bin/man", X_OK) == 0
                        ? RunProcess({"/usr/bin/man", "-P", "cat", "-l", page}, {{"MANWIDTH", "100"}})
                        : RunProcess({"/usr/bin/groff", "-man", "-Tutf8", page});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("NAME"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(p.name), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Exit codes"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--version"), std::string::npos) << r.output;
#endif
}

INSTANTIATE_TEST_SUITE_P(EveryProgram, ProgramsTest, ::testing::ValuesIn(Programs()),
                         [](const ::testing::TestParamInfo<Program>& info) {
                           std::string n;
                           for (char c : info.param.name) n += c == '-' ? '_' : c;
                           return n;
                         });

TEST(Runctl, BogusGlobalFlagIsNamedNotAMissingSubcommand) {
  ProcessResult r = RunProcess({RUNCTL_PATH, "--bogus"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("runctl: unknown flag '--bogus'"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("A subcommand is required"), std::string::npos) << r.output;
  r = RunProcess({RUNCTL_PATH, "stop", "--wiat"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("runctl stop: unknown flag '--wiat'; did you mean '--wait'?"), std::string::npos)
      << r.output;
}

// What bash offers for `WORDS<TAB>` with the completion script sourced: one word a line.
std::string Complete(const std::string& script, const std::string& function, const std::vector<std::string>& words) {
  std::string array;
  for (const std::string& w : words) array += " '" + w + "'";
  const std::string cmd = "source '" + script + "' && complete -p " +
                          std::string(function == "_runctl" ? "runctl" : "holdfastd") +
                          " && COMP_WORDS=(" + array + ") && COMP_CWORD=" + std::to_string(words.size() - 1) +
                          " && " + function + " && printf '%s\\n' \"${COMPREPLY[@]}\"";
  return RunProcess({"/bin/bash", "--norc", "--noprofile", "-c", cmd}).output;
}

TEST(Completion, RunctlCompletesCommandsAndEachCommandsFlags) {
  const std::string script = std::string(HOLDFAST_TEST_SOURCE_DIR) + "/cli/completion/runctl.bash";
  std::string out = Complete(script, "_runctl", {RUNCTL_PATH, "sta"});
  EXPECT_NE(out.find("complete -F _runctl runctl"), std::string::npos) << out;
  EXPECT_NE(out.find("\nstatus\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("stop"), std::string::npos) << out;
  out = Complete(script, "_runctl", {RUNCTL_PATH, ""});
  for (const char* cmd : {"status", "runs", "lineage", "triage", "report", "incident", "node", "checkpoint", "stop",
                          "resume", "health"}) {
    EXPECT_NE(out.find(std::string("\n") + cmd + "\n"), std::string::npos) << cmd << " not in\n" << out;
  }
  out = Complete(script, "_runctl", {RUNCTL_PATH, "--json", "stop", "--w"});
  EXPECT_NE(out.find("\n--wait\n"), std::string::npos) << out;
  out = Complete(script, "_runctl", {RUNCTL_PATH, "resume", "x", "--fr"});
  EXPECT_NE(out.find("\n--from-step\n"), std::string::npos) << out;
  out = Complete(script, "_runctl", {RUNCTL_PATH, "--ru"});
  EXPECT_NE(out.find("\n--run-dir\n"), std::string::npos) << out;
  out = Complete(script, "_runctl", {RUNCTL_PATH, "runs", "--js"});  // global flags follow a command too
  EXPECT_NE(out.find("\n--json\n"), std::string::npos) << out;
  out = Complete(script, "_runctl", {RUNCTL_PATH, "incident", "latest", "--fo"});
  EXPECT_NE(out.find("\n--format\n"), std::string::npos) << out;
  out = Complete(script, "_runctl", {RUNCTL_PATH, "incident", "latest", "--format", ""});
  EXPECT_NE(out.find("\nmd\njson\n"), std::string::npos) << out;
  out = Complete(script, "_runctl", {RUNCTL_PATH, "runs", "--a"});
  EXPECT_NE(out.find("\n--all\n"), std::string::npos) << out;
  out = Complete(script, "_runctl", {RUNCTL_PATH, "node", "n1", "--history-w"});
  EXPECT_NE(out.find("\n--history-window-days\n"), std::string::npos) << out;
  out = Complete(script, "_runctl", {RUNCTL_PATH, "--via", "t"});  // how to reach holdfastd
  EXPECT_NE(out.find("\ntcp\n"), std::string::npos) << out;
}

TEST(Completion, HoldfastdCompletesItsFlagsAndChoices) {
  const std::string script = std::string(HOLDFAST_TEST_SOURCE_DIR) + "/cli/completion/holdfastd.bash";
  std::string out = Complete(script, "_holdfastd", {HOLDFASTD_PATH, "--run-d"});
  EXPECT_NE(out.find("complete -F _holdfastd holdfastd"), std::string::npos) << out;
  EXPECT_NE(out.find("\n--run-dir\n"), std::string::npos) << out;
  out = Complete(script, "_holdfastd", {HOLDFASTD_PATH, "--nproc"});
  EXPECT_NE(out.find("\n--nproc-per-node\n"), std::string::npos) << out;
  out = Complete(script, "_holdfastd", {HOLDFASTD_PATH, "--scheduler", "s"});
  EXPECT_NE(out.find("\nslurm\n"), std::string::npos) << out;
}

}  // namespace
}  // namespace holdfast
