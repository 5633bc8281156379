// Gloo and local communicators: ranks run as threads of this process, each
// with its own TCP store client to one server, talking over loopback.
#include "trainer/comm/communicator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <future>
#include <numeric>
#include <thread>
#include <vector>

#include "common/tcp_store.h"

namespace holdfast {
namespace {

using std::chrono::milliseconds;

#if HOLDFAST_HAVE_GLOO

class GlooTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = StartTcpStoreServer("127.0.0.1", 0);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
  }

  CommunicatorOptions Options(int rank, int world, milliseconds timeout = milliseconds(20000)) {
    auto client = ConnectTcpStore("127.0.0.1", server_->port(), milliseconds(5000));
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    CommunicatorOptions o;
    o.rank = rank;
    o.world_size = world;
    o.store = std::make_shared<PrefixStore>(GenerationPrefix(generation_), *client);
    o.timeout = timeout;
    return o;
  }

  // Runs body(rank, communicator) on `world` threads, one per rank.
  void RunRanks(int world, const std::function<void(int, Communicator&)>& body) {
    ++generation_;
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r, options = Options(r, world)] {
        auto comm = MakeGlooCommunicator(options);
        ASSERT_TRUE(comm.ok()) << comm.status().ToString();
        EXPECT_EQ((*comm)->rank(), r);
        EXPECT_EQ((*comm)->world_size(), world);
        EXPECT_STREQ((*comm)->backend(), "gloo");
        body(r, **comm);
      });
    }
    for (auto& t : threads) t.join();
  }

  std::unique_ptr<TcpStoreServer> server_;
  int generation_ = 0;
};

class GlooWorldTest : public GlooTest, public ::testing::WithParamInterface<int> {};

TEST_P(GlooWorldTest, SumAndAvgOfAMillionFloats) {
  const int world = GetParam();
  constexpr size_t kCount = 1 << 20;
  RunRanks(world, [&](int rank, Communicator& comm) {
    std::vector<float> data(kCount);
    for (size_t i = 0; i < kCount; ++i) data[i] = static_cast<float>((rank + 1) * static_cast<int>(i % 7));
    ASSERT_TRUE(comm.Allreduce(data.data(), kCount, ReduceOp::kSum).ok());
    const float ranks_sum = static_cast<float>(world * (world + 1) / 2);
    for (size_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(data[i], ranks_sum * static_cast<float>(i % 7)) << "index " << i << " rank " << rank;
    }
    for (size_t i = 0; i < kCount; ++i) data[i] = static_cast<float>(rank) + 0.5f;
    ASSERT_TRUE(comm.Allreduce(data.data(), kCount, ReduceOp::kAvg).ok());
    const float mean = static_cast<float>(world - 1) / 2.0f + 0.5f;
    for (size_t i = 0; i < kCount; ++i) ASSERT_NEAR(data[i], mean, 1e-5) << "index " << i;
  });
}

TEST_P(GlooWorldTest, AsyncBucketsIssuedBackToBackAllComplete) {
  const int world = GetParam();
  // Slices of one flat buffer, as the trainer's gradient buckets are, of unequal sizes.
  const std::vector<size_t> sizes = {1, 1000, 250000, 3, 65536, 100000, 7, 4096};
  const size_t total = std::accumulate(sizes.begin(), sizes.end(), size_t{0});
  RunRanks(world, [&](int rank, Communicator& comm) {
    std::vector<float> flat(total);
    for (int step = 0; step < 3; ++step) {  // the same buckets every step, like training
      for (size_t i = 0; i < total; ++i) flat[i] = static_cast<float>(rank + step) + static_cast<float>(i % 3);
      std::vector<std::unique_ptr<Work>> works;
      size_t offset = 0;
      for (size_t b = 0; b < sizes.size(); ++b) {
        works.push_back(comm.AllreduceAsync(flat.data() + offset, sizes[b], b % 2 ? ReduceOp::kAvg : ReduceOp::kSum));
        offset += sizes[b];
      }
      for (auto it = works.rbegin(); it != works.rend(); ++it) ASSERT_TRUE((*it)->Wait().ok());
      offset = 0;
      const float rank_sum = static_cast<float>(world * (world - 1) / 2 + world * step);
      for (size_t b = 0; b < sizes.size(); ++b) {
        for (size_t i = offset; i < offset + sizes[b]; ++i) {
          float sum = rank_sum + static_cast<float>(world) * static_cast<float>(i % 3);
          float expected = b % 2 ? sum / static_cast<float>(world) : sum;
          ASSERT_NEAR(flat[i], expected, 1e-4) << "bucket " << b << " index " << i << " step " << step;
        }
        offset += sizes[b];
      }
    }
  });
}

TEST_P(GlooWorldTest, BroadcastFromTheLastRank) {
  const int world = GetParam();
  RunRanks(world, [&](int rank, Communicator& comm) {
    std::vector<uint8_t> buf(1001, static_cast<uint8_t>(rank));
    ASSERT_TRUE(comm.Broadcast(buf.data(), buf.size(), world - 1).ok());
    for (uint8_t b : buf) ASSERT_EQ(b, world - 1);
    EXPECT_EQ(comm.Broadcast(buf.data(), buf.size(), world).code(), StatusCode::kInvalidArgument);
  });
}

TEST_P(GlooWorldTest, NoRankLeavesABarrierBeforeAllArrived) {
  const int world = GetParam();
  std::atomic<int> arrived{0};
  RunRanks(world, [&](int, Communicator& comm) {
    for (int round = 1; round <= 3; ++round) {
      arrived.fetch_add(1);
      ASSERT_TRUE(comm.Barrier().ok());
      EXPECT_GE(arrived.load(), round * world);
      ASSERT_TRUE(comm.Barrier().ok());  // nobody starts the next round early
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, GlooWorldTest, ::testing::Values(2, 3));

TEST_F(GlooTest, PeerThatNeverShowsUpFailsWithATimeoutNamingIt) {
  ++generation_;
  auto comm = MakeGlooCommunicator(Options(0, 2, milliseconds(300)));
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::kTimeout) << comm.status().ToString();
  // Rank 1's address in the store is what rank 0 waited for.
  EXPECT_NE(comm.status().message().find("waiting for rank 1"), std::string::npos) << comm.status().message();
  EXPECT_NE(comm.status().message().find("rank 0 of 2"), std::string::npos) << comm.status().message();
}

TEST_F(GlooTest, PeerThatLeavesFailsTheCollectiveAndEveryLaterOne) {
  ++generation_;
  std::promise<void> rank1_gone;
  std::thread rank1([&, options = Options(1, 2, milliseconds(2000))] {
    auto comm = MakeGlooCommunicator(options);
    ASSERT_TRUE(comm.ok()) << comm.status().ToString();
    ASSERT_TRUE((*comm)->Barrier().ok());
    comm->reset();  // the process "exits": its sockets close
    rank1_gone.set_value();
  });
  auto comm = MakeGlooCommunicator(Options(0, 2, milliseconds(2000)));
  ASSERT_TRUE(comm.ok()) << comm.status().ToString();
  ASSERT_TRUE((*comm)->Barrier().ok());
  rank1_gone.get_future().wait();
  rank1.join();
  std::vector<float> data(1000, 1.0f);
  Status s = (*comm)->Allreduce(data.data(), data.size(), ReduceOp::kSum);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kTimeout) << s.ToString();
  Status later = (*comm)->Barrier();
  EXPECT_EQ(later.code(), s.code()) << later.ToString();
  EXPECT_NE(later.message().find("was not run"), std::string::npos) << later.message();
}

TEST_F(GlooTest, BadOptionsAreRejected) {
  CommunicatorOptions o = Options(2, 2);
  EXPECT_EQ(MakeGlooCommunicator(o).status().code(), StatusCode::kInvalidArgument);
  o = Options(0, 1);
  o.store = nullptr;
  EXPECT_EQ(MakeGlooCommunicator(o).status().code(), StatusCode::kInvalidArgument);
}

#else  // !HOLDFAST_HAVE_GLOO

TEST(GlooTest, BuiltWithoutGlooSaysSo) {
  auto comm = MakeGlooCommunicator(CommunicatorOptions{});
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::kFailedPrecondition);
}

#endif

TEST(LocalCommunicatorTest, CollectivesAreTheIdentity) {
  auto comm = MakeLocalCommunicator();
  EXPECT_EQ(comm->world_size(), 1);
  std::vector<float> data = {1.5f, -2.0f};
  ASSERT_TRUE(comm->Allreduce(data.data(), data.size(), ReduceOp::kAvg).ok());
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f}));
  ASSERT_TRUE(comm->AllreduceAsync(data.data(), data.size(), ReduceOp::kSum)->Wait().ok());
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f}));
  EXPECT_TRUE(comm->Broadcast(data.data(), sizeof(float) * 2, 0).ok());
  EXPECT_TRUE(comm->Barrier().ok());
}

}  // namespace
}  // namespace holdfast
