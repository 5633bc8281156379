// ControlServer: holdfastd's end of the control protocol (daemon/
// control_protocol.h, docs/control-protocol.md) on RUN_DIR/holdfastd.sock.
// Accepts connections, reads one request line at a time, checks the peer's
// credentials, and answers with whatever the handler returns. Owns no run
// state: the Supervisor's handler does.
//
// Thread-safety: loop thread only.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>

#include <boost/asio.hpp>

#include "common/status.h"
#include "daemon/control_protocol.h"

namespace holdfast {

class ControlServer : public std::enable_shared_from_this<ControlServer> {
 public:
  // Returns the encoded response line for a parsed request from `peer_uid`.
  using Handler = std::function<std::string(const ControlRequest& request, uid_t peer_uid)>;

  // `io` is not owned and must outlive the server.
  ControlServer(boost::asio::io_context* io, std::string socket_path, Handler handler);

  // Binds the socket (removing a stale file first: the run lock proves no
  // other daemon owns it) and starts accepting.
  Status Start();
  // Stops accepting and removes the socket file.
  void Close();

 private:
  void Accept();
  void Serve(std::shared_ptr<boost::asio::local::stream_protocol::socket> sock,
             std::shared_ptr<boost::asio::streambuf> buf);

  boost::asio::io_context& io_;
  std::string path_;
  Handler handler_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
};

}  // namespace holdfast
