// AsioTcpStoreServer: the TCP store server hosted on a caller's event loop.
//
// The supervisor daemon runs one on its own boost::asio::io_context so the
// store shares the daemon's single event-loop thread (Envoy style: that thread
// owns all of the store's state; other threads post() to it). For a server with
// its own thread use StartTcpStoreServer in common/tcp_store.h. Wire format:
// common/tcp_store_wire.h. Every connection is challenged first: a client
// that does not prove it holds the run's key (common/peer_auth.h) is answered
// with an error, closed and logged (the same refusal once per address); the store and its
// other clients carry on.
//
// Thread-safety: Listen may be called from any thread before the loop serves
// the server; port() from any thread; Shutdown and the destructor only on the
// loop's thread, or while the loop is not running.
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <memory>
#include <string>

#include "common/peer_auth.h"
#include "common/status.h"

namespace holdfast {

class AsioTcpStoreServer {
 public:
  // Binds host:port (0 = any free port) and starts accepting on `io` (not
  // owned; must outlive the server and every handler it queued) clients that
  // hold `key`.
  static Result<std::unique_ptr<AsioTcpStoreServer>> Listen(boost::asio::io_context* io, const std::string& host,
                                                            uint16_t port, const RunKey& key);
  ~AsioTcpStoreServer();  // Shutdown()
  AsioTcpStoreServer(const AsioTcpStoreServer&) = delete;
  AsioTcpStoreServer& operator=(const AsioTcpStoreServer&) = delete;

  uint16_t port() const { return port_; }
  // Stops accepting and closes every connection; the store's data is dropped
  // with the server. Queued handlers finish with operation_aborted, so after
  // this a loop with nothing else to do returns from run(). Idempotent.
  void Shutdown();

  // Open client connections (for tests and the daemon's status page). Loop thread only.
  size_t connection_count() const;

  class Impl;

 private:
  AsioTcpStoreServer(std::shared_ptr<Impl> impl, uint16_t port);
  std::shared_ptr<Impl> impl_;  // shared with in-flight handlers
  uint16_t port_;
};

}  // namespace holdfast
