// holdfast-reward: the reward service of RL training, and the task's data emitter.
//
//   holdfast-reward --task add2 --addr-file RUN/rl/reward.addr [--listen HOST:PORT]
//       serve rewards (docs/rl-reward.md) until SIGTERM/SIGINT (exit 0)
//   holdfast-reward --task add2 --addr-file F --model DIR --model-config rm.toml [--batch 64]
//       the same with a learned reward model's scores instead of the task's rule
//   holdfast-reward --task add2 --emit sft|preference|eval --count N --out FILE
//       write N lines of SFT, preference or held-out data for the task, and exit
//
// main() only wires objects together: flags, the progress record, the server,
// the address file, and a wait for the stop signal.
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/atomic_file.h"
#include "common/launch_contract.h"
#include "common/program_cli.h"
#include "common/progress_record.h"
#include "trainer/progress_sink.h"
#include "trainer/rl/reward_server.h"
#include "trainer/rl/task.h"
#ifdef HOLDFAST_REWARD_MODEL
#include "trainer/reward_model.h"
#endif

namespace {

using namespace holdfast;
using namespace holdfast::rl;

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "holdfast-reward: error: %s\n", message.c_str());
  return code;
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

// The host clients should dial: the bound one, unless it is a wildcard.
std::string AdvertisedHost(const std::string& bound) {
  if (bound != "0.0.0.0" && bound != "::") return bound;
  const std::string node = Env(kEnvNodeAddr);
  if (!node.empty()) return node;
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) == 0 && name[0] != '\0') return name;
  return bound;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "holdfast-reward: scores completions of a verifiable task over TCP (JSON lines), "
      "or writes the task's SFT, preference and held-out data (docs/rl-reward.md)"};
  std::vector<std::string> task_texts;
  std::string addr_file, listen, emit, out_path;
  uint64_t count = 0;
  uint64_t log_every = 1000;
  std::string model_dir, model_config;
  size_t batch = 8;
  int threads = 1;
  app.add_option("--task", task_texts, "task spec to serve, e.g. add2 or add3:max=9 (repeatable)")->required();
  app.add_option("--addr-file", addr_file, "serve: write HOST:PORT here (atomically) once listening");
  app.add_option("--listen", listen,
                 "serve: HOST:PORT to bind (port 0 = any free port; default $HOLDFAST_NODE_ADDR:0, "
                 "else 127.0.0.1:0)");
  app.add_option("--log-every", log_every, "serve: one log line per this many requests (0 = never)");
  app.add_option("--model", model_dir,
                 "serve: a learned reward model's weights (a params dump or a checkpoint of a run with "
                 "train.objective = \"reward\") scores the completions instead of the task's rule");
  app.add_option("--model-config", model_config, "--model: the config the reward model was trained with");
  app.add_option("--batch", batch,
                 "--model: rows of one forward (every forward is this many; the requests waiting together are "
                 "scored in one call of up to 16 forwards)");
  app.add_option("--threads", threads, "--model: LibTorch threads");
  app.add_option("--emit", emit, "write data instead of serving: sft | preference | eval");
  app.add_option("--count", count, "--emit: number of lines (eval: at most the held-out prompt count)");
  app.add_option("--out", out_path, "--emit: output file (written atomically)");
#ifdef HOLDFAST_REWARD_MODEL
  constexpr unsigned kBuiltAgainst = kBuiltAgainstLibTorch;
#else
  constexpr unsigned kBuiltAgainst = kBuiltAgainstNothing;
#endif
  AddProgramConventions(app, "holdfast-reward", kBuiltAgainst,
                        ExitCodesHelp({{kRankExitOk, "served until SIGTERM/SIGINT, or wrote the data (--emit)"},
                                       {kRankExitFailed, "a runtime failure: the port, the progress record, a write"},
                                       {kRankExitUsage, "bad flags or task spec"}}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return HandleParseError(app, e, "holdfast-reward", argc, argv, kRankExitUsage);
  }
  UseUtcLogPattern("holdfast-reward");  // UTC with the date (common/program_cli.h)

  std::vector<TaskSpec> specs;
  for (const std::string& t : task_texts) {
    auto spec = ParseTaskSpec(t);
    if (!spec.ok()) return Fail(kRankExitUsage, spec.status().message());
    specs.push_back(*spec);
  }

  if (!emit.empty()) {
    if (specs.size() != 1) return Fail(kRankExitUsage, "--emit writes one task's data: give exactly one --task");
    if (out_path.empty()) return Fail(kRankExitUsage, "--emit needs --out FILE");
    if (!addr_file.empty() || !listen.empty() || !model_dir.empty()) {
      return Fail(kRankExitUsage, "--emit writes data and exits: drop --addr-file, --listen and --model");
    }
    auto kind = ParseEmitKind(emit);
    if (!kind.ok()) return Fail(kRankExitUsage, kind.status().message());
    auto task = Task::Create(specs[0]);
    if (!task.ok()) return Fail(kRankExitUsage, task.status().message());
    Status s = EmitFile(**task, *kind, count, out_path);
    if (!s.ok()) return Fail(s.code() == StatusCode::kInvalidArgument ? kRankExitUsage : kRankExitFailed, s.message());
    std::printf("holdfast-reward: wrote %llu %s lines of task %s to %s\n", static_cast<unsigned long long>(count),
                emit.c_str(), specs[0].ToString().c_str(), out_path.c_str());
    return kRankExitOk;
  }

  if (addr_file.empty()) return Fail(kRankExitUsage, "serving needs --addr-file PATH (or --emit to write data)");
  if (count != 0 || !out_path.empty()) return Fail(kRankExitUsage, "--count and --out go with --emit");
  if (model_dir.empty() != model_config.empty()) {
    return Fail(kRankExitUsage, "--model DIR and --model-config FILE go together: the weights and the config they "
                                "were trained with");
  }
  std::shared_ptr<TextScorer> scorer;
  if (!model_dir.empty()) {
#ifdef HOLDFAST_REWARD_MODEL
    RewardModelOptions mo;
    mo.config = model_config;
    mo.weights = model_dir;
    mo.batch = batch;
    mo.threads = threads;
    auto loaded = LoadRewardModel(mo);
    if (!loaded.ok()) {
      const StatusCode code = loaded.status().code();
      return Fail(code == StatusCode::kInvalidArgument || code == StatusCode::kFailedPrecondition ||
                          code == StatusCode::kNotFound
                      ? kRankExitUsage
                      : kRankExitFailed,
                  "--model: " + loaded.status().message());
    }
    scorer = std::move(loaded).value();
#else
    return Fail(kRankExitUsage, "--model needs a holdfast-reward built with LibTorch (this one was built without it)");
#endif
  }
  const std::string node = Env(kEnvNodeAddr);
  auto hp = ParseListenAddress(listen.empty() ? ":0" : listen, node.empty() ? "127.0.0.1" : node);
  if (!hp.ok()) return Fail(kRankExitUsage, hp.status().message());

  // The stop signals are taken by sigwait below, so every thread (the server's
  // loop included, which inherits this mask) leaves them blocked.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  const std::string rank = Env(kEnvRank);
  auto opened = OpenProgressSink(Env(kEnvProgressPath), rank.empty() ? 0 : std::atoi(rank.c_str()));
  if (!opened.ok()) return Fail(kRankExitFailed, "progress record: " + opened.status().message());
  const std::unique_ptr<ProgressSink> progress = std::move(opened).value();
  progress->SetPhase(Phase::kStarting);

  // spdlog builds its logger registry on first use. Build it here, before the
  // server's loop thread can log: created after that thread started, it is
  // shared only through the static-init guard inside libspdlog, which
  // ThreadSanitizer cannot see (a reported race on every logged request).
  spdlog::default_logger();

  RewardServerOptions options;
  options.host = hp->host;
  options.port = hp->port;
  options.tasks = specs;
  options.log_every = log_every;
  options.scorer = scorer;
  auto server = RewardServer::Start(options, *progress);
  if (!server.ok()) {
    return Fail(server.status().code() == StatusCode::kInvalidArgument ? kRankExitUsage : kRankExitFailed,
                server.status().message());
  }
  const HostPort bound = (*server)->address();
  const std::string advertised = HostPort{AdvertisedHost(bound.host), bound.port}.ToString();
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(addr_file).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  Status s = WriteFileAtomically(addr_file, advertised + "\n");
  if (!s.ok()) return Fail(kRankExitFailed, "cannot write the address file: " + s.message());
  std::string task_list;
  for (const TaskSpec& t : specs) task_list += (task_list.empty() ? "" : ", ") + t.ToString();
  spdlog::info("holdfast-reward: serving {} on {} (bound {}), address in {}; rewards: {}", task_list, advertised,
               bound.ToString(), addr_file, scorer != nullptr ? scorer->Describe() : "the task's rule");

  int sig = 0;
  while (sigwait(&stop_signals, &sig) != 0) {
  }
  const RewardServerStats stats = (*server)->stats();
  spdlog::info("holdfast-reward: {} received: stopping after {} requests ({} items, {} bad requests, {} scorer calls)",
               sig == SIGTERM  ? "SIGTERM"
               : sig == SIGINT ? "SIGINT"
                               : "SIGHUP",
               stats.requests, stats.items, stats.errors, stats.batches);
  (*server)->Stop();
  progress->SetPhase(Phase::kDone);
  return kRankExitOk;
}
