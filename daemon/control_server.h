// ControlServer: holdfastd's end of the control protocol (daemon/
// control_protocol.h, docs/control-protocol.md) on RUN_DIR/holdfastd.sock and,
// on the leader, on a TCP port for runctl on other nodes
// (daemon/control_remote.h). Accepts connections, reads one request line at a
// time, learns who sent it — the Unix peer's uid (SO_PEERCRED), or the uid in
// the MUNGE credential a TCP line starts with — and answers with whatever the
// handler returns for that request and uid: one handler, so one rule of who
// may do what, for both ways in. A TCP line without a credential that proves
// its sender is answered Unauthenticated, its connection closed and the
// refusal logged (the same refusal once per address); the run does not
// notice. Owns no run state: the Supervisor's handler does.
//
// Thread-safety: loop thread only. A TCP request's credential is checked with
// a blocking round trip to this node's munged (a Unix socket; ~1 ms).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
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
  // Also serves TCP on addr:port (0 = a port the OS picks), checking each
  // request's credential with munged at `munge_socket` ("" = the default).
  // Returns the port it listens on.
  Result<uint16_t> ListenTcp(const std::string& addr, uint16_t port, std::string munge_socket);
  // Stops accepting and removes the socket file.
  void Close();

 private:
  void Accept();
  void AcceptTcp();
  template <typename Socket>
  void Serve(std::shared_ptr<Socket> sock, std::shared_ptr<boost::asio::streambuf> buf, std::string peer);
  // The reply to one line from `peer` ("" for the Unix socket); *close_after
  // when the connection ends after it.
  std::string Answer(int fd, const std::string& peer, const std::string& line, bool* close_after);
  void LogRefusal(const std::string& peer, const std::string& why);

  boost::asio::io_context& io_;
  std::string path_;
  Handler handler_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  boost::asio::ip::tcp::acceptor tcp_acceptor_;
  std::string tcp_where_;      // "addr:port" the credentials must name
  std::string munge_socket_;
  std::set<std::string> refused_;  // "ip why" of the TCP refusals logged so far
};

}  // namespace holdfast
