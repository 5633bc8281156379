#include "common/mesh.h"

namespace holdfast {

const char* MeshGroupName(MeshGroup group) {
  switch (group) {
    case MeshGroup::kTensor: return "tp";
    case MeshGroup::kData: return "dp";
    case MeshGroup::kPipeline: return "pp";
    case MeshGroup::kExpert: return "ep";
    case MeshGroup::kExpertData: return "edp";
  }
  return "?";
}

std::string ShapesThatFit(int world, int limit) {
  std::string out;
  int n = 0;
  for (int tp = 1; tp <= world && n < limit; ++tp) {
    if (world % tp != 0) continue;
    for (int pp = 1; tp * pp <= world && n < limit; ++pp) {
      if (world % (tp * pp) != 0) continue;
      out += (out.empty() ? "" : ", ") + std::string("tp=") + std::to_string(tp) + ",pp=" + std::to_string(pp) +
             " (dp " + std::to_string(world / (tp * pp)) + ")";
      ++n;
    }
  }
  return out;
}

Result<DeviceMesh> DeviceMesh::Create(int world, MeshShape shape) {
  if (world < 1) {
    return InvalidArgumentError("a device mesh needs a world of at least 1 rank, got " + std::to_string(world));
  }
  if (shape.tensor < 1 || shape.pipeline < 1 || shape.expert < 1) {
    return InvalidArgumentError("dist.tensor_parallel, dist.pipeline_parallel and dist.expert_parallel must be at "
                                "least 1, got " + std::to_string(shape.tensor) + ", " +
                                std::to_string(shape.pipeline) + ", " + std::to_string(shape.expert));
  }
  const int64_t model = int64_t{shape.tensor} * shape.pipeline;
  if (model > world || world % model != 0) {
    return InvalidArgumentError("a world of " + std::to_string(world) + " ranks cannot hold tensor_parallel=" +
                                std::to_string(shape.tensor) + " x pipeline_parallel=" +
                                std::to_string(shape.pipeline) + " (" + std::to_string(model) +
                                " ranks per model replica must divide the world); shapes that fit: " +
                                ShapesThatFit(world));
  }
  const int dp = world / static_cast<int>(model);
  if (dp % shape.expert != 0) {
    std::string fits;
    for (int e = 1; e <= dp; ++e) {
      if (dp % e == 0) fits += (fits.empty() ? "" : ", ") + std::to_string(e);
    }
    return InvalidArgumentError("dist.expert_parallel=" + std::to_string(shape.expert) +
                                " does not divide the data-parallel size " + std::to_string(dp) + " (world " +
                                std::to_string(world) + " / (tp " + std::to_string(shape.tensor) + " x pp " +
                                std::to_string(shape.pipeline) + ")): experts are spread over data-parallel "
                                "ranks; expert_parallel can be " + fits);
  }
  return DeviceMesh(world, shape);
}

MeshCoords DeviceMesh::CoordsOf(int rank) const {
  MeshCoords c;
  c.tp = rank % shape_.tensor;
  c.dp = (rank / shape_.tensor) % dp_;
  c.pp = rank / (shape_.tensor * dp_);
  c.ep = c.dp % shape_.expert;
  return c;
}

int DeviceMesh::RankOf(int tp, int dp, int pp) const { return tp + shape_.tensor * (dp + dp_ * pp); }

std::vector<int> DeviceMesh::GroupOf(MeshGroup group, int rank) const {
  const MeshCoords c = CoordsOf(rank);
  std::vector<int> out;
  switch (group) {
    case MeshGroup::kTensor:
      for (int t = 0; t < shape_.tensor; ++t) out.push_back(RankOf(t, c.dp, c.pp));
      break;
    case MeshGroup::kData:
      for (int d = 0; d < dp_; ++d) out.push_back(RankOf(c.tp, d, c.pp));
      break;
    case MeshGroup::kPipeline:
      for (int p = 0; p < shape_.pipeline; ++p) out.push_back(RankOf(c.tp, c.dp, p));
      break;
    case MeshGroup::kExpert: {
      const int first = c.dp - c.ep;
      for (int e = 0; e < shape_.expert; ++e) out.push_back(RankOf(c.tp, first + e, c.pp));
      break;
    }
    case MeshGroup::kExpertData:
      for (int d = c.ep; d < dp_; d += shape_.expert) out.push_back(RankOf(c.tp, d, c.pp));
      break;
  }
  return out;  // ascending: every coordinate that varies raises the rank
}

std::vector<std::vector<int>> DeviceMesh::Groups(MeshGroup group) const {
  std::vector<std::vector<int>> out;
  std::vector<bool> seen(static_cast<size_t>(world_), false);
  for (int r = 0; r < world_; ++r) {
    if (seen[static_cast<size_t>(r)]) continue;
    std::vector<int> g = GroupOf(group, r);
    for (int m : g) seen[static_cast<size_t>(m)] = true;
    out.push_back(std::move(g));
  }
  return out;
}

std::string DeviceMesh::Layout() const {
  if (shape_.tensor == 1 && shape_.pipeline == 1 && shape_.expert == 1) return "dp=" + std::to_string(dp_);
  std::string out = "tp=" + std::to_string(shape_.tensor) + ",pp=" + std::to_string(shape_.pipeline) +
                    ",dp=" + std::to_string(dp_);
  if (shape_.expert > 1) out += ",ep=" + std::to_string(shape_.expert);
  return out;
}

std::string DeviceMesh::Describe(int rank) const {
  const MeshCoords c = CoordsOf(rank);
  std::string out =
      "tp " + std::to_string(c.tp) + ", pp stage " + std::to_string(c.pp) + ", dp " + std::to_string(c.dp);
  if (shape_.expert > 1) out += ", ep " + std::to_string(c.ep);
  return out;
}

}  // namespace holdfast
