// ReplicaService: one holdfastd's side of the peer replicas of the memory
// snapshot tier in a run of several nodes (docs/memory-snapshots.md,
// "Several nodes"; the protocol: daemon/replica_wire.h; the files:
// daemon/replica_store.h).
//
// It serves the replica port on the address the node advertises for the
// cluster protocol (any free port), and says where in
// RUN_DIR/replicas/node-N (one line, "host:port"; the run directory is shared
// by the nodes, as for cluster.key). Two kinds of thread, none of them the
// event loop's:
//   - the server: accepts connections and serves each on a thread of its own
//     (a gather fetches from peers that may be gathering from it);
//   - the sender: every 100 ms looks for a step of the replicated ones
//     (multiples of `every`: the same steps on every node) whose files of
//     this node are all written (SetLocalFiles: its ranks' shards, and
//     MANIFEST.json where rank 0 runs: a committed step), holds it (hard
//     links; the ranks keep the newest such step until the next commits, so
//     none is missed between two looks) and pushes it to
//     the ring successor — the next node index with an endpoint that answers
//     — at most recovery.replica_mb_per_s, so that training traffic comes
//     first. A push that fails is tried again with the next step.
// The client calls (inventory, gather) block their caller; the leader makes
// them before a generation's ranks start.
//
// Thread-safety: SetLocalFiles, addr and the client functions from any
// thread; Stop (and the destructor) from the owner's thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/peer_auth.h"
#include "common/status.h"
#include "daemon/replica_store.h"
#include "daemon/replica_wire.h"

namespace holdfast {

class ReplicaConn;  // replica_service.cc

struct ReplicaServiceOptions {
  std::string root;       // the SnapshotDir's path
  int node = 0;           // this node's index in the allocation
  std::string bind_addr;  // the node's advertised address (NodeInfo::addr)
  std::string run_dir;    // endpoints go to RUN_DIR/replicas/
  uint64_t budget_bytes = 0;  // recovery.memory_budget_mb: the largest push accepted
  double mb_per_s = 0;        // recovery.replica_mb_per_s: the pushes' rate (MiB/s); 0 = unlimited
  int64_t every = 1;          // recovery.replica_step(): the steps replicated are its multiples
  bool send = true;           // false: serve only (tests)
};

class ReplicaService {
 public:
  // Binds, publishes the endpoint and starts the threads.
  static Result<std::unique_ptr<ReplicaService>> Start(ReplicaServiceOptions options, const RunKey& key);
  ~ReplicaService();
  ReplicaService(const ReplicaService&) = delete;
  ReplicaService& operator=(const ReplicaService&) = delete;

  // Stops the threads (connections in flight are cut) and withdraws the endpoint.
  void Stop();
  const std::string& addr() const { return addr_; }
  ReplicaStore& store() { return store_; }
  // The snapshot files this node's ranks write; empty = nothing to replicate.
  void SetLocalFiles(std::vector<std::string> names);
  // The newest step pushed to a peer; -1 none (tests, logs).
  int64_t last_pushed() const { return last_pushed_.load(); }

 private:
  ReplicaService(ReplicaServiceOptions options, const RunKey& key);
  void AcceptMain();
  void Serve(int fd);
  void ServeOn(ReplicaConn& conn);
  void SendMain();
  // Pushes held step `step` to the first successor that takes it.
  Status PushToSuccessor(int64_t step);
  Status Push(const std::string& addr, int64_t step);
  bool Stopping() const { return stop_.load(); }

  const ReplicaServiceOptions opts_;
  const RunKey key_;
  ReplicaStore store_;
  std::string addr_;
  std::string endpoint_file_;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> last_pushed_{-1};
  std::mutex mu_;
  std::condition_variable cv_;             // stop_ was set (the sender's wait)
  std::vector<std::string> local_files_;   // guarded by mu_
  std::set<int> open_fds_;                 // guarded by mu_: connections to cut at Stop
  int workers_ = 0;                        // guarded by mu_: connections being served (detached threads)
  std::condition_variable workers_done_;   // workers_ fell
  std::mutex push_mu_;                     // serialises the pushes this node receives
  std::thread accept_thread_, send_thread_;
};

// RUN_DIR/replicas/node-N of every node that published one: node -> "host:port".
std::map<int, std::string> ReadReplicaEndpoints(const std::string& run_dir);

// The client side: one request on a new, authenticated connection.
Result<std::vector<SnapshotCopy>> RequestInventory(const std::string& addr, const RunKey& key,
                                                   std::chrono::milliseconds timeout);
// The gather's note (where the files that were not there came from).
Result<std::string> RequestGather(const std::string& addr, const RunKey& key, int64_t step,
                                  const std::vector<GatherFile>& files, std::chrono::milliseconds timeout);
// Downloads one file of a copy into `dest` (created; removed on failure).
Status FetchFile(const ReplicaHolder& holder, const RunKey& key, int64_t step, const std::string& name,
                 const std::string& dest, std::chrono::milliseconds timeout);

}  // namespace holdfast
