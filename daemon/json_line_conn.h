// JsonLineConnection: newline-delimited JSON messages over a TCP socket, on
// the daemon's event loop. Used between the leading holdfastd and its
// followers (one per node). Messages are at most kMaxClusterMessageBytes;
// a longer or malformed line closes the connection (the peer is then lost).
//
// Thread-safety: loop thread only. Owned through shared_ptr by its handlers.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio.hpp>
#include <nlohmann/json.hpp>

namespace holdfast {

inline constexpr size_t kMaxClusterMessageBytes = 4 << 20;

class JsonLineConnection : public std::enable_shared_from_this<JsonLineConnection> {
 public:
  using OnMessage = std::function<void(const nlohmann::json&)>;
  using OnClose = std::function<void(const std::string& why)>;

  explicit JsonLineConnection(boost::asio::ip::tcp::socket socket)
      : socket_(std::move(socket)), buf_(kMaxClusterMessageBytes) {}

  // Starts reading; callbacks run on the loop thread.
  void Start(OnMessage on_message, OnClose on_close) {
    on_message_ = std::move(on_message);
    on_close_ = std::move(on_close);
    Read();
  }

  void Send(const nlohmann::json& message) {
    if (closed_) return;
    out_.push_back(message.dump() + "\n");
    if (out_.size() == 1) Write();
  }

  void Close(const std::string& why) {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ec;
    socket_.close(ec);
    if (on_close_) {
      auto cb = std::move(on_close_);
      cb(why);
    }
  }

  bool closed() const { return closed_; }

 private:
  void Read() {
    boost::asio::async_read_until(socket_, buf_, '\n',
                                  [self = shared_from_this()](const boost::system::error_code& e, size_t n) {
                                    if (e) {
                                      self->Close(e == boost::asio::error::not_found ? "message too long"
                                                                                      : e.message());
                                      return;
                                    }
                                    std::string line(boost::asio::buffers_begin(self->buf_.data()),
                                                     boost::asio::buffers_begin(self->buf_.data()) +
                                                         static_cast<long>(n));
                                    self->buf_.consume(n);
                                    nlohmann::json msg = nlohmann::json::parse(line, nullptr, false);
                                    if (msg.is_discarded() || !msg.is_object() || !msg.contains("type")) {
                                      self->Close("malformed message from peer");
                                      return;
                                    }
                                    if (self->on_message_) self->on_message_(msg);
                                    if (!self->closed_) self->Read();
                                  });
  }

  void Write() {
    boost::asio::async_write(socket_, boost::asio::buffer(out_.front()),
                             [self = shared_from_this()](const boost::system::error_code& e, size_t) {
                               if (e) {
                                 self->Close(e.message());
                                 return;
                               }
                               self->out_.pop_front();
                               if (!self->out_.empty()) self->Write();
                             });
  }

  boost::asio::ip::tcp::socket socket_;
  boost::asio::streambuf buf_;
  std::deque<std::string> out_;
  OnMessage on_message_;
  OnClose on_close_;
  bool closed_ = false;
};

}  // namespace holdfast
