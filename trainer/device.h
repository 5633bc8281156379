// Where a rank computes: the CPU or one CUDA device, from the launch contract.
//
// holdfastd hands each rank HOLDFAST_DEVICE, an ordinal within the rank's
// CUDA_VISIBLE_DEVICES (-1 = the CPU); launchers that follow torchrun's
// conventions hand LOCAL_RANK instead. ResolveDevice turns that, the config
// (train.device, dist.backend) and the number of CUDA devices this process sees
// into one placement, or an error that says what to change. Pure: the
// environment comes in as a function, so every rule is unit-tested without a
// GPU. No LibTorch, no CUDA.
#pragma once

#include <functional>
#include <string>

#include "common/status.h"
#include "trainer/config.h"

namespace holdfast {

struct DevicePlacement {
  bool cuda = false;
  int ordinal = -1;  // CUDA ordinal as this process numbers them (after CUDA_VISIBLE_DEVICES); -1 = CPU
  std::string why;   // for the log: "cuda:1 (HOLDFAST_DEVICE=1; CUDA_VISIBLE_DEVICES=4,5: GPU 5)"

  std::string Name() const { return cuda ? "cuda:" + std::to_string(ordinal) : "cpu"; }
};

using EnvLookup = std::function<const char*(const char*)>;

// The rules, in order:
//  - train.device = "cpu": the CPU.
//  - HOLDFAST_DEVICE set (under holdfastd): that ordinal, -1 = the CPU; a GPU
//    ordinal this process cannot see, or "cuda" with -1, is an error.
//  - else "cuda": the GPU numbered by the local rank (HOLDFAST_LOCAL_RANK, then
//    LOCAL_RANK, else 0); "auto": the same when this process sees a GPU and the
//    ranks can reduce on it (world size 1, or dist.backend = "nccl"), else the CPU.
//  - NCCL with more than one rank needs a GPU per rank; Gloo with more than one
//    rank needs the CPU.
Result<DevicePlacement> ResolveDevice(const TrainerConfig& config, int world_size, int cuda_device_count,
                                      const EnvLookup& env);

}  // namespace holdfast
