#include "daemon/stack_capture.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

extern char** environ;

namespace holdfast {

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxToolOutput = 1 << 20;     // bytes read from one capture
constexpr size_t kMaxPythonDump = 256 * 1024;  // bytes read from one dump
constexpr size_t kMaxTargets = 256;
constexpr size_t kMaxThreads = 64;             // per process and kind

std::string_view Trim(std::string_view s) {
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

std::string BaseName(std::string_view path) {
  const size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

std::string Secs(double s) {
  char b[32];
  std::snprintf(b, sizeof(b), "%g s", s);
  return b;
}

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// "#3  0x00007f28cc715ada time_sleep - /usr/lib/libpython3.11.so.1.0" -> "time_sleep".
std::string EuStackFrame(std::string_view line) {
  line = Trim(line);
  size_t sp = line.find_first_of(" \t");
  if (sp == std::string_view::npos) return "??";
  line = Trim(line.substr(sp));  // past "#3"
  sp = line.find_first_of(" \t");
  const std::string_view addr = line.substr(0, sp);
  std::string_view rest = sp == std::string_view::npos ? std::string_view() : Trim(line.substr(sp));
  if (rest.rfind("- 1 ", 0) == 0 || rest == "- 1") rest = Trim(rest.substr(3));  // a return address
  std::string_view name = rest, module;
  if (rest.rfind("- ", 0) == 0) {
    name = {};
    module = Trim(rest.substr(2));
  } else if (const size_t dash = rest.rfind(" - "); dash != std::string_view::npos) {
    name = Trim(rest.substr(0, dash));
    module = Trim(rest.substr(dash + 3));
  }
  if (const size_t at = name.find('@'); at != std::string_view::npos && at > 0) name = name.substr(0, at);
  if (!name.empty()) return std::string(name);
  return module.empty() ? "?? " + std::string(addr) : "?? (" + BaseName(module) + ")";
}

}  // namespace

std::vector<ThreadStack> ParseEuStack(std::string_view out, pid_t pid, size_t max_frames) {
  std::vector<ThreadStack> threads;
  std::istringstream in{std::string(out)};
  std::string line;
  while (std::getline(in, line)) {
    const std::string_view l = Trim(line);
    if (l.rfind("TID ", 0) == 0) {
      ThreadStack t;
      t.main_thread = std::atol(std::string(l.substr(4)).c_str()) == static_cast<long>(pid);
      threads.push_back(std::move(t));
    } else if (l.size() > 1 && l[0] == '#' && l[1] >= '0' && l[1] <= '9' && !threads.empty()) {
      ThreadStack& t = threads.back();
      if (t.frames.size() >= max_frames) {
        t.cut = true;
      } else {
        t.frames.push_back(EuStackFrame(l));
      }
    }
  }
  // The main thread first, then as eu-stack listed them.
  std::stable_partition(threads.begin(), threads.end(), [](const ThreadStack& t) { return t.main_thread; });
  if (threads.size() > kMaxThreads) threads.resize(kMaxThreads);
  return threads;
}

std::vector<ThreadStack> ParseFaulthandler(std::string_view dump) {
  std::vector<ThreadStack> threads;
  std::istringstream in{std::string(dump)};
  std::string line;
  while (std::getline(in, line)) {
    const std::string_view l = Trim(line);
    const bool current = l.rfind("Current thread 0x", 0) == 0;
    if (current || l.rfind("Thread 0x", 0) == 0) {
      ThreadStack t;
      t.kind = "python";
      t.main_thread = current;
      threads.push_back(std::move(t));
      continue;
    }
    if (threads.empty()) continue;
    if (l == "...") {
      threads.back().cut = true;
      continue;
    }
    // File "/x/job.py", line 12 in sleep_here
    if (l.rfind("File \"", 0) != 0) continue;
    const size_t q = l.find('"', 6);
    const size_t ln = l.find(", line ", q == std::string_view::npos ? 0 : q);
    const size_t in_at = l.find(" in ", ln == std::string_view::npos ? 0 : ln);
    if (q == std::string_view::npos || ln == std::string_view::npos || in_at == std::string_view::npos) continue;
    const std::string file = BaseName(l.substr(6, q - 6));
    const std::string_view number = l.substr(ln + 7, in_at - ln - 7);
    threads.back().frames.push_back(std::string(l.substr(in_at + 4)) + " (" + file + ":" + std::string(number) +
                                    ")");
  }
  std::stable_partition(threads.begin(), threads.end(), [](const ThreadStack& t) { return t.main_thread; });
  if (threads.size() > kMaxThreads) threads.resize(kMaxThreads);
  return threads;
}

std::optional<PythonStackMarker> ParsePythonStackMarker(std::string_view first_line) {
  long pid = 0;
  int sig = 0;
  char tail = 0;
  const std::string line(Trim(first_line));
  if (std::sscanf(line.c_str(), "holdfast-pystack pid=%ld signal=%d%c", &pid, &sig, &tail) != 2) return std::nullopt;
  // Only a real-time signal: the marker must never make holdfastd send anything that stops or kills.
  if (pid <= 0 || sig < SIGRTMIN || sig > SIGRTMAX) return std::nullopt;
  return PythonStackMarker{static_cast<pid_t>(pid), sig};
}

namespace {

// One rank's capture in progress.
struct Capture {
  const StackTarget* target = nullptr;
  RankStacks result;
  // Python: the dump is read from `py_offset` once the file stops growing.
  bool py_pending = false;
  off_t py_offset = 0;
  off_t py_seen = -1;
  // Native: the tool's process (its own group) and its output.
  pid_t child = -1;
  int fd = -1;
  std::string output;
  bool eof = false;
  bool reaped = false;
  int wstatus = 0;
};

off_t FileSize(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

std::string ReadFrom(const std::string& path, off_t offset, size_t max) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(offset);
  std::string text(max, '\0');
  in.read(text.data(), static_cast<std::streamsize>(max));
  text.resize(static_cast<size_t>(std::max<std::streamsize>(0, in.gcount())));
  return text;
}

// Signals the Python rank's main thread when its marker names this process.
void StartPython(Capture& c) {
  const StackTarget& t = *c.target;
  if (t.python_stack_path.empty()) return;
  std::ifstream in(t.python_stack_path);
  std::string first;
  if (!in || !std::getline(in, first)) return;  // not a Python rank with the holdfast module
  const std::optional<PythonStackMarker> m = ParsePythonStackMarker(first);
  if (!m || m->pid != t.pid) {
    c.result.notes.push_back("python stack not asked for: " + t.python_stack_path +
                             " does not name this process (pid " + std::to_string(t.pid) + ")");
    return;
  }
  if (IsStopped(t.state)) {
    c.result.notes.push_back("python stack not available: the process is stopped (SIGSTOP?), so its faulthandler "
                             "cannot run; native stack only");
    return;
  }
  c.py_offset = FileSize(t.python_stack_path);
  if (c.py_offset < 0) return;
  // To the main thread: faulthandler marks the thread it runs on as the current one.
  if (::syscall(SYS_tgkill, t.pid, t.pid, m->signal) != 0) {
    c.result.notes.push_back(std::string("python stack not asked for: signal: ") + std::strerror(errno));
    return;
  }
  c.py_pending = true;
}

// A dump is complete once the file has grown and then not changed for one poll.
void PollPython(Capture& c) {
  if (!c.py_pending) return;
  const off_t size = FileSize(c.target->python_stack_path);
  if (size > c.py_offset && size == c.py_seen) {
    c.py_pending = false;
    for (ThreadStack& t : ParseFaulthandler(ReadFrom(c.target->python_stack_path, c.py_offset, kMaxPythonDump))) {
      c.result.threads.push_back(std::move(t));
    }
  }
  c.py_seen = size;
}

void StartNative(Capture& c, const StackCaptureConfig& config) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    c.result.notes.push_back(std::string("native stack not captured: pipe: ") + std::strerror(errno));
    return;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setpgroup(&attr, 0);  // its own group: killed as a whole at the limit
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  const std::string frames = std::to_string(config.max_frames + 1);  // one more: to know it was cut
  const std::string pid = std::to_string(c.target->pid);
  std::vector<const char*> argv = {config.tool.c_str(), "-m", "-n", frames.c_str(), "-p", pid.c_str(), nullptr};
  pid_t child = -1;
  const int err = posix_spawnp(&child, config.tool.c_str(), &fa, &attr, const_cast<char* const*>(argv.data()), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  if (err != 0) {
    ::close(fds[0]);
    c.result.notes.push_back("native stack not captured: cannot run '" + config.tool + "' (" + std::strerror(err) +
                             (err == ENOENT ? "; apt-get install elfutils, or set supervise.stack_tool)" : ")"));
    return;
  }
  c.child = child;
  c.fd = fds[0];
}

void ReadNative(Capture& c) {
  char buf[8192];
  const ssize_t n = ::read(c.fd, buf, sizeof(buf));
  if (n > 0) {
    if (c.output.size() < kMaxToolOutput) c.output.append(buf, std::min<size_t>(n, kMaxToolOutput - c.output.size()));
    return;
  }
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  c.eof = true;
  ::close(c.fd);
  c.fd = -1;
}

void TryReap(Capture& c) {
  if (c.child <= 0 || c.reaped) return;
  if (::waitpid(c.child, &c.wstatus, WNOHANG) == c.child) c.reaped = true;
}

void FinishNative(Capture& c, const StackCaptureConfig& config, bool timed_out) {
  if (c.child <= 0) return;
  const std::vector<ThreadStack> threads = ParseEuStack(c.output, c.target->pid, config.max_frames);
  for (const ThreadStack& t : threads) c.result.threads.push_back(t);
  if (timed_out) {
    c.result.notes.push_back("native stack: " + BaseName(config.tool) + " did not finish within the limit (" +
                             Secs(config.timeout_s) + ", supervise.stack_timeout_s) and was killed" +
                             (threads.empty() ? "" : "; what it printed is kept"));
    return;
  }
  if (threads.empty()) {
    // Its first line says why (e.g. "dwfl_linux_proc_attach pid 12: Operation not permitted").
    std::string why = c.output.substr(0, c.output.find('\n'));
    if (why.empty()) why = "no output";
    const int code = c.reaped && WIFEXITED(c.wstatus) ? WEXITSTATUS(c.wstatus) : -1;
    c.result.notes.push_back("native stack not captured: " + BaseName(config.tool) +
                             (code >= 0 ? " exited with code " + std::to_string(code) : std::string(" failed")) +
                             ": " + why);
  }
}

}  // namespace

std::vector<RankStacks> CaptureStacks(const std::vector<StackTarget>& targets, const StackCaptureConfig& config,
                                      double* took_s) {
  const Clock::time_point start = Clock::now();
  const auto limit = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(config.timeout_s));
  const Clock::time_point deadline = start + limit;
  std::vector<Capture> caps(std::min(targets.size(), kMaxTargets));
  for (size_t i = 0; i < caps.size(); ++i) {
    caps[i].target = &targets[i];
    caps[i].result.rank = targets[i].rank;
  }
  // Python first, so that the native capture's ptrace does not land in the dump;
  // it gets at most half the limit.
  bool any_python = false;
  for (Capture& c : caps) {
    StartPython(c);
    any_python = any_python || c.py_pending;
  }
  const Clock::time_point py_deadline = start + limit / 2;
  while (any_python && Clock::now() < py_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // waits on another process's file
    any_python = false;
    for (Capture& c : caps) {
      PollPython(c);
      any_python = any_python || c.py_pending;
    }
  }
  for (Capture& c : caps) {
    if (!c.py_pending) continue;
    c.py_pending = false;
    c.result.notes.push_back("python stack: no dump within " + Secs(config.timeout_s / 2) +
                             " (its faulthandler did not run)");
  }
  for (Capture& c : caps) StartNative(c, config);
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<Capture*> of;
    for (Capture& c : caps) {
      if (c.fd >= 0) {
        fds.push_back(pollfd{c.fd, POLLIN, 0});
        of.push_back(&c);
      }
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (fds.empty() || left <= 0) break;
    if (::poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left, 100))) < 0 && errno != EINTR) break;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents != 0) ReadNative(*of[i]);
    }
  }
  // Output closed: the tool is exiting. Give it until the deadline, then kill what is left.
  auto all_reaped = [&] {
    bool all = true;
    for (Capture& c : caps) {
      TryReap(c);
      all = all && (c.child <= 0 || c.reaped);
    }
    return all;
  };
  while (!all_reaped() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::map<const Capture*, bool> timed_out;
  for (Capture& c : caps) {
    timed_out[&c] = c.child > 0 && (!c.reaped || !c.eof);
    if (timed_out[&c]) ::kill(-c.child, SIGKILL);
    if (c.fd >= 0) {
      ::close(c.fd);
      c.fd = -1;
    }
  }
  const Clock::time_point grace = Clock::now() + std::chrono::milliseconds(static_cast<int>(kStackKillGraceS * 1000));
  while (!all_reaped() && Clock::now() < grace) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  // One not reaped by now is left to holdfastd's own reaper (a child that is no rank).
  // eu-stack can leave a stopped process running (its detach races with the
  // stop it restores; seen under load): stop again what was stopped, so that
  // the capture changes nothing it looked at.
  for (const Capture& c : caps) {
    if (c.target->state == ProcState::kStopped && !IsStopped(ReadProcState(c.target->pid))) {
      ::kill(c.target->pid, SIGSTOP);
    }
  }
  std::vector<RankStacks> out;
  for (Capture& c : caps) {
    FinishNative(c, config, timed_out[&c]);
    out.push_back(std::move(c.result));
  }
  for (size_t i = caps.size(); i < targets.size(); ++i) {
    out.push_back(RankStacks{targets[i].rank, {}, {"not captured: more than " + std::to_string(kMaxTargets) +
                                                   " processes on this node"}});
  }
  if (took_s != nullptr) *took_s = Since(start);
  return out;
}

StackEvidence CaptureHungStacks(const std::vector<RankView>& views, int this_node,
                                const std::function<std::string(int rank)>& progress_path_of,
                                const StackCaptureConfig& config) {
  StackEvidence ev;
  if (config.timeout_s <= 0) return ev;
  std::vector<StackTarget> targets;
  std::vector<int> remote;
  for (const RankView& v : views) {
    if (v.node != this_node) {
      remote.push_back(v.rank);
      continue;
    }
    if (!v.alive || v.pid <= 0) continue;
    StackTarget t;
    t.rank = v.rank;
    // The process that writes the record is the job's (a wrapper script may have started it).
    const pid_t writer = v.progress.attached() ? static_cast<pid_t>(v.progress.writer_pid) : 0;
    t.pid = writer > 0 && writer != v.pid && ReadProcState(writer) != ProcState::kGone ? writer : v.pid;
    t.state = t.pid == v.pid ? v.proc_state : ReadProcState(t.pid);
    const std::string progress = progress_path_of ? progress_path_of(v.rank) : "";
    if (!progress.empty()) t.python_stack_path = progress + kPythonStackSuffix;
    targets.push_back(std::move(t));
  }
  double took = 0;
  const std::vector<RankStacks> got = CaptureStacks(targets, config, &took);
  ev = FoldStacks(got);
  ev.limit_s = config.timeout_s;
  ev.took_s = took;
  if (!remote.empty()) {
    std::sort(remote.begin(), remote.end());
    ev.notes.push_back(StackNote{-1, std::to_string(remote.size()) + " rank(s) on other nodes not captured (holdfastd "
                                     "captures the stacks of its own node's ranks: the leading node's)"});
  }
  return ev;
}

}  // namespace holdfast
