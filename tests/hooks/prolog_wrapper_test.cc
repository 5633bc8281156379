// The shipped Prolog wrapper (examples/slurm/holdfast-prolog.sh) with every
// kind of answer its checker can give, as real processes: the real
// holdfast-health on fixture sysfs trees, one whose check hangs on a FIFO,
// one stuck past every signal, and broken checkers (missing, not executable,
// crashing, odd exit codes, a bad health config). The one stand-in is
// RecordingScontrol, first on PATH, which records the drain the wrapper asks
// for instead of sending it (the Slurm suite drains real nodes:
// tests/slurm/slurm_suite_test.cc). What is asserted is what an admin sees:
// the exit code Slurm acts on, the drain reason, the log line.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "tests/support/subprocess.h"

namespace holdfast {
namespace {

using testing::BuildPath;
using testing::ProcessResult;
using testing::ReadFile;
using testing::RunProcess;
using testing::TempDir;
using testing::WriteFile;

std::string Source(const std::string& relative) {
  const char* d = std::getenv("HOLDFAST_SOURCE_DIR");
  return std::string(d != nullptr ? d : ".") + "/" + relative;
}

void WriteScript(const std::string& path, const std::string& body, bool executable = true) {
  WriteFile(path, "#!/bin/bash\n" + body);
  std::filesystem::permissions(path, executable ? std::filesystem::perms::owner_all : std::filesystem::perms::owner_read |
                                                                                          std::filesystem::perms::owner_write);
}

// Whether `pid` still runs (a zombie does not count); waits for a SIGKILL sent
// just before to land (the bound is a failure guard).
bool StillRunsAfterAKill(long pid) {
  auto alive = [&] {
    const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
    return !stat.empty() && stat.find(") Z ") == std::string::npos;
  };
  const auto guard = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (alive() && std::chrono::steady_clock::now() < guard) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return alive();
}

class PrologWrapper : public ::testing::Test {
 protected:
  PrologWrapper() : dir_("prolog_wrapper") {
    std::filesystem::create_directories(dir_ / "bin");
    // RecordingScontrol: what the wrapper would ask slurmctld, one line per call.
    WriteScript(dir_ / "bin/scontrol", "printf '%s\\n' \"$*\" >>'" + (dir_ / "scontrol.calls") + "'\n");
    // The checker as the Slurm suite runs it: the real holdfast-health on a fixture node.
    WriteScript(dir_ / "health.sh", "exec '" + BuildPath("health/holdfast-health") + "' \"$@\" --sysfs-root '" +
                                        Source("health/testdata/sysfs") + "'/\"${TREE:-healthy}\" --meminfo \"${MEMINFO:-" +
                                        Source("health/testdata") + "/meminfo_healthy}\" --kernel-log /dev/null\n");
  }

  // Runs the wrapper as slurmd would on node n9 for job 5, `env` added.
  ProcessResult Run(std::map<std::string, std::string> env) {
    std::map<std::string, std::string> e = {
        {"PATH", (dir_ / "bin") + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
        {"SLURMD_NODENAME", "n9"},
        {"SLURM_JOB_ID", "5"},
        {"HOLDFAST_HEALTH", dir_ / "health.sh"},
        {"HEALTH_CONFIG", dir_ / "no-health.toml"},
        {"HOLDFAST_PROLOG_CONF", dir_ / "prolog.conf"},
        {"HOLDFAST_PROLOG_LOG", dir_ / "prolog.log"},
    };
    for (auto& [k, v] : env) e[k] = v;
    return RunProcess({"/bin/bash", Source("examples/slurm/holdfast-prolog.sh")}, e);
  }
  std::string Drains() const { return ReadFile(dir_ / "scontrol.calls"); }
  std::string Log() const { return ReadFile(dir_ / "prolog.log"); }
  std::string D(const std::string& name) const { return dir_ / name; }

  TempDir dir_;
};

TEST_F(PrologWrapper, AHealthyNodePassesAndIsLeftAlone) {
  ProcessResult r = Run({});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Drains(), "");
  EXPECT_NE(Log().find("n9 job 5: pass ("), std::string::npos) << Log();
}

TEST_F(PrologWrapper, AFailedCheckDrainsTheNodeWithTheChecksReason) {
  ProcessResult r = Run({{"TREE", "port_down"}});
  EXPECT_EQ(r.exit_code, 1) << "non-zero: Slurm requeues the job off this node\n" << r.output;
  EXPECT_EQ(Drains(), "update nodename=n9 state=drain reason=holdfast-health: ib.port_state mlx5_1/1 DOWN\n");
  EXPECT_NE(Log().find("drain n9: holdfast-health: ib.port_state mlx5_1/1 DOWN"), std::string::npos) << Log();
}

TEST_F(PrologWrapper, ReportOnlyLogsWhatItWouldDrainAndDrainsNothing) {
  ProcessResult r = Run({{"TREE", "port_down"}, {"HOLDFAST_PROLOG_MODE", "report"}});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Drains(), "");
  EXPECT_NE(Log().find("report-only: would drain n9: holdfast-health: ib.port_state mlx5_1/1 DOWN"), std::string::npos)
      << Log();
}

// A read that never returns (here a FIFO nobody writes, as a hung sysfs or
// NVML read would): holdfast-health gives up at the timeout and names the check.
TEST_F(PrologWrapper, AHungCheckFailsAtTheTimeoutNamingTheCheck) {
  ASSERT_EQ(mkfifo(D("stuck-meminfo").c_str(), 0600), 0);
  ProcessResult r = Run({{"HOLDFAST_PROLOG_TIMEOUT", "1"}, {"MEMINFO", D("stuck-meminfo")}});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(Drains(), "update nodename=n9 state=drain reason=holdfast-health: host.memory hung: no answer in 1 s "
                      "(driver or file system stuck)\n");
}

// A checker that no signal ends (a driver call stuck in the kernel ignores
// them all): the wrapper kills its session and ends without waiting for it.
TEST_F(PrologWrapper, ACheckerStuckPastEverySignalIsKilledAndTheNodeDrained) {
  WriteScript(D("stuck.sh"), "trap '' ALRM TERM INT\nsleep 300 &\necho $$ $! >'" + D("pids") + "'\nwait\nwait\n");
  ProcessResult r = Run({{"HOLDFAST_HEALTH", D("stuck.sh")}, {"HOLDFAST_PROLOG_TIMEOUT", "1"}});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(Drains(), "update nodename=n9 state=drain reason=holdfast-prolog: holdfast-health stuck past its 1 s timeout "
                      "(killed; a driver hung in the kernel?)\n");
  std::istringstream pids(ReadFile(D("pids")));
  for (long pid; pids >> pid;) EXPECT_FALSE(StillRunsAfterAKill(pid)) << "process " << pid << " outlived the Prolog";
}

// slurm.conf's PrologEpilogTimeout shorter than the wrapper's: slurmd sends
// SIGTERM to the Prolog's process group, and the checker, in a session of its
// own, goes with it instead of hanging on.
TEST_F(PrologWrapper, SlurmdsSigtermEndsTheCheckerToo) {
  WriteScript(D("stuck.sh"), "trap '' ALRM TERM INT\nsleep 300 &\necho $$ $! >'" + D("pids") + ".tmp'\n"
                             "mv '" + D("pids") + ".tmp' '" + D("pids") + "'\nwait\nwait\n");
  std::map<std::string, std::string> env = {{"HOLDFAST_HEALTH", D("stuck.sh")}, {"HOLDFAST_PROLOG_TIMEOUT", "60"},
                                            {"SLURMD_NODENAME", "n9"},       {"SLURM_JOB_ID", "5"},
                                            {"HEALTH_CONFIG", D("none")},     {"HOLDFAST_PROLOG_CONF", D("none")},
                                            {"HOLDFAST_PROLOG_LOG", D("prolog.log")}};
  std::vector<std::string> argv = {"/usr/bin/env", "PATH=" + D("bin") + ":/usr/bin:/bin"};
  for (const auto& [k, v] : env) argv.push_back(k + "=" + v);
  argv.insert(argv.end(), {"/bin/bash", Source("examples/slurm/holdfast-prolog.sh")});
  testing::ChildProcess prolog(argv, D("prolog.out"));
  const auto guard = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!std::filesystem::exists(D("pids")) && !prolog.Exited() && std::chrono::steady_clock::now() < guard) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(std::filesystem::exists(D("pids"))) << "the checker never started: " << ReadFile(D("prolog.out"));
  prolog.Signal(SIGTERM);
  EXPECT_EQ(prolog.Wait(), 1);
  std::istringstream pids(ReadFile(D("pids")));
  for (long pid; pids >> pid;) EXPECT_FALSE(StillRunsAfterAKill(pid)) << "process " << pid << " outlived the Prolog";
  EXPECT_NE(Log().find("stopped by SIGTERM (is slurm.conf's PrologEpilogTimeout shorter than 60 s + 25 s?)"),
            std::string::npos)
      << Log();
  EXPECT_EQ(Drains(), "");
}

// A checker that could not check says nothing about the node: a botched
// rollout (a missing binary, a bad health.toml on every node) drains nothing.
TEST_F(PrologWrapper, ABrokenCheckerLeavesTheNodeUpAndSaysSoLoudly) {
  WriteScript(D("not-executable"), "exit 0\n", false);
  WriteScript(D("crash.sh"), "kill -SEGV $$\n");
  WriteScript(D("exit3.sh"), "exit 3\n");
  WriteScript(D("mute-fail.sh"), "exit 1\n");
  WriteFile(D("bad-health.toml"), "[health]\nexpected_gpus = -1\n");
  const std::pair<std::map<std::string, std::string>, std::string> cases[] = {
      {{{"HOLDFAST_HEALTH", D("missing/holdfast-health")}}, D("missing/holdfast-health") + ": not an executable file"},
      {{{"HOLDFAST_HEALTH", "holdfast-health-not-installed"}}, "holdfast-health-not-installed: not found on PATH"},
      {{{"HOLDFAST_HEALTH", D("not-executable")}}, D("not-executable") + ": not an executable file"},
      {{{"HOLDFAST_HEALTH", D("crash.sh")}}, "holdfast-health killed by SIGSEGV"},
      {{{"HOLDFAST_HEALTH", D("exit3.sh")}}, "holdfast-health exited 3, a code it does not use"},
      {{{"HOLDFAST_HEALTH", D("mute-fail.sh")}}, "holdfast-health exited 1 without a drain reason"},
      {{{"HEALTH_CONFIG", D("bad-health.toml")}, {"TREE", "port_down"}},
       // (holdfast-health's one line for Slurm's Reason: no quotes, at most 100 characters)
       "holdfast-health: configuration error: " + D("bad-health.toml") + ":2: key health."},
  };
  for (const auto& [env, why] : cases) {
    std::filesystem::remove(D("prolog.log"));
    ProcessResult r = Run(env);
    EXPECT_EQ(r.exit_code, 0) << why << "\n" << r.output;
    EXPECT_EQ(Drains(), "") << why;
    EXPECT_NE(Log().find("BROKEN CHECKER, node left up (HOLDFAST_PROLOG_ON_BROKEN=pass): " + why), std::string::npos)
        << Log();
  }
}

TEST_F(PrologWrapper, OnBrokenDrainDrainsWithTheBreakageUnlessReportOnly) {
  const std::map<std::string, std::string> broken = {{"HOLDFAST_HEALTH", D("gone")}, {"HOLDFAST_PROLOG_ON_BROKEN", "drain"}};
  ProcessResult r = Run(broken);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(Drains(), "update nodename=n9 state=drain reason=holdfast-prolog: checker broken: " + D("gone") +
                          ": not an executable file\n");
  std::filesystem::remove(D("scontrol.calls"));
  auto report = broken;
  report["HOLDFAST_PROLOG_MODE"] = "report";
  r = Run(report);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Drains(), "");
  EXPECT_NE(Log().find("BROKEN CHECKER, node left up (HOLDFAST_PROLOG_MODE=report)"), std::string::npos) << Log();
}

TEST_F(PrologWrapper, TakesItsSettingsFromProlog_confTheEnvironmentFirst) {
  WriteFile(D("prolog.conf"), "# staged rollout\nHOLDFAST_PROLOG_MODE=report   # until Monday\n\nHOLDFAST_PROLOG_TIMEOUT=5\n");
  chmod(D("prolog.conf").c_str(), 0644);
  ProcessResult r = Run({{"TREE", "port_down"}});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Drains(), "");
  EXPECT_NE(Log().find("report-only: would drain n9"), std::string::npos) << Log();
  r = Run({{"TREE", "port_down"}, {"HOLDFAST_PROLOG_MODE", "enforce"}});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(Drains().find("reason=holdfast-health: ib.port_state"), std::string::npos) << Drains();
}

// Settings that cannot be trusted (a typo, a file others may write) drain
// nothing and check nothing: they might have been the admin's report mode.
TEST_F(PrologWrapper, BadSettingsDrainNothingAndNameTheLine) {
  const std::pair<std::string, std::string> cases[] = {
      {"HOLDFAST_PROLOG_MODE=reprot\n", "HOLDFAST_PROLOG_MODE='reprot' is not enforce or report"},
      {"HOLDFAST_PROLOG_TIMEOUT=0\n", "HOLDFAST_PROLOG_TIMEOUT='0' is not a number of seconds from 1 to 3600"},
      {"HOLDFAST_PROLOG_ON_BROKEN=maybe\n", "HOLDFAST_PROLOG_ON_BROKEN='maybe' is not pass or drain"},
      {"# ok\nHOLDFAST_PROLOG_MOD=report\n", D("prolog.conf") + ":2: 'HOLDFAST_PROLOG_MOD=report' is not HOLDFAST_PROLOG_"},
      {"HOLDFAST_PROLOG_LOG=$(touch /tmp/x)\n", D("prolog.conf") + ":1: "},
  };
  for (const auto& [text, why] : cases) {
    WriteFile(D("prolog.conf"), text);
    chmod(D("prolog.conf").c_str(), 0644);
    std::filesystem::remove(D("prolog.log"));
    ProcessResult r = Run({{"TREE", "port_down"}});
    EXPECT_EQ(r.exit_code, 0) << text << r.output;
    EXPECT_EQ(Drains(), "") << text;
    EXPECT_NE(Log().find("BROKEN SETTINGS, not checking, node left up: " + why), std::string::npos) << Log();
  }
  WriteFile(D("prolog.conf"), "HOLDFAST_PROLOG_MODE=enforce\n");
  chmod(D("prolog.conf").c_str(), 0666);
  std::filesystem::remove(D("prolog.log"));
  ProcessResult r = Run({{"TREE", "port_down"}});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Drains(), "");
  EXPECT_NE(Log().find("be writable by no one else (it is uid " + std::to_string(getuid()) + ", mode 666)"),
            std::string::npos)
      << Log();
}

// examples/slurm/prolog-chain.sh: the site's check first (a stand-in for
// NHC that drains n9 itself when it fails), then Holdfast's.
TEST_F(PrologWrapper, TheChainRunsTheSitesCheckThenHoldfastsAndStopsAtTheFirstFailure) {
  WriteScript(D("nhc"), "echo nhc >>'" + D("order") + "'\n[ \"$NHC_FAILS\" = 1 ] || exit 0\n"
                        "scontrol update nodename=$SLURMD_NODENAME state=drain reason='NHC: fake check failed'\nexit 1\n");
  WriteScript(D("health-logged.sh"), "echo holdfast >>'" + D("order") + "'\nexec '" + D("health.sh") + "' \"$@\"\n");
  auto chain = [&](std::map<std::string, std::string> env) {
    env["NHC"] = D("nhc");
    env["HOLDFAST_PROLOG"] = Source("examples/slurm/holdfast-prolog.sh");
    env["HOLDFAST_HEALTH"] = D("health-logged.sh");
    std::map<std::string, std::string> e = {
        {"PATH", (dir_ / "bin") + ":/usr/bin:/bin"}, {"SLURMD_NODENAME", "n9"}, {"SLURM_JOB_ID", "5"},
        {"HEALTH_CONFIG", D("none")}, {"HOLDFAST_PROLOG_CONF", D("none")}, {"HOLDFAST_PROLOG_LOG", D("prolog.log")}};
    for (auto& [k, v] : env) e[k] = v;
    return RunProcess({"/bin/bash", Source("examples/slurm/prolog-chain.sh")}, e);
  };
  ProcessResult r = chain({{"NHC_FAILS", "1"}});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(ReadFile(D("order")), "nhc\n") << "Holdfast's check is not run on a node NHC failed";
  EXPECT_EQ(Drains(), "update nodename=n9 state=drain reason=NHC: fake check failed\n");

  std::filesystem::remove(D("order"));
  std::filesystem::remove(D("scontrol.calls"));
  r = chain({{"TREE", "port_down"}});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(ReadFile(D("order")), "nhc\nholdfast\n");
  EXPECT_EQ(Drains(), "update nodename=n9 state=drain reason=holdfast-health: ib.port_state mlx5_1/1 DOWN\n");

  std::filesystem::remove(D("scontrol.calls"));
  r = chain({});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Drains(), "");
}

}  // namespace
}  // namespace holdfast
