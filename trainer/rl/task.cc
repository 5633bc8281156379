#include "trainer/rl/task.h"

#include <xxhash.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/atomic_file.h"

namespace holdfast::rl {
namespace {

// Seeds of the task's hashes; part of the task's definition (changing one
// changes every split and prompt).
constexpr uint64_t kSplitSeed = 0x686f6c6466617374ULL;   // which tuples are held out
constexpr uint64_t kOrderSeed = 0x6576616c6f726465ULL;   // the order of the held-out list
constexpr uint64_t kTrainSeed = 0x747261696e696478ULL;   // train index -> tuple
constexpr uint64_t kRejectSeed = 0x72656a6563746564ULL;  // which wrong answer a pair gets
constexpr uint64_t kWrongSeed = 0x77726f6e676e756dULL;   // a reward pair's far-off wrong number
constexpr int kTrainAttempts = 64;
constexpr int64_t kMaxOperand = 999'999'999;

const TaskSpec kDefaultSpec{};

// xxHash64 (XXH3) of little-endian 64-bit words.
uint64_t HashWords(const int64_t* words, size_t n, uint64_t seed) {
  unsigned char bytes[8 * 4];
  for (size_t i = 0; i < n; ++i) {
    const uint64_t w = static_cast<uint64_t>(words[i]);
    for (int b = 0; b < 8; ++b) bytes[8 * i + b] = static_cast<unsigned char>(w >> (8 * b));
  }
  return XXH3_64bits_withSeed(bytes, 8 * n, seed);
}

// floor(h * n / 2^64): a hash spread over [0, n) without modulo bias.
uint64_t Scale(uint64_t h, uint64_t n) { return static_cast<uint64_t>((static_cast<unsigned __int128>(h) * n) >> 64); }

Result<int64_t> ParseInt(std::string_view text, const std::string& key, const std::string& where) {
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) {
    return InvalidArgumentError(where + ": " + key + "='" + std::string(text) + "' is not an integer");
  }
  return v;
}

bool ValidNumber(const std::string& s) { return !s.empty() && (s.size() == 1 || s[0] != '0'); }

}  // namespace

Result<Split> ParseSplit(std::string_view name) {
  if (name == "train") return Split::kTrain;
  if (name == "eval") return Split::kEval;
  return InvalidArgumentError("split '" + std::string(name) + "' is not one of: train, eval");
}

const char* SplitName(Split split) { return split == Split::kTrain ? "train" : "eval"; }

std::string TaskSpec::name() const { return "add" + std::to_string(operands); }

std::string TaskSpec::ToString() const {
  std::string keys;
  auto add = [&](const char* key, int64_t v) {
    keys += (keys.empty() ? "" : ",") + std::string(key) + "=" + std::to_string(v);
  };
  if (min_operand != kDefaultSpec.min_operand) add("min", min_operand);
  if (max_operand != kDefaultSpec.max_operand) add("max", max_operand);
  if (eval_percent != kDefaultSpec.eval_percent) add("eval_percent", eval_percent);
  return keys.empty() ? name() : name() + ":" + keys;
}

bool TaskSpec::operator==(const TaskSpec& o) const {
  return operands == o.operands && min_operand == o.min_operand && max_operand == o.max_operand &&
         eval_percent == o.eval_percent;
}

Result<TaskSpec> ParseTaskSpec(std::string_view text) {
  const std::string where = "task '" + std::string(text) + "'";
  const std::string accepted =
      " (expected add2 or add3, optionally followed by ':' and comma-separated keys min=N, max=N, "
      "eval_percent=N, e.g. add2:max=999)";
  TaskSpec spec;
  const size_t colon = text.find(':');
  const std::string_view name = text.substr(0, colon);
  if (name == "add2") {
    spec.operands = 2;
  } else if (name == "add3") {
    spec.operands = 3;
  } else {
    return InvalidArgumentError(where + ": unknown task name '" + std::string(name) + "'" + accepted);
  }
  bool seen_min = false, seen_max = false, seen_eval = false;
  if (colon != std::string_view::npos) {
    std::string_view rest = text.substr(colon + 1);
    if (rest.empty()) return InvalidArgumentError(where + ": nothing after ':'" + accepted);
    while (true) {
      const size_t comma = rest.find(',');
      const std::string_view item = rest.substr(0, comma);
      const size_t eq = item.find('=');
      if (eq == std::string_view::npos) {
        return InvalidArgumentError(where + ": '" + std::string(item) + "' is not key=value" + accepted);
      }
      const std::string key(item.substr(0, eq));
      HF_ASSIGN_OR_RETURN(int64_t v, ParseInt(item.substr(eq + 1), key, where));
      bool* seen = nullptr;
      if (key == "min") {
        seen = &seen_min;
        spec.min_operand = v;
      } else if (key == "max") {
        seen = &seen_max;
        spec.max_operand = v;
      } else if (key == "eval_percent") {
        seen = &seen_eval;
        if (v < 1 || v > 50) {
          return InvalidArgumentError(where + ": eval_percent=" + std::to_string(v) + " must be in 1..50");
        }
        spec.eval_percent = static_cast<int>(v);
      } else {
        return InvalidArgumentError(where + ": unknown key '" + key + "'" + accepted);
      }
      if (*seen) return InvalidArgumentError(where + ": key '" + key + "' given twice");
      *seen = true;
      if (comma == std::string_view::npos) break;
      rest = rest.substr(comma + 1);
    }
  }
  if (spec.min_operand < 0 || spec.max_operand > kMaxOperand || spec.min_operand > spec.max_operand) {
    return InvalidArgumentError(where + ": operands must satisfy 0 <= min <= max <= " + std::to_string(kMaxOperand) +
                                ", got min=" + std::to_string(spec.min_operand) +
                                " max=" + std::to_string(spec.max_operand));
  }
  return spec;
}

double ScoreCompletion(std::string_view answer, std::string_view completion) {
  const size_t nl = completion.find('\n');
  if (nl == std::string_view::npos) return 0.0;
  return completion.substr(0, nl) == answer ? 1.0 : 0.0;
}

Task::Task(const TaskSpec& spec) : spec_(spec) {}

Result<std::unique_ptr<Task>> Task::Create(const TaskSpec& spec) {
  // Re-validate: a spec may have been built by hand rather than parsed.
  auto reparsed = ParseTaskSpec(spec.ToString());
  if (!reparsed.ok()) return reparsed.status();
  if (spec.operands != 2 && spec.operands != 3) {
    return InvalidArgumentError("task: operands must be 2 or 3, got " + std::to_string(spec.operands));
  }
  if (spec.eval_percent < 1 || spec.eval_percent > 50) {
    return InvalidArgumentError("task: eval_percent must be in 1..50, got " + std::to_string(spec.eval_percent));
  }
  std::unique_ptr<Task> task(new Task(spec));
  task->range_ = static_cast<uint64_t>(spec.max_operand - spec.min_operand + 1);
  uint64_t count = 1;
  for (int i = 0; i < spec.operands; ++i) {
    if (count > kMaxTaskTuples / task->range_) {
      return InvalidArgumentError("task '" + spec.ToString() + "' has more than " + std::to_string(kMaxTaskTuples) +
                                  " operand tuples; narrow min..max");
    }
    count *= task->range_;
  }
  task->tuple_count_ = count;

  // The held-out list, ordered by a second hash so that any prefix of it is
  // a fair sample of the held-out tuples.
  std::vector<std::pair<uint64_t, uint32_t>> held;
  std::vector<int64_t> ops(static_cast<size_t>(spec.operands), spec.min_operand);
  for (uint64_t t = 0; t < count; ++t) {
    if (HashWords(ops.data(), ops.size(), kSplitSeed) % 100 < static_cast<uint64_t>(spec.eval_percent)) {
      held.emplace_back(HashWords(ops.data(), ops.size(), kOrderSeed), static_cast<uint32_t>(t));
    }
    // Next tuple: the last operand varies fastest (matches Decode).
    for (size_t i = ops.size(); i-- > 0;) {
      if (++ops[i] <= spec.max_operand) break;
      ops[i] = spec.min_operand;
    }
  }
  if (held.empty() || held.size() == count) {
    return InvalidArgumentError("task '" + spec.ToString() + "' has " + std::to_string(count) + " operand tuples and " +
                                std::to_string(held.size()) +
                                " of them held out: train and eval both need some; widen min..max");
  }
  std::sort(held.begin(), held.end());
  task->eval_tuples_.reserve(held.size());
  for (const auto& h : held) task->eval_tuples_.push_back(h.second);
  return task;
}

std::vector<int64_t> Task::Decode(uint64_t tuple) const {
  std::vector<int64_t> ops(static_cast<size_t>(spec_.operands));
  for (size_t i = ops.size(); i-- > 0;) {
    ops[i] = spec_.min_operand + static_cast<int64_t>(tuple % range_);
    tuple /= range_;
  }
  return ops;
}

bool Task::IsEval(const std::vector<int64_t>& operands) const {
  HF_CHECK(operands.size() == static_cast<size_t>(spec_.operands));
  return HashWords(operands.data(), operands.size(), kSplitSeed) % 100 < static_cast<uint64_t>(spec_.eval_percent);
}

bool Task::IsEvalTuple(uint64_t tuple) const { return IsEval(Decode(tuple)); }

TaskPrompt Task::Make(uint64_t index, Split split, uint64_t tuple) const {
  TaskPrompt p;
  p.index = index;
  p.split = split;
  p.operands = Decode(tuple);
  int64_t sum = 0;
  for (size_t i = 0; i < p.operands.size(); ++i) {
    if (i > 0) p.prompt += '+';
    p.prompt += std::to_string(p.operands[i]);
    sum += p.operands[i];
  }
  p.prompt += '=';
  p.answer = std::to_string(sum);
  return p;
}

TaskPrompt Task::Prompt(uint64_t index, Split split) const {
  if (split == Split::kEval) return Make(index, split, eval_tuples_[index % eval_tuples_.size()]);
  uint64_t tuple = 0;
  for (int64_t attempt = 0; attempt < kTrainAttempts; ++attempt) {
    const int64_t words[2] = {static_cast<int64_t>(index), attempt};
    tuple = Scale(HashWords(words, 2, kTrainSeed), tuple_count_);
    if (!IsEvalTuple(tuple)) return Make(index, split, tuple);
  }
  // Rare (eval_percent^64): the next train tuple after the last candidate.
  while (IsEvalTuple(tuple)) tuple = (tuple + 1) % tuple_count_;
  return Make(index, split, tuple);
}

std::string Task::RejectedResponse(const TaskPrompt& prompt) const {
  const int64_t s = std::stoll(prompt.answer);
  std::vector<std::string> wrong;
  auto add = [&](int64_t v) {
    if (v >= 0 && v != s) wrong.push_back(std::to_string(v));
  };
  add(s + 1);
  add(s - 1);
  add(s + 10);
  add(s - 10);
  const std::string& a = prompt.answer;
  for (size_t i : {a.size() >= 2 ? a.size() - 2 : a.size(), size_t{0}}) {
    if (i + 1 >= a.size() || a[i] == a[i + 1]) continue;
    std::string swapped = a;
    std::swap(swapped[i], swapped[i + 1]);
    if (ValidNumber(swapped) && std::find(wrong.begin(), wrong.end(), swapped) == wrong.end()) {
      wrong.push_back(swapped);
    }
  }
  const int64_t words[2] = {static_cast<int64_t>(prompt.index), static_cast<int64_t>(prompt.split)};
  return wrong[Scale(HashWords(words, 2, kRejectSeed), wrong.size())] + "\n";
}

std::string Task::RewardPairRejected(const TaskPrompt& prompt) const {
  switch (prompt.index % 6) {
    case 1:
      return prompt.answer;
    case 3:
      return "\n";
    case 5: {
      // A wrong number of any size a sum can have: 0 .. 2 x the largest sum.
      const int64_t words[2] = {static_cast<int64_t>(prompt.index), static_cast<int64_t>(prompt.split)};
      const uint64_t largest = static_cast<uint64_t>(spec_.max_operand) * static_cast<uint64_t>(spec_.operands);
      const std::string other = std::to_string(Scale(HashWords(words, 2, kWrongSeed), 2 * largest + 1));
      if (other != prompt.answer) return other + "\n";
      break;
    }
    default:
      break;
  }
  return RejectedResponse(prompt);
}

Result<EmitKind> ParseEmitKind(std::string_view name) {
  if (name == "sft") return EmitKind::kSft;
  if (name == "preference") return EmitKind::kPreference;
  if (name == "reward-pairs") return EmitKind::kRewardPairs;
  if (name == "eval") return EmitKind::kEval;
  return InvalidArgumentError("--emit '" + std::string(name) + "' is not one of: sft, preference, reward-pairs, eval");
}

Result<std::string> EmitText(const Task& task, EmitKind kind, uint64_t count) {
  if (count == 0) return InvalidArgumentError("--count must be at least 1");
  if (kind == EmitKind::kEval && count > task.EvalCount()) {
    return InvalidArgumentError("--count " + std::to_string(count) + " exceeds the " +
                                std::to_string(task.EvalCount()) + " held-out prompts of task '" +
                                task.spec().ToString() + "'; ask for at most that many");
  }
  const Split split = kind == EmitKind::kEval ? Split::kEval : Split::kTrain;
  std::string out;
  for (uint64_t i = 0; i < count; ++i) {
    const TaskPrompt p = task.Prompt(i, split);
    nlohmann::ordered_json line;
    line["prompt"] = p.prompt;
    if (kind == EmitKind::kPreference || kind == EmitKind::kRewardPairs) {
      line["chosen"] = p.response();
      line["rejected"] = kind == EmitKind::kRewardPairs ? task.RewardPairRejected(p) : task.RejectedResponse(p);
    } else {
      line["response"] = p.response();
    }
    line["index"] = i;
    line["split"] = SplitName(split);
    out += line.dump();
    out += '\n';
  }
  return out;
}

Status EmitFile(const Task& task, EmitKind kind, uint64_t count, const std::string& path) {
  HF_ASSIGN_OR_RETURN(std::string text, EmitText(task, kind, count));
  return WriteFileAtomically(path, text);
}

}  // namespace holdfast::rl
