#include "daemon/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <tuple>

#include <boost/asio.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/progress_record.h"
#include "common/tcp_store_server.h"
#include "daemon/checkpoint_tracker.h"
#include "daemon/cluster_protocol.h"
#include "daemon/control_protocol.h"
#include "daemon/control_server.h"
#include "daemon/daemon_signals.h"
#include "daemon/exit_codes.h"
#include "daemon/health_watch.h"
#include "daemon/leader_link.h"
#include "daemon/metrics.h"
#include "daemon/rank_group.h"
#include "daemon/role_supervisor.h"
#include "daemon/run_controller.h"
#include "daemon/run_recorder.h"
#include "daemon/run_status.h"
#include "health/report.h"
#include "lineage/incident.h"
#include "lineage/lineage_db.h"
#include "scheduler/launch_plan.h"

namespace holdfast {

namespace asio = boost::asio;

namespace {

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

}  // namespace

class Supervisor::Impl : public RunActions, public std::enable_shared_from_this<Supervisor::Impl> {
 public:
  Impl(asio::io_context* io, SupervisorOptions options, Scheduler* scheduler, const TimeSource* clock)
      : io_(*io),
        opts_(std::move(options)),
        job_(opts_.job),
        alloc_(opts_.allocation),
        scheduler_(scheduler),
        clock_(clock),
        signals_(io_),
        poll_timer_(io_),
        kill_timer_(io_),
        restart_timer_(io_),
        join_timer_(io_),
        roles_timer_(io_),
        ranks_(&job_, opts_.run_dir),
        health_(&io_, &job_) {}

  Status Start();
  int exit_code() const { return exit_code_; }

  // ---- RunActions ----
  Status LaunchGeneration(int generation, int64_t resume_step) override;
  void TerminateRanks(const std::string& why, double grace_s) override;
  void KillRanks(const std::vector<int>& ranks) override;
  void ArmTimer(ControllerTimer timer, double seconds) override;
  void CancelTimer(ControllerTimer timer) override;
  Status Drain(const std::string& host, const std::string& reason) override { return scheduler_->Drain(host, reason); }
  Status Requeue(const std::vector<std::string>& exclude, const std::string& reason) override {
    return scheduler_->Requeue(recorder_->run_id(), exclude, reason);
  }
  std::string RequeueNote() const override { return scheduler_->last_requeue(); }
  std::vector<std::string> ActiveHosts() const override { return HostsOf(active_); }
  std::vector<std::string> SpareHosts() const override { return HostsOf(spares_); }
  Result<int> Reshape(const std::vector<std::string>& leaving, const std::vector<std::string>& joining) override;
  int BlameRolesForStall(double stalled_s, double timeout_s, const std::string& learner_doing) override {
    return roles_->BlameLearnerStall(stalled_s, timeout_s, learner_doing);
  }
  void Finish(int code) override;

 private:
  int world() const { return plan_.world_size; }
  std::vector<std::string> HostsOf(const std::vector<int>& nodes) const {
    std::vector<std::string> out;
    for (int n : nodes) out.push_back(alloc_.nodes[static_cast<size_t>(n)].host);
    return out;
  }
  int NodeOf(const std::string& host) const {
    for (size_t n = 0; n < alloc_.nodes.size(); ++n) {
      if (alloc_.nodes[n].host == host) return static_cast<int>(n);
    }
    return -1;
  }
  const std::string& host() const { return alloc_.self().host; }
  void ArmPoll();
  // After Finish: the role processes get TERM, then KILL after term_grace_s;
  // the loop ends once they are gone.
  void StopRolesThenEnd(bool killed, int64_t deadline_ns);
  void EndLoop();
  void PostRoleIncident(const RoleIncident& incident);
  void Tick();
  void Reap();
  void OnSignal(int sig);
  std::vector<RankView> Views() const;
  // ---- followers ----
  Status StartCluster();
  std::string OnHello(const HelloMsg& hello);  // "" accepts
  void OnFollowerMessage(int node, const ClusterMessage& msg);
  void OnFollowerLost(int node, const std::string& why);
  std::vector<int> RanksOf(int node) const;
  void Broadcast(const ClusterMessage& msg);
  // ---- control socket ----
  std::string HandleControl(const ControlRequest& req, uid_t peer_uid);
  RunStatus BuildStatus() const;
  // ---- metrics ----
  Status StartMetrics();
  void UpdateMetrics();
  MetricsSnapshot BuildMetricsSnapshot();
  void RecordHealth(const std::vector<health::CheckResult>& results, const std::string& host);

  asio::io_context& io_;
  SupervisorOptions opts_;
  const JobConfig& job_;
  const Allocation& alloc_;
  Scheduler* scheduler_;     // not owned
  const TimeSource* clock_;  // not owned
  DaemonSignals signals_;
  asio::steady_timer poll_timer_, kill_timer_, restart_timer_, join_timer_, roles_timer_;
  std::shared_ptr<LeaderLink> link_;  // several nodes only
  std::unique_ptr<AsioTcpStoreServer> store_;
  std::shared_ptr<ControlServer> control_;
  LaunchPlan plan_;
  // The nodes the ranks run on (plan_ is made from these, in this order), and
  // the joined nodes standing by (an elastic run's spares: JobConfig::max_nodes).
  std::vector<int> active_;
  std::vector<int> spares_;
  std::vector<int> devices_;
  RankGroup ranks_;
  HealthWatch health_;
  std::unique_ptr<RunRecorder> recorder_;
  std::unique_ptr<RunController> controller_;
  std::unique_ptr<RoleSupervisor> roles_;  // the job's [[roles]] processes (this node: the leader)
  bool roles_started_ = false;             // the "alone" roles started with this attempt's first generation
  std::map<int, std::vector<RankView>> followers_;  // node -> its ranks' latest views, in this machine's clock
  std::map<int, int64_t> heard_ns_;                  // node -> when its last message arrived (monotonic)
  std::unique_ptr<RunMetrics> metrics_;              // null unless metrics are configured
  std::unique_ptr<MetricsEndpoint> metrics_endpoint_;
  bool metrics_textfile_failing_ = false;            // warned once until a write succeeds again
  // (host, check, subject) -> latest status, 0 pass, 1 warn, 2 fail (metrics only).
  std::map<std::tuple<std::string, std::string, std::string>, int> health_states_;
  int64_t metrics_checkpoint_step_ = -1;
  std::optional<int64_t> metrics_checkpoint_bytes_;
  int64_t started_ns_ = 0;
  bool finished_ = false;
  int exit_code_ = kDaemonExitOk;
};

Status Supervisor::Impl::Start() {
  started_ns_ = clock_->MonotonicNs();
  // Devices: what CUDA_VISIBLE_DEVICES (Slurm's --gres=gpu sets it) makes
  // visible, else none (ranks on the CPU). The daemon itself never opens a GPU.
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    HF_ASSIGN_OR_RETURN(devices_, ParseVisibleDevices(visible));
  }
  // The leader always trains (it hosts the store); up to max_nodes train, the rest stand by.
  const size_t train_nodes = job_.max_nodes > 0 ? std::min<size_t>(job_.max_nodes, alloc_.nodes.size())
                                                : alloc_.nodes.size();
  for (size_t n = 0; n < alloc_.nodes.size(); ++n) {
    (n < train_nodes ? active_ : spares_).push_back(static_cast<int>(n));
  }
  if (job_.min_nodes > static_cast<int>(train_nodes)) {
    return InvalidArgumentError("job.min_nodes = " + std::to_string(job_.min_nodes) + " but only " +
                                std::to_string(train_nodes) + " node(s) train in this allocation of " +
                                std::to_string(alloc_.nodes.size()) + ": lower min_nodes or ask for more nodes");
  }
  if (!spares_.empty()) {
    spdlog::info("{} node(s) train (job.max_nodes = {}), {} stand by as spares", active_.size(), job_.max_nodes,
                 spares_.size());
  }
  HF_ASSIGN_OR_RETURN(plan_, MakeLaunchPlan(alloc_, job_.nproc, devices_, active_));
  std::error_code ec;
  std::filesystem::create_directories(opts_.run_dir + "/logs", ec);
  if (ec) return IoError("create " + opts_.run_dir + "/logs: " + ec.message());
  std::filesystem::create_directories(job_.supervise.progress_dir, ec);
  HF_RETURN_IF_ERROR(health_.SetUp());
  RecorderOptions ro;
  ro.run_dir = opts_.run_dir;
  ro.job = &job_;
  ro.allocation = alloc_;
  ro.world_size = world();
  ro.resume_run = opts_.resume_run;
  ro.from_step = opts_.from_step;
  HF_ASSIGN_OR_RETURN(recorder_, RunRecorder::Open(ro, clock_));
  // A dead daemon's leftovers: its ranks' progress records (its socket goes in ControlServer::Start).
  if (int n = RemoveProgressRecords(job_.supervise.progress_dir, recorder_->run_id()); n > 0) {
    spdlog::info("removed {} stale progress record(s) of run {}", n, recorder_->run_id());
  }
  ControllerOptions co;
  co.supervise = job_.supervise;
  co.world_size = world();
  co.host_of_rank = [this](int rank) { return plan_.HostOf(rank); };
  co.caps = scheduler_->capabilities();
  co.min_nodes = job_.min_nodes;
  controller_ = std::make_unique<RunController>(co, clock_, recorder_.get(), this);
  std::weak_ptr<Impl> weak = shared_from_this();
  RoleSupervisor::Hooks role_hooks;
  role_hooks.learner = [weak](const RoleIncident& incident) {
    if (auto self = weak.lock()) self->PostRoleIncident(incident);
  };
  roles_ = std::make_unique<RoleSupervisor>(&job_, clock_, recorder_.get(), std::move(role_hooks));
  control_ = std::make_shared<ControlServer>(&io_, ControlSocketPath(opts_.run_dir),
                                             [weak](const ControlRequest& r, uid_t uid) {
                                               auto self = weak.lock();
                                               return self ? self->HandleControl(r, uid) : std::string();
                                             });
  HF_RETURN_IF_ERROR(control_->Start());
  HF_RETURN_IF_ERROR(StartMetrics());
  signals_.Start([weak](int sig) {
    if (auto self = weak.lock()) self->OnSignal(sig);
  });
  if (job_.supervise.health_prelaunch) {
    std::vector<health::CheckResult> results = health_.RunPrelaunch(host());
    RecordHealth(results, host());
    controller_->OnHealth(health_.Decide(results), host(), "pre-launch");
    if (finished_) return Status::Ok();
  }
  health_.StartPolling([weak](const std::vector<health::CheckResult>& changed, const health::Decision& d) {
    auto self = weak.lock();
    if (!self || self->finished_) return;
    self->RecordHealth(changed, self->host());
    self->controller_->OnHealth(d, self->host(), "periodic");
  });
  auto store = AsioTcpStoreServer::Listen(&io_, alloc_.self().addr, 0);
  if (!store.ok()) return store.status().WithContext("start the rendezvous store");
  store_ = std::move(store).value();
  ArmPoll();
  if (alloc_.nodes.size() > 1) return StartCluster();  // generation 0 starts when every follower has joined
  controller_->Launch();
  return Status::Ok();
}

// ---- RunActions ----

Status Supervisor::Impl::LaunchGeneration(int generation, int64_t resume_step) {
  for (auto& [n, views] : followers_) views.clear();
  GenerationSpec spec;
  spec.run_id = recorder_->run_id();
  spec.attempt = recorder_->attempt();
  spec.generation = generation;
  spec.world_size = world();
  spec.store_addr = alloc_.self().addr + ":" + std::to_string(store_->port());
  spec.master_port = PickFreePort(io_, alloc_.self().addr);
  spec.resume_step = resume_step;
  spec.node_addr = alloc_.self().addr;
  for (auto& [n, views] : followers_) {
    if (plan_.ForNode(n).empty()) continue;  // a spare, or a node that left the run
    StartMsg m;
    m.run_id = spec.run_id;
    m.attempt = spec.attempt;
    m.generation = generation;
    m.world_size = spec.world_size;
    m.store_addr = spec.store_addr;
    m.master_port = spec.master_port;
    m.resume_step = resume_step;
    m.ranks = plan_.ForNode(n);
    link_->Send(n, m);
  }
  const std::vector<RankPlacement> mine = plan_.ForNode(alloc_.this_node);
  Status s = ranks_.Launch(spec, mine);
  if (!roles_->empty() && (s.ok() || !ranks_.ranks().empty() || !followers_.empty())) {
    // Role processes run on this (the leading) node: "alone" ones from the
    // attempt's first generation on, "learner" ones with every generation.
    Status rs = Status::Ok();
    if (!roles_started_) {
      roles_started_ = true;
      RoleSupervisor::Context ctx;
      ctx.run_id = spec.run_id;
      ctx.attempt = spec.attempt;
      ctx.run_dir = opts_.run_dir;
      ctx.store_addr = spec.store_addr;
      ctx.node_addr = spec.node_addr;
      ctx.host = host();
      ctx.node = alloc_.this_node;
      rs = roles_->StartAlone(ctx);
    }
    if (rs.ok()) rs = roles_->StartLearnerScoped(generation);
    if (!rs.ok()) {
      spdlog::error("{}", rs.ToString());
      RoleIncident inc;
      inc.cause = IncidentKind::kRoleFailed;
      inc.report.event = event_kind::kRoleCrash;
      inc.report.summary = rs.message() + ": a restart cannot help";
      PostRoleIncident(inc);
    }
  }
  if (s.ok()) return s;
  if (followers_.empty() && ranks_.ranks().empty()) return s;  // nothing started anywhere
  // Ranks elsewhere (or here) started: report the ones that could not, as exits.
  const std::vector<int> started = ranks_.ranks();
  for (const RankPlacement& p : mine) {
    if (std::find(started.begin(), started.end(), p.global_rank) != started.end()) continue;
    io_.post([self = shared_from_this(), rank = p.global_rank, why = s.message()] {
      if (!self->finished_) self->controller_->OnRankExit(RankExit{rank, 127 << 8, why, {}}, self->Views());
    });
  }
  return Status::Ok();
}

Result<int> Supervisor::Impl::Reshape(const std::vector<std::string>& leaving, const std::vector<std::string>& joining) {
  std::vector<int> active = active_, spares = spares_;
  for (const std::string& h : leaving) {
    const int n = NodeOf(h);
    if (n == 0) return FailedPreconditionError("the leading node " + h + " cannot leave: it hosts the run's store");
    active.erase(std::remove(active.begin(), active.end(), n), active.end());
    spares.erase(std::remove(spares.begin(), spares.end(), n), spares.end());
  }
  for (const std::string& h : joining) {
    const int n = NodeOf(h);
    if (n < 0 || std::find(spares.begin(), spares.end(), n) == spares.end()) {
      return FailedPreconditionError(h + " is not a spare node of this run");
    }
    spares.erase(std::remove(spares.begin(), spares.end(), n), spares.end());
    active.push_back(n);
  }
  HF_ASSIGN_OR_RETURN(LaunchPlan plan, MakeLaunchPlan(alloc_, job_.nproc, devices_, active));
  plan_ = std::move(plan);
  active_ = std::move(active);
  spares_ = std::move(spares);
  recorder_->SetWorldSize(plan_.world_size);
  return plan_.world_size;
}

void Supervisor::Impl::TerminateRanks(const std::string& why, double grace_s) {
  StopMsg m;
  m.generation = controller_->generation();
  m.why = why;
  m.grace_s = grace_s;
  Broadcast(m);
  ranks_.SignalAll(SIGTERM);
  ranks_.SignalAll(SIGCONT);  // a stopped rank must be able to act on TERM (or die by KILL)
  roles_->SignalLearnerScoped(SIGTERM);  // restart = "learner" roles stop with the ranks; "alone" ones run on
}

void Supervisor::Impl::KillRanks(const std::vector<int>& ranks) {
  KillMsg m;
  m.generation = controller_->generation();
  m.ranks = ranks;
  Broadcast(m);
  ranks_.Kill(ranks);
  if (ranks.empty()) roles_->SignalLearnerScoped(SIGKILL);
}

void Supervisor::Impl::ArmTimer(ControllerTimer timer, double seconds) {
  asio::steady_timer& t = timer == ControllerTimer::kKillGrace ? kill_timer_ : restart_timer_;
  t.expires_after(std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
  t.async_wait([weak = std::weak_ptr<Impl>(shared_from_this()), timer](const boost::system::error_code& e) {
    auto self = weak.lock();
    if (!e && self && !self->finished_) self->controller_->OnTimer(timer);
  });
}

void Supervisor::Impl::CancelTimer(ControllerTimer timer) {
  (timer == ControllerTimer::kKillGrace ? kill_timer_ : restart_timer_).cancel();
}

void Supervisor::Impl::Finish(int code) {
  if (finished_) return;
  finished_ = true;
  exit_code_ = code;
  UpdateMetrics();  // the textfile keeps how the run ended
  FinishMsg fm;
  fm.code = code;
  fm.state = controller_ ? controller_->state_name() : "finished";
  Broadcast(fm);
  poll_timer_.cancel();
  kill_timer_.cancel();
  restart_timer_.cancel();
  join_timer_.cancel();
  health_.Stop();
  signals_.Stop();
  if (control_) control_->Close();
  if (store_) store_->Shutdown();
  if (recorder_) RemoveProgressRecords(job_.supervise.progress_dir, recorder_->run_id());
  if (link_) link_->Close(/*flush=*/true);  // the "finish" reaches the followers first
  if (roles_ && roles_->AnyAlive()) {
    roles_->StopAll(SIGTERM);
    StopRolesThenEnd(/*killed=*/false,
                     clock_->MonotonicNs() + static_cast<int64_t>(job_.supervise.term_grace_s * 1e9));
    return;
  }
  EndLoop();
}

void Supervisor::Impl::EndLoop() {
  if (followers_.empty()) {
    io_.stop();
    return;
  }
  // Let the followers read "finish" before the loop ends.
  kill_timer_.expires_after(std::chrono::milliseconds(200));
  kill_timer_.async_wait([self = shared_from_this()](const boost::system::error_code&) { self->io_.stop(); });
}

void Supervisor::Impl::StopRolesThenEnd(bool killed, int64_t deadline_ns) {
  roles_->ReapExited();
  if (!roles_->AnyAlive()) {
    spdlog::info("role processes stopped");
    EndLoop();
    return;
  }
  if (clock_->MonotonicNs() >= deadline_ns) {
    if (killed) {
      // Not reaped within the grace after SIGKILL (uninterruptible I/O): they
      // die with the daemon (PR_SET_PDEATHSIG).
      spdlog::warn("role processes still not reaped after SIGKILL; leaving them to PR_SET_PDEATHSIG");
      EndLoop();
      return;
    }
    spdlog::warn("role processes did not stop within term_grace_s ({} s): SIGKILL", job_.supervise.term_grace_s);
    roles_->StopAll(SIGKILL);
    killed = true;
    deadline_ns = clock_->MonotonicNs() + static_cast<int64_t>(std::max(1.0, job_.supervise.term_grace_s) * 1e9);
  }
  roles_timer_.expires_after(std::chrono::milliseconds(std::min(job_.supervise.poll_ms, 50)));
  roles_timer_.async_wait([self = shared_from_this(), killed, deadline_ns](const boost::system::error_code& e) {
    if (!e) self->StopRolesThenEnd(killed, deadline_ns);
  });
}

void Supervisor::Impl::PostRoleIncident(const RoleIncident& incident) {
  // Posted: the controller's actions (stopping ranks, ending the run) must not
  // run inside the RoleSupervisor's own call.
  io_.post([weak = std::weak_ptr<Impl>(shared_from_this()), incident] {
    auto self = weak.lock();
    if (self && !self->finished_) self->controller_->OnRoleIncident(incident, self->Views());
  });
}

// ---- the loop ----

void Supervisor::Impl::ArmPoll() {
  poll_timer_.expires_after(std::chrono::milliseconds(job_.supervise.poll_ms));
  poll_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& e) {
    if (e || self->finished_) return;
    self->Tick();
    if (!self->finished_) self->ArmPoll();
  });
}

void Supervisor::Impl::Tick() {
  Reap();  // a SIGCHLD can coalesce; reaping here too costs one syscall
  if (!finished_) roles_->OnTick();
  if (!finished_) controller_->OnTick(Views());
  if (!finished_) UpdateMetrics();
}

void Supervisor::Impl::Reap() {
  std::vector<std::pair<pid_t, int>> others;
  std::vector<ReapedRank> reaped = ranks_.Reap(&others);
  for (const auto& [pid, wstatus] : others) {
    if (roles_) roles_->OnExit(pid, wstatus);
  }
  for (ReapedRank& r : reaped) {
    if (finished_) return;
    controller_->OnRankExit(RankExit{r.rank, r.wstatus, "", std::move(r.log_tail)}, Views());
  }
}

void Supervisor::Impl::OnSignal(int sig) {
  if (sig == SIGCHLD) {
    Reap();
    return;
  }
  DaemonSignalMeaning m = MeaningOf(sig);
  double lead_time_s = -1;
  if (const std::optional<SignalMeaning> s = scheduler_->ExplainSignal(sig)) {
    m.kind = s->preemption ? IncidentKind::kPreemption : IncidentKind::kStopRequest;
    m.why = s->why;
    lead_time_s = s->lead_time_s;
  }
  if (m.kind == IncidentKind::kPreemption) controller_->NoteLeadTime(lead_time_s);
  if (controller_->state() == RunController::State::kStopping && m.kind == IncidentKind::kStopRequest) {
    spdlog::warn("{} again while stopping: killing the ranks now", SignalName(sig));
    KillRanks({});
    return;
  }
  controller_->OnStopRequest(m.kind, m.why);
}

std::vector<RankView> Supervisor::Impl::Views() const {
  std::vector<RankView> views = ranks_.Views(alloc_.this_node, host());
  const int64_t now = clock_->MonotonicNs();
  for (const auto& [n, f] : followers_) {
    const auto heard = heard_ns_.find(n);
    const double age = heard == heard_ns_.end() ? 0 : static_cast<double>(now - heard->second) / 1e9;
    for (RankView v : f) {
      v.report_age_s = age;
      views.push_back(std::move(v));
    }
  }
  std::sort(views.begin(), views.end(), [](const RankView& a, const RankView& b) { return a.rank < b.rank; });
  return views;
}

// ---- followers ----

Status Supervisor::Impl::StartCluster() {
  std::weak_ptr<Impl> weak = shared_from_this();
  LeaderLink::Handlers h;
  h.on_hello = [weak](const HelloMsg& hello) {
    auto self = weak.lock();
    return self ? self->OnHello(hello) : std::string("the leader is going away");
  };
  h.on_message = [weak](int node, const ClusterMessage& msg) {
    if (auto self = weak.lock()) self->OnFollowerMessage(node, msg);
  };
  h.on_lost = [weak](int node, const std::string& why) {
    if (auto self = weak.lock()) self->OnFollowerLost(node, why);
  };
  link_ = std::make_shared<LeaderLink>(&io_, scheduler_, clock_, std::move(h), job_.supervise.node_timeout_s);
  HF_RETURN_IF_ERROR(link_->Listen(alloc_.self().addr, opts_.cluster_port));
  spdlog::info("leading {} nodes", alloc_.nodes.size());
  join_timer_.expires_after(std::chrono::milliseconds(static_cast<int64_t>(job_.supervise.startup_timeout_s * 1000)));
  join_timer_.async_wait([weak](const boost::system::error_code& e) {
    auto self = weak.lock();
    if (e || !self || self->finished_ || self->controller_->state() != RunController::State::kIdle) return;
    for (int n = 1; n < static_cast<int>(self->alloc_.nodes.size()); ++n) {
      if (self->link_->has(n)) continue;
      self->controller_->OnNodeLost(self->alloc_.nodes[n].host, self->RanksOf(n),
                                    std::to_string(self->link_->joined()) + " of " +
                                        std::to_string(self->alloc_.nodes.size() - 1) +
                                        " follower daemons joined within startup_timeout_s");
      return;
    }
  });
  return Status::Ok();
}

std::string Supervisor::Impl::OnHello(const HelloMsg& hello) {
  const int n = hello.node;
  if (finished_) return "the run is over";
  if (n <= 0 || n >= static_cast<int>(alloc_.nodes.size())) return "node " + std::to_string(n) + " is out of range";
  if (link_->has(n)) return "node " + std::to_string(n) + " has already joined";
  if (hello.nproc != job_.nproc) return "nproc " + std::to_string(hello.nproc) + " differs from the leader's";
  if (controller_->state() != RunController::State::kIdle) return "the run has started without it";
  const std::string& h = alloc_.nodes[n].host;
  spdlog::info("node {} ({}) joined", n, h);
  followers_[n].clear();
  heard_ns_[n] = clock_->MonotonicNs();
  if (!hello.health_report_json.empty()) {
    auto results = health::ResultsFromReportJson(hello.health_report_json);
    if (results.ok()) {
      RecordHealth(*results, h);
      controller_->OnHealth(health_.Decide(*results), h, "pre-launch");
    }
  }
  // The link counts this node once we return: launch after that.
  io_.post([self = shared_from_this()] {
    if (!self->finished_ && self->controller_->state() == RunController::State::kIdle &&
        self->link_->joined() == self->alloc_.nodes.size() - 1) {
      self->join_timer_.cancel();
      self->controller_->Launch();
    }
  });
  return "";
}

void Supervisor::Impl::OnFollowerMessage(int node, const ClusterMessage& msg) {
  if (finished_) return;
  heard_ns_[node] = clock_->MonotonicNs();
  const std::string& h = alloc_.nodes[node].host;
  if (const auto* health = std::get_if<HealthMsg>(&msg)) {
    auto results = health::ResultsFromReportJson(health->report_json);
    if (results.ok()) {
      RecordHealth(*results, h);
      controller_->OnHealth(health_.Decide(*results), h, "periodic");
    }
  } else if (const auto* p = std::get_if<ProgressMsg>(&msg)) {
    if (p->generation == controller_->generation()) followers_[node] = p->ranks;
  } else if (const auto* x = std::get_if<RankExitMsg>(&msg)) {
    if (x->generation != controller_->generation()) return;  // from a generation that is over
    followers_[node] = x->ranks;
    controller_->OnRankExit(RankExit{x->rank, x->wstatus, x->exec_error, x->log_tail}, Views());
  }
}

void Supervisor::Impl::OnFollowerLost(int node, const std::string& why) {
  followers_.erase(node);
  heard_ns_.erase(node);
  if (finished_) return;
  const std::string& h = alloc_.nodes[node].host;
  if (std::find(active_.begin(), active_.end(), node) == active_.end()) {
    // A spare, or a node the run already left: no rank of the run is there.
    const bool spare = std::find(spares_.begin(), spares_.end(), node) != spares_.end();
    spares_.erase(std::remove(spares_.begin(), spares_.end(), node), spares_.end());
    spdlog::warn("node {} ({}) is gone ({}); {}", node, h, why, spare ? "it was a spare" : "the run had left it");
    if (spare) {
      recorder_->Record(event_kind::kNodeLost, h + "'s holdfastd is gone (" + why + "); it was a spare",
                        "none: no rank ran there; " + std::to_string(spares_.size()) + " spare(s) left", {}, AtHost(h));
    }
    return;
  }
  controller_->OnNodeLost(h, RanksOf(node), why);
}

std::vector<int> Supervisor::Impl::RanksOf(int node) const {
  std::vector<int> ranks;
  for (const RankPlacement& p : plan_.ForNode(node)) ranks.push_back(p.global_rank);
  return ranks;
}

void Supervisor::Impl::Broadcast(const ClusterMessage& msg) {
  if (link_) link_->Broadcast(msg);
}

// ---- control socket ----

std::string Supervisor::Impl::HandleControl(const ControlRequest& req, uid_t peer_uid) {
  if (req.op != control_op::kPing && req.op != control_op::kStatus) {
    Status allowed = CheckPeerAllowed(peer_uid, getuid());
    if (!allowed.ok()) return EncodeErrorResponse(req.id, ControlErrorCode::kPermissionDenied, allowed.message());
  }
  if (req.op == control_op::kPing) return EncodeOkResponse(req.id, "{}");
  if (!RequestNamesRun(req, recorder_->run_id())) {
    // A request about another run must not act on this one.
    return EncodeErrorResponse(req.id, ControlErrorCode::kFailedPrecondition,
                               "this holdfastd supervises run " + recorder_->run_id() + ", not " + *req.run_id);
  }
  if (req.op == control_op::kStatus) return EncodeOkResponse(req.id, EncodeStatusResult(BuildStatus()));
  if (req.op == control_op::kCheckpoint) {
    if (controller_->state() != RunController::State::kRunning) {
      return EncodeErrorResponse(req.id, ControlErrorCode::kFailedPrecondition, "no ranks are running right now");
    }
    const int64_t step = NewestStep(Views(), 0);
    ranks_.SignalAll(SIGUSR2);  // the trainer saves after the step all ranks agree on
    Broadcast(SignalMsg{controller_->generation(), SIGUSR2});
    return EncodeOkResponse(req.id, nlohmann::json{{"requested_at_step", step}}.dump());
  }
  if (req.op == control_op::kStop) {
    controller_->OnStopRequest(IncidentKind::kStopRequest, "stopped with runctl");
    return EncodeOkResponse(req.id, R"({"stopping":true})");
  }
  return EncodeErrorResponse(req.id, ControlErrorCode::kFailedPrecondition,
                             "op '" + req.op + "' is not supported by this holdfastd");
}

RunStatus Supervisor::Impl::BuildStatus() const {
  RunStatus st = BuildRunStatus(*controller_, *recorder_, job_, Views(),
                                static_cast<double>(clock_->MonotonicNs() - started_ns_) / 1e9, MonotonicNowNs());
  st.roles = roles_->Statuses(MonotonicNowNs());
  return st;
}

// ---- metrics ----

Status Supervisor::Impl::StartMetrics() {
  if (opts_.metrics_addr.empty() && opts_.metrics_textfile.empty()) return Status::Ok();
  if (!MetricsAvailable()) {
    return FailedPreconditionError("--metrics-addr/--metrics-textfile: this holdfastd was built without "
                                   "prometheus-cpp (install prometheus-cpp-dev and rebuild)");
  }
  metrics_ = std::make_unique<RunMetrics>();
  metrics_->Update(BuildMetricsSnapshot());
  if (!opts_.metrics_textfile.empty()) {
    // A path that cannot be written is a configuration error: say so now, not every poll.
    HF_RETURN_IF_ERROR(WriteMetricsTextfile(opts_.metrics_textfile, metrics_->Exposition()));
    spdlog::info("metrics: writing {} every poll", opts_.metrics_textfile);
  }
  if (!opts_.metrics_addr.empty()) {
    HF_ASSIGN_OR_RETURN(metrics_endpoint_, MetricsEndpoint::Start(opts_.metrics_addr, metrics_.get()));
    spdlog::info("metrics: http://{}/metrics", metrics_endpoint_->address());
  }
  return Status::Ok();
}

void Supervisor::Impl::UpdateMetrics() {
  if (!metrics_) return;
  metrics_->Update(BuildMetricsSnapshot());
  if (opts_.metrics_textfile.empty()) return;
  Status s = WriteMetricsTextfile(opts_.metrics_textfile, metrics_->Exposition());
  if (!s.ok() && !metrics_textfile_failing_) spdlog::warn("{} (retrying every poll)", s.ToString());
  metrics_textfile_failing_ = !s.ok();
}

MetricsSnapshot Supervisor::Impl::BuildMetricsSnapshot() {
  MetricsSnapshot s;
  s.now_ns = clock_->MonotonicNs();
  s.run_id = recorder_->run_id();
  s.state = controller_->state_name();
  s.attempt = recorder_->attempt();
  s.generation = std::max(0, controller_->generation());
  s.world_size = world();
  s.restarts = controller_->restarts_used();
  s.restart_budget = job_.supervise.restart_budget;
  for (const RankView& v : Views()) {
    RankSample r;
    r.rank = v.rank;
    r.host = v.host;
    r.alive = v.alive;
    const RankProgress& p = v.progress;
    r.has_progress = p.valid;
    if (p.valid) {
      r.step = p.step;
      if (p.last_step_ns > 0) r.last_step_s = static_cast<double>(p.last_step_ns) / 1e9;
      if (r.last_step_s && job_.tokens_per_step > 0) {
        r.tokens_per_s = static_cast<double>(job_.tokens_per_step) / *r.last_step_s;
      }
      r.in_checkpoint = p.phase == Phase::kCheckpoint;
    }
    s.ranks.push_back(std::move(r));
  }
  // Every incident kind from zero, so that rate() and alerts see the first one.
  for (const EventKindInfo& k : kEventKinds) {
    if (k.is_incident) s.incidents[k.kind] = 0;
  }
  for (const auto& [kind, n] : recorder_->incident_counts()) s.incidents[kind] = n;
  s.checkpoint_step = recorder_->last_committed_step();
  if (s.checkpoint_step >= 0 && s.checkpoint_step != metrics_checkpoint_step_) {
    metrics_checkpoint_step_ = s.checkpoint_step;  // sized once per new checkpoint: a stat per file
    const CheckpointTracker tracker(CheckpointRoot(job_));
    metrics_checkpoint_bytes_.reset();
    if (tracker.enabled()) metrics_checkpoint_bytes_ = tracker.StepBytes(s.checkpoint_step);
  }
  if (s.checkpoint_step >= 0) s.checkpoint_bytes = metrics_checkpoint_bytes_;
  for (const auto& [key, status] : health_states_) {
    s.health.push_back(HealthSample{std::get<0>(key), std::get<1>(key), std::get<2>(key), status});
  }
  return s;
}

void Supervisor::Impl::RecordHealth(const std::vector<health::CheckResult>& results, const std::string& host) {
  recorder_->RecordHealth(results, host);
  for (const health::CheckResult& r : results) {
    const auto key = std::make_tuple(host, r.name, r.subject);
    if (r.status == health::CheckStatus::kSkipped) {
      health_states_.erase(key);
    } else {
      health_states_[key] = r.status == health::CheckStatus::kPass ? 0 : r.status == health::CheckStatus::kWarn ? 1 : 2;
    }
  }
}

Supervisor::Supervisor(boost::asio::io_context* io, SupervisorOptions options, Scheduler* scheduler,
                       const TimeSource* clock)
    : impl_(std::make_shared<Impl>(io, std::move(options), scheduler, clock)) {}
Supervisor::~Supervisor() = default;
Status Supervisor::Start() { return impl_->Start(); }
int Supervisor::exit_code() const { return impl_->exit_code(); }

}  // namespace holdfast
