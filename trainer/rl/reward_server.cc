#include "trainer/rl/reward_server.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <boost/asio.hpp>
#include <charconv>
#include <deque>
#include <map>
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

std::string RewardHandler::RewardsLine(const std::string& id, const std::vector<double>& rewards) {
  return json{{"id", json::parse(id)}, {"rewards", rewards}}.dump();
}

std::string RewardHandler::ErrorLine(const std::string& id, const std::string& why) {
  return json{{"id", json::parse(id)}, {"error", why}}.dump();
}

bool RewardHandler::Visit(std::string_view line, const ItemFn& visit, std::string* id_text, Answer* error) const {
  json id = nullptr;
  auto fail = [&](const std::string& why) {
    error->ok = false;
    error->items = 0;
    error->reward_sum = 0;
    error->line = json{{"id", id}, {"error", why}}.dump();
    return false;
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
  *id_text = id.dump();

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
  // Every item is checked before any is visited: a bad one scores nothing.
  std::vector<std::pair<TaskPrompt, const std::string*>> items;
  items.reserve(items_it->size());
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
    items.emplace_back(task->Prompt(idx->get<uint64_t>(), *split), &completion->get_ref<const std::string&>());
  }
  for (const auto& [prompt, completion] : items) visit(*task, prompt, *completion);
  return true;
}

RewardHandler::Answer RewardHandler::Handle(std::string_view line) const {
  Answer a;
  std::string id;
  std::vector<double> rewards;
  double sum = 0;
  const bool ok = Visit(
      line,
      [&](const Task& task, const TaskPrompt& prompt, const std::string& completion) {
        const double r = task.Reward(prompt, completion);
        rewards.push_back(r);
        sum += r;
      },
      &id, &a);
  if (!ok) return a;
  a.ok = true;
  a.items = rewards.size();
  a.reward_sum = sum;
  a.line = RewardsLine(id, rewards);
  return a;
}

Result<RewardHandler::TextRequest> RewardHandler::ParseTexts(std::string_view line, Answer* error) const {
  TextRequest r;
  const bool ok = Visit(
      line,
      [&](const Task&, const TaskPrompt& prompt, const std::string& completion) {
        const size_t newline = completion.find('\n');
        r.texts.push_back(prompt.prompt +
                          (newline == std::string::npos ? completion : completion.substr(0, newline + 1)));
      },
      &r.id, error);
  if (!ok) return InvalidArgumentError(error->line);
  return r;
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
      : options_(options),
        handler_(std::move(handler)),
        progress_(progress),
        acceptor_(io_),
        heartbeat_(io_),
        scorer_work_(asio::make_work_guard(scorer_io_)) {}

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
  // A request waiting for the scorer: its connection and place in that
  // connection's answers, and its texts.
  struct Pending {
    std::shared_ptr<Connection> connection;
    uint64_t slot = 0;
    RewardHandler::TextRequest request;
  };
  // The requests of one scorer call and what it returned.
  struct Batch {
    std::vector<Pending> requests;
    std::vector<size_t> sizes;  // texts of each request, in order
    std::vector<std::string> texts;
    Result<std::vector<double>> rewards = std::vector<double>();
    double seconds = 0;
  };

  void Accept();
  void Heartbeat();
  // One request line from a connection, answered in its slot.
  void Submit(const std::shared_ptr<Connection>& connection, uint64_t slot, std::string_view line);
  // One request line under the tasks' rules: the response line.
  std::string Answer(std::string_view line);
  // With a scorer: hands the waiting requests to the scoring thread when it is free.
  void Kick();
  void Scored(const std::shared_ptr<Batch>& batch);
  // Stats and the progress record after a request is answered.
  void Count(bool ok, size_t items, double reward_sum);

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
  // The scorer's side (with options_.scorer): requests waiting for the next
  // batch, whether a batch is out (loop thread only), and the scoring thread.
  std::deque<Pending> waiting_;
  bool scoring_ = false;
  asio::io_context scorer_io_;
  asio::executor_work_guard<asio::io_context::executor_type> scorer_work_;
  std::thread scorer_thread_;
};

class RewardServer::Impl::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Impl* server, tcp::socket socket)
      : server_(server), socket_(std::move(socket)), buf_(server->options_.max_line_bytes) {}

  void Start() { Read(); }
  void Close() {
    closed_ = true;
    boost::system::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }
  // The answer of the request in `slot` (Read numbers them in arrival
  // order); answers go out in that order, whenever each is ready.
  void Deliver(uint64_t slot, std::string line) {
    if (closed_) return;
    ready_[slot] = std::move(line);
    for (auto it = ready_.find(next_out_); it != ready_.end(); it = ready_.find(next_out_)) {
      Send(std::move(it->second));
      ready_.erase(it);
      ++next_out_;
    }
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
          self->server_->Submit(self, self->next_slot_++, line);
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
  bool closed_ = false;          // Close ran: answers still coming are dropped
  uint64_t next_slot_ = 0;       // the next request read gets this slot
  uint64_t next_out_ = 0;        // the slot whose answer goes out next
  std::map<uint64_t, std::string> ready_;  // answers waiting for an earlier slot's
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
  if (options_.scorer != nullptr) scorer_thread_ = std::thread([this] { scorer_io_.run(); });
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
    // A batch being scored finishes; its answers are not sent (the loop is gone).
    scorer_work_.reset();
    if (scorer_thread_.joinable()) scorer_thread_.join();
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
    // Idle but alive: waiting for requests. Not while a batch is out: a
    // scorer that never returns leaves the heartbeat stale (a hang).
    if (!self->scoring_) self->progress_.SetPhase(Phase::kData);
    self->Heartbeat();
  });
}

void RewardServer::Impl::Count(bool ok, size_t items, double reward_sum) {
  uint64_t requests = 0, errors = 0;
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    if (ok) {
      ++stats_.requests;
      stats_.items += items;
    } else {
      ++stats_.errors;
    }
    requests = stats_.requests;
    errors = stats_.errors;
  }
  if (options_.scorer == nullptr) progress_.EndStep(static_cast<int64_t>(requests + errors));
  if (!ok) return;
  window_items_ += items;
  window_reward_ += reward_sum;
  if (options_.log_every > 0 && requests % options_.log_every == 0) {
    spdlog::info(
        "reward service: {} requests answered ({} bad), {} connections open; last {}: {} items, mean reward {:.4f}",
        requests, errors, connections_.size(), options_.log_every, window_items_,
        window_items_ > 0 ? window_reward_ / static_cast<double>(window_items_) : 0.0);
    window_items_ = 0;
    window_reward_ = 0;
  }
}

std::string RewardServer::Impl::Answer(std::string_view line) {
  progress_.BeginStep();
  RewardHandler::Answer a = handler_->Handle(line);
  Count(a.ok, a.items, a.reward_sum);
  if (!a.ok) spdlog::warn("reward service: answered a bad request: {}", a.line.substr(0, 300));
  return std::move(a.line);
}

void RewardServer::Impl::Submit(const std::shared_ptr<Connection>& connection, uint64_t slot, std::string_view line) {
  if (options_.scorer == nullptr) {
    connection->Deliver(slot, Answer(line));
    return;
  }
  RewardHandler::Answer error;
  Result<RewardHandler::TextRequest> request = handler_->ParseTexts(line, &error);
  if (!request.ok()) {
    Count(false, 0, 0);
    spdlog::warn("reward service: answered a bad request: {}", error.line.substr(0, 300));
    connection->Deliver(slot, std::move(error.line));
    return;
  }
  waiting_.push_back(Pending{connection, slot, std::move(request).value()});
  Kick();
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_.waiting = waiting_.size();
}

void RewardServer::Impl::Kick() {
  if (scoring_ || waiting_.empty() || stopping_) return;
  auto batch = std::make_shared<Batch>();
  const size_t max_batch = std::max<size_t>(1, options_.scorer->max_batch());
  while (!waiting_.empty() &&
         (batch->texts.empty() || batch->texts.size() + waiting_.front().request.texts.size() <= max_batch)) {
    Pending p = std::move(waiting_.front());
    waiting_.pop_front();
    batch->sizes.push_back(p.request.texts.size());
    for (std::string& t : p.request.texts) batch->texts.push_back(std::move(t));
    p.request.texts.clear();
    batch->requests.push_back(std::move(p));
  }
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.waiting = waiting_.size();
  }
  scoring_ = true;
  progress_.BeginStep();
  progress_.SetPhase(Phase::kForward);  // a batch is out: the record says so until it is answered
  asio::post(scorer_io_, [this, batch] {
    const auto t0 = std::chrono::steady_clock::now();
    batch->rewards = options_.scorer->Score(batch->texts);
    batch->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    asio::post(io_, [this, batch] { Scored(batch); });
  });
}

void RewardServer::Impl::Scored(const std::shared_ptr<Batch>& batch) {
  scoring_ = false;
  if (stopping_) return;
  uint64_t batches = 0;
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    batches = ++stats_.batches;
  }
  const bool ok = batch->rewards.ok() && batch->rewards->size() == batch->texts.size();
  if (!ok) {
    // Not the requests' fault: no answer, so that their clients send them
    // again (to this service or its successor) rather than give up.
    spdlog::error("reward service: the scorer failed on a batch of {} texts ({} requests): {}; closing their "
                  "connections so that their clients retry",
                  batch->texts.size(), batch->requests.size(),
                  batch->rewards.ok() ? "it returned " + std::to_string(batch->rewards->size()) + " rewards"
                                      : batch->rewards.status().ToString());
  }
  size_t offset = 0;
  for (size_t i = 0; i < batch->requests.size(); ++i) {
    Pending& p = batch->requests[i];
    if (!ok) {
      p.connection->Close();
      connections_.erase(p.connection);
      continue;
    }
    const size_t n = batch->sizes[i];
    const auto first = batch->rewards->begin() + static_cast<std::ptrdiff_t>(offset);
    const std::vector<double> rewards(first, first + static_cast<std::ptrdiff_t>(n));
    offset += n;
    double sum = 0;
    for (double r : rewards) sum += r;
    Count(true, n, sum);
    p.connection->Deliver(p.slot, RewardHandler::RewardsLine(p.request.id, rewards));
  }
  uint64_t answered = 0;
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    answered = stats_.requests + stats_.errors;
  }
  progress_.EndStep(static_cast<int64_t>(answered));
  progress_.SetPhase(Phase::kData);
  if (batches == 1 || (options_.log_every > 0 && batches % options_.log_every == 0)) {
    spdlog::info("reward service: batch {}: {} texts from {} requests scored in {:.1f} ms", batches,
                 batch->texts.size(), batch->requests.size(), 1e3 * batch->seconds);
  }
  Kick();
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
