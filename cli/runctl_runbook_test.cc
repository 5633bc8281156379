// Where `runctl triage` says an incident's runbook is: a file that exists, for the
// runctl of a build tree (the source tree's runbooks/) and for an installed one
// (PREFIX/share/holdfast/runbooks/, found from PREFIX/bin/runctl; cli/runbook_path.h).
// The real binary; the installed layout is the one cmake/HoldfastInstall.cmake makes
// (scripts/install_check.sh checks a real `cmake --install`).
#include <filesystem>

#include "cli/runctl_test_fixture.h"

namespace holdfast {
namespace {

namespace fs = std::filesystem;

// The PATH of triage's "runbook   hang.md  (PATH)" line; "" when there is none.
std::string PrintedRunbook(const std::string& out) {
  const std::string head = "runbook   hang.md  (";
  const size_t at = out.find(head);
  if (at == std::string::npos) return "";
  const size_t from = at + head.size();
  const size_t end = out.find(")\n", from);
  return end == std::string::npos ? "" : out.substr(from, end - from);
}

TEST_F(RunctlTest, ABuildTreeRunctlNamesTheSourceTreesRunbookFile) {
  BuildLineage();
  Outcome o = Run({"triage", kRunA});
  ASSERT_EQ(o.exit, 0) << o.err;
  const std::string path = PrintedRunbook(o.out);
  EXPECT_EQ(path, std::string(HOLDFAST_TEST_SOURCE_DIR) + "/runbooks/hang.md") << o.out;
  EXPECT_TRUE(fs::is_regular_file(path)) << path;
  EXPECT_EQ(RunJson({"triage", kRunA})["incident"]["runbook_path"], path);
}

TEST_F(RunctlTest, AnInstalledRunctlNamesTheInstalledRunbookFile) {
  BuildLineage();
  // PREFIX/bin/runctl and PREFIX/share/holdfast/runbooks/, as `cmake --install` lays them out.
  const std::string prefix = dir_ + "/prefix dir";
  fs::create_directories(prefix + "/bin");
  fs::create_directories(prefix + "/share/holdfast");
  fs::copy_file(RUNCTL_PATH, prefix + "/bin/runctl");
  fs::copy(std::string(HOLDFAST_TEST_SOURCE_DIR) + "/runbooks", prefix + "/share/holdfast/runbooks");
  runctl_ = prefix + "/bin/runctl";

  Outcome o = Run({"triage", kRunA});
  ASSERT_EQ(o.exit, 0) << o.err;
  const std::string path = PrintedRunbook(o.out);
  EXPECT_EQ(path, prefix + "/share/holdfast/runbooks/hang.md") << o.out;
  EXPECT_TRUE(fs::is_regular_file(path)) << path;
  EXPECT_EQ(RunJson({"triage", kRunA})["incident"]["runbook_path"], path);

  // The same runctl with no runbooks beside it reads the source tree's, not a path that is not there.
  fs::remove_all(prefix + "/share/holdfast/runbooks");
  o = Run({"triage", kRunA});
  ASSERT_EQ(o.exit, 0) << o.err;
  EXPECT_EQ(PrintedRunbook(o.out), std::string(HOLDFAST_TEST_SOURCE_DIR) + "/runbooks/hang.md") << o.out;
}

}  // namespace
}  // namespace holdfast
