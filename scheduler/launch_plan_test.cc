#include "scheduler/launch_plan.h"

#include <gtest/gtest.h>

namespace holdfast {
namespace {

Allocation Nodes(const std::vector<std::string>& hosts) {
  Allocation a;
  for (const std::string& h : hosts) a.nodes.push_back({h, ""});
  return a;
}

TEST(LaunchPlanTest, OneNodeOneRankOnTheCpu) {
  Result<LaunchPlan> p = MakeLaunchPlan(Nodes({"box"}), 1, {});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->world_size, 1);
  EXPECT_EQ(p->nproc_per_node, 1);
  ASSERT_EQ(p->ranks.size(), 1u);
  const RankPlacement& r = p->ranks[0];
  EXPECT_EQ(r.global_rank, 0);
  EXPECT_EQ(r.local_rank, 0);
  EXPECT_EQ(r.node, 0);
  EXPECT_EQ(r.host, "box");
  EXPECT_EQ(r.device, -1);
}

TEST(LaunchPlanTest, TwoNodesOfFourGpus) {
  Result<LaunchPlan> p = MakeLaunchPlan(Nodes({"gpu-a1", "gpu-a2"}), 4, {0, 1, 2, 3});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->world_size, 8);
  struct Row {
    int global, local, node;
    const char* host;
    int device;
  };
  const Row want[] = {
      {0, 0, 0, "gpu-a1", 0}, {1, 1, 0, "gpu-a1", 1}, {2, 2, 0, "gpu-a1", 2}, {3, 3, 0, "gpu-a1", 3},
      {4, 0, 1, "gpu-a2", 0}, {5, 1, 1, "gpu-a2", 1}, {6, 2, 1, "gpu-a2", 2}, {7, 3, 1, "gpu-a2", 3},
  };
  ASSERT_EQ(p->ranks.size(), 8u);
  for (const Row& w : want) {
    const RankPlacement* r = p->ForRank(w.global);
    ASSERT_NE(r, nullptr) << w.global;
    EXPECT_EQ(r->global_rank, w.global);
    EXPECT_EQ(r->local_rank, w.local) << w.global;
    EXPECT_EQ(r->node, w.node) << w.global;
    EXPECT_EQ(r->host, w.host) << w.global;
    EXPECT_EQ(r->device, w.device) << w.global;
    EXPECT_EQ(p->HostOf(w.global), w.host);
  }
  std::vector<RankPlacement> second = p->ForNode(1);
  ASSERT_EQ(second.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(second[static_cast<size_t>(i)].local_rank, i);
    EXPECT_EQ(second[static_cast<size_t>(i)].global_rank, 4 + i);
  }
  EXPECT_TRUE(p->ForNode(2).empty());
  EXPECT_EQ(p->ForRank(8), nullptr);
  EXPECT_EQ(p->ForRank(-1), nullptr);
  EXPECT_EQ(p->HostOf(8), "");
}

TEST(LaunchPlanTest, FewerRanksThanGpusUsesTheFirstOnes) {
  Result<LaunchPlan> p = MakeLaunchPlan(Nodes({"gpu-a1"}), 2, {0, 1, 2, 3});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->ranks[0].device, 0);
  EXPECT_EQ(p->ranks[1].device, 1);
}

TEST(LaunchPlanTest, MoreRanksThanGpusIsAnError) {
  Result<LaunchPlan> p = MakeLaunchPlan(Nodes({"gpu-a1"}), 4, {0, 1});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("set nproc to at most 2"), std::string::npos) << p.status().message();
}

TEST(LaunchPlanTest, BadShapesAreErrors) {
  EXPECT_EQ(MakeLaunchPlan(Nodes({}), 1, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeLaunchPlan(Nodes({"a"}), 0, {}).status().code(), StatusCode::kInvalidArgument);
}

// An elastic run without node 1 of three, then with node 3 (a spare) in its
// place: ranks numbered along the active nodes, nodes keep their indexes.
TEST(LaunchPlanTest, ActiveNodesOnlyNumberedInTheOrderGiven) {
  const Allocation a = Nodes({"n0", "n1", "n2", "n3"});
  Result<LaunchPlan> p = MakeLaunchPlan(a, 2, {}, {0, 2});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->world_size, 4);
  EXPECT_EQ(p->HostOf(0), "n0");
  EXPECT_EQ(p->HostOf(1), "n0");
  EXPECT_EQ(p->HostOf(2), "n2");
  EXPECT_EQ(p->HostOf(3), "n2");
  EXPECT_TRUE(p->ForNode(1).empty());
  ASSERT_EQ(p->ForNode(2).size(), 2u);
  EXPECT_EQ(p->ForNode(2)[0].global_rank, 2);
  EXPECT_EQ(p->ForNode(2)[1].local_rank, 1);
  Result<LaunchPlan> q = MakeLaunchPlan(a, 1, {}, {0, 3, 2});
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->HostOf(1), "n3");
  EXPECT_EQ(q->ForNode(3)[0].node, 3);
  EXPECT_FALSE(MakeLaunchPlan(a, 1, {}, {}).ok());
  EXPECT_FALSE(MakeLaunchPlan(a, 1, {}, {0, 4}).ok());
  EXPECT_FALSE(MakeLaunchPlan(a, 1, {}, {2, 2}).ok());
  EXPECT_FALSE(MakeLaunchPlan(a, 1, {}, {-1}).ok());
}

TEST(ParseVisibleDevicesTest, GoodLists) {
  struct Case {
    const char* env;
    std::vector<int> want;
  };
  const Case cases[] = {
      {"0", {0}},
      {"0,1,3", {0, 1, 2}},  // CUDA renumbers what is visible: a rank uses ordinals 0..n-1
      {"2,3", {0, 1}},
      {" 0 , 1 ", {0, 1}},
      {"GPU-8f2e0c4a-1111-2222-3333-444455556666,GPU-11ab0c4a-1111-2222-3333-444455556666", {0, 1}},
      {"MIG-5c5e1a2b-aaaa-bbbb-cccc-ddddeeeeffff", {0}},
      {"1,GPU-8f2e0c4a-1111-2222-3333-444455556666", {0, 1}},
      {"", {}},
      {"-1", {}},
      {"0,1,-1,2", {0, 1}},  // CUDA stops at -1
  };
  for (const Case& c : cases) {
    Result<std::vector<int>> got = ParseVisibleDevices(c.env);
    ASSERT_TRUE(got.ok()) << "'" << c.env << "': " << got.status().ToString();
    EXPECT_EQ(*got, c.want) << "'" << c.env << "'";
  }
}

TEST(ParseVisibleDevicesTest, UnsetIsUnknown) {
  Result<std::vector<int>> got = ParseVisibleDevices(nullptr);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kNotFound);
}

TEST(ParseVisibleDevicesTest, BadListsSayWhatIsWrong) {
  struct Case {
    const char* env;
    const char* mentions;
  };
  const Case cases[] = {
      {"0,,1", "empty entry at position 1"},
      {"0,", "empty entry"},
      {"gpu0", "'gpu0' is neither a device index"},
      {"-2", "'-2' is neither"},
      {"1.5", "'1.5' is neither"},
      {"0,1,0", "'0' is listed twice"},
      {"GPU-", "UUID prefix with no id"},
      {"99999999999", "is neither"},
  };
  for (const Case& c : cases) {
    Result<std::vector<int>> got = ParseVisibleDevices(c.env);
    ASSERT_FALSE(got.ok()) << c.env;
    EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument) << c.env;
    EXPECT_NE(got.status().message().find(c.mentions), std::string::npos) << c.env << ": " << got.status().message();
    EXPECT_NE(got.status().message().find("CUDA_VISIBLE_DEVICES"), std::string::npos) << got.status().message();
  }
}

}  // namespace
}  // namespace holdfast
