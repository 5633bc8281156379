#include "tests/support/daemon_client.h"

#include <chrono>
#include <utility>

#include <gtest/gtest.h>

#include "cli/daemon_client.h"
#include "cli/waiter.h"

namespace holdfast::testing {

namespace {

// How often the suites look again: often, since they wait for a live daemon.
constexpr std::chrono::milliseconds kPoll{20};

std::chrono::nanoseconds Seconds(double s) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(s));
}

// WaitUntil's look for `check`, ending the wait when `daemon` has exited.
WaitLook LookOrExit(ChildProcess& daemon, const std::string& what, const std::function<bool()>& check) {
  return [&daemon, what, &check](const WaitProgress&) -> Result<bool> {
    if (check()) return true;
    if (daemon.Exited()) {
      return UnavailableError("the daemon exited (code " + std::to_string(daemon.Wait()) + ") while waiting for " +
                              what);
    }
    return false;
  };
}

}  // namespace

std::optional<RunStatus> DaemonStatus(const std::string& run_dir) {
  Reply<StatusAnswer> reply = DaemonClient(run_dir, std::chrono::seconds(5)).GetStatus();
  if (!reply.ok() || !reply->status.ok()) return std::nullopt;
  return *reply->status;
}

std::optional<std::string> SendRawControlLine(const std::string& run_dir, const std::string& line) {
  // Long enough for a daemon busy with a restart; a reply that never comes
  // fails the caller's ASSERT instead of hanging the suite.
  Result<std::string> reply = DaemonClient(run_dir, std::chrono::seconds(60)).SendLine(line);
  if (!reply.ok()) return std::nullopt;
  return *reply;
}

std::optional<RunStatus> WaitForStatus(ChildProcess& daemon, const std::string& run_dir,
                                       const std::function<bool(const RunStatus&)>& ready) {
  std::optional<RunStatus> got;
  const std::function<bool()> check = [&] {
    got = DaemonStatus(run_dir);
    return got && ready(*got);
  };
  WaitSpec spec;
  spec.what = "a status of " + run_dir;
  spec.poll = kPoll;
  const Status waited = holdfast::WaitUntil(LookOrExit(daemon, spec.what, check), spec, RealClock::Get());
  return waited.ok() ? got : std::nullopt;
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
  WaitSpec spec;
  spec.what = what;
  spec.timeout = Seconds(deadline_s);
  spec.poll = kPoll;
  const Status waited = holdfast::WaitUntil(LookOrExit(daemon, what, check), spec, RealClock::Get());
  if (!waited.ok()) ADD_FAILURE() << waited.message();
  return waited.ok();
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
