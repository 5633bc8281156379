// The torchrun-style launch's flags become a job file the loader accepts.
#include "daemon/launch_flags.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "daemon/job_config.h"

namespace holdfast {
namespace {

CommandLineJob Flags(std::vector<std::string> command, std::string nproc = "") {
  CommandLineJob f;
  f.command = std::move(command);
  f.nproc_per_node = std::move(nproc);
  f.python = "/usr/bin/python3";
  f.workdir = "/home/u/proj";
  return f;
}

Result<JobConfig> Load(const CommandLineJob& f, const std::string& base = "") {
  auto text = JobTextFromFlags(f, base, "base.toml");
  if (!text.ok()) return text.status();
  return LoadJobConfigText(*text, "holdfastd's command line");
}

TEST(LaunchFlagsTest, TorchrunsFormRunsAPyScriptUnderPythonWithItsArguments) {
  auto job = Load(Flags({"train.py", "--lr", "3e-4", "--name", "x y"}, "8"));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->command, (std::vector<std::string>{"/usr/bin/python3", "train.py", "--lr", "3e-4", "--name", "x y"}));
  EXPECT_EQ(job->nproc, 8);
  EXPECT_EQ(job->name, "train");
  EXPECT_EQ(job->workdir, "/home/u/proj");  // a resume from elsewhere runs in the same place
  EXPECT_EQ(job->supervise.restart_budget, SuperviseConfig{}.restart_budget);
}

TEST(LaunchFlagsTest, AfterDoubleDashTheCommandRunsAsItIs) {
  CommandLineJob f = Flags({"/usr/bin/python3", "examples/pytorch_ddp/train.py", "--steps", "30"}, "2");
  f.max_restarts = 7;
  f.checkpoint_dir = "out";
  auto job = Load(f);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->command.front(), "/usr/bin/python3");
  EXPECT_EQ(job->command.size(), 4u);
  EXPECT_EQ(job->supervise.restart_budget, 7);
  EXPECT_EQ(job->checkpoint_dir, "out");
  EXPECT_EQ(job->name, "train");
  CommandLineJob np = Flags({"run.py"}, "1");
  np.no_python = true;
  EXPECT_EQ(Load(np)->command, (std::vector<std::string>{"run.py"}));
}

TEST(LaunchFlagsTest, AModuleRunsUnderPythonDashM) {
  CommandLineJob f = Flags({"--epochs", "2"}, "4");
  f.module = "mypkg.train";
  auto job = Load(f);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->command, (std::vector<std::string>{"/usr/bin/python3", "-m", "mypkg.train", "--epochs", "2"}));
  EXPECT_EQ(job->name, "mypkg.train");
}

TEST(LaunchFlagsTest, OnTopOfAJobFileTheFlagsReplaceOnlyTheirKeys) {
  const std::string base =
      "[job]\nname = \"big\"\ncommand = [\"old\"]\nnproc = 2\n[supervise]\nhang_min_s = 9\n[[roles]]\n"
      "name = \"r\"\ncommand = [\"x\"]\n";
  auto job = Load(Flags({"./train"}, "4"), base);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->command, (std::vector<std::string>{"./train"}));
  EXPECT_EQ(job->nproc, 4);
  EXPECT_EQ(job->name, "big");
  EXPECT_EQ(job->workdir, "");  // the job file's (none): not the flags' directory
  EXPECT_DOUBLE_EQ(job->supervise.hang_min_s, 9);
  ASSERT_EQ(job->roles.size(), 1u);
  auto only_count = Load(Flags({}, "3"), base);  // no command: the file's
  ASSERT_TRUE(only_count.ok()) << only_count.status().ToString();
  EXPECT_EQ(only_count->command, (std::vector<std::string>{"old"}));
  EXPECT_EQ(only_count->nproc, 3);
}

TEST(LaunchFlagsTest, AnElasticNodeRangeSetsMinAndMaxNodes) {
  CommandLineJob f = Flags({"t.py"}, "8");
  f.nnodes = "2:4";
  auto job = Load(f);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->min_nodes, 2);
  EXPECT_EQ(job->max_nodes, 4);
  f.nnodes = "3";  // a fixed count is the allocation's to give, not the job file's
  EXPECT_EQ(Load(f)->min_nodes, 0);
  EXPECT_EQ(ParseNodeRange("3")->max, 3);
}

TEST(LaunchFlagsTest, BadFlagsAreRefusedNamingTheFlag) {
  auto err = [](const CommandLineJob& f) { return Load(f).status().message(); };
  EXPECT_NE(err(Flags({"t.py"}, "0")).find("--nproc-per-node 0"), std::string::npos);
  EXPECT_NE(err(Flags({"t.py"}, "eight")).find("--nproc-per-node eight"), std::string::npos);
  EXPECT_NE(err(Flags({"t.py"}, "999")).find("between 1 and 256"), std::string::npos);
  CommandLineJob nodes = Flags({"t.py"}, "1");
  nodes.nnodes = "4:2";
  EXPECT_NE(err(nodes).find("MIN is more than MAX"), std::string::npos);
  nodes.nnodes = "2:";
  EXPECT_NE(err(nodes).find("--nnodes (MAX of MIN:MAX)"), std::string::npos);
  CommandLineJob gpu = Flags({"t.py"}, "gpu");
  EXPECT_NE(err(gpu).find("no GPU is visible"), std::string::npos);
  gpu.visible_gpus = 4;
  EXPECT_EQ(Load(gpu)->nproc, 4);
  CommandLineJob nopython = Flags({"t.py"}, "1");
  nopython.python = "";
  EXPECT_NE(err(nopython).find("python3 is not on PATH"), std::string::npos);
  EXPECT_NE(err(Flags({}, "2")).find("no job"), std::string::npos);
  EXPECT_NE(Load(Flags({"t.py"}), "[job\n").status().message().find("base.toml"), std::string::npos);
}

TEST(LaunchFlagsTest, AnyCharactersInTheCommandSurviveTheJobFile) {
  const std::vector<std::string> odd = {"/opt/my tools/run", "--msg", "it's \"quoted\" \\ ünï\tcode", "'"};
  CommandLineJob f = Flags(odd, "1");
  f.name = "odd";
  auto job = Load(f);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->command, odd);
}

TEST(LaunchFlagsTest, TheRunNameIsTheScriptsStemInSafeCharacters) {
  EXPECT_EQ(JobNameFromCommand({"/usr/bin/python3", "/a/b/train_gpt.py", "--x"}), "train_gpt");
  EXPECT_EQ(JobNameFromCommand({"/usr/bin/python3", "-m", "pkg.mod"}), "pkg.mod");
  EXPECT_EQ(JobNameFromCommand({"./my trainer!"}), "mytrainer");
  EXPECT_EQ(JobNameFromCommand({"/x/.."}), "run");  // never a path that climbs out of holdfast-runs
  EXPECT_EQ(JobNameFromCommand({"ünï.py"}), "n");  // only [a-zA-Z0-9._-] kept
}

TEST(LaunchFlagsTest, TheDefaultRunDirIsUnderTheSubmitDirInASlurmJob) {
  ::unsetenv("SLURM_JOB_ID");
  EXPECT_EQ(DefaultRunDir("train", "/home/u/proj"), "/home/u/proj/holdfast-runs/train");
  ::setenv("SLURM_JOB_ID", "42", 1);
  ::setenv("SLURM_SUBMIT_DIR", "/lustre/p", 1);
  EXPECT_EQ(DefaultRunDir("train", "/tmp/node-local"), "/lustre/p/holdfast-runs/train");
  ::unsetenv("SLURM_JOB_ID");
  ::unsetenv("SLURM_SUBMIT_DIR");
}

TEST(LaunchFlagsTest, VisibleGpusComeFromCudaVisibleDevicesElseTheDriversProcTree) {
  EXPECT_EQ(CountVisibleGpus("0,1,2,3"), 4);
  EXPECT_EQ(CountVisibleGpus(""), 0);
  const auto root = std::filesystem::temp_directory_path() / ("hf_proc_" + std::to_string(::getpid()));
  for (const char* bus : {"0000:17:00.0", "0000:2a:00.0"}) {
    std::filesystem::create_directories(root / "driver/nvidia/gpus" / bus);
    std::ofstream(root / "driver/nvidia/gpus" / bus / "information") << "Model: NVIDIA H200\n";
  }
  EXPECT_EQ(CountVisibleGpus(nullptr, root.string()), 2);
  EXPECT_EQ(CountVisibleGpus(nullptr, (root / "none").string()), 0);
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace holdfast
