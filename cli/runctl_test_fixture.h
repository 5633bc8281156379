// The fixture of runctl's tests (runctl_test.cc: the commands over the
// recorded run; runctl_live_test.cc: the ones that talk to a daemon): the real
// runctl binary run against lineage.db files built through LineageDb, and
// stand-in daemons on a real Unix socket.
#pragma once

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
#include "daemon/unix_socket_address.h"
#include "lineage/lineage_db.h"

extern char** environ;

namespace holdfast {

using json = nlohmann::json;

constexpr char kRunA[] = "r-20250101-aaaa";  // failed after a crash and a hang
constexpr char kRunB[] = "r-20250101-aabb";  // still running, no incident
constexpr int64_t kT0 = 1735732800000;       // 2025-01-01 12:00:00Z

inline std::string ReadFile(const std::string& path) {
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
    std::vector<std::string> argv = {runctl_};
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
    int rc = posix_spawn(&pid, runctl_.c_str(), &fa, nullptr, cargv.data(), cenv.data());
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

  // runctl --json ARGS..., which must exit `want_exit`.
  json RunJson(std::vector<std::string> args, int want_exit = 0) {
    args.push_back("--json");
    Outcome o = Run(args);
    EXPECT_EQ(o.exit, want_exit) << o.err;
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
  std::string runctl_ = RUNCTL_PATH;  // the runctl binary Run starts
};

inline bool Has(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// A stand-in holdfastd: answers `connections` requests on DIR/holdfastd.sock,
// then stops listening (later connections are refused, as after a daemon's
// exit); connections < 0: answers every request until destroyed.
class FakeDaemon {
 public:
  FakeDaemon(const std::string& dir, std::function<std::string(const ControlRequest&)> answer,
             int connections = 1)
      : fd_(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)), forever_(connections < 0) {
    std::string path = ControlSocketPath(dir);
    Result<UnixSocketAddress> addr = UnixSocketAddress::For(path);
    HF_CHECK(addr.ok());
    unlink(path.c_str());  // an earlier stand-in's socket file
    HF_CHECK(bind(fd_, addr->addr(), addr->size()) == 0);
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


// A stand-in holdfastd that reports its arguments through a FIFO, so a test
// can await its start; `ReadFile(fifo)` blocks until it ran.
struct FakeHoldfastd {
  std::string path, fifo;
};
inline FakeHoldfastd MakeFakeHoldfastd(const std::string& dir) {
  FakeHoldfastd f{dir + "/fake-holdfastd", dir + "/args.fifo"};
  HF_CHECK(mkfifo(f.fifo.c_str(), 0600) == 0);
  std::ofstream(f.path) << "#!/bin/sh\necho \"$@\" > " << f.fifo << "\n";
  HF_CHECK(chmod(f.path.c_str(), 0755) == 0);
  return f;
}


}  // namespace holdfast
