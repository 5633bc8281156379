// The 1F1B pipeline schedule (issue 26; docs/parallelism.md "Pipeline
// parallelism"): what each stage of a pipeline does, in order, for one
// optimiser step of M micro-batches. No LibTorch: the schedule is a program
// of instructions that trainer/pipeline.h executes on a GPT stage and that
// SimulatePipeline runs on paper (deadlock, order, memory, bubble).
//
// Stage s of S (Megatron-LM's non-interleaved 1F1B, PipeDream-Flush):
//   warm-up    min(S - s - 1, M) forwards, each received from s - 1 and sent to s + 1;
//   steady     M - warm-up times: one forward, then the backward of the oldest
//              micro-batch in flight;
//   cool-down  the warm-up's backwards.
// A stage therefore holds the activations of at most S - s micro-batches at
// once (GPipe's all-forward-then-all-backward holds M), and the idle share
// of the step (the bubble) is (S - 1) / (M + S - 1) when every stage takes
// the same time.
//
// Messages go between neighbours only. In the steady phase a send and a
// receive with the same neighbour are posted together (send the forward's
// output and receive that neighbour's gradient; send the gradient and
// receive the next input), so two neighbours that both send never wait on
// each other whatever the transport buffers; every communication
// instruction of a stage has a counterpart on its peer with the same
// messages crossed, in the same order (SimulatePipeline checks it).
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace holdfast {

enum class PipeOp {
  kForward,   // the stage's forward of micro-batch `micro`
  kBackward,  // its backward of micro-batch `micro`
  kComm,      // the messages below, posted together, then waited for
};

struct PipeInstr {
  PipeOp op = PipeOp::kComm;
  int micro = -1;  // kForward, kBackward
  // kComm (-1 = none; at most one send and one receive, with one neighbour):
  int send_act = -1;   // the forward's output of this micro-batch, to stage s + 1
  int recv_grad = -1;  // the gradient of that output, from stage s + 1
  int send_grad = -1;  // the gradient of this micro-batch's input, to stage s - 1
  int recv_act = -1;   // this micro-batch's input, from stage s - 1
  // The neighbour a kComm instruction talks to: s + 1 or s - 1.
  int Peer(int stage) const { return send_act >= 0 || recv_grad >= 0 ? stage + 1 : stage - 1; }
};

// "F3", "B0", "send act 2 + recv grad 0" (what a log or an error names).
std::string DescribePipeInstr(const PipeInstr& instr);

// Stage `stage` of `stages`' program for `micro_batches` micro-batches.
// kInvalidArgument unless 0 <= stage < stages and micro_batches >= 1.
Result<std::vector<PipeInstr>> OneFOneBSchedule(int stage, int stages, int micro_batches);

struct PipelineSimulation {
  // Per stage: the most micro-batches whose activations it held at once
  // (forwards done, backwards not yet).
  std::vector<int> max_in_flight;
  // With every forward taking forward_cost and every backward backward_cost
  // and messages free: the step's length, and the share of stage-time spent
  // waiting, 1 - M (f + b) / makespan.
  double makespan = 0;
  double bubble = 0;
};

// Runs every stage's program (programs[s] = stage s's) with blocking
// messages: a communication instruction completes only together with its
// peer's counterpart (the same messages, crossed). kFailedPrecondition
// naming the stages and their pending instructions when the programs
// deadlock or pair mismatching messages; kInvalidArgument when a program
// does not run each micro-batch's forward and then its backward exactly once.
Result<PipelineSimulation> SimulatePipeline(const std::vector<std::vector<PipeInstr>>& programs, int micro_batches,
                                            double forward_cost = 1.0, double backward_cost = 2.0);

}  // namespace holdfast
