#include "trainer/local_launcher.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/peer_auth.h"
#include "common/tcp_store.h"
#include "trainer/exit_codes.h"

extern char** environ;

namespace holdfast {
namespace {

std::atomic<int> g_forward_signal{0};

void OnSignal(int sig) { g_forward_signal.store(sig); }

int ExitCodeOf(int wstatus) {
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return 1;
}

std::string Describe(int wstatus) {
  if (WIFEXITED(wstatus)) return "exited with code " + std::to_string(WEXITSTATUS(wstatus));
  if (WIFSIGNALED(wstatus)) return std::string("killed by signal ") + strsignal(WTERMSIG(wstatus));
  return "ended";
}

// The store's key for this launch, in a private folder of its own (0700,
// removed with it): ranks read it from HOLDFAST_STORE_KEY_FILE.
class LaunchKey {
 public:
  Status Create() {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/holdfast-train-key.XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) return ErrnoError("create a folder for the store's key in " + templ, errno);
    dir_ = templ;
    Result<RunKey> key = EnsureRunKey(RunKeyPath(dir_));
    if (!key.ok()) return key.status();
    key_ = std::move(key).value();
    return Status::Ok();
  }
  ~LaunchKey() {
    if (dir_.empty()) return;
    ::unlink(path().c_str());
    ::rmdir(dir_.c_str());
  }
  std::string path() const { return RunKeyPath(dir_); }
  const RunKey& key() const { return *key_; }

 private:
  std::string dir_;
  std::optional<RunKey> key_;
};

}  // namespace

int RunLocalRanks(const std::vector<std::string>& argv, const LaunchOptions& options) {
  LaunchKey key;
  if (Status s = key.Create(); !s.ok()) {
    spdlog::error("cannot make the rendezvous store's key: {}", s.ToString());
    return 1;
  }
  auto server = StartTcpStoreServer(options.host, 0, key.key());
  if (!server.ok()) {
    spdlog::error("cannot start the rendezvous store: {}", server.status().ToString());
    return 1;
  }
  const std::string store_addr = (*server)->address().ToString();

  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);

  std::vector<pid_t> pids(options.nproc, -1);
  for (int r = 0; r < options.nproc; ++r) {
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "HOLDFAST_", 9) == 0) continue;  // ours are set below
      env_strings.emplace_back(*e);
    }
    env_strings.push_back(std::string(kEnvRank) + "=" + std::to_string(r));
    env_strings.push_back(std::string(kEnvLocalRank) + "=" + std::to_string(r));
    env_strings.push_back(std::string(kEnvWorldSize) + "=" + std::to_string(options.nproc));
    env_strings.push_back(std::string(kEnvStoreAddr) + "=" + store_addr);
    env_strings.push_back(std::string(kEnvStoreKeyFile) + "=" + key.path());
    env_strings.push_back(std::string(kEnvGeneration) + "=0");
    std::vector<char*> cenv;
    for (auto& s : env_strings) cenv.push_back(s.data());
    cenv.push_back(nullptr);
    pid_t pid = -1;
    int rc = posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, cargv.data(), cenv.data());
    if (rc != 0) {
      spdlog::error("cannot start rank {}: {}", r, std::strerror(rc));
      for (pid_t p : pids) {
        if (p > 0) kill(p, SIGKILL);
      }
      return 1;
    }
    pids[r] = pid;
  }

  int result = 0;
  int alive = options.nproc;
  bool stopping = false;
  auto stop_deadline = std::chrono::steady_clock::time_point::max();
  while (alive > 0) {
    int wstatus = 0;
    pid_t pid = waitpid(-1, &wstatus, WNOHANG);
    if (pid > 0) {
      int rank = -1;
      for (int r = 0; r < options.nproc; ++r) {
        if (pids[r] == pid) rank = r;
      }
      if (rank < 0) continue;
      pids[rank] = -1;
      --alive;
      const int code = ExitCodeOf(wstatus);
      // A preempted rank (it committed a checkpoint) is not a failure: the
      // others stop after the same step on their own.
      const bool failed = code != 0 && code != kExitPreempted;
      if (code != 0 && (result == 0 || result == kExitPreempted)) result = code;
      if (failed) spdlog::error("rank {} {}; stopping the other ranks", rank, Describe(wstatus));
      if (failed && !stopping) {
        stopping = true;
        stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(options.grace_seconds);
        for (pid_t p : pids) {
          if (p > 0) kill(p, SIGTERM);
        }
      }
      continue;
    }
    if (int sig = g_forward_signal.exchange(0); sig != 0) {
      for (pid_t p : pids) {
        if (p > 0) kill(p, sig);
      }
    }
    if (stopping && std::chrono::steady_clock::now() > stop_deadline) {
      for (pid_t p : pids) {
        if (p > 0) kill(p, SIGKILL);
      }
      stop_deadline = std::chrono::steady_clock::time_point::max();
    }
    // Reaping without a SIGCHLD handler: a short nap keeps this loop cheap.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  (*server)->Stop();
  return result;
}

}  // namespace holdfast
