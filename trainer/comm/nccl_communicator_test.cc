// MakeNcclCommunicator must fail cleanly (a Status, not a crash) where there
// is no GPU or no NCCL, and work where there is one.
#include <gtest/gtest.h>

#include "common/memory_store.h"
#include "trainer/comm/communicator.h"

namespace holdfast {
namespace {

TEST(NcclCommunicatorTest, ReturnsAStatusWithoutAGpuAndWorksWithOne) {
  CommunicatorOptions o;
  o.rank = 0;
  o.world_size = 1;
  o.store = std::make_shared<InMemoryStore>();
  o.timeout = std::chrono::milliseconds(20000);
  auto comm = MakeNcclCommunicator(o);
  if (!comm.ok()) {
    // No GPU (or built without NCCL): a reason a person can act on.
    EXPECT_EQ(comm.status().code(), StatusCode::kFailedPrecondition) << comm.status().ToString();
    EXPECT_FALSE(comm.status().message().empty());
    GTEST_SKIP() << "no usable GPU here: " << comm.status().ToString();
  }
  EXPECT_STREQ((*comm)->backend(), "nccl");
  EXPECT_TRUE((*comm)->Barrier().ok());
}

TEST(NcclCommunicatorTest, BadRankIsRejected) {
  CommunicatorOptions o;
  o.rank = 3;
  o.world_size = 2;
  o.store = std::make_shared<InMemoryStore>();
  EXPECT_FALSE(MakeNcclCommunicator(o).ok());
}

}  // namespace
}  // namespace holdfast
