#include "trainer/rl/reward_server.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <boost/asio.hpp>
#include <charconv>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <unordered_set>
#include <utility>

namespace holdfast::rl {

namespace asio = boost::asio;
using asio::ip::tcp;
using json = nlohmann::json;

namespace {

constexpr int kMaxDepth = 8;  // {"items": [{...}]} needs 3

std::string CleanJsonError(const char* what) {
  std::string s(what);
  if (!s.empty() && s[0] == '[') {
    const size_t end = s.find("] ");
    if (end != std::string::npos) s.erase(0, end + 2);
  }
  return s;
}

// The request as a JSON object, or what is wrong with it.
Result<json> ParseObject(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.find_first_not_of(" \t") == std::string_view::npos) {
    return InvalidArgumentError("an empty line; send one JSON object per line");
  }
  bool too_deep = false;
  json::parser_callback_t limit_depth = [&too_deep](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= kMaxDepth) {
      too_deep = true;
      return false;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(line.begin(), line.end(), limit_depth);
  } catch (const json::exception& e) {
    return InvalidArgumentError("the request is not JSON: " + CleanJsonError(e.what()));
  }
  if (too_deep) return InvalidArgumentError("the request nests deeper than " + std::to_string(kMaxDepth) + " levels");
  if (!j.is_object()) {
    return InvalidArgumentError("the request must be a JSON object, got " + std::string(j.type_name()));
  }
  return j;
}

const char* kRequestShape =
    " (a request is {\"id\": <integer>, \"task\": \"<task spec>\", \"items\": [{\"prompt_index\": <integer "
    ">= 0>, \"split\": \"train\"|\"eval\", \"completion\": \"<text>\"}, ...]}; docs/rl-reward.md)";

}  // namespace

// ---- RewardHandler ----------------------------------------------------------

Result<std::unique_ptr<RewardHandler>> RewardHandler::Create(const std::vector<TaskSpec>& specs) {
  if (specs.empty()) return InvalidArgumentError("the reward service needs at least one task (--task add2)");
  std::unique_ptr<RewardHandler> h(new RewardHandler());
  for (const TaskSpec& spec : specs) {
    for (const auto& t : h->tasks_) {
      if (t->spec() == spec) return InvalidArgumentError("task '" + spec.ToString() + "' given twice");
    }
    HF_ASSIGN_OR_RETURN(std::unique_ptr<Task> task, Task::Create(spec));
    h->tasks_.push_back(std::move(task));
  }
  return h;
}

std::string RewardHandler::TaskList() const {
  std::string out;
  for (const auto& t : tasks_) out += (out.empty() ? "" : ", ") + t->spec().ToString();
  return out;
}

RewardHandler::Answer RewardHandler::Handle(std::string_view line) const {
  Answer a;
  json id = nullptr;
  auto fail = [&](const std::string& why) {
    a.ok = false;
    a.items = 0;
    a.reward_sum = 0;
    a.line = json{{"id", id}, {"error", why}}.dump();
    return a;
  };
  auto parsed = ParseObject(line);
  if (!parsed.ok()) return fail(parsed.status().message() + kRequestShape);
  const json& req = *parsed;

  const auto id_it = req.find("id");
  if (id_it == req.end()) return fail(std::string("missing \"id\"") + kRequestShape);
  if (!id_it->is_number_integer()) {
    return fail("\"id\" must be an integer, got " + std::string(id_it->type_name()) + kRequestShape);
  }
  id = *id_it;

  const auto task_it = req.find("task");
  if (task_it == req.end() || !task_it->is_string()) {
    return fail(std::string("\"task\" must be a string such as \"add2\"") + kRequestShape);
  }
  auto spec = ParseTaskSpec(task_it->get<std::string>());
  if (!spec.ok()) return fail(spec.status().message());
  const Task* task = nullptr;
  for (const auto& t : tasks_) {
    if (t->spec() == *spec) task = t.get();
  }
  if (task == nullptr) {
    return fail("task '" + spec->ToString() + "' is not served here; this service scores: " + TaskList() +
                ". Start holdfast-reward with --task " + spec->ToString() + " or ask for one of those");
  }

  const auto items_it = req.find("items");
  if (items_it == req.end() || !items_it->is_array()) {
    return fail(std::string("\"items\" must be an array") + kRequestShape);
  }
  std::vector<double> rewards;
  rewards.reserve(items_it->size());
  double sum = 0;
  for (size_t i = 0; i < items_it->size(); ++i) {
    const json& item = (*items_it)[i];
    const std::string where = "items[" + std::to_string(i) + "]";
    if (!item.is_object()) return fail(where + " must be an object" + kRequestShape);
    const auto idx = item.find("prompt_index");
    if (idx == item.end() || !idx->is_number_integer() ||
        (idx->is_number_integer() && !idx->is_number_unsigned() && idx->get<int64_t>() < 0)) {
      return fail(where + ": \"prompt_index\" must be an integer >= 0" + kRequestShape);
    }
    const auto split_it = item.find("split");
    if (split_it == item.end() || !split_it->is_string()) {
      return fail(where + ": \"split\" must be \"train\" or \"eval\"" + kRequestShape);
    }
    auto split = ParseSplit(split_it->get<std::string>());
    if (!split.ok()) return fail(where + ": " + split.status().message());
    const auto completion = item.find("completion");
    if (completion == item.end() || !completion->is_string()) {
      return fail(where + ": \"completion\" must be a string" + kRequestShape);
    }
    const TaskPrompt prompt = task->Prompt(idx->get<uint64_t>(), *split);
    const double r = task->Reward(prompt, completion->get_ref<const std::string&>());
    rewards.push_back(r);
    sum += r;
  }
  a.ok = true;
  a.items = rewards.size();
  a.reward_sum = sum;
  a.line = json{{"id", id}, {"rewards", rewards}}.dump();
  return a;
}

Result<HostPort> ParseListenAddress(const std::string& text, const std::string& default_host) {
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError("--listen '" + text + "' " + why +
                                " (expected HOST:PORT, [V6ADDR]:PORT or :PORT; port 0 = any free port)");
  };
  HostPort out;
  std::string port_text;
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return bad("has an unterminated '[' or no port");
    }
    out.host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos) return bad("has no port");
    out.host = text.substr(0, colon);
    if (out.host.find(':') != std::string::npos) return bad("is an IPv6 address without brackets");
    port_text = text.substr(colon + 1);
  }
  if (out.host.empty()) out.host = default_host;
  unsigned port = 0;
  auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || ptr != port_text.data() + port_text.size() || port > 65535) {
    return bad("has port '" + port_text + "', which is not a number in 0..65535");
  }
  out.port = static_cast<uint16_t>(port);
  return out;
}

// ---- RewardServer -------------------------------------------------------------

class RewardServer::Impl : public std::enable_shared_from_this<RewardServer::Impl> {
 public:
  Impl(const RewardServerOptions& options, std::unique_ptr<RewardHandler> handler, ProgressSink& progress)
      : options_(options), handler_(std::move(handler)), progress_(progress), acceptor_(io_), heartbeat_(io_) {}

  Status Listen();
  void Run();
  void Stop();
  HostPort address() const { return {options_.host, port_}; }
  RewardServerStats stats() const {
    std::lock_guard<std::mutex> lock(stats_mu_);
    return stats_;
  }

  class Connection;

 private:
  void Accept();
  void Heartbeat();
  // One request line from a connection: the response line.
  std::string Answer(std::string_view line);

  const RewardServerOptions options_;
  const std::unique_ptr<RewardHandler> handler_;
  ProgressSink& progress_;  // not owned; loop thread only
  asio::io_context io_;
  tcp::acceptor acceptor_;
  asio::steady_timer heartbeat_;
  uint16_t port_ = 0;
  std::thread thread_;
  std::once_flag stop_once_;
  std::unordered_set<std::shared_ptr<Connection>> connections_;  // loop thread only
  bool stopping_ = false;  // loop thread only: Stop has closed everything; arm nothing new
  mutable std::mutex stats_mu_;
  RewardServerStats stats_;  // guarded by stats_mu_ (written on the loop thread)
  // Since the last log line (loop thread only).
  uint64_t window_items_ = 0;
  double window_reward_ = 0;
};

class RewardServer::Impl::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Impl* server, tcp::socket socket)
      : server_(server), socket_(std::move(socket)), buf_(server->options_.max_line_bytes) {}

  void Start() { Read(); }
  void Close() {
    boost::system::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }

 private:
  void Read() {
    asio::async_read_until(
        socket_, buf_, '\n', [self = shared_from_this()](const boost::system::error_code& e, size_t n) {
          if (e == asio::error::operation_aborted || self->server_->stopping_) return;
          if (e == asio::error::not_found) {
            // The line does not fit: say so, then hang up (the rest of it would be read as requests).
            self->closing_ = true;
            self->Send(
                json{{"id", nullptr},
                     {"error", "a request line longer than " + std::to_string(self->server_->options_.max_line_bytes) +
                                   " bytes (the limit, newline included); send fewer items per request"}}
                    .dump());
            return;
          }
          if (e) {
            self->Finish();
            return;
          }
          std::string line(asio::buffers_begin(self->buf_.data()),
                           asio::buffers_begin(self->buf_.data()) + static_cast<std::ptrdiff_t>(n) - 1);
          self->buf_.consume(n);
          self->Send(self->server_->Answer(line));
          self->Read();
        });
  }

  void Send(std::string line) {
    line.push_back('\n');
    out_.push_back(std::move(line));
    if (out_.size() == 1) Write();
  }

  void Write() {
    asio::async_write(socket_, asio::buffer(out_.front()),
                      [self = shared_from_this()](const boost::system::error_code& e, size_t) {
                        if (e == asio::error::operation_aborted) return;
                        if (e) {
                          self->Finish();
                          return;
                        }
                        self->out_.pop_front();
                        if (!self->out_.empty()) {
                          self->Write();
                        } else if (self->closing_) {
                          self->Finish();
                        }
                      });
  }

  // The peer is gone or hung up on: forget the connection.
  void Finish() {
    Close();
    server_->connections_.erase(shared_from_this());
  }

  Impl* server_;  // owns this connection (connections_)
  tcp::socket socket_;
  asio::streambuf buf_;          // bytes received, not yet answered; at most max_line_bytes
  std::deque<std::string> out_;  // responses to write, the front one in flight
  bool closing_ = false;         // close once out_ is written
};

Status RewardServer::Impl::Listen() {
  boost::system::error_code ec;
  tcp::resolver resolver(io_);
  auto results = resolver.resolve(options_.host, std::to_string(options_.port),
                                  tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) {
    return InvalidArgumentError("reward service: cannot resolve listen host '" + options_.host +
                                "': " + (ec ? ec.message() : "no address") + "; pass --listen ADDRESS:PORT");
  }
  const tcp::endpoint endpoint = results.begin()->endpoint();
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return UnavailableError("reward service: cannot listen on " + HostPort{options_.host, options_.port}.ToString() +
                            ": " + ec.message() + "; pick another --listen address or port (0 = any free port)");
  }
  port_ = acceptor_.local_endpoint().port();
  return Status::Ok();
}

void RewardServer::Impl::Run() {
  progress_.SetPhase(Phase::kData);
  Accept();
  Heartbeat();
  thread_ = std::thread([self = shared_from_this()] { self->io_.run(); });
}

void RewardServer::Impl::Stop() {
  std::call_once(stop_once_, [this] {
    // Closing happens on the loop. Every pending handler then finishes (with
    // operation_aborted) and drops its reference, so run() returns for want
    // of work and nothing is left holding this Impl.
    asio::post(io_, [this] {
      stopping_ = true;
      boost::system::error_code ec;
      acceptor_.close(ec);
      heartbeat_.cancel();
      for (const auto& c : connections_) c->Close();
      connections_.clear();
    });
    if (thread_.joinable()) thread_.join();
  });
}

void RewardServer::Impl::Accept() {
  acceptor_.async_accept([self = shared_from_this()](const boost::system::error_code& e, tcp::socket socket) {
    if (e == asio::error::operation_aborted || self->stopping_) return;
    if (!e) {
      boost::system::error_code ec;
      socket.set_option(tcp::no_delay(true), ec);
      auto c = std::make_shared<Connection>(self.get(), std::move(socket));
      self->connections_.insert(c);
      {
        std::lock_guard<std::mutex> lock(self->stats_mu_);
        ++self->stats_.connections_accepted;
      }
      c->Start();
    } else {
      // EMFILE and friends: keep serving the connections we have.
      spdlog::warn("reward service: accept failed: {}", e.message());
    }
    self->Accept();
  });
}

void RewardServer::Impl::Heartbeat() {
  heartbeat_.expires_after(std::chrono::milliseconds(static_cast<int64_t>(options_.heartbeat_s * 1000)));
  heartbeat_.async_wait([self = shared_from_this()](const boost::system::error_code& e) {
    if (e || self->stopping_) return;
    self->progress_.SetPhase(Phase::kData);  // idle but alive: waiting for requests
    self->Heartbeat();
  });
}

std::string RewardServer::Impl::Answer(std::string_view line) {
  progress_.BeginStep();
  RewardHandler::Answer a = handler_->Handle(line);
  uint64_t requests = 0, errors = 0;
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    if (a.ok) {
      ++stats_.requests;
      stats_.items += a.items;
    } else {
      ++stats_.errors;
    }
    requests = stats_.requests;
    errors = stats_.errors;
  }
  progress_.EndStep(static_cast<int64_t>(requests + errors));
  if (!a.ok) {
    spdlog::warn("reward service: answered a bad request: {}", a.line.substr(0, 300));
    return std::move(a.line);
  }
  window_items_ += a.items;
  window_reward_ += a.reward_sum;
  if (options_.log_every > 0 && requests % options_.log_every == 0) {
    spdlog::info(
        "reward service: {} requests answered ({} bad), {} connections open; last {}: {} items, mean reward {:.4f}",
        requests, errors, connections_.size(), options_.log_every, window_items_,
        window_items_ > 0 ? window_reward_ / static_cast<double>(window_items_) : 0.0);
    window_items_ = 0;
    window_reward_ = 0;
  }
  return std::move(a.line);
}

RewardServer::RewardServer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

RewardServer::~RewardServer() { Stop(); }

Result<std::unique_ptr<RewardServer>> RewardServer::Start(const RewardServerOptions& options,
                                                          ProgressSink& progress) {
  if (options.max_line_bytes < 64) return InvalidArgumentError("reward service: max_line_bytes must be >= 64");
  if (!(options.heartbeat_s > 0)) return InvalidArgumentError("reward service: heartbeat_s must be > 0");
  HF_ASSIGN_OR_RETURN(std::unique_ptr<RewardHandler> handler, RewardHandler::Create(options.tasks));
  auto impl = std::make_shared<Impl>(options, std::move(handler), progress);
  HF_RETURN_IF_ERROR(impl->Listen());
  impl->Run();
  return std::unique_ptr<RewardServer>(new RewardServer(std::move(impl)));
}

HostPort RewardServer::address() const { return impl_->address(); }
RewardServerStats RewardServer::stats() const { return impl_->stats(); }
void RewardServer::Stop() { impl_->Stop(); }

}  // namespace holdfast::rl
