// LocalLauncher: runs N ranks of a command on this machine without the daemon.
//
// Hosts the rendezvous store, starts each rank as a child process with
// HOLDFAST_RANK, HOLDFAST_LOCAL_RANK, HOLDFAST_WORLD_SIZE, HOLDFAST_STORE_ADDR,
// HOLDFAST_STORE_KEY_FILE (the store's key, in a private temporary folder
// removed at the end) and HOLDFAST_GENERATION set, forwards SIGINT/SIGTERM, and when one rank
// fails stops the others (TERM, grace, KILL). It is what `holdfast-train
// --nproc N` uses; the supervisor daemon replaces it for supervised runs.
// Single-threaded; call from main.
#pragma once

#include <string>
#include <vector>

#include "common/launch_contract.h"  // the kEnv* names it sets
#include "common/status.h"

namespace holdfast {


struct LaunchOptions {
  int nproc = 1;
  std::string host = "127.0.0.1";
  int grace_seconds = 10;  // between TERM and KILL when stopping the others
};

// Runs `argv` (argv[0] = program path) as nproc ranks and waits for them all.
// Returns the exit code to exit with: 0 when every rank succeeded, else the
// first failing rank's code (128+signal for a signal).
int RunLocalRanks(const std::vector<std::string>& argv, const LaunchOptions& options);

}  // namespace holdfast
