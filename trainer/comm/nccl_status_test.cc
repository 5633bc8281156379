// NcclStatus: the one conversion of ncclResult_t, and its codes. Needs NCCL's
// library (ncclGetErrorString), not a GPU.
#include "common/nccl_status.h"

#include <gtest/gtest.h>

namespace holdfast {
namespace {

TEST(NcclStatusTest, SuccessIsOk) { EXPECT_TRUE(NcclStatus("init", ncclSuccess).ok()); }

TEST(NcclStatusTest, EachResultHasItsCodeAndSaysWhatFailed) {
  const Status remote = NcclStatus("nccl allreduce of 3 floats", ncclRemoteError);
  EXPECT_EQ(remote.code(), StatusCode::kUnavailable);
  EXPECT_EQ(remote.message().rfind("nccl allreduce of 3 floats: NCCL error: ", 0), 0u) << remote.message();
  EXPECT_NE(remote.message().find("a peer rank failed or went away"), std::string::npos);
  EXPECT_EQ(NcclStatus("x", ncclSystemError).code(), StatusCode::kUnavailable);
  EXPECT_EQ(NcclStatus("x", ncclInvalidArgument).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(NcclStatus("x", ncclInvalidUsage).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(NcclStatus("x", ncclUnhandledCudaError).code(), StatusCode::kInternal);
  EXPECT_EQ(NcclStatus("x", ncclInternalError).code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace holdfast
