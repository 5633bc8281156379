// A GRPO run under a real holdfastd — the learner (holdfast-train), two
// rollout workers (holdfast-rollout) and the reward service (holdfast-reward),
// each a supervised process — with real SIGKILLs: of a rollout worker in the
// middle of a group, of the reward service with a request in flight, of the
// learner's rank. The run is synchronous (rl.max_staleness = 0), so it is
// deterministic: each faulted run must end with exactly the parameters of the
// fault-free run, which proves that no group was lost, none was trained on
// twice, and none came from a policy a restarted learner rolled back.
//
// "In the middle of a group" is made exact, not lucky: the reward service is
// SIGSTOPped first, so every worker that starts a group blocks in its reward
// request (its journal's last line is "start"); only then is the worker (or
// the service) killed, and the service continued. Which worker that is
// depends on the moment (one may have made all of its groups of the step and
// wait for the next demand, which the learner cannot write while the other's
// groups are missing), so the test kills the one that is mid-group: with the
// service stopped the step cannot complete, so one always is.
//
// The same run with a learned reward (holdfast-reward --model: a reward model
// trained here on the task's reward pairs) has its own fault-free reference;
// its service is killed in the middle of a batch — stopped while its progress
// record says a batch is out (phase forward), then SIGKILLed.
//
// Every wait has a deadline far beyond its expected time and says what it
// waited for (a backstop, not a timing assertion): a wait that can never end
// fails with its reason instead of at the ctest timeout.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/progress_record.h"
#include "tests/support/daemon_client.h"
#include "tests/support/subprocess.h"

namespace holdfast {
namespace {

using testing::BuildPath;
using testing::ChildProcess;
using testing::LatestRunEvents;
using testing::LatestRunGenerations;
using testing::ProcessResult;
using testing::ReadFile;
using testing::RunProcess;
using testing::TempDir;
using testing::WaitForStatus;
using testing::WaitUntil;
using testing::WriteFile;

constexpr int kSteps = 10;
// Backstop of every wait (seconds): far beyond what any of them takes on a
// loaded 2-core machine.
constexpr double kDeadlineS = 600;

std::string ModelToml() {
  return "[model]\nn_layer = 2\nn_head = 4\nn_embd = 64\nblock_size = 16\nvocab_size = 256\n";
}

// The GRPO learner's config (the workers read it too); `out` is output.dir.
std::string GrpoToml(const std::string& init, const std::string& out, int staleness) {
  std::ostringstream os;
  os << ModelToml() << "[train]\nobjective = \"grpo\"\ninit_from = \"" << init << "\"\nsteps = " << kSteps
     << "\nmicro_batch = 32\nseed = 5\nthreads = 1\nlog_every = 1\n"
     << "[optim]\nlr = 1e-3\nmin_lr = 1e-3\nwarmup_steps = 0\nweight_decay = 0.0\n"
     << "[rl]\ntask = \"add2\"\nprompts_per_step = 4\ngroup_size = 8\nmax_new_tokens = 5\nmax_staleness = "
     << staleness << "\nwait_timeout_s = 300\nledger = true\n"
     << "[checkpoint]\ndir = \"checkpoints\"\nevery_steps = 3\n"
     << "[output]\ndir = \"" << out << "\"\n";
  return os.str();
}

bool Gone(int64_t pid) { return kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH; }

// The journal lines of worker `w` (trainer/rl/exchange.h: workers/wI.jsonl).
std::vector<nlohmann::json> Journal(const std::string& rl_dir, int w) {
  std::vector<nlohmann::json> out;
  std::ifstream in(rl_dir + "/workers/w" + std::to_string(w) + ".jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded()) out.push_back(j);
  }
  return out;
}

class RlFaultsTest : public ::testing::Test {
 protected:
  // SFT weights to start from (the task's format and some arithmetic, so that
  // rewards vary within groups), and the fault-free GRPO run's parameters.
  static void SetUpTestSuite() {
    shared_ = new TempDir("rl_faults_ref");
    ProcessResult emit = RunProcess({BuildPath("trainer/rl/holdfast-reward"), "--task", "add2", "--emit", "sft",
                                     "--count", "3000", "--out", *shared_ / "sft.jsonl"});
    ASSERT_EQ(emit.exit_code, 0) << emit.output;
    WriteFile(*shared_ / "sft.toml", ModelToml() + "[data]\nformat = \"sft\"\npath = \"" + (*shared_ / "sft.jsonl") +
                                         "\"\n[train]\nsteps = 300\nmicro_batch = 64\nseed = 7\nthreads = 1\n"
                                         "log_every = 100\n[optim]\nlr = 3e-3\nmin_lr = 3e-4\nwarmup_steps = 20\n"
                                         "weight_decay = 0.0\n[output]\ndir = \"" +
                                         (*shared_ / "sft") + "\"\n");
    ProcessResult sft = RunProcess({BuildPath("trainer/holdfast-train"), "--config", *shared_ / "sft.toml",
                                    "--dump-final", *shared_ / "sft/final"});
    ASSERT_EQ(sft.exit_code, 0) << sft.output;
    // A reward model from the SFT weights: 150 steps of the task's reward pairs.
    ProcessResult pairs = RunProcess({BuildPath("trainer/rl/holdfast-reward"), "--task", "add2", "--emit",
                                      "reward-pairs", "--count", "3000", "--out", *shared_ / "pairs.jsonl"});
    ASSERT_EQ(pairs.exit_code, 0) << pairs.output;
    WriteFile(*shared_ / "rm.toml", ModelToml() + "reward_head = true\n[data]\nformat = \"preference\"\npath = \"" +
                                        (*shared_ / "pairs.jsonl") + "\"\n[train]\nobjective = \"reward\"\n"
                                        "init_from = \"" + (*shared_ / "sft/final") + "\"\nsteps = 150\n"
                                        "micro_batch = 32\nseed = 3\nthreads = 1\nlog_every = 50\n[optim]\n"
                                        "lr = 1e-3\nmin_lr = 1e-4\nwarmup_steps = 10\nweight_decay = 0.0\n"
                                        "[output]\ndir = \"" + (*shared_ / "rm") + "\"\n");
    ProcessResult rm = RunProcess({BuildPath("trainer/holdfast-train"), "--config", *shared_ / "rm.toml",
                                   "--dump-final", *shared_ / "rm/final"});
    ASSERT_EQ(rm.exit_code, 0) << rm.output;
    // The fault-free reference: the same supervised job, nothing injected.
    RlFaultsTest ref;
    ref.WriteJob();
    ChildProcess daemon(ref.Daemon(), ref.dir_ / "daemon.log");
    ASSERT_EQ(daemon.Wait(), 0) << ReadFile(ref.dir_ / "daemon.log");
    reference_ = ReadFile(ref.dir_ / "final/params.bin");
    ASSERT_FALSE(reference_.empty());
    // Without faults the workers get the policy from the learner over the network, the first version aside.
    const auto [network, files] = ref.LoadsVia();
    EXPECT_GT(network, files) << network << " loads over the network, " << files << " from files";
    const std::string sft_params = ReadFile(*shared_ / "sft/final/params.bin");
    ASSERT_NE(reference_, sft_params) << "GRPO did not change the parameters: the test would prove nothing";
    // The fault-free reference with the learned reward.
    RlFaultsTest model_ref;
    model_ref.model_reward_ = true;
    model_ref.WriteJob();
    ChildProcess model_daemon(model_ref.Daemon(), model_ref.dir_ / "daemon.log");
    ASSERT_EQ(model_daemon.Wait(), 0) << ReadFile(model_ref.dir_ / "daemon.log");
    model_reference_ = ReadFile(model_ref.dir_ / "final/params.bin");
    ASSERT_FALSE(model_reference_.empty());
    ASSERT_NE(model_reference_, reference_) << "the learned reward changed nothing: the test would prove nothing";
  }
  static void TearDownTestSuite() { delete shared_; }

  RlFaultsTest() : dir_("rl_faults") {}
  void TestBody() override {}

  std::string rl_dir() const { return dir_ / "out/rl"; }

  // staleness: rl.max_staleness (0 = synchronous, deterministic); hang_min_s:
  // the learner's hang allowance.
  void WriteJob(int staleness = 0, double hang_min_s = 120) {
    WriteFile(dir_ / "grpo.toml", GrpoToml(*shared_ / "sft/final", dir_ / "out", staleness));
    const std::string cfg = dir_ / "grpo.toml";
    std::ostringstream os;
    os << "[job]\nname = \"grpo-faults\"\ncommand = [\"" << BuildPath("trainer/holdfast-train") << "\", \"--config\", \""
       << cfg << "\", \"--dump-final\", \"" << dir_ / "final" << "\"]\nnproc = 1\ncheckpoint_dir = \""
       << dir_ / "out/checkpoints" << "\"\n"
       << "[supervise]\npoll_ms = 50\nhang_min_s = " << hang_min_s << "\nstartup_timeout_s = 120\nrestart_budget = 2\n"
       << "term_grace_s = 2\nbackoff_initial_s = 0.1\nprogress_dir = \"" << dir_ / "shm" << "\"\n"
       << "[health]\ncheckpoint_min_free_gb = 0.05\ncheckpoint_write_mb = 4\ncheckpoint_write_fail_mbps = 0\n"
       << "[[roles]]\nname = \"rollout\"\ncommand = [\"" << BuildPath("trainer/holdfast-rollout") << "\", \"--config\", \""
       << cfg << "\"]\ncount = 2\nrestart = \"alone\"\n"
       << "[[roles]]\nname = \"reward\"\ncommand = [\"" << BuildPath("trainer/rl/holdfast-reward")
       << "\", \"--task\", \"add2\", \"--addr-file\", \"" << rl_dir() << "/reward.addr\"";
    if (model_reward_) {
      os << ", \"--model\", \"" << *shared_ / "rm/final" << "\", \"--model-config\", \"" << *shared_ / "rm.toml"
         << "\"";
    }
    os << "]\ncount = 1\nrestart = \"alone\"\n";
    WriteFile(dir_ / "job.toml", os.str());
  }

  std::vector<std::string> Daemon() const {
    return {BuildPath("daemon/holdfastd"), "--run-dir", dir_ / "run", "--config", dir_ / "job.toml"};
  }

  // Learner at `step` or later, and every role process running.
  static bool Trained(const RunStatus& s, int64_t step) {
    if (s.nodes.empty() || s.nodes[0].ranks.size() != 1 || s.roles.size() != 3) return false;
    if (s.nodes[0].ranks[0].step < step || s.nodes[0].ranks[0].state != "running") return false;
    for (const auto& r : s.roles) {
      if (r.state != "running") return false;
    }
    return true;
  }
  static int64_t RolePid(const RunStatus& s, const std::string& role, int index) {
    for (const auto& r : s.roles) {
      if (r.role == role && r.index == index) return r.pid;
    }
    return 0;
  }

  // A worker in the middle of a group: its journal ends in a "start" of
  // prompt q and q has no group file, the same for a whole second (a reply
  // the service sent just before it was stopped is written within
  // milliseconds). With the reward service stopped, one worker always gets
  // there. Returns (worker, q).
  std::optional<std::pair<int, uint64_t>> WaitMidGroup(ChildProcess& daemon) const {
    std::optional<std::pair<int, uint64_t>> seen;
    std::optional<std::chrono::steady_clock::time_point> since;
    std::optional<std::pair<int, uint64_t>> found;
    WaitUntil(daemon, "a rollout worker in the middle of a group (journal ends in \"start\")", kDeadlineS, [&] {
      std::optional<std::pair<int, uint64_t>> now;
      for (int w = 0; w < 2 && !now; ++w) {
        auto j = Journal(rl_dir(), w);
        if (j.empty() || j.back()["event"] != "start") continue;
        const uint64_t q = j.back()["q"].get<uint64_t>();
        char name[48];
        std::snprintf(name, sizeof(name), "/rollouts/q%010llu.json", static_cast<unsigned long long>(q));
        if (!std::filesystem::exists(rl_dir() + name)) now = std::make_pair(w, q);
      }
      if (now != seen) {
        seen = now;
        since = std::chrono::steady_clock::now();
        return false;
      }
      if (seen && std::chrono::steady_clock::now() - *since >= std::chrono::seconds(1)) {
        found = seen;
        return true;
      }
      return false;
    });
    return found;
  }

  void ExpectBitExact(ChildProcess& daemon) {
    ASSERT_EQ(daemon.Wait(), 0) << ReadFile(dir_ / "daemon.log");
    const std::string params = ReadFile(dir_ / "final/params.bin");
    ASSERT_FALSE(params.empty()) << ReadFile(dir_ / "daemon.log");
    EXPECT_TRUE(params == (model_reward_ ? model_reference_ : reference_))
        << "the final parameters differ from the fault-free run's";
    // The workers got the policy from the learner over the network too (the
    // exchange directory is the fallback: a first version before the
    // subscriber connects, a learner being restarted).
    EXPECT_GT(LoadsVia().first, 0) << "no policy version came over the network";
  }

  // Policy versions the workers loaded (their journals): {over the network, from files}.
  std::pair<int, int> LoadsVia() const {
    int network = 0, files = 0;
    for (int w = 0; w < 2; ++w) {
      for (const auto& j : Journal(rl_dir(), w)) {
        if (j["event"] != "weights") continue;
        (j.value("via", "") == "network" ? network : files) += 1;
      }
    }
    return {network, files};
  }

  // After a SIGKILL of the reward service (pid in `before`): it alone restarts
  // (the learner and both workers keep their pids: a worker retries, it does
  // not die with the service), the run ends bit-exact with one generation, and
  // lineage holds that one role_crash.
  void ExpectRewardRestartedAlone(ChildProcess& daemon, const RunStatus& before) {
    const int64_t reward = RolePid(before, "reward", 0);
    auto st = WaitForStatus(daemon, dir_ / "run", "reward[0] restarted", kDeadlineS, [&](const RunStatus& s) {
      return Trained(s, 0) && RolePid(s, "reward", 0) != reward && RolePid(s, "reward", 0) != 0;
    });
    ASSERT_TRUE(st) << ReadFile(dir_ / "daemon.log");
    EXPECT_EQ(st->nodes[0].ranks[0].pid, before.nodes[0].ranks[0].pid);
    EXPECT_EQ(RolePid(*st, "rollout", 0), RolePid(before, "rollout", 0)) << "a worker retries; it does not die";
    EXPECT_EQ(RolePid(*st, "rollout", 1), RolePid(before, "rollout", 1));
    ExpectBitExact(daemon);
    EXPECT_EQ(LatestRunGenerations(dir_ / "run"), 1u);
    int role_crashes = 0;
    for (const EventRecord& e : LatestRunEvents(dir_ / "run")) {
      if (e.kind != "role_crash") continue;
      ++role_crashes;
      EXPECT_NE(e.summary.find("role reward[0] killed by signal 9"), std::string::npos) << e.summary;
    }
    EXPECT_EQ(role_crashes, 1);
  }

  // The reward service's progress record (role reward[0]).
  std::string RewardRecord() const {
    for (const auto& e : std::filesystem::directory_iterator(dir_ / "shm")) {
      const std::string name = e.path().filename().string();
      if (name.size() > 18 && name.compare(name.size() - 18, 18, "-role-reward-0.rec") == 0) return e.path().string();
    }
    return "";
  }

  static inline TempDir* shared_ = nullptr;
  static inline std::string reference_;
  static inline std::string model_reference_;  // the fault-free run with the learned reward
  bool model_reward_ = false;                  // the reward service serves the reward model
  TempDir dir_;
};

TEST_F(RlFaultsTest, ARolloutWorkerKilledMidGroupRestartsAloneAndItsGroupIsMadeAgain) {
  WriteJob();
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  auto st = WaitForStatus(daemon, dir_ / "run", "the learner past step 2 with every role running", kDeadlineS,
                          [](const RunStatus& s) { return Trained(s, 2); });
  ASSERT_TRUE(st) << ReadFile(dir_ / "daemon.log");
  const int64_t learner = st->nodes[0].ranks[0].pid;
  const int64_t reward = RolePid(*st, "reward", 0);
  ASSERT_EQ(kill(static_cast<pid_t>(reward), SIGSTOP), 0);
  auto mid = WaitMidGroup(daemon);
  ASSERT_TRUE(mid) << ReadFile(dir_ / "daemon.log");
  const auto [w, q] = *mid;
  const int other = 1 - w;
  const int64_t victim = RolePid(*st, "rollout", w), bystander = RolePid(*st, "rollout", other);
  ASSERT_EQ(kill(static_cast<pid_t>(victim), SIGKILL), 0);
  ASSERT_EQ(kill(static_cast<pid_t>(reward), SIGCONT), 0);
  st = WaitForStatus(daemon, dir_ / "run", "rollout[" + std::to_string(w) + "] restarted", kDeadlineS,
                     [&, w = w](const RunStatus& s) {
                       return Trained(s, 0) && RolePid(s, "rollout", w) != victim && RolePid(s, "rollout", w) != 0;
                     });
  ASSERT_TRUE(st) << ReadFile(dir_ / "daemon.log");
  EXPECT_EQ(st->nodes[0].ranks[0].pid, learner) << "the learner must not restart";
  EXPECT_EQ(RolePid(*st, "rollout", other), bystander) << "the other worker must not restart";
  EXPECT_EQ(RolePid(*st, "reward", 0), reward);
  ExpectBitExact(daemon);
  EXPECT_EQ(LatestRunGenerations(dir_ / "run"), 1u) << "the learner ran one generation";
  // The group the killed worker was making was made again, by its successor.
  bool remade = false;
  for (const auto& j : Journal(rl_dir(), w)) {
    if (j["event"] != "done" || j["q"].get<uint64_t>() != q) continue;
    EXPECT_NE(j["pid"].get<int64_t>(), victim) << "the killed worker cannot have finished it";
    if (j["pid"].get<int64_t>() != victim) remade = true;
  }
  EXPECT_TRUE(remade) << "group q=" << q << " was not made again";
  int role_crashes = 0;
  const std::string killed = "role rollout[" + std::to_string(w) + "] killed by signal 9";
  for (const EventRecord& e : LatestRunEvents(dir_ / "run")) {
    if (e.kind != "role_crash") continue;
    ++role_crashes;
    EXPECT_NE(e.summary.find(killed), std::string::npos) << e.summary;
  }
  EXPECT_EQ(role_crashes, 1);
  for (int64_t pid : {learner, bystander, reward}) EXPECT_TRUE(Gone(pid)) << pid << " outlived the run";
}

TEST_F(RlFaultsTest, TheRewardServiceKilledWithARequestInFlightLosesNothing) {
  WriteJob();
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  auto st = WaitForStatus(daemon, dir_ / "run", "the learner past step 2 with every role running", kDeadlineS,
                          [](const RunStatus& s) { return Trained(s, 2); });
  ASSERT_TRUE(st) << ReadFile(dir_ / "daemon.log");
  const int64_t reward = RolePid(*st, "reward", 0);
  ASSERT_EQ(kill(static_cast<pid_t>(reward), SIGSTOP), 0);
  ASSERT_TRUE(WaitMidGroup(daemon));  // a worker's request is in flight
  ASSERT_EQ(kill(static_cast<pid_t>(reward), SIGKILL), 0);
  ExpectRewardRestartedAlone(daemon, *st);
}

// The learned reward's service SIGKILLed in the middle of a batch: stopped
// (SIGSTOP) at a moment its record says a batch is out (phase forward, the
// loop thread sets it back only after answering it), confirmed still so while
// stopped, then killed. Only it restarts; the workers whose requests were in
// the batch send them again to the new service (their logs say so) and keep
// their pids; the run ends with the fault-free run's parameters — no sample
// lost, none scored twice or scored differently.
TEST_F(RlFaultsTest, TheRewardModelServiceKilledMidBatchRestartsAloneAndLosesNothing) {
  model_reward_ = true;
  WriteJob();
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  auto st = WaitForStatus(daemon, dir_ / "run", "the learner past step 2 with every role running", kDeadlineS,
                          [](const RunStatus& s) { return Trained(s, 2); });
  ASSERT_TRUE(st) << ReadFile(dir_ / "daemon.log");
  const int64_t reward = RolePid(*st, "reward", 0);
  const std::string record = RewardRecord();
  ASSERT_FALSE(record.empty()) << "no progress record of reward[0] under " << dir_ / "shm";
  auto reader = ProgressReader::Open(record);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  auto scoring = [&] {
    const ProgressSnapshot snap = (*reader)->Read();
    return snap.valid && !snap.torn && snap.record.phase == static_cast<uint8_t>(Phase::kForward);
  };
  int tries = 0;
  ASSERT_TRUE(WaitUntil(daemon, "the reward service stopped with a batch out", kDeadlineS, [&] {
    // Look closely (a batch of this model is out for milliseconds) for a while, then let WaitUntil pause.
    for (int i = 0; i < 2000; ++i) {
      if (scoring()) {
        ++tries;
        EXPECT_EQ(kill(static_cast<pid_t>(reward), SIGSTOP), 0);
        if (scoring()) return true;  // stopped before it answered the batch
        EXPECT_EQ(kill(static_cast<pid_t>(reward), SIGCONT), 0);
      }
      usleep(100);
    }
    return false;
  })) << ReadFile(dir_ / "daemon.log");
  ASSERT_EQ(kill(static_cast<pid_t>(reward), SIGKILL), 0);
  ExpectRewardRestartedAlone(daemon, *st);
  // A request of the batch was sent again: the worker that made it says so.
  const std::string logs =
      ReadFile(dir_ / "run/logs/a1-role-rollout-0.log") + ReadFile(dir_ / "run/logs/a1-role-rollout-1.log");
  EXPECT_NE(logs.find("sending it again until the service answers"), std::string::npos) << logs.substr(0, 4000);
  // The new service loaded the model, not the rule.
  EXPECT_NE(ReadFile(dir_ / "run/logs/a1-role-reward-0.log").find("rewards: reward model params dump"),
            std::string::npos);
  std::printf("reward service stopped mid-batch after %d look(s)\n", tries);
}

// The reward service stopped (SIGSTOP) and left so: the learner waits for
// groups in `data` until its hang allowance runs out. What hangs is the
// service, not the learner: holdfastd names reward[0] as stopped, kills and
// restarts it alone (role_hang), and the learner — never restarted, never
// blamed — finishes with the fault-free run's parameters. The workers retry
// their requests against the new service and keep their pids too.
TEST_F(RlFaultsTest, AStoppedRewardServiceIsNamedAndRestartedAloneWhileTheLearnerWaits) {
  WriteJob(/*staleness=*/0, /*hang_min_s=*/20);
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  auto st = WaitForStatus(daemon, dir_ / "run", "the learner past step 2 with every role running", kDeadlineS,
                          [](const RunStatus& s) { return Trained(s, 2); });
  ASSERT_TRUE(st) << ReadFile(dir_ / "daemon.log");
  const int64_t learner = st->nodes[0].ranks[0].pid;
  const int64_t worker0 = RolePid(*st, "rollout", 0), worker1 = RolePid(*st, "rollout", 1);
  const int64_t reward = RolePid(*st, "reward", 0);
  ASSERT_EQ(kill(static_cast<pid_t>(reward), SIGSTOP), 0);
  st = WaitForStatus(daemon, dir_ / "run", "holdfastd to restart the stopped reward[0]", kDeadlineS,
                     [&](const RunStatus& s) {
                       return Trained(s, 0) && RolePid(s, "reward", 0) != reward && RolePid(s, "reward", 0) != 0;
                     });
  ASSERT_TRUE(st) << ReadFile(dir_ / "daemon.log");
  EXPECT_EQ(st->nodes[0].ranks[0].pid, learner) << "the learner is not what hung: it must not restart";
  EXPECT_EQ(RolePid(*st, "rollout", 0), worker0) << "the workers wait for the service; they must not restart";
  EXPECT_EQ(RolePid(*st, "rollout", 1), worker1);
  ExpectBitExact(daemon);
  EXPECT_EQ(LatestRunGenerations(dir_ / "run"), 1u) << "the learner ran one generation";
  EXPECT_TRUE(Gone(reward)) << "the stopped service was not killed";
  int role_hangs = 0;
  for (const EventRecord& e : LatestRunEvents(dir_ / "run")) {
    EXPECT_NE(e.kind, "hang") << "the learner was blamed: " << e.summary;
    EXPECT_NE(e.kind, "role_crash") << e.summary;
    if (e.kind != "role_hang") continue;
    ++role_hangs;
    EXPECT_NE(e.summary.find("role reward[0] is stopped (SIGSTOP); the learner has waited"), std::string::npos)
        << e.summary;
    EXPECT_NE(e.summary.find("in data of step"), std::string::npos) << e.summary;
    EXPECT_NE(e.action.find("the learner and the other role processes keep running"), std::string::npos) << e.action;
  }
  EXPECT_EQ(role_hangs, 1);
}

TEST_F(RlFaultsTest, ALearnerKilledResumesWithItsBufferAndPolicyVersionAndEndsBitExact) {
  WriteJob();
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  // Past the checkpoint of step 3 and into step 5 or later: a step is lost.
  auto st = WaitForStatus(daemon, dir_ / "run", "the learner past step 5 with every role running", kDeadlineS,
                          [](const RunStatus& s) { return Trained(s, 5); });
  ASSERT_TRUE(st) << ReadFile(dir_ / "daemon.log");
  const int64_t learner = st->nodes[0].ranks[0].pid;
  const int64_t worker0 = RolePid(*st, "rollout", 0), worker1 = RolePid(*st, "rollout", 1);
  const int64_t reward = RolePid(*st, "reward", 0);
  ASSERT_EQ(kill(static_cast<pid_t>(learner), SIGKILL), 0);
  st = WaitForStatus(daemon, dir_ / "run", "the learner restarted", kDeadlineS, [&](const RunStatus& s) {
    return Trained(s, 0) && s.nodes[0].ranks[0].pid != learner && s.nodes[0].ranks[0].pid != 0;
  });
  ASSERT_TRUE(st) << ReadFile(dir_ / "daemon.log");
  EXPECT_EQ(RolePid(*st, "rollout", 0), worker0) << "workers keep running through a learner restart";
  EXPECT_EQ(RolePid(*st, "rollout", 1), worker1);
  EXPECT_EQ(RolePid(*st, "reward", 0), reward);
  ExpectBitExact(daemon);
  EXPECT_EQ(LatestRunGenerations(dir_ / "run"), 2u);
  for (const EventRecord& e : LatestRunEvents(dir_ / "run")) {
    EXPECT_NE(e.kind, "role_crash") << "a learner restart must not crash a role process: " << e.summary;
  }
  // The restarted learner said where it resumed from, buffer and version included.
  const std::string log = ReadFile(dir_ / "run/logs/a1-g1-rank0.log");
  EXPECT_NE(log.find("GRPO: resumed at policy version"), std::string::npos) << log;
}

// Asynchronous (rl.max_staleness = 2): workers run ahead, so the learner's
// checkpoint holds groups in its replay buffer. Not deterministic, so instead
// of parameters the ledger of what each step trained on (the final timeline:
// a step trained again after the restart rewrote its file) must show every
// prompt trained exactly once, in its step, within the staleness bound.
TEST_F(RlFaultsTest, AnAsynchronousLearnerKilledResumesItsReplayBufferAndTrainsEveryPromptOnce) {
  WriteJob(/*staleness=*/2);
  ChildProcess daemon(Daemon(), dir_ / "daemon.log");
  auto st = WaitForStatus(daemon, dir_ / "run", "the learner past step 5 with every role running", kDeadlineS,
                          [](const RunStatus& s) { return Trained(s, 5); });
  ASSERT_TRUE(st) << ReadFile(dir_ / "daemon.log");
  const int64_t learner = st->nodes[0].ranks[0].pid;
  ASSERT_EQ(kill(static_cast<pid_t>(learner), SIGKILL), 0);
  ASSERT_EQ(daemon.Wait(), 0) << ReadFile(dir_ / "daemon.log");
  EXPECT_EQ(LatestRunGenerations(dir_ / "run"), 2u);
  // The restarted learner's buffer is the one its checkpoint held (how full
  // it was depends on how far the workers had run ahead: not asserted).
  const std::string log = ReadFile(dir_ / "run/logs/a1-g1-rank0.log");
  long long version = -1, restored = -1;
  const size_t at = log.find("GRPO: resumed at policy version");
  ASSERT_NE(at, std::string::npos) << log;
  ASSERT_EQ(std::sscanf(log.c_str() + at, "GRPO: resumed at policy version %lld with a replay buffer of %lld groups",
                        &version, &restored),
            2)
      << log.substr(at, 200);
  const std::string saved_line = "GRPO: the checkpoint of step " + std::to_string(version) + " holds a replay buffer of ";
  const std::string first = ReadFile(dir_ / "run/logs/a1-g0-rank0.log");
  const size_t saved = first.find(saved_line);
  ASSERT_NE(saved, std::string::npos) << "no save of step " << version << " in the first learner's log";
  EXPECT_EQ(std::atoll(first.c_str() + saved + saved_line.size()), restored)
      << "the resumed replay buffer differs from the checkpointed one";
  std::map<uint64_t, int> trained;
  for (int s = 0; s < kSteps; ++s) {
    char name[32];
    std::snprintf(name, sizeof(name), "/trained/s%08d.jsonl", s);
    std::istringstream lines(ReadFile(rl_dir() + name));
    std::string line;
    int groups = 0;
    while (std::getline(lines, line)) {
      auto g = nlohmann::json::parse(line);
      const uint64_t q = g["q"].get<uint64_t>();
      const int64_t version = g["version"].get<int64_t>();
      EXPECT_EQ(q / 4, static_cast<uint64_t>(s)) << "step " << s << " trained prompt " << q;
      EXPECT_LE(version, s) << "prompt " << q << " from a policy newer than its step";
      EXPECT_GE(version, s - 2) << "prompt " << q << " staler than rl.max_staleness";
      ++trained[q];
      ++groups;
    }
    EXPECT_EQ(groups, 4) << "step " << s;
  }
  ASSERT_EQ(trained.size(), static_cast<size_t>(kSteps * 4));
  for (const auto& [q, n] : trained) EXPECT_EQ(n, 1) << "prompt " << q << " trained " << n << " times";
}

// Preemption while the learner waits for groups (the reward service frozen,
// so no group can come): SIGTERM must not wait for the samples. The learner
// checkpoints its last completed step and exits 75 (preempted) at once; a
// new learner resumes from that checkpoint and ends with the fault-free
// run's parameters. Real processes without holdfastd: the learner's own
// handling of the signal is what is tested.
TEST_F(RlFaultsTest, ALearnerPreemptedWhileWaitingForGroupsCheckpointsAndResumesBitExact) {
  WriteJob();  // writes grpo.toml
  const std::string cfg = dir_ / "grpo.toml";
  ChildProcess reward({BuildPath("trainer/rl/holdfast-reward"), "--task", "add2", "--addr-file",
                       rl_dir() + "/reward.addr"},
                      dir_ / "reward.log");
  ChildProcess w0({BuildPath("trainer/holdfast-rollout"), "--config", cfg, "--worker", "0", "--workers", "2"},
                  dir_ / "w0.log");
  ChildProcess w1({BuildPath("trainer/holdfast-rollout"), "--config", cfg, "--worker", "1", "--workers", "2"},
                  dir_ / "w1.log");
  std::vector<std::string> learner_argv = {BuildPath("trainer/holdfast-train"), "--config", cfg, "--dump-final",
                                           dir_ / "final"};
  {
    ChildProcess learner(learner_argv, dir_ / "learner1.log");
    // Metrics lines: one per completed step (eval is off).
    ASSERT_TRUE(WaitUntil(learner, "4 metrics lines (steps)", kDeadlineS, [&] {
      std::istringstream in(ReadFile(dir_ / "out/metrics.jsonl"));
      std::string line;
      int n = 0;
      while (std::getline(in, line)) n += line.empty() ? 0 : 1;
      return n >= 4;
    })) << ReadFile(dir_ / "learner1.log");
    reward.Signal(SIGSTOP);
    // A worker in a group that cannot be scored holds weights of version s
    // (synchronous: only step s's prompts are made with them), which the
    // learner publishes when it starts waiting for step s's groups; one of
    // them cannot come now, so the learner is waiting, and stays so.
    ASSERT_TRUE(WaitMidGroup(learner)) << ReadFile(dir_ / "learner1.log");
    learner.Signal(SIGTERM);
    EXPECT_EQ(learner.Wait(), 75) << ReadFile(dir_ / "learner1.log");
  }
  const std::string log1 = ReadFile(dir_ / "learner1.log");
  EXPECT_NE(log1.find("stopped while waiting for the groups of step"), std::string::npos) << log1;
  EXPECT_NE(log1.find("exiting for preemption"), std::string::npos) << log1;
  reward.Signal(SIGCONT);
  ChildProcess again(learner_argv, dir_ / "learner2.log");
  EXPECT_EQ(again.Wait(), 0) << ReadFile(dir_ / "learner2.log");
  EXPECT_NE(ReadFile(dir_ / "learner2.log").find("GRPO: resumed at policy version"), std::string::npos);
  const std::string params = ReadFile(dir_ / "final/params.bin");
  EXPECT_TRUE(!params.empty() && params == reference_) << "the final parameters differ from the fault-free run's";
}

}  // namespace
}  // namespace holdfast
