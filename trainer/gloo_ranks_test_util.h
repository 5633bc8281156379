// Test helper: ranks as threads of one test process, bootstrapped through one
// TCP store over loopback (the tensor-parallel and pipeline tests).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "common/tcp_store.h"
#include "trainer/comm/communicator.h"

namespace holdfast {

// Runs body(rank, options) on `size` threads; options name the rank, the
// world of `size` and a client of one store (30 s communicator timeout).
inline void RunStoreRanks(int size, const std::function<void(int, const CommunicatorOptions&)>& body) {
  const RunKey key = *RunKey::Generate();
  auto server = StartTcpStoreServer("127.0.0.1", 0, key);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  std::vector<std::thread> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.emplace_back([&, r] {
      auto client = ConnectTcpStore("127.0.0.1", (*server)->port(), key, std::chrono::milliseconds(5000));
      ASSERT_TRUE(client.ok()) << client.status().ToString();
      CommunicatorOptions o;
      o.rank = r;
      o.world_size = size;
      o.store = *client;
      o.timeout = std::chrono::milliseconds(30000);
      body(r, o);
    });
  }
  for (auto& t : ranks) t.join();
}

// The same with one Gloo group of the whole `size`: body(rank, group). The
// ranks meet in a barrier before the group is destroyed: Gloo's rendezvous can
// return on one rank while a peer still reads its handshake, so a body that
// runs no collective (a refusal) would close the pairs under that peer.
inline void RunGlooRanks(int size, const std::function<void(int, Communicator&)>& body) {
  RunStoreRanks(size, [&](int r, const CommunicatorOptions& o) {
    auto group = MakeGlooCommunicator(o);
    ASSERT_TRUE(group.ok()) << group.status().ToString();
    body(r, **group);
    const Status met = (*group)->Barrier();
    EXPECT_TRUE(met.ok()) << met.ToString();
  });
}

}  // namespace holdfast
