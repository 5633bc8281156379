// TCP store: the Store that ranks on several machines rendezvous through.
//
// One server (hosted by the leading supervisor daemon, or by a test or a local
// launcher through StartTcpStoreServer) holds the keys; every rank connects a
// client with ConnectTcpStore. Waiting calls (Get, Wait) are parked on the
// server and answered when the key is set or the timeout passes, so nobody
// polls. Wire format and limits: common/tcp_store_wire.h (keys up to 4 KiB,
// values up to 64 MiB). Only clients that hold the run's key are served: each
// connection opens with a challenge-response on it (common/peer_auth.h,
// docs/cluster-protocol.md "Trust"), in which the server proves it holds the
// key too. This header stays free of Boost so the trainer can include it; the
// event-loop-hosted server is in common/tcp_store_server.h.
//
// Thread-safety: a client may be shared by several threads; one mutex
// serialises its requests, so a long Get on one thread delays the others'
// calls on that client (use a client per thread where that matters).
// TcpStoreServer's methods may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/peer_auth.h"
#include "common/status.h"
#include "common/store.h"

namespace holdfast {

struct HostPort {
  std::string host;
  uint16_t port = 0;
  std::string ToString() const;  // "host:port", "[::1]:port" for IPv6 literals
};

// Parses "host:port" or "[v6addr]:port"; kInvalidArgument names the bad text.
Result<HostPort> ParseHostPort(const std::string& text);

// Connects to the store server at host:port, retrying refused/unreachable
// connects until connect_timeout has passed (ranks may start before the
// server), and proves it holds `key`. A client that loses its connection
// reconnects (and proves it again) on its next call. Non-waiting calls give
// up after kTcpStoreRequestTimeout; Get/Wait after their own timeout plus a
// grace period for the server's reply. kFailedPrecondition when the server
// refuses this client's proof, or does not prove the key itself (another
// run's store): retrying cannot help.
Result<std::shared_ptr<Store>> ConnectTcpStore(const std::string& host, uint16_t port, const RunKey& key,
                                               std::chrono::milliseconds connect_timeout);

// The key of the store this process's supervisor started: the file
// HOLDFAST_STORE_KEY_FILE names (common/launch_contract.h). kInvalidArgument
// when the variable is not set, ReadRunKey's errors otherwise.
Result<RunKey> StoreKeyFromEnvironment();

constexpr std::chrono::milliseconds kTcpStoreRequestTimeout{std::chrono::seconds(60)};

// A store server that runs its own event-loop thread. Destroying it stops it.
class TcpStoreServer {
 public:
  struct Impl;
  explicit TcpStoreServer(std::unique_ptr<Impl> impl);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  // The port it listens on (the real one when started with port 0).
  uint16_t port() const;
  // host:port to hand to clients.
  HostPort address() const;
  // Closes the listener and every connection (parked waiters see their
  // connection close) and joins the thread. Idempotent.
  void Stop();

 private:
  std::unique_ptr<Impl> impl_;
};

// Binds host:port (port 0 = any free port) and starts serving, on a new
// thread, the clients that hold `key`.
Result<std::unique_ptr<TcpStoreServer>> StartTcpStoreServer(const std::string& host, uint16_t port, const RunKey& key);

}  // namespace holdfast
