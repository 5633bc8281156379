#include "trainer/device.h"

#include <map>
#include <string>

#include <gtest/gtest.h>

namespace holdfast {
namespace {

struct Env {
  std::map<std::string, std::string> vars;
  EnvLookup Lookup() const {
    return [this](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

TrainerConfig Config(const std::string& device, const std::string& backend = "gloo") {
  TrainerConfig c;
  c.train.device = device;
  c.dist.backend = backend;
  return c;
}

TEST(DeviceTest, TheSupervisorsDeviceWins) {
  Env env{{{"HOLDFAST_DEVICE", "1"}, {"HOLDFAST_LOCAL_RANK", "0"}, {"CUDA_VISIBLE_DEVICES", "4,5"}}};
  auto p = ResolveDevice(Config("auto", "nccl"), 2, 2, env.Lookup());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE(p->cuda);
  EXPECT_EQ(p->ordinal, 1);
  EXPECT_EQ(p->Name(), "cuda:1");
  EXPECT_NE(p->why.find("GPU 5"), std::string::npos) << p->why;  // the node's numbering, for on-call
}

TEST(DeviceTest, SupervisorsCpuIsTheCpuAndRefusesCuda) {
  Env env{{{"HOLDFAST_DEVICE", "-1"}}};
  auto p = ResolveDevice(Config("auto"), 2, 4, env.Lookup());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_FALSE(p->cuda);
  auto refused = ResolveDevice(Config("cuda"), 1, 4, env.Lookup());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--gres=gpu"), std::string::npos) << refused.status().message();
}

TEST(DeviceTest, AnOrdinalThisProcessCannotSeeIsAnError) {
  Env env{{{"HOLDFAST_DEVICE", "2"}, {"CUDA_VISIBLE_DEVICES", "0,1"}}};
  auto p = ResolveDevice(Config("auto", "nccl"), 4, 2, env.Lookup());
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("sees 2 CUDA device(s)"), std::string::npos) << p.status().message();
  auto cpu_build = ResolveDevice(Config("auto", "nccl"), 4, 0, Env{{{"HOLDFAST_DEVICE", "0"}}}.Lookup());
  ASSERT_FALSE(cpu_build.ok());
  EXPECT_NE(cpu_build.status().message().find("train.device = \"cpu\""), std::string::npos);
  auto garbage = ResolveDevice(Config("auto"), 1, 1, Env{{{"HOLDFAST_DEVICE", "gpu0"}}}.Lookup());
  ASSERT_FALSE(garbage.ok());
  EXPECT_EQ(garbage.status().code(), StatusCode::kInvalidArgument);
}

TEST(DeviceTest, LocalRankPicksTheGpuWithoutASupervisor) {
  Env env{{{"LOCAL_RANK", "3"}}};  // torchrun's convention
  auto p = ResolveDevice(Config("cuda", "nccl"), 8, 8, env.Lookup());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->ordinal, 3);
  Env ours{{{"HOLDFAST_LOCAL_RANK", "1"}, {"LOCAL_RANK", "3"}}};
  EXPECT_EQ(ResolveDevice(Config("cuda", "nccl"), 8, 8, ours.Lookup())->ordinal, 1);
  auto too_many = ResolveDevice(Config("cuda", "nccl"), 8, 2, env.Lookup());
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("one rank per visible GPU"), std::string::npos);
}

TEST(DeviceTest, AutoUsesAGpuOnlyWhereTheRanksCanReduceOnIt) {
  Env none;
  auto one = ResolveDevice(Config("auto"), 1, 1, none.Lookup());
  ASSERT_TRUE(one.ok());
  EXPECT_TRUE(one->cuda) << "one rank needs no reduction: the GPU";
  auto gloo = ResolveDevice(Config("auto", "gloo"), 2, 2, Env{{{"LOCAL_RANK", "1"}}}.Lookup());
  ASSERT_TRUE(gloo.ok());
  EXPECT_FALSE(gloo->cuda) << "Gloo reduces host memory";
  auto no_gpu = ResolveDevice(Config("auto"), 1, 0, none.Lookup());
  ASSERT_TRUE(no_gpu.ok());
  EXPECT_FALSE(no_gpu->cuda);
  EXPECT_EQ(no_gpu->why, "no CUDA device visible");
}

TEST(DeviceTest, BackendAndDeviceMustAgree) {
  auto nccl_cpu = ResolveDevice(Config("auto", "nccl"), 2, 0, Env{}.Lookup());
  ASSERT_FALSE(nccl_cpu.ok());
  EXPECT_NE(nccl_cpu.status().message().find("needs a GPU per rank"), std::string::npos);
  auto gloo_gpu = ResolveDevice(Config("cuda", "gloo"), 2, 2, Env{{{"LOCAL_RANK", "0"}}}.Lookup());
  ASSERT_FALSE(gloo_gpu.ok());
  EXPECT_NE(gloo_gpu.status().message().find("dist.backend = \"nccl\""), std::string::npos);
  auto cuda_no_gpu = ResolveDevice(Config("cuda"), 1, 0, Env{}.Lookup());
  ASSERT_FALSE(cuda_no_gpu.ok());
  EXPECT_NE(cuda_no_gpu.status().message().find("CUDA build"), std::string::npos);
  EXPECT_FALSE(ResolveDevice(Config("cpu"), 1, 8, Env{}.Lookup())->cuda);
}

}  // namespace
}  // namespace holdfast
