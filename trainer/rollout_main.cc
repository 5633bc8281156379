// holdfast-rollout: one rollout worker of a GRPO run (docs/rl.md).
//
//   holdfast-rollout --config rl.toml [--set section.key=value ...] [--worker I --workers N]
//
// Worker I of N (under holdfastd: HOLDFAST_ROLE_INDEX / HOLDFAST_ROLE_COUNT)
// makes the groups of the prompts q = I (mod N) that the learner's demand asks
// for (trainer/rl/exchange.h): it loads the newest policy weights the learner
// published, samples rl.group_size completions of the prompt with a KV cache
// (trainer/sampler.h; seeded by (train.seed, q), so a group regenerated from
// the same weights is the same group), asks the reward service for their
// rewards (retrying across its restarts), and writes the group atomically.
// Everything it needs to go on is in the exchange directory, so a worker that
// is killed and restarted simply makes again what has no file yet. Its
// journal (DIR/workers/wI.jsonl) records what it started and finished, with
// times: bench/rl_bench reads rollout tokens/s and weight-sync times from it.
//
// Exits 0 on SIGTERM/SIGINT, 2 on bad flags or config, 1 on other errors.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/progress_record.h"
#include "common/tcp_store.h"
#include "trainer/progress_sink.h"
#include "trainer/config.h"
#include "trainer/exit_codes.h"
#include "trainer/program_info.h"
#include "trainer/model.h"
#include "trainer/rl/exchange.h"
#include "trainer/rl/policy.h"
#include "trainer/rl/reward_client.h"
#include "trainer/rl/task.h"
#include "trainer/rl/weights_wire.h"
#include "trainer/sampler.h"
#include "trainer/trainer.h"

namespace holdfast::rl {
namespace {

using Clock = std::chrono::steady_clock;
std::atomic<int> g_stop{0};
void OnStop(int sig) { g_stop.store(sig); }

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  return std::atoi(v);
}

class Journal {
 public:
  explicit Journal(const std::string& path) : out_(path, std::ios::app) {}
  bool ok() const { return static_cast<bool>(out_); }
  void Write(nlohmann::json j) {
    j["t"] = UnixNow();
    j["pid"] = ::getpid();
    out_ << j.dump() << "\n";
    out_.flush();
  }

 private:
  std::ofstream out_;
};

struct Worker {
  TrainerConfig cfg;
  std::string dir;
  int index = 0;
  int count = 1;
  std::unique_ptr<Task> task;
  std::string task_text;
  Gpt model{nullptr};
  int64_t held_version = -1;
  std::unique_ptr<ProgressSink> progress = std::make_unique<NoProgressSink>();  // never null
  std::unique_ptr<RewardClient> rewards;
  std::unique_ptr<WeightsSubscriber> weights;  // null: the exchange directory only
  std::unique_ptr<Journal> journal;
  int64_t groups_done = 0;
  int64_t learner_epoch = -1;  // of the demand last acted on (logged when it changes)
  int64_t unreadable_version = -1;  // last version that could not be read (logged once)

  // Loads the newest published weights when they differ from the held ones:
  // the learner's version over the network when it is at least the exchange
  // directory's newest (it usually arrives before the files are written),
  // else the files. A version folder removed while being read (the learner
  // keeps a few) is simply retried on the next call.
  Status RefreshWeights() {
    auto latest = ReadLatestVersion(dir);
    if (!latest.ok() && latest.status().code() != StatusCode::kNotFound) return latest.status();
    std::optional<ReceivedWeights> net = weights != nullptr ? weights->Latest() : std::nullopt;
    if (net && (!latest.ok() || net->version >= *latest)) {
      if (net->version == held_version) return Status::Ok();
      const auto t0 = Clock::now();
      HF_RETURN_IF_ERROR(LoadModel(*net->dump, model, "weights version " + std::to_string(net->version) + " from " +
                                                          net->from));
      spdlog::info("worker {}: policy version {} loaded in {:.1f} ms (over the network from {}, received in {:.1f} ms)",
                   index, net->version, MsSince(t0), net->from, net->transfer_ms);
      journal->Write({{"event", "weights"}, {"version", net->version}, {"load_ms", MsSince(t0)},
                      {"via", "network"}, {"transfer_ms", net->transfer_ms}});
      held_version = net->version;
      return Status::Ok();
    }
    if (!latest.ok()) return Status::Ok();  // nothing published yet
    if (*latest == held_version) return Status::Ok();
    const auto t0 = Clock::now();
    const std::string wdir = WeightsDir(dir, *latest);
    auto dump = ReadParamsDump(wdir);
    if (!dump.ok()) {
      // Removed or replaced while being read (the learner keeps a few
      // versions, and a restarted learner removes the versions of steps it
      // no longer has): the next call reads LATEST again.
      const StatusCode c = dump.status().code();
      if (c == StatusCode::kNotFound || c == StatusCode::kIoError || c == StatusCode::kCorruption) {
        if (*latest != unreadable_version) {  // once per version: this is retried every few ms
          spdlog::info("worker {}: policy version {} not readable now ({}); reading weights/LATEST again", index,
                       *latest, dump.status().message());
          unreadable_version = *latest;
        }
        return Status::Ok();
      }
      return dump.status();
    }
    HF_RETURN_IF_ERROR(LoadModel(*dump, model, wdir));
    if (held_version >= 0 && *latest < held_version) {
      spdlog::warn("worker {}: the policy went back from version {} to {} (the learner resumed from an earlier "
                   "checkpoint); generating with version {} from now on",
                   index, held_version, *latest, *latest);
    }
    std::error_code ec;
    const auto published = std::filesystem::last_write_time(wdir + "/params.json", ec);
    double age_ms = -1;
    if (!ec) {
      age_ms = std::chrono::duration<double, std::milli>(std::filesystem::file_time_type::clock::now() - published)
                   .count();
    }
    spdlog::info("worker {}: policy version {} loaded in {:.1f} ms (published {:.1f} ms ago)", index, *latest,
                 MsSince(t0), age_ms);
    journal->Write({{"event", "weights"}, {"version", *latest}, {"load_ms", MsSince(t0)}, {"since_publish_ms", age_ms},
                    {"via", "files"}});
    held_version = *latest;
    return Status::Ok();
  }

  Status MakeGroup(uint64_t q, const Demand& demand) {
    journal->Write({{"event", "start"}, {"q", q}, {"version", held_version}, {"epoch", demand.learner_epoch}});
    progress->BeginStep();
    progress->SetPhase(Phase::kForward);
    const TaskPrompt prompt = task->Prompt(q, Split::kTrain);
    std::vector<int64_t> tokens(prompt.prompt.begin(), prompt.prompt.end());
    SampleOptions opts;
    opts.max_new_tokens = static_cast<int>(cfg.rl.max_new_tokens);
    opts.temperature = cfg.rl.temperature;
    opts.stop_token = '\n';
    const auto t0 = Clock::now();
    HF_ASSIGN_OR_RETURN(std::vector<Completion> completions,
                        SampleGroup(model, tokens, static_cast<int>(cfg.rl.group_size), opts,
                                    GroupSeed(cfg.train.seed, q)));
    const double gen_ms = MsSince(t0);
    std::vector<RewardItem> items;
    size_t generated = 0;
    for (const Completion& c : completions) {
      RewardItem item;
      item.prompt_index = q;
      item.split = Split::kTrain;
      item.completion.assign(c.tokens.begin(), c.tokens.end());
      items.push_back(std::move(item));
      generated += c.tokens.size();
    }
    progress->SetPhase(Phase::kData);
    const auto t1 = Clock::now();
    HF_ASSIGN_OR_RETURN(std::vector<double> scores, rewards->Score(task_text, items));
    RolloutGroup group;
    group.q = q;
    group.version = held_version;
    group.worker = index;
    group.task = task_text;
    group.prompt = tokens;
    group.gen_ms = gen_ms;
    group.reward_ms = MsSince(t1);
    double reward_sum = 0;
    for (size_t i = 0; i < completions.size(); ++i) {
      RolloutSample s;
      s.tokens = std::move(completions[i].tokens);
      s.logprobs = std::move(completions[i].logprobs);
      s.stopped = completions[i].stopped;
      s.reward = scores[i];
      reward_sum += s.reward;
      group.samples.push_back(std::move(s));
    }
    HF_RETURN_IF_ERROR(WriteGroup(dir, group));
    ++groups_done;
    progress->EndStep(groups_done);
    journal->Write({{"event", "done"},
                    {"q", q},
                    {"version", held_version},
                    {"tokens", generated},
                    {"gen_ms", gen_ms},
                    {"reward_ms", group.reward_ms},
                    {"reward_mean", reward_sum / static_cast<double>(completions.size())}});
    return Status::Ok();
  }

  Status Run() {
    journal->Write({{"event", "worker_start"}, {"worker", index}, {"workers", count}});
    auto exists = [this](uint64_t q) { return std::filesystem::exists(RolloutPath(dir, q)); };
    while (g_stop.load() == 0) {
      HF_RETURN_IF_ERROR(RefreshWeights());
      auto demand = ReadDemand(dir);
      std::vector<uint64_t> work;
      if (demand.ok()) {
        if (demand->task != task_text || demand->group_size != cfg.rl.group_size) {
          return FailedPreconditionError("the learner's demand is for task '" + demand->task + "' with groups of " +
                                         std::to_string(demand->group_size) + "; this worker's config says '" +
                                         task_text + "' and " + std::to_string(cfg.rl.group_size) +
                                         ": start the workers with the learner's config");
        }
        if (held_version >= 0) work = PlanWork(*demand, index, count, held_version, exists, 1);
      } else if (demand.status().code() != StatusCode::kNotFound) {
        return demand.status();
      }
      if (work.empty()) {
        progress->SetPhase(Phase::kData);  // a heartbeat while idle
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
      // Checked again right before: the learner may have ingested it meanwhile.
      auto again = ReadDemand(dir);
      if (again.ok() && (again->buffered.count(work[0]) != 0 || work[0] < again->consumed_below)) continue;
      if (demand->learner_epoch != learner_epoch) {
        if (learner_epoch >= 0) {
          spdlog::info("worker {}: a new learner (epoch {} -> {}) wants prompts [{}, {}); going on from its demand",
                       index, learner_epoch, demand->learner_epoch, demand->consumed_below, demand->upto);
        }
        learner_epoch = demand->learner_epoch;
      }
      Status made = MakeGroup(work[0], *demand);
      if (made.code() == StatusCode::kUnavailable) {
        // The reward service did not answer within the client's deadline
        // (stopped, or restarting for long): the group is not lost, it has
        // no file; the worker plans again from the demand and retries.
        spdlog::warn("worker {}: group q={} not finished: {}; planning again from the demand", index, work[0],
                     made.message());
        journal->Write({{"event", "retry"}, {"q", work[0]}, {"error", made.message()}});
        continue;
      }
      HF_RETURN_IF_ERROR(made);
    }
    journal->Write({{"event", "worker_stop"}, {"signal", g_stop.load()}});
    return Status::Ok();
  }
};

}  // namespace
}  // namespace holdfast::rl

int main(int argc, char** argv) {
  using namespace holdfast;
  using namespace holdfast::rl;
  CLI::App app{"holdfast-rollout: a rollout worker of a GRPO run"};
  std::string config_path;
  std::vector<std::string> overrides;
  int index = EnvInt("HOLDFAST_ROLE_INDEX", 0);
  int count = EnvInt("HOLDFAST_ROLE_COUNT", 1);
  app.add_option("-c,--config", config_path, "the run's TOML config (the learner's)")->required();
  app.add_option("--set", overrides, "override a config key: --set rl.temperature=0.8 (repeatable)");
  app.add_option("--worker", index, "this worker's index (default: HOLDFAST_ROLE_INDEX, else 0)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--workers", count, "how many workers share the prompts (default: HOLDFAST_ROLE_COUNT, else 1)")
      ->check(CLI::PositiveNumber);
  AddProgramConventions(app, "holdfast-rollout", TrainerBuiltAgainst(), TrainerExitCodesHelp());
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return HandleParseError(app, e, "holdfast-rollout", argc, argv, kExitUsage);
  }
  UseUtcLogPattern("holdfast-rollout " + std::to_string(index));  // UTC with the date (common/program_cli.h)
  if (index >= count) {
    std::fprintf(stderr, "holdfast-rollout: --worker %d must be below --workers %d\n", index, count);
    return kExitUsage;
  }
  auto cfg = LoadTrainerConfig(config_path, overrides);
  if (!cfg.ok()) {
    std::fprintf(stderr, "holdfast-rollout: %s\n", cfg.status().ToString().c_str());
    return kExitUsage;
  }
  if (cfg->train.objective != "grpo") {
    std::fprintf(stderr, "holdfast-rollout: %s has train.objective = \"%s\": rollout workers serve a GRPO learner "
                 "(train.objective = \"grpo\")\n", config_path.c_str(), cfg->train.objective.c_str());
    return kExitUsage;
  }
  auto spec = ParseTaskSpec(cfg->rl.task);
  if (!spec.ok()) {
    std::fprintf(stderr, "holdfast-rollout: rl.task: %s\n", spec.status().ToString().c_str());
    return kExitUsage;
  }
  struct sigaction sa {};
  sa.sa_handler = OnStop;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  ConfigureTorchRuntime(cfg->train.threads);

  Worker w;
  w.cfg = *cfg;
  w.dir = ExchangeDir(*cfg);
  w.index = index;
  w.count = count;
  auto task = Task::Create(*spec);
  if (!task.ok()) {
    std::fprintf(stderr, "holdfast-rollout: rl.task: %s\n", task.status().ToString().c_str());
    return kExitUsage;
  }
  w.task = std::move(*task);
  w.task_text = w.task->spec().ToString();
  if (Status s = PrepareExchange(w.dir); !s.ok()) {
    std::fprintf(stderr, "holdfast-rollout: %s\n", s.ToString().c_str());
    return kExitFailed;
  }
  w.journal = std::make_unique<Journal>(WorkerJournalPath(w.dir, index));
  if (!w.journal->ok()) {
    std::fprintf(stderr, "holdfast-rollout: cannot append to %s\n", WorkerJournalPath(w.dir, index).c_str());
    return kExitFailed;
  }
  auto progress = OpenProgressSinkFromEnv(index);
  if (!progress.ok()) {
    std::fprintf(stderr, "holdfast-rollout: progress record: %s\n", progress.status().ToString().c_str());
    return kExitFailed;
  }
  w.progress = std::move(progress).value();
  RewardClientOptions ropts;
  // Waiting on a reward service that holdfastd is restarting is not a hang:
  // each retry is a heartbeat (a worker stuck for real stops beating).
  ProgressSink* beat = w.progress.get();
  ropts.observer = [beat](const RewardClientEvent& e) {
    if (e.kind != RewardClientEvent::kFailed) return;
    beat->SetPhase(Phase::kData);
    // The first failure of a request says why; its later attempts (a service
    // being restarted, reconnects every few ms) would flood the log.
    if (e.attempt == 1) {
      spdlog::warn("reward request to {} failed ({}); sending it again until the service answers",
                   e.address.empty() ? "(no address yet)" : e.address, e.error);
    }
  };
  w.rewards = std::make_unique<RewardClient>(w.dir + "/reward.addr", ropts);
  if (cfg->rl.weights_transport == "network") {
    Result<RunKey> key = StoreKeyFromEnvironment();
    if (key.ok()) {
      w.weights = std::make_unique<WeightsSubscriber>(WeightsAddressPath(w.dir), *key);
    } else {
      spdlog::info("worker {}: policy weights from the exchange directory only: no run key ({})", index,
                   key.status().message());
    }
  }
  w.model = Gpt(cfg->model);
  w.model->eval();
  spdlog::info("worker {} of {}: task {}, groups of {}, exchange {}", index, count, w.task_text, cfg->rl.group_size,
               w.dir);
  Status s = w.Run();
  if (!s.ok()) {
    spdlog::error("worker {}: {}", index, s.ToString());
    return kExitFailed;
  }
  w.progress->SetPhase(Phase::kDone);
  spdlog::info("worker {}: stopped after {} groups", index, w.groups_done);
  return kExitOk;
}
