// DeviceMesh: how the ranks of a holdfast-train run split into tensor,
// pipeline, expert and data parallel groups (issue 26; docs/parallelism.md).
//
// The mapping, Megatron-LM's default order with tensor parallel fastest:
//
//   rank = tp + TP * (dp + DP * pp)        0 <= tp < TP, 0 <= dp < DP, 0 <= pp < PP
//
// so a tensor-parallel group is TP consecutive ranks (on one node when TP
// divides the ranks per node: its allreduces are the run's most frequent and
// stay off the network), the data-parallel groups come next and the pipeline
// stages are the slowest coordinate (their send/recv is point to point, once
// per micro-batch). DP = world / (TP * PP) is what is left of the world.
//
// Expert parallelism is carved out of data parallelism, as in Megatron and
// DeepSpeed-MoE: the DP ranks of one (tp, pp) split into DP / EP expert
// groups of EP consecutive data-parallel ranks, ep = dp % EP; the ranks that
// hold the same experts (same ep) form the expert-data-parallel group, over
// which the experts' gradients are averaged, while every other parameter's
// are averaged over the whole DP group.
//
// Example, world 8, TP 2, PP 2 (DP 2): ranks {0,1} {2,3} {4,5} {6,7} are the
// tensor groups, {0,2} {1,3} {4,6} {5,7} the data groups, {0,4} {1,5} {2,6}
// {3,7} the pipelines (stage 0 holds ranks 0-3).
//
// Thread-safety: immutable after Create; pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace holdfast {

struct MeshShape {
  int tensor = 1;    // TP: dist.tensor_parallel
  int pipeline = 1;  // PP: dist.pipeline_parallel
  int expert = 1;    // EP: dist.expert_parallel (divides DP)
};

struct MeshCoords {
  int tp = 0;
  int dp = 0;
  int pp = 0;
  int ep = 0;  // dp % EP: which experts this rank holds
};

// The groups a mesh has, each one communicator.
enum class MeshGroup { kTensor, kData, kPipeline, kExpert, kExpertData };
const char* MeshGroupName(MeshGroup group);  // "tp", "dp", "pp", "ep", "edp"

class DeviceMesh {
 public:
  // kInvalidArgument naming the shapes that would fit when `world` cannot be
  // split as asked (a factor that does not divide, EP not dividing DP, a
  // size below 1).
  static Result<DeviceMesh> Create(int world, MeshShape shape);

  int world() const { return world_; }
  const MeshShape& shape() const { return shape_; }
  int data() const { return dp_; }  // DP

  MeshCoords CoordsOf(int rank) const;
  int RankOf(int tp, int dp, int pp) const;
  // The ranks of `group` that `rank` belongs to, ascending; the index of
  // `rank` in it is its rank in that group's communicator.
  std::vector<int> GroupOf(MeshGroup group, int rank) const;
  // Every distinct group of one kind, in the order of their lowest rank.
  std::vector<std::vector<int>> Groups(MeshGroup group) const;
  // "tp=2,pp=2,dp=2" (and ",ep=2" when EP > 1): the layout recorded in a
  // manifest; "dp=W" for pure data parallelism, as before the mesh.
  std::string Layout() const;
  // "tp 1, pp stage 2, dp 0": a rank's coordinates for triage and status.
  std::string Describe(int rank) const;

 private:
  DeviceMesh(int world, MeshShape shape) : world_(world), shape_(shape), dp_(world / (shape.tensor * shape.pipeline)) {}
  int world_;
  MeshShape shape_;
  int dp_;
};

// The shapes a world can take with `tensor` and `pipeline` among the sizes
// that divide it, for an error that says what would work: "tp=2,pp=1 (dp 4),
// tp=4,pp=1 (dp 2), ...". At most `limit` of them.
std::string ShapesThatFit(int world, int limit = 8);

}  // namespace holdfast
