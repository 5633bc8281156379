// MaxLineageDbPathBytes against the real SQLite: a lineage database whose
// absolute path is exactly the limit opens (and takes a write, WAL on), one
// byte more does not — so the limit holdfastd checks a run dir against is the
// library's, not a guess.
#include "lineage/lineage_path.h"

#include <stdlib.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "lineage/lineage_db.h"

namespace holdfast {
namespace {

// A directory under `root` whose "/lineage.db" path is `bytes` long, created.
std::string DbPathOf(const std::string& root, size_t bytes) {
  const std::string leaf = "/lineage.db";
  std::string dir = root;
  while (dir.size() + leaf.size() < bytes) {
    const size_t room = bytes - leaf.size() - dir.size() - 1;  // the '/'
    dir += "/" + std::string(std::min<size_t>(room, 200), 'd');
  }
  std::filesystem::create_directories(dir);
  return dir + leaf;
}

// Creates a run in a lineage database at `path` with `mode`; the error when it cannot.
Status CreateRunAt(const std::string& path, JournalMode mode) {
  LineageOptions lo;
  lo.journal_mode = mode;
  auto db = LineageDb::Open(path, lo);
  if (!db.ok()) return db.status();
  RunRecord run;
  run.name = "at-the-limit";
  run.run_dir = std::filesystem::path(path).parent_path().string();
  Result<std::string> id = (*db)->CreateRun(run);
  if (!id.ok()) return id.status();
  return (*db)->GetRun(*id).status();
}

TEST(LineagePathTest, TheLimitIsTheLongestPathSqliteOpensInEveryJournalMode) {
  char tmpl[] = "/tmp/hf-lpath-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const size_t max = MaxLineageDbPathBytes();
  EXPECT_GT(max, 400u);  // Debian's SQLite: 504

  int n = 0;
  for (JournalMode mode : {JournalMode::kWal, JournalMode::kDelete, JournalMode::kTruncate}) {
    const std::string fits = DbPathOf(std::string(tmpl) + "/" + std::to_string(n++), max);
    ASSERT_EQ(fits.size(), max);
    Status s = CreateRunAt(fits, mode);
    EXPECT_TRUE(s.ok()) << JournalModeName(mode) << ": " << s.ToString();
  }
  // One byte more: the rollback journal's name no longer fits.
  const std::string too_long = DbPathOf(std::string(tmpl) + "/x", max + 1);
  ASSERT_EQ(too_long.size(), max + 1);
  EXPECT_FALSE(CreateRunAt(too_long, JournalMode::kDelete).ok())
      << "SQLite wrote a " << too_long.size() << "-byte path with a rollback journal: raise MaxLineageDbPathBytes";
  std::filesystem::remove_all(tmpl);
}

}  // namespace
}  // namespace holdfast
