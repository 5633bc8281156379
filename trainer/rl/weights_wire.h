// Policy weights over the network: the GRPO learner's rank 0 serves each
// version it publishes from memory (WeightsServer), and every rollout worker
// holds one connection to it on a thread of its own (WeightsSubscriber) that
// receives each newer version as soon as the learner hands it over — before
// the exchange directory's copy is written, and without the learner's
// training thread waiting on anything. The exchange directory stays (its
// copy is what outlives processes: a worker that cannot reach the learner, a
// learner that restarted, loads from files as before; docs/rl.md).
//
// The wire (TCP; docs/rl.md "Weights over the network"):
//   S->C  {"v":1,"challenge":HEX64}
//   C->S  {"nonce":HEX64,"proof":HEX64}     HMAC(run key, "holdfast weights v1 client", challenge, nonce)
//   S->C  {"proof":HEX64}                   HMAC(run key, "holdfast weights v1 server", nonce, challenge)
//         or {"error":"..."} and the connection closes
//   then, any number of times:
//   C->S  {"after":V}                       the newest version it has (-1: none)
//   S->C  {"version":N,"index":I,"data":D,"xxh3":HEX16}\n then I bytes of
//         params.json text and D bytes of float32 data (params.bin): the
//         newest version N > V, sent as soon as there is one
// The subscriber checks the XXH3-64 of the index and data (seeded: the
// index's hash seeds the data's) and parses them as ReadParamsDump checks a
// folder, before anyone sees the version. A peer without the run's key gets
// nothing.
//
// Thread-safety: both classes are safe to call from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/peer_auth.h"
#include "common/status.h"
#include "common/tcp_store.h"
#include "trainer/rl/params_dump.h"

namespace holdfast::rl {

// DIR/weights.addr: HOST:PORT of the learner's WeightsServer.
std::string WeightsAddressPath(const std::string& exchange_dir);

class WeightsServer {
 public:
  // Listens on host:0 (a free port) and serves from its own threads.
  static Result<std::unique_ptr<WeightsServer>> Start(const std::string& host, RunKey key);
  ~WeightsServer();  // Stop()
  WeightsServer(const WeightsServer&) = delete;
  WeightsServer& operator=(const WeightsServer&) = delete;

  HostPort address() const;
  // Makes `version` the newest: every subscriber waiting for one newer than
  // what it has gets it now. Versions may go down (never on one server: a
  // learner that resumed runs a new server). The dump is shared, not copied
  // (the publisher writes the files from the same one).
  void Publish(int64_t version, std::shared_ptr<const ParamsDump> dump);
  // Versions sent so far (all subscribers together): for logs and tests.
  uint64_t sent() const;
  void Stop();

  class Impl;

 private:
  explicit WeightsServer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

// A version received and verified.
struct ReceivedWeights {
  int64_t version = -1;
  std::shared_ptr<const ParamsDump> dump;
  std::string from;  // HOST:PORT it came from
  double transfer_ms = 0;  // from its header to its last byte, verified and parsed
};

class WeightsSubscriber {
 public:
  // Reads the server's address from `addr_file` at each (re)connect; proves
  // `key`. Starts its thread now; connects when the file names a server.
  WeightsSubscriber(std::string addr_file, RunKey key);
  ~WeightsSubscriber();  // stops and joins its thread
  WeightsSubscriber(const WeightsSubscriber&) = delete;
  WeightsSubscriber& operator=(const WeightsSubscriber&) = delete;

  // The newest version received on the current connection; none while
  // disconnected (a learner that died and restarted may publish older
  // versions: what came from the old one is no longer the policy).
  std::optional<ReceivedWeights> Latest() const;
  // Connections made so far (a reconnect counts).
  uint64_t connects() const;

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace holdfast::rl
