#include "tests/support/daemon_client.h"

#include <chrono>
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

std::optional<RunStatus> WaitForStatus(ChildProcess& daemon, const std::string& run_dir,
                                       const std::function<bool(const RunStatus&)>& ready) {
  for (;;) {
    if (daemon.Exited()) return std::nullopt;
    auto st = DaemonStatus(run_dir);
    if (st && ready(*st)) return st;
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
