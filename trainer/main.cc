// holdfast-train: one rank of a data-parallel GPT training run.
//
//   holdfast-train --config run.toml [--set section.key=value ...] [--nproc N]
//
// With --nproc N (and no HOLDFAST_RANK in the environment) it launches N local
// ranks of itself; under the supervisor daemon each process is one rank.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/store.h"
#include "common/tcp_store.h"
#include "trainer/comm/communicator.h"
#include "trainer/config.h"
#include "trainer/local_launcher.h"
#include "trainer/train_state.h"
#include "trainer/trainer.h"

namespace holdfast {
namespace {

// Documented in README.md ("Exit codes").
constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

struct Flags {
  std::string config_path;
  std::vector<std::string> overrides;
  int nproc = 1;
  std::string dump_init;
  std::string dump_final;
  std::string metrics;
  int64_t save_state_at = -1;
  std::string state_dir;
  int64_t stop_after = -1;
  std::string restore_state;
  bool strict_determinism = false;
};

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v == nullptr ? fallback : std::atoi(v);
}

std::string RankDir(const std::string& dir, int rank) { return dir + "/rank" + std::to_string(rank); }

Result<std::unique_ptr<Communicator>> MakeCommunicator(const TrainerConfig& cfg, int rank, int world) {
  if (world == 1) return MakeLocalCommunicator();
  const char* addr = std::getenv(kEnvStoreAddr);
  if (addr == nullptr) {
    return InvalidArgumentError(std::string(kEnvWorldSize) + " > 1 but " + kEnvStoreAddr +
                                " is not set: start ranks through holdfast-train --nproc N or holdfastd");
  }
  HF_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(addr));
  const auto timeout = std::chrono::seconds(cfg.dist.timeout_s);
  HF_ASSIGN_OR_RETURN(std::shared_ptr<Store> store, ConnectTcpStore(hp.host, hp.port, timeout));
  CommunicatorOptions opts;
  opts.rank = rank;
  opts.world_size = world;
  opts.store = std::make_shared<PrefixStore>(GenerationPrefix(EnvInt(kEnvGeneration, 0)), store);
  opts.interface_host = cfg.dist.host;
  opts.timeout = timeout;
  opts.cuda_device = EnvInt(kEnvLocalRank, 0);
  if (cfg.dist.backend == "nccl") return MakeNcclCommunicator(opts);
  return MakeGlooCommunicator(opts);
}

int Run(const Flags& flags, const TrainerConfig& cfg) {
  const int rank = EnvInt(kEnvRank, 0);
  const int world = EnvInt(kEnvWorldSize, 1);
  const bool main_rank = rank == 0;
  spdlog::set_pattern(world > 1 ? "[%H:%M:%S.%e] [%^%l%$] [rank " + std::to_string(rank) + "] %v"
                                : "[%H:%M:%S.%e] [%^%l%$] %v");
  ConfigureTorchRuntime(cfg.train.threads);

  auto comm = MakeCommunicator(cfg, rank, world);
  if (!comm.ok()) {
    spdlog::error("{}", comm.status().ToString());
    return kExitFailed;
  }
  auto trainer_or = Trainer::Create(cfg, std::move(comm).value());
  if (!trainer_or.ok()) {
    spdlog::error("{}", trainer_or.status().ToString());
    return trainer_or.status().code() == StatusCode::kInvalidArgument ||
                   trainer_or.status().code() == StatusCode::kNotFound
               ? kExitUsage
               : kExitFailed;
  }
  Trainer& trainer = **trainer_or;
  if (main_rank) {
    spdlog::info("model: {} parameters, {} layers x {} wide, context {}; data {} {}; world {}", trainer.num_params(),
                 cfg.model.n_layer, cfg.model.n_embd, cfg.model.block_size, cfg.data.format, cfg.data.path, world);
  }

  if (!flags.restore_state.empty()) {
    auto state = ReadStateDir(RankDir(flags.restore_state, rank));
    if (!state.ok()) {
      spdlog::error("cannot read state: {}", state.status().ToString());
      return kExitFailed;
    }
    std::vector<std::string> warnings;
    Status s = trainer.RestoreState(*state, flags.strict_determinism, &warnings);
    if (!s.ok()) {
      spdlog::error("cannot restore state: {}", s.ToString());
      return kExitFailed;
    }
    for (const std::string& w : warnings) {
      spdlog::error("DETERMINISM BROKEN on resume: {} -- this run will not reproduce the uninterrupted run bit for bit",
                    w);
    }
    spdlog::info("restored state at step {} from {}", trainer.step(), flags.restore_state);
  }
  if (!flags.dump_init.empty() && main_rank) {
    Status s = trainer.DumpParams(flags.dump_init);
    if (!s.ok()) {
      spdlog::error("{}", s.ToString());
      return kExitFailed;
    }
  }

  std::ofstream metrics;
  if (main_rank) {
    std::string path = flags.metrics;
    if (path.empty()) path = (std::filesystem::path(cfg.output.dir) / cfg.output.metrics).string();
    std::error_code ec;
    if (auto parent = std::filesystem::path(path).parent_path(); !parent.empty()) {
      std::filesystem::create_directories(parent, ec);
    }
    metrics.open(path, flags.restore_state.empty() ? std::ios::trunc : std::ios::app);
    if (!metrics) {
      spdlog::error("cannot open metrics file {} for writing", path);
      return kExitFailed;
    }
  }

  while (trainer.step() < cfg.train.steps) {
    auto m = trainer.Step();
    if (!m.ok()) {
      spdlog::error("{}", m.status().ToString());
      return kExitFailed;
    }
    if (main_rank) {
      nlohmann::json line = {{"step", m->step},           {"loss", m->loss},         {"lr", m->lr},
                             {"grad_norm", m->grad_norm}, {"tokens_per_s", m->tokens_per_s},
                             {"step_ms", m->step_ms},     {"comm_wait_ms", m->comm_wait_ms}};
      metrics << line.dump() << "\n";
      metrics.flush();
      if (m->step % cfg.train.log_every == 0 || m->step == cfg.train.steps) {
        spdlog::info("step {:>6}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:>8.0f} tok/s | {:.1f} ms", m->step,
                     cfg.train.steps, m->loss, m->lr, m->grad_norm, m->tokens_per_s, m->step_ms);
      }
    }
    if (m->step == flags.save_state_at) {
      auto state = trainer.CaptureState();
      Status s = state.ok() ? WriteStateDir(*state, RankDir(flags.state_dir, rank)) : state.status();
      if (!s.ok()) {
        spdlog::error("cannot save state: {}", s.ToString());
        return kExitFailed;
      }
      spdlog::info("saved state at step {} to {}", m->step, flags.state_dir);
    }
    if (m->step == flags.stop_after) {
      spdlog::info("stopping after step {} as asked (--stop-after)", m->step);
      return kExitOk;
    }
  }
  if (main_rank) {
    if (!flags.dump_final.empty()) {
      Status s = trainer.DumpParams(flags.dump_final);
      if (!s.ok()) {
        spdlog::error("{}", s.ToString());
        return kExitFailed;
      }
    }
    std::printf("final step %lld params xxh3 %016llx\n", static_cast<long long>(trainer.step()),
                static_cast<unsigned long long>(trainer.ParamsHash()));
    std::fflush(stdout);
  }
  return kExitOk;
}

}  // namespace
}  // namespace holdfast

int main(int argc, char** argv) {
  using namespace holdfast;
  CLI::App app{"holdfast-train: data-parallel GPT training with complete, bit-exact state"};
  Flags flags;
  app.add_option("-c,--config", flags.config_path, "TOML config file (see examples/)");
  app.add_option("--set", flags.overrides, "override a config key: --set optim.lr=3e-4 (repeatable)");
  app.add_option("--nproc", flags.nproc, "launch N local data-parallel ranks")->check(CLI::Range(1, 1024));
  app.add_option("--dump-init", flags.dump_init, "write the initial parameters to DIR (params.json + params.bin)");
  app.add_option("--dump-final", flags.dump_final, "write the final parameters to DIR");
  app.add_option("--metrics", flags.metrics, "per-step metrics JSONL (default: output.dir/output.metrics)");
  app.add_option("--save-state-at", flags.save_state_at, "capture the complete state after step K")
      ->check(CLI::PositiveNumber);
  app.add_option("--state-dir", flags.state_dir, "where --save-state-at writes (one folder per rank)");
  app.add_option("--stop-after", flags.stop_after, "exit after step K (to test resume)")->check(CLI::PositiveNumber);
  app.add_option("--restore-state", flags.restore_state, "resume from a state written by --save-state-at");
  app.add_flag("--strict-determinism", flags.strict_determinism,
               "refuse to resume when threads, BLAS, world size or LibTorch differ from the saved state");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (flags.save_state_at > 0 && flags.state_dir.empty()) {
    std::fprintf(stderr, "error: --save-state-at needs --state-dir DIR\n");
    return 2;
  }
  auto cfg = LoadTrainerConfig(flags.config_path, flags.overrides);
  if (!cfg.ok()) {
    std::fprintf(stderr, "error: %s\n", cfg.status().message().c_str());
    return 2;
  }
  if (flags.nproc > 1 && std::getenv(kEnvRank) == nullptr) {
    LaunchOptions lo;
    lo.nproc = flags.nproc;
    lo.host = cfg->dist.host;
    return RunLocalRanks(std::vector<std::string>(argv, argv + argc), lo);
  }
  return Run(flags, *cfg);
}
