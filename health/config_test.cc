#include "health/config.h"

#include <gtest/gtest.h>

namespace holdfast::health {
namespace {

TEST(HealthConfig, FileWithoutHealthSectionGivesDefaults) {
  auto c = ParseHealthConfig("[model]\nn_layer = 4\n", "job.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->expected_gpus, 0);
  EXPECT_DOUBLE_EQ(c->checkpoint_min_free_gb, 10);
  EXPECT_EQ(c->policy.on_warn, Action::kNone);
}

TEST(HealthConfig, ReadsThresholdsListsAndPolicy) {
  auto c = ParseHealthConfig(R"(
[health]
expected_gpus = 8
ib_rate_gbps_min = 400
ib_devices = ["mlx5_0", "mlx5_3"]
checkpoint_min_free_gb = 50.5
required_mounts = ["/scratch"]
[health.policy]
on_warn = "restart"
[health.fail_actions]
"ib.port_state" = "drain_node"
)",
                             "job.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->expected_gpus, 8);
  EXPECT_DOUBLE_EQ(c->ib_rate_gbps_min, 400);
  EXPECT_EQ(c->ib_devices, (std::vector<std::string>{"mlx5_0", "mlx5_3"}));
  EXPECT_DOUBLE_EQ(c->checkpoint_min_free_gb, 50.5);
  EXPECT_EQ(c->required_mounts, std::vector<std::string>{"/scratch"});
  EXPECT_EQ(c->policy.on_warn, Action::kRestart);
  EXPECT_EQ(c->policy.fail_actions.at("ib.port_state"), Action::kDrainNode);
}

TEST(HealthConfig, ErrorsNameFileLineAndKey) {
  auto unknown = ParseHealthConfig("[health]\nexpected_gpus = 8\nexpected_gpu = 8\n", "job.toml");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("job.toml:3: unknown key 'health.expected_gpu'"), std::string::npos)
      << unknown.status().message();

  auto range = ParseHealthConfig("[health]\n\nexpected_gpus = -1\n", "job.toml");
  ASSERT_FALSE(range.ok());
  EXPECT_NE(range.status().message().find("job.toml:3: key 'health.expected_gpus' must be between 0 and 64, got -1"),
            std::string::npos)
      << range.status().message();

  auto type = ParseHealthConfig("[health]\nib_devices = \"mlx5_0\"\n", "job.toml");
  ASSERT_FALSE(type.ok());
  EXPECT_NE(type.status().message().find("job.toml:2: key 'health.ib_devices' must be a list of strings"),
            std::string::npos);

  auto action = ParseHealthConfig("[health.policy]\non_warn = \"panic\"\n", "job.toml");
  ASSERT_FALSE(action.ok());
  EXPECT_NE(action.status().message().find("job.toml:2"), std::string::npos);
  EXPECT_NE(action.status().message().find("unknown action 'panic'"), std::string::npos);

  auto syntax = ParseHealthConfig("[health\n", "job.toml");
  ASSERT_FALSE(syntax.ok());
  EXPECT_NE(syntax.status().message().find("job.toml:1: TOML syntax error"), std::string::npos);

  auto order = ParseHealthConfig("[health]\ncheckpoint_write_fail_mbps = 500\n", "job.toml");
  ASSERT_FALSE(order.ok());
  EXPECT_NE(order.status().message().find("checkpoint_write_fail_mbps"), std::string::npos);
}

TEST(HealthConfig, MissingFileIsNotFound) {
  auto c = LoadHealthConfig("/nonexistent/job.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace holdfast::health
