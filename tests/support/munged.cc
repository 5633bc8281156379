#include "tests/support/munged.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <random>
#include <thread>

namespace holdfast::testing {

namespace {

std::string FindMunged() {
  for (const char* p : {"/usr/sbin/munged", "/usr/bin/munged", "/usr/local/sbin/munged"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
}

}  // namespace

PrivateMunged::PrivateMunged() : dir_("munged") {}

PrivateMunged::~PrivateMunged() {
  if (munged_ == nullptr) return;
  munged_->Signal(SIGTERM);
  munged_->Wait();
}

std::string PrivateMunged::Start() {
  const std::string munged = FindMunged();
  if (munged.empty()) return "munged is not installed (Debian package munge; scripts/setup.sh installs it)";
  // munged wants a key only its user reads, and a socket folder others may only enter.
  ::chmod(dir_.path().c_str(), 0711);
  const std::string key = dir_.path() + "/munge.key";
  {
    std::random_device rd;
    std::ofstream out(key, std::ios::binary);
    for (int i = 0; i < 1024; ++i) out.put(static_cast<char>(rd() & 0xff));
  }
  ::chmod(key.c_str(), 0400);
  munged_ = std::make_unique<ChildProcess>(
      std::vector<std::string>{munged, "--foreground", "--force", "--key-file=" + key, "--socket=" + socket(),
                               "--pid-file=" + dir_.path() + "/munged.pid", "--log-file=" + dir_.path() + "/munged.log",
                               "--seed-file=" + dir_.path() + "/munged.seed"},
      dir_.path() + "/munged.out");
  // Its socket appears when it serves; a failure guard, not a timed assertion.
  for (int i = 0; i < 1000; ++i) {
    struct stat st {};
    if (::stat(socket().c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) return "";
    if (munged_->Exited()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return "munged did not start: " + log();
}

}  // namespace holdfast::testing
