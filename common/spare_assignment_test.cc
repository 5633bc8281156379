#include "common/spare_assignment.h"

#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "common/launch_contract.h"

namespace holdfast {
namespace {

SpareAssignment Valid() {
  SpareAssignment a;
  a.log_path = "/run/x/logs/a0-g1-rank1.log";
  a.env[kEnvRank] = "1";
  a.env[kEnvWorldSize] = "2";
  a.env[kEnvGeneration] = "1";
  a.env[kEnvProgressPath] = "/dev/shm/holdfast-r-a0-g1-r1.rec";
  a.env[kEnvStoreAddr] = "10.0.0.1:2999";
  a.env["MASTER_ADDR"] = "10.0.0.1";
  a.env["EMPTY"] = "";
  a.env["WITH_EQUALS"] = "a=b=c";
  return a;
}

std::string Encoded(const SpareAssignment& a) {
  Result<std::string> text = EncodeSpareAssignment(a);
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  return text.ok() ? *text : "";
}

TEST(SpareAssignmentTest, RoundTrips) {
  Result<SpareAssignment> back = ParseSpareAssignment(Encoded(Valid()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->log_path, Valid().log_path);
  EXPECT_EQ(back->env, Valid().env);
}

// Each malformed assignment is refused, and the message names what is wrong.
TEST(SpareAssignmentTest, MalformedIsRefusedWithTheReason) {
  const std::string good = Encoded(Valid());
  auto without = [&](const std::string& line) {
    std::string t = good;
    t.erase(t.find(line), line.size() + 1);
    return t;
  };
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  const std::pair<std::string, std::string> cases[] = {
      {"", "empty"},
      {"holdfast-spare-assignment 2\nend\n", "expected 'holdfast-spare-assignment 1'"},
      {good.substr(0, good.size() - 4), "no 'end' line"},
      {good.substr(0, good.size() - 1), "the last line has no newline"},
      {good + "env X=1\n", "text after 'end'"},
      {replaced("env EMPTY=", "rank 3"), "expected 'log PATH', 'env KEY=VALUE' or 'end'"},
      {replaced("env EMPTY=", "env 1X="), "expected 'env KEY=VALUE'"},
      {replaced("env EMPTY=", "env EMPTYNOEQUALS"), "expected 'env KEY=VALUE'"},
      {replaced("env EMPTY=", "env MASTER_ADDR=x"), "the key is given twice"},
      {without("log /run/x/logs/a0-g1-rank1.log"), "no 'log PATH' line"},
      {replaced("log /run", "log run"), "the log path must be absolute"},
      {replaced("log /run/x/logs/a0-g1-rank1.log", "log /a\nlog /b"), "a second 'log' line"},
      {without("env HOLDFAST_RANK=1"), "no HOLDFAST_RANK"},
      {without("env HOLDFAST_PROGRESS_PATH=/dev/shm/holdfast-r-a0-g1-r1.rec"), "no HOLDFAST_PROGRESS_PATH"},
      {replaced("HOLDFAST_RANK=1", "HOLDFAST_RANK=2"), "HOLDFAST_RANK '2' is not in 0..1"},
      {replaced("HOLDFAST_RANK=1", "HOLDFAST_RANK=-1"), "is not in 0..1"},
      {replaced("HOLDFAST_RANK=1", "HOLDFAST_RANK=1x"), "is not in 0..1"},
      {replaced("HOLDFAST_WORLD_SIZE=2", "HOLDFAST_WORLD_SIZE=0"), "is not a count >= 1"},
      {replaced("HOLDFAST_GENERATION=1", "HOLDFAST_GENERATION=g1"), "is not a generation"},
      {std::string(kMaxSpareAssignmentBytes + 1, 'x'), "over 64 KiB"},
  };
  for (const auto& [text, why] : cases) {
    Result<SpareAssignment> r = ParseSpareAssignment(text);
    ASSERT_FALSE(r.ok()) << "accepted: " << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("malformed spare assignment"), std::string::npos);
  }
}

TEST(SpareAssignmentTest, EncodeRefusesWhatCannotTravel) {
  SpareAssignment a = Valid();
  a.env["BAD"] = "two\nlines";
  EXPECT_FALSE(EncodeSpareAssignment(a).ok());
  a = Valid();
  a.env["NOT A NAME"] = "x";
  EXPECT_FALSE(EncodeSpareAssignment(a).ok());
  a = Valid();
  a.log_path = "logs/relative.log";
  EXPECT_FALSE(EncodeSpareAssignment(a).ok());
}

// Over a real socketpair: written in pieces, read whole; EOF first = released;
// EOF half-way = an I/O error, not a half-applied assignment.
TEST(SpareAssignmentTest, ReadsFromAFd) {
  const std::string text = Encoded(Valid());
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  std::thread writer([&] {
    for (size_t i = 0; i < text.size(); i += 7) (void)!::write(sv[1], text.data() + i, std::min<size_t>(7, text.size() - i));
  });
  Result<SpareAssignment> a = ReadSpareAssignment(sv[0]);
  writer.join();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->env.at(kEnvRank), "1");
  ::close(sv[0]);
  ::close(sv[1]);

  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  ::close(sv[1]);
  EXPECT_EQ(ReadSpareAssignment(sv[0]).status().code(), StatusCode::kNotFound);
  ::close(sv[0]);

  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  ASSERT_EQ(::write(sv[1], text.data(), 20), 20);
  ::close(sv[1]);
  EXPECT_EQ(ReadSpareAssignment(sv[0]).status().code(), StatusCode::kIoError);
  ::close(sv[0]);
}

}  // namespace
}  // namespace holdfast
