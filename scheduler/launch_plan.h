// LaunchPlan: where every rank of a run goes, as data — its global and local
// rank, its node and that node's host, its device. The one place the
// "global rank = node * nproc_per_node + local rank" arithmetic lives; the
// daemon launches ForNode(this_node) and names hosts with HostOf(rank), and
// the ranks learn their placement from the launch contract's environment
// (common/launch_contract.h: HOLDFAST_RANK, _LOCAL_RANK, _NODE, _DEVICE, _HOST).
//
// Devices. `devices` are the CUDA ordinals a rank started by this node's
// daemon can use (ParseVisibleDevices of the daemon's CUDA_VISIBLE_DEVICES).
// Local rank r gets devices[r]. Ranks never share a device: more ranks than
// devices is an error, because NCCL refuses two ranks of one communicator on
// one GPU ("Duplicate GPU detected") and a shared GPU silently halves the
// throughput of both. Empty `devices` means CPU: device -1 for every rank.
// The plan assumes every node sees the same devices (what Slurm's --gres gives
// a job); each daemon only launches its own node's ranks, so another node's
// device numbers are informative.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "scheduler/scheduler.h"

namespace holdfast {

struct RankPlacement {
  int global_rank = 0;
  int local_rank = 0;
  int node = 0;       // index into Allocation::nodes
  std::string host;   // Allocation::nodes[node].host
  int device = -1;    // CUDA ordinal within the rank's CUDA_VISIBLE_DEVICES; -1 = CPU
};

// What a generation's ranks are started with, on every node: the leader makes
// it, its own ranks get it, and the cluster protocol's start message carries it
// to the followers (daemon/cluster_protocol.h StartMsg) — one value, so the
// nodes cannot start one generation with two different stores or steps.
struct GenerationSpec {
  std::string run_id;
  int attempt = 0;
  int generation = 0;
  int world_size = 0;
  std::string store_addr;   // host:port of the rendezvous store
  uint16_t master_port = 0; // MASTER_PORT for PyTorch jobs
  int64_t resume_step = -1; // HOLDFAST_RESUME_FROM_STEP; -1 = newest
  // This node's reachable address (HOLDFAST_NODE_ADDR): each node sets its
  // own; the leader's start message does not carry it.
  std::string node_addr;
};

struct LaunchPlan {
  int world_size = 0;
  int nproc_per_node = 0;
  std::vector<RankPlacement> ranks;  // by global rank: ranks[r].global_rank == r

  // The ranks of `node`, by local rank; empty for a node not in the plan.
  std::vector<RankPlacement> ForNode(int node) const;
  // nullptr when `rank` is not in [0, world_size).
  const RankPlacement* ForRank(int rank) const;
  // The host of `rank`; "" when `rank` is not in [0, world_size).
  std::string HostOf(int rank) const;
};

// kInvalidArgument, saying what to change, when the allocation has no nodes,
// nproc_per_node < 1, the world size overflows, or nproc_per_node exceeds the
// number of devices (see "Devices").
Result<LaunchPlan> MakeLaunchPlan(const Allocation& alloc, int nproc_per_node, const std::vector<int>& devices);
// The ranks on `active` nodes only (indexes into alloc.nodes, in the order
// given): global ranks are numbered along `active`, and RankPlacement::node
// stays the index into alloc.nodes. An elastic run's plan after nodes left or
// spares joined. kInvalidArgument for an empty `active`, an index out of range
// or repeated.
Result<LaunchPlan> MakeLaunchPlan(const Allocation& alloc, int nproc_per_node, const std::vector<int>& devices,
                                  const std::vector<int>& active);

// The CUDA ordinals a process started with CUDA_VISIBLE_DEVICES =
// `cuda_visible_devices` can use. CUDA renumbers the visible devices from 0 in
// every such process, so the result is 0..n-1 for an n-entry list: "0,1,3"
// and "GPU-8f2e...,GPU-11ab..." give {0,1,2} and {0,1}; a rank started with
// "2,3" uses ordinals 0 and 1, not 2 and 3. Entries are device indexes
// (non-negative integers) or UUIDs ("GPU-...", "MIG-..."), separated by
// commas, spaces around them ignored; "-1" ends the list as it does for CUDA
// ("-1" alone hides every device). "" = no devices (CPU): an empty vector.
// nullptr (the variable is unset) = unknown: kNotFound — the caller decides
// (ask the health probe how many GPUs there are, or run on the CPU).
// kInvalidArgument, quoting the entry, for anything else (an empty entry,
// "0,,1", "gpu0", a negative index other than -1, a repeated entry).
Result<std::vector<int>> ParseVisibleDevices(const char* cuda_visible_devices);

}  // namespace holdfast
