#include "cli/runbook_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

// Set by cmake/HoldfastInstall.cmake; these defaults are GNUInstallDirs' layout.
#ifndef HOLDFAST_RUNBOOKS_FROM_BIN
#define HOLDFAST_RUNBOOKS_FROM_BIN "../share/holdfast/runbooks"
#endif
#ifndef HOLDFAST_SOURCE_RUNBOOKS
#define HOLDFAST_SOURCE_RUNBOOKS ""
#endif

namespace holdfast {

namespace {

constexpr const char kRecordedPrefix[] = "runbooks/";

bool IsDir(const std::string& path) {
  struct stat st {};
  return !path.empty() && stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// "/a/b/../c" -> "/a/c": the printed path reads as the folder it is.
std::string Normalize(const std::string& path) {
  char* real = realpath(path.c_str(), nullptr);
  if (real == nullptr) return path;
  std::string out(real);
  free(real);
  return out;
}

}  // namespace

std::string RunbookDirFor(const std::string& exe) {
  const size_t slash = exe.rfind('/');
  if (slash != std::string::npos) {
    const std::string installed = exe.substr(0, slash + 1) + HOLDFAST_RUNBOOKS_FROM_BIN;
    if (IsDir(installed)) return Normalize(installed);
  }
  if (IsDir(HOLDFAST_SOURCE_RUNBOOKS)) return HOLDFAST_SOURCE_RUNBOOKS;
  return "";
}

std::string RunbookDir() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return RunbookDirFor(n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string());
}

std::string RunbookFile(const std::string& dir, const std::string& recorded) {
  if (dir.empty() || recorded.rfind(kRecordedPrefix, 0) != 0) return recorded;
  return dir + "/" + recorded.substr(sizeof(kRecordedPrefix) - 1);
}

}  // namespace holdfast
