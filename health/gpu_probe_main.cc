// holdfast-health-gpu: runs the CUDA/NCCL probes (memory test, GEMM, NCCL
// all-reduce) and prints their results as JSON (health/report.h). Started by
// holdfast-health, never by the daemon: the CUDA, cuBLAS and NCCL libraries
// are loaded only in this process, so a node whose toolkit libraries are
// missing still runs the Prolog, and a GPU fault kills only this process.
//
//   holdfast-health-gpu [--checks gpu,nccl] [--config FILE]
// Exit: 0 after printing results (failures are in the JSON); 2 on a usage or
// configuration error.
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "health/config.h"
#include "health/gpu_probes.h"
#include "health/node_checks.h"
#include "health/policy.h"
#include "health/report.h"

int main(int argc, char** argv) {
  using namespace holdfast::health;
  CLI::App app{"holdfast-health-gpu: CUDA/NCCL probes for holdfast-health; prints JSON"};
  std::string checks = "gpu,nccl", config_path;
  app.add_option("--checks", checks, "gpu, nccl or both");
  app.add_option("--config", config_path, "TOML file with a [health] section");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  HealthConfig config;
  if (!config_path.empty()) {
    auto loaded = LoadHealthConfig(config_path);
    if (!loaded.ok()) {
      std::cerr << "holdfast-health-gpu: " << loaded.status().message() << "\n";
      return 2;
    }
    config = *loaded;
  }
  auto classes = ParseCheckClasses(checks);
  if (!classes.ok()) {
    std::cerr << "holdfast-health-gpu: " << classes.status().message() << "\n";
    return 2;
  }
  std::vector<CheckResult> results;
  if (*classes & kClassGpu) {
    for (CheckResult& r : RunGpuMemtest(config)) results.push_back(std::move(r));
    for (CheckResult& r : RunGpuGemm(config)) results.push_back(std::move(r));
  }
  if (*classes & kClassNccl) {
    for (CheckResult& r : RunNcclAllreduce(config)) results.push_back(std::move(r));
  }
  std::cout << ReportToJson(results, Decide(results, config.policy)) << "\n";
  return 0;
}
