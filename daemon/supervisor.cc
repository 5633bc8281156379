#include "daemon/supervisor.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <fstream>
#include <optional>
#include <set>
#include <vector>

#include <boost/asio.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "checkpoint/checkpoint_loader.h"
#include "common/launch_contract.h"
#include "common/progress_record.h"
#include "common/tcp_store_server.h"
#include "daemon/control_protocol.h"
#include "daemon/exit_codes.h"
#include "daemon/json_line_conn.h"
#include "daemon/rank_process.h"
#include "daemon/triage.h"
#include "health/config.h"
#include "health/monitor.h"
#include "health/node_checks.h"
#include "health/policy.h"
#include "health/report.h"
#include "lineage/lineage_db.h"

namespace holdfast {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {


int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A free TCP port on host for MASTER_PORT (a PyTorch job starts its own store there).
uint16_t PickFreePort(asio::io_context& io, const std::string& host) {
  boost::system::error_code ec;
  asio::ip::tcp::acceptor a(io);
  asio::ip::tcp::endpoint ep(asio::ip::make_address(host, ec), 0);
  if (ec) return 0;
  a.open(ep.protocol(), ec);
  a.bind(ep, ec);
  if (ec) return 0;
  return a.local_endpoint(ec).port();
}

// The record's checkpoint error text, bounded by its field and made valid
// UTF-8: any job may write the record, and the text goes into JSON.
std::string CheckpointErrorText(const ProgressRecordLayout& p) {
  const std::string raw(p.checkpoint_error, strnlen(p.checkpoint_error, sizeof(p.checkpoint_error)));
  const std::string quoted = nlohmann::json(raw).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return nlohmann::json::parse(quoted).get<std::string>();
}

// A rank's view travels between daemons as JSON; clock readings become ages
// (CLOCK_MONOTONIC is per machine) and are turned back into local times.
nlohmann::json ViewToJson(const RankView& v, int64_t now) {
  const ProgressRecordLayout& p = v.progress.record;
  auto age = [&](int64_t t) { return t > 0 ? now - t : -1; };
  nlohmann::json ring = nlohmann::json::array();
  const uint64_t n = std::min<uint64_t>(p.ring_head, kProgressRingSize);
  for (uint64_t i = 0; i < n; ++i) {
    const CollectiveEntry& e = p.ring[(p.ring_head - n + i) % kProgressRingSize];
    ring.push_back({e.seq, e.kind, e.bytes, age(e.issued_ns), age(e.completed_ns)});
  }
  return {{"rank", v.rank}, {"node", v.node}, {"pid", v.pid}, {"alive", v.alive},
          {"state", std::string(1, v.proc_state)}, {"valid", v.progress.valid}, {"torn", v.progress.torn},
          {"step", p.step}, {"phase", p.phase}, {"kind", p.collective_kind}, {"issued", p.collectives_issued},
          {"done", p.collectives_done}, {"waiting_on", p.waiting_on}, {"phase_age", age(p.phase_started_ns)},
          {"step_age", age(p.step_started_ns)}, {"heartbeat_age", age(p.heartbeat_ns)},
          {"last_step_ns", p.last_step_ns}, {"checkpoint_step", p.checkpoint_step},
          {"checkpoint_failures", p.checkpoint_failures}, {"checkpoint_failed_step", p.checkpoint_failed_step},
          {"checkpoint_error", CheckpointErrorText(p)}, {"ring", ring}};
}

RankView ViewFromJson(const nlohmann::json& j, int64_t now) {
  RankView v;
  auto at = [&](const char* k) { return j.at(k).get<int64_t>(); };
  auto back = [&](int64_t age) { return age >= 0 ? now - age : 0; };
  v.rank = j.at("rank").get<int>();
  v.node = j.at("node").get<int>();
  v.pid = static_cast<pid_t>(at("pid"));
  v.alive = j.at("alive").get<bool>();
  v.proc_state = j.at("state").get<std::string>().c_str()[0];
  v.progress.valid = j.at("valid").get<bool>();
  v.progress.torn = j.at("torn").get<bool>();
  ProgressRecordLayout& p = v.progress.record;
  p.rank = v.rank;
  p.pid = v.pid;
  p.step = at("step");
  p.phase = j.at("phase").get<uint32_t>();
  p.collective_kind = j.at("kind").get<uint32_t>();
  p.collectives_issued = j.at("issued").get<uint64_t>();
  p.collectives_done = j.at("done").get<uint64_t>();
  p.waiting_on = j.at("waiting_on").get<uint64_t>();
  p.phase_started_ns = back(at("phase_age"));
  p.step_started_ns = back(at("step_age"));
  p.heartbeat_ns = back(at("heartbeat_age"));
  p.last_step_ns = at("last_step_ns");
  p.checkpoint_step = at("checkpoint_step");
  // value(): a follower built before these fields existed reports no failures.
  p.checkpoint_failures = j.value("checkpoint_failures", uint64_t{0});
  p.checkpoint_failed_step = j.value("checkpoint_failed_step", int64_t{-1});
  const std::string error = j.value("checkpoint_error", std::string());
  const size_t n = std::min(error.size(), sizeof(p.checkpoint_error) - 1);
  std::memcpy(p.checkpoint_error, error.data(), n);
  p.checkpoint_error[n] = '\0';
  const auto& ring = j.at("ring");
  for (size_t i = 0; i < ring.size() && i < static_cast<size_t>(kProgressRingSize); ++i) {
    CollectiveEntry& e = p.ring[i];
    e.seq = ring[i][0].get<uint64_t>();
    e.kind = ring[i][1].get<uint32_t>();
    e.bytes = ring[i][2].get<uint64_t>();
    e.issued_ns = back(ring[i][3].get<int64_t>());
    e.completed_ns = back(ring[i][4].get<int64_t>());
  }
  p.ring_head = ring.size();
  return v;
}

}  // namespace

class Supervisor::Impl : public std::enable_shared_from_this<Supervisor::Impl> {
 public:
  enum class State { kIdle, kRunning, kStopping, kBackoff, kFinished };

  Impl(asio::io_context* io, SupervisorOptions options)
      : io_(*io),
        opts_(std::move(options)),
        job_(opts_.job),
        signals_(io_, SIGCHLD, SIGTERM, SIGINT),
        poll_timer_(io_),
        kill_timer_(io_),
        restart_timer_(io_),
        control_(io_),
        cluster_(io_),
        join_timer_(io_),
        hang_(job_.supervise) {}

  Status Start();
  int exit_code() const { return exit_code_; }

 private:
  // ---- lifecycle ----
  Status OpenRun();
  Status LaunchGeneration();
  void Tick();
  void OnSignal(int sig);
  void ReapChildren();
  void OnRankExit(RankProcess* rank);
  void HandleIncident(const Incident& incident, bool restartable, const std::string& action_if_not_restarting = "");
  void StopRanks(const std::string& why);
  void AfterAllStopped();
  void Finish(RunState state, const std::string& cause, int code);
  void ArmPoll();
  // An event of this run's current attempt and generation, on `node`.
  EventRecord NewEvent(const std::string& kind, const std::string& node = "0") const {
    EventRecord ev;
    ev.run_id = run_id_;
    ev.kind = kind;
    ev.attempt = attempt_;
    if (generation_ >= 0) ev.generation = generation_;
    ev.node = node;
    return ev;
  }
  std::vector<RankView> Views() const;
  int64_t NewestCommittedStep() const;
  // A checkpoint counts as committed for the run once every rank has seen its commit.
  void RecordCheckpointsSeen(const std::vector<RankView>& views);
  // Records a checkpoint_failed event for each failed save the ranks report
  // that is not recorded yet, and logs it. Not a crash: the run goes on.
  void RecordCheckpointFailures(const std::vector<RankView>& views);

  // ---- control socket ----
  Status StartControl();
  void AcceptControl();
  void ServeConnection(std::shared_ptr<asio::local::stream_protocol::socket> sock,
                       std::shared_ptr<asio::streambuf> buf);
  std::string Handle(const ControlRequest& req, uid_t peer_uid);
  RunStatus BuildStatus() const;

  asio::io_context& io_;
  SupervisorOptions opts_;
  const JobConfig& job_;
  asio::signal_set signals_;
  asio::steady_timer poll_timer_;
  asio::steady_timer kill_timer_;
  asio::steady_timer restart_timer_;
  asio::local::stream_protocol::acceptor control_;
  asio::ip::tcp::acceptor cluster_;
  asio::steady_timer join_timer_;
  std::unique_ptr<AsioTcpStoreServer> store_;

  // ---- several nodes ----
  struct Follower {
    std::shared_ptr<JsonLineConnection> conn;
    std::vector<RankView> views;  // latest progress, in leader clock
    int64_t views_ns = 0;
  };
  bool leader() const { return opts_.node_id == 0; }
  int world() const { return job_.nproc * opts_.nodes; }
  Status StartCluster();
  void AcceptFollower();
  void OnFollowerMessage(int node, const nlohmann::json& msg);
  void OnFollowerLost(int node, const std::string& why);
  void ConnectToLeader();
  void OnLeaderMessage(const nlohmann::json& msg);
  void BroadcastToFollowers(const nlohmann::json& msg);
  Status LaunchLocalRanks(int world, const std::string& store_addr, uint16_t master_port, int64_t resume_step);
  void OnAnyRankExit(int rank, int wstatus, const std::vector<std::string>& log_tail);
  // ---- node health ----
  Status SetUpHealth();
  std::vector<health::CheckResult> RunPrelaunchChecks();
  void RecordHealth(const std::vector<health::CheckResult>& results, int node);
  // Acts on the policy's decision for `node`; returns true when it stopped the run.
  bool ActOnHealth(const health::Decision& decision, int node, const char* when);
  void ArmHealthPoll();
  health::HealthConfig health_cfg_;
  health::HostPaths health_paths_;
  std::unique_ptr<health::HealthMonitor> monitor_;
  asio::steady_timer health_timer_{io_};
  std::string prelaunch_report_;  // follower: sent with hello

  std::map<int, Follower> followers_;              // leader: node -> follower
  std::map<int, int> exits_;                       // leader: global rank -> wait status, this generation
  std::shared_ptr<JsonLineConnection> leader_conn_;  // follower
  int finish_code_from_leader_ = -1;               // follower
  std::unique_ptr<LineageDb> db_;
  HangDetector hang_;

  State state_ = State::kIdle;
  std::string run_id_;
  int attempt_ = 0;
  int generation_ = -1;
  int restarts_used_ = 0;
  int failures_without_progress_ = 0;  // consecutive generations that failed before a step
  int64_t resume_step_env_ = -1;  // HOLDFAST_RESUME_FROM_STEP for the attempt's first generation
  int64_t last_committed_step_ = -1;
  int64_t last_recorded_step_ = -1;
  // Checkpoint failures already handled; records start at zero each generation.
  int failures_generation_ = -1;             // the generation the two below are about
  std::map<int, uint64_t> failures_seen_;    // global rank -> its checkpoint_failures handled
  std::set<int64_t> failed_steps_recorded_;  // steps with a checkpoint_failed event
  Clock::time_point last_step_update_;
  Clock::time_point started_;
  std::vector<std::unique_ptr<RankProcess>> ranks_;
  std::string stop_reason_;     // why ranks are being stopped
  bool restart_after_stop_ = false;
  bool user_stop_ = false;      // stop via signal or `runctl stop`
  std::optional<IncidentSummary> last_incident_;
  int exit_code_ = kDaemonExitOk;
};

Status Supervisor::Impl::Start() {
  started_ = Clock::now();
  std::error_code ec;
  std::filesystem::create_directories(opts_.run_dir + "/logs", ec);
  if (ec) return IoError("create " + opts_.run_dir + "/logs: " + ec.message());
  std::filesystem::create_directories(job_.supervise.progress_dir, ec);
  signals_.async_wait([self = shared_from_this()](const boost::system::error_code& e, int sig) {
    if (!e) self->OnSignal(sig);
  });
  HF_RETURN_IF_ERROR(SetUpHealth());
  if (!leader()) {
    if (job_.supervise.health_prelaunch) {
      std::vector<health::CheckResult> results = RunPrelaunchChecks();
      prelaunch_report_ = health::ReportToJson(results, health::Decide(results, health_cfg_.policy));
    }
    ConnectToLeader();
    ArmPoll();
    ArmHealthPoll();
    return Status::Ok();
  }
  HF_RETURN_IF_ERROR(StartControl());
  HF_RETURN_IF_ERROR(OpenRun());
  if (job_.supervise.health_prelaunch) {
    std::vector<health::CheckResult> results = RunPrelaunchChecks();
    RecordHealth(results, 0);
    if (ActOnHealth(health::Decide(results, health_cfg_.policy), 0, "pre-launch")) return Status::Ok();
  }
  ArmHealthPoll();
  auto store = AsioTcpStoreServer::Listen(&io_, opts_.store_host, 0);
  if (!store.ok()) return store.status().WithContext("start the rendezvous store");
  store_ = std::move(store).value();
  if (opts_.nodes > 1) {
    HF_RETURN_IF_ERROR(StartCluster());  // generation 0 starts when every follower has joined
  } else {
    HF_RETURN_IF_ERROR(LaunchGeneration());
  }
  ArmPoll();
  return Status::Ok();
}

// ---- leader side of several nodes ----

Status Supervisor::Impl::StartCluster() {
  boost::system::error_code ec;
  asio::ip::tcp::endpoint ep(asio::ip::make_address(opts_.store_host, ec), opts_.cluster_port);
  if (ec) return InvalidArgumentError("bad address " + opts_.store_host + ": " + ec.message());
  cluster_.open(ep.protocol(), ec);
  if (!ec) cluster_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) cluster_.bind(ep, ec);
  if (!ec) cluster_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return IoError("cluster port " + std::to_string(opts_.cluster_port) + ": " + ec.message());
  const std::string addr = opts_.store_host + ":" + std::to_string(cluster_.local_endpoint(ec).port());
  {
    // Followers on this machine (or a shared run dir) find the leader here.
    const std::string tmp = opts_.run_dir + "/cluster.addr.tmp";
    std::ofstream(tmp) << addr << "\n";
    std::filesystem::rename(tmp, opts_.run_dir + "/cluster.addr");
  }
  spdlog::info("leading {} nodes; waiting for {} follower(s) on {}", opts_.nodes, opts_.nodes - 1, addr);
  AcceptFollower();
  join_timer_.expires_after(std::chrono::milliseconds(static_cast<int64_t>(job_.supervise.startup_timeout_s * 1000)));
  join_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& e) {
    if (e || self->state_ != State::kIdle) return;
    const std::string cause = std::to_string(self->followers_.size()) + " of " + std::to_string(self->opts_.nodes - 1) +
                              " follower daemons joined within startup_timeout_s";
    spdlog::error("{}", cause);
    self->Finish(RunState::kFailed, cause, kDaemonExitFailed);
  });
  return Status::Ok();
}

void Supervisor::Impl::AcceptFollower() {
  cluster_.async_accept([self = shared_from_this()](const boost::system::error_code& e, asio::ip::tcp::socket sock) {
    if (e) return;
    auto conn = std::make_shared<JsonLineConnection>(std::move(sock));
    auto node = std::make_shared<int>(-1);
    conn->Start(
        [self, conn, node](const nlohmann::json& msg) {
          try {
            if (msg.at("type") == "hello") {
              const int n = msg.at("node").get<int>();
              if (n <= 0 || n >= self->opts_.nodes || self->followers_.count(n) != 0 ||
                  msg.at("nproc").get<int>() != self->job_.nproc) {
                conn->Send({{"type", "reject"}, {"why", "node id taken, out of range, or another nproc"}});
                conn->Close("rejected follower");
                return;
              }
              *node = n;
              self->followers_[n].conn = conn;
              spdlog::info("node {} joined", n);
              const std::string report = msg.value("health", "");
              if (!report.empty()) {
                auto results = health::ResultsFromReportJson(report);
                if (results.ok()) {
                  self->RecordHealth(*results, n);
                  if (self->ActOnHealth(health::Decide(*results, self->health_cfg_.policy), n, "pre-launch")) return;
                }
              }
              if (self->state_ == State::kIdle && static_cast<int>(self->followers_.size()) == self->opts_.nodes - 1) {
                self->join_timer_.cancel();
                Status s = self->LaunchGeneration();
                if (!s.ok()) self->Finish(RunState::kFailed, s.ToString(), kDaemonExitFailed);
              }
              return;
            }
            if (*node > 0) self->OnFollowerMessage(*node, msg);
          } catch (const nlohmann::json::exception& ex) {
            conn->Close(std::string("bad message: ") + ex.what());
          }
        },
        [self, node](const std::string& why) {
          if (*node > 0) self->OnFollowerLost(*node, why);
        });
    self->AcceptFollower();
  });
}

void Supervisor::Impl::BroadcastToFollowers(const nlohmann::json& msg) {
  for (auto& [n, f] : followers_) {
    if (f.conn) f.conn->Send(msg);
  }
}

void Supervisor::Impl::OnFollowerMessage(int node, const nlohmann::json& msg) {
  const std::string type = msg.at("type").get<std::string>();
  if (type != "health" && msg.value("gen", -1) != generation_) return;  // from a generation that is over
  const int64_t now = MonotonicNowNs();
  Follower& f = followers_[node];
  if (type == "progress" || type == "rank_exit") {
    f.views.clear();
    for (const auto& v : msg.at("ranks")) f.views.push_back(ViewFromJson(v, now));
    f.views_ns = now;
  }
  if (type == "health") {
    auto results = health::ResultsFromReportJson(msg.at("report").get<std::string>());
    if (results.ok()) {
      RecordHealth(*results, node);
      ActOnHealth(health::Decide(*results, health_cfg_.policy), node, "periodic");
    }
    return;
  }
  if (type == "rank_exit") {
    std::vector<std::string> tail;
    for (const auto& l : msg.at("log_tail")) tail.push_back(l.get<std::string>());
    OnAnyRankExit(msg.at("rank").get<int>(), msg.at("wstatus").get<int>(), tail);
  }
}

void Supervisor::Impl::OnFollowerLost(int node, const std::string& why) {
  followers_.erase(node);
  if (state_ == State::kFinished) return;
  const std::string summary = "node " + std::to_string(node) + "'s holdfastd is gone (" + why + ")";
  spdlog::error("NODE LOST: {}", summary);
  if (state_ == State::kIdle) {
    Finish(RunState::kFailed, summary, kDaemonExitFailed);
    return;
  }
  EventRecord ev = NewEvent(event_kind::kNodeLost, std::to_string(node));
  ev.summary = summary;
  ev.action = "stopped all ranks; the run cannot continue without that node (requeue it, or runctl resume)";
  ev.runbook = "runbooks/crash.md";
  (void)db_->RecordEvent(ev);
  last_incident_ = IncidentSummary{ev.kind, summary, UnixMs(), ev.action, ev.runbook};
  restart_after_stop_ = false;
  stop_reason_ = summary;
  if (state_ == State::kRunning) {
    StopRanks(summary);
    // Its ranks died with their daemon; count them as gone.
    for (int r = node * job_.nproc; r < (node + 1) * job_.nproc; ++r) exits_.emplace(r, SIGKILL);
    if (static_cast<int>(exits_.size()) == world()) AfterAllStopped();
  } else if (state_ == State::kBackoff) {
    restart_timer_.cancel();
    Finish(RunState::kFailed, summary, kDaemonExitFailed);
  }
}

// ---- follower side ----

void Supervisor::Impl::ConnectToLeader() {
  auto sock = std::make_shared<asio::ip::tcp::socket>(io_);
  const size_t colon = opts_.leader_addr.rfind(':');
  boost::system::error_code ec;
  const auto addr = asio::ip::make_address(opts_.leader_addr.substr(0, colon), ec);
  const int port = colon == std::string::npos ? 0 : std::atoi(opts_.leader_addr.substr(colon + 1).c_str());
  if (ec || port <= 0) {
    spdlog::error("--leader {}: expected host:port", opts_.leader_addr);
    Finish(RunState::kFailed, "bad --leader", kDaemonExitUsage);
    return;
  }
  sock->async_connect(asio::ip::tcp::endpoint(addr, static_cast<uint16_t>(port)),
                      [self = shared_from_this(), sock](const boost::system::error_code& e) {
                        if (e) {
                          if (std::chrono::duration<double>(Clock::now() - self->started_).count() >
                              self->job_.supervise.startup_timeout_s) {
                            spdlog::error("cannot reach the leader at {}: {}", self->opts_.leader_addr, e.message());
                            self->Finish(RunState::kFailed, "leader unreachable", kDaemonExitFailed);
                            return;
                          }
                          self->join_timer_.expires_after(std::chrono::milliseconds(100));
                          self->join_timer_.async_wait([self](const boost::system::error_code& te) {
                            if (!te) self->ConnectToLeader();
                          });
                          return;
                        }
                        self->leader_conn_ = std::make_shared<JsonLineConnection>(std::move(*sock));
                        self->leader_conn_->Start(
                            [self](const nlohmann::json& msg) {
                              try {
                                self->OnLeaderMessage(msg);
                              } catch (const nlohmann::json::exception& ex) {
                                self->leader_conn_->Close(std::string("bad message: ") + ex.what());
                              }
                            },
                            [self](const std::string& why) {
                              if (self->state_ == State::kFinished) return;
                              const int code = self->finish_code_from_leader_;
                              spdlog::log(code >= 0 ? spdlog::level::info : spdlog::level::err,
                                          "leader connection closed ({})", why);
                              self->user_stop_ = true;
                              bool any = false;
                              for (const auto& r : self->ranks_) any = any || r->alive();
                              if (any) self->StopRanks("lost the leader");
                              self->Finish(RunState::kFailed, "lost the leader",
                                           code >= 0 ? code : kDaemonExitFailed);
                            });
                        self->leader_conn_->Send({{"type", "hello"}, {"node", self->opts_.node_id},
                                                  {"nproc", self->job_.nproc}, {"pid", getpid()},
                                                  {"health", self->prelaunch_report_}});
                        spdlog::info("node {} joined the leader at {}", self->opts_.node_id, self->opts_.leader_addr);
                      });
}

void Supervisor::Impl::OnLeaderMessage(const nlohmann::json& msg) {
  const std::string type = msg.at("type").get<std::string>();
  if (type == "start") {
    run_id_ = msg.at("run_id").get<std::string>();
    attempt_ = msg.at("attempt").get<int>();
    generation_ = msg.at("gen").get<int>();
    ranks_.clear();
    Status s = LaunchLocalRanks(msg.at("world").get<int>(), msg.at("store").get<std::string>(),
                                msg.at("master_port").get<uint16_t>(), msg.at("resume_step").get<int64_t>());
    if (!s.ok()) spdlog::error("{}", s.ToString());  // the leader sees the ranks never report, or their exits
    state_ = State::kRunning;
  } else if (type == "stop") {
    if (msg.value("gen", -1) == generation_ && state_ == State::kRunning) {
      user_stop_ = msg.value("user", false);
      StopRanks(msg.value("why", "the leader asked"));
    }
  } else if (type == "signal") {
    if (msg.value("gen", -1) == generation_) {
      for (const auto& r : ranks_) r->Signal(msg.at("sig").get<int>());
    }
  } else if (type == "finish") {
    finish_code_from_leader_ = msg.at("code").get<int>();
  } else if (type == "reject") {
    spdlog::error("the leader rejected this node: {}", msg.value("why", ""));
    finish_code_from_leader_ = kDaemonExitUsage;
  }
}

Status Supervisor::Impl::OpenRun() {
  LineageOptions lo;
  lo.journal_mode = job_.journal_mode == "delete"     ? JournalMode::kDelete
                    : job_.journal_mode == "truncate" ? JournalMode::kTruncate
                                                      : JournalMode::kWal;
  HF_ASSIGN_OR_RETURN(db_, LineageDb::Open(opts_.run_dir + "/lineage.db", lo));
  std::optional<RunRecord> existing;
  std::string event_kind_for_attempt;
  if (!opts_.resume_run.empty()) {
    auto r = opts_.resume_run == "latest" ? db_->LatestRun() : db_->GetRun(opts_.resume_run);
    if (!r.ok()) return r.status().WithContext("resume " + opts_.resume_run);
    existing = *r;
    event_kind_for_attempt = event_kind::kResume;
  } else {
    auto r = db_->LatestRun();
    if (r.ok() && (r->state == RunState::kRunning || r->state == RunState::kPreempted)) {
      // An unfinished run in this directory: this daemon continues it.
      existing = *r;
      event_kind_for_attempt = r->state == RunState::kRunning ? event_kind::kDaemonRestart : event_kind::kResume;
    } else if (!r.ok() && r.status().code() != StatusCode::kNotFound) {
      return r.status();
    }
  }
  if (existing.has_value()) {
    run_id_ = existing->run_id;
  } else {
    RunRecord run;
    run.name = job_.name;
    run.owner_uid = static_cast<int64_t>(getuid());
    run.run_dir = std::filesystem::absolute(opts_.run_dir).string();
    run.config_path = job_.source;
    run.config_text = job_.text;
    run.world_size = world();
    for (int n = 0; n < opts_.nodes; ++n) run.nodes.push_back(std::to_string(n));
    HF_ASSIGN_OR_RETURN(run_id_, db_->CreateRun(run));
  }
  last_committed_step_ = NewestCommittedStep();
  AttemptStart as;
  for (int n = 0; n < opts_.nodes; ++n) as.nodes.push_back(std::to_string(n));
  if (opts_.from_step >= 0) {
    as.resumed_from_step = opts_.from_step;
    resume_step_env_ = opts_.from_step;
  } else if (last_committed_step_ >= 0 && existing.has_value()) {
    as.resumed_from_step = last_committed_step_;
  }
  HF_ASSIGN_OR_RETURN(attempt_, db_->StartAttempt(run_id_, as));
  if (existing.has_value()) {
    EventRecord ev = NewEvent(event_kind_for_attempt);
    const std::string from = as.resumed_from_step ? "step " + std::to_string(*as.resumed_from_step) : "the start";
    ev.summary = event_kind_for_attempt == event_kind::kDaemonRestart
                     ? "holdfastd restarted while the run was running (the previous daemon died); continuing"
                     : "run resumed as a new attempt";
    ev.action = "attempt " + std::to_string(attempt_) + " from " + from;
    ev.runbook = event_kind_for_attempt == event_kind::kDaemonRestart ? "runbooks/crash.md" : "";
    (void)db_->RecordEvent(ev);
    if (existing->state != RunState::kRunning) (void)db_->EndRun(run_id_, RunState::kRunning, "");
  }
  spdlog::info("run {} attempt {} in {} ({} ranks: {})", run_id_, attempt_, opts_.run_dir, job_.nproc,
               job_.command.front());
  return Status::Ok();
}

int64_t Supervisor::Impl::NewestCommittedStep() const {
  if (job_.checkpoint_dir.empty()) return last_committed_step_;
  std::filesystem::path root(job_.checkpoint_dir);
  if (root.is_relative() && !job_.workdir.empty()) root = std::filesystem::path(job_.workdir) / root;
  CheckpointLoader loader(root.string());
  auto steps = loader.ListSteps();
  if (!steps.ok()) return last_committed_step_;
  for (int64_t s : *steps) {
    if (loader.ReadManifest(s).ok()) return s;
  }
  return last_committed_step_;
}

Status Supervisor::Impl::LaunchGeneration() {
  ++generation_;
  ranks_.clear();
  exits_.clear();
  for (auto& [n, f] : followers_) f.views.clear();
  const int64_t start_step = resume_step_env_ >= 0 ? resume_step_env_ : std::max<int64_t>(0, last_committed_step_);
  auto gen = db_->StartGeneration(run_id_, attempt_, start_step);
  if (!gen.ok()) spdlog::warn("lineage: {}", gen.status().ToString());
  const uint16_t master_port = PickFreePort(io_, opts_.store_host);
  const std::string store_addr = opts_.store_host + ":" + std::to_string(store_->port());
  BroadcastToFollowers({{"type", "start"}, {"run_id", run_id_}, {"attempt", attempt_}, {"gen", generation_},
                        {"world", world()}, {"store", store_addr}, {"master_port", master_port},
                        {"resume_step", resume_step_env_}});
  Status s = LaunchLocalRanks(world(), store_addr, master_port, resume_step_env_);
  resume_step_env_ = -1;  // later generations resume from the newest checkpoint
  hang_.StartGeneration(MonotonicNowNs(), world());
  state_ = State::kRunning;
  last_step_update_ = Clock::now();
  if (!s.ok()) {
    StopRanks("a rank could not be started");
    return s;
  }
  spdlog::info("generation {} started: {} ranks on {} node(s), store {}, from step {}", generation_, world(),
               opts_.nodes, store_addr, start_step);
  return Status::Ok();
}

Status Supervisor::Impl::LaunchLocalRanks(int world, const std::string& store_addr, uint16_t master_port,
                                          int64_t resume_step) {
  const int offset = opts_.node_id * job_.nproc;
  for (int i = 0; i < job_.nproc; ++i) {
    const int r = offset + i;
    RankSpawn s;
    s.rank = r;
    s.argv = job_.command;
    s.workdir = job_.workdir;
    s.env = job_.env;
    const std::string tag = run_id_ + "-a" + std::to_string(attempt_) + "-g" + std::to_string(generation_);
    s.log_path = opts_.run_dir + "/logs/a" + std::to_string(attempt_) + "-g" + std::to_string(generation_) + "-rank" +
                 std::to_string(r) + ".log";
    s.progress_path = job_.supervise.progress_dir + "/holdfast-" + tag + "-r" + std::to_string(r) + ".rec";
    s.env[kEnvRank] = std::to_string(r);
    s.env[kEnvLocalRank] = std::to_string(i);
    s.env[kEnvWorldSize] = std::to_string(world);
    s.env[kEnvStoreAddr] = store_addr;
    s.env[kEnvGeneration] = std::to_string(generation_);
    s.env[kEnvProgressPath] = s.progress_path;
    s.env[kEnvRunId] = run_id_;
    s.env[kEnvNode] = std::to_string(opts_.node_id);
    if (resume_step >= 0) s.env[kEnvResumeFromStep] = std::to_string(resume_step);
    // torchrun's contract, for PyTorch jobs.
    s.env["RANK"] = std::to_string(r);
    s.env["LOCAL_RANK"] = std::to_string(i);
    s.env["WORLD_SIZE"] = std::to_string(world);
    s.env["LOCAL_WORLD_SIZE"] = std::to_string(job_.nproc);
    s.env["GROUP_RANK"] = std::to_string(opts_.node_id);
    s.env["MASTER_ADDR"] = store_addr.substr(0, store_addr.rfind(':'));
    s.env["MASTER_PORT"] = std::to_string(master_port);
    auto proc = RankProcess::Start(s);
    if (!proc.ok()) return proc.status().WithContext("start rank " + std::to_string(r));
    ranks_.push_back(std::move(proc).value());
  }
  return Status::Ok();
}

void Supervisor::Impl::ArmPoll() {
  poll_timer_.expires_after(std::chrono::milliseconds(job_.supervise.poll_ms));
  poll_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& e) {
    if (e) return;
    self->Tick();
    if (self->state_ != State::kFinished) self->ArmPoll();
  });
}

std::vector<RankView> Supervisor::Impl::Views() const {
  std::vector<RankView> views;
  for (const auto& r : ranks_) {
    RankView v;
    v.rank = r->rank();
    v.node = opts_.node_id;
    v.pid = r->pid();
    v.alive = r->alive();
    v.proc_state = r->ProcState();
    v.progress = r->Progress();
    views.push_back(v);
  }
  for (const auto& [n, f] : followers_) views.insert(views.end(), f.views.begin(), f.views.end());
  std::sort(views.begin(), views.end(), [](const RankView& a, const RankView& b) { return a.rank < b.rank; });
  return views;
}

void Supervisor::Impl::RecordCheckpointsSeen(const std::vector<RankView>& views) {
  int64_t committed = INT64_MAX;
  for (const RankView& v : views) {
    committed = std::min<int64_t>(committed, v.progress.valid ? v.progress.record.checkpoint_step : -1);
  }
  if (static_cast<int>(views.size()) < world() || committed == INT64_MAX || committed <= last_committed_step_) return;
  last_committed_step_ = committed;
  CheckpointRecord c;
  c.run_id = run_id_;
  c.step = committed;
  c.world_size = world();
  c.attempt = attempt_;
  c.generation = generation_;
  if (!job_.checkpoint_dir.empty()) {
    std::filesystem::path root(job_.checkpoint_dir);
    if (root.is_relative() && !job_.workdir.empty()) root = std::filesystem::path(job_.workdir) / root;
    c.path = (root / StepDirName(committed)).string();
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(c.path, ec)) {
      c.bytes += static_cast<int64_t>(e.is_regular_file(ec) ? e.file_size(ec) : 0);
    }
  }
  Status s = db_->RecordCheckpoint(c);
  if (!s.ok()) spdlog::warn("lineage: {}", s.ToString());
}

void Supervisor::Impl::RecordCheckpointFailures(const std::vector<RankView>& views) {
  if (failures_generation_ != generation_) {
    failures_generation_ = generation_;
    failures_seen_.clear();
    failed_steps_recorded_.clear();
  }
  // Every rank reports the outcome of the same save (checkpoint/checkpoint_writer.h),
  // so one event per failed step, carrying each reporting rank's text.
  struct Report {
    int rank;
    int node;
    uint64_t missed;  // earlier failures of this rank not seen one by one
    std::string error;
  };
  std::map<int64_t, std::vector<Report>> by_step;
  for (const RankView& v : views) {  // sorted by rank
    if (!v.progress.valid || v.progress.torn) continue;  // read again on the next tick
    const ProgressRecordLayout& p = v.progress.record;
    uint64_t& seen = failures_seen_[v.rank];
    if (p.checkpoint_failures <= seen) continue;
    by_step[p.checkpoint_failed_step].push_back(
        {v.rank, v.node, p.checkpoint_failures - seen - 1, CheckpointErrorText(p)});
    seen = p.checkpoint_failures;
  }
  for (const auto& [step, reports] : by_step) {
    for (const Report& r : reports) {
      spdlog::warn("CHECKPOINT FAILED: step {} on rank {} (training goes on): {}", step, r.rank, r.error);
    }
    if (!failed_steps_recorded_.insert(step).second) continue;  // a rank reporting it late
    const Report& first = reports.front();
    nlohmann::json list = nlohmann::json::array();
    uint64_t missed = 0;
    for (const Report& r : reports) {
      list.push_back({{"rank", r.rank}, {"node", r.node}, {"error", r.error}, {"missed_failures", r.missed}});
      missed = std::max(missed, r.missed);
    }
    const std::string newest = last_committed_step_ >= 0 ? std::to_string(last_committed_step_) : "none";
    EventRecord ev = NewEvent(event_kind::kCheckpointFailed, std::to_string(first.node));
    ev.rank = first.rank;
    ev.summary = "checkpoint step " + std::to_string(step) + " failed on rank " + std::to_string(first.rank) +
                 (reports.size() > 1 ? " and " + std::to_string(reports.size() - 1) + " other(s)" : "") + ": " +
                 first.error;
    if (missed > 0) ev.summary += " (" + std::to_string(missed) + " earlier failure(s) not seen one by one)";
    ev.evidence_json = nlohmann::json{{"step", step},
                                      {"rank", first.rank},
                                      {"newest_committed_step", last_committed_step_},
                                      {"reports", list}}
                           .dump();
    ev.action =
        "training continues; step " + std::to_string(step) + " not committed (newest committed: " + newest + ")";
    ev.runbook = "runbooks/checkpoint-failed.md";
    auto id = db_->RecordEvent(ev);
    if (!id.ok()) spdlog::warn("lineage: {}", id.status().ToString());
    last_incident_ = IncidentSummary{ev.kind, ev.summary, UnixMs(), ev.action, ev.runbook};
  }
}

void Supervisor::Impl::Tick() {
  ReapChildren();  // a SIGCHLD can coalesce; reaping here too costs one syscall
  if (!leader()) {
    if (leader_conn_ && !ranks_.empty()) {
      nlohmann::json ranks = nlohmann::json::array();
      const int64_t now = MonotonicNowNs();
      for (const RankView& v : Views()) ranks.push_back(ViewToJson(v, now));
      leader_conn_->Send({{"type", "progress"}, {"gen", generation_}, {"ranks", ranks}});
    }
    return;
  }
  if (state_ != State::kRunning) return;
  const int64_t now = MonotonicNowNs();
  std::vector<RankView> views = Views();
  RecordCheckpointsSeen(views);
  RecordCheckpointFailures(views);
  if (!views.empty() && views[0].progress.valid) {
    const int64_t step = views[0].progress.record.step;
    if (step != last_recorded_step_ && Clock::now() - last_step_update_ > std::chrono::seconds(5)) {
      (void)db_->UpdateGenerationStep(run_id_, attempt_, generation_, step);
      last_recorded_step_ = step;
      last_step_update_ = Clock::now();
    }
  }
  // Ranks that finished cleanly are not waiting for anyone.
  std::vector<RankView> live;
  for (const RankView& v : views) {
    if (v.alive) live.push_back(v);
  }
  HangDetector::Verdict verdict = hang_.Observe(now, live);
  if (verdict.hung) {
    Incident inc = TriageHang(now, views, verdict);
    spdlog::error("HANG: {}", inc.summary);
    HandleIncident(inc, /*restartable=*/true);
  }
}

void Supervisor::Impl::OnSignal(int sig) {
  if (sig == SIGCHLD) {
    ReapChildren();
  } else if (sig == SIGTERM || sig == SIGINT) {
    spdlog::warn("received {}: asking the ranks to checkpoint and stop", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    user_stop_ = true;
    if (state_ == State::kRunning) {
      StopRanks("the supervisor was asked to stop");
    } else if (state_ == State::kBackoff) {
      restart_timer_.cancel();
      Finish(RunState::kStopped, "stopped by signal while waiting to restart", kDaemonExitStopped);
    }
  }
  if (state_ != State::kFinished) {
    signals_.async_wait([self = shared_from_this()](const boost::system::error_code& e, int s) {
      if (!e) self->OnSignal(s);
    });
  }
}

void Supervisor::Impl::ReapChildren() {
  for (;;) {
    int wstatus = 0;
    pid_t pid = waitpid(-1, &wstatus, WNOHANG);
    if (pid <= 0) break;
    for (auto& r : ranks_) {
      if (r->pid() == pid && r->alive()) {
        r->SetExited(wstatus);
        OnRankExit(r.get());
      }
    }
  }
}

void Supervisor::Impl::OnRankExit(RankProcess* rank) {
  const int ws = rank->wait_status();
  spdlog::info("rank {} (pid {}) {}", rank->rank(), rank->pid(), DescribeWaitStatus(ws));
  if (!leader()) {
    const bool all_exited = std::none_of(ranks_.begin(), ranks_.end(), [](const auto& r) { return r->alive(); });
    if (all_exited) kill_timer_.cancel();
    if (leader_conn_) {
      nlohmann::json ranks = nlohmann::json::array();
      const int64_t now = MonotonicNowNs();
      for (const RankView& v : Views()) ranks.push_back(ViewToJson(v, now));
      leader_conn_->Send({{"type", "rank_exit"}, {"gen", generation_}, {"rank", rank->rank()}, {"wstatus", ws},
                          {"log_tail", rank->LogTail(20)}, {"ranks", ranks}});
    }
    if (all_exited && state_ == State::kStopping) state_ = State::kIdle;
    return;
  }
  OnAnyRankExit(rank->rank(), ws, rank->LogTail(20));
}

void Supervisor::Impl::OnAnyRankExit(int rank, int ws, const std::vector<std::string>& log_tail) {
  exits_[rank] = ws;
  // A save that failed just before the exit is recorded before what follows it.
  if (state_ == State::kRunning || state_ == State::kStopping) RecordCheckpointFailures(Views());
  const bool all_exited = static_cast<int>(exits_.size()) >= world();
  if (state_ == State::kStopping) {
    if (all_exited) AfterAllStopped();
    return;
  }
  if (state_ != State::kRunning) return;
  const bool clean = WIFEXITED(ws) && WEXITSTATUS(ws) == kRankExitOk;
  const bool preempted = WIFEXITED(ws) && WEXITSTATUS(ws) == kRankExitPreempted;
  if (clean || preempted) {
    if (!all_exited) return;  // the others follow; a straggler that does not is a hang
    bool all_clean = true, all_preempted = true;
    for (const auto& [r, s] : exits_) {
      all_clean = all_clean && WIFEXITED(s) && WEXITSTATUS(s) == 0;
      all_preempted = all_preempted && WIFEXITED(s) && (WEXITSTATUS(s) == kRankExitPreempted || WEXITSTATUS(s) == kRankExitOk);
    }
    const std::vector<RankView> views = Views();
    RecordCheckpointsSeen(views);
    int64_t last_step = -1;
    for (const RankView& v : views) {
      if (v.progress.valid) last_step = std::max(last_step, v.progress.record.step);
    }
    if (last_step >= 0) (void)db_->UpdateGenerationStep(run_id_, attempt_, generation_, last_step);
    (void)db_->EndGeneration(run_id_, attempt_, generation_, all_clean ? RunState::kSucceeded : RunState::kPreempted,
                             all_clean ? "" : "ranks checkpointed and stopped");
    if (all_clean) {
      Finish(RunState::kSucceeded, "", kDaemonExitOk);
    } else if (all_preempted) {
      EventRecord ev = NewEvent(event_kind::kPreempt);
      ev.summary = "ranks checkpointed step " + std::to_string(last_committed_step_) + " and stopped (preemption)";
      ev.action = "stop; resume with `runctl resume " + run_id_ + "`";
      ev.runbook = "runbooks/preempted.md";
      (void)db_->RecordEvent(ev);
      Finish(RunState::kPreempted, ev.summary, kDaemonExitPreempted);
    }
    return;
  }
  const std::vector<RankView> views = Views();
  Incident inc = TriageExit(MonotonicNowNs(), views, rank, ws, log_tail);
  spdlog::error("CRASH: {}", inc.summary);
  const bool usage = WIFEXITED(ws) && WEXITSTATUS(ws) == kRankExitUsage;
  if (usage) inc.summary += " (bad config or data: a restart cannot help)";
  HandleIncident(inc, /*restartable=*/!usage);
}

void Supervisor::Impl::HandleIncident(const Incident& incident, bool restartable,
                                      const std::string& action_if_not_restarting) {
  const int budget = job_.supervise.restart_budget;
  const int64_t from = NewestCommittedStep();
  EventRecord ev = NewEvent(incident.kind, incident.culprits.empty() ? "0" : std::to_string(incident.culprits.front() / job_.nproc));
  if (incident.culprits.size() == 1) ev.rank = incident.culprits.front();
  ev.summary = incident.summary;
  ev.evidence_json = incident.evidence_json;
  ev.runbook = incident.runbook;
  restart_after_stop_ = restartable && restarts_used_ < budget;
  if (restart_after_stop_) {
    ev.action = "stopped all ranks; restart generation " + std::to_string(generation_ + 1) + " from " +
                (from >= 0 ? "step " + std::to_string(from) : "the start") + " (restart " +
                std::to_string(restarts_used_ + 1) + " of " + std::to_string(budget) + ")";
  } else if (!restartable) {
    ev.action = action_if_not_restarting.empty() ? "stopped all ranks; not restarting: the same input would fail again"
                                                 : action_if_not_restarting;
  } else {
    ev.action = "stopped all ranks; not restarting: restart budget of " + std::to_string(budget) + " is spent";
  }
  auto id = db_->RecordEvent(ev);
  if (!id.ok()) spdlog::warn("lineage: {}", id.status().ToString());
  last_incident_ = IncidentSummary{incident.kind, incident.summary, UnixMs(), ev.action, incident.runbook};
  (void)db_->EndGeneration(run_id_, attempt_, generation_, RunState::kFailed, incident.summary);
  spdlog::warn("action: {}", ev.action);
  stop_reason_ = incident.summary;
  if (incident.kind == "hang") {
    // A hung culprit does not act on TERM: do not wait out the grace period for it.
    for (int c : incident.culprits) {
      for (const auto& r : ranks_) {
        if (r->rank() == c && incident.culprits.size() < ranks_.size()) r->Signal(SIGKILL);
      }
    }
  }
  StopRanks(incident.summary);
}

void Supervisor::Impl::StopRanks(const std::string& why) {
  state_ = State::kStopping;
  stop_reason_ = why;
  if (leader()) BroadcastToFollowers({{"type", "stop"}, {"gen", generation_}, {"why", why}, {"user", user_stop_}});
  bool any = false;
  for (const auto& r : ranks_) {
    if (!r->alive()) continue;
    any = true;
    r->Signal(SIGTERM);
    r->Signal(SIGCONT);  // a stopped rank must be able to act on TERM (or die by KILL)
  }
  if (!any) {
    if (leader() && static_cast<int>(exits_.size()) >= world()) {
      io_.post([self = shared_from_this()] { self->AfterAllStopped(); });
    }
    return;
  }
  // A user stop lets ranks commit their preemption checkpoint; a failure gets the short grace.
  const double grace = user_stop_ ? std::max(job_.supervise.term_grace_s, job_.supervise.checkpoint_allowance_s)
                                  : job_.supervise.term_grace_s;
  kill_timer_.expires_after(std::chrono::milliseconds(static_cast<int64_t>(grace * 1000)));
  kill_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& e) {
    if (e) return;
    for (const auto& r : self->ranks_) {
      if (r->alive()) {
        spdlog::warn("rank {} did not stop within the grace period: SIGKILL", r->rank());
        r->Signal(SIGKILL);
      }
    }
  });
}

void Supervisor::Impl::AfterAllStopped() {
  if (state_ != State::kStopping) return;
  kill_timer_.cancel();
  if (user_stop_) {
    bool all_preempted = !exits_.empty();
    for (const auto& [r, s] : exits_) {
      all_preempted = all_preempted && WIFEXITED(s) && (WEXITSTATUS(s) == kRankExitPreempted || WEXITSTATUS(s) == kRankExitOk);
    }
    RecordCheckpointsSeen(Views());
    const RunState st = all_preempted ? RunState::kPreempted : RunState::kStopped;
    const std::string cause = all_preempted ? "stopped on request after committing step " +
                                                  std::to_string(last_committed_step_)
                                            : "stopped on request: " + stop_reason_;
    (void)db_->EndGeneration(run_id_, attempt_, generation_, st, cause);
    EventRecord ev = NewEvent(event_kind::kStop);
    ev.summary = cause;
    ev.action = "stop; resume with `runctl resume " + run_id_ + "`";
    (void)db_->RecordEvent(ev);
    Finish(st, cause, all_preempted ? kDaemonExitPreempted : kDaemonExitStopped);
    return;
  }
  if (!restart_after_stop_) {
    const int budget = job_.supervise.restart_budget;
    const bool budget_spent = restarts_used_ >= budget;
    std::string cause = budget_spent ? "restart budget of " + std::to_string(budget) +
                                           " exhausted; last incident: " + stop_reason_
                                     : stop_reason_;
    if (budget_spent) {
      EventRecord ev = NewEvent(event_kind::kBudgetExhausted);
      ev.summary = cause;
      ev.action = "stopped the run";
      ev.runbook = "runbooks/restart-budget.md";
      (void)db_->RecordEvent(ev);
    }
    Finish(RunState::kFailed, cause, kDaemonExitFailed);
    return;
  }
  ++restarts_used_;
  // A generation that trained before failing restarts at once; generations that
  // fail without a step back off exponentially (a crash loop must not spin).
  bool progressed = false;
  for (const RankView& v : Views()) {
    progressed = progressed || (v.progress.valid && v.progress.record.step > std::max<int64_t>(0, last_committed_step_));
  }
  failures_without_progress_ = progressed ? 0 : failures_without_progress_ + 1;
  last_committed_step_ = std::max(last_committed_step_, NewestCommittedStep());  // ranks may have committed on TERM
  const double backoff =
      failures_without_progress_ == 0
          ? 0.0
          : std::min(job_.supervise.backoff_max_s,
                     job_.supervise.backoff_initial_s * std::pow(2.0, failures_without_progress_ - 1));
  state_ = State::kBackoff;
  spdlog::info("restarting in {:.2f} s (restart {} of {})", backoff, restarts_used_, job_.supervise.restart_budget);
  restart_timer_.expires_after(std::chrono::milliseconds(static_cast<int64_t>(backoff * 1000)));
  restart_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& e) {
    if (e || self->state_ != State::kBackoff) return;
    Status s = self->LaunchGeneration();
    if (!s.ok()) {
      spdlog::error("{}", s.ToString());
      self->Finish(RunState::kFailed, s.ToString(), kDaemonExitFailed);
    }
  });
}

void Supervisor::Impl::Finish(RunState state, const std::string& cause, int code) {
  if (state_ == State::kFinished) return;
  state_ = State::kFinished;
  exit_code_ = code;
  if (!leader()) {
    spdlog::info("node {} done", opts_.node_id);
    poll_timer_.cancel();
    kill_timer_.cancel();
    join_timer_.cancel();
    health_timer_.cancel();
    signals_.cancel();
    if (leader_conn_) leader_conn_->Close("finished");
    io_.stop();
    return;
  }
  BroadcastToFollowers({{"type", "finish"}, {"code", code}, {"state", RunStateName(state)}});
  if (db_) {
    (void)db_->EndAttempt(run_id_, attempt_, state, cause);
    (void)db_->EndRun(run_id_, state, cause);
  }
  spdlog::info("run {} {}{}{}", run_id_, RunStateName(state), cause.empty() ? "" : ": ", cause);
  poll_timer_.cancel();
  kill_timer_.cancel();
  restart_timer_.cancel();
  health_timer_.cancel();
  signals_.cancel();
  boost::system::error_code ec;
  control_.close(ec);
  ::unlink(ControlSocketPath(opts_.run_dir).c_str());
  if (store_) store_->Shutdown();
  join_timer_.cancel();
  cluster_.close(ec);
  // Progress records of this attempt are no longer needed.
  std::error_code fec;
  for (const auto& e : std::filesystem::directory_iterator(job_.supervise.progress_dir, fec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("holdfast-" + run_id_ + "-a" + std::to_string(attempt_) + "-", 0) == 0) {
      std::filesystem::remove(e.path(), fec);
    }
  }
  if (followers_.empty()) {
    io_.stop();
    return;
  }
  // Let the "finish" messages reach the followers before the loop ends.
  kill_timer_.expires_after(std::chrono::milliseconds(200));
  kill_timer_.async_wait([self = shared_from_this()](const boost::system::error_code&) {
    for (auto& [n, f] : self->followers_) {
      if (f.conn) f.conn->Close("finished");
    }
    self->io_.stop();
  });
}

// ---- node health ----

Status Supervisor::Impl::SetUpHealth() {
  auto cfg = health::ParseHealthConfig(job_.text, job_.source);
  if (!cfg.ok()) return cfg.status();
  health_cfg_ = std::move(cfg).value();
  if (health_cfg_.checkpoint_dir.empty() && !job_.checkpoint_dir.empty()) {
    std::filesystem::path root(job_.checkpoint_dir);
    if (root.is_relative() && !job_.workdir.empty()) root = std::filesystem::path(job_.workdir) / root;
    std::error_code ec;
    std::filesystem::create_directories(root, ec);
    health_cfg_.checkpoint_dir = root.string();
  }
  health_paths_.sysfs_root = job_.supervise.health_sysfs_root;
  if (job_.supervise.health_poll_s > 0) {
    monitor_ = std::make_unique<health::HealthMonitor>(health_cfg_, health_paths_);
    (void)monitor_->Poll(std::chrono::steady_clock::now());  // the baseline for counter deltas
  }
  return Status::Ok();
}

std::vector<health::CheckResult> Supervisor::Impl::RunPrelaunchChecks() {
  // CPU-side checks only: the daemon never touches a GPU (holdfast-health does).
  health::NodeCheckOptions o;
  o.suite = health::Suite::kPreLaunch;
  o.classes = health::kClassHost | health::kClassIb;
  o.config = health_cfg_;
  o.paths = health_paths_;
  std::vector<health::CheckResult> results = health::RunNodeChecks(o);
  spdlog::info("pre-launch health checks on node {}: {}", opts_.node_id,
               health::CheckStatusName(health::WorstStatus(results)));
  return results;
}

void Supervisor::Impl::RecordHealth(const std::vector<health::CheckResult>& results, int node) {
  if (!db_) return;
  for (const health::CheckResult& r : results) {
    HealthResultRecord h;
    h.run_id = run_id_;
    h.node = std::to_string(node);
    h.check = r.subject.empty() ? r.name : r.name + " " + r.subject;
    h.status = r.status == health::CheckStatus::kPass   ? HealthStatus::kPass
               : r.status == health::CheckStatus::kWarn ? HealthStatus::kWarn
               : r.status == health::CheckStatus::kFail ? HealthStatus::kFail
                                                        : HealthStatus::kSkipped;
    h.source = r.evidence.source;
    h.evidence_json = health::ResultToJson(r);
    h.suggested_action = health::ActionName(r.action);
    auto id = db_->RecordHealthResult(h);
    if (!id.ok()) spdlog::warn("lineage: {}", id.status().ToString());
  }
}

bool Supervisor::Impl::ActOnHealth(const health::Decision& decision, int node, const char* when) {
  if (decision.action == health::Action::kNone) return false;
  Incident inc;
  inc.kind = event_kind::kHealth;
  inc.summary = std::string(when) + " health check failed on node " + std::to_string(node) + ": " + decision.reason;
  inc.evidence_json = health::ReportToJson(decision.causes, decision);
  inc.runbook = decision.causes.empty() ? "runbooks/health-host.md" : decision.causes.front().runbook;
  spdlog::error("HEALTH: {} (policy: {})", inc.summary, health::ActionName(decision.action));
  const bool restart = decision.action == health::Action::kRestart;
  const std::string leave = "stopped all ranks; node " + std::to_string(node) + " must leave the job (" +
                            health::ActionName(decision.action) +
                            "): requeue without it (under Slurm holdfastd does this), or fix it and runctl resume";
  if (state_ == State::kRunning) {
    HandleIncident(inc, restart, leave);
    return true;
  }
  if (state_ == State::kStopping || state_ == State::kFinished) return false;
  // Before the first generation (or between generations): nothing to stop.
  if (restart) return false;  // a restart-level finding before launch: launch anyway, it is recorded
  EventRecord ev = NewEvent(inc.kind, std::to_string(node));
  ev.summary = inc.summary;
  ev.evidence_json = inc.evidence_json;
  ev.runbook = inc.runbook;
  ev.action = "did not launch; node " + std::to_string(node) + " must leave the job (" +
              health::ActionName(decision.action) + ")";
  if (db_) (void)db_->RecordEvent(ev);
  last_incident_ = IncidentSummary{ev.kind, ev.summary, UnixMs(), ev.action, ev.runbook};
  restart_timer_.cancel();
  io_.post([self = shared_from_this(), cause = inc.summary] { self->Finish(RunState::kFailed, cause, kDaemonExitFailed); });
  state_ = State::kStopping;  // nothing runs; Finish follows
  return true;
}

void Supervisor::Impl::ArmHealthPoll() {
  if (!monitor_) return;
  health_timer_.expires_after(std::chrono::milliseconds(static_cast<int64_t>(job_.supervise.health_poll_s * 1000)));
  health_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& e) {
    if (e || self->state_ == State::kFinished) return;
    health::HealthMonitor::PollResult poll = self->monitor_->Poll(std::chrono::steady_clock::now());
    if (!poll.changed.empty()) {
      const health::Decision decision = health::Decide(poll.results, self->health_cfg_.policy);
      if (self->leader()) {
        self->RecordHealth(poll.changed, 0);
        self->ActOnHealth(decision, 0, "periodic");
      } else if (self->leader_conn_) {
        self->leader_conn_->Send({{"type", "health"}, {"gen", self->generation_},
                                  {"report", health::ReportToJson(poll.changed, decision)}});
      }
    }
    self->ArmHealthPoll();
  });
}

// ---- control socket ----

Status Supervisor::Impl::StartControl() {
  const std::string path = ControlSocketPath(opts_.run_dir);
  if (std::filesystem::exists(path)) {
    ControlRequest ping;
    ping.id = 1;
    ping.op = control_op::kPing;
    if (CallDaemon(path, ping, std::chrono::milliseconds(1000)).ok()) {
      return FailedPreconditionError("another holdfastd is already supervising " + opts_.run_dir + " (" + path +
                                     " answers); stop it first or use another --run-dir");
    }
    ::unlink(path.c_str());  // stale socket of a dead daemon
  }
  boost::system::error_code ec;
  asio::local::stream_protocol::endpoint ep(path);
  control_.open(ep.protocol(), ec);
  if (!ec) control_.bind(ep, ec);
  if (!ec) control_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return IoError("control socket " + path + ": " + ec.message());
  AcceptControl();
  return Status::Ok();
}

void Supervisor::Impl::AcceptControl() {
  control_.async_accept([self = shared_from_this()](const boost::system::error_code& e,
                                                    asio::local::stream_protocol::socket sock) {
    if (e) return;
    auto s = std::make_shared<asio::local::stream_protocol::socket>(std::move(sock));
    auto buf = std::make_shared<asio::streambuf>(kMaxControlMessageBytes);
    self->ServeConnection(s, buf);
    self->AcceptControl();
  });
}

void Supervisor::Impl::ServeConnection(std::shared_ptr<asio::local::stream_protocol::socket> sock,
                                       std::shared_ptr<asio::streambuf> buf) {
  asio::async_read_until(*sock, *buf, '\n', [self = shared_from_this(), sock, buf](const boost::system::error_code& e,
                                                                                   size_t n) {
    std::string reply;
    bool close_after = false;
    if (e == asio::error::not_found) {
      reply = EncodeErrorResponse(0, ControlErrorCode::kInvalidArgument,
                                  "message longer than " + std::to_string(kMaxControlMessageBytes) + " bytes");
      close_after = true;
    } else if (e) {
      return;  // peer went away
    } else {
      std::string line(asio::buffers_begin(buf->data()), asio::buffers_begin(buf->data()) + static_cast<long>(n));
      buf->consume(n);
      auto creds = ReadPeerCredentials(sock->native_handle());
      auto req = ParseControlRequest(line);
      if (!creds.ok()) {
        reply = EncodeErrorResponse(0, creds.status());
        close_after = true;
      } else if (!req.ok()) {
        reply = EncodeErrorResponse(0, req.status());
      } else {
        reply = self->Handle(*req, creds->uid);
      }
    }
    auto out = std::make_shared<std::string>(std::move(reply));
    asio::async_write(*sock, asio::buffer(*out), [self, sock, buf, out, close_after](const boost::system::error_code& we,
                                                                                     size_t) {
      if (we || close_after) return;
      self->ServeConnection(sock, buf);
    });
  });
}

std::string Supervisor::Impl::Handle(const ControlRequest& req, uid_t peer_uid) {
  if (req.op != control_op::kPing && req.op != control_op::kStatus) {
    Status allowed = CheckPeerAllowed(peer_uid, getuid());
    if (!allowed.ok()) return EncodeErrorResponse(req.id, ControlErrorCode::kPermissionDenied, allowed.message());
  }
  if (req.op == control_op::kPing) return EncodeOkResponse(req.id, "{}");
  {
    // A request about another run must not act on this one.
    nlohmann::json args = nlohmann::json::parse(req.args_json, nullptr, false);
    if (args.is_object() && args.contains("run_id") && args["run_id"].is_string()) {
      const std::string want = args["run_id"].get<std::string>();
      if (want != "latest" && run_id_.rfind(want, 0) != 0) {
        return EncodeErrorResponse(req.id, ControlErrorCode::kFailedPrecondition,
                                   "this holdfastd supervises run " + run_id_ + ", not " + want);
      }
    }
  }
  if (req.op == control_op::kStatus) return EncodeOkResponse(req.id, EncodeStatusResult(BuildStatus()));
  if (req.op == control_op::kCheckpoint) {
    if (state_ != State::kRunning) {
      return EncodeErrorResponse(req.id, ControlErrorCode::kFailedPrecondition, "no ranks are running right now");
    }
    int64_t step = 0;
    for (const auto& r : ranks_) {
      ProgressSnapshot s = r->Progress();
      if (s.valid) step = std::max(step, s.record.step);
      r->Signal(SIGUSR2);  // the trainer saves after the step all ranks agree on
    }
    BroadcastToFollowers({{"type", "signal"}, {"gen", generation_}, {"sig", SIGUSR2}});
    return EncodeOkResponse(req.id, nlohmann::json{{"requested_at_step", step}}.dump());
  }
  if (req.op == control_op::kStop) {
    user_stop_ = true;
    if (state_ == State::kRunning) {
      StopRanks("stopped with runctl");
    } else if (state_ == State::kBackoff) {
      restart_timer_.cancel();
      io_.post([self = shared_from_this()] { self->Finish(RunState::kStopped, "stopped with runctl", kDaemonExitStopped); });
    }
    return EncodeOkResponse(req.id, R"({"stopping":true})");
  }
  return EncodeErrorResponse(req.id, ControlErrorCode::kFailedPrecondition,
                             "op '" + req.op + "' is not supported by this holdfastd");
}

RunStatus Supervisor::Impl::BuildStatus() const {
  RunStatus st;
  st.run_id = run_id_;
  st.name = job_.name;
  switch (state_) {
    case State::kRunning: st.state = "running"; break;
    case State::kStopping: st.state = "stopping"; break;
    case State::kBackoff: st.state = "restarting"; break;
    case State::kFinished: st.state = "finished"; break;
    case State::kIdle: st.state = "starting"; break;
  }
  st.attempt = attempt_;
  st.generation = generation_;
  st.world_size = world();
  st.restarts_used = restarts_used_;
  st.restart_budget = job_.supervise.restart_budget;
  if (last_committed_step_ >= 0) st.last_checkpoint_step = last_committed_step_;
  st.uptime_s = std::chrono::duration<double>(Clock::now() - started_).count();
  const int64_t now = MonotonicNowNs();
  std::map<int, NodeStatus> nodes;
  for (const RankView& v : Views()) {
    NodeStatus& node = nodes[v.node];
    node.node = v.node;
    RankStatus rs;
    rs.rank = v.rank;
    rs.pid = v.pid;
    auto ex = exits_.find(v.rank);
    rs.state = v.alive ? (v.proc_state == 'T' ? "stopped" : "running")
                       : (ex != exits_.end() ? DescribeWaitStatus(ex->second) : "exited");
    const ProgressSnapshot& p = v.progress;
    if (p.valid) {
      rs.step = p.record.step;
      rs.phase = PhaseName(p.phase());
      rs.heartbeat_age_s = p.record.heartbeat_ns > 0 ? static_cast<double>(now - p.record.heartbeat_ns) / 1e9 : 0;
      if (p.record.last_step_ns > 0) rs.last_step_ms = static_cast<double>(p.record.last_step_ns) / 1e6;
      if (p.record.waiting_on != 0) rs.waiting_on = p.record.waiting_on;
      rs.collectives_issued = p.record.collectives_issued;
      st.step = std::max(st.step, p.record.step);
    }
    node.ranks.push_back(rs);
  }
  for (auto& [n, node] : nodes) st.nodes.push_back(node);
  st.last_incident = last_incident_;
  return st;
}

Supervisor::Supervisor(boost::asio::io_context* io, SupervisorOptions options)
    : impl_(std::make_shared<Impl>(io, std::move(options))) {}
Supervisor::~Supervisor() = default;
Status Supervisor::Start() { return impl_->Start(); }
int Supervisor::exit_code() const { return impl_->exit_code(); }

}  // namespace holdfast
