// ClusterMembership's decisions, one table row per case: which nodes train
// and which stand by, which hellos are accepted (and the refusal a follower
// reads), what a lost node was, what a reshape leaves, and the merged views.
#include "daemon/cluster_membership.h"

#include <gtest/gtest.h>

namespace holdfast {
namespace {

Allocation Nodes(int n) {
  Allocation a;
  for (int i = 0; i < n; ++i) a.nodes.push_back({"host-" + std::to_string(i), "10.0.0." + std::to_string(i + 1)});
  return a;
}

HelloMsg Hello(int node, int nproc = 2) {
  HelloMsg h;
  h.node = node;
  h.nproc = nproc;
  h.host = "host-" + std::to_string(node);
  return h;
}

TEST(ClusterMembershipTest, MaxNodesSplitsTheAllocationIntoTrainingNodesAndSpares) {
  struct Row {
    int nodes, min_nodes, max_nodes;
    std::vector<int> active, spares;
    int world;
  };
  const Row rows[] = {
      {1, 0, 0, {0}, {}, 2},
      {3, 0, 0, {0, 1, 2}, {}, 6},
      {4, 2, 2, {0, 1}, {2, 3}, 4},
      {3, 0, 9, {0, 1, 2}, {}, 6},  // more than there are: all of them
  };
  for (const Row& r : rows) {
    ClusterMembership m(Nodes(r.nodes), 2);
    ASSERT_TRUE(m.Init(r.min_nodes, r.max_nodes, {}).ok());
    EXPECT_EQ(m.active(), r.active) << r.nodes << " nodes, max " << r.max_nodes;
    EXPECT_EQ(m.spares(), r.spares) << r.nodes << " nodes, max " << r.max_nodes;
    EXPECT_EQ(m.world(), r.world);
  }
}

TEST(ClusterMembershipTest, MinNodesAboveTheTrainingNodesIsRefusedSayingWhatToChange) {
  ClusterMembership m(Nodes(3), 2);
  Status s = m.Init(/*min_nodes=*/3, /*max_nodes=*/2, {});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("lower min_nodes or ask for more nodes"), std::string::npos) << s.message();
}

TEST(ClusterMembershipTest, HelloIsAcceptedOnlyFromAnUnjoinedNodeOfTheAllocationBeforeTheRunStarts) {
  ClusterMembership m(Nodes(3), 2);
  ASSERT_TRUE(m.Init(0, 0, {}).ok());
  m.Join(2, 0);
  struct Row {
    HelloMsg hello;
    bool run_over, run_started;
    std::string refusal;  // "" accepted
  };
  const Row rows[] = {
      {Hello(1), false, false, ""},
      {Hello(1), true, false, "the run is over"},
      {Hello(0), false, false, "node 0 is out of range"},
      {Hello(3), false, false, "node 3 is out of range"},
      {Hello(-1), false, false, "node -1 is out of range"},
      {Hello(2), false, false, "node 2 has already joined"},
      {Hello(1, 4), false, false, "nproc 4 differs from the leader's"},
      {Hello(1), false, true, "the run has started without it"},
  };
  for (const Row& r : rows) {
    EXPECT_EQ(m.CheckHello(r.hello, r.run_over, r.run_started), r.refusal) << "node " << r.hello.node;
  }
}

TEST(ClusterMembershipTest, ALostNodeIsActiveSpareOrOneTheRunHadLeft) {
  ClusterMembership m(Nodes(4), 2);
  ASSERT_TRUE(m.Init(0, 3, {}).ok());  // 0,1,2 train; 3 stands by
  for (int n = 1; n < 4; ++n) m.Join(n, 0);
  ASSERT_TRUE(m.Reshape({"host-2"}, {}).ok());  // the run leaves host-2
  EXPECT_EQ(m.Lose(1), ClusterMembership::LostNode::kActive);
  EXPECT_EQ(m.Lose(3), ClusterMembership::LostNode::kSpare);
  EXPECT_TRUE(m.spares().empty()) << "a lost spare is no spare";
  EXPECT_EQ(m.Lose(2), ClusterMembership::LostNode::kFormer);
  EXPECT_FALSE(m.has_followers());
  EXPECT_EQ(m.RanksOf(1), (std::vector<int>{2, 3})) << "a lost active node keeps its ranks until the run reshapes";
}

TEST(ClusterMembershipTest, ReshapeSwapsALeavingNodeForASpareOrRefusesAndChangesNothing) {
  ClusterMembership m(Nodes(3), 2);
  ASSERT_TRUE(m.Init(0, 2, {}).ok());  // 0,1 train; 2 stands by
  auto world = m.Reshape({"host-1"}, {"host-2"});
  ASSERT_TRUE(world.ok()) << world.status().ToString();
  EXPECT_EQ(*world, 4);
  EXPECT_EQ(m.active(), (std::vector<int>{0, 2}));
  EXPECT_TRUE(m.spares().empty());
  EXPECT_EQ(m.RanksOf(2), (std::vector<int>{2, 3}));
  EXPECT_TRUE(m.RanksOf(1).empty());

  const LaunchPlan before = m.plan();
  auto leader = m.Reshape({"host-0"}, {});
  EXPECT_EQ(leader.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(leader.status().message().find("hosts the run's store"), std::string::npos);
  auto not_spare = m.Reshape({}, {"host-1"});
  EXPECT_EQ(not_spare.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(not_spare.status().message(), "host-1 is not a spare node of this run");
  EXPECT_EQ(m.active(), (std::vector<int>{0, 2})) << "a refused reshape changes nothing";
  EXPECT_EQ(m.plan().world_size, before.world_size);

  auto shrink = m.Reshape({"host-2"}, {});
  ASSERT_TRUE(shrink.ok());
  EXPECT_EQ(*shrink, 2);
}

TEST(ClusterMembershipTest, MergedViewsAreByRankWithEachFollowersReportAge) {
  ClusterMembership m(Nodes(3), 1);
  ASSERT_TRUE(m.Init(0, 0, {}).ok());
  m.Join(1, 1'000'000'000);
  m.Join(2, 1'000'000'000);
  RankView r1, r2, r0;
  r0.rank = 0;
  r1.rank = 1;
  r2.rank = 2;
  m.SetViews(2, {r2});
  m.SetViews(1, {r1});
  m.Heard(2, 3'000'000'000);
  const std::vector<RankView> v = m.Merge({r0}, 4'500'000'000);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].rank, 0);
  EXPECT_EQ(v[0].report_age_s, 0) << "the leader's own ranks are current";
  EXPECT_EQ(v[1].rank, 1);
  EXPECT_DOUBLE_EQ(v[1].report_age_s, 3.5);
  EXPECT_EQ(v[2].rank, 2);
  EXPECT_DOUBLE_EQ(v[2].report_age_s, 1.5);

  m.ClearViews();  // a new generation
  EXPECT_EQ(m.Merge({r0}, 4'500'000'000).size(), 1u);
  m.SetViews(1, {r1});
  m.Lose(1);
  EXPECT_EQ(m.Merge({}, 0).size(), 0u) << "a lost node's last report is gone with it";
  m.SetViews(1, {r1});
  EXPECT_EQ(m.Merge({}, 0).size(), 0u) << "a report from a node that has not joined is ignored";
}

}  // namespace
}  // namespace holdfast
