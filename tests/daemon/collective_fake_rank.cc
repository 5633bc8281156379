// A stand-in rank for the many-ranks suite (no LibTorch): every step it
// "computes" STEP_MS milliseconds in forward, then joins an allreduce-shaped
// barrier of every rank of its generation through the run's TCP store
// (HOLDFAST_STORE_ADDR, hosted by the leading holdfastd), recording the
// collective in its progress record as holdfast-train does. So a SIGSTOPped
// rank holds every other rank in collective #N, the hang the daemon must name.
// Steps forever; SIGTERM (the daemon stopping the ranks) ends it.
//   collective_fake_rank STEP_MS
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "common/launch_contract.h"
#include "common/progress_record.h"
#include "common/tcp_store.h"

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

int Die(const std::string& what) {
  std::fprintf(stderr, "collective_fake_rank: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace holdfast;
  if (argc != 2) {
    std::fprintf(stderr, "usage: collective_fake_rank STEP_MS\n");
    return 2;
  }
  const auto step_time = std::chrono::milliseconds(std::atol(argv[1]));
  const std::string path = Env(kEnvProgressPath), rank_text = Env(kEnvRank), store_addr = Env(kEnvStoreAddr);
  if (path.empty() || rank_text.empty() || store_addr.empty()) return Die("run me under holdfastd");
  const int rank = std::atoi(rank_text.c_str());
  const int64_t world = std::atol(Env(kEnvWorldSize).c_str());
  const std::string generation = Env(kEnvGeneration);
  Result<HostPort> addr = ParseHostPort(store_addr);
  if (!addr.ok()) return Die(addr.status().ToString());
  Result<RunKey> key = StoreKeyFromEnvironment();
  if (!key.ok()) return Die(key.status().ToString());
  Result<std::shared_ptr<Store>> store = ConnectTcpStore(addr->host, addr->port, *key, std::chrono::seconds(60));
  if (!store.ok()) return Die(store.status().ToString());
  auto writer = ProgressWriter::Open(path, rank);
  if (!writer.ok()) return Die(writer.status().ToString());
  std::printf("collective_fake_rank %d of %lld: pid %d\n", rank, static_cast<long long>(world),
              static_cast<int>(getpid()));
  std::fflush(stdout);
  for (int64_t s = 1;; ++s) {
    (*writer)->BeginStep();
    (*writer)->SetPhase(Phase::kForward);
    std::this_thread::sleep_for(step_time);  // the "work" of a step
    const uint64_t seq = (*writer)->IssueCollective(CollectiveKind::kAllreduce, 4096);
    (*writer)->WaitCollective(seq, CollectiveKind::kAllreduce);
    // The barrier: the last rank in marks the step done; everyone waits for that mark.
    const std::string key = "fake/g" + generation + "/step" + std::to_string(s);
    Result<int64_t> in = (*store)->Add(key, 1);
    if (!in.ok()) return Die(in.status().ToString());
    if (*in == world) {
      if (Status st = (*store)->Set(key + "/done", {1}); !st.ok()) return Die(st.ToString());
    }
    if (Status st = (*store)->Wait({key + "/done"}, std::chrono::hours(1)); !st.ok()) return Die(st.ToString());
    (*writer)->CollectiveDone(seq);
    (*writer)->EndStep(s);
  }
}
