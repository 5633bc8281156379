#include "daemon/rank_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

extern char** environ;

namespace holdfast {

Result<std::unique_ptr<RankProcess>> RankProcess::Start(const RankSpawn& spawn) {
  if (spawn.argv.empty()) return InvalidArgumentError("rank command is empty");
  HF_RETURN_IF_ERROR(CreateProgressFile(spawn.progress_path, spawn.rank));
  int log_fd = ::open(spawn.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return ErrnoError("open rank log " + spawn.log_path, errno);

  // Everything the child needs is built before fork: after it, only
  // async-signal-safe calls.
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr) env[std::string(*e, static_cast<size_t>(eq - *e))] = eq + 1;
  }
  for (const auto& [k, v] : spawn.env) env[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<char*> argv;
  for (const auto& a : spawn.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = getpid();

  pid_t pid = fork();
  if (pid < 0) {
    int err = errno;
    ::close(log_fd);
    return ErrnoError("fork rank " + std::to_string(spawn.rank), err);
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the daemon died before we got here
    // Signals the daemon blocks or handles must be default in the rank.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig : {SIGTERM, SIGINT, SIGCHLD, SIGUSR1, SIGUSR2, SIGPIPE, SIGHUP}) signal(sig, SIG_DFL);
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    if (!spawn.workdir.empty() && chdir(spawn.workdir.c_str()) != 0) {
      const char msg[] = "holdfastd: cannot chdir to the job's workdir\n";
      (void)!write(2, msg, sizeof(msg) - 1);
      _exit(127);
    }
    execve(argv[0], argv.data(), envp.data());
    // execve failed: say why in the rank's log, exit like a shell does.
    const char msg[] = "holdfastd: cannot execute the job's command: ";
    (void)!write(2, msg, sizeof(msg) - 1);
    const char* err = strerror(errno);
    (void)!write(2, err, strlen(err));
    (void)!write(2, "\n", 1);
    _exit(127);
  }
  ::close(log_fd);
  auto proc = std::unique_ptr<RankProcess>(new RankProcess());
  proc->rank_ = spawn.rank;
  proc->pid_ = pid;
  proc->log_path_ = spawn.log_path;
  auto reader = ProgressReader::Open(spawn.progress_path);
  if (reader.ok()) proc->progress_ = std::move(reader).value();
  return proc;
}

void RankProcess::Signal(int sig) const {
  if (!exited_ && pid_ > 0) ::kill(pid_, sig);
}

char RankProcess::ProcState() const {
  if (exited_) return '?';
  std::ifstream in("/proc/" + std::to_string(pid_) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return '?';
  return text[close + 2];
}

ProgressSnapshot RankProcess::Progress() const {
  if (progress_ == nullptr) return ProgressSnapshot{};
  return progress_->Read();
}

std::vector<std::string> RankProcess::LogTail(size_t lines) const {
  std::ifstream in(log_path_, std::ios::binary);
  if (!in) return {};
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff start = std::max<std::streamoff>(0, size - 16384);
  in.seekg(start);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> all;
  std::istringstream ss(text);
  std::string line;
  while (std::getline(ss, line)) all.push_back(line);
  if (start > 0 && !all.empty()) all.erase(all.begin());  // a partial first line
  if (all.size() > lines) all.erase(all.begin(), all.end() - static_cast<std::ptrdiff_t>(lines));
  return all;
}

}  // namespace holdfast
