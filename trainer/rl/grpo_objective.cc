#include "trainer/rl/grpo_objective.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/atomic_file.h"
#include "common/launch_contract.h"
#include "common/tcp_store.h"
#include "trainer/comm/communicator.h"
#include "trainer/rl/exchange.h"
#include "trainer/rl/grpo_loss.h"
#include "trainer/rl/policy.h"
#include "trainer/rl/replay_buffer.h"
#include "trainer/rl/task.h"
#include "trainer/rl/weights_wire.h"
#include "trainer/sampler.h"

namespace holdfast::rl {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Writes weights versions on its own thread: the learner hands over a copy of
// the parameters and goes on; only the newest pending version is written.
//
// With a WeightsServer (rl.weights_transport = "network") each version is
// handed to it first, then written: workers that hold a connection get it
// before the exchange directory's copy exists.
class WeightPublisher {
 public:
  WeightPublisher(std::string dir, int keep, std::unique_ptr<WeightsServer> server)
      : dir_(std::move(dir)), keep_(keep), server_(std::move(server)), thread_([this] { Loop(); }) {}
  ~WeightPublisher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  void Publish(int64_t version, ParamsDump dump) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_version_ = version;
      pending_ = std::move(dump);
      has_pending_ = true;
    }
    cv_.notify_all();
  }

  // The first error of a write (then cleared), and the last write's time.
  Status TakeError() {
    std::lock_guard<std::mutex> lock(mu_);
    Status s = error_;
    error_ = Status::Ok();
    return s;
  }
  double last_publish_ms() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_ms_;
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || has_pending_; });
      if (!has_pending_) return;  // stopping with nothing left to write
      const int64_t version = pending_version_;
      ParamsDump dump = std::move(pending_);
      has_pending_ = false;
      lock.unlock();
      const auto t0 = Clock::now();
      auto shared = std::make_shared<const ParamsDump>(std::move(dump));
      if (server_ != nullptr) server_->Publish(version, shared);
      Status s = WriteParamsDumpAtomically(*shared, WeightsDir(dir_, version));
      if (s.ok()) s = CommitLatestVersion(dir_, version, keep_);
      const double ms = MsSince(t0);
      lock.lock();
      last_ms_ = ms;
      if (!s.ok() && error_.ok()) error_ = s.WithContext("publishing weights version " + std::to_string(version));
    }
  }

  const std::string dir_;
  const int keep_;
  const std::unique_ptr<WeightsServer> server_;  // null: files only
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;             // guarded by mu_
  bool has_pending_ = false;      // guarded by mu_
  int64_t pending_version_ = 0;   // guarded by mu_
  ParamsDump pending_;            // guarded by mu_
  Status error_;                  // guarded by mu_
  double last_ms_ = 0;            // guarded by mu_
  std::thread thread_;            // last: starts after the fields above exist
};

// One completion laid out for the loss.
struct Sequence {
  std::vector<int64_t> tokens;  // prompt + completion
  int64_t prompt_len = 0;
  std::vector<float> behaviour;  // per completion token
  double advantage = 0;
  double reward = 0;
  int64_t staleness = 0;
};

class GrpoObjective : public Objective {
 public:
  GrpoObjective(const ObjectiveEnv& env, Communicator* comm, Gpt policy, Gpt reference, std::unique_ptr<Task> task)
      : env_(env), cfg_(*env.config), comm_(comm), policy_(std::move(policy)), reference_(std::move(reference)),
        task_(std::move(task)), task_text_(task_->spec().ToString()), dir_(ExchangeDir(cfg_)),
        buffer_(cfg_.rl.prompts_per_step, cfg_.rl.group_size, cfg_.rl.max_staleness, task_text_) {}

  const char* name() const override { return "grpo"; }

  Status BeginStep(int64_t step, uint64_t cursor) override {
    const auto t0 = Clock::now();
    cursor_ = cursor;
    std::string batch;
    bool cancelled = false;
    if (rank() == 0) {
      const Status gathered = GatherStep(step);
      cancelled = gathered.code() == StatusCode::kCancelled;
      if (!gathered.ok() && !cancelled) return gathered;
      if (!cancelled) {
        std::vector<RolloutGroup> groups = buffer_.TakeStep(step);
        for (const RolloutGroup& g : groups) batch += GroupToJson(g);
        if (cfg_.rl.ledger) HF_RETURN_IF_ERROR(WriteLedger(step, batch));
        // The demand now says the step's prompts are consumed: a worker does not remake them.
        HF_RETURN_IF_ERROR(WriteDemandFor(step));
      }
    }
    // Every rank learns whether rank 0 was stopped while it waited.
    if (world() > 1) HF_RETURN_IF_ERROR(BroadcastText(&batch, &cancelled));
    if (cancelled) {
      return CancelledError("stopped while waiting for the groups of step " + std::to_string(step + 1) +
                            " (a stop was asked for); the replay buffer keeps what arrived");
    }
    HF_RETURN_IF_ERROR(LayOut(batch, step));
    step_wait_ms_ = MsSince(t0);
    return Status::Ok();
  }

  torch::Tensor MicroLoss(Gpt& model, uint64_t first, int B) override {
    const int64_t j0 = static_cast<int64_t>(first - cursor_);
    HF_CHECK_MSG(j0 >= 0 && j0 + B <= static_cast<int64_t>(seqs_.size()),
                 "GRPO micro-batch outside the step's completions");
    int64_t L = 0;
    for (int i = 0; i < B; ++i) L = std::max<int64_t>(L, seqs_[j0 + i].tokens.size());
    auto idx = torch::zeros({B, L}, torch::kLong);
    auto behaviour = torch::zeros({B, L - 1}, torch::kFloat32);
    auto mask = torch::zeros({B, L - 1}, torch::kFloat32);
    auto adv = torch::zeros({B}, torch::kFloat32);
    double reward = 0, staleness = 0;
    for (int i = 0; i < B; ++i) {
      const Sequence& s = seqs_[j0 + i];
      std::memcpy(idx[i].data_ptr<int64_t>(), s.tokens.data(), s.tokens.size() * sizeof(int64_t));
      for (size_t t = 0; t < s.behaviour.size(); ++t) {
        // Completion token t is predicted at position prompt_len - 1 + t.
        behaviour[i][s.prompt_len - 1 + static_cast<int64_t>(t)] = s.behaviour[t];
        mask[i][s.prompt_len - 1 + static_cast<int64_t>(t)] = 1.0f;
      }
      adv[i] = static_cast<float>(s.advantage);
      reward += s.reward;
      staleness += static_cast<double>(s.staleness);
    }
    if (env_.cuda) {
      idx = idx.to(env_.device);
      behaviour = behaviour.to(env_.device);
      mask = mask.to(env_.device);
      adv = adv.to(env_.device);
    }
    torch::Tensor ref;
    {
      torch::NoGradGuard no_grad;
      ref = TokenLogProbs(reference_->Logits(idx), idx);
    }
    const torch::Tensor logp = TokenLogProbs(model->Logits(idx), idx);
    GrpoTerms terms = GrpoLoss(logp, behaviour, ref, mask, adv, cfg_.rl.clip_eps, cfg_.rl.kl_beta);
    sums_[0] += reward / B;
    sums_[1] += terms.kl;
    sums_[2] += terms.clip_fraction;
    sums_[3] += terms.policy_loss;
    sums_[4] += staleness / B;
    micro_ += 1;
    return terms.loss;
  }

  int64_t TokensPerSample() const override { return max_prompt_ + cfg_.rl.max_new_tokens; }

  std::vector<std::string> StepMetricNames() const override {
    return {"reward", "kl", "clip_fraction", "policy_loss", "staleness", "wait_ms", "version", "publish_ms"};
  }
  std::vector<double> TakeStepMetrics() override {
    const double n = std::max(1, micro_);
    std::vector<double> out = {sums_[0] / n, sums_[1] / n, sums_[2] / n, sums_[3] / n, sums_[4] / n,
                               step_wait_ms_, static_cast<double>(version_), publisher_ ? publisher_->last_publish_ms() : 0};
    std::fill(std::begin(sums_), std::end(sums_), 0.0);
    micro_ = 0;
    return out;
  }

  bool HasEval() const override { return true; }
  size_t EvalSumCount() const override { return 2; }
  uint64_t EvalSize() const override {
    return std::min<uint64_t>(static_cast<uint64_t>(cfg_.rl.eval_prompts), task_->EvalCount());
  }
  Result<std::vector<double>> EvalPartial(Gpt& model, int rank, int world, uint64_t limit) override {
    std::vector<std::vector<int64_t>> prompts;
    std::vector<TaskPrompt> asked;
    for (uint64_t j = static_cast<uint64_t>(rank); j < limit; j += static_cast<uint64_t>(world)) {
      TaskPrompt p = task_->Prompt(j, Split::kEval);
      prompts.emplace_back(p.prompt.begin(), p.prompt.end());
      asked.push_back(std::move(p));
    }
    double correct = 0;
    if (!prompts.empty()) {
      HF_ASSIGN_OR_RETURN(auto outputs,
                          GreedyBatch(model, prompts, static_cast<int>(cfg_.rl.max_new_tokens), '\n'));
      for (size_t i = 0; i < outputs.size(); ++i) {
        const std::string text(outputs[i].begin(), outputs[i].end());
        correct += task_->Reward(asked[i], text);
      }
    }
    return std::vector<double>{correct, static_cast<double>(prompts.size())};
  }
  std::map<std::string, double> EvalMetrics(const std::vector<double>& total) const override {
    const double n = std::max(1.0, total[1]);
    return {{"eval_reward", total[0] / n}, {"eval_prompts", total[1]}};
  }

  std::vector<StateView> ExtraStateViews() override {
    if (rank() != 0) return {};
    buffer_text_ = buffer_.Serialize();
    spdlog::info("GRPO: the checkpoint of step {} holds a replay buffer of {} groups",
                 buffer_.consumed_below() / static_cast<uint64_t>(cfg_.rl.prompts_per_step), buffer_.size());
    StateView v;
    v.name = "objective.rl_buffer";
    v.data = reinterpret_cast<const uint8_t*>(buffer_text_.data());
    v.size = buffer_text_.size();
    return {v};
  }
  Status RestoreExtraState(const std::vector<StateView>& views) override {
    if (rank() != 0) return Status::Ok();
    const StateView* v = FindView(views, "objective.rl_buffer");
    if (v == nullptr || v->data == nullptr) {
      spdlog::warn("GRPO: the checkpoint has no replay buffer (saved by another objective?): starting with an "
                   "empty one; the workers make the missing groups again");
      return Status::Ok();
    }
    return buffer_.Restore(std::string(reinterpret_cast<const char*>(v->data), v->size), "checkpoint replay buffer");
  }

 private:
  int rank() const { return comm_->rank(); }
  int world() const { return comm_->world_size(); }

  uint64_t Upto(int64_t step) const {
    return static_cast<uint64_t>((step + 1 + cfg_.rl.max_staleness) * cfg_.rl.prompts_per_step);
  }

  Status WriteDemandFor(int64_t step) {
    Demand d;
    d.version = step;
    d.upto = Upto(step);
    d.consumed_below = buffer_.consumed_below();
    d.buffered = buffer_.buffered();
    d.prompts_per_step = cfg_.rl.prompts_per_step;
    d.max_staleness = cfg_.rl.max_staleness;
    d.group_size = cfg_.rl.group_size;
    d.task = task_text_;
    d.learner_epoch = epoch_;
    return WriteDemand(dir_, d);
  }

  // Rank 0's weights server (rl.weights_transport = "network"), its address
  // in DIR/weights.addr; null — the exchange directory only — without the
  // run's key (a learner not started by holdfastd) or when it cannot listen.
  std::unique_ptr<WeightsServer> StartServer() {
    std::error_code ec;
    std::filesystem::remove(WeightsAddressPath(dir_), ec);  // an earlier learner's: never dial a dead server
    if (cfg_.rl.weights_transport != "network") return nullptr;
    Result<RunKey> key = StoreKeyFromEnvironment();
    if (!key.ok()) {
      spdlog::info("GRPO: policy weights through the exchange directory only: no run key to serve them with ({})",
                   key.status().message());
      return nullptr;
    }
    const char* node = std::getenv(kEnvNodeAddr);
    Result<std::unique_ptr<WeightsServer>> server =
        WeightsServer::Start(node != nullptr && *node != '\0' ? node : "127.0.0.1", *key);
    Status s = server.ok() ? WriteFileAtomically(WeightsAddressPath(dir_), (*server)->address().ToString() + "\n")
                           : server.status();
    if (!s.ok()) {
      spdlog::warn("GRPO: policy weights through the exchange directory only: {}", s.ToString());
      return nullptr;
    }
    spdlog::info("GRPO: serving policy weights on {} (workers subscribe; the exchange directory keeps a copy)",
                 (*server)->address().ToString());
    return std::move(server).value();
  }

  // Rank 0: publishes version `step`, then ingests groups until the step's are in.
  Status GatherStep(int64_t step) {
    if (publisher_ == nullptr) {
      HF_RETURN_IF_ERROR(PrepareExchange(dir_));
      publisher_ = std::make_unique<WeightPublisher>(dir_, static_cast<int>(cfg_.rl.keep_versions), StartServer());
      epoch_ = static_cast<int64_t>(::getpid()) * 1000003 +
               std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                   .count();
      if (step > 0) HF_RETURN_IF_ERROR(DiscardLostTimeline(step));
      if (step > 0) {
        spdlog::info("GRPO: resumed at policy version {} with a replay buffer of {} groups; prompts below {} were "
                     "trained on; newer weights and groups (of the lost steps) are discarded",
                     step, buffer_.size(), buffer_.consumed_below());
      }
    }
    const uint64_t first = static_cast<uint64_t>(step * cfg_.rl.prompts_per_step);
    if (buffer_.consumed_below() != first) {
      if (buffer_.consumed_below() > first) {
        return FailedPreconditionError("GRPO: the replay buffer has consumed prompts below " +
                                       std::to_string(buffer_.consumed_below()) + " but step " + std::to_string(step) +
                                       " starts at prompt " + std::to_string(first) +
                                       ": the checkpoint's buffer and step disagree; resume from another checkpoint");
      }
      buffer_.SetConsumedBelow(first);
    }
    version_ = step;
    if (published_ != step) {
      publisher_->Publish(step, DumpModel(policy_));
      published_ = step;
    }
    HF_RETURN_IF_ERROR(WriteDemandFor(step));
    const auto t0 = Clock::now();
    const uint64_t upto = Upto(step);
    for (;;) {
      HF_RETURN_IF_ERROR(publisher_->TakeError());
      HF_ASSIGN_OR_RETURN(std::vector<uint64_t> files, ListGroups(dir_));
      std::vector<std::string> taken;
      for (uint64_t q : files) {
        const std::string path = RolloutPath(dir_, q);
        auto group = ReadGroup(path);
        if (!group.ok()) {
          if (group.status().code() == StatusCode::kNotFound) continue;
          spdlog::warn("GRPO: dropping {}: {}", path, group.status().ToString());
          taken.push_back(path);
          continue;
        }
        std::string why;
        const Status valid = Validate(*group);
        ReplayBuffer::Verdict verdict = ReplayBuffer::Verdict::kMalformed;
        if (valid.ok()) {
          verdict = buffer_.Offer(std::move(*group), step, upto, &why);
        } else {
          why = valid.message();
        }
        if (verdict == ReplayBuffer::Verdict::kNotAsked) continue;  // a worker ahead of us: later
        if (verdict != ReplayBuffer::Verdict::kAccepted) {
          spdlog::info("GRPO: dropping {} ({}): {}", path, ReplayBuffer::VerdictName(verdict), why);
        }
        taken.push_back(path);
      }
      if (!taken.empty()) {
        // The demand names what is buffered before the files go, so that a
        // worker that finds no file also finds the prompt buffered.
        HF_RETURN_IF_ERROR(WriteDemandFor(step));
        for (const std::string& path : taken) {
          std::error_code ec;
          std::filesystem::remove(path, ec);
        }
      }
      if (buffer_.HasStep(step)) return Status::Ok();
      if (Interrupted()) return CancelledError("a stop was asked for");
      const double waited_s = MsSince(t0) / 1000.0;
      if (waited_s > cfg_.rl.wait_timeout_s) {
        std::string missing;
        for (uint64_t q : buffer_.Missing(step)) missing += (missing.empty() ? "" : ", ") + std::to_string(q);
        return TimeoutError("GRPO step " + std::to_string(step) + ": no group for prompts " + missing + " after " +
                            std::to_string(static_cast<int>(waited_s)) + " s (rl.wait_timeout_s): prompt q is made "
                            "by rollout worker q mod N; check that the workers and the reward service run "
                            "(runctl status) and read their logs");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  Status WriteLedger(int64_t step, const std::string& batch) {
    std::error_code ec;
    std::filesystem::create_directories(dir_ + "/trained", ec);
    if (ec) return IoError("create " + dir_ + "/trained: " + ec.message());
    char name[32];
    std::snprintf(name, sizeof(name), "/trained/s%08lld.jsonl", static_cast<long long>(step));
    return WriteFileAtomically(dir_ + name, batch);
  }

  // A learner that resumed at `step`: groups made by versions after it came
  // from policies of steps that no longer exist (the same version number need
  // not be the same weights), so they go, whatever their prompt.
  Status DiscardLostTimeline(int64_t step) {
    HF_ASSIGN_OR_RETURN(std::vector<uint64_t> files, ListGroups(dir_));
    int dropped = 0;
    for (uint64_t q : files) {
      auto group = ReadGroup(RolloutPath(dir_, q));
      if (group.ok() && group->version <= step) continue;
      std::error_code ec;
      std::filesystem::remove(RolloutPath(dir_, q), ec);
      ++dropped;
    }
    if (dropped > 0) spdlog::info("GRPO: discarded {} groups made after version {} (lost steps)", dropped, step);
    return Status::Ok();
  }

  // A group's prompt must be the task's prompt q, its tokens bytes, and every
  // completion must fit the model's context with its prompt.
  Status Validate(const RolloutGroup& g) const {
    const TaskPrompt p = task_->Prompt(g.q, Split::kTrain);
    if (g.prompt != std::vector<int64_t>(p.prompt.begin(), p.prompt.end())) {
      return CorruptionError("its prompt is not the task's prompt " + std::to_string(g.q));
    }
    for (const RolloutSample& s : g.samples) {
      if (s.tokens.empty() || static_cast<int64_t>(s.tokens.size()) > cfg_.rl.max_new_tokens ||
          static_cast<int64_t>(g.prompt.size() + s.tokens.size()) > cfg_.model.block_size) {
        return CorruptionError("a completion is empty or longer than rl.max_new_tokens / model.block_size allow");
      }
      for (int64_t t : s.tokens) {
        if (t < 0 || t >= cfg_.model.vocab_size) return CorruptionError("a token is outside the vocabulary");
      }
    }
    return Status::Ok();
  }

  // Rank 0's text to every rank; a size of -1 says rank 0 was cancelled.
  Status BroadcastText(std::string* text, bool* cancelled) {
    int64_t size = *cancelled ? -1 : static_cast<int64_t>(text->size());
    if (!env_.cuda) {
      HF_RETURN_IF_ERROR(comm_->Broadcast(&size, sizeof(size), 0).WithContext("GRPO batch size broadcast"));
      *cancelled = size < 0;
      if (*cancelled) return Status::Ok();
      text->resize(static_cast<size_t>(size));
      return comm_->Broadcast(text->data(), text->size(), 0).WithContext("GRPO batch broadcast");
    }
    // NCCL broadcasts device memory.
    auto dev_size = torch::tensor({size}, torch::kLong).to(env_.device);
    HF_RETURN_IF_ERROR(comm_->Broadcast(dev_size.data_ptr(), sizeof(size), 0).WithContext("GRPO batch size broadcast"));
    size = dev_size.to(torch::kCPU).item<int64_t>();
    *cancelled = size < 0;
    if (*cancelled) return Status::Ok();
    text->resize(static_cast<size_t>(size));
    auto bytes = torch::from_blob(text->data(), {size}, torch::kUInt8).to(env_.device);
    HF_RETURN_IF_ERROR(comm_->Broadcast(bytes.data_ptr(), static_cast<size_t>(size), 0).WithContext("GRPO batch broadcast"));
    auto host = bytes.to(torch::kCPU);
    std::memcpy(text->data(), host.data_ptr(), static_cast<size_t>(size));
    return Status::Ok();
  }

  // The step's groups as P x G sequences with their advantages.
  Status LayOut(const std::string& batch, int64_t step) {
    seqs_.clear();
    std::istringstream lines(batch);
    std::string line;
    int64_t groups = 0;
    while (std::getline(lines, line)) {
      HF_ASSIGN_OR_RETURN(RolloutGroup g, GroupFromJson(line, "GRPO step batch"));
      std::vector<double> rewards;
      for (const RolloutSample& s : g.samples) rewards.push_back(s.reward);
      const std::vector<double> adv = GroupAdvantages(rewards);
      for (size_t i = 0; i < g.samples.size(); ++i) {
        Sequence s;
        s.tokens = g.prompt;
        s.tokens.insert(s.tokens.end(), g.samples[i].tokens.begin(), g.samples[i].tokens.end());
        s.prompt_len = static_cast<int64_t>(g.prompt.size());
        s.behaviour = g.samples[i].logprobs;
        s.advantage = adv[i];
        s.reward = g.samples[i].reward;
        s.staleness = StepOfPrompt(g.q, cfg_.rl.prompts_per_step) - g.version;
        max_prompt_ = std::max<int64_t>(max_prompt_, s.prompt_len);
        seqs_.push_back(std::move(s));
      }
      ++groups;
    }
    if (groups != cfg_.rl.prompts_per_step) {
      return InternalError("GRPO step " + std::to_string(step) + " got " + std::to_string(groups) + " groups, not " +
                           std::to_string(cfg_.rl.prompts_per_step));
    }
    version_ = step;
    return Status::Ok();
  }

  ObjectiveEnv env_;
  const TrainerConfig& cfg_;
  Communicator* comm_;  // not owned
  Gpt policy_;
  Gpt reference_;
  std::unique_ptr<Task> task_;
  std::string task_text_;
  std::string dir_;
  ReplayBuffer buffer_;            // rank 0's
  std::string buffer_text_;        // backing store of the "objective.rl_buffer" view
  std::unique_ptr<WeightPublisher> publisher_;  // rank 0's
  int64_t published_ = -1;
  int64_t epoch_ = 0;
  int64_t version_ = 0;
  uint64_t cursor_ = 0;
  std::vector<Sequence> seqs_;     // the step's completions, in sample order
  int64_t max_prompt_ = 0;
  double sums_[5] = {0, 0, 0, 0, 0};
  int micro_ = 0;
  double step_wait_ms_ = 0;
};

}  // namespace

Result<std::unique_ptr<Objective>> MakeGrpoObjective(const ObjectiveEnv& env, Communicator* comm, Gpt policy,
                                                     Gpt reference) {
  const TrainerConfig& c = *env.config;
  auto spec = ParseTaskSpec(c.rl.task);
  if (!spec.ok()) return spec.status().WithContext("rl.task");
  HF_ASSIGN_OR_RETURN(std::unique_ptr<Task> task, Task::Create(*spec));
  const int64_t world = comm->world_size();
  const int64_t global = static_cast<int64_t>(c.train.micro_batch) * c.train.grad_accum * world;
  if (global != c.rl.prompts_per_step * c.rl.group_size) {
    return InvalidArgumentError("train.objective = \"grpo\" trains each step on rl.prompts_per_step x rl.group_size = " +
                                std::to_string(c.rl.prompts_per_step * c.rl.group_size) +
                                " completions, but train.micro_batch x train.grad_accum x ranks = " +
                                std::to_string(global) + ": make them equal");
  }
  reference->eval();
  for (auto& p : reference->parameters()) p.set_requires_grad(false);
  return std::unique_ptr<Objective>(
      new GrpoObjective(env, comm, std::move(policy), std::move(reference), std::move(task)));
}

}  // namespace holdfast::rl
