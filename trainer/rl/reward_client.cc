#include "trainer/rl/reward_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>

#include "common/tcp_store.h"

namespace holdfast::rl {

using json = nlohmann::json;

namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t SecondsToNs(double s) { return static_cast<int64_t>(s * 1e9); }

int RemainingMs(int64_t deadline_ns) {
  const int64_t left_ms = (deadline_ns - NowNs() + 999'999) / 1'000'000;
  return static_cast<int>(std::clamp<int64_t>(left_ms, 0, 1 << 30));
}

// Waits until fd is ready for `events`; false at the deadline. Errors show up
// on the next I/O call.
bool PollUntil(int fd, short events, int64_t deadline_ns) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, RemainingMs(deadline_ns));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return true;
  }
}

// The address the service wrote, checked.
Result<std::string> ReadAddrFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      return UnavailableError("address file " + path +
                              " does not exist (yet): the reward service writes it once it listens");
    }
    return ErrnoError("open address file " + path, errno);
  }
  std::string text;
  char buf[256];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status s = ErrnoError("read address file " + path, errno);
      ::close(fd);
      return s;
    }
    if (n == 0 || text.size() > 4096) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  auto hp = ParseHostPort(text);
  if (!hp.ok()) {
    return InvalidArgumentError("address file " + path + " holds '" + text.substr(0, 200) +
                                "', not HOST:PORT: " + hp.status().message());
  }
  return text;
}

}  // namespace

RewardClient::RewardClient(std::string addr_file, RewardClientOptions options)
    : addr_file_(std::move(addr_file)), options_(std::move(options)) {
  HF_CHECK(options_.deadline_s > 0 && options_.attempt_timeout_s > 0);
  HF_CHECK(options_.initial_backoff_s > 0 && options_.max_backoff_s >= options_.initial_backoff_s);
}

RewardClient::~RewardClient() { Disconnect(); }

void RewardClient::Disconnect() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  connected_to_.clear();
}

Status RewardClient::Connect(const std::string& address, int64_t deadline_ns) {
  HF_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(address));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int gai = ::getaddrinfo(hp.host.c_str(), std::to_string(hp.port).c_str(), &hints, &res);
  if (gai != 0) return UnavailableError("resolve '" + hp.host + "': " + gai_strerror(gai));
  Status last = UnavailableError("'" + hp.host + "' resolves to no address");
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last = ErrnoError("socket", errno);
      continue;
    }
    int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    int err = rc == 0 ? 0 : errno;
    if (rc != 0 && err == EINPROGRESS) {
      if (!PollUntil(fd, POLLOUT, deadline_ns)) {
        ::close(fd);
        last = TimeoutError("connect to " + address + " timed out");
        continue;
      }
      socklen_t len = sizeof(err);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err != 0) {
      last = ErrnoError("connect to " + address, err);
      ::close(fd);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    fd_ = fd;
    connected_to_ = address;
    ++connects_;
    ::freeaddrinfo(res);
    return Status::Ok();
  }
  ::freeaddrinfo(res);
  return last;
}

Result<std::vector<double>> RewardClient::Score(const std::string& task, const std::vector<RewardItem>& items) {
  if (items.empty()) return std::vector<double>{};
  const uint64_t id = next_id_++;
  std::string request;
  {
    json req;
    req["id"] = id;
    req["task"] = task;
    json list = json::array();
    for (const RewardItem& it : items) {
      list.push_back(
          {{"prompt_index", it.prompt_index}, {"split", SplitName(it.split)}, {"completion", it.completion}});
    }
    req["items"] = std::move(list);
    // Completions are model output: invalid UTF-8 is replaced, not a throw.
    request = req.dump(-1, ' ', false, json::error_handler_t::replace);
    request.push_back('\n');
  }

  const int64_t deadline_ns = NowNs() + SecondsToNs(options_.deadline_s);
  double backoff_s = options_.initial_backoff_s;
  std::string last_error = "no attempt made";
  std::string last_address;
  for (int attempt = 1;; ++attempt) {
    const int64_t attempt_deadline = std::min(deadline_ns, NowNs() + SecondsToNs(options_.attempt_timeout_s));
    // One attempt: "" when it got an answer (in `answer`), else what went wrong.
    std::string error;
    json answer;
    do {
      if (fd_ < 0) {
        auto addr = ReadAddrFile(addr_file_);
        if (!addr.ok()) {
          error = addr.status().message();
          break;
        }
        last_address = *addr;
        Status c = Connect(*addr, attempt_deadline);
        if (!c.ok()) {
          error = c.message();
          break;
        }
      }
      // Send the whole request.
      size_t sent = 0;
      while (sent < request.size() && error.empty()) {
        const ssize_t n = ::send(fd_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
        if (n >= 0) {
          sent += static_cast<size_t>(n);
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
          if (!PollUntil(fd_, POLLOUT, attempt_deadline)) error = "timed out sending to " + connected_to_;
        } else if (errno != EINTR) {
          error = ErrnoError("send to " + connected_to_, errno).message();
        }
      }
      if (!error.empty()) break;
      if (options_.observer) options_.observer({RewardClientEvent::kSent, attempt, connected_to_, ""});
      // Read one line.
      std::string line;
      char buf[65536];
      size_t nl = std::string::npos;
      while (nl == std::string::npos && error.empty()) {
        const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
        if (n > 0) {
          const size_t old = line.size();
          line.append(buf, static_cast<size_t>(n));
          nl = line.find('\n', old);
          if (nl == std::string::npos && line.size() > options_.max_response_bytes) {
            error =
                connected_to_ + " sent an answer longer than " + std::to_string(options_.max_response_bytes) + " bytes";
          }
        } else if (n == 0) {
          error = connected_to_ + " closed the connection before answering";
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
          if (!PollUntil(fd_, POLLIN, attempt_deadline)) {
            error = "no answer from " + connected_to_ + " within " + std::to_string(options_.attempt_timeout_s) + " s";
          }
        } else if (errno != EINTR) {
          error = ErrnoError("recv from " + connected_to_, errno).message();
        }
      }
      if (!error.empty()) break;
      if (nl + 1 != line.size()) {
        // One request, one answer: anything more means the stream is out of step.
        error = connected_to_ + " sent more than one answer line";
        break;
      }
      line.resize(nl);
      answer = json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (answer.is_discarded() || !answer.is_object()) {
        error = connected_to_ + " answered something that is not a JSON object: " + line.substr(0, 200);
        break;
      }
      const auto got_id = answer.find("id");
      if (got_id == answer.end() || !got_id->is_number_unsigned() || got_id->get<uint64_t>() != id) {
        // An answer with {"id": null} and an error: the service could not read our request at all.
        const auto err = answer.find("error");
        if (err != answer.end() && err->is_string()) {
          return InvalidArgumentError("reward service at " + connected_to_ +
                                      " rejected the request: " + err->get<std::string>());
        }
        error = connected_to_ + " answered request " + std::to_string(id) + " with another id: " + line.substr(0, 200);
        break;
      }
    } while (false);

    if (error.empty()) {
      const auto err = answer.find("error");
      if (err != answer.end()) {
        return InvalidArgumentError("reward service at " + connected_to_ + " rejected the request: " +
                                    (err->is_string() ? err->get<std::string>() : err->dump()));
      }
      const auto rewards = answer.find("rewards");
      if (rewards == answer.end() || !rewards->is_array() || rewards->size() != items.size()) {
        const std::string addr = connected_to_;
        Disconnect();
        return CorruptionError("reward service at " + addr + " answered " + std::to_string(items.size()) +
                               " items without a \"rewards\" array of that length; is " + addr +
                               " a holdfast-reward of this version?");
      }
      std::vector<double> out;
      out.reserve(items.size());
      for (const json& r : *rewards) {
        if (!r.is_number()) {
          const std::string addr = connected_to_;
          Disconnect();
          return CorruptionError("reward service at " + addr + " answered a reward that is not a number: " + r.dump());
        }
        out.push_back(r.get<double>());
      }
      return out;
    }

    Disconnect();
    last_error = error;
    if (options_.observer) options_.observer({RewardClientEvent::kFailed, attempt, last_address, error});
    if (NowNs() + SecondsToNs(backoff_s) >= deadline_ns) {
      char secs[32];
      std::snprintf(secs, sizeof(secs), "%g", options_.deadline_s);
      return UnavailableError("reward service: no answer within " + std::string(secs) + " s after " +
                              std::to_string(attempt) + " attempts (address file " + addr_file_ + ", last address " +
                              (last_address.empty() ? "none" : last_address) + "); last error: " + last_error +
                              ". Is holdfast-reward running and writing that address file?");
    }
    // Nothing to wait on: the service is restarting somewhere; back off and look again.
    std::this_thread::sleep_for(std::chrono::nanoseconds(SecondsToNs(backoff_s)));
    backoff_s = std::min(backoff_s * 2, options_.max_backoff_s);
  }
}

}  // namespace holdfast::rl
