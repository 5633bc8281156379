// ShellWord: the paths runctl prints inside command lines ("status: runctl
// --run-dir DIR status") paste back into a real shell as the same one word.
#include "cli/format.h"

#include <gtest/gtest.h>

#include "tests/support/subprocess.h"

namespace holdfast {
namespace {

TEST(FormatHoursTest, TwoSignificantDigitsBelowAnHourAndNeverAnExponent) {
  EXPECT_EQ(FormatHours(0.0114432795625), "0.011");
  EXPECT_EQ(FormatHours(5.9e-05), "0.000059");
  EXPECT_EQ(FormatHours(0.5), "0.50");
  EXPECT_EQ(FormatHours(12.34), "12.3");
  EXPECT_EQ(FormatHours(4210.4), "4210");
  EXPECT_EQ(FormatHours(0), "0");
}

TEST(ShellWordTest, APlainPathStaysAsItIs) {
  EXPECT_EQ(ShellWord("runs/r1"), "runs/r1");
  EXPECT_EQ(ShellWord("/scratch/proj-42/run_a.b"), "/scratch/proj-42/run_a.b");
}

TEST(ShellWordTest, AnyPathPastesIntoBashAsOneWord) {
  for (const std::string path : {"/tmp/hf long/ünïcode dir … with spaces/run", "/tmp/it's $HOME `id` \"q\" *", "",
                                 "a\\b;c|d&e(f)g<h>i~j#k!l?m[n]o{p}"}) {
    testing::ProcessResult r = testing::RunProcess({"/bin/bash", "-c", "printf '%s|' " + ShellWord(path)});
    EXPECT_EQ(r.exit_code, 0) << ShellWord(path);
    EXPECT_EQ(r.output, path + "|") << ShellWord(path);
  }
}

}  // namespace
}  // namespace holdfast
