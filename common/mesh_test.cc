#include "common/mesh.h"

#include <gtest/gtest.h>

#include <set>

namespace holdfast {
namespace {

using Groups = std::vector<std::vector<int>>;

// Megatron-LM's own example (megatron/core/parallel_state.py,
// initialize_model_parallel's docstring): 16 GPUs, tensor 2, pipeline 4, so
// data 2. The groups it lists are the ones this mesh must form.
TEST(DeviceMeshTest, MegatronsExampleOf16GpusGivesItsGroups) {
  auto mesh = DeviceMesh::Create(16, MeshShape{2, 4, 1});
  ASSERT_TRUE(mesh.ok()) << mesh.status().ToString();
  EXPECT_EQ(mesh->data(), 2);
  EXPECT_EQ(mesh->Groups(MeshGroup::kData),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(mesh->Groups(MeshGroup::kTensor),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(mesh->Groups(MeshGroup::kPipeline), (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(mesh->Layout(), "tp=2,pp=4,dp=2");
  EXPECT_EQ(mesh->Describe(13), "tp 1, pp stage 3, dp 0");
}

// Every kind of group partitions the world, each rank's coordinates map back
// to it, and a rank's group is the one that holds it, for every shape of 8.
TEST(DeviceMeshTest, EveryShapeOfEightPartitionsTheWorldAndMapsBack) {
  int shapes = 0;
  for (int tp : {1, 2, 4, 8}) {
    for (int pp : {1, 2, 4, 8}) {
      for (int ep : {1, 2, 4, 8}) {
        auto mesh = DeviceMesh::Create(8, MeshShape{tp, pp, ep});
        if (tp * pp > 8 || (8 / (tp * pp)) % ep != 0) {
          EXPECT_FALSE(mesh.ok()) << tp << " " << pp << " " << ep;
          continue;
        }
        ASSERT_TRUE(mesh.ok()) << mesh.status().ToString();
        ++shapes;
        const int dp = 8 / (tp * pp);
        for (int r = 0; r < 8; ++r) {
          const MeshCoords c = mesh->CoordsOf(r);
          EXPECT_EQ(mesh->RankOf(c.tp, c.dp, c.pp), r);
          EXPECT_EQ(c.ep, c.dp % ep);
        }
        const std::pair<MeshGroup, int> sizes[] = {{MeshGroup::kTensor, tp}, {MeshGroup::kData, dp},
                                                   {MeshGroup::kPipeline, pp}, {MeshGroup::kExpert, ep},
                                                   {MeshGroup::kExpertData, dp / ep}};
        for (const auto& [kind, size] : sizes) {
          std::multiset<int> all;
          for (const auto& g : mesh->Groups(kind)) {
            EXPECT_EQ(static_cast<int>(g.size()), size) << MeshGroupName(kind);
            all.insert(g.begin(), g.end());
            for (int m : g) EXPECT_EQ(mesh->GroupOf(kind, m), g) << MeshGroupName(kind) << " of rank " << m;
          }
          EXPECT_EQ(all, (std::multiset<int>{0, 1, 2, 3, 4, 5, 6, 7})) << MeshGroupName(kind);
        }
        // Ranks of one expert group hold different experts; of one expert-data group, the same.
        for (const auto& g : mesh->Groups(MeshGroup::kExpert)) {
          std::set<int> eps;
          for (int m : g) eps.insert(mesh->CoordsOf(m).ep);
          EXPECT_EQ(static_cast<int>(eps.size()), ep);
        }
        for (const auto& g : mesh->Groups(MeshGroup::kExpertData)) {
          for (int m : g) EXPECT_EQ(mesh->CoordsOf(m).ep, mesh->CoordsOf(g[0]).ep);
        }
      }
    }
  }
  // dp 8: 4 expert sizes; dp 4 (two (tp, pp)): 3 each; dp 2 (three): 2 each; dp 1 (four): 1 each.
  EXPECT_EQ(shapes, 4 + 2 * 3 + 3 * 2 + 4 * 1) << "every (tp, pp, ep) of 8 that divides";
}

TEST(DeviceMeshTest, PureDataParallelKeepsTheOldLayoutName) {
  auto mesh = DeviceMesh::Create(8, MeshShape{});
  ASSERT_TRUE(mesh.ok());
  EXPECT_EQ(mesh->Layout(), "dp=8");
  EXPECT_EQ(mesh->GroupOf(MeshGroup::kData, 5), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(mesh->GroupOf(MeshGroup::kTensor, 5), std::vector<int>{5});
}

TEST(DeviceMeshTest, ShapesThatDoNotFitAreRefusedNamingThoseThatDo) {
  auto odd = DeviceMesh::Create(6, MeshShape{4, 1, 1});
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(odd.status().message().find("shapes that fit: tp=1,pp=1 (dp 6), tp=1,pp=2 (dp 3)"), std::string::npos)
      << odd.status().message();
  EXPECT_NE(odd.status().message().find("tp=2,pp=3 (dp 1)"), std::string::npos) << odd.status().message();
  auto experts = DeviceMesh::Create(8, MeshShape{2, 1, 3});
  ASSERT_FALSE(experts.ok());
  EXPECT_NE(experts.status().message().find("expert_parallel can be 1, 2, 4"), std::string::npos)
      << experts.status().message();
  EXPECT_FALSE(DeviceMesh::Create(8, MeshShape{0, 1, 1}).ok());
  EXPECT_FALSE(DeviceMesh::Create(0, MeshShape{}).ok());
  EXPECT_FALSE(DeviceMesh::Create(4, MeshShape{8, 1, 1}).ok());
}

}  // namespace
}  // namespace holdfast
