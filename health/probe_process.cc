#include "health/probe_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "health/report.h"

namespace holdfast::health {

std::string SiblingProgram(const std::string& name) {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return name;
  std::string self(buf, static_cast<size_t>(n));
  return self.substr(0, self.rfind('/') + 1) + name;
}

std::vector<CheckResult> RunProbeProcess(const std::vector<std::string>& argv, double timeout_s) {
  const std::string& program = argv.at(0);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    return {Fail("gpu.probe", "", ErrnoError("pipe", errno).message(), {"-", "-", program}, Action::kExcludeNode)};
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(out[0]);
    close(out[1]);
    return {Fail("gpu.probe", "", ErrnoError("fork", err).message(), {"-", "-", program}, Action::kExcludeNode)};
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(out[1], STDOUT_FILENO);
    execv(program.c_str(), args.data());
    _exit(127);
  }
  close(out[1]);
  std::string text;
  bool timed_out = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    const int rc = poll(&p, 1, static_cast<int>(left.count()));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) continue;
    char buf[65536];
    const ssize_t n = read(out[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const std::string threshold = "exits 0 with JSON results";
  if (timed_out) {
    return {Fail("gpu.probe", "", "GPU probes did not finish in " + FormatNumber(timeout_s) +
                                      " s: a hung GPU, driver or NVLink/NCCL path",
                 {"killed after " + FormatNumber(timeout_s) + " s", threshold, program}, Action::kExcludeNode)};
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return {Fail("gpu.probe", "", std::string("GPU probe process died of ") + strsignal(sig) +
                                      ": a GPU or driver fault (see dmesg for Xid)",
                 {"signal " + std::to_string(sig), threshold, program}, Action::kExcludeNode)};
  }
  const int code = WEXITSTATUS(status);
  if (code == 127 && text.empty()) {
    return {Skipped("gpu.probe", "", program + " could not be started (not installed next to holdfast-health?)")};
  }
  auto results = ResultsFromReportJson(text);
  if (code != 0 || !results.ok()) {
    return {Fail("gpu.probe", "",
                 "GPU probe process exited " + std::to_string(code) +
                     (results.ok() ? "" : " without results: " + results.status().message()),
                 {"exit " + std::to_string(code), threshold, program}, Action::kExcludeNode)};
  }
  return *results;
}

}  // namespace holdfast::health
