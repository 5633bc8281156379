// A stand-in process for the role-group suite (no LibTorch): a learner rank
// or a role process that writes its progress record as a real one would, one
// step every 50 ms, and writes the launch contract it was given to
// $HOLDFAST_RUN_DIR/env-ROLE-INDEX.txt.
//   role_test_process learner   steps until $HOLDFAST_RUN_DIR/finish exists, then
//                               exits 0; on SIGTERM exits 75 (as holdfast-train
//                               does after its final checkpoint)
//   role_test_process role      steps until SIGTERM, then exits 0
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "common/launch_contract.h"
#include "common/progress_record.h"

namespace {

volatile sig_atomic_t g_term = 0;
void OnTerm(int) { g_term = 1; }

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace holdfast;
  const std::string mode = argc == 2 ? argv[1] : "";
  if (mode != "learner" && mode != "role") {
    std::fprintf(stderr, "usage: role_test_process learner|role\n");
    return 2;
  }
  const bool learner = mode == "learner";
  const std::string path = Env(kEnvProgressPath), run_dir = Env(kEnvRunDir);
  if (path.empty() || run_dir.empty()) {
    std::fprintf(stderr, "role_test_process: run me under holdfastd\n");
    return 2;
  }
  const int index = std::atoi(Env(learner ? kEnvRank : kEnvRoleIndex).c_str());
  {
    std::ofstream out(run_dir + "/env-" + Env(kEnvRole) + "-" + std::to_string(index) + ".txt");
    for (const char* k : {kEnvRole, kEnvRoleIndex, kEnvRoleCount, kEnvRunId, kEnvRunDir, kEnvStoreAddr, kEnvNodeAddr,
                          kEnvProgressPath, kEnvRank, kEnvGeneration}) {
      out << k << "=" << Env(k) << "\n";
    }
  }
  struct sigaction sa {};
  sa.sa_handler = OnTerm;
  sigaction(SIGTERM, &sa, nullptr);
  auto writer = ProgressWriter::Open(path, index);
  if (!writer.ok()) {
    std::fprintf(stderr, "role_test_process: %s\n", writer.status().ToString().c_str());
    return 1;
  }
  std::printf("role_test_process %s %d: pid %d\n", mode.c_str(), index, static_cast<int>(getpid()));
  std::fflush(stdout);
  for (int64_t s = 1;; ++s) {
    (*writer)->BeginStep();
    (*writer)->SetPhase(Phase::kForward);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the "work" of a step
    (*writer)->EndStep(s);
    if (g_term) {
      (*writer)->SetPhase(Phase::kDone);
      return learner ? kRankExitPreempted : 0;
    }
    if (learner && access((run_dir + "/finish").c_str(), F_OK) == 0) {
      (*writer)->SetPhase(Phase::kDone);
      return 0;
    }
  }
}
