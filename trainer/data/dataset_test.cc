#include "trainer/data/dataset.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

namespace holdfast {
namespace {

// An independent reimplementation of the documented sampler
// (docs/data-sampling.md), written from the formula, not from dataset.cc.
uint64_t RefMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}
uint64_t RefHash(uint64_t seed, uint64_t index) { return RefMix(RefMix(seed) ^ index); }

// A fixed pseudo-random byte string (an LCG), so windows at different starts differ.
std::string PseudoRandomText(size_t n) {
  std::string text(n, '\0');
  uint32_t x = 12345;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    text[i] = static_cast<char>((x >> 16) & 0xFF);
  }
  return text;
}

std::string Uint16Le(const std::vector<uint16_t>& tokens) {
  std::string bytes;
  for (uint16_t t : tokens) {
    bytes.push_back(static_cast<char>(t & 0xFF));
    bytes.push_back(static_cast<char>(t >> 8));
  }
  return bytes;
}

struct Drawn {
  std::vector<int64_t> inputs;
  std::vector<int64_t> targets;
  bool operator==(const Drawn& o) const { return inputs == o.inputs && targets == o.targets; }
};

Drawn Draw(const Dataset& ds, uint64_t index) {
  Drawn d;
  d.inputs.assign(ds.options().block_size, 12345);
  d.targets.assign(ds.options().block_size, 12345);
  ds.Sample(index, d.inputs.data(), d.targets.data());
  return d;
}

std::vector<int64_t> Bytes(const std::string& s, size_t begin, size_t count) {
  std::vector<int64_t> out;
  for (size_t i = begin; i < begin + count; ++i) out.push_back(static_cast<uint8_t>(s[i]));
  return out;
}

class DataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/hf_data_XXXXXX";
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& contents) {
    const std::string path = dir_ + "/" + name;
    std::ofstream out(path, std::ios::binary);
    out << contents;
    out.close();
    EXPECT_TRUE(out.good()) << path;
    return path;
  }

  static Result<std::unique_ptr<Dataset>> Open(DataFormat format, const std::string& path,
                                               int block_size, int vocab_size = 256,
                                               uint64_t seed = 1337) {
    DataOptions o;
    o.format = format;
    o.path = path;
    o.block_size = block_size;
    o.vocab_size = vocab_size;
    o.seed = seed;
    return Dataset::Open(o);
  }

  // Expects Open to fail with `code` and a message holding the path and every `parts`.
  static void ExpectError(const Result<std::unique_ptr<Dataset>>& r, StatusCode code,
                          const std::string& path, const std::vector<std::string>& parts) {
    ASSERT_FALSE(r.ok()) << "opened " << path << " but expected an error";
    EXPECT_EQ(r.status().code(), code) << r.status().ToString();
    EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().ToString();
    for (const std::string& part : parts) {
      EXPECT_NE(r.status().message().find(part), std::string::npos)
          << "missing '" << part << "' in: " << r.status().ToString();
    }
  }

  std::string dir_;
};

TEST(SplitMix64Test, MatchesPublishedReferenceOutputs) {
  // First two outputs of Vigna's splitmix64.c seeded with 0.
  EXPECT_EQ(SplitMix64(0), 0xE220A8397B1DCDAFULL);
  EXPECT_EQ(SplitMix64(0x9E3779B97F4A7C15ULL), 0x6E789E6AA1B965F4ULL);
  for (uint64_t i : {0ULL, 1ULL, 77ULL, ~0ULL}) EXPECT_EQ(SampleHash(1337, i), RefHash(1337, i));
}

TEST(DataFormatTest, ParsesTheThreeNamesAndListsThemOnError) {
  for (DataFormat f : {DataFormat::kText, DataFormat::kBin, DataFormat::kSft}) {
    auto parsed = ParseDataFormat(DataFormatName(f));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, f);
  }
  auto bad = ParseDataFormat("jsonl");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("jsonl"), std::string::npos);
  EXPECT_NE(bad.status().message().find("text, bin, sft"), std::string::npos);
}

// Pinned so that a change to the sampler (which would silently change every
// run's data order and break resumption) cannot pass unnoticed.
TEST_F(DataTest, GoldenStartPositionsForSeed1337) {
  const std::string text = PseudoRandomText(1000);
  const int block = 64;
  const uint64_t positions = 1000 - block;
  const uint64_t kGoldenStarts[3] = {714, 758, 68};
  const std::string path = Write("golden.txt", text);
  auto ds = Open(DataFormat::kText, path, block, 256, 1337);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(RefHash(1337, i) % positions, kGoldenStarts[i]) << "sample " << i;
    const Drawn d = Draw(**ds, i);
    EXPECT_EQ(d.inputs, Bytes(text, kGoldenStarts[i], block)) << "sample " << i;
    EXPECT_EQ(d.targets, Bytes(text, kGoldenStarts[i] + 1, block)) << "sample " << i;
  }
}

TEST_F(DataTest, TextSamplesArePureFunctionsOfSeedAndIndex) {
  const std::string path = Write("t.txt", PseudoRandomText(1000));
  auto a = Open(DataFormat::kText, path, 32, 256, 7);
  auto b = Open(DataFormat::kText, path, 32, 256, 7);
  auto other_seed = Open(DataFormat::kText, path, 32, 256, 8);
  ASSERT_TRUE(a.ok() && b.ok() && other_seed.ok());
  // Ascending from one dataset, descending from the other: no hidden cursor state.
  std::vector<Drawn> forward, backward(64);
  for (uint64_t i = 0; i < 64; ++i) forward.push_back(Draw(**a, i));
  for (uint64_t i = 64; i-- > 0;) backward[i] = Draw(**b, i);
  int differing = 0;
  for (uint64_t i = 0; i < 64; ++i) {
    EXPECT_EQ(forward[i], backward[i]) << i;
    differing += forward[i] == Draw(**other_seed, i) ? 0 : 1;
  }
  EXPECT_GT(differing, 32) << "seeds 7 and 8 draw nearly the same samples";
  const uint64_t huge = (1ULL << 63) + 5;
  EXPECT_EQ(Draw(**a, huge), Draw(**b, huge));
}

TEST_F(DataTest, FillBatchLaysOutConsecutiveSamples) {
  const std::string path = Write("t.txt", PseudoRandomText(500));
  auto ds = Open(DataFormat::kText, path, 16);
  ASSERT_TRUE(ds.ok());
  const int batch = 5;
  std::vector<int64_t> inputs(batch * 16), targets(batch * 16);
  (*ds)->FillBatch(100, batch, inputs.data(), targets.data());
  for (int b = 0; b < batch; ++b) {
    const Drawn d = Draw(**ds, 100 + b);
    EXPECT_EQ(std::vector<int64_t>(inputs.begin() + b * 16, inputs.begin() + (b + 1) * 16),
              d.inputs);
    EXPECT_EQ(std::vector<int64_t>(targets.begin() + b * 16, targets.begin() + (b + 1) * 16),
              d.targets);
  }
}

TEST_F(DataTest, TextWindowsStayInsideTheFileAndTargetsAreShiftedInputs) {
  // 11 distinct bytes, block 8: exactly 3 valid starts (0, 1, 2); the last one
  // ends on the file's last byte.
  const std::string text = "0123456789A";
  const std::string path = Write("short.txt", text);
  auto ds = Open(DataFormat::kText, path, 8);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->size(), 11u);
  EXPECT_EQ((*ds)->Describe(), "text " + path + " (11 tokens)");
  std::set<size_t> starts;
  for (uint64_t i = 0; i < 300; ++i) {
    const Drawn d = Draw(**ds, i);
    const size_t start = text.find(static_cast<char>(d.inputs[0]));
    ASSERT_LE(start, 2u) << "window starting at " << start << " runs past the end";
    EXPECT_EQ(start, RefHash(1337, i) % 3);
    EXPECT_EQ(d.inputs, Bytes(text, start, 8));
    EXPECT_EQ(d.targets, Bytes(text, start + 1, 8));
    starts.insert(start);
  }
  EXPECT_EQ(starts, (std::set<size_t>{0, 1, 2}));
}

TEST_F(DataTest, TextTokensAreUnsignedBytes) {
  const std::string path = Write("hi.txt", std::string("\xff\x80\x00\x7f\xc3", 5));
  auto ds = Open(DataFormat::kText, path, 4);  // one window: the whole file
  ASSERT_TRUE(ds.ok());
  const Drawn d = Draw(**ds, 99);
  EXPECT_EQ(d.inputs, (std::vector<int64_t>{255, 128, 0, 127}));
  EXPECT_EQ(d.targets, (std::vector<int64_t>{128, 0, 127, 195}));
}

TEST_F(DataTest, BinReadsLittleEndianUint16) {
  const std::vector<uint16_t> tokens = {0x1234, 0xABCD, 0x0001, 0xFF00, 0x00FF};
  const std::string path = Write("train.bin", Uint16Le(tokens));
  auto ds = Open(DataFormat::kBin, path, 2, 65536);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->size(), 5u);
  EXPECT_EQ((*ds)->Describe(), "bin " + path + " (5 tokens)");
  std::set<size_t> starts;
  for (uint64_t i = 0; i < 100; ++i) {
    const Drawn d = Draw(**ds, i);
    const size_t start = RefHash(1337, i) % 3;
    starts.insert(start);
    EXPECT_EQ(d.inputs, (std::vector<int64_t>{tokens[start], tokens[start + 1]}));
    EXPECT_EQ(d.targets, (std::vector<int64_t>{tokens[start + 1], tokens[start + 2]}));
  }
  EXPECT_EQ(starts.size(), 3u);
}

TEST_F(DataTest, BinTokenAtVocabSizeIsRejectedWithItsIndex) {
  const std::string path = Write("big.bin", Uint16Le({1, 2, 3, 300, 4, 500, 5}));
  ExpectError(Open(DataFormat::kBin, path, 2, 256), StatusCode::kInvalidArgument, path,
              {"token 3", "byte offset 6", "is 300", "vocab_size 256", "at least 501"});
  // The boundary: vocab 501 admits every token.
  EXPECT_TRUE(Open(DataFormat::kBin, path, 2, 501).ok());
}

TEST_F(DataTest, BinFileErrorsNameTheFileAndWhatIsWrong) {
  const std::string odd = Write("odd.bin", std::string("\x01\x00\x02\x00\x03", 5));
  ExpectError(Open(DataFormat::kBin, odd, 1, 256), StatusCode::kInvalidArgument, odd,
              {"odd", "offset 4"});
  const std::string empty = Write("empty.bin", "");
  ExpectError(Open(DataFormat::kBin, empty, 4, 256), StatusCode::kInvalidArgument, empty,
              {"empty"});
  const std::string shorty = Write("short.bin", Uint16Le({1, 2, 3}));
  ExpectError(Open(DataFormat::kBin, shorty, 4, 256), StatusCode::kInvalidArgument, shorty,
              {"has 3 tokens", "at least 5"});
}

TEST_F(DataTest, TextFileErrorsNameTheFileAndWhatIsWrong) {
  const std::string ok = Write("ok.txt", PseudoRandomText(100));
  ExpectError(Open(DataFormat::kText, ok, 8, 50304), StatusCode::kInvalidArgument, ok,
              {"model.vocab_size = 256"});
  const std::string empty = Write("empty.txt", "");
  ExpectError(Open(DataFormat::kText, empty, 8), StatusCode::kInvalidArgument, empty, {"empty"});
  ExpectError(Open(DataFormat::kText, ok, 100), StatusCode::kInvalidArgument, ok,
              {"has 100 bytes", "at least 101"});
  EXPECT_TRUE(Open(DataFormat::kText, ok, 99).ok());
  ExpectError(Open(DataFormat::kText, ok, 0), StatusCode::kInvalidArgument, ok, {"block_size"});
}

TEST_F(DataTest, MissingFileIsNotFoundAndDirectoryIsInvalid) {
  for (DataFormat f : {DataFormat::kText, DataFormat::kBin, DataFormat::kSft}) {
    const std::string missing = dir_ + "/no_such_file";
    ExpectError(Open(f, missing, 8), StatusCode::kNotFound, missing, {});
    ExpectError(Open(f, dir_, 8), StatusCode::kInvalidArgument, dir_, {"directory"});
  }
}

TEST_F(DataTest, UnreadableFileIsAnErrorNamingIt) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads files whatever their mode";
  const std::string path = Write("secret.txt", PseudoRandomText(100));
  ASSERT_EQ(::chmod(path.c_str(), 0), 0);
  auto r = Open(DataFormat::kText, path, 8);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().ToString();
}

TEST_F(DataTest, SftMasksPromptAndPaddingAndEndsResponseWithEndOfText) {
  const std::string path = Write("one.jsonl", R"({"prompt": "ab", "response": "xyz"})"
                                              "\n");
  auto ds = Open(DataFormat::kSft, path, 8);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->size(), 1u);
  EXPECT_EQ((*ds)->Describe(), "sft " + path + " (1 examples)");
  const Drawn d = Draw(**ds, 0);
  EXPECT_EQ(d.inputs, (std::vector<int64_t>{'a', 'b', 'x', 'y', 'z', 0, 0, 0}));
  EXPECT_EQ(d.targets, (std::vector<int64_t>{-1, 'x', 'y', 'z', kSftEndOfText, -1, -1, -1}));

  // block_size + 1 == len(seq): the end-of-text target just fits.
  auto exact = Open(DataFormat::kSft, path, 5);
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(Draw(**exact, 3).inputs, (std::vector<int64_t>{'a', 'b', 'x', 'y', 'z'}));
  EXPECT_EQ(Draw(**exact, 3).targets, (std::vector<int64_t>{-1, 'x', 'y', 'z', 0}));

  // Longer than the block: truncated, no end-of-text.
  auto cut = Open(DataFormat::kSft, path, 3);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(Draw(**cut, 0).inputs, (std::vector<int64_t>{'a', 'b', 'x'}));
  EXPECT_EQ(Draw(**cut, 0).targets, (std::vector<int64_t>{-1, 'x', 'y'}));
}

TEST_F(DataTest, SftTokensAreUtf8BytesAndEmptyPromptTrainsOnAll) {
  const std::string path = Write("u.jsonl", R"({"prompt": "\u00e9", "response": "ok", "id": 7})"
                                            "\n");
  auto ds = Open(DataFormat::kSft, path, 6);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  const Drawn d = Draw(**ds, 0);
  EXPECT_EQ(d.inputs, (std::vector<int64_t>{0xC3, 0xA9, 'o', 'k', 0, 0}));
  EXPECT_EQ(d.targets, (std::vector<int64_t>{-1, 'o', 'k', 0, -1, -1}));

  const std::string empty_prompt = Write("e.jsonl", R"({"prompt": "", "response": "hi"})");
  auto e = Open(DataFormat::kSft, empty_prompt, 4);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(Draw(**e, 0).inputs, (std::vector<int64_t>{'h', 'i', 0, 0}));
  EXPECT_EQ(Draw(**e, 0).targets, (std::vector<int64_t>{'i', 0, -1, -1}));
}

TEST_F(DataTest, SftPicksExampleByHashAndSkipsBlankLines) {
  std::string jsonl;
  for (int k = 0; k < 5; ++k) {
    jsonl += R"({"prompt": ")" + std::to_string(k) +
             R"(", "response": "r"})"
             "\n";
    if (k == 2) jsonl += "\n   \t\r\n";
  }
  const std::string path = Write("five.jsonl", jsonl);
  auto a = Open(DataFormat::kSft, path, 4, 256, 42);
  auto b = Open(DataFormat::kSft, path, 4, 256, 42);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
  EXPECT_EQ((*a)->size(), 5u);
  for (uint64_t i = 0; i < 50; ++i) {
    const Drawn d = Draw(**a, i);
    EXPECT_EQ(d.inputs[0], '0' + static_cast<int64_t>(RefHash(42, i) % 5)) << i;
    EXPECT_EQ(d, Draw(**b, i));
  }
}

TEST_F(DataTest, SftErrorsNameTheFileAndLine) {
  struct Case {
    const char* contents;
    const char* where;  // ":LINE:" expected in the message
    std::vector<std::string> parts;
  };
  const std::string good = R"({"prompt": "a", "response": "b"})";
  const std::vector<Case> cases = {
      {"{\"prompt\": \"a\", \"response\": \"b\"}\n\n{\"prompt\": \n", ":3:", {"invalid JSON"}},
      {"[1, 2]\n", ":1:", {"object", "array"}},
      {"{\"response\": \"x\"}\n", ":1:", {"missing \"prompt\""}},
      {"{\"prompt\": \"a\", \"response\": 5}\n",
       ":1:",
       {"\"response\" must be a string", "number"}},
      {"{\"prompt\": \"a\", \"response\": \"\"}\n", ":1:", {"\"response\" is empty"}},
      {"{\"prompt\": \"a\", \"response\": \"b\\u0000c\"}\n", ":1:", {"NUL"}},
      {"{\"prompt\": \"a\", \"response\": \"b\"}\n{\"prompt\": \"abcd\", \"response\": \"b\"}\n",
       ":2:",
       {"prompt is 4 bytes", "block_size is 4", "model.block_size"}},
  };
  int n = 0;
  for (const Case& c : cases) {
    const std::string path = Write("bad" + std::to_string(n++) + ".jsonl", c.contents);
    ExpectError(Open(DataFormat::kSft, path, 4), StatusCode::kInvalidArgument, path + c.where,
                c.parts);
  }
  const std::string blank = Write("blank.jsonl", "\n  \n");
  ExpectError(Open(DataFormat::kSft, blank, 4), StatusCode::kInvalidArgument, blank,
              {"no examples"});
  const std::string empty = Write("empty.jsonl", "");
  ExpectError(Open(DataFormat::kSft, empty, 4), StatusCode::kInvalidArgument, empty,
              {"no examples"});
  const std::string ok = Write("ok.jsonl", good);
  ExpectError(Open(DataFormat::kSft, ok, 4, 50304), StatusCode::kInvalidArgument, ok,
              {"model.vocab_size = 256"});
}

}  // namespace
}  // namespace holdfast

namespace holdfast {
namespace {

// DataTest's helpers are in the namespace above; this suite writes its own files.
class HoldoutDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("hf_holdout_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  static Result<std::unique_ptr<Dataset>> Open(DataFormat f, const std::string& path, int block, double holdout) {
    DataOptions o;
    o.format = f;
    o.path = path;
    o.block_size = block;
    o.holdout = holdout;
    return Dataset::Open(o);
  }
  std::filesystem::path dir_;
};

std::string Pairs(int n) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    out += "{\"prompt\": \"p" + std::to_string(i) + "=\", \"chosen\": \"c\\n\", \"rejected\": \"r\\n\"}\n";
  }
  return out;
}

TEST_F(HoldoutDataTest, PreferencePairFillsChosenThenRejectedRowsLikeSft) {
  auto d = Open(DataFormat::kPreference, Write("p.jsonl", "{\"prompt\": \"ab\", \"chosen\": \"xy\", \"rejected\": \"z\"}\n"),
                6, 0);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_EQ((*d)->rows_per_sample(), 2);
  std::vector<int64_t> x(12), y(12);
  (*d)->Sample(0, x.data(), y.data());
  EXPECT_EQ(x, (std::vector<int64_t>{'a', 'b', 'x', 'y', 0, 0, 'a', 'b', 'z', 0, 0, 0}));
  EXPECT_EQ(y, (std::vector<int64_t>{-1, 'x', 'y', 0, -1, -1, -1, 'z', 0, -1, -1, -1}));
}

TEST_F(HoldoutDataTest, PreferenceErrorsNameTheLine) {
  const std::string path = Write("bad.jsonl", Pairs(2) + "{\"prompt\": \"a\", \"chosen\": \"x\", \"rejected\": \"x\"}\n");
  auto d = Open(DataFormat::kPreference, path, 8, 0);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find(path + ":3"), std::string::npos) << d.status().ToString();
  EXPECT_NE(d.status().message().find("same text"), std::string::npos) << d.status().ToString();
  auto missing = Open(DataFormat::kPreference, Write("m.jsonl", "{\"prompt\": \"a\", \"chosen\": \"x\"}\n"), 8, 0);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing \"rejected\""), std::string::npos) << missing.status().ToString();
}

// Held-out examples never come out of Sample, and EvalSample walks exactly them.
TEST_F(HoldoutDataTest, HeldOutPairsAreNeverSampledForTraining) {
  auto d = Open(DataFormat::kPreference, Write("p.jsonl", Pairs(200)), 16, 0.1);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_EQ((*d)->eval_size(), 20u);
  auto prompt_of = [](const std::vector<int64_t>& x) {
    std::string p;
    for (int64_t t : x) {
      if (t == '=') break;
      p.push_back(static_cast<char>(t));
    }
    return p;
  };
  std::set<std::string> held;
  std::vector<int64_t> x(32), y(32);
  for (uint64_t j = 0; j < 20; ++j) {
    (*d)->EvalSample(j, x.data(), y.data());
    held.insert(prompt_of(x));
  }
  EXPECT_EQ(held.size(), 20u);
  std::set<std::string> trained;
  for (uint64_t i = 0; i < 20000; ++i) {
    (*d)->Sample(i, x.data(), y.data());
    trained.insert(prompt_of(x));
  }
  EXPECT_EQ(trained.size(), 180u) << "every training pair is drawn, no held-out one";
  for (const std::string& p : held) EXPECT_EQ(trained.count(p), 0u) << p;
  const std::vector<bool> mask = HoldoutMask(200, 20);
  EXPECT_EQ(std::count(mask.begin(), mask.end(), true), 20);
}

TEST_F(HoldoutDataTest, TextHoldsOutTheFileTail) {
  std::string text;
  for (int i = 0; i < 1000; ++i) text.push_back(static_cast<char>('a' + i % 26));
  auto d = Open(DataFormat::kText, Write("t.txt", text), 10, 0.1);  // the last 100 bytes
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ((*d)->eval_size(), 9u);  // (100 - 1) / 10
  std::vector<int64_t> x(10), y(10);
  (*d)->EvalSample(0, x.data(), y.data());
  EXPECT_EQ(x[0], 'a' + 900 % 26);
  auto none = Open(DataFormat::kText, Write("t.txt", text), 10, 0.005);  // 5 bytes: no eval window
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("eval.holdout"), std::string::npos) << none.status().ToString();
}

}  // namespace
}  // namespace holdfast
