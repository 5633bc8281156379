// PrivateMunged: a real munged of the test's own (its key, socket and files in
// a temporary folder), for the tests of MUNGE-authenticated control
// (daemon/munge_credential.h). Started in the foreground as the test's child
// and stopped (SIGTERM, reaped) by the destructor. Needs the munge package
// (scripts/setup.sh installs it); Start says so when munged is missing.
//
// Not thread-safe; one per test.
#pragma once

#include <memory>
#include <string>

#include "tests/support/subprocess.h"

namespace holdfast::testing {

class PrivateMunged {
 public:
  PrivateMunged();
  ~PrivateMunged();
  PrivateMunged(const PrivateMunged&) = delete;
  PrivateMunged& operator=(const PrivateMunged&) = delete;

  // Starts munged and waits for its socket; "" on success, else why not.
  std::string Start();
  // The socket to point libmunge at (MUNGE_OPT_SOCKET, HOLDFAST_MUNGE_SOCKET).
  std::string socket() const { return dir_.path() + "/munge.socket"; }
  std::string log() const { return ReadFile(dir_.path() + "/munged.out"); }

 private:
  TempDir dir_;
  std::unique_ptr<ChildProcess> munged_;
};

}  // namespace holdfast::testing
