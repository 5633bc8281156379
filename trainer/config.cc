#include "trainer/config.h"

#include <xxhash.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <sstream>
#include <variant>

#include <toml++/toml.h>

#include "common/toml_reader.h"

namespace holdfast {
namespace {

using Value = std::variant<int64_t, double, bool, std::string>;
enum class Kind { kInt, kFloat, kBool, kString };

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kInt: return "an integer";
    case Kind::kFloat: return "a number";
    case Kind::kBool: return "true or false";
    case Kind::kString: return "a string";
  }
  return "?";
}

// One row per key: the whole schema in one table, so that parsing, validation,
// printing and hashing can never disagree about which keys exist.
struct KeyDef {
  const char* section;
  const char* key;
  Kind kind;
  double lo;            // inclusive range for numbers
  double hi;
  const char* choices;  // "a|b|c" for strings with a fixed set, else nullptr
  // Part of ConfigHash: 0 = no, 1 = yes, 2 = only when set away from its
  // default (keys added after checkpoints existed, so those stay resumable).
  int affects_math;
  std::function<void(TrainerConfig&, const Value&)> set;
  std::function<Value(const TrainerConfig&)> get;
};

constexpr double kInf = std::numeric_limits<double>::infinity();

// One of the schema's choices (validated before this is called).
InFlightPolicy ParseInFlightPolicy(const std::string& s) { return s == "skip" ? InFlightPolicy::kSkip : InFlightPolicy::kWait; }

#define HF_INT(sec, field, lo, hi, math)                                                      \
  KeyDef{#sec, #field, Kind::kInt, lo, hi, nullptr, math,                                     \
         [](TrainerConfig& c, const Value& v) {                                               \
           c.sec.field = static_cast<decltype(c.sec.field)>(std::get<int64_t>(v));           \
         },                                                                                   \
         [](const TrainerConfig& c) -> Value { return static_cast<int64_t>(c.sec.field); }}
#define HF_FLOAT(sec, field, lo, hi, math)                                                    \
  KeyDef{#sec, #field, Kind::kFloat, lo, hi, nullptr, math,                                   \
         [](TrainerConfig& c, const Value& v) { c.sec.field = std::get<double>(v); },         \
         [](const TrainerConfig& c) -> Value { return c.sec.field; }}
#define HF_BOOL(sec, field, math)                                                             \
  KeyDef{#sec, #field, Kind::kBool, 0, 0, nullptr, math,                                      \
         [](TrainerConfig& c, const Value& v) { c.sec.field = std::get<bool>(v); },           \
         [](const TrainerConfig& c) -> Value { return c.sec.field; }}
// A key with a fixed set of choices read into an enum: `parse` maps a valid
// choice to its value, `name` back (what prints and what the hash sees).
#define HF_ENUM(sec, field, choices, math, parse, name)                                      \
  KeyDef{#sec, #field, Kind::kString, 0, 0, choices, math,                                    \
         [](TrainerConfig& c, const Value& v) { c.sec.field = parse(std::get<std::string>(v)); }, \
         [](const TrainerConfig& c) -> Value { return std::string(name(c.sec.field)); }}
// A key of section `sec` stored at c.path (the [moe] section lives in the model config).
#define HF_INT_AT(sec, field, path, lo, hi, math)                                             \
  KeyDef{sec, #field, Kind::kInt, lo, hi, nullptr, math,                                      \
         [](TrainerConfig& c, const Value& v) {                                               \
           c.path = static_cast<decltype(c.path)>(std::get<int64_t>(v));                     \
         },                                                                                   \
         [](const TrainerConfig& c) -> Value { return static_cast<int64_t>(c.path); }}
#define HF_FLOAT_AT(sec, field, path, lo, hi, math)                                           \
  KeyDef{sec, #field, Kind::kFloat, lo, hi, nullptr, math,                                    \
         [](TrainerConfig& c, const Value& v) { c.path = std::get<double>(v); },              \
         [](const TrainerConfig& c) -> Value { return c.path; }}
#define HF_STRING(sec, field, choices, math)                                                  \
  KeyDef{#sec, #field, Kind::kString, 0, 0, choices, math,                                    \
         [](TrainerConfig& c, const Value& v) { c.sec.field = std::get<std::string>(v); },    \
         [](const TrainerConfig& c) -> Value { return c.sec.field; }}

const std::vector<KeyDef>& Schema() {
  static const std::vector<KeyDef> kSchema = {
      HF_INT(model, n_layer, 1, 1024, true),
      HF_INT(model, n_head, 1, 1024, true),
      HF_INT(model, n_embd, 1, 65536, true),
      HF_INT(model, block_size, 1, 1 << 20, true),
      HF_INT(model, vocab_size, 2, 1 << 20, true),
      HF_FLOAT(model, dropout, 0.0, 0.999, true),
      HF_BOOL(model, bias, true),
      HF_BOOL(model, reward_head, 2),
      HF_INT_AT("moe", experts, model.moe.experts, 0, 4096, 2),
      HF_INT_AT("moe", top_k, model.moe.top_k, 1, 4096, 2),
      HF_FLOAT_AT("moe", capacity_factor, model.moe.capacity_factor, 1e-6, 1e6, 2),
      HF_FLOAT_AT("moe", aux_loss_coef, model.moe.aux_loss_coef, 0.0, 1e6, 2),
      HF_STRING(data, format, "text|bin|sft|preference", true),
      HF_STRING(data, path, nullptr, false),
      HF_INT(train, steps, 1, 1e15, true),
      HF_INT(train, micro_batch, 1, 1 << 20, true),
      HF_INT(train, grad_accum, 1, 1 << 20, true),
      HF_INT(train, seed, 0, 9.2e18, true),
      HF_INT(train, threads, 1, 1024, false),  // checked by the determinism fingerprint
      HF_INT(train, log_every, 1, 1e15, false),
      HF_STRING(train, device, "auto|cpu|cuda", false),  // checked by the determinism fingerprint
      HF_STRING(train, precision, "fp32|bf16", 2),
      HF_STRING(train, objective, "lm|dpo|grpo|reward", 2),
      HF_STRING(train, init_from, nullptr, 2),
      HF_FLOAT(optim, lr, 0.0, 10.0, true),
      HF_FLOAT(optim, min_lr, 0.0, 10.0, true),
      HF_INT(optim, warmup_steps, 0, 1e15, true),
      HF_INT(optim, decay_steps, 0, 1e15, true),
      HF_FLOAT(optim, weight_decay, 0.0, 10.0, true),
      HF_FLOAT(optim, beta1, 0.0, 0.999999, true),
      HF_FLOAT(optim, beta2, 0.0, 0.999999, true),
      HF_FLOAT(optim, eps, 1e-30, 1.0, true),
      HF_FLOAT(optim, grad_clip, 0.0, kInf, true),
      HF_STRING(dist, backend, "gloo|nccl", false),
      HF_FLOAT(dist, bucket_mb, 0.001, 4096.0, false),
      HF_BOOL(dist, overlap, false),
      HF_INT(dist, zero_stage, 0, 1, false),
      HF_INT(dist, tensor_parallel, 1, 1024, false),  // a layout, as the world size (checked on resume)
      HF_INT(dist, pipeline_parallel, 1, 1024, false),
      HF_BOOL(dist, sequence_parallel, false),
      HF_INT(dist, expert_parallel, 1, 1024, false),
      HF_STRING(dist, host, nullptr, false),
      HF_INT(dist, timeout_s, 1, 86400 * 7, false),
      HF_STRING(checkpoint, dir, nullptr, false),
      HF_INT(checkpoint, every_steps, 0, 1e15, false),
      HF_INT(checkpoint, keep_last, 1, 1e9, false),
      HF_INT(checkpoint, keep_every, 0, 1e15, false),
      HF_ENUM(checkpoint, policy, "wait|skip", false, ParseInFlightPolicy, InFlightPolicyName),
      HF_INT(checkpoint, commit_timeout_s, 1, 86400, false),
      HF_STRING(output, dir, nullptr, false),
      HF_STRING(output, metrics, nullptr, false),
      HF_FLOAT(dpo, beta, 1e-6, 1e6, 2),
      HF_STRING(dpo, reference, nullptr, 2),
      HF_INT(eval, every_steps, 0, 1e15, false),
      HF_FLOAT(eval, holdout, 0.0, 1e15, 2),  // which samples train: math
      HF_INT(eval, samples, 0, 1e15, false),
      HF_STRING(rl, dir, nullptr, false),
      HF_STRING(rl, task, nullptr, 2),
      HF_INT(rl, prompts_per_step, 1, 1 << 20, 2),
      HF_INT(rl, group_size, 2, 1 << 16, 2),
      HF_INT(rl, max_new_tokens, 1, 1 << 16, 2),
      HF_FLOAT(rl, temperature, 1e-3, 100.0, 2),
      HF_INT(rl, max_staleness, 0, 1 << 20, 2),
      HF_FLOAT(rl, clip_eps, 0.0, 10.0, 2),
      HF_FLOAT(rl, kl_beta, 0.0, 1e6, 2),
      HF_INT(rl, eval_prompts, 0, 1 << 24, false),
      HF_FLOAT(rl, wait_timeout_s, 0.001, 86400 * 7, false),
      HF_INT(rl, keep_versions, 2, 1 << 20, false),
      HF_BOOL(rl, ledger, false),
      HF_STRING(rl, weights_transport, "network|files", 0),
  };
  return kSchema;
}

#undef HF_INT
#undef HF_FLOAT
#undef HF_BOOL
#undef HF_STRING
#undef HF_ENUM

std::string KnownKeys(const std::string& section) {
  std::string out;
  for (const KeyDef& d : Schema()) {
    if (section != d.section) continue;
    if (!out.empty()) out += ", ";
    out += d.key;
  }
  return out;
}

std::string KnownSections() {
  std::string out;
  std::string last;
  for (const KeyDef& d : Schema()) {
    if (last == d.section) continue;
    last = d.section;
    if (!out.empty()) out += ", ";
    out += "[" + last + "]";
  }
  return out;
}

const KeyDef* FindKey(const std::string& section, const std::string& key) {
  for (const KeyDef& d : Schema()) {
    if (section == d.section && key == d.key) return &d;
  }
  return nullptr;
}

bool SectionExists(const std::string& section) {
  for (const KeyDef& d : Schema()) {
    if (section == d.section) return true;
  }
  return false;
}

std::string FormatNumber(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

// Converts a TOML node to the key's type and checks its range; `where` prefixes errors.
Result<Value> Convert(const KeyDef& d, const toml::node& node, const std::string& where) {
  const std::string name = std::string(d.section) + "." + d.key;
  switch (d.kind) {
    case Kind::kInt: {
      HF_ASSIGN_OR_RETURN(int64_t x,
                          ReadTomlInt(node, where, name, static_cast<int64_t>(d.lo), static_cast<int64_t>(d.hi)));
      return Value(x);
    }
    case Kind::kFloat: {
      HF_ASSIGN_OR_RETURN(double x, ReadTomlDouble(node, where, name, d.lo, d.hi));
      return Value(x);
    }
    case Kind::kBool: {
      HF_ASSIGN_OR_RETURN(bool x, ReadTomlBool(node, where, name));
      return Value(x);
    }
    case Kind::kString: {
      HF_ASSIGN_OR_RETURN(std::string x, ReadTomlString(node, where, name, d.choices));
      return Value(std::move(x));
    }
  }
  return InvalidArgumentError(where + ": key '" + name + "' has no type");  // unreachable: every Kind is handled
}

Status ApplyTable(const toml::table& root, const std::string& file, TrainerConfig* config) {
  for (auto&& [section_key, section_node] : root) {
    const std::string section(section_key.str());
    const std::string where = TomlWhere(file, section_key.source());
    if (!SectionExists(section)) {
      return InvalidArgumentError(where + ": unknown section '" + section + "' (known sections: " + KnownSections() +
                                  ")");
    }
    const toml::table* table = section_node.as_table();
    if (table == nullptr) {
      return InvalidArgumentError(where + ": '" + section + "' must be a table ([" + section + "])");
    }
    for (auto&& [key, node] : *table) {
      const std::string k(key.str());
      const std::string key_where = TomlWhere(file, key.source());
      const KeyDef* d = FindKey(section, k);
      if (d == nullptr) {
        return InvalidArgumentError(key_where + ": unknown key '" + section + "." + k + "' (known keys in [" +
                                    section + "]: " + KnownKeys(section) + ")");
      }
      HF_ASSIGN_OR_RETURN(Value v, Convert(*d, node, key_where));
      const bool is_path = (section == "data" && k == "path") || (section == "train" && k == "init_from") ||
                           (section == "dpo" && k == "reference");
      if (is_path && !file.empty() && !std::get<std::string>(v).empty()) {
        // A relative data or weights path means "next to the config file".
        std::filesystem::path p(std::get<std::string>(v));
        if (p.is_relative()) v = (std::filesystem::path(file).parent_path() / p).lexically_normal().string();
      }
      d->set(*config, v);
    }
  }
  return Status::Ok();
}

// Whether s is well-formed UTF-8 (no overlong forms, surrogates or code points
// past U+10FFFF): what a TOML string may hold.
bool IsUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t cp = 0;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (s.size() - i < len) return false;
    for (size_t k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMinOfLength[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMinOfLength[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

Status ApplyOverride(const std::string& text, TrainerConfig* config) {
  const std::string where = "flag --set '" + text + "'";
  const size_t eq = text.find('=');
  const size_t dot = text.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq) {
    return InvalidArgumentError(where + ": expected section.key=value, e.g. --set optim.lr=3e-4");
  }
  const std::string section = text.substr(0, dot);
  const std::string key = text.substr(dot + 1, eq - dot - 1);
  const std::string value = text.substr(eq + 1);
  if (!SectionExists(section)) {
    return InvalidArgumentError(where + ": unknown section '" + section + "' (known sections: " + KnownSections() +
                                ")");
  }
  const KeyDef* d = FindKey(section, key);
  if (d == nullptr) {
    return InvalidArgumentError(where + ": unknown key '" + section + "." + key + "' (known keys in [" + section +
                                "]: " + KnownKeys(section) + ")");
  }
  // The value is TOML (3e-4, true, "x"); a bare word for a string key is taken as the string.
  toml::table parsed;
  bool parsed_ok = false;
  try {
    parsed = toml::parse("v = " + value);
    parsed_ok = true;
  } catch (const toml::parse_error&) {
  }
  if (!parsed_ok) {
    if (d->kind != Kind::kString) {
      return InvalidArgumentError(where + ": key '" + section + "." + key + "' must be " + KindName(d->kind));
    }
    // Taken as it is, so it must be what a config file could hold (ConfigToToml prints it).
    if (!IsUtf8(value)) {
      return InvalidArgumentError(where + ": key '" + section + "." + key +
                                  "' must be UTF-8 text, as in a TOML file");
    }
    parsed = toml::table{{"v", value}};
  }
  HF_ASSIGN_OR_RETURN(Value v, Convert(*d, *parsed.get("v"), where));
  d->set(*config, v);
  return Status::Ok();
}

std::string ValueToToml(const Value& v) {
  if (std::holds_alternative<int64_t>(v)) return std::to_string(std::get<int64_t>(v));
  if (std::holds_alternative<double>(v)) {
    double x = std::get<double>(v);
    if (std::isinf(x)) return "inf";
    std::string s = FormatNumber(x);
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
  }
  if (std::holds_alternative<bool>(v)) return std::get<bool>(v) ? "true" : "false";
  std::ostringstream os;
  os << toml::value<std::string>(std::get<std::string>(v));
  return os.str();
}

}  // namespace

Result<TrainerConfig> LoadTrainerConfig(const std::string& path, const std::vector<std::string>& overrides) {
  TrainerConfig config;
  config.source = path;
  if (!path.empty()) {
    HF_ASSIGN_OR_RETURN(toml::table root, ParseTomlFile(path));
    HF_RETURN_IF_ERROR(ApplyTable(root, path, &config));
  }
  for (const std::string& o : overrides) HF_RETURN_IF_ERROR(ApplyOverride(o, &config));
  HF_RETURN_IF_ERROR(ValidateTrainerConfig(config));
  return config;
}

namespace {

// What tensor and pipeline parallelism need of the model today
// (docs/parallelism.md, "Not built yet"): heads and the MLP's hidden
// dimension split evenly, at least a block per stage, no dropout with
// pipeline stages (tensor parallelism's is layout-independent), the lm
// objective in float32 on the CPU.
Status ValidateModelParallel(const TrainerConfig& c, const std::string& where) {
  const int tp = c.dist.tensor_parallel, pp = c.dist.pipeline_parallel;
  if (c.dist.sequence_parallel && tp == 1) {
    return InvalidArgumentError(where + ": dist.sequence_parallel splits the sequence over the tensor-parallel group, "
                                "and dist.tensor_parallel is 1: set dist.tensor_parallel > 1 or "
                                "dist.sequence_parallel = false");
  }
  if (c.dist.sequence_parallel && c.model.block_size % tp != 0) {
    return InvalidArgumentError(where + ": dist.sequence_parallel over dist.tensor_parallel = " + std::to_string(tp) +
                                " ranks needs model.block_size (" + std::to_string(c.model.block_size) +
                                ") to be a multiple of it");
  }
  if (tp == 1 && pp == 1) return Status::Ok();
  std::string head = where + ": ";
  if (tp > 1) head += "dist.tensor_parallel = " + std::to_string(tp);
  if (tp > 1 && pp > 1) head += ", ";
  if (pp > 1) head += "dist.pipeline_parallel = " + std::to_string(pp);
  const std::string unset = tp > 1 && pp > 1 ? "set both to 1" : pp > 1 ? "set dist.pipeline_parallel = 1"
                                                                        : "set dist.tensor_parallel = 1";
  if (c.model.n_head % tp != 0 || (4 * c.model.n_embd) % tp != 0) {
    return InvalidArgumentError(head + " splits attention by heads and the MLP by its hidden size: model.n_head (" +
                                std::to_string(c.model.n_head) + ") and 4 x model.n_embd must be multiples of it; "
                                "set dist.tensor_parallel to a divisor of n_head");
  }
  if (c.model.n_layer < pp) {
    return InvalidArgumentError(head + " cuts the model's blocks into stages: model.n_layer (" +
                                std::to_string(c.model.n_layer) + ") must be at least dist.pipeline_parallel; "
                                "use at most " + std::to_string(c.model.n_layer) + " stages");
  }
  if (c.model.dropout > 0 && pp > 1) {
    // Tensor and sequence parallelism draw the whole tensors' noise
    // (trainer/tensor_parallel.h); a stage would draw only its blocks'.
    return InvalidArgumentError("dist.pipeline_parallel = " + std::to_string(pp) + " needs model.dropout = 0 for "
                                "now (got " + std::to_string(c.model.dropout) + "): each stage would draw only its own "
                                "blocks' dropout masks, so the run would depend on the layout; set model.dropout = 0");
  }
  if (c.train.objective != "lm") {
    return InvalidArgumentError(head + ": only train.objective = \"lm\" runs model parallel so far (got \"" +
                                c.train.objective + "\"); " + unset);
  }
  if (c.train.precision != "fp32" || c.train.device == "cuda" || c.dist.backend == "nccl") {
    return InvalidArgumentError(head + " runs on the CPU in float32 for now (Gloo): set train.device = \"cpu\", "
                                "train.precision = \"fp32\", dist.backend = \"gloo\"");
  }
  return Status::Ok();
}

// The [moe] section and dist.expert_parallel (docs/parallelism.md): what
// the MoE layer needs, and what is not built yet (experts under tensor or
// pipeline parallelism, dropout, the sequence objectives, bf16 across an
// expert group, GPUs for expert parallelism).
Status ValidateMoe(const TrainerConfig& c, const std::string& where) {
  const MoeConfig& m = c.model.moe;
  const int ep = c.dist.expert_parallel;
  if (m.experts == 0) {
    if (ep > 1) {
      return InvalidArgumentError(where + ": dist.expert_parallel = " + std::to_string(ep) + " spreads the experts of "
                                  "a mixture-of-experts model, and moe.experts is 0 (a dense MLP): set moe.experts "
                                  "(a multiple of " + std::to_string(ep) + ") or dist.expert_parallel = 1");
    }
    return Status::Ok();
  }
  const std::string head = where + ": moe.experts = " + std::to_string(m.experts);
  if (m.top_k > m.experts) {
    return InvalidArgumentError(where + ": moe.top_k = " + std::to_string(m.top_k) + " must be between 1 and "
                                "moe.experts (" + std::to_string(m.experts) + ")");
  }
  if (m.experts % ep != 0) {
    return InvalidArgumentError(head + " does not spread over dist.expert_parallel = " + std::to_string(ep) +
                                " ranks: use a multiple of it");
  }
  if (c.dist.tensor_parallel > 1 || c.dist.pipeline_parallel > 1) {
    return InvalidArgumentError(head + ": mixture-of-experts blocks run data and expert parallel only for now: set "
                                "dist.tensor_parallel = 1 and dist.pipeline_parallel = 1");
  }
  if (c.model.dropout > 0) {
    return InvalidArgumentError(head + ": the MoE layer has no dropout yet: set model.dropout = 0");
  }
  if (c.train.objective != "lm") {
    return InvalidArgumentError(head + ": only train.objective = \"lm\" trains a mixture-of-experts model so far "
                                "(got \"" + c.train.objective + "\"); set moe.experts = 0");
  }
  if (ep > 1 && (c.train.precision != "fp32" || c.train.device == "cuda" || c.dist.backend == "nccl")) {
    return InvalidArgumentError(where + ": dist.expert_parallel = " + std::to_string(ep) + " runs on the CPU in "
                                "float32 for now (Gloo): set train.device = \"cpu\", train.precision = \"fp32\", "
                                "dist.backend = \"gloo\"");
  }
  return Status::Ok();
}

}  // namespace

Status ValidateTrainerConfig(const TrainerConfig& c) {
  const std::string where = c.source.empty() ? "config" : c.source;
  if (c.model.n_embd % c.model.n_head != 0) {
    return InvalidArgumentError(where + ": model.n_embd (" + std::to_string(c.model.n_embd) +
                                ") must be divisible by model.n_head (" + std::to_string(c.model.n_head) + ")");
  }
  if (c.optim.min_lr > c.optim.lr) {
    return InvalidArgumentError(where + ": optim.min_lr (" + FormatNumber(c.optim.min_lr) +
                                ") must not exceed optim.lr (" + FormatNumber(c.optim.lr) + ")");
  }
  const bool grpo = c.train.objective == "grpo";
  if (grpo) {
    // The learner's samples come from the rollout workers (docs/rl.md), its
    // held-out prompts from the task: no data file.
    if (!c.data.path.empty()) {
      return InvalidArgumentError(where + ": train.objective = \"grpo\" trains on the rollout workers' groups of "
                                  "rl.task's prompts, not on a data file: remove data.path (got \"" + c.data.path +
                                  "\")");
    }
    if (c.model.vocab_size != 256) {
      return InvalidArgumentError(where + ": train.objective = \"grpo\": the task's prompts are bytes: set "
                                  "model.vocab_size = 256 (got " + std::to_string(c.model.vocab_size) + ")");
    }
    if (c.eval.holdout != 0) {
      return InvalidArgumentError(where + ": train.objective = \"grpo\" evaluates on the task's held-out prompts "
                                  "(rl.eval_prompts): remove eval.holdout");
    }
  }
  if (!grpo && c.data.path.empty()) {
    return InvalidArgumentError(where + ": data.path is required: a text file, a uint16 .bin file or a JSONL "
                                "file (set data.format accordingly)");
  }
  if (c.dist.backend == "nccl" && c.train.device == "cpu") {
    return InvalidArgumentError(where + ": dist.backend = \"nccl\" reduces GPU memory, but train.device = \"cpu\": "
                                "set train.device = \"cuda\" (or \"auto\") to train on GPUs, or dist.backend = "
                                "\"gloo\" to train on CPUs");
  }
  HF_RETURN_IF_ERROR(ValidateModelParallel(c, where));
  HF_RETURN_IF_ERROR(ValidateMoe(c, where));
  const bool preference = c.data.format == "preference";
  const bool pairs = c.train.objective == "dpo" || c.train.objective == "reward";
  if (pairs && !preference) {
    return InvalidArgumentError(where + ": train.objective = \"" + c.train.objective +
                                "\" trains on preference pairs: set data.format = "
                                "\"preference\" (JSONL {\"prompt\", \"chosen\", \"rejected\"}; got \"" +
                                c.data.format + "\")");
  }
  if (preference && !pairs) {
    return InvalidArgumentError(where + ": data.format = \"preference\" holds preference pairs, which only "
                                "train.objective = \"dpo\" or \"reward\" can use (got \"" + c.train.objective + "\")");
  }
  if ((c.train.objective == "reward") != c.model.reward_head) {
    return InvalidArgumentError(
        where + (c.model.reward_head
                     ? ": model.reward_head is a reward model's scalar head, which only train.objective = \"reward\" "
                       "trains (got \"" + c.train.objective + "\"): remove model.reward_head"
                     : ": train.objective = \"reward\" trains a reward model's scalar head: set model.reward_head = "
                       "true"));
  }
  if (c.eval.holdout >= 1 && c.eval.holdout != std::floor(c.eval.holdout)) {
    return InvalidArgumentError(where + ": eval.holdout = " + FormatNumber(c.eval.holdout) +
                                " is neither a fraction below 1 nor a whole count: write e.g. 0.1 (10% held out) "
                                "or 200 (200 samples held out)");
  }
  if (c.eval.every_steps > 0 && c.eval.holdout == 0 && !grpo) {
    return InvalidArgumentError(where + ": eval.every_steps = " + std::to_string(c.eval.every_steps) +
                                " needs held-out data to evaluate on: set eval.holdout (a fraction such as 0.1, "
                                "or a count), or eval.every_steps = 0");
  }
  if (c.data.format == "text" || c.data.format == "sft" || preference) {
    if (c.model.vocab_size != 256) {
      return InvalidArgumentError(where + ": data.format = \"" + c.data.format +
                                  "\" is byte-level: set model.vocab_size = 256 (got " +
                                  std::to_string(c.model.vocab_size) + ")");
    }
  }
  return Status::Ok();
}

uint64_t ConfigHash(const TrainerConfig& c) {
  std::string canon;
  static const TrainerConfig kDefaults;
  for (const KeyDef& d : Schema()) {
    if (d.affects_math == 0) continue;
    if (d.affects_math == 2 && ValueToToml(d.get(c)) == ValueToToml(d.get(kDefaults))) continue;
    canon += std::string(d.section) + "." + d.key + "=" + ValueToToml(d.get(c)) + "\n";
  }
  return XXH3_64bits(canon.data(), canon.size());
}

std::string ConfigToToml(const TrainerConfig& c) {
  std::string out;
  std::string last;
  for (const KeyDef& d : Schema()) {
    if (last != d.section) {
      if (!out.empty()) out += "\n";
      out += "[" + std::string(d.section) + "]\n";
      last = d.section;
    }
    out += std::string(d.key) + " = " + ValueToToml(d.get(c)) + "\n";
  }
  return out;
}

std::string ReferenceWeights(const TrainerConfig& c) {
  return c.dpo.reference.empty() ? c.train.init_from : c.dpo.reference;
}

std::string CheckpointRoot(const TrainerConfig& c) {
  if (c.checkpoint.dir.empty()) return "";
  std::filesystem::path p(c.checkpoint.dir);
  if (p.is_relative()) p = std::filesystem::path(c.output.dir) / p;
  return p.lexically_normal().string();
}

double LearningRateAt(const OptimConfig& o, int64_t total_steps, int64_t step) {
  if (step < o.warmup_steps) {
    return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  }
  const int64_t decay = o.decay_steps > 0 ? o.decay_steps : total_steps;
  double p = static_cast<double>(step - o.warmup_steps) /
             static_cast<double>(std::max<int64_t>(1, decay - o.warmup_steps));
  p = std::min(1.0, std::max(0.0, p));
  return o.min_lr + 0.5 * (1.0 + std::cos(M_PI * p)) * (o.lr - o.min_lr);
}

}  // namespace holdfast
