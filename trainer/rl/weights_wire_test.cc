// Policy weights over the network (weights_wire.h) in one process, over real
// sockets: a subscriber gets each newer version as soon as it is published
// and only then, verified; one without the run's key gets nothing; a server
// that goes away takes its versions with it, and a new one (a restarted
// learner, maybe at an older version) is followed through the address file.
#include "trainer/rl/weights_wire.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/atomic_file.h"

namespace holdfast::rl {
namespace {

class TempDir {
 public:
  TempDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "weights_wire_test_XXXXXX").string();
    path_ = mkdtemp(templ.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

RunKey Key() { return *RunKey::Generate(); }

// A dump of two tensors whose values say which version they are.
std::shared_ptr<const ParamsDump> Shared(ParamsDump d) { return std::make_shared<const ParamsDump>(std::move(d)); }
ParamsDump Dump(int64_t version, size_t floats = 1000) {
  ParamsDump d;
  std::vector<float> a(floats), b(6);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(version) + static_cast<float>(i) * 1e-3f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = -static_cast<float>(version);
  d.Add("wte.weight", {static_cast<int64_t>(floats / 10), 10}, a.data(), static_cast<int64_t>(floats));
  d.Add("ln_f.bias", {6}, b.data(), 6);
  return d;
}

// Waits (a backstop of 60 s, not a timing assertion) for the subscriber to hold `version`.
std::optional<ReceivedWeights> WaitFor(const WeightsSubscriber& s, int64_t version) {
  for (int i = 0; i < 6000; ++i) {
    auto got = s.Latest();
    if (got && got->version == version) return got;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return s.Latest();
}

void Advertise(const WeightsServer& server, const std::string& file) {
  ASSERT_TRUE(WriteFileAtomically(file, server.address().ToString() + "\n").ok());
}

TEST(WeightsWireTest, EachNewerVersionReachesEverySubscriberWhole) {
  TempDir dir;
  const RunKey key = Key();
  auto server = WeightsServer::Start("127.0.0.1", key);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  Advertise(**server, dir / "weights.addr");
  WeightsSubscriber a(dir / "weights.addr", key), b(dir / "weights.addr", key);
  EXPECT_FALSE(a.Latest()) << "nothing published yet";
  (*server)->Publish(0, Shared(Dump(0)));
  (*server)->Publish(1, Shared(Dump(1)));  // before anyone asked: only the newest is sent
  for (WeightsSubscriber* s : {&a, &b}) {
    auto got = WaitFor(*s, 1);
    ASSERT_TRUE(got && got->version == 1);
    const ParamsDump want = Dump(1);
    EXPECT_EQ(got->dump->data, want.data);
    ASSERT_EQ(got->dump->tensors.size(), 2u);
    EXPECT_EQ(got->dump->tensors[0].name, "wte.weight");
    EXPECT_EQ(got->dump->tensors[0].shape, (std::vector<int64_t>{100, 10}));
    EXPECT_EQ(got->from, (*server)->address().ToString());
  }
  // A large version (40 MB) goes out the same way.
  (*server)->Publish(7, Shared(Dump(7, 10'000'000)));
  auto big = WaitFor(a, 7);
  ASSERT_TRUE(big && big->version == 7);
  EXPECT_EQ(big->dump->data.size(), 10'000'006u);
  EXPECT_EQ(big->dump->data[9'999'999], 7.0f + 9'999'999 * 1e-3f);
  ASSERT_TRUE(WaitFor(b, 7));
  EXPECT_EQ(a.connects(), 1u);
  // Counted once the last byte is handed to the kernel: the subscriber may have it before.
  for (int i = 0; i < 6000 && (*server)->sent() < 4; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_GE((*server)->sent(), 4u);
}

// This process's virtual size (/proc/self/status VmSize), in kB: a thread
// that ended but was never joined keeps its stack (8 MB) mapped.
int64_t VirtualKb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmSize:", 0) == 0) return std::stoll(line.substr(7));
  }
  return -1;
}

TEST(WeightsWireTest, APeerWithoutTheRunsKeyGetsNothing) {
  TempDir dir;
  auto server = WeightsServer::Start("127.0.0.1", Key());
  ASSERT_TRUE(server.ok());
  Advertise(**server, dir / "weights.addr");
  (*server)->Publish(3, Shared(Dump(3)));
  WeightsSubscriber stranger(dir / "weights.addr", Key());
  for (int i = 0; i < 50 && stranger.connects() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_GE(stranger.connects(), 1u);
  EXPECT_FALSE(stranger.Latest()) << "weights went to a peer that does not hold the run's key";
  EXPECT_EQ((*server)->sent(), 0u);
  // It keeps coming back; the server does not keep a thread per attempt.
  const int64_t kb = VirtualKb();
  const uint64_t before = stranger.connects();
  for (int i = 0; i < 3000 && stranger.connects() < before + 12; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GE(stranger.connects(), before + 12);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)  // they map memory of their own per thread
  EXPECT_LT(VirtualKb() - kb, 3 * 8192) << "finished subscriber threads were left unjoined (their stacks stay mapped)";
#else
  (void)kb;
#endif
}

TEST(WeightsWireTest, ALostServerTakesItsVersionsAndTheNextOneIsFollowed) {
  TempDir dir;
  const RunKey key = Key();
  auto first = WeightsServer::Start("127.0.0.1", key);
  ASSERT_TRUE(first.ok());
  Advertise(**first, dir / "weights.addr");
  WeightsSubscriber s(dir / "weights.addr", key);
  (*first)->Publish(9, Shared(Dump(9)));
  ASSERT_TRUE(WaitFor(s, 9));
  first->reset();  // the learner died
  for (int i = 0; i < 6000 && s.Latest(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(s.Latest()) << "versions of a server that is gone are no longer the policy";
  // A restarted learner resumed from step 5: its server publishes version 5.
  auto second = WeightsServer::Start("127.0.0.1", key);
  ASSERT_TRUE(second.ok());
  Advertise(**second, dir / "weights.addr");
  (*second)->Publish(5, Shared(Dump(5)));
  auto got = WaitFor(s, 5);
  ASSERT_TRUE(got && got->version == 5);
  EXPECT_EQ(got->dump->data, Dump(5).data);
  EXPECT_GE(s.connects(), 2u);
}

}  // namespace
}  // namespace holdfast::rl
