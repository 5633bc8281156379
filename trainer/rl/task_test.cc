#include "trainer/rl/task.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "trainer/data/dataset.h"

namespace holdfast::rl {
namespace {

using json = nlohmann::json;

std::unique_ptr<Task> MakeTask(const std::string& text) {
  auto spec = ParseTaskSpec(text);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  auto task = Task::Create(*spec);
  EXPECT_TRUE(task.ok()) << task.status().ToString();
  return std::move(*task);
}

void ExpectSpecError(const std::string& text, const std::string& needle) {
  auto spec = ParseTaskSpec(text);
  ASSERT_FALSE(spec.ok()) << text;
  EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(spec.status().message().find(needle), std::string::npos) << spec.status().message();
}

class TempFile {
 public:
  explicit TempFile(const std::string& tag)
      : path_((std::filesystem::temp_directory_path() / ("rl_task_test_" + tag + "_" + std::to_string(getpid())))
                  .string()) {}
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<json> ReadJsonLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<json> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(json::parse(line));
  return out;
}

TEST(TaskSpecTest, ParsesDefaultsKeysAndCanonicalSpelling) {
  auto spec = ParseTaskSpec("add2");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->operands, 2);
  EXPECT_EQ(spec->min_operand, 0);
  EXPECT_EQ(spec->max_operand, 99);
  EXPECT_EQ(spec->eval_percent, 10);
  EXPECT_EQ(spec->ToString(), "add2");

  auto full = ParseTaskSpec("add3:eval_percent=20,max=9,min=1");
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_EQ(full->operands, 3);
  EXPECT_EQ(full->min_operand, 1);
  EXPECT_EQ(full->max_operand, 9);
  EXPECT_EQ(full->eval_percent, 20);
  EXPECT_EQ(full->ToString(), "add3:min=1,max=9,eval_percent=20");
  auto again = ParseTaskSpec(full->ToString());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *full);

  // Keys equal to their defaults spell the same task.
  auto same = ParseTaskSpec("add2:max=99,min=0");
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->ToString(), "add2");
  EXPECT_EQ(*same, *spec);
}

TEST(TaskSpecTest, RejectsBadSpecsWithTheReason) {
  ExpectSpecError("", "unknown task name ''");
  ExpectSpecError("mul2", "unknown task name 'mul2'");
  ExpectSpecError("add2:", "nothing after ':'");
  ExpectSpecError("add2:max", "'max' is not key=value");
  ExpectSpecError("add2:max=x", "max='x' is not an integer");
  ExpectSpecError("add2:max=9,max=8", "key 'max' given twice");
  ExpectSpecError("add2:size=3", "unknown key 'size'");
  ExpectSpecError("add2:min=-1", "0 <= min <= max");
  ExpectSpecError("add2:min=5,max=4", "0 <= min <= max");
  ExpectSpecError("add2:max=1000000000", "0 <= min <= max <= 999999999");
  ExpectSpecError("add2:eval_percent=0", "eval_percent=0 must be in 1..50");
  ExpectSpecError("add2:eval_percent=51", "must be in 1..50");
  ExpectSpecError("add2 ", "unknown task name");
}

TEST(TaskTest, RejectsTasksTooLargeOrTooSmallToSplit) {
  auto big = Task::Create(*ParseTaskSpec("add3:max=999"));
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("narrow min..max"), std::string::npos) << big.status().message();
  auto tiny = Task::Create(*ParseTaskSpec("add2:min=7,max=7"));
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(tiny.status().message().find("train and eval both need some"), std::string::npos)
      << tiny.status().message();
}

TEST(ScoreCompletionTest, ExactAnswerThenNewlineOnly) {
  EXPECT_EQ(ScoreCompletion("81", "81\n"), 1.0);
  EXPECT_EQ(ScoreCompletion("81", "81\nanything after the newline 12\n"), 1.0);
  EXPECT_EQ(ScoreCompletion("81", std::string("81\n\0\0", 5)), 1.0);
  EXPECT_EQ(ScoreCompletion("0", "0\n"), 1.0);

  EXPECT_EQ(ScoreCompletion("81", "81"), 0.0);  // no newline: not finished
  EXPECT_EQ(ScoreCompletion("81", ""), 0.0);
  EXPECT_EQ(ScoreCompletion("81", "\n"), 0.0);
  EXPECT_EQ(ScoreCompletion("81", "\n81\n"), 0.0);
  EXPECT_EQ(ScoreCompletion("81", " 81\n"), 0.0);
  EXPECT_EQ(ScoreCompletion("81", "81 \n"), 0.0);
  EXPECT_EQ(ScoreCompletion("81", "81\r\n"), 0.0);
  EXPECT_EQ(ScoreCompletion("81", "081\n"), 0.0);
  EXPECT_EQ(ScoreCompletion("81", "+81\n"), 0.0);
  EXPECT_EQ(ScoreCompletion("81", "811\n"), 0.0);
  EXPECT_EQ(ScoreCompletion("81", "8\n"), 0.0);
  EXPECT_EQ(ScoreCompletion("81", "80\n"), 0.0);
  EXPECT_EQ(ScoreCompletion("81", std::string("81\0\n", 4)), 0.0);
  EXPECT_EQ(ScoreCompletion("0", "00\n"), 0.0);
}

TEST(TaskTest, PromptsAreSumsOfInRangeOperands) {
  auto task = MakeTask("add2");
  EXPECT_EQ(task->TupleCount(), 10000u);
  for (uint64_t i = 0; i < 2000; ++i) {
    for (Split split : {Split::kTrain, Split::kEval}) {
      const TaskPrompt p = task->Prompt(i, split);
      ASSERT_EQ(p.operands.size(), 2u);
      for (int64_t v : p.operands) {
        EXPECT_GE(v, 0);
        EXPECT_LE(v, 99);
      }
      EXPECT_EQ(p.prompt, std::to_string(p.operands[0]) + "+" + std::to_string(p.operands[1]) + "=");
      EXPECT_EQ(p.answer, std::to_string(p.operands[0] + p.operands[1]));
      EXPECT_EQ(p.response(), p.answer + "\n");
      EXPECT_EQ(task->Reward(p, p.response()), 1.0);
      EXPECT_EQ(p.index, i);
      EXPECT_EQ(p.split, split);
    }
  }
  auto add3 = MakeTask("add3:min=10,max=30");
  const TaskPrompt q = add3->Prompt(5, Split::kTrain);
  ASSERT_EQ(q.operands.size(), 3u);
  EXPECT_EQ(q.prompt, std::to_string(q.operands[0]) + "+" + std::to_string(q.operands[1]) + "+" +
                          std::to_string(q.operands[2]) + "=");
  EXPECT_EQ(q.answer, std::to_string(q.operands[0] + q.operands[1] + q.operands[2]));
  for (int64_t v : q.operands) {
    EXPECT_GE(v, 10);
    EXPECT_LE(v, 30);
  }
}

// Every pair of add2 is in exactly one split; eval prompts enumerate the
// held-out pairs exactly; train prompts never land on a held-out pair and
// reach nearly all train pairs.
TEST(TaskTest, TrainAndEvalAreDisjointOverAllPairs) {
  auto task = MakeTask("add2");
  std::set<std::pair<int64_t, int64_t>> eval_pairs;
  for (int64_t a = 0; a <= 99; ++a) {
    for (int64_t b = 0; b <= 99; ++b) {
      if (task->IsEval({a, b})) eval_pairs.insert({a, b});
    }
  }
  EXPECT_EQ(eval_pairs.size(), task->EvalCount());
  EXPECT_EQ(task->TrainCount() + task->EvalCount(), 10000u);
  // About 10% held out (the hash is fixed, so this is a fixed number).
  EXPECT_GT(eval_pairs.size(), 800u);
  EXPECT_LT(eval_pairs.size(), 1200u);

  std::set<std::pair<int64_t, int64_t>> from_eval_prompts;
  for (uint64_t j = 0; j < task->EvalCount(); ++j) {
    const TaskPrompt p = task->Prompt(j, Split::kEval);
    from_eval_prompts.insert({p.operands[0], p.operands[1]});
  }
  EXPECT_EQ(from_eval_prompts, eval_pairs);  // each held-out pair once
  // Past the end the list wraps around.
  EXPECT_EQ(task->Prompt(task->EvalCount() + 3, Split::kEval).prompt, task->Prompt(3, Split::kEval).prompt);

  std::set<std::pair<int64_t, int64_t>> train_seen;
  for (uint64_t i = 0; i < 200000; ++i) {
    const TaskPrompt p = task->Prompt(i, Split::kTrain);
    const std::pair<int64_t, int64_t> pair{p.operands[0], p.operands[1]};
    ASSERT_EQ(eval_pairs.count(pair), 0u) << "train index " << i << " is the held-out prompt " << p.prompt;
    train_seen.insert(pair);
  }
  // 200000 draws over ~9000 pairs miss a given pair with probability ~e^-22.
  EXPECT_EQ(train_seen.size(), task->TrainCount());
}

TEST(TaskTest, SplitIsAPropertyOfTheTupleWhateverTheRange) {
  auto narrow = MakeTask("add2");
  auto wide = MakeTask("add2:max=999");
  for (int64_t a = 0; a <= 99; ++a) {
    for (int64_t b = 0; b <= 99; ++b) ASSERT_EQ(narrow->IsEval({a, b}), wide->IsEval({a, b}));
  }
}

// The task is a pure function of its spec: two Task objects agree, and the
// values are pinned (they are part of the task's definition: data emitted by
// one build must mean the same to another).
TEST(TaskTest, DeterministicAndPinned) {
  auto a = MakeTask("add2");
  auto b = MakeTask("add2");
  for (uint64_t i = 0; i < 5000; ++i) {
    for (Split split : {Split::kTrain, Split::kEval}) {
      const TaskPrompt pa = a->Prompt(i, split);
      const TaskPrompt pb = b->Prompt(i, split);
      ASSERT_EQ(pa.prompt, pb.prompt);
      ASSERT_EQ(a->RejectedResponse(pa), b->RejectedResponse(pb));
    }
  }
  EXPECT_EQ(a->Prompt(0, Split::kTrain).prompt, "0+79=");
  EXPECT_EQ(a->Prompt(1, Split::kTrain).prompt, "60+33=");
  EXPECT_EQ(a->Prompt(0, Split::kEval).prompt, "50+39=");
  EXPECT_EQ(a->EvalCount(), 1005u);
}

TEST(TaskTest, RejectedResponsesArePlausiblyWrong) {
  auto task = MakeTask("add2");
  std::set<long long> offsets;
  for (uint64_t i = 0; i < 3000; ++i) {
    const TaskPrompt p = task->Prompt(i, Split::kTrain);
    const std::string r = task->RejectedResponse(p);
    ASSERT_FALSE(r.empty());
    ASSERT_EQ(r.back(), '\n');
    const std::string digits = r.substr(0, r.size() - 1);
    ASSERT_FALSE(digits.empty());
    ASSERT_EQ(digits.find_first_not_of("0123456789"), std::string::npos) << r;
    ASSERT_TRUE(digits.size() == 1 || digits[0] != '0') << r;
    EXPECT_EQ(task->Reward(p, r), 0.0) << p.prompt << " " << r;
    offsets.insert(std::stoll(digits) - std::stoll(p.answer));
  }
  // Off by one and by ten both ways, and digit swaps: several kinds of mistake.
  EXPECT_TRUE(offsets.count(1) && offsets.count(-1) && offsets.count(10) && offsets.count(-10));
  EXPECT_GT(offsets.size(), 6u);
}

TEST(EmitTest, SftFileOpensAsTheTrainersSftData) {
  auto task = MakeTask("add2");
  TempFile file("sft");
  ASSERT_TRUE(EmitFile(*task, EmitKind::kSft, 300, file.path()).ok());
  const std::vector<json> lines = ReadJsonLines(file.path());
  ASSERT_EQ(lines.size(), 300u);
  for (uint64_t i = 0; i < lines.size(); ++i) {
    const TaskPrompt p = task->Prompt(i, Split::kTrain);
    EXPECT_EQ(lines[i]["prompt"], p.prompt);
    EXPECT_EQ(lines[i]["response"], p.answer + "\n");
    EXPECT_EQ(lines[i]["index"], i);
    EXPECT_EQ(lines[i]["split"], "train");
  }
  DataOptions options;
  options.format = DataFormat::kSft;
  options.path = file.path();
  options.block_size = 16;
  auto ds = Dataset::Open(options);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->size(), 300u);
}

TEST(EmitTest, PreferenceFileHasPromptChosenRejected) {
  auto task = MakeTask("add2");
  TempFile file("pref");
  ASSERT_TRUE(EmitFile(*task, EmitKind::kPreference, 200, file.path()).ok());
  const std::vector<json> lines = ReadJsonLines(file.path());
  ASSERT_EQ(lines.size(), 200u);
  for (uint64_t i = 0; i < lines.size(); ++i) {
    const TaskPrompt p = task->Prompt(i, Split::kTrain);
    ASSERT_TRUE(lines[i]["prompt"].is_string() && lines[i]["chosen"].is_string() && lines[i]["rejected"].is_string());
    EXPECT_EQ(lines[i]["prompt"], p.prompt);
    EXPECT_EQ(lines[i]["chosen"], p.response());
    EXPECT_EQ(lines[i]["rejected"], task->RejectedResponse(p));
    EXPECT_NE(lines[i]["chosen"], lines[i]["rejected"]);
  }
  DataOptions options;
  options.format = DataFormat::kPreference;
  options.path = file.path();
  options.block_size = 16;
  auto ds = Dataset::Open(options);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->size(), 200u);
}

TEST(EmitTest, RewardPairsRejectNearMissesAndMalformedAnswers) {
  auto task = MakeTask("add2");
  const std::string text = *EmitText(*task, EmitKind::kRewardPairs, 600);
  std::istringstream in(text);
  std::string line;
  int far = 0;
  uint64_t i = 0;
  for (; std::getline(in, line); ++i) {
    const json j = json::parse(line);
    const TaskPrompt p = task->Prompt(i, Split::kTrain);
    EXPECT_EQ(j["chosen"], p.response());
    const std::string rejected = j["rejected"].get<std::string>();
    switch (i % 6) {
      case 1: EXPECT_EQ(rejected, p.answer) << i; break;  // never ends
      case 3: EXPECT_EQ(rejected, "\n") << i; break;      // empty
      case 5:  // a number anywhere in 0..396, or (rarely) the near miss
        far += rejected != task->RejectedResponse(p);
        EXPECT_LE(std::stoll(rejected), 396) << i;
        EXPECT_EQ(rejected.back(), '\n');
        break;
      default: EXPECT_EQ(rejected, task->RejectedResponse(p)) << i;
    }
    // Every rejected response is one the rule scores 0, every chosen one 1.
    EXPECT_EQ(task->Reward(p, rejected), 0.0) << i;
    EXPECT_EQ(task->Reward(p, j["chosen"].get<std::string>()), 1.0);
  }
  EXPECT_EQ(i, 600u);
  EXPECT_GT(far, 90);
  EXPECT_TRUE(ParseEmitKind("reward-pairs").ok());
}

TEST(EmitTest, EvalFileListsHeldOutPromptsOnly) {
  auto task = MakeTask("add2");
  TempFile file("eval");
  ASSERT_TRUE(EmitFile(*task, EmitKind::kEval, task->EvalCount(), file.path()).ok());
  const std::vector<json> lines = ReadJsonLines(file.path());
  ASSERT_EQ(lines.size(), task->EvalCount());
  std::set<std::string> prompts;
  for (uint64_t j = 0; j < lines.size(); ++j) {
    const TaskPrompt p = task->Prompt(j, Split::kEval);
    EXPECT_TRUE(task->IsEval(p.operands));
    EXPECT_EQ(lines[j]["prompt"], p.prompt);
    EXPECT_EQ(lines[j]["response"], p.response());
    EXPECT_EQ(lines[j]["split"], "eval");
    prompts.insert(lines[j]["prompt"].get<std::string>());
  }
  EXPECT_EQ(prompts.size(), task->EvalCount());

  auto too_many = EmitText(*task, EmitKind::kEval, task->EvalCount() + 1);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("held-out prompts"), std::string::npos);
  EXPECT_FALSE(EmitText(*task, EmitKind::kSft, 0).ok());
  EXPECT_FALSE(ParseEmitKind("dpo").ok());
}

}  // namespace
}  // namespace holdfast::rl
