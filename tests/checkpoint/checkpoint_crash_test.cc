// kill -9 during checkpoint saves, with real processes and real files.
//
// Each iteration starts checkpoint_crash_helper (two ranks saving in a loop,
// resuming after the newest committed step) and SIGKILLs it at a point drawn
// from a seeded RNG: half the time after a random delay from the parent, half
// the time from inside the helper at a random byte offset of its writes. After
// every kill: every visible checkpoint (one with a manifest) verifies in full,
// the newest one loads for both ranks with exactly the bytes saved at its step,
// and the newest committed step never goes backwards.
//
// The seed is printed; rerun with HOLDFAST_TEST_SEED=<seed> to replay it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <thread>

#include "checkpoint/checkpoint_loader.h"
#include "spdlog/spdlog.h"
#include "tests/checkpoint/crash_state.h"

#ifndef HOLDFAST_CRASH_HELPER
#error "HOLDFAST_CRASH_HELPER must name the helper executable"
#endif

namespace holdfast {
namespace {

constexpr int kIterations = 60;

struct Child {
  pid_t pid = -1;
  int ready_fd = -1;  // read end; "ready\n" once the helper is about to save
};

Child Spawn(const std::string& root, int64_t kill_after_bytes) {
  int fds[2];
  HF_CHECK(::pipe(fds) == 0);
  pid_t pid = ::fork();
  HF_CHECK(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    std::string fd = std::to_string(fds[1]);
    std::string bytes = std::to_string(kill_after_bytes);
    std::vector<const char*> args = {HOLDFAST_CRASH_HELPER, "--root", root.c_str(), "--ready-fd", fd.c_str()};
    if (kill_after_bytes >= 0) {
      args.push_back("--kill-after-bytes");
      args.push_back(bytes.c_str());
    }
    args.push_back(nullptr);
    ::execv(args[0], const_cast<char* const*>(args.data()));
    std::perror("execv " HOLDFAST_CRASH_HELPER);
    ::_exit(127);
  }
  ::close(fds[1]);
  return {pid, fds[0]};
}

// Blocks until the helper reports ready (or dies first).
void AwaitReady(const Child& c) {
  char buf[8];
  ssize_t n;
  do {
    n = ::read(c.ready_fd, buf, sizeof(buf));
  } while (n < 0 && errno == EINTR);
}

void ExpectCrashState(const LoadedShard& shard, int rank) {
  CrashState want(shard.manifest.step, rank);
  for (const BufferView& v : want.Views()) {
    Result<ConstBufferView> got = shard.Find(v.name);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->size, v.size);
    EXPECT_EQ(std::memcmp(got->data, v.data, v.size), 0) << "step " << shard.manifest.step << " " << v.name;
  }
}

TEST(CheckpointCrashTest, KillNineDuringSavesLeavesOnlyCommittedCheckpoints) {
  uint64_t seed = std::random_device{}();
  if (const char* s = std::getenv("HOLDFAST_TEST_SEED")) seed = std::strtoull(s, nullptr, 10);
  std::cout << "checkpoint_crash_test: seed " << seed << " (HOLDFAST_TEST_SEED=" << seed << " to replay)"
            << std::endl;
  RecordProperty("seed", std::to_string(seed));
  std::mt19937_64 rng(seed);
  spdlog::set_level(spdlog::level::err);  // skipped partial folders are expected

  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base ? base : "/tmp") + "/hf_ckpt_crash_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const std::string root = tmpl;
  CheckpointLoader loader(root);

  int64_t newest = -1;
  int killed_by_time = 0, killed_by_bytes = 0, partial_seen = 0;
  for (int i = 0; i < kIterations; ++i) {
    SCOPED_TRACE("iteration " + std::to_string(i) + ", seed " + std::to_string(seed));
    const bool by_bytes = i % 2 == 1;
    // One step writes ~4.6 KB of shards and a ~600-byte manifest.
    const int64_t kill_after = by_bytes ? std::uniform_int_distribution<int64_t>(0, 30000)(rng) : -1;
    const auto delay = std::chrono::microseconds(std::uniform_int_distribution<int>(0, 40000)(rng));
    Child c = Spawn(root, kill_after);
    AwaitReady(c);
    if (!by_bytes) {
      std::this_thread::sleep_for(delay);  // the kill point itself, not a wait for anything
      ::kill(c.pid, SIGKILL);
    }
    ::close(c.ready_fd);
    int wstatus = 0;
    ASSERT_EQ(::waitpid(c.pid, &wstatus, 0), c.pid);
    ASSERT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL)
        << "helper did not die by SIGKILL (exit status " << (WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1) << ")";
    (by_bytes ? killed_by_bytes : killed_by_time)++;

    // Every visible checkpoint verifies in full; partial folders have no manifest.
    Result<std::vector<int64_t>> steps = loader.ListSteps();
    if (!steps.ok()) continue;  // killed before the first folder appeared
    int64_t newest_visible = -1;
    for (int64_t step : *steps) {
      Result<Manifest> m = loader.ReadManifest(step);
      if (!m.ok()) {
        EXPECT_EQ(m.status().code(), StatusCode::kNotFound) << "step " << step << ": " << m.status().ToString();
        ++partial_seen;
        continue;
      }
      Result<Manifest> v = loader.Verify(step);
      EXPECT_TRUE(v.ok()) << "visible checkpoint " << step << " does not verify: " << v.status().ToString();
      newest_visible = std::max(newest_visible, step);
    }
    EXPECT_GE(newest_visible, newest) << "a committed checkpoint disappeared";
    if (newest_visible < 0) continue;
    for (int rank = 0; rank < 2; ++rank) {
      std::vector<SkippedCheckpoint> skipped;
      Result<LoadedShard> got = loader.LoadNewest(rank, {}, &skipped);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(got->manifest.step, newest_visible);
      for (const SkippedCheckpoint& s : skipped) {
        EXPECT_EQ(s.reason.code(), StatusCode::kNotFound) << s.reason.ToString();
      }
      ExpectCrashState(*got, rank);
    }
    newest = newest_visible;
  }
  std::cout << "checkpoint_crash_test: " << killed_by_time << " kills by time, " << killed_by_bytes
            << " by byte offset; newest committed step " << newest << "; " << partial_seen
            << " partial folders seen" << std::endl;
  EXPECT_GT(newest, 0) << "no save ever committed: the test did not exercise anything";
  std::system(("rm -rf '" + root + "'").c_str());
}

}  // namespace
}  // namespace holdfast
