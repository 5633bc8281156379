// The mesh's communicators: 8 ranks as threads of this process, tp 2 x pp 2
// x dp 2 with 2 experts, each collective reaching exactly its group.
#include "trainer/mesh_comm.h"

#include <gtest/gtest.h>

#include <thread>

#include "common/tcp_store.h"

namespace holdfast {
namespace {

using std::chrono::milliseconds;

#if HOLDFAST_HAVE_GLOO

TEST(MeshCommTest, EachGroupsAllreduceSumsItsMembersOnly) {
  const RunKey key = *RunKey::Generate();
  auto server = StartTcpStoreServer("127.0.0.1", 0, key);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  constexpr int kWorld = 8;
  auto mesh = DeviceMesh::Create(kWorld, MeshShape{2, 2, 2});
  ASSERT_TRUE(mesh.ok()) << mesh.status().ToString();
  const MeshGroup kinds[] = {MeshGroup::kTensor, MeshGroup::kData, MeshGroup::kPipeline, MeshGroup::kExpert,
                             MeshGroup::kExpertData};
  std::vector<std::thread> ranks;
  for (int r = 0; r < kWorld; ++r) {
    ranks.emplace_back([&, r] {
      auto client = ConnectTcpStore("127.0.0.1", (*server)->port(), key, milliseconds(5000));
      ASSERT_TRUE(client.ok()) << client.status().ToString();
      CommunicatorOptions o;
      o.rank = r;
      o.world_size = kWorld;
      o.store = *client;
      o.timeout = milliseconds(30000);
      auto comms = MakeMeshCommunicators(*mesh, o, "gloo");
      ASSERT_TRUE(comms.ok()) << comms.status().ToString();
      for (MeshGroup kind : kinds) {
        const std::vector<int> members = mesh->GroupOf(kind, r);
        Communicator& c = comms->Of(kind);
        ASSERT_EQ(c.world_size(), static_cast<int>(members.size())) << MeshGroupName(kind);
        // 2^rank from every member: the sum says exactly who took part.
        float bits = static_cast<float>(1 << r);
        ASSERT_TRUE(c.Allreduce(&bits, 1, ReduceOp::kSum).ok()) << MeshGroupName(kind);
        float want = 0;
        for (int m : members) want += static_cast<float>(1 << m);
        EXPECT_EQ(bits, want) << MeshGroupName(kind) << " group of rank " << r;
      }
    });
  }
  for (auto& t : ranks) t.join();
}

#endif  // HOLDFAST_HAVE_GLOO

TEST(MeshCommTest, ARankOutsideTheMeshOrAnUnknownBackendIsRefused) {
  auto mesh = DeviceMesh::Create(4, MeshShape{2, 1, 1});
  ASSERT_TRUE(mesh.ok());
  CommunicatorOptions o;
  o.rank = 0;
  o.world_size = 8;
  auto wrong = MakeMeshCommunicators(*mesh, o, "gloo");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("does not fit the mesh tp=2,pp=1,dp=2 of 4 ranks"), std::string::npos)
      << wrong.status().message();
  o.world_size = 4;
  auto mpi = MakeMeshCommunicators(*mesh, o, "mpi");
  ASSERT_FALSE(mpi.ok());
  EXPECT_NE(mpi.status().message().find("\"gloo\" or \"nccl\""), std::string::npos);
}

}  // namespace
}  // namespace holdfast
