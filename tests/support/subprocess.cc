#include "tests/support/subprocess.h"

#include <fcntl.h>
#include <spawn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

extern char** environ;

namespace holdfast::testing {

ProcessResult RunProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
  ProcessResult result;
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) return result;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipefd[1], 1);
  posix_spawn_file_actions_adddup2(&actions, pipefd[1], 2);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string s(*e);
    const std::string key = s.substr(0, s.find('='));
    if (env.count(key) == 0) env_strings.push_back(s);
  }
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> cenv;
  for (auto& s : env_strings) cenv.push_back(s.data());
  cenv.push_back(nullptr);
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&actions);
  close(pipefd[1]);
  if (rc != 0) {
    close(pipefd[0]);
    result.output = "spawn " + argv[0] + ": " + std::strerror(rc);
    return result;
  }
  char buf[4096];
  ssize_t n;
  while ((n = read(pipefd[0], buf, sizeof(buf))) > 0) result.output.append(buf, static_cast<size_t>(n));
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.exit_code = 128 + WTERMSIG(status);
  return result;
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::string& output_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, cargv.data(), environ) == 0) pid_ = pid;
  posix_spawn_file_actions_destroy(&actions);
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !reaped_) {
    kill(pid_, SIGKILL);
    Wait();
  }
}

void ChildProcess::Signal(int sig) {
  if (pid_ > 0 && !reaped_) kill(pid_, sig);
}

static int DecodeStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

bool ChildProcess::Exited() {
  if (pid_ <= 0) return true;
  if (reaped_) return true;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    reaped_ = true;
    exit_code_ = DecodeStatus(status);
  }
  return reaped_;
}

int ChildProcess::Wait() {
  if (pid_ <= 0) return -1;
  if (!reaped_) {
    int status = 0;
    waitpid(pid_, &status, 0);
    reaped_ = true;
    exit_code_ = DecodeStatus(status);
  }
  return exit_code_;
}

bool WaitForLines(const std::string& path, size_t lines, ChildProcess& child) {
  for (;;) {
    const std::string text = ReadFile(path);
    size_t n = 0;
    for (char c : text) n += c == '\n';
    if (n >= lines) return true;
    if (child.Exited()) return false;
    usleep(10 * 1000);
  }
}

std::string BuildPath(const std::string& relative) {
  const char* prefix = std::getenv("HOLDFAST_PREFIX");
  if (prefix != nullptr && *prefix != '\0') {
    const std::string name = relative.substr(relative.rfind('/') + 1);
    for (const char* program : {"holdfastd", "runctl", "holdfast-train", "holdfast-rollout", "holdfast-reward",
                                "holdfast-health", "holdfast-health-gpu"}) {
      if (name == program) return std::string(prefix) + "/bin/" + name;
    }
    if (name == "holdfast-slurmctld-epilog") return std::string(prefix) + "/sbin/" + name;
  }
  const char* dir = std::getenv("HOLDFAST_BUILD_DIR");
  return std::string(dir != nullptr ? dir : ".") + "/" + relative;
}

TempDir::TempDir(const std::string& tag) {
  std::string templ = (std::filesystem::temp_directory_path() / ("holdfast_" + tag + "_XXXXXX")).string();
  char* made = mkdtemp(templ.data());
  path_ = made != nullptr ? made : templ;
}

TempDir::~TempDir() {
  if (std::getenv("HOLDFAST_KEEP_TEST_DIRS") != nullptr) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
}

}  // namespace holdfast::testing
