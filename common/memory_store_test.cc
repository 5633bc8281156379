#include "common/memory_store.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

namespace holdfast {
namespace {

using std::chrono::milliseconds;

std::vector<uint8_t> Bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

TEST(InMemoryStoreTest, SetThenGet) {
  InMemoryStore store;
  ASSERT_TRUE(store.Set("a", Bytes("1")).ok());
  auto v = store.Get("a", milliseconds(0));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, Bytes("1"));
  EXPECT_TRUE(*store.Check("a"));
  EXPECT_FALSE(*store.Check("b"));
  ASSERT_TRUE(store.Delete("a").ok());
  EXPECT_FALSE(*store.Check("a"));
  EXPECT_TRUE(store.Delete("never").ok());
}

TEST(InMemoryStoreTest, HugeTimeoutsDoNotOverflow) {
  InMemoryStore store;
  ASSERT_TRUE(store.Set("a", Bytes("1")).ok());
  EXPECT_TRUE(store.Get("a", milliseconds::max()).ok());
  EXPECT_TRUE(store.Wait({"a"}, milliseconds::max()).ok());
  EXPECT_EQ(store.Get("b", milliseconds::min()).status().code(), StatusCode::kTimeout);
}

TEST(InMemoryStoreTest, GetTimeoutNamesKey) {
  InMemoryStore store;
  auto v = store.Get("missing/key", milliseconds(20));
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kTimeout);
  EXPECT_NE(v.status().message().find("missing/key"), std::string::npos);
}

TEST(InMemoryStoreTest, GetWakesWhenAnotherThreadSets) {
  InMemoryStore store;
  std::thread setter([&] { ASSERT_TRUE(store.Set("late", Bytes("x")).ok()); });
  auto v = store.Get("late", milliseconds(30000));
  setter.join();
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, Bytes("x"));
}

TEST(InMemoryStoreTest, WaitOnSeveralKeysNamesTheMissingOne) {
  InMemoryStore store;
  ASSERT_TRUE(store.Set("k1", Bytes("")).ok());
  Status s = store.Wait({"k1", "k2"}, milliseconds(20));
  EXPECT_EQ(s.code(), StatusCode::kTimeout);
  EXPECT_NE(s.message().find("k2"), std::string::npos);
  std::thread setter([&] { ASSERT_TRUE(store.Set("k2", Bytes("")).ok()); });
  EXPECT_TRUE(store.Wait({"k1", "k2"}, milliseconds(30000)).ok());
  setter.join();
}

TEST(InMemoryStoreTest, AddIsAtomicAcrossThreads) {
  InMemoryStore store;
  constexpr int kThreads = 4, kAdds = 1000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kAdds; ++i) ASSERT_TRUE(store.Add("n", 1).ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(*store.Add("n", 0), kThreads * kAdds);
  EXPECT_EQ(*store.Get("n", milliseconds(0)), Bytes(std::to_string(kThreads * kAdds)));
}

TEST(InMemoryStoreTest, AddOnNonCounterFails) {
  InMemoryStore store;
  ASSERT_TRUE(store.Set("blob", Bytes("abc")).ok());
  auto r = store.Add("blob", 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("blob"), std::string::npos);
}

TEST(PrefixStoreTest, GenerationsDoNotSeeEachOther) {
  auto base = std::make_shared<InMemoryStore>();
  PrefixStore g1(GenerationPrefix(1), base);
  PrefixStore g2(GenerationPrefix(2), base);
  ASSERT_TRUE(g1.Set("rank0", Bytes("old")).ok());
  EXPECT_FALSE(*g2.Check("rank0"));
  EXPECT_EQ(g2.Get("rank0", milliseconds(10)).status().code(), StatusCode::kTimeout);
  EXPECT_EQ(*g1.Add("count", 5), 5);
  EXPECT_EQ(*g2.Add("count", 1), 1);
  EXPECT_TRUE(*base->Check("g1/rank0"));
  EXPECT_EQ(g2.Wait({"rank0"}, milliseconds(10)).code(), StatusCode::kTimeout);
  ASSERT_TRUE(g2.Set("rank0", Bytes("new")).ok());
  EXPECT_EQ(*g1.Get("rank0", milliseconds(0)), Bytes("old"));
  EXPECT_EQ(*g2.Get("rank0", milliseconds(0)), Bytes("new"));
}

}  // namespace
}  // namespace holdfast
