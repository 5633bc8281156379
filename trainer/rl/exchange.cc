#include "trainer/rl/exchange.h"

#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"

namespace holdfast::rl {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kGroupFormat = "holdfast-rollout-v1";
constexpr const char* kDemandFormat = "holdfast-rl-demand-v1";

Result<std::string> ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoError("open " + path, errno);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return IoError("read " + path + " failed");
  return text.str();
}

// Typed field access with messages that name the file and the field.
template <typename T>
Status Field(const json& j, const char* key, const std::string& source, T* out) {
  auto it = j.find(key);
  if (it == j.end()) return CorruptionError(source + ": field '" + key + "' is missing");
  try {
    *out = it->get<T>();
  } catch (const json::exception&) {
    return CorruptionError(source + ": field '" + key + "' has the wrong type (" + it->type_name() + ")");
  }
  return Status::Ok();
}

Result<json> ParseJson(const std::string& text, const std::string& source) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return CorruptionError(source + ": not a JSON object");
  return j;
}

}  // namespace

std::string ExchangeDir(const TrainerConfig& config) {
  fs::path p(config.rl.dir);
  if (p.is_relative()) p = fs::path(config.output.dir) / p;
  return p.lexically_normal().string();
}

std::string WeightsDir(const std::string& dir, int64_t version) {
  char name[32];
  std::snprintf(name, sizeof(name), "v%08" PRId64, version);
  return dir + "/weights/" + name;
}

std::string RolloutPath(const std::string& dir, uint64_t q) {
  char name[40];
  std::snprintf(name, sizeof(name), "q%010" PRIu64 ".json", q);
  return dir + "/rollouts/" + name;
}

std::string DemandPath(const std::string& dir) { return dir + "/demand.json"; }

std::string WorkerJournalPath(const std::string& dir, int worker) {
  return dir + "/workers/w" + std::to_string(worker) + ".jsonl";
}

Status PrepareExchange(const std::string& dir) {
  for (const char* sub : {"", "/weights", "/rollouts", "/workers"}) {
    std::error_code ec;
    fs::create_directories(dir + sub, ec);
    if (ec) return IoError("create " + dir + sub + ": " + ec.message());
  }
  return Status::Ok();
}

std::string GroupToJson(const RolloutGroup& g) {
  json samples = json::array();
  for (const RolloutSample& s : g.samples) {
    samples.push_back({{"tokens", s.tokens}, {"logprobs", s.logprobs}, {"reward", s.reward}, {"stopped", s.stopped}});
  }
  json j = {{"format", kGroupFormat}, {"q", g.q},           {"version", g.version},   {"worker", g.worker},
            {"task", g.task},         {"prompt", g.prompt}, {"samples", samples},    {"gen_ms", g.gen_ms},
            {"reward_ms", g.reward_ms}};
  return j.dump() + "\n";
}

Result<RolloutGroup> GroupFromJson(const std::string& text, const std::string& source) {
  HF_ASSIGN_OR_RETURN(json j, ParseJson(text, source));
  std::string format;
  HF_RETURN_IF_ERROR(Field(j, "format", source, &format));
  if (format != kGroupFormat) {
    return CorruptionError(source + ": format '" + format + "' is not " + kGroupFormat);
  }
  RolloutGroup g;
  HF_RETURN_IF_ERROR(Field(j, "q", source, &g.q));
  HF_RETURN_IF_ERROR(Field(j, "version", source, &g.version));
  HF_RETURN_IF_ERROR(Field(j, "worker", source, &g.worker));
  HF_RETURN_IF_ERROR(Field(j, "task", source, &g.task));
  HF_RETURN_IF_ERROR(Field(j, "prompt", source, &g.prompt));
  HF_RETURN_IF_ERROR(Field(j, "gen_ms", source, &g.gen_ms));
  HF_RETURN_IF_ERROR(Field(j, "reward_ms", source, &g.reward_ms));
  auto samples = j.find("samples");
  if (samples == j.end() || !samples->is_array() || samples->empty()) {
    return CorruptionError(source + ": field 'samples' must be a non-empty array");
  }
  if (g.prompt.empty()) return CorruptionError(source + ": field 'prompt' is empty");
  for (size_t i = 0; i < samples->size(); ++i) {
    const json& sj = (*samples)[i];
    const std::string where = source + ": samples[" + std::to_string(i) + "]";
    if (!sj.is_object()) return CorruptionError(where + " is not an object");
    RolloutSample s;
    HF_RETURN_IF_ERROR(Field(sj, "tokens", where, &s.tokens));
    HF_RETURN_IF_ERROR(Field(sj, "logprobs", where, &s.logprobs));
    HF_RETURN_IF_ERROR(Field(sj, "reward", where, &s.reward));
    HF_RETURN_IF_ERROR(Field(sj, "stopped", where, &s.stopped));
    if (s.tokens.size() != s.logprobs.size()) {
      return CorruptionError(where + ": " + std::to_string(s.tokens.size()) + " tokens but " +
                             std::to_string(s.logprobs.size()) + " logprobs");
    }
    for (float lp : s.logprobs) {
      if (!std::isfinite(lp) || lp > 0) return CorruptionError(where + ": a logprob is not finite and <= 0");
    }
    if (!std::isfinite(s.reward)) return CorruptionError(where + ": reward is not finite");
    g.samples.push_back(std::move(s));
  }
  return g;
}

Status WriteGroup(const std::string& dir, const RolloutGroup& group) {
  return WriteFileAtomically(RolloutPath(dir, group.q), GroupToJson(group));
}

Result<RolloutGroup> ReadGroup(const std::string& path) {
  HF_ASSIGN_OR_RETURN(std::string text, ReadWhole(path));
  return GroupFromJson(text, path);
}

Result<std::vector<uint64_t>> ListGroups(const std::string& dir) {
  std::vector<uint64_t> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir + "/rollouts", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    // qNNNNNNNNNN.json exactly: the atomic writer's NAME.tmp.PID files are skipped.
    if (name.size() != 16 || name[0] != 'q' || name.compare(11, 5, ".json") != 0) continue;
    uint64_t q = 0;
    bool digits = true;
    for (size_t i = 1; i < 11; ++i) {
      if (name[i] < '0' || name[i] > '9') digits = false;
      q = q * 10 + static_cast<uint64_t>(name[i] - '0');
    }
    if (digits) out.push_back(q);
  }
  if (ec) return IoError("list " + dir + "/rollouts: " + ec.message());
  // readdir may return an entry twice while the directory changes (renames in, unlinks out).
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string DemandToJson(const Demand& d) {
  json j = {{"format", kDemandFormat},
            {"version", d.version},
            {"upto", d.upto},
            {"consumed_below", d.consumed_below},
            {"buffered", std::vector<uint64_t>(d.buffered.begin(), d.buffered.end())},
            {"prompts_per_step", d.prompts_per_step},
            {"max_staleness", d.max_staleness},
            {"group_size", d.group_size},
            {"task", d.task},
            {"learner_epoch", d.learner_epoch}};
  return j.dump() + "\n";
}

Result<Demand> DemandFromJson(const std::string& text, const std::string& source) {
  HF_ASSIGN_OR_RETURN(json j, ParseJson(text, source));
  std::string format;
  HF_RETURN_IF_ERROR(Field(j, "format", source, &format));
  if (format != kDemandFormat) {
    return CorruptionError(source + ": format '" + format + "' is not " + kDemandFormat);
  }
  Demand d;
  std::vector<uint64_t> buffered;
  HF_RETURN_IF_ERROR(Field(j, "version", source, &d.version));
  HF_RETURN_IF_ERROR(Field(j, "upto", source, &d.upto));
  HF_RETURN_IF_ERROR(Field(j, "consumed_below", source, &d.consumed_below));
  HF_RETURN_IF_ERROR(Field(j, "buffered", source, &buffered));
  HF_RETURN_IF_ERROR(Field(j, "prompts_per_step", source, &d.prompts_per_step));
  HF_RETURN_IF_ERROR(Field(j, "max_staleness", source, &d.max_staleness));
  HF_RETURN_IF_ERROR(Field(j, "group_size", source, &d.group_size));
  HF_RETURN_IF_ERROR(Field(j, "task", source, &d.task));
  HF_RETURN_IF_ERROR(Field(j, "learner_epoch", source, &d.learner_epoch));
  if (d.prompts_per_step < 1 || d.group_size < 1 || d.max_staleness < 0) {
    return CorruptionError(source + ": prompts_per_step and group_size must be >= 1, max_staleness >= 0");
  }
  d.buffered.insert(buffered.begin(), buffered.end());
  return d;
}

Status WriteDemand(const std::string& dir, const Demand& demand) {
  return WriteFileAtomically(DemandPath(dir), DemandToJson(demand));
}

Result<Demand> ReadDemand(const std::string& dir) {
  HF_ASSIGN_OR_RETURN(std::string text, ReadWhole(DemandPath(dir)));
  return DemandFromJson(text, DemandPath(dir));
}

Result<int64_t> ReadLatestVersion(const std::string& dir) {
  const std::string path = dir + "/weights/LATEST";
  HF_ASSIGN_OR_RETURN(std::string text, ReadWhole(path));
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || v < 0 || (*end != '\n' && *end != '\0')) {
    return CorruptionError(path + ": expected a version number, got '" + text.substr(0, 40) + "'");
  }
  return static_cast<int64_t>(v);
}

Status CommitLatestVersion(const std::string& dir, int64_t version, int keep) {
  HF_RETURN_IF_ERROR(WriteFileAtomically(dir + "/weights/LATEST", std::to_string(version) + "\n"));
  std::error_code ec;
  for (fs::directory_iterator it(dir + "/weights", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() != 9 || name[0] != 'v') continue;
    const int64_t v = std::strtoll(name.c_str() + 1, nullptr, 10);
    if (v > version || v <= version - keep) {
      std::error_code rm;
      fs::remove_all(it->path(), rm);  // a worker still reading it retries with LATEST
    }
  }
  return Status::Ok();
}

std::vector<uint64_t> PlanWork(const Demand& demand, int worker, int workers, int64_t held_version,
                               const std::function<bool(uint64_t)>& exists, size_t limit) {
  std::vector<uint64_t> out;
  if (workers < 1 || worker < 0 || worker >= workers) return out;
  const uint64_t w = static_cast<uint64_t>(workers);
  uint64_t q = demand.consumed_below + (static_cast<uint64_t>(worker) + w - demand.consumed_below % w) % w;
  for (; q < demand.upto && out.size() < limit; q += w) {
    if (demand.buffered.count(q) != 0) continue;
    if (StepOfPrompt(q, demand.prompts_per_step) - held_version > demand.max_staleness) break;  // later ones too
    if (exists(q)) continue;
    out.push_back(q);
  }
  return out;
}

uint64_t GroupSeed(uint64_t run_seed, uint64_t q) {
  const uint64_t key[2] = {run_seed, q};
  return XXH3_64bits_withSeed(key, sizeof(key), 0x5eedULL);
}

}  // namespace holdfast::rl
