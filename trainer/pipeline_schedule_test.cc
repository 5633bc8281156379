// The 1F1B schedule on paper (issue 26): for every pipeline of 1 to 6
// stages and 1 to 12 micro-batches the stages' programs run without a
// deadlock with blocking messages, each stage holds at most S - s
// micro-batches' activations, and the bubble is (S - 1) / (M + S - 1).
#include "trainer/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace holdfast {
namespace {

std::vector<std::vector<PipeInstr>> Programs(int stages, int micro) {
  std::vector<std::vector<PipeInstr>> programs;
  for (int s = 0; s < stages; ++s) {
    auto p = OneFOneBSchedule(s, stages, micro);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    programs.push_back(p.ok() ? *p : std::vector<PipeInstr>{});
  }
  return programs;
}

std::string Text(const std::vector<PipeInstr>& program) {
  std::string out;
  for (const PipeInstr& i : program) {
    if (i.op == PipeOp::kComm) continue;
    out += DescribePipeInstr(i) + " ";
  }
  return out;
}

TEST(PipelineScheduleTest, EveryShapeRunsWithoutDeadlockHoldingAtMostItsDepthOfActivations) {
  for (int stages = 1; stages <= 6; ++stages) {
    for (int micro = 1; micro <= 12; ++micro) {
      auto sim = SimulatePipeline(Programs(stages, micro), micro);
      ASSERT_TRUE(sim.ok()) << stages << " stages, " << micro << " micro-batches: " << sim.status().ToString();
      for (int s = 0; s < stages; ++s) {
        EXPECT_EQ(sim->max_in_flight[s], std::min(stages - s, micro))
            << "stage " << s << " of " << stages << ", " << micro << " micro-batches";
      }
      const double want = static_cast<double>(stages - 1) / (micro + stages - 1);
      EXPECT_NEAR(sim->bubble, want, 1e-12) << stages << " stages, " << micro << " micro-batches";
      EXPECT_DOUBLE_EQ(sim->makespan, (micro + stages - 1) * 3.0);
    }
  }
}

// The order Megatron-LM's documentation draws for 4 stages and 8 micro-batches.
TEST(PipelineScheduleTest, FourStagesOfEightMicroBatchesInterleaveOneForwardOneBackward) {
  auto p = Programs(4, 8);
  EXPECT_EQ(Text(p[0]), "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7 ");
  EXPECT_EQ(Text(p[2]), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7 ");
  EXPECT_EQ(Text(p[3]), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 ");
}

// The simulator itself fails a schedule that would hang: the steady phase's
// combined send + receive split into a receive and then a send on both
// sides of a pair (each waits for the other's send).
TEST(PipelineScheduleTest, ASplitSendAndReceiveIsADeadlockNamingTheStages) {
  auto programs = Programs(2, 3);
  for (auto& program : programs) {
    std::vector<PipeInstr> split;
    for (const PipeInstr& i : program) {
      const bool both = i.op == PipeOp::kComm && (i.send_act >= 0 || i.send_grad >= 0) &&
                        (i.recv_act >= 0 || i.recv_grad >= 0);
      if (!both) {
        split.push_back(i);
        continue;
      }
      PipeInstr recv = i, send = i;
      recv.send_act = recv.send_grad = -1;
      send.recv_act = send.recv_grad = -1;
      split.push_back(recv);
      split.push_back(send);
    }
    program = split;
  }
  auto sim = SimulatePipeline(programs, 3);
  ASSERT_FALSE(sim.ok());
  EXPECT_NE(sim.status().message().find("deadlock"), std::string::npos) << sim.status().ToString();
  EXPECT_NE(sim.status().message().find("stage 0 at instruction"), std::string::npos) << sim.status().ToString();
  EXPECT_NE(sim.status().message().find("stage 1 at instruction"), std::string::npos) << sim.status().ToString();
}

TEST(PipelineScheduleTest, AProgramThatComputesBeforeItsInputArrivesIsRefused) {
  auto programs = Programs(2, 2);
  // Stage 1 starts with "recv act 0", then F0: swap them.
  ASSERT_EQ(programs[1][0].op, PipeOp::kComm);
  ASSERT_EQ(programs[1][1].op, PipeOp::kForward);
  std::swap(programs[1][0], programs[1][1]);
  auto sim = SimulatePipeline(programs, 2);
  ASSERT_FALSE(sim.ok());
  EXPECT_EQ(sim.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(sim.status().message().find("not received before its forward"), std::string::npos)
      << sim.status().ToString();
}

// Each program valid on its own, but stage 1 runs micro-batches 0 and 1 the
// other way round: the first message pairs stage 0's activations of 0 with
// stage 1's receive of 1, and the simulator names both.
TEST(PipelineScheduleTest, StagesDisagreeingOnTheMicroBatchArePairedAndNamed) {
  auto programs = Programs(2, 2);
  auto relabel = [](int& micro) {
    if (micro == 0 || micro == 1) micro = 1 - micro;
  };
  for (PipeInstr& i : programs[1]) {
    relabel(i.micro);
    relabel(i.send_act);
    relabel(i.recv_act);
    relabel(i.send_grad);
    relabel(i.recv_grad);
  }
  auto sim = SimulatePipeline(programs, 2);
  ASSERT_FALSE(sim.ok());
  EXPECT_NE(sim.status().message().find("mismatching messages: stage 0 at instruction 1 (send act 0) meets stage 1 "
                                        "at instruction 0 (recv act 1)"),
            std::string::npos)
      << sim.status().ToString();
}

TEST(PipelineScheduleTest, BadShapesAreRefused) {
  EXPECT_FALSE(OneFOneBSchedule(2, 2, 4).ok());
  EXPECT_FALSE(OneFOneBSchedule(-1, 2, 4).ok());
  EXPECT_FALSE(OneFOneBSchedule(0, 2, 0).ok());
  EXPECT_TRUE(OneFOneBSchedule(0, 1, 1).ok());
}

}  // namespace
}  // namespace holdfast
