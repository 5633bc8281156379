// The "grpo" objective of holdfast-train: the learner of a GRPO run
// (docs/rl.md). Includes LibTorch (trainer/objective.h).
//
// Step s: rank 0 publishes the policy as weights version s (a background
// thread writes it; the step does not wait for the disk), writes the demand
// (prompts below (s + 1 + rl.max_staleness) * P), ingests the groups the
// rollout workers wrote into its ReplayBuffer until the step's P groups
// [s*P, (s+1)*P) are there, and broadcasts them to the other ranks. The
// step's P x G completions are its samples (train.micro_batch x grad_accum x
// world must be P x G): each micro-batch's loss is GRPO's (grpo_loss.h) with
// the reference model's log-probs computed on the fly. The replay buffer is
// rank 0's extra checkpointed state ("objective.rl_buffer").
#pragma once

#include <memory>

#include "common/status.h"
#include "trainer/objective.h"

namespace holdfast {
class Communicator;
}

namespace holdfast::rl {

// `policy` is the trainer's model (shared; the objective publishes its
// weights), `reference` the frozen reference (owned from here on), `comm`
// the trainer's communicator (not owned; outlives the objective).
Result<std::unique_ptr<Objective>> MakeGrpoObjective(const ObjectiveEnv& env, Communicator* comm, Gpt policy,
                                                     Gpt reference);

}  // namespace holdfast::rl
