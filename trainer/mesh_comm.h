// The communicators of a DeviceMesh (common/mesh.h): one per group a rank
// belongs to, each bootstrapped through the run's store under a prefix of
// its own ("mesh/tp/0/": the group kind and its lowest rank), so that groups
// of one kind never meet in the store. A group of one rank gets the local
// communicator (every collective the identity).
//
// Every rank creates its groups in the same order (tp, dp, pp, ep, edp): a
// creation waits for the group's other ranks, who are creating the same
// group, so no rank waits on a peer busy with another. Only the groups asked
// for are formed (each Gloo group costs a listening socket, a connection per
// peer and a worker thread); the others stay null.
//
// Thread-safety: as Communicator; MakeMeshCommunicators from one thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/mesh.h"
#include "common/status.h"
#include "trainer/comm/communicator.h"

namespace holdfast {

struct MeshCommunicators {
  std::unique_ptr<Communicator> tensor;
  std::unique_ptr<Communicator> data;
  std::unique_ptr<Communicator> pipeline;
  std::unique_ptr<Communicator> expert;
  std::unique_ptr<Communicator> expert_data;
  Communicator& Of(MeshGroup group);  // the group must have been formed
};

// `base`: this rank's options in the whole world (rank, world_size, store,
// interface_host, timeout, cuda_device); `backend`: "gloo" or "nccl".
// `groups`: the kinds to form, every rank passing the same. kInvalidArgument
// when base's world or rank do not fit the mesh; the communicator's error
// (naming the group) when a group does not form.
Result<MeshCommunicators> MakeMeshCommunicators(const DeviceMesh& mesh, const CommunicatorOptions& base,
                                                const std::string& backend,
                                                const std::vector<MeshGroup>& groups = {
                                                    MeshGroup::kTensor, MeshGroup::kData, MeshGroup::kPipeline,
                                                    MeshGroup::kExpert, MeshGroup::kExpertData});

}  // namespace holdfast
