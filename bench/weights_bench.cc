// Policy weights from the GRPO learner to its rollout workers: the exchange
// directory's files against the network (trainer/rl/weights_wire.h), the
// time from a version's hand-over to it being loaded on every worker
// (bench/weights_bench.py runs it and writes docs/benchmarks.md).
//
//   holdfast-weights-bench --floats N --workers K --versions V --dir DIR --mode files|network
//
// The publisher is the learner's: one background thread that (network mode)
// hands the version to the WeightsServer, then writes the files
// (WriteParamsDumpAtomically + CommitLatestVersion), as WeightPublisher does.
// Each worker is a thread: files mode polls weights/LATEST every 1 ms and
// reads the version's folder (ReadParamsDump); network mode holds a
// WeightsSubscriber and polls it every 0.1 ms. Prints one JSON line: per
// version, the time until the last worker had it; their median and max.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/peer_auth.h"
#include "trainer/rl/exchange.h"
#include "trainer/rl/params_dump.h"
#include "trainer/rl/weights_wire.h"

namespace {
using namespace holdfast;
using namespace holdfast::rl;
using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"holdfast-weights-bench: publish -> loaded on every worker, files vs network"};
  int64_t floats = 117504;
  int workers = 2, versions = 10;
  std::string dir, mode = "network";
  app.add_option("--floats", floats, "parameters of the policy (float32)");
  app.add_option("--workers", workers, "worker threads");
  app.add_option("--versions", versions, "versions published, one after the other");
  app.add_option("--dir", dir, "the exchange directory (made)")->required();
  app.add_option("--mode", mode, "files | network")->check(CLI::IsMember({"files", "network"}));
  CLI11_PARSE(app, argc, argv);
  std::filesystem::remove_all(dir);
  if (!PrepareExchange(dir).ok()) return 1;
  const RunKey key = *RunKey::Generate();
  std::unique_ptr<WeightsServer> server;
  if (mode == "network") {
    auto s = WeightsServer::Start("127.0.0.1", key);
    if (!s.ok()) return 1;
    server = std::move(*s);
    std::FILE* f = std::fopen(WeightsAddressPath(dir).c_str(), "w");
    std::fprintf(f, "%s\n", server->address().ToString().c_str());
    std::fclose(f);
  }
  std::vector<std::unique_ptr<WeightsSubscriber>> subs;
  for (int w = 0; w < workers && server; ++w) subs.push_back(std::make_unique<WeightsSubscriber>(WeightsAddressPath(dir), key));
  while (server && std::any_of(subs.begin(), subs.end(), [](auto& s) { return s->connects() == 0; })) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::vector<double> every;  // per version: the last worker's load time
  for (int v = 0; v < versions; ++v) {
    auto dump = std::make_shared<ParamsDump>();
    {
      std::vector<float> values(static_cast<size_t>(floats), static_cast<float>(v));
      dump->Add("w", {floats}, values.data(), floats);
    }
    std::vector<double> at(static_cast<size_t>(workers), 0);
    const auto t0 = Clock::now();
    std::thread publisher([&] {
      if (server) server->Publish(v, dump);
      Status s = WriteParamsDumpAtomically(*dump, WeightsDir(dir, v));
      if (s.ok()) s = CommitLatestVersion(dir, v, 2);
      if (!s.ok()) {
        std::fprintf(stderr, "holdfast-weights-bench: %s\n", s.ToString().c_str());
        std::exit(1);
      }
    });
    std::vector<std::thread> ws;
    for (int w = 0; w < workers; ++w) {
      ws.emplace_back([&, w] {
        for (;;) {
          if (server) {
            auto got = subs[static_cast<size_t>(w)]->Latest();
            if (got && got->version == v) break;
            std::this_thread::sleep_for(std::chrono::microseconds(100));
            continue;
          }
          auto latest = ReadLatestVersion(dir);
          if (latest.ok() && *latest == v && ReadParamsDump(WeightsDir(dir, v)).ok()) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        at[static_cast<size_t>(w)] = Ms(t0, Clock::now());
      });
    }
    for (auto& t : ws) t.join();
    publisher.join();
    every.push_back(*std::max_element(at.begin(), at.end()));
  }
  std::vector<double> sorted = every;
  std::sort(sorted.begin(), sorted.end());
  std::printf("{\"mode\":\"%s\",\"floats\":%lld,\"workers\":%d,\"versions\":%d,\"median_ms\":%.3f,\"max_ms\":%.3f}\n",
              mode.c_str(), static_cast<long long>(floats), workers, versions, sorted[sorted.size() / 2],
              sorted.back());
  std::filesystem::remove_all(dir);
  return 0;
}
