// The verifiable task of RL training: small sums whose answer a program can
// check (docs/rl-reward.md). A TaskSpec names the task ("add2": a+b, "add3":
// a+b+c) and its operand range; a Task built from it maps a prompt index and a
// split to a prompt ("23+58=") and its answer ("81"), and scores completions:
// 1.0 when the completion is exactly the answer followed by '\n' (whatever
// follows that first newline is ignored), else 0.0.
//
// Train and eval (held-out) prompts come from disjoint sets of operand
// tuples: a tuple is held out when an xxHash of its operands falls in the
// eval share (eval_percent), so the split is a property of the tuple, the
// same in every process and on every machine. Train index i maps
// pseudo-randomly (xxHash of i, never std::hash or <random>, whose results
// differ by library) onto the train tuples; eval index j is the j-th held-out
// tuple in a fixed pseudo-random order (j modulo EvalCount()). Prompts,
// answers, rewards and the emitted data files are pure functions of the spec
// and the index.
//
// Thread-safety: TaskSpec is plain data; a Task is immutable after Create and
// may be used from any number of threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace holdfast::rl {

enum class Split { kTrain, kEval };

// "train" | "eval"; the error lists both.
Result<Split> ParseSplit(std::string_view name);
const char* SplitName(Split split);

// What a task is. Spelled as a short string (ParseTaskSpec):
//   "add2"                                 a+b, operands 0..99, 10% of pairs held out
//   "add3:max=9"                           a+b+c, operands 0..9
//   "add2:min=10,max=999,eval_percent=5"   every key optional, each at most once
struct TaskSpec {
  int operands = 2;         // 2 (add2) or 3 (add3)
  int64_t min_operand = 0;  // 0 <= min_operand <= max_operand <= 999'999'999
  int64_t max_operand = 99;
  int eval_percent = 10;  // 1..50: share of operand tuples held out for eval

  std::string name() const;  // "add2" | "add3"
  // The canonical spelling: the name, then ":key=value,..." for every key
  // that differs from its default, in the order min, max, eval_percent.
  // Parse(ToString()) == *this; the reward service matches tasks by it.
  std::string ToString() const;
  bool operator==(const TaskSpec& other) const;
  bool operator!=(const TaskSpec& other) const { return !(*this == other); }
};

// Parses the spelling above. Errors (kInvalidArgument) quote the text, name
// the bad part and list what is accepted.
Result<TaskSpec> ParseTaskSpec(std::string_view text);

// At most this many operand tuples ((max-min+1)^operands): the held-out list
// is built at Create.
inline constexpr uint64_t kMaxTaskTuples = uint64_t{1} << 24;

struct TaskPrompt {
  uint64_t index = 0;  // as asked (eval: before the modulo)
  Split split = Split::kTrain;
  std::vector<int64_t> operands;
  std::string prompt;                                     // "23+58="
  std::string answer;                                     // "81" (no newline)
  std::string response() const { return answer + "\n"; }  // the completion that earns 1.0
};

// 1.0 when `completion` up to its first '\n' equals `answer` and that '\n'
// exists; 0.0 otherwise (no newline, leading or trailing spaces, a sign or
// leading zero, another number). Bytes after the first '\n' are ignored.
double ScoreCompletion(std::string_view answer, std::string_view completion);

class Task {
 public:
  // Validates the spec (the tuple count, that both splits are non-empty) and
  // builds the held-out list.
  static Result<std::unique_ptr<Task>> Create(const TaskSpec& spec);

  const TaskSpec& spec() const { return spec_; }
  uint64_t TupleCount() const { return tuple_count_; }
  // Held-out tuples; Prompt(j, kEval) for j >= EvalCount() wraps around.
  uint64_t EvalCount() const { return eval_tuples_.size(); }
  uint64_t TrainCount() const { return tuple_count_ - eval_tuples_.size(); }

  TaskPrompt Prompt(uint64_t index, Split split) const;
  // Whether an operand tuple (operands() values, each in range) is held out.
  bool IsEval(const std::vector<int64_t>& operands) const;

  double Reward(const TaskPrompt& prompt, std::string_view completion) const {
    return ScoreCompletion(prompt.answer, completion);
  }
  // A plausible wrong response for preference data ("80\n", "91\n", "18\n"
  // for 81): off by one, off by ten, or two digits swapped, chosen by the
  // prompt's index; never the answer, never negative.
  std::string RejectedResponse(const TaskPrompt& prompt) const;
  // kRewardPairs' rejected response for train prompt `prompt` (EmitText).
  std::string RewardPairRejected(const TaskPrompt& prompt) const;

 private:
  explicit Task(const TaskSpec& spec);
  std::vector<int64_t> Decode(uint64_t tuple) const;  // tuple number -> operands
  bool IsEvalTuple(uint64_t tuple) const;
  TaskPrompt Make(uint64_t index, Split split, uint64_t tuple) const;

  TaskSpec spec_;
  uint64_t range_ = 0;                 // max - min + 1
  uint64_t tuple_count_ = 0;           // range_^operands
  std::vector<uint32_t> eval_tuples_;  // held-out tuple numbers, in eval-index order
};

// Data files for the other stages, one JSON object per line, written
// atomically (common/atomic_file.h):
//   kSft         train indices 0..count-1: {"prompt","response","index","split":"train"}
//                (the trainer's `sft` format; extra keys are ignored there)
//   kPreference  train indices 0..count-1: {"prompt","chosen","rejected","index","split":"train"}
//   kRewardPairs the same pairs for a reward model, whose rejected responses
//                also cover what a sampling policy gets wrong in form: by
//                index % 6, 1 = the answer without its newline ("81": a
//                completion that never ends), 3 = an empty answer ("\n"),
//                5 = a number drawn uniformly from 0 .. 2 x the largest sum
//                (kWrongSeed = 0x77726f6e676e756d)
//                (Scale(H([index, split], kWrongSeed)); the near miss when it
//                happens to be right); 0, 2, 4 = the near miss kPreference gives
//   kEval        eval indices 0..count-1 (count <= EvalCount()):
//                {"prompt","response","index","split":"eval"} — also valid `sft` data,
//                for an eval loss on held-out prompts
enum class EmitKind { kSft, kPreference, kRewardPairs, kEval };
// "sft" | "preference" | "reward-pairs" | "eval"
Result<EmitKind> ParseEmitKind(std::string_view name);

// The text of such a file (each line ends in '\n').
Result<std::string> EmitText(const Task& task, EmitKind kind, uint64_t count);
Status EmitFile(const Task& task, EmitKind kind, uint64_t count, const std::string& path);

}  // namespace holdfast::rl
