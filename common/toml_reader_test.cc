#include "common/toml_reader.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include <gtest/gtest.h>

namespace holdfast {
namespace {

toml::table Parse(const std::string& text) { return toml::parse(text, std::string_view("run.toml")); }

// The message of a failed read, or "" when the read succeeded.
std::string Message(const Status& s) { return s.ok() ? "" : s.message(); }

TEST(TomlTableReaderTest, ReadsEveryTypeAndLeavesAbsentKeysAlone) {
  const toml::table root = Parse(
      "[s]\n"
      "n = 7\n"
      "big = 68719476736\n"
      "x = 2.5\n"
      "whole = 3\n"
      "name = \"abc\"\n"
      "mode = \"wal\"\n"
      "on = true\n"
      "list = [\"a\", \"b\"]\n"
      "env = { K = \"v\" }\n"
      "[s.sub]\n"
      "inner = 1\n");
  TomlTableReader r("run.toml", "s", *root["s"].as_table());
  int n = 0, absent = 42;
  int64_t big = 0;
  double x = 0, whole = 0;
  std::string name, mode;
  bool on = false;
  std::vector<std::string> list = {"old"};
  std::map<std::string, std::string> env;
  const toml::table* sub = nullptr;
  ASSERT_TRUE(r.Int("n", &n, 1, 10).ok());
  ASSERT_TRUE(r.Int("absent", &absent, 0, 1).ok());
  ASSERT_TRUE(r.Int("big", &big, 0, int64_t{1} << 40).ok());
  ASSERT_TRUE(r.Double("x", &x, 0, 10).ok());
  ASSERT_TRUE(r.Double("whole", &whole, 0, 10).ok());
  ASSERT_TRUE(r.String("name", &name).ok());
  ASSERT_TRUE(r.String("mode", &mode, "wal|delete").ok());
  ASSERT_TRUE(r.Bool("on", &on).ok());
  ASSERT_TRUE(r.StringArray("list", &list).ok());
  ASSERT_TRUE(r.StringTable("env", &env).ok());
  ASSERT_TRUE(r.Table("sub", &sub).ok());
  EXPECT_TRUE(r.RejectUnknown().ok()) << Message(r.RejectUnknown());
  EXPECT_EQ(n, 7);
  EXPECT_EQ(absent, 42);  // the default stands
  EXPECT_EQ(big, int64_t{1} << 36);
  EXPECT_EQ(x, 2.5);
  EXPECT_EQ(whole, 3.0);  // an integer is a fine number
  EXPECT_EQ(name, "abc");
  EXPECT_EQ(mode, "wal");
  EXPECT_TRUE(on);
  EXPECT_EQ(list, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(env.at("K"), "v");
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->get("inner")->as_integer()->get(), 1);
}

TEST(TomlTableReaderTest, WrongTypesNameTheFileLineAndKey) {
  const toml::table root = Parse(
      "[s]\n"
      "n = \"seven\"\n"
      "x = \"fast\"\n"
      "name = 3\n"
      "on = 1\n"
      "list = [\"a\",\n"
      "  2]\n"
      "env = { K = 1 }\n");
  TomlTableReader r("run.toml", "s", *root["s"].as_table());
  int n = 0;
  double x = 0;
  std::string name;
  bool on = false;
  std::vector<std::string> list = {"old"};
  std::map<std::string, std::string> env;
  EXPECT_EQ(Message(r.Int("n", &n, 0, 10)), "run.toml:2: key 's.n' must be an integer");
  EXPECT_EQ(Message(r.Double("x", &x, 0, 10)), "run.toml:3: key 's.x' must be a number");
  EXPECT_EQ(Message(r.String("name", &name)), "run.toml:4: key 's.name' must be a string");
  EXPECT_EQ(Message(r.Bool("on", &on)), "run.toml:5: key 's.on' must be true or false");
  // The bad element is on line 7, not where the array starts.
  EXPECT_EQ(Message(r.StringArray("list", &list)),
            "run.toml:7: key 's.list' must be an array of strings, e.g. [\"a\", \"b\"]");
  EXPECT_EQ(list, std::vector<std::string>{"old"});  // untouched on error
  EXPECT_EQ(Message(r.StringArray("list", &list, "a list of names")),
            "run.toml:7: key 's.list' must be a list of names");
  EXPECT_EQ(Message(r.StringTable("env", &env)), "run.toml:8: key 's.env' must be a table of strings");
  const toml::table* sub = nullptr;
  EXPECT_EQ(Message(r.Table("n", &sub)), "run.toml:2: key 's.n' must be a table ([s.n])");
  EXPECT_EQ(sub, nullptr);
}

TEST(TomlTableReaderTest, RangesIncludeTheBoundsAndSayWhatWasGiven) {
  const toml::table root = Parse(
      "[s]\n"
      "lo = 1\n"
      "hi = 4096\n"
      "under = 0\n"
      "over = 4097\n"
      "big = 9000000000\n"
      "f = 1.5\n"
      "g = 1.4999\n"
      "neg = -0.001\n");
  TomlTableReader r("run.toml", "s", *root["s"].as_table());
  int v = 0;
  EXPECT_TRUE(r.Int("lo", &v, 1, 4096).ok());
  EXPECT_TRUE(r.Int("hi", &v, 1, 4096).ok());
  EXPECT_EQ(v, 4096);
  EXPECT_EQ(Message(r.Int("under", &v, 1, 4096)), "run.toml:4: key 's.under' must be between 1 and 4096, got 0");
  EXPECT_EQ(Message(r.Int("over", &v, 1, 4096)), "run.toml:5: key 's.over' must be between 1 and 4096, got 4097");
  // Larger than an int: refused by the range, not silently truncated.
  EXPECT_EQ(Message(r.Int("big", &v, 0, 1 << 30)),
            "run.toml:6: key 's.big' must be between 0 and 1073741824, got 9000000000");
  EXPECT_EQ(v, 4096);
  double d = 0;
  EXPECT_TRUE(r.Double("f", &d, 1.5, 1000).ok());
  EXPECT_EQ(Message(r.Double("g", &d, 1.5, 1e12)), "run.toml:8: key 's.g' must be between 1.5 and 1e+12, got 1.4999");
  EXPECT_EQ(Message(r.Double("neg", &d, 0, 0.999)), "run.toml:9: key 's.neg' must be between 0 and 0.999, got -0.001");
  EXPECT_EQ(d, 1.5);
}

TEST(TomlTableReaderTest, NonFiniteNumbersAreRefusedUnlessTheBoundIsInfinite) {
  const toml::table root = Parse(
      "[s]\n"
      "nan = nan\n"
      "inf = inf\n"
      "minf = -inf\n");
  constexpr double kInf = std::numeric_limits<double>::infinity();
  TomlTableReader r("run.toml", "s", *root["s"].as_table());
  double d = 1;
  EXPECT_EQ(Message(r.Double("nan", &d, 0, 10)),
            "run.toml:2: key 's.nan' must be a finite number between 0 and 10, got nan");
  EXPECT_EQ(Message(r.Double("inf", &d, 0, 10)),
            "run.toml:3: key 's.inf' must be a finite number between 0 and 10, got inf");
  EXPECT_EQ(Message(r.Double("minf", &d, -10, 10)),
            "run.toml:4: key 's.minf' must be a finite number between -10 and 10, got -inf");
  EXPECT_EQ(d, 1);
  // "no limit" is spelled inf: allowed where the bound itself is infinite.
  EXPECT_TRUE(r.Double("inf", &d, 0, kInf).ok());
  EXPECT_TRUE(std::isinf(d));
  EXPECT_FALSE(r.Double("nan", &d, -kInf, kInf).ok());
}

TEST(TomlTableReaderTest, ChoicesAreListed) {
  const toml::table root = Parse("[lineage]\njournal_mode = \"fast\"\nok = \"delete\"\n");
  TomlTableReader r("job.toml", "lineage", *root["lineage"].as_table());
  std::string mode = "wal";
  EXPECT_EQ(Message(r.String("journal_mode", &mode, "wal|delete|truncate")),
            "job.toml:2: key 'lineage.journal_mode' must be one of wal|delete|truncate, got 'fast'");
  EXPECT_EQ(mode, "wal");
  EXPECT_TRUE(r.String("ok", &mode, "wal|delete|truncate").ok());
  EXPECT_EQ(mode, "delete");
  // A choice is a whole word, not a substring of the list.
  const toml::table partial = Parse("[lineage]\njournal_mode = \"de\"\n");
  TomlTableReader p("job.toml", "lineage", *partial["lineage"].as_table());
  EXPECT_FALSE(p.String("journal_mode", &mode, "wal|delete|truncate").ok());
}

TEST(TomlTableReaderTest, UnknownKeyIsReportedWithItsLineAndTheKnownKeys) {
  const toml::table root = Parse(
      "[health]\n"
      "expected_gpus = 8\n"
      "\n"
      "expected_gpu = 8\n"
      "[health.policy]\n"
      "on_warn = \"drain\"\n");
  TomlTableReader r("job.toml", "health", *root["health"].as_table());
  int gpus = 0;
  std::string dir;
  const toml::table* policy = nullptr;
  ASSERT_TRUE(r.Int("expected_gpus", &gpus, 0, 64).ok());
  ASSERT_TRUE(r.String("checkpoint_dir", &dir).ok());  // absent, still a known key
  ASSERT_TRUE(r.Table("policy", &policy).ok());
  ASSERT_NE(policy, nullptr);
  EXPECT_EQ(Message(r.RejectUnknown()),
            "job.toml:4: unknown key 'health.expected_gpu' (known keys in [health]: expected_gpus, checkpoint_dir, "
            "[health.policy])");
}

TEST(TomlReadFunctionsTest, CheckOneValueForAFlag) {
  const toml::table v = Parse("v = 3e-4\nw = \"x\"\n");
  const std::string where = "flag --set 'optim.lr=3e-4'";
  Result<double> lr = ReadTomlDouble(*v.get("v"), where, "optim.lr", 0, 10);
  ASSERT_TRUE(lr.ok());
  EXPECT_EQ(*lr, 3e-4);
  EXPECT_EQ(ReadTomlInt(*v.get("v"), where, "train.steps", 1, 10).status().message(),
            "flag --set 'optim.lr=3e-4': key 'train.steps' must be an integer");
  EXPECT_EQ(ReadTomlBool(*v.get("w"), where, "dist.overlap").status().message(),
            "flag --set 'optim.lr=3e-4': key 'dist.overlap' must be true or false");
  EXPECT_EQ(ReadTomlString(*v.get("w"), where, "dist.backend", "gloo|nccl").status().message(),
            "flag --set 'optim.lr=3e-4': key 'dist.backend' must be one of gloo|nccl, got 'x'");
}

TEST(TomlWhereTest, OmitsAMissingLine) {
  const toml::source_region none{};  // what toml++ gives a node built in code
  EXPECT_EQ(TomlWhere("run.toml", none), "run.toml");
  EXPECT_EQ(FormatTomlNumber(0.1), "0.1");
  EXPECT_EQ(FormatTomlNumber(1e15), "1e+15");
  EXPECT_EQ(FormatTomlNumber(0.999999), "0.999999");
  EXPECT_EQ(FormatTomlNumber(1.0 / 3), "0.3333333333333333");
}

TEST(ParseTomlFileTest, SaysWhatIsWrongWithTheFile) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("hf_toml_file_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string good = (dir / "good.toml").string(), bad = (dir / "bad.toml").string();
  std::ofstream(good) << "[job]\nname = \"x\"\n";
  std::ofstream(bad) << "[job]\nname = \n";

  std::string text;
  auto root = ParseTomlFile(good, &text);
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  EXPECT_EQ((*root)["job"]["name"].value_or(std::string()), "x");
  EXPECT_EQ(text, "[job]\nname = \"x\"\n");

  auto syntax = ParseTomlFile(bad);
  ASSERT_FALSE(syntax.ok());
  EXPECT_EQ(syntax.status().message().rfind(bad + ":2: TOML syntax error", 0), 0u) << syntax.status().message();

  auto missing = ParseTomlFile((dir / "none.toml").string());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("pass --config with a TOML file"), std::string::npos);

  auto folder = ParseTomlFile(dir.string());
  EXPECT_NE(folder.status().message().find("is a directory; pass a TOML file"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace holdfast
