// Gloo and local communicators: ranks run as threads of this process, each
// with its own TCP store client to one server, talking over loopback.
#include "trainer/comm/communicator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <numeric>
#include <random>
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
    auto server = StartTcpStoreServer("127.0.0.1", 0, key_);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
  }

  CommunicatorOptions Options(int rank, int world, milliseconds timeout = milliseconds(20000)) {
    auto client = ConnectTcpStore("127.0.0.1", server_->port(), key_, milliseconds(5000));
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

  const RunKey key_ = *RunKey::Generate();
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

// A pipeline's exchange: every rank sends to the next and receives from the
// previous at once (a ring, so a rank that sent before receiving would wait
// forever on Gloo's rendezvous), several messages of different sizes in a
// row, each arriving whole and in order.
TEST_F(GlooTest, SendRecvBothWaysAtOnceDeliversEveryMessageInOrder) {
  constexpr int kWorld = 3;
  RunRanks(kWorld, [&](int rank, Communicator& comm) {
    const int next = (rank + 1) % kWorld, prev = (rank + kWorld - 1) % kWorld;
    for (size_t n : {size_t{1}, size_t{1000}, size_t{0}, size_t{1} << 18}) {
      std::vector<float> out(n), in(n, -1.0f);
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(rank * 1000003 + static_cast<int>(i));
      auto work = comm.SendRecvAsync(out.data(), n * sizeof(float), next, in.data(), n * sizeof(float), prev);
      ASSERT_TRUE(work->Wait().ok()) << "rank " << rank << ", " << n << " floats";
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(in[i], static_cast<float>(prev * 1000003 + static_cast<int>(i))) << "rank " << rank << " index " << i;
      }
    }
    // One way only, then a collective: the queue goes on in issue order.
    float token = static_cast<float>(rank);
    if (rank == 0) {
      ASSERT_TRUE(comm.SendRecvAsync(&token, sizeof token, 1, nullptr, 0, -1)->Wait().ok());
    }
    if (rank == 1) {
      ASSERT_TRUE(comm.SendRecvAsync(nullptr, 0, -1, &token, sizeof token, 0)->Wait().ok());
      EXPECT_EQ(token, 0.0f);
    }
    float sum = 1.0f;
    ASSERT_TRUE(comm.Allreduce(&sum, 1, ReduceOp::kSum).ok());
    EXPECT_EQ(sum, static_cast<float>(kWorld));
  });
}

TEST_F(GlooTest, SendRecvToItselfOrOutsideTheWorldIsRefusedAndTheCommunicatorGoesOn) {
  RunRanks(2, [&](int rank, Communicator& comm) {
    float x = 0;
    Status self = comm.SendRecvAsync(&x, 4, rank, nullptr, 0, -1)->Wait();
    EXPECT_EQ(self.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(self.message().find("is not another rank of world 2"), std::string::npos) << self.message();
    EXPECT_EQ(comm.SendRecvAsync(nullptr, 0, -1, &x, 4, 7)->Wait().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(comm.SendRecvAsync(nullptr, 4, 1 - rank, nullptr, 0, -1)->Wait().code(), StatusCode::kInvalidArgument);
    float sum = 1.0f;
    ASSERT_TRUE(comm.Allreduce(&sum, 1, ReduceOp::kSum).ok());
    EXPECT_EQ(sum, 2.0f);
  });
  auto local = MakeLocalCommunicator();
  float x = 0;
  EXPECT_EQ(local->SendRecvAsync(&x, 4, 1, nullptr, 0, -1)->Wait().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(local->SendRecvAsync(nullptr, 0, -1, nullptr, 0, -1)->Wait().ok());
}

INSTANTIATE_TEST_SUITE_P(Worlds, GlooWorldTest, ::testing::Values(2, 3));

// ---- ZeRO-1's collectives: reduce-scatter, allgather, allreduce of doubles ----

// Splits of a flat buffer into per-rank parts as the trainer makes them (a
// bucket cut by each rank's slice): zeros, uneven sizes, everything in one
// rank, nothing at all, and a large uneven one.
std::vector<std::vector<size_t>> SplitsFor(int world) {
  switch (world) {
    case 2:
      return {{0, 5}, {7, 7}, {13, 0}, {0, 0}, {1, 70001}};
    case 3:
      return {{7, 7, 6}, {0, 9, 0}, {4, 0, 1}, {0, 0, 0}, {65536, 0, 100003}};
    default:
      return {{0, 5, 0, 3}, {0, 0, 11, 0}, {3, 3, 3, 2}, {0, 0, 0, 0}, {0, 65536, 1, 100003}};
  }
}

std::vector<size_t> Offsets(const std::vector<size_t>& counts) {
  std::vector<size_t> offsets(counts.size(), 0);
  for (size_t r = 1; r < counts.size(); ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  return offsets;
}

size_t Total(const std::vector<size_t>& counts) { return std::accumulate(counts.begin(), counts.end(), size_t{0}); }

// Small integers, so every sum over ranks is exact in float32 whatever its order.
float RankValue(int rank, size_t i) { return static_cast<float>((rank + 1) * 100 + static_cast<int>(i % 61)); }
float SumOverRanks(int world, size_t i) {
  return static_cast<float>(100 * world * (world + 1) / 2 + world * static_cast<int>(i % 61));
}

class GlooShardedTest : public GlooTest, public ::testing::WithParamInterface<int> {};

TEST_P(GlooShardedTest, ReduceScatterLeavesEachRankTheSumOfItsOwnPart) {
  const int world = GetParam();
  RunRanks(world, [&](int rank, Communicator& comm) {
    for (const std::vector<size_t>& counts : SplitsFor(world)) {
      const size_t begin = Offsets(counts)[rank];
      const size_t end = begin + counts[rank];
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        std::vector<float> data(Total(counts));
        for (size_t i = 0; i < data.size(); ++i) data[i] = RankValue(rank, i);
        Status s = comm.ReduceScatterAsync(data.data(), counts, op)->Wait();
        ASSERT_TRUE(s.ok()) << s.ToString();
        for (size_t i = begin; i < end; ++i) {
          // kAvg scales the exact sum by 1/world, as Allreduce does.
          const float expected =
              op == ReduceOp::kSum ? SumOverRanks(world, i) : SumOverRanks(world, i) * (1.0f / static_cast<float>(world));
          ASSERT_EQ(data[i], expected) << "index " << i << " rank " << rank << " parts " << ::testing::PrintToString(counts)
                                       << (op == ReduceOp::kSum ? " sum" : " avg");
        }
      }
    }
  });
}

TEST_P(GlooShardedTest, AllgatherGivesEveryRankEveryPart) {
  const int world = GetParam();
  RunRanks(world, [&](int rank, Communicator& comm) {
    for (const std::vector<size_t>& counts : SplitsFor(world)) {
      const std::vector<size_t> offsets = Offsets(counts);
      std::vector<float> data(Total(counts), -1.0f);  // other ranks' parts start as garbage
      for (size_t i = offsets[rank]; i < offsets[rank] + counts[rank]; ++i) data[i] = RankValue(rank, i);
      Status s = comm.AllgatherAsync(data.data(), counts)->Wait();
      ASSERT_TRUE(s.ok()) << s.ToString();
      for (int owner = 0; owner < world; ++owner) {
        for (size_t i = offsets[owner]; i < offsets[owner] + counts[owner]; ++i) {
          ASSERT_EQ(data[i], RankValue(owner, i)) << "index " << i << " of rank " << owner << "'s part, on rank " << rank
                                                  << ", parts " << ::testing::PrintToString(counts);
        }
      }
    }
  });
}

TEST_P(GlooShardedTest, AllreduceDoublesSumsExactlyOnEveryRank) {
  const int world = GetParam();
  RunRanks(world, [&](int rank, Communicator& comm) {
    // Large integers and halves: exact in float64, not in float32.
    std::vector<double> data = {1e15 + rank, 0.5 * (rank + 1), -3.0 * rank, 0.0};
    ASSERT_TRUE(comm.AllreduceDoubles(data.data(), data.size(), ReduceOp::kSum).ok());
    const double ranks = world * (world - 1) / 2.0;  // sum of rank numbers
    EXPECT_EQ(data[0], 1e15 * world + ranks);
    EXPECT_EQ(data[1], 0.5 * (ranks + world));
    EXPECT_EQ(data[2], -3.0 * ranks);
    EXPECT_EQ(data[3], 0.0);
    std::vector<double> avg = {static_cast<double>(rank), 2.0};
    ASSERT_TRUE(comm.AllreduceDoubles(avg.data(), avg.size(), ReduceOp::kAvg).ok());
    EXPECT_EQ(avg[0], ranks / world);
    EXPECT_EQ(avg[1], 2.0);
    EXPECT_TRUE(comm.AllreduceDoubles(nullptr, 0, ReduceOp::kSum).ok());
  });
}

TEST_P(GlooShardedTest, InterleavedWithAllreducesTheyRunInIssueOrder) {
  const int world = GetParam();
  const std::vector<size_t> counts = SplitsFor(world).back();
  RunRanks(world, [&](int rank, Communicator& comm) {
    std::vector<float> flat(Total(counts));
    std::vector<float> other(1000);
    for (int step = 0; step < 2; ++step) {
      for (size_t i = 0; i < flat.size(); ++i) flat[i] = RankValue(rank, i);
      for (size_t i = 0; i < other.size(); ++i) other[i] = static_cast<float>(rank + 1);
      // Reduce-scatter then allgather of the same buffer is an allreduce, but
      // only if the allgather runs after the reduce-scatter; the two
      // allreduces of `other` in between must not overtake either.
      std::vector<std::unique_ptr<Work>> works;
      works.push_back(comm.AllreduceAsync(other.data(), other.size(), ReduceOp::kSum));
      works.push_back(comm.ReduceScatterAsync(flat.data(), counts, ReduceOp::kSum));
      works.push_back(comm.AllreduceAsync(other.data(), other.size(), ReduceOp::kSum));
      works.push_back(comm.AllgatherAsync(flat.data(), counts));
      for (auto it = works.rbegin(); it != works.rend(); ++it) ASSERT_TRUE((*it)->Wait().ok());
      double loss = rank + 1;
      ASSERT_TRUE(comm.AllreduceDoubles(&loss, 1, ReduceOp::kSum).ok());
      EXPECT_EQ(loss, world * (world + 1) / 2.0);
      for (size_t i = 0; i < flat.size(); ++i) ASSERT_EQ(flat[i], SumOverRanks(world, i)) << "index " << i;
      const float twice = static_cast<float>(world * world * (world + 1) / 2);
      for (size_t i = 0; i < other.size(); ++i) ASSERT_EQ(other[i], twice) << "index " << i;
    }
  });
}

TEST_P(GlooShardedTest, ReduceScatterGivesTheSameBitsEveryRun) {
  const int world = GetParam();
  const std::vector<size_t> counts = SplitsFor(world).back();
  // Mixed magnitudes and signs, so that the order of the additions shows in the bits.
  auto fill = [&](int rank, std::vector<float>& data) {
    std::mt19937 gen(1234 + rank);
    std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
    std::uniform_int_distribution<int> exponent(-12, 12);
    for (float& x : data) x = std::ldexp(mantissa(gen), exponent(gen));
  };
  // results[run][rank]: the rank's own part after the collective.
  std::vector<std::vector<std::vector<float>>> results(3, std::vector<std::vector<float>>(world));
  auto run = [&](int first_run, int runs) {
    RunRanks(world, [&](int rank, Communicator& comm) {
      const size_t begin = Offsets(counts)[rank];
      std::vector<float> data(Total(counts));
      for (int r = first_run; r < first_run + runs; ++r) {
        fill(rank, data);
        ASSERT_TRUE(comm.ReduceScatterAsync(data.data(), counts, ReduceOp::kAvg)->Wait().ok());
        results[r][rank].assign(data.begin() + begin, data.begin() + begin + counts[rank]);
      }
    });
  };
  run(0, 2);  // twice on one communicator
  run(2, 1);  // and once more on fresh connections
  for (int rank = 0; rank < world; ++rank) {
    ASSERT_EQ(results[0][rank].size(), counts[rank]);
    for (int r = 1; r < 3; ++r) {
      ASSERT_EQ(results[r][rank].size(), counts[rank]);
      if (counts[rank] == 0) continue;  // an empty part: nothing to compare (and data() may be null)
      EXPECT_EQ(std::memcmp(results[r][rank].data(), results[0][rank].data(), counts[rank] * sizeof(float)), 0)
          << "rank " << rank << ", run " << r << " differs from run 0";
    }
  }
}

TEST_P(GlooShardedTest, CountsNotOnePerRankAreRefusedAndTheCommunicatorStaysUsable) {
  const int world = GetParam();
  RunRanks(world, [&](int rank, Communicator& comm) {
    std::vector<float> data(16, 1.0f);
    for (const std::vector<size_t>& bad : {std::vector<size_t>{}, std::vector<size_t>(world - 1, 2),
                                           std::vector<size_t>(world + 1, 2)}) {
      Status rs = comm.ReduceScatterAsync(data.data(), bad, ReduceOp::kSum)->Wait();
      EXPECT_EQ(rs.code(), StatusCode::kInvalidArgument) << rs.ToString();
      EXPECT_NE(rs.message().find("one per rank"), std::string::npos) << rs.message();
      Status ag = comm.AllgatherAsync(data.data(), bad)->Wait();
      EXPECT_EQ(ag.code(), StatusCode::kInvalidArgument) << ag.ToString();
    }
    Status null_data = comm.ReduceScatterAsync(nullptr, std::vector<size_t>(world, 1), ReduceOp::kSum)->Wait();
    EXPECT_EQ(null_data.code(), StatusCode::kInvalidArgument) << null_data.ToString();
    // Nothing was queued: the ranks still agree on what comes next.
    ASSERT_TRUE(comm.Allreduce(data.data(), data.size(), ReduceOp::kSum).ok());
    for (float x : data) ASSERT_EQ(x, static_cast<float>(world));
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, GlooShardedTest, ::testing::Values(2, 3, 4));

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

TEST_F(GlooTest, PeerThatLeavesFailsTheReduceScatterOfEverySurvivor) {
  ++generation_;
  constexpr int kWorld = 3;
  const std::vector<size_t> counts = {300, 0, 500};
  std::promise<void> rank2_gone;
  std::shared_future<void> gone = rank2_gone.get_future().share();
  std::vector<Status> results(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r, options = Options(r, kWorld, milliseconds(2000))] {
      if (r == 2) {
        {
          auto comm = MakeGlooCommunicator(options);
          EXPECT_TRUE(comm.ok()) << comm.status().ToString();
          if (comm.ok()) {
            EXPECT_TRUE((*comm)->Barrier().ok());
          }
        }  // the process "exits" mid-training: its sockets close
        rank2_gone.set_value();
        return;
      }
      auto comm = MakeGlooCommunicator(options);
      ASSERT_TRUE(comm.ok()) << comm.status().ToString();
      ASSERT_TRUE((*comm)->Barrier().ok());
      gone.wait();
      std::vector<float> data(Total(counts), 1.0f);
      results[r] = (*comm)->ReduceScatterAsync(data.data(), counts, ReduceOp::kSum)->Wait();
      // Once failed, the communicator says so for everything after it.
      Status later = (*comm)->AllgatherAsync(data.data(), counts)->Wait();
      EXPECT_EQ(later.code(), results[r].code()) << later.ToString();
      EXPECT_NE(later.message().find("was not run"), std::string::npos) << later.message();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    const Status& s = results[r];
    ASSERT_FALSE(s.ok()) << "rank " << r;
    EXPECT_TRUE(s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kTimeout) << s.ToString();
    EXPECT_NE(s.message().find("reduce-scatter"), std::string::npos) << s.message();
  }
}

TEST_F(GlooTest, PeerThatNeverJoinsTheReduceScatterTimesOut) {
  ++generation_;
  std::promise<void> rank0_done;
  std::thread rank1([&, options = Options(1, 2, milliseconds(1500))] {
    auto comm = MakeGlooCommunicator(options);
    ASSERT_TRUE(comm.ok()) << comm.status().ToString();
    ASSERT_TRUE((*comm)->Barrier().ok());
    rank0_done.get_future().wait();  // alive and connected, but never issues the collective
  });
  auto comm = MakeGlooCommunicator(Options(0, 2, milliseconds(1500)));
  ASSERT_TRUE(comm.ok()) << comm.status().ToString();
  ASSERT_TRUE((*comm)->Barrier().ok());
  std::vector<float> data(8, 1.0f);
  Status s = (*comm)->ReduceScatterAsync(data.data(), {4, 4}, ReduceOp::kSum)->Wait();
  rank0_done.set_value();
  rank1.join();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.ToString();
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
  ASSERT_TRUE(comm->ReduceScatterAsync(data.data(), {2}, ReduceOp::kAvg)->Wait().ok());
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f}));
  ASSERT_TRUE(comm->AllgatherAsync(data.data(), {2})->Wait().ok());
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f}));
  std::vector<double> doubles = {0.25, 3.0};
  ASSERT_TRUE(comm->AllreduceDoubles(doubles.data(), doubles.size(), ReduceOp::kAvg).ok());
  EXPECT_EQ(doubles, (std::vector<double>{0.25, 3.0}));
  EXPECT_EQ(comm->ReduceScatterAsync(data.data(), {1, 1}, ReduceOp::kSum)->Wait().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(comm->AllgatherAsync(data.data(), {})->Wait().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace holdfast
