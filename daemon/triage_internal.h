// What daemon/triage.cc and daemon/triage_mesh.cc share: how a rank and what
// it does are put in words. Internal to the daemon's triage.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/mesh.h"
#include "common/rank_progress.h"
#include "daemon/triage.h"

namespace holdfast {
namespace triage_internal {

double Seconds(int64_t ns);
std::string Fixed1(double v);
// The step a rank works on (one past `completed`), for messages.
std::string StepAfter(int64_t completed);

// "rank 5" or, with a mesh, "rank 5 (tp 1, pp stage 2, dp 0)".
std::string Who(const DeviceMesh* mesh, int rank);

// What a rank does: "in forward of step 15 for 3.2 s", "in allreduce #15 of
// step 15 ...", with a mesh "in send/recv with rank 3 (receiving micro-batch
// 2's activations) of step 15 ..." or "in allreduce #4 of its tp group
// (ranks 0-1) ..."; then ", stopped (SIGSTOP)" where the process is.
std::string Doing(int64_t now_ns, const RankView& r, const DeviceMesh* mesh = nullptr);

// The collective `c` in words, with a mesh: "send/recv with rank 3
// (receiving micro-batch 2's activations, sending ...)", "allreduce #4 of its
// tp group (ranks 0-1)". Without the group: "allreduce #<seq>".
std::string CollectiveWords(const CollectiveRecord& c, int rank, const DeviceMesh* mesh);

// The members of `rank`'s group `g` (every rank for kWorld); empty for a
// group the mesh does not know.
std::vector<int> GroupMembers(const DeviceMesh& mesh, CollectiveGroup g, int rank);

// A hang in a run with model parallelism: who holds whom up, followed from
// what each waiting rank waits for — the members of its group that never
// entered the collective (per-group numbers), or the peer of its send/recv.
// `stopped`: ranks in job-control stop, the culprits whatever the others do.
// False when no rank waits in a collective the record labels (the caller
// then blames compute).
bool BlameMesh(int64_t now_ns, const std::vector<RankView>& ranks, const DeviceMesh& mesh,
               const std::vector<int>& stopped, TriageReport* report);

}  // namespace triage_internal
}  // namespace holdfast
