// Runs the real runctl binary against lineage.db files built through
// LineageDb, and against a stand-in daemon on a real Unix socket.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/checkpoint_writer.h"
#include "checkpoint/format.h"
#include "common/memory_store.h"
#include "daemon/control_protocol.h"
#include "lineage/lineage_db.h"

extern char** environ;

namespace holdfast {
namespace {

using json = nlohmann::json;

constexpr char kRunA[] = "r-20250101-aaaa";  // failed after a crash and a hang
constexpr char kRunB[] = "r-20250101-aabb";  // still running, no incident
constexpr int64_t kT0 = 1735732800000;       // 2025-01-01 12:00:00Z

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Outcome {
  int exit = -1;
  std::string out, err;
};

class RunctlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/runctl-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (std::getenv("RUNCTL_TEST_KEEP") != nullptr) {  // to look at what runctl printed
      std::fprintf(stderr, "kept %s\n", dir_.c_str());
      return;
    }
    std::system(("rm -rf '" + dir_ + "'").c_str());
  }

  // runctl --run-dir DIR ARGS..., with `env` added to the environment.
  Outcome Run(std::vector<std::string> args, std::vector<std::string> env = {},
              bool with_run_dir = true) {
    std::vector<std::string> argv = {RUNCTL_PATH};
    if (with_run_dir) {
      argv.push_back("--run-dir");
      argv.push_back(dir_);
    }
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargv;
    for (std::string& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    for (char** e = environ; *e != nullptr; ++e) env.push_back(*e);
    std::vector<char*> cenv;
    for (std::string& e : env) cenv.push_back(e.data());
    cenv.push_back(nullptr);

    const std::string out_path = dir_ + "/.out", err_path = dir_ + "/.err";
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = 0;
    int rc = posix_spawn(&pid, RUNCTL_PATH, &fa, nullptr, cargv.data(), cenv.data());
    posix_spawn_file_actions_destroy(&fa);
    Outcome o;
    if (rc != 0) {
      ADD_FAILURE() << "posix_spawn runctl: " << strerror(rc);
      return o;
    }
    int ws = 0;
    EXPECT_EQ(waitpid(pid, &ws, 0), pid);
    EXPECT_TRUE(WIFEXITED(ws)) << "runctl died of signal " << WTERMSIG(ws);
    o.exit = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    o.out = ReadFile(out_path);
    o.err = ReadFile(err_path);
    return o;
  }

  json RunJson(std::vector<std::string> args) {
    args.push_back("--json");
    Outcome o = Run(args);
    EXPECT_EQ(o.exit, 0) << o.err;
    json j = json::parse(o.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << o.out;
    return j;
  }

  std::string db_path() const { return dir_ + "/lineage.db"; }

  // The folder BuildLineage records for a checkpoint of `step`.
  std::string CheckpointPath(int64_t step) const { return dir_ + "/checkpoints/" + StepDirName(step); }
  // That folder on disk: a real one-rank checkpoint (CheckpointWriter), or,
  // without `manifest`, a save that never finished (a folder, no manifest).
  std::string MakeCheckpointDir(int64_t step, bool manifest) {
    const std::string root = dir_ + "/checkpoints";
    const std::string d = CheckpointPath(step);
    if (!manifest) {
      std::filesystem::create_directories(d);
      return d;
    }
    CheckpointWriterOptions o;
    o.root = root;
    o.rank = 0;
    o.world_size = 1;
    o.layout = "dp=1";
    o.config_hash = "cfg";
    o.store = std::make_shared<InMemoryStore>();
    o.retention.keep_last = 100;
    auto w = CheckpointWriter::Create(o);
    HF_CHECK_MSG(w.ok(), w.status().ToString());
    const std::string meta = "{}";
    std::vector<float> params(256, 0.5f);
    std::vector<BufferView> views = {{"meta", meta.data(), meta.size()},
                                     {"params", params.data(), params.size() * sizeof(float), true}};
    HF_CHECK((*w)->Save(step, views).ok());
    HF_CHECK((*w)->Flush().ok());
    return d;
  }

  std::unique_ptr<LineageDb> OpenWriter() {
    Result<std::unique_ptr<LineageDb>> db = LineageDb::Open(db_path());
    HF_CHECK_MSG(db.ok(), db.status().ToString());
    return std::move(db).value();
  }

  // Two runs: A crashed (rank 1, SIGSEGV), restarted, then hung in an
  // allreduce and ran out of restarts; B is running.
  void BuildLineage() {
    int64_t now = kT0;
    LineageOptions options;
    options.clock = [&now] { return now += 1000; };
    Result<std::unique_ptr<LineageDb>> db = LineageDb::Open(db_path(), options);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    LineageDb& d = **db;

    RunRecord a;
    a.run_id = kRunA;
    a.name = "gpt-small";
    a.run_dir = dir_;
    a.config_path = dir_ + "/job.toml";
    a.world_size = 2;
    a.nodes = {"node0"};
    ASSERT_TRUE(d.CreateRun(a).ok());
    AttemptStart start;
    start.nodes = {"node0"};
    ASSERT_TRUE(d.StartAttempt(kRunA, start).ok());
    ASSERT_TRUE(d.StartGeneration(kRunA, 1, 0).ok());
    ASSERT_TRUE(d.UpdateGenerationStep(kRunA, 1, 0, 90).ok());
    CheckpointRecord ck;
    ck.run_id = kRunA;
    ck.step = 100;
    ck.path = CheckpointPath(100);
    ck.bytes = 3 * 1024 * 1024;
    ck.world_size = 2;
    ck.attempt = 1;
    ck.generation = 0;
    ASSERT_TRUE(d.RecordCheckpoint(ck).ok());
    ASSERT_TRUE(d.UpdateGenerationStep(kRunA, 1, 0, 117).ok());

    EventRecord crash;
    crash.run_id = kRunA;
    crash.kind = event_kind::kCrash;
    crash.attempt = 1;
    crash.generation = 0;
    crash.node = "node0";
    crash.rank = 1;
    crash.summary = "rank 1 killed by signal 11 (SIGSEGV) in backward of step 118";
    crash.evidence_json = json({{"rank", 1},
                                {"status", "killed by signal 11 (SIGSEGV)"},
                                {"exit_code", -1},
                                {"signal", 11},
                                {"log_tail", {"step 117 loss 2.31", "Segmentation fault in fused_adam"}},
                                {"ranks",
                                 {{{"rank", 0}, {"node", 0}, {"pid", 5100}, {"alive", true},
                                   {"phase", "collective"}, {"step", 117}, {"waiting_on", 811}},
                                  {{"rank", 1}, {"node", 0}, {"pid", 5101}, {"alive", false},
                                   {"phase", "backward"}, {"step", 117}, {"waiting_on", 0}}}}})
                              .dump();
    crash.action = "stopped all ranks; restarting generation 1 from step 100";
    crash.runbook = "runbooks/crash.md";
    ASSERT_TRUE(d.RecordEvent(crash).ok());
    ASSERT_TRUE(d.EndGeneration(kRunA, 1, 0, RunState::kFailed, "rank 1 crashed").ok());
    ASSERT_TRUE(d.StartGeneration(kRunA, 1, 100).ok());
    ASSERT_TRUE(d.UpdateGenerationStep(kRunA, 1, 1, 140).ok());

    EventRecord hang;
    hang.run_id = kRunA;
    hang.kind = event_kind::kHang;
    hang.attempt = 1;
    hang.generation = 1;
    hang.node = "node0";
    hang.summary = "rank 1 never entered allreduce #9001 that rank 0 waits in";
    hang.evidence_json =
        json({{"stalled_s", 312.5},
              {"timeout_s", 300.0},
              {"allowance", "step"},
              {"culprits", {1}},
              {"ranks",
               {{{"rank", 0}, {"node", 0}, {"pid", 6100}, {"alive", true}, {"proc_state", "S"},
                 {"phase", "collective"}, {"step", 140}, {"phase_age_s", 312.0},
                 {"heartbeat_age_s", 311.0}, {"collectives_issued", 9001}, {"waiting_on", 9001},
                 {"last_step_ms", 850.0},
                 {"recent_collectives",
                  {{{"seq", 9001}, {"kind", "allreduce"}, {"bytes", 4096}, {"done", false}}}}},
                {{"rank", 1}, {"node", 0}, {"pid", 6101}, {"alive", true}, {"proc_state", "T"},
                 {"phase", "forward"}, {"step", 140}, {"phase_age_s", 313.0},
                 {"heartbeat_age_s", 313.0}, {"collectives_issued", 9000}, {"waiting_on", 0},
                 {"last_step_ms", 845.0}}}}})
            .dump();
    hang.action = "stopped all ranks; restart budget exhausted (3/3)";
    hang.runbook = "runbooks/hang.md";
    ASSERT_TRUE(d.RecordEvent(hang).ok());
    ASSERT_TRUE(d.EndRun(kRunA, RunState::kFailed, "restart budget exhausted after a hang").ok());

    RunRecord b;
    b.run_id = kRunB;
    b.name = "llama-tiny";
    b.world_size = 8;
    ASSERT_TRUE(d.CreateRun(b).ok());
    ASSERT_TRUE(d.StartAttempt(kRunB, AttemptStart{}).ok());
  }

  std::string dir_;
};

bool Has(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

TEST_F(RunctlTest, RunsListsEveryRunWithItsState) {
  BuildLineage();
  Outcome o = Run({"runs"});
  ASSERT_EQ(o.exit, 0) << o.err;
  EXPECT_TRUE(Has(o.out, "RUN")) << o.out;
  EXPECT_TRUE(Has(o.out, kRunA));
  EXPECT_TRUE(Has(o.out, "gpt-small"));
  EXPECT_TRUE(Has(o.out, "restart budget exhausted after a hang"));
  EXPECT_TRUE(Has(o.out, kRunB));
  EXPECT_TRUE(Has(o.out, "running"));

  json j = RunJson({"runs"});
  ASSERT_EQ(j["runs"].size(), 2u);
  json a;
  for (const json& r : j["runs"]) {
    if (r["run_id"] == kRunA) a = r;
  }
  ASSERT_TRUE(a.is_object()) << j.dump();
  EXPECT_EQ(a["state"], "failed");
  EXPECT_EQ(a["attempts"], 1);
  EXPECT_EQ(a["last_step"], 140);
  EXPECT_EQ(a["name"], "gpt-small");
}

TEST_F(RunctlTest, LineageIsATimelineOfAttemptsGenerationsCheckpointsAndEvents) {
  BuildLineage();
  Outcome o = Run({"lineage", "r-20250101-aaa"});  // a unique prefix
  ASSERT_EQ(o.exit, 0) << o.err;
  for (const char* want :
       {"attempt 1 started: fresh start", "generation 0 started from step 0",
        "checkpoint step 100 committed (3.0 MiB", "[crash] rank 1 on node0",
        "-> stopped all ranks; restarting generation 1 from step 100",
        "generation 0 ended failed at step 117: rank 1 crashed",
        "generation 1 started from step 100", "[hang]", "(runbooks/hang.md)",
        "2025-01-01 12:00:"}) {
    EXPECT_TRUE(Has(o.out, want)) << "missing '" << want << "' in\n" << o.out;
  }
  // In time order: the checkpoint before the crash, the crash before the hang.
  EXPECT_LT(o.out.find("checkpoint step 100"), o.out.find("[crash]"));
  EXPECT_LT(o.out.find("[crash]"), o.out.find("generation 1 started"));
  EXPECT_LT(o.out.find("generation 1 started"), o.out.find("[hang]"));

  json j = RunJson({"lineage", kRunA});
  EXPECT_EQ(j["run"]["run_id"], kRunA);
  ASSERT_EQ(j["attempts"].size(), 1u);
  ASSERT_EQ(j["attempts"][0]["generations"].size(), 2u);
  EXPECT_EQ(j["attempts"][0]["generations"][1]["start_step"], 100);
  ASSERT_EQ(j["checkpoints"].size(), 1u);
  EXPECT_EQ(j["checkpoints"][0]["step"], 100);
  EXPECT_EQ(j["checkpoints"][0]["state"], "committed");
  ASSERT_GE(j["events"].size(), 2u);
  EXPECT_EQ(j["events"][0]["kind"], "crash");
  EXPECT_EQ(j["events"][0]["evidence"]["signal"], 11);
}

TEST_F(RunctlTest, TriageNamesTheCulpritWhatEveryoneDidTheActionAndTheRunbook) {
  BuildLineage();
  Outcome o = Run({"triage", "latest"});  // the newest run (B) has no incident
  ASSERT_EQ(o.exit, 0) << o.err;
  EXPECT_TRUE(Has(o.out, "no incident recorded")) << o.out;

  o = Run({"triage", kRunA});
  ASSERT_EQ(o.exit, 0) << o.err;
  for (const char* want :
       {"incident  hang at 2025-01-01 12:", "attempt 1, generation 1, node node0",
        "culprit   rank 1 on node 0, pid 6101: forward at step 140", "process stopped",
        "rank 0 on node 0, pid 6100: collective at step 140",
        "waiting on collective #9001 (allreduce)", "no step for 5m12s",
        "action    stopped all ranks; restart budget exhausted (3/3)",
        "runbook   hang.md  (runbooks/hang.md"}) {
    EXPECT_TRUE(Has(o.out, want)) << "missing '" << want << "' in\n" << o.out;
  }

  json j = RunJson({"triage", kRunA});
  EXPECT_EQ(j["run"]["state"], "failed");
  EXPECT_EQ(j["incident"]["kind"], "hang");
  EXPECT_EQ(j["incident"]["culprits"], json({1}));
  EXPECT_EQ(j["incident"]["runbook"], "runbooks/hang.md");
  EXPECT_EQ(j["incident"]["runbook_file"], "hang.md");
  EXPECT_EQ(j["incident"]["evidence"]["ranks"][0]["waiting_on"], 9001);
}

TEST_F(RunctlTest, TriageOfACrashShowsTheSignalAndTheLastLogLines) {
  int64_t now = kT0;
  LineageOptions options;
  options.clock = [&now] { return now += 1000; };
  {
    auto db = LineageDb::Open(db_path(), options);
    ASSERT_TRUE(db.ok());
    RunRecord r;
    r.run_id = kRunA;
    r.name = "crashy";
    ASSERT_TRUE((*db)->CreateRun(r).ok());
    EventRecord e;
    e.run_id = kRunA;
    e.kind = event_kind::kCrash;
    e.rank = 3;
    e.summary = "rank 3 killed by signal 6 (SIGABRT)";
    e.evidence_json = R"({"rank":3,"exit_code":-1,"signal":6,"log_tail":["CUDA error: an illegal memory access"]})";
    e.action = "restarted generation 1";
    ASSERT_TRUE((*db)->RecordEvent(e).ok());
  }
  Outcome o = Run({"triage", "r-2025"});
  ASSERT_EQ(o.exit, 0) << o.err;
  EXPECT_TRUE(Has(o.out, "culprit   rank 3")) << o.out;
  EXPECT_TRUE(Has(o.out, "exit      killed by signal 6 (SIGABRT)")) << o.out;
  EXPECT_TRUE(Has(o.out, "| CUDA error: an illegal memory access")) << o.out;
  // No runbook in the event: the kind's own.
  EXPECT_TRUE(Has(o.out, "runbook   crash.md  (runbooks/crash.md")) << o.out;
}

TEST_F(RunctlTest, StatusWithoutADaemonFallsBackToLineage) {
  BuildLineage();
  Outcome o = Run({"status", kRunA});
  ASSERT_EQ(o.exit, 0) << o.err;
  EXPECT_TRUE(Has(o.out, "holdfastd is not running; last recorded state:")) << o.out;
  EXPECT_TRUE(Has(o.out, "no daemon is listening on " + dir_ + "/holdfastd.sock")) << o.out;
  EXPECT_TRUE(Has(o.out, kRunA));
  EXPECT_TRUE(Has(o.out, "failed: restart budget exhausted after a hang"));
  EXPECT_TRUE(Has(o.out, "last step 140"));
  EXPECT_TRUE(Has(o.out, "step 100, committed"));
  EXPECT_TRUE(Has(o.out, "hang at"));

  json j = RunJson({"status", kRunA});
  EXPECT_EQ(j["live"], false);
  EXPECT_EQ(j["run"]["run_id"], kRunA);
  EXPECT_EQ(j["generation"]["last_step"], 140);
  EXPECT_EQ(j["last_checkpoint"]["step"], 100);
  EXPECT_EQ(j["last_incident"]["kind"], "hang");
}

TEST_F(RunctlTest, RecordedStatusOfASlurmRunShowsItsJobRestartCountAndHosts) {
  BuildLineage();  // run A is local: no slurm row
  const std::string run = "r-20250102-5151";
  {
    std::unique_ptr<LineageDb> d = OpenWriter();
    RunRecord r;
    r.run_id = run;
    r.name = "gpt-slurm";
    r.run_dir = dir_;
    r.world_size = 16;
    r.nodes = {"n1", "n2"};
    r.scheduler = SchedulerKind::kSlurm;
    r.slurm_job_id = "41";
    ASSERT_TRUE(d->CreateRun(r).ok());
    AttemptStart first;
    first.slurm_job_id = "41";
    first.nodes = {"n1", "n2"};
    ASSERT_TRUE(d->StartAttempt(run, first).ok());
    ASSERT_TRUE(d->EndAttempt(run, 1, RunState::kPreempted, "n2 lost; requeued without it").ok());
    AttemptStart requeued;  // Slurm requeues under the same job id, one restart on
    requeued.slurm_job_id = "41";
    requeued.restart_count = 1;
    requeued.nodes = {"n1", "n3"};
    ASSERT_TRUE(d->StartAttempt(run, requeued).ok());
  }
  Outcome o = Run({"status", run});
  ASSERT_EQ(o.exit, 0) << o.err;
  EXPECT_TRUE(Has(o.out, "holdfastd is not running; last recorded state:")) << o.out;
  EXPECT_TRUE(Has(o.out, "job 41 (restart 1) on n1,n3")) << o.out;
  EXPECT_FALSE(Has(o.out, "(restart 0)")) << "the newest attempt's, not the first's:\n" << o.out;
  EXPECT_TRUE(Has(o.out, "\nslurm ")) << "a 'slurm' row in\n" << o.out;

  json j = RunJson({"status", run});
  EXPECT_EQ(j["slurm"]["job_id"], "41");
  EXPECT_EQ(j["slurm"]["restart_count"], 1);
  EXPECT_EQ(j["slurm"]["hosts"], json::array({"n1", "n3"}));
  EXPECT_EQ(j["attempt"]["attempt"], 2);

  o = Run({"status", kRunA});
  ASSERT_EQ(o.exit, 0) << o.err;
  EXPECT_FALSE(Has(o.out, "slurm")) << o.out;
  EXPECT_TRUE(RunJson({"status", kRunA})["slurm"].is_null());
}

// A stand-in holdfastd: answers `connections` requests on DIR/holdfastd.sock,
// then stops listening (later connections are refused, as after a daemon's
// exit); connections < 0: answers every request until destroyed.
class FakeDaemon {
 public:
  FakeDaemon(const std::string& dir, std::function<std::string(const ControlRequest&)> answer,
             int connections = 1)
      : fd_(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)), forever_(connections < 0) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::string path = ControlSocketPath(dir);
    HF_CHECK(path.size() < sizeof(addr.sun_path));
    memcpy(addr.sun_path, path.c_str(), path.size());
    unlink(path.c_str());  // an earlier stand-in's socket file
    HF_CHECK(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    HF_CHECK(listen(fd_, 4) == 0);
    thread_ = std::thread([this, answer, connections] {
      for (int i = 0; forever_ || i < connections; ++i) {
        int c = accept(fd_, nullptr, nullptr);
        if (forever_ && c < 0) break;  // the destructor shut the socket down
        HF_CHECK(c >= 0);
        std::string line;
        char ch;
        while (recv(c, &ch, 1, 0) == 1 && ch != '\n') line += ch;
        Result<ControlRequest> req = ParseControlRequest(line);
        HF_CHECK(req.ok());
        std::string reply = answer(*req);
        HF_CHECK(send(c, reply.data(), reply.size(), MSG_NOSIGNAL) ==
                 static_cast<ssize_t>(reply.size()));
        close(c);
      }
      close(fd_);
    });
  }
  ~FakeDaemon() {
    if (forever_) shutdown(fd_, SHUT_RDWR);  // wakes accept()
    thread_.join();
  }
 private:
  int fd_;
  const bool forever_;
  std::thread thread_;
};

TEST_F(RunctlTest, StatusFromALiveDaemonShowsTheRanks) {
  RunStatus s;
  s.run_id = kRunA;
  s.name = "gpt-small";
  s.state = "running";
  s.attempt = 2;
  s.generation = 1;
  s.step = 1234;
  s.world_size = 2;
  s.restarts_used = 1;
  s.restart_budget = 3;
  s.last_checkpoint_step = 1200;
  s.uptime_s = 3725;
  NodeStatus n;
  RankStatus r;
  r.rank = 0;
  r.pid = 4242;
  r.state = "running";
  r.step = 1234;
  r.phase = "collective";
  r.heartbeat_age_s = 0.5;
  r.last_step_ms = 812.0;
  r.waiting_on = 9001;
  r.collectives_issued = 9001;
  n.ranks.push_back(r);
  r.rank = 1;
  r.pid = 4243;
  r.phase = "forward";
  r.waiting_on.reset();
  n.ranks.push_back(r);
  s.nodes.push_back(n);
  std::vector<std::string> ops;
  {
    FakeDaemon daemon(dir_, [&](const ControlRequest& req) {
      return EncodeOkResponse(req.id, EncodeStatusResult(s));
    });
    Outcome o = Run({"status"});  // no lineage.db needed while the daemon answers
    ASSERT_EQ(o.exit, 0) << o.err;
    for (const char* want : {"run r-20250101-aaaa (gpt-small)  running  attempt 2, generation 1, step 1234",
                             "restarts 1/3", "last checkpoint step 1200", "up 1h02m", "PID",
                             "WAITING ON", "4242", "#9001", "812 ms", "forward"}) {
      EXPECT_TRUE(Has(o.out, want)) << "missing '" << want << "' in\n" << o.out;
    }
    EXPECT_FALSE(Has(o.out, "slurm")) << "a local run has no slurm line:\n" << o.out;
  }
  {
    FakeDaemon daemon(dir_, [&](const ControlRequest& req) {
      return EncodeOkResponse(req.id, EncodeStatusResult(s));
    });
    json j = RunJson({"status"});
    EXPECT_EQ(j["live"], true);
    EXPECT_EQ(j["status"]["nodes"][0]["ranks"][0]["pid"], 4242);
    EXPECT_EQ(j["status"]["scheduler"], "local");
  }
  // Under Slurm: the job, its restart count (0 too) and the hosts, after the header.
  s.scheduler = "slurm";
  s.job_id = "42";
  s.restart_count = 0;
  s.hosts = {"n1", "n3"};
  {
    FakeDaemon daemon(dir_, [&](const ControlRequest& req) {
      return EncodeOkResponse(req.id, EncodeStatusResult(s));
    });
    Outcome o = Run({"status"});
    ASSERT_EQ(o.exit, 0) << o.err;
    EXPECT_TRUE(Has(o.out, "step 1234\nslurm job 42 (restart 0) on n1,n3\n")) << o.out;
  }
  {
    FakeDaemon daemon(dir_, [&](const ControlRequest& req) {
      return EncodeOkResponse(req.id, EncodeStatusResult(s));
    });
    json j = RunJson({"status"});
    EXPECT_EQ(j["status"]["scheduler"], "slurm");
    EXPECT_EQ(j["status"]["job_id"], "42");
    EXPECT_EQ(j["status"]["restart_count"], 0);
    EXPECT_EQ(j["status"]["hosts"], json::array({"n1", "n3"}));
  }
}

TEST_F(RunctlTest, CheckpointAsksTheDaemonAndNeedsOne) {
  BuildLineage();
  Outcome o = Run({"checkpoint", kRunA});
  EXPECT_EQ(o.exit, 4) << o.out << o.err;
  EXPECT_TRUE(Has(o.err, "no daemon is listening")) << o.err;

  {
    FakeDaemon daemon(dir_, [](const ControlRequest& req) {
      return EncodeOkResponse(req.id, R"({"requested_at_step":120})");
    });
    o = Run({"checkpoint", "r-20250101-aaa"});
    EXPECT_EQ(o.exit, 0) << o.err;
    EXPECT_TRUE(Has(o.out, "checkpoint requested at step 120")) << o.out;
  }
  {
    FakeDaemon daemon(dir_, [](const ControlRequest& req) {
      return EncodeErrorResponse(req.id, ControlErrorCode::kPermissionDenied,
                                 "uid 1001 may not act on this run");
    });
    o = Run({"checkpoint", kRunA});
    EXPECT_EQ(o.exit, 1);
    EXPECT_TRUE(Has(o.err, "PermissionDenied: uid 1001 may not act on this run")) << o.err;
  }
}

TEST_F(RunctlTest, CheckpointNamesTheRunToTheDaemon) {
  BuildLineage();
  std::vector<ControlRequest> seen;  // written by the daemon's thread, read after it joined
  {
    FakeDaemon daemon(dir_, [&seen](const ControlRequest& req) {
      seen.push_back(req);
      return EncodeOkResponse(req.id, R"({"requested_at_step":7})");
    });
    Outcome o = Run({"checkpoint", "r-20250101-aaa"});
    EXPECT_EQ(o.exit, 0) << o.err;
  }
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].op, "checkpoint");
  EXPECT_EQ(json::parse(seen[0].args_json)["run_id"], kRunA);
}

TEST_F(RunctlTest, ResumeStartsADetachedDaemonForTheRun) {
  BuildLineage();
  MakeCheckpointDir(100, /*manifest=*/true);
  // The stand-in holdfastd writes its arguments into a FIFO that the test
  // reads, so the test awaits it without sleeping.
  std::string fifo = dir_ + "/args.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::string fake = dir_ + "/fake-holdfastd";
  {
    std::ofstream f(fake);
    f << "#!/bin/sh\necho \"started\"\necho \"$@\" > " << fifo << "\n";
  }
  ASSERT_EQ(chmod(fake.c_str(), 0755), 0);
  Outcome o = Run({"resume", "r-20250101-aaa", "--from-step", "100"}, {"RUNCTL_HOLDFASTD=" + fake});
  ASSERT_EQ(o.exit, 0) << o.err;
  EXPECT_TRUE(Has(o.out, "resuming run r-20250101-aaaa from step 100")) << o.out;
  EXPECT_TRUE(Has(o.out, "tail -f " + dir_ + "/holdfastd.log")) << o.out;
  std::string args = ReadFile(fifo);  // blocks until the daemon has run
  EXPECT_EQ(args, "--run-dir " + dir_ + " --resume r-20250101-aaaa --from-step 100\n");
  EXPECT_EQ(ReadFile(dir_ + "/holdfastd.log"), "started\n");  // its output goes to the log

  o = Run({"resume", kRunA, "--from-step", "999"}, {"RUNCTL_HOLDFASTD=" + fake});
  EXPECT_EQ(o.exit, 3);
  EXPECT_TRUE(Has(o.err, "cannot resume from step 999: no checkpoint of that step is recorded; "
                         "steps it can resume from: 100")) << o.err;

  o = Run({"resume", kRunA}, {"RUNCTL_HOLDFASTD=" + dir_ + "/nope"});
  EXPECT_EQ(o.exit, 1);
  EXPECT_TRUE(Has(o.err, "holdfastd not found")) << o.err;
}

TEST_F(RunctlTest, HealthPassesThroughHoldfastHealth) {
  std::string ok = dir_ + "/health-ok", bad = dir_ + "/health-bad";
  {
    std::ofstream f(ok);
    f << "#!/bin/sh\necho \"all 12 checks passed $@\"\n";
    std::ofstream g(bad);
    g << "#!/bin/sh\necho \"gpu_ecc FAIL\"\nexit 1\n";
  }
  ASSERT_EQ(chmod(ok.c_str(), 0755), 0);
  ASSERT_EQ(chmod(bad.c_str(), 0755), 0);
  Outcome o = Run({"health", "--json", "--", "--checks", "gpu"}, {"RUNCTL_HOLDFAST_HEALTH=" + ok});
  EXPECT_EQ(o.exit, 0) << o.err;
  EXPECT_EQ(o.out, "all 12 checks passed --json --checks gpu\n");
  o = Run({"health"}, {"RUNCTL_HOLDFAST_HEALTH=" + bad});
  EXPECT_EQ(o.exit, 1);
  EXPECT_EQ(o.out, "gpu_ecc FAIL\n");
  o = Run({"health"}, {"RUNCTL_HOLDFAST_HEALTH=" + dir_ + "/missing"});
  EXPECT_EQ(o.exit, 1);
  EXPECT_TRUE(Has(o.err, "holdfast-health not found")) << o.err;
}

TEST_F(RunctlTest, BadInputGetsAClearErrorAndTheDocumentedExitCode) {
  // No lineage.db.
  Outcome o = Run({"runs"});
  EXPECT_EQ(o.exit, 3);
  EXPECT_TRUE(Has(o.err, "lineage")) << o.err;
  o = Run({"triage", "latest"});
  EXPECT_EQ(o.exit, 3);
  o = Run({"status"});  // neither daemon nor lineage
  EXPECT_EQ(o.exit, 3) << o.out << o.err;

  BuildLineage();
  o = Run({"triage", "r-19990101"});
  EXPECT_EQ(o.exit, 3);
  EXPECT_TRUE(Has(o.err, "no run 'r-19990101'")) << o.err;
  o = Run({"lineage", "r-20250101-aa"});  // matches both runs
  EXPECT_EQ(o.exit, 3);
  EXPECT_TRUE(Has(o.err, "ambiguous")) << o.err;

  o = Run({"runs", "--no-such-flag"});
  EXPECT_EQ(o.exit, 2) << o.err;
  o = Run({});
  EXPECT_EQ(o.exit, 2);
  o = Run({"lineage"});  // RUN is required
  EXPECT_EQ(o.exit, 2);
  o = Run({"resume", kRunA, "--from-step", "ten"});
  EXPECT_EQ(o.exit, 2);

  o = Run({"--help"}, {}, /*with_run_dir=*/false);
  EXPECT_EQ(o.exit, 0);
  EXPECT_TRUE(Has(o.out, "Exit codes:")) << o.out;
  EXPECT_TRUE(Has(o.out, "4  holdfastd not reachable"));
}

TEST_F(RunctlTest, ACorruptLineageDbIsAnErrorNotACrash) {
  {
    std::ofstream f(db_path());
    f << std::string(8192, 'x');
  }
  for (std::vector<std::string> args :
       {std::vector<std::string>{"runs"}, {"lineage", "latest"}, {"triage", "latest"},
        {"status"}}) {
    Outcome o = Run(args);
    EXPECT_EQ(o.exit, 1) << args[0] << ": " << o.out << o.err;
    EXPECT_FALSE(o.err.empty()) << args[0];
  }
}

TEST_F(RunctlTest, RunDirComesFromTheEnvironment) {
  BuildLineage();
  Outcome o = Run({"runs", "--json"}, {"HOLDFAST_RUN_DIR=" + dir_}, /*with_run_dir=*/false);
  ASSERT_EQ(o.exit, 0) << o.err;
  EXPECT_TRUE(Has(o.out, kRunA));
}

// ---- runctl stop ----

TEST_F(RunctlTest, StopAsksTheDaemonToStopTheRunAndNeedsOne) {
  BuildLineage();
  Outcome o = Run({"stop", kRunB});
  EXPECT_EQ(o.exit, 4) << o.out << o.err;
  EXPECT_TRUE(Has(o.err, "cannot ask holdfastd to stop run r-20250101-aabb: no daemon is listening"))
      << o.err;

  std::vector<ControlRequest> seen;  // written by the daemon's thread, read after it joined
  {
    FakeDaemon daemon(dir_, [&seen](const ControlRequest& req) {
      seen.push_back(req);
      return EncodeOkResponse(req.id, R"({"stopping":true})");
    });
    o = Run({"stop", "r-20250101-aab"});  // a unique prefix
    EXPECT_EQ(o.exit, 0) << o.err;
    EXPECT_EQ(o.out, "asked holdfastd to stop run r-20250101-aabb: the ranks checkpoint and stop; "
                     "`runctl --run-dir " + dir_ + " status` to follow\n");
  }
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].op, "stop");
  EXPECT_EQ(json::parse(seen[0].args_json)["run_id"], kRunB);

  {
    FakeDaemon daemon(dir_, [](const ControlRequest& req) {
      return EncodeErrorResponse(req.id, ControlErrorCode::kFailedPrecondition,
                                 "this daemon supervises run r-20250101-aabb, not r-20250101-aaaa");
    });
    o = Run({"stop", kRunA});
    EXPECT_EQ(o.exit, 1);
    EXPECT_TRUE(Has(o.err, "holdfastd refused to stop run r-20250101-aaaa: FailedPrecondition: "
                           "this daemon supervises run r-20250101-aabb")) << o.err;
  }
}

TEST_F(RunctlTest, StopWithoutARunStopsTheRunTheDaemonSupervises) {
  BuildLineage();  // the newest run is B, but the daemon runs A
  RunStatus s;
  s.run_id = kRunA;
  s.state = "running";
  std::vector<ControlRequest> seen;
  {
    FakeDaemon daemon(
        dir_,
        [&](const ControlRequest& req) {
          seen.push_back(req);
          return req.op == "status" ? EncodeOkResponse(req.id, EncodeStatusResult(s))
                                    : EncodeOkResponse(req.id, R"({"stopping":true})");
        },
        2);
    Outcome o = Run({"stop"});
    EXPECT_EQ(o.exit, 0) << o.err;
    EXPECT_TRUE(Has(o.out, "asked holdfastd to stop run r-20250101-aaaa")) << o.out;
  }
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].op, "stop");
  EXPECT_EQ(json::parse(seen[1].args_json)["run_id"], kRunA);
}

TEST_F(RunctlTest, StopWaitPrintsHowTheRunEnded) {
  BuildLineage();
  {
    auto db = OpenWriter();
    CheckpointRecord ck;
    ck.run_id = kRunB;
    ck.step = 300;
    ck.path = CheckpointPath(300);
    ASSERT_TRUE(db->RecordCheckpoint(ck).ok());
  }
  // The stand-in records the stop in lineage.db before it answers, as the
  // daemon would once its ranks have checkpointed and exited.
  FakeDaemon daemon(dir_, [this](const ControlRequest& req) {
    auto db = OpenWriter();
    HF_CHECK(db->EndRun(kRunB, RunState::kStopped, "stopped on request (runctl stop)").ok());
    return EncodeOkResponse(req.id, R"({"stopping":true})");
  });
  Outcome o = Run({"stop", kRunB, "--wait", "--timeout", "60"});
  EXPECT_EQ(o.exit, 0) << o.err;
  for (const char* want :
       {"asked holdfastd to stop run r-20250101-aabb", "waiting for run r-20250101-aabb to stop",
        "run r-20250101-aabb (llama-tiny) ended stopped: stopped on request (runctl stop)",
        "newest committed checkpoint step 300", "continue it:  runctl --run-dir "}) {
    EXPECT_TRUE(Has(o.out, want)) << "missing '" << want << "' in\n" << o.out;
  }
}

TEST_F(RunctlTest, StopWaitGivesUpAfterItsTimeoutWhileTheRunStillRuns) {
  BuildLineage();
  FakeDaemon daemon(
      dir_,
      [](const ControlRequest& req) {
        return EncodeOkResponse(req.id, req.op == "stop" ? R"({"stopping":true})" : "{}");
      },
      /*connections=*/-1);
  Outcome o = Run({"stop", kRunB, "--wait", "--timeout", "1"});
  EXPECT_EQ(o.exit, 5) << o.out << o.err;
  EXPECT_TRUE(Has(o.err, "run r-20250101-aabb is still running after 1s")) << o.err;
  EXPECT_TRUE(Has(o.err, "--timeout")) << o.err;
}

TEST_F(RunctlTest, StopWaitNoticesADaemonThatExitedWithoutRecordingAnEnd) {
  BuildLineage();
  // Answers the stop, then is gone; lineage.db keeps saying "running".
  FakeDaemon daemon(dir_, [](const ControlRequest& req) {
    return EncodeOkResponse(req.id, R"({"stopping":true})");
  });
  Outcome o = Run({"stop", kRunB, "--wait", "--timeout", "60"});
  EXPECT_EQ(o.exit, 1) << o.out << o.err;
  EXPECT_TRUE(Has(o.err, "stopped answering")) << o.err;
  EXPECT_TRUE(Has(o.err, "still records run r-20250101-aabb as running")) << o.err;
  EXPECT_TRUE(Has(o.err, "holdfastd.log")) << o.err;
}

TEST_F(RunctlTest, StopBadFlagsAreUsageErrors) {
  EXPECT_EQ(Run({"stop", "--timeout", "0"}).exit, 2);
  EXPECT_EQ(Run({"stop", "--timeout", "soon"}).exit, 2);
  Outcome o = Run({"--help"}, {}, /*with_run_dir=*/false);
  EXPECT_TRUE(Has(o.out, "stop")) << o.out;
  EXPECT_TRUE(Has(o.out, "5  stop --wait or checkpoint --wait gave up")) << o.out;
}

// ---- runctl resume: what it refuses ----

// A stand-in holdfastd that reports its arguments through a FIFO, so a test
// can await its start; `ReadFile(fifo)` blocks until it ran.
struct FakeHoldfastd {
  std::string path, fifo;
};
FakeHoldfastd MakeFakeHoldfastd(const std::string& dir) {
  FakeHoldfastd f{dir + "/fake-holdfastd", dir + "/args.fifo"};
  HF_CHECK(mkfifo(f.fifo.c_str(), 0600) == 0);
  std::ofstream(f.path) << "#!/bin/sh\necho \"$@\" > " << f.fifo << "\n";
  HF_CHECK(chmod(f.path.c_str(), 0755) == 0);
  return f;
}

TEST_F(RunctlTest, ResumeOfASucceededRunIsRefusedUnlessForced) {
  BuildLineage();
  {
    auto db = OpenWriter();
    ASSERT_TRUE(db->EndRun(kRunB, RunState::kSucceeded, "reached max_steps").ok());
  }
  FakeHoldfastd fake = MakeFakeHoldfastd(dir_);
  Outcome o = Run({"resume", kRunB}, {"RUNCTL_HOLDFASTD=" + fake.path});
  EXPECT_EQ(o.exit, 1) << o.out << o.err;
  EXPECT_TRUE(Has(o.err, "run r-20250101-aabb succeeded (reached max_steps)")) << o.err;
  EXPECT_TRUE(Has(o.err, "would only add an empty attempt")) << o.err;
  EXPECT_TRUE(Has(o.err, "--force")) << o.err;
  EXPECT_EQ(o.out, "");
  struct stat st;
  EXPECT_NE(stat((dir_ + "/holdfastd.log").c_str(), &st), 0) << "a daemon was started";

  o = Run({"resume", kRunB, "--force"}, {"RUNCTL_HOLDFASTD=" + fake.path});
  EXPECT_EQ(o.exit, 0) << o.err;
  EXPECT_TRUE(Has(o.out, "resuming run r-20250101-aabb")) << o.out;
  EXPECT_EQ(ReadFile(fake.fifo), "--run-dir " + dir_ + " --resume r-20250101-aabb\n");

  // A failed or stopped run resumes without --force.
  o = Run({"resume", kRunA, "--from-step", "999"});
  EXPECT_EQ(o.exit, 3) << o.err;  // refused for the step, not for its state
}

TEST_F(RunctlTest, ResumeFromAStepNeedsACommittedCheckpointThatIsStillOnDisk) {
  BuildLineage();  // step 100 of run A, committed
  {
    auto db = OpenWriter();
    for (int64_t step : {200, 300, 400, 500, 600}) {
      CheckpointRecord ck;
      ck.run_id = kRunA;
      ck.step = step;
      ck.path = CheckpointPath(step);
      ck.world_size = 2;
      ASSERT_TRUE(db->RecordCheckpoint(ck).ok());
    }
    ASSERT_TRUE(db->MarkCheckpoint(kRunA, 400, CheckpointState::kCorrupt,
                                   "shard 1: xxh3 mismatch").ok());
  }
  MakeCheckpointDir(100, /*manifest=*/true);
  // 200: pruned from disk, still "committed" in lineage.
  MakeCheckpointDir(400, /*manifest=*/true);
  MakeCheckpointDir(500, /*manifest=*/true);
  // 600: committed, its manifest fine, its shard truncated (a copy that ran
  // out of space): the trainer's checksum would fail and go to another step.
  {
    const std::string shard = MakeCheckpointDir(600, /*manifest=*/true) + "/" + ShardFileName(0, 1);
    std::filesystem::resize_file(shard, std::filesystem::file_size(shard) / 2);
  }
  // Last: a writer clears unfinished saves when it starts.
  MakeCheckpointDir(300, /*manifest=*/false);  // the save never finished
  FakeHoldfastd fake = MakeFakeHoldfastd(dir_);
  const std::vector<std::string> env = {"RUNCTL_HOLDFASTD=" + fake.path};

  struct Case {
    const char* step;
    std::string why;
  };
  for (const Case& k :
       {Case{"200", "its folder " + CheckpointPath(200) + " is gone (pruned or moved)"},
        Case{"300", CheckpointPath(300) + " has no MANIFEST.json"},
        Case{"600", CheckpointPath(600) + ": shard " + ShardFileName(0, 1) + " is "},
        Case{"400", "it is marked corrupt (shard 1: xxh3 mismatch)"},
        Case{"7", "no checkpoint of that step is recorded"}}) {
    Outcome o = Run({"resume", kRunA, "--from-step", k.step}, env);
    EXPECT_EQ(o.exit, 3) << k.step << ": " << o.out << o.err;
    EXPECT_TRUE(Has(o.err, std::string("run r-20250101-aaaa cannot resume from step ") + k.step +
                               ": " + k.why))
        << o.err;
    EXPECT_TRUE(Has(o.err, "steps it can resume from: 100, 500\n")) << o.err;
    EXPECT_EQ(o.out, "");
  }
  struct stat st;
  EXPECT_NE(stat((dir_ + "/holdfastd.log").c_str(), &st), 0) << "a daemon was started";

  Outcome o = Run({"resume", kRunA, "--from-step", "500"}, env);
  EXPECT_EQ(o.exit, 0) << o.err;
  EXPECT_EQ(ReadFile(fake.fifo), "--run-dir " + dir_ + " --resume r-20250101-aaaa --from-step 500\n");
}

// ---- runctl lineage: order and steps ----

TEST_F(RunctlTest, LineageKeepsTheOrderThingsHappenedInWhenTheClockStepsBack) {
  int64_t now = kT0;
  LineageOptions options;
  options.clock = [&now] { return now += 1000; };
  {
    auto db = LineageDb::Open(db_path(), options);
    ASSERT_TRUE(db.ok());
    LineageDb& d = **db;
    RunRecord r;
    r.run_id = kRunA;
    r.name = "clocky";
    ASSERT_TRUE(d.CreateRun(r).ok());
    ASSERT_TRUE(d.StartAttempt(kRunA, {}).ok());
    ASSERT_TRUE(d.StartGeneration(kRunA, 1, 0).ok());
    ASSERT_TRUE(d.UpdateGenerationStep(kRunA, 1, 0, 50).ok());
    EventRecord crash;
    crash.run_id = kRunA;
    crash.kind = event_kind::kCrash;
    crash.summary = "rank 1 killed by signal 9";
    ASSERT_TRUE(d.RecordEvent(crash).ok());
    ASSERT_TRUE(d.EndGeneration(kRunA, 1, 0, RunState::kFailed, "rank 1 crashed").ok());
    now -= 3'600'000;  // the node's clock steps back an hour
    ASSERT_TRUE(d.StartGeneration(kRunA, 1, 0).ok());
    CheckpointRecord ck;
    ck.run_id = kRunA;
    ck.step = 25;
    ck.path = CheckpointPath(25);
    ASSERT_TRUE(d.RecordCheckpoint(ck).ok());
    EventRecord hang = crash;
    hang.kind = event_kind::kHang;
    hang.summary = "rank 0 stuck in allreduce";
    ASSERT_TRUE(d.RecordEvent(hang).ok());
    ASSERT_TRUE(d.EndRun(kRunA, RunState::kFailed, "restart budget exhausted").ok());
  }
  Outcome o = Run({"lineage", kRunA});
  ASSERT_EQ(o.exit, 0) << o.err;
  const std::vector<std::string> in_order = {
      "attempt 1 started", "generation 0 started", "[crash] rank 1 killed by signal 9",
      "generation 0 ended failed at step 50", "generation 1 started",
      "checkpoint step 25 committed", "[hang] rank 0 stuck in allreduce",
      "generation 1 ended failed", "attempt 1 ended failed"};
  size_t at = 0;
  for (const std::string& want : in_order) {
    size_t found = o.out.find(want);
    ASSERT_NE(found, std::string::npos) << "missing '" << want << "' in\n" << o.out;
    EXPECT_GT(found, at) << "'" << want << "' out of order in\n" << o.out;
    at = found;
  }
  // The times are shown as recorded: the step back is visible, not hidden.
  EXPECT_TRUE(Has(o.out, "2025-01-01 11:")) << o.out;

  json j = RunJson({"lineage", kRunA});
  ASSERT_EQ(j["events"].size(), 2u);
  EXPECT_EQ(j["events"][0]["kind"], "crash");
  EXPECT_EQ(j["events"][1]["kind"], "hang");
  o = Run({"triage", kRunA});  // the last incident is the one that happened last
  EXPECT_TRUE(Has(o.out, "incident  hang")) << o.out;
}

TEST_F(RunctlTest, AGenerationThatNeverSteppedEndsAtTheStepItResumedFrom) {
  int64_t now = kT0;
  LineageOptions options;
  options.clock = [&now] { return now += 1000; };
  {
    auto db = LineageDb::Open(db_path(), options);
    ASSERT_TRUE(db.ok());
    RunRecord r;
    r.run_id = kRunA;
    r.name = "resumed";
    ASSERT_TRUE((*db)->CreateRun(r).ok());
    AttemptStart start;
    start.resumed_from_step = 6000;
    ASSERT_TRUE((*db)->StartAttempt(kRunA, start).ok());
    ASSERT_TRUE((*db)->StartGeneration(kRunA, 1, 6000).ok());
    ASSERT_TRUE((*db)->EndGeneration(kRunA, 1, 0, RunState::kFailed, "rank 0 crashed").ok());
  }
  Outcome o = Run({"lineage", kRunA});
  ASSERT_EQ(o.exit, 0) << o.err;
  EXPECT_TRUE(Has(o.out, "generation 0 ended failed at step 6000: rank 0 crashed")) << o.out;
  EXPECT_FALSE(Has(o.out, "at step 0")) << o.out;
  EXPECT_FALSE(Has(o.out, "at step -")) << o.out;
}


// ---- report ----

// "%.1f" of a duration in ms, as the report's breakdown table shows seconds.
std::string Seconds(int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", static_cast<double>(ms) / 1000.0);
  return buf;
}

TEST_F(RunctlTest, ReportShowsEveryIncidentAndCheckpointWithLineagesNumbers) {
  BuildLineage();
  // Run A's metrics: steps 1..117 by generation 0, then 101..140 again by
  // generation 1 (appended, as the trainer does), 40 ms a step.
  {
    std::ofstream m(dir_ + "/metrics.jsonl");
    int64_t t = kT0;
    for (int s = 1; s <= 117; ++s) m << json({{"step", s}, {"loss", 5.0 - s * 0.01}, {"step_ms", 40}, {"time_ms", t += 40}}).dump() << "\n";
    for (int s = 101; s <= 140; ++s) m << json({{"step", s}, {"loss", 4.0 - s * 0.01}, {"step_ms", 40}, {"time_ms", t += 40}}).dump() << "\n";
  }
  const std::string out = dir_ + "/report.html";
  Outcome o = Run({"report", kRunA, "--out", out, "--metrics", dir_ + "/metrics.jsonl"});
  ASSERT_EQ(o.exit, 0) << o.err;
  EXPECT_TRUE(Has(o.out, out)) << o.out;
  const std::string html = ReadFile(out);
  ASSERT_FALSE(html.empty());
  EXPECT_FALSE(Has(html, "<script"));

  LineageOptions ro;
  ro.read_only = true;
  auto db = LineageDb::Open(db_path(), ro);
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  auto attempts = (*db)->Attempts(kRunA);
  auto gens = (*db)->Generations(kRunA);
  auto ckpts = (*db)->Checkpoints(kRunA);
  auto events = (*db)->Events(kRunA, 0);
  ASSERT_TRUE(attempts.ok() && gens.ok() && ckpts.ok() && events.ok());
  ASSERT_EQ(gens->size(), 2u);

  // Every incident, with its triage (the same text `runctl triage` prints).
  int incidents = 0;
  const EventRecord* crash = nullptr;
  int64_t detection_ms = 0;
  for (const EventRecord& e : *events) {
    if (!e.incident) continue;
    ++incidents;
    EXPECT_TRUE(Has(html, "id='incident-" + std::to_string(e.id) + "'")) << e.kind;
    EXPECT_TRUE(Has(html, "#" + std::to_string(incidents) + " " + e.kind)) << e.kind;
    EXPECT_TRUE(Has(html, "<div>" + e.summary + "</div>")) << e.summary;
    for (const GenerationRecord& g : *gens) {
      if (g.generation == e.generation) detection_ms += e.time_ms - *g.last_step_ms;
    }
    if (e.kind == event_kind::kCrash) crash = &e;
  }
  EXPECT_EQ(incidents, 2);
  EXPECT_TRUE(Has(html, "Incidents (2)"));
  EXPECT_TRUE(Has(html, "culprit   rank 1 on node 0, pid 6101: forward at step 140"));  // hang's triage
  EXPECT_TRUE(Has(html, "  | Segmentation fault in fused_adam"));                   // crash's triage
  // Every checkpoint.
  for (const CheckpointRecord& k : *ckpts) {
    EXPECT_TRUE(Has(html, "<title>checkpoint step " + std::to_string(k.step) + " committed")) << k.step;
    EXPECT_TRUE(Has(html, "<tr><td class='n'>" + std::to_string(k.step) + "</td>")) << k.step;
  }
  // The numbers, from lineage: wall = the attempt; detection = each incident
  // after its generation's last step report; restart = generation 1's start
  // after the crash; redone = steps 101..117 x the median step (40 ms).
  ASSERT_NE(crash, nullptr);
  const AttemptRecord& a = attempts->front();
  const int64_t wall_ms = *a.ended_ms - a.started_ms;
  const int64_t restart_ms = (*gens)[1].started_ms - crash->time_ms;
  const int64_t redone_ms = (117 - 100) * 40;
  EXPECT_TRUE(Has(html, "<td>wall time</td><td class='n'>" + Seconds(wall_ms) + "</td>")) << html;
  EXPECT_TRUE(Has(html, "<td>detection</td><td class='n'>" + Seconds(detection_ms) + "</td>"));
  EXPECT_TRUE(Has(html, "<td>restart</td><td class='n'>" + Seconds(restart_ms) + "</td>"));
  EXPECT_TRUE(Has(html, "<td>redone steps</td><td class='n'>" + Seconds(redone_ms) + "</td>"));
  EXPECT_TRUE(Has(html, "101–117 (17)"));
  const int64_t effective_ms = wall_ms - detection_ms - restart_ms - redone_ms;  // no stall: no step 101 after 100
  ASSERT_GT(effective_ms, 0);
  EXPECT_TRUE(Has(html, "<b>" + Seconds(effective_ms) + "</b>"));

  json j = RunJson({"report", kRunA, "--out", out, "--metrics", dir_ + "/metrics.jsonl"});
  EXPECT_EQ(j["report"], out);
  EXPECT_NEAR(j["effective_s"].get<double>(), effective_ms / 1000.0, 1e-6);
  EXPECT_NEAR(j["wall_s"].get<double>(), wall_ms / 1000.0, 1e-6);

  // `runs` shows the effective time (lineage's own step-time estimate).
  o = Run({"runs"});
  ASSERT_EQ(o.exit, 0) << o.err;
  EXPECT_TRUE(Has(o.out, "EFFECTIVE")) << o.out;
  json runs = RunJson({"runs"});
  for (const json& r : runs["runs"]) {
    if (r["run_id"] == kRunA) {
      EXPECT_GT(r["effective_s"].get<double>(), 0);
    }
  }
}

TEST_F(RunctlTest, ReportFindsMetricsFromTheRunsJobConfig) {
  {
    auto d = OpenWriter();
    RunRecord r;
    r.run_id = kRunA;
    r.name = "cfg";
    r.run_dir = dir_;
    r.config_text = "[job]\ncommand = [\"holdfast-train\", \"--config\", \"t.toml\", \"--set\", \"output.dir=" +
                    dir_ + "/out\"]\nnproc = 2\n";
    ASSERT_TRUE(d->CreateRun(r).ok());
    ASSERT_TRUE(d->StartAttempt(kRunA, AttemptStart{}).ok());
  }
  mkdir((dir_ + "/out").c_str(), 0755);
  std::ofstream(dir_ + "/out/metrics.jsonl") << "{\"step\":1,\"loss\":5.5,\"step_ms\":10}\n";
  Outcome o = Run({"report", "latest"});  // default --out: RUN_DIR/report-RUN.html
  ASSERT_EQ(o.exit, 0) << o.err;
  const std::string html = ReadFile(dir_ + "/report-" + kRunA + ".html");
  EXPECT_TRUE(Has(html, "metrics: " + dir_ + "/out/metrics.jsonl (1 steps)")) << html;

  o = Run({"report", "latest", "--out", dir_ + "/r.html", "--metrics", dir_ + "/nope.jsonl"});
  EXPECT_EQ(o.exit, 3);
  EXPECT_TRUE(Has(o.err, "nope.jsonl")) << o.err;
}

}  // namespace
}  // namespace holdfast
