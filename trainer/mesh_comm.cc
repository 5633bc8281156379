#include "trainer/mesh_comm.h"

#include <algorithm>

namespace holdfast {

Communicator& MeshCommunicators::Of(MeshGroup group) {
  std::unique_ptr<Communicator>* slot = &data;
  switch (group) {
    case MeshGroup::kTensor: slot = &tensor; break;
    case MeshGroup::kData: slot = &data; break;
    case MeshGroup::kPipeline: slot = &pipeline; break;
    case MeshGroup::kExpert: slot = &expert; break;
    case MeshGroup::kExpertData: slot = &expert_data; break;
  }
  HF_CHECK_MSG(*slot != nullptr, std::string("the mesh's ") + MeshGroupName(group) + " group was not formed");
  return **slot;
}

Result<MeshCommunicators> MakeMeshCommunicators(const DeviceMesh& mesh, const CommunicatorOptions& base,
                                                const std::string& backend, const std::vector<MeshGroup>& groups) {
  if (base.world_size != mesh.world() || base.rank < 0 || base.rank >= mesh.world()) {
    return InvalidArgumentError("rank " + std::to_string(base.rank) + " of a world of " +
                                std::to_string(base.world_size) + " does not fit the mesh " + mesh.Layout() +
                                " of " + std::to_string(mesh.world()) + " ranks");
  }
  if (backend != "gloo" && backend != "nccl") {
    return InvalidArgumentError("dist.backend must be \"gloo\" or \"nccl\", got \"" + backend + "\"");
  }
  MeshCommunicators out;
  const std::pair<MeshGroup, std::unique_ptr<Communicator>*> order[] = {
      {MeshGroup::kTensor, &out.tensor},     {MeshGroup::kData, &out.data},
      {MeshGroup::kPipeline, &out.pipeline}, {MeshGroup::kExpert, &out.expert},
      {MeshGroup::kExpertData, &out.expert_data}};
  for (const auto& [group, slot] : order) {
    if (std::find(groups.begin(), groups.end(), group) == groups.end()) continue;
    const std::vector<int> members = mesh.GroupOf(group, base.rank);
    if (members.size() == 1) {
      *slot = MakeLocalCommunicator();
      continue;
    }
    CommunicatorOptions o = base;
    o.rank = static_cast<int>(std::find(members.begin(), members.end(), base.rank) - members.begin());
    o.world_size = static_cast<int>(members.size());
    std::string name = std::string(MeshGroupName(group)) + " group of ranks ";
    for (size_t i = 0; i < members.size() && i < 8; ++i) name += (i ? "," : "") + std::to_string(members[i]);
    if (members.size() > 8) name += ",...";
    o.store = std::make_shared<PrefixStore>(
        "mesh/" + std::string(MeshGroupName(group)) + "/" + std::to_string(members.front()) + "/", base.store);
    Result<std::unique_ptr<Communicator>> comm = backend == "nccl" ? MakeNcclCommunicator(o) : MakeGlooCommunicator(o);
    if (!comm.ok()) return comm.status().WithContext("the " + name);
    *slot = std::move(comm).value();
  }
  return out;
}

}  // namespace holdfast
