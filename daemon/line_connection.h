// LineConnection: newline-delimited lines over a connected TCP socket, on the
// daemon's event loop — the framing of the cluster protocol between the
// leading holdfastd and its followers (docs/cluster-protocol.md). It knows
// nothing of JSON: it hands each received line, without its '\n', to the
// owner (who parses it: daemon/cluster_protocol.h) and writes whole lines in
// the order they were sent.
//
// A line longer than max_line_bytes (newline included; by default
// kMaxClusterMessageBytes) closes the connection, as does any socket error or
// the peer hanging up; the close callback runs exactly once, with why, and no
// line is delivered after it — whoever closed (the peer, an error, or the
// owner through Close). Close drops lines not yet written; CloseAfterSending
// writes them first (a reject before hanging up).
//
// A peer that stops answering closes nothing by itself: a node cut off the
// network, or powered off, leaves the socket open, idle forever (or, with
// data unacknowledged, for the kernel's ~15 minutes of retransmissions).
// SetPeerTimeout bounds that: then a peer silent at the TCP level for about
// that long closes the connection ("no answer from the peer for N s").
//
// Thread-safety: loop thread only: create it, call it and let its callbacks
// run on the thread that runs the socket's io_context. It keeps itself alive
// (shared_from_this) while a read or write is in flight, so create it with
// std::make_shared and hold it while it is wanted.
#pragma once

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include <boost/asio.hpp>

#include "common/status.h"
#include "daemon/cluster_protocol.h"

namespace holdfast {

class LineConnection : public std::enable_shared_from_this<LineConnection> {
 public:
  using OnLine = std::function<void(std::string_view line)>;
  using OnClose = std::function<void(const std::string& why)>;

  explicit LineConnection(boost::asio::ip::tcp::socket socket, size_t max_line_bytes = kMaxClusterMessageBytes)
      : socket_(std::move(socket)), max_line_bytes_(max_line_bytes), buf_(max_line_bytes) {
    HF_CHECK(max_line_bytes_ >= 2);
  }

  // Closes the connection when the peer's TCP stack has answered nothing for
  // about `seconds` (> 0): keepalive probes an idle connection, and
  // TCP_USER_TIMEOUT gives up on data the peer does not acknowledge. A live
  // peer's kernel answers both however busy its process is, so only a node
  // that is gone or unreachable trips it. Call before Start.
  Status SetPeerTimeout(double seconds) {
    HF_CHECK(seconds > 0);
    peer_timeout_s_ = seconds;
    const int fd = socket_.native_handle();
    const int on = 1;
    const int idle_s = std::max(1, static_cast<int>(seconds / 3));
    const int interval_s = std::max(1, static_cast<int>(seconds / 6));
    const int probes = 6;  // TCP_USER_TIMEOUT decides when to give up; this only bounds the probes
    const unsigned int user_timeout_ms = static_cast<unsigned int>(seconds * 1000);
    if (::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on)) != 0 ||
        ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s)) != 0 ||
        ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s)) != 0 ||
        ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes)) != 0 ||
        ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms)) != 0) {
      return ErrnoError("set the cluster connection's peer timeout", errno);
    }
    return Status::Ok();
  }

  // Starts reading. on_line gets each line without its '\n' (the view is
  // valid during the call only); it may Send, Close or drop its reference.
  void Start(OnLine on_line, OnClose on_close) {
    on_line_ = std::move(on_line);
    on_close_ = std::move(on_close);
    Read();
  }

  // Queues one line; a '\n' is appended when it lacks one. A line must not
  // hold another '\n' nor exceed max_line_bytes with its newline: the peer
  // would drop the connection, so that is a programming error (HF_CHECK).
  // Ignored once closing.
  void Send(std::string line) {
    if (closed_ || closing_) return;
    if (line.empty() || line.back() != '\n') line.push_back('\n');
    HF_CHECK_MSG(line.size() <= max_line_bytes_,
                 "LineConnection::Send: a line of " + std::to_string(line.size()) + " bytes; the limit is " +
                     std::to_string(max_line_bytes_));
    HF_CHECK_MSG(line.find('\n') == line.size() - 1, "LineConnection::Send: a line with an inner newline");
    out_.push_back(std::move(line));
    if (out_.size() == 1) Write();
  }

  // Closes now: unsent lines are dropped; on_close(why) runs unless it ran already.
  void Close(const std::string& why) {
    if (closed_) return;
    closed_ = true;
    closing_ = true;  // out_ stays: an aborted write may still point into its front
    boost::system::error_code ec;
    socket_.shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    on_line_ = nullptr;
    OnClose cb = std::move(on_close_);
    on_close_ = nullptr;
    if (cb) cb(why);
  }

  // Stops reading, writes the lines already sent, then closes with why.
  void CloseAfterSending(const std::string& why) {
    if (closed_ || closing_) return;
    closing_ = true;
    close_why_ = why;
    if (out_.empty()) Close(why);
  }

  bool closed() const { return closed_; }
  size_t max_line_bytes() const { return max_line_bytes_; }

 private:
  void Read() {
    boost::asio::async_read_until(
        socket_, buf_, '\n', [self = shared_from_this()](const boost::system::error_code& e, size_t n) {
          if (self->closed_ || self->closing_) return;
          if (e) {
            self->Close(self->ReadError(e));
            return;
          }
          // The line is copied out so that on_line may Send or Close freely.
          // (buffer_copy, not buffers_begin's byte iterator: a tenth of the leader's CPU at 2048 ranks.)
          std::string line(n - 1, '\0');
          boost::asio::buffer_copy(boost::asio::buffer(line), self->buf_.data(), n - 1);
          self->buf_.consume(n);
          // Held in a local while it runs: a Close inside it releases the
          // callbacks (they often hold this connection), which must not
          // destroy the function being called.
          OnLine on_line = std::move(self->on_line_);
          if (on_line) on_line(line);
          if (self->closed_) return;
          self->on_line_ = std::move(on_line);
          if (!self->closing_) self->Read();
        });
  }

  std::string ReadError(const boost::system::error_code& e) const {
    if (e == boost::asio::error::not_found) {
      return "the peer sent a line longer than " + std::to_string(max_line_bytes_) +
             " bytes (the limit, newline included)";
    }
    if (e == boost::asio::error::eof) {
      return buf_.size() == 0 ? "the peer closed the connection"
                              : "the peer closed the connection in the middle of a line";
    }
    return "read: " + PeerError(e);
  }

  std::string PeerError(const boost::system::error_code& e) const {
    if (e == boost::asio::error::timed_out && peer_timeout_s_ > 0) {
      char text[128];
      std::snprintf(text, sizeof(text), "no answer from the peer for %.0f s (its node is down or cut off the network)",
                    peer_timeout_s_);
      return text;
    }
    return e.message();
  }

  void Write() {
    boost::asio::async_write(socket_, boost::asio::buffer(out_.front()),
                             [self = shared_from_this()](const boost::system::error_code& e, size_t) {
                               if (self->closed_) return;
                               if (e) {
                                 self->Close("write: " + self->PeerError(e));
                                 return;
                               }
                               self->out_.pop_front();
                               if (!self->out_.empty()) {
                                 self->Write();
                               } else if (self->closing_) {
                                 self->Close(self->close_why_);
                               }
                             });
  }

  boost::asio::ip::tcp::socket socket_;
  const size_t max_line_bytes_;
  boost::asio::streambuf buf_;    // received bytes not yet delivered; at most max_line_bytes_
  std::deque<std::string> out_;   // lines to write, the front one in flight
  OnLine on_line_;
  OnClose on_close_;
  bool closing_ = false;   // no more reads or sends; close once out_ is written
  std::string close_why_;  // for CloseAfterSending
  bool closed_ = false;
  double peer_timeout_s_ = 0;  // SetPeerTimeout's, for the close reason
};

}  // namespace holdfast
