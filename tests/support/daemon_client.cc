#include "tests/support/daemon_client.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

#include <gtest/gtest.h>

namespace holdfast::testing {

std::optional<RunStatus> DaemonStatus(const std::string& run_dir) {
  ControlRequest req;
  req.id = 1;
  req.op = control_op::kStatus;
  auto resp = CallDaemon(ControlSocketPath(run_dir), req, std::chrono::seconds(5));
  if (!resp.ok() || !resp->ok) return std::nullopt;
  auto st = ParseStatusResult(resp->result_json);
  if (!st.ok()) return std::nullopt;
  return *st;
}

std::optional<std::string> SendRawControlLine(const std::string& run_dir, const std::string& line) {
  const std::string path = ControlSocketPath(run_dir);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return std::nullopt;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  std::optional<std::string> reply;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string out = line + "\n";
    size_t sent = 0;
    while (sent < out.size()) {
      const ssize_t n = ::send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    std::string in;
    char buf[4096];
    for (;;) {
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      in.append(buf, static_cast<size_t>(n));
      if (in.find('\n') != std::string::npos) {
        reply = in.substr(0, in.find('\n'));
        break;
      }
    }
  }
  ::close(fd);
  return reply;
}

std::optional<RunStatus> WaitForStatus(ChildProcess& daemon, const std::string& run_dir,
                                       const std::function<bool(const RunStatus&)>& ready) {
  for (;;) {
    if (daemon.Exited()) return std::nullopt;
    auto st = DaemonStatus(run_dir);
    if (st && ready(*st)) return st;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::optional<RunStatus> WaitForStatus(ChildProcess& daemon, const std::string& run_dir, const std::string& what,
                                       double deadline_s, const std::function<bool(const RunStatus&)>& ready) {
  std::optional<RunStatus> last;
  std::optional<RunStatus> got;
  const bool ok = WaitUntil(daemon, what, deadline_s, [&] {
    auto st = DaemonStatus(run_dir);
    if (!st) return false;
    if (ready(*st)) {
      got = std::move(st);
      return true;
    }
    last = std::move(st);
    return false;
  });
  if (!ok && last) {
    ADD_FAILURE() << "the last status while waiting for " << what << ": state " << last->state << ", generation "
                  << last->generation << ", step " << last->step;
  }
  return ok ? got : std::nullopt;
}

bool WaitUntil(ChildProcess& daemon, const std::string& what, double deadline_s, const std::function<bool()>& check) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration<double>(deadline_s);
  for (;;) {
    if (check()) return true;
    if (daemon.Exited()) {
      ADD_FAILURE() << "the daemon exited (code " << daemon.Wait() << ") while waiting for " << what;
      return false;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      ADD_FAILURE() << "waited " << deadline_s << " s for " << what << " in vain";
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::unique_ptr<LineageDb> OpenLineageReadOnly(const std::string& run_dir) {
  LineageOptions o;
  o.read_only = true;
  auto db = LineageDb::Open(run_dir + "/lineage.db", o);
  EXPECT_TRUE(db.ok()) << db.status().ToString();
  return db.ok() ? std::move(db).value() : nullptr;
}

std::vector<EventRecord> LatestRunEvents(const std::string& run_dir) {
  auto db = OpenLineageReadOnly(run_dir);
  if (db == nullptr) return {};
  auto run = db->LatestRun();
  if (!run.ok()) return {};
  auto ev = db->Events(run->run_id, 0);
  return ev.ok() ? *ev : std::vector<EventRecord>{};
}

size_t LatestRunGenerations(const std::string& run_dir) {
  auto db = OpenLineageReadOnly(run_dir);
  if (db == nullptr) return 0;
  auto run = db->LatestRun();
  if (!run.ok()) return 0;
  auto gens = db->Generations(run->run_id);
  return gens.ok() ? gens->size() : 0;
}

}  // namespace holdfast::testing
