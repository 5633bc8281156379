// Subprocess: runs a real program for integration tests and collects what a
// user would see (exit code, stdout+stderr). Not thread-safe; one per call.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace holdfast::testing {

struct ProcessResult {
  int exit_code = -1;  // 128+signal when killed by a signal
  std::string output;  // stdout and stderr, interleaved
};

// Runs argv[0] with argv, extra environment entries added, and waits for it.
ProcessResult RunProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {});

// A child process started in the background, its stdout+stderr going to a file.
// The destructor kills (SIGKILL) and reaps it if it still runs.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv, const std::string& output_path);
  ~ChildProcess();
  int pid() const { return pid_; }
  void Signal(int sig);
  // Whether it has exited (reaps it; the code is then returned by Wait).
  bool Exited();
  // Waits for exit; returns the exit code (128+signal when killed).
  int Wait();

 private:
  int pid_ = -1;
  int exit_code_ = -1;
  bool reaped_ = false;
};

// Waits until `path` has at least `lines` complete lines, or the child exits.
// Returns whether the lines arrived.
bool WaitForLines(const std::string& path, size_t lines, ChildProcess& child);

// The path of a target binary: `relative` in the build tree, HOLDFAST_BUILD_DIR (set
// by ctest). With HOLDFAST_PREFIX set, an installed program (holdfastd, runctl,
// holdfast-train, ...: cmake/HoldfastInstall.cmake) is the one installed under that
// prefix instead (PREFIX/bin/holdfastd, PREFIX/sbin/holdfast-slurmctld-epilog), so a
// suite runs against an install; test helpers still come from the build tree.
std::string BuildPath(const std::string& relative);

// A fresh temporary directory, removed by the destructor.
class TempDir {
 public:
  explicit TempDir(const std::string& tag);
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Reads a whole file (empty when missing).
std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& content);

}  // namespace holdfast::testing
