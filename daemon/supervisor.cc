#include "daemon/supervisor.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "common/progress_record.h"
#include "daemon/supervisor_impl.h"
#include "lineage/incident.h"
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

Supervisor::Impl::Impl(asio::io_context* io, SupervisorOptions options, Scheduler* scheduler, const TimeSource* clock,
                       TimerFactory* timers)
    : io_(*io),
      opts_(std::move(options)),
      job_(opts_.job),
      alloc_(opts_.allocation),
      scheduler_(scheduler),
      clock_(clock),
      timers_(timers),
      signals_(io_),
      poll_timer_(timers_->NewTimer()),
      kill_timer_(timers_->NewTimer()),
      restart_timer_(timers_->NewTimer()),
      preempt_timer_(timers_->NewTimer()),
      join_timer_(timers_->NewTimer()),
      roles_timer_(timers_->NewTimer()),
      control_handler_(this, getuid()),
      members_(opts_.allocation, opts_.job.nproc),
      ranks_(&job_, opts_.run_dir),
      health_(timers_, &job_, clock_),
      metrics_(&job_, opts_.metrics_addr, opts_.metrics_textfile) {}

Status Supervisor::Impl::Start() {
  started_ns_ = clock_->MonotonicNs();
  // Devices: what CUDA_VISIBLE_DEVICES (Slurm's --gres=gpu sets it) makes
  // visible, else none (ranks on the CPU). The daemon itself never opens a GPU.
  std::vector<int> devices;
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    HF_ASSIGN_OR_RETURN(devices, ParseVisibleDevices(visible));
  }
  HF_RETURN_IF_ERROR(members_.Init(job_.min_nodes, job_.max_nodes, std::move(devices)));
  if (!members_.spares().empty()) {
    spdlog::info("{} node(s) train (job.max_nodes = {}), {} stand by as spares", members_.active().size(),
                 job_.max_nodes, members_.spares().size());
  }
  std::error_code ec;
  std::filesystem::create_directories(opts_.run_dir + "/logs", ec);
  if (ec) return IoError("create " + opts_.run_dir + "/logs: " + ec.message());
  std::filesystem::create_directories(job_.supervise.progress_dir, ec);
  HF_RETURN_IF_ERROR(health_.SetUp());
  HF_RETURN_IF_ERROR(StartRankSide());
  std::weak_ptr<Impl> weak = shared_from_this();
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
  // The run's key: the store and the cluster port take only peers that prove they hold it.
  Result<RunKey> key = EnsureRunKey(RunKeyPath(opts_.run_dir));
  if (!key.ok()) return key.status().WithContext("the run's key (docs/cluster-protocol.md, Trust)");
  key_ = std::move(key).value();
  auto store = AsioTcpStoreServer::Listen(&io_, alloc_.self().addr, 0, *key_);
  if (!store.ok()) return store.status().WithContext("start the rendezvous store");
  store_ = std::move(store).value();
  spdlog::info("rendezvous store on {}:{} (its clients prove they hold the run's key)", alloc_.self().addr, store_->port());
  StartMemoryReplicas();
  ArmPoll();
  if (alloc_.nodes.size() > 1) return StartCluster();  // generation 0 starts when every follower has joined
  controller_->Launch();
  return Status::Ok();
}

Status Supervisor::Impl::StartRankSide() {
  // The control socket first: a run dir it cannot be bound in fails the start
  // before the attempt is recorded (requests are served once the loop runs).
  std::weak_ptr<Impl> weak = shared_from_this();
  control_ = std::make_shared<ControlServer>(&io_, ControlSocketPath(opts_.run_dir),
                                             [weak](const ControlRequest& r, uid_t uid) {
                                               auto self = weak.lock();
                                               return self ? self->control_handler_.Handle(r, uid) : std::string();
                                             });
  HF_RETURN_IF_ERROR(control_->Start());
  RecorderOptions ro;
  ro.run_dir = opts_.run_dir;
  ro.job = &job_;
  ro.allocation = alloc_;
  ro.world_size = members_.world();
  for (const RankPlacement& r : members_.plan().ranks) ro.gpus += r.device >= 0 ? 1 : 0;
  ro.resume_run = opts_.resume_run;
  ro.from_step = opts_.from_step;
  Result<std::unique_ptr<RunRecorder>> recorder = RunRecorder::Open(ro, clock_);
  if (!recorder.ok()) {
    control_->Close();  // no socket left behind a start that failed
    return recorder.status();
  }
  recorder_ = std::move(recorder).value();
  StartRemoteControl();
  // A dead daemon's leftovers: its ranks' progress records (its socket goes in ControlServer::Start).
  if (int n = RemoveProgressRecords(job_.supervise.progress_dir, recorder_->run_id()); n > 0) {
    spdlog::info("removed {} stale progress record(s) of run {}", n, recorder_->run_id());
  }
  HF_ASSIGN_OR_RETURN(snapshots_, OpenSnapshotDir(job_.recovery, recorder_->run_id(), alloc_.nodes.size()));
  if (snapshots_) ranks_.set_snapshot_dir(snapshots_->path(), alloc_.nodes.size() > 1);
  ControllerOptions co;
  co.supervise = job_.supervise;
  co.world_size = members_.world();
  co.host_of_rank = [this](int rank) { return members_.plan().HostOf(rank); };
  co.caps = scheduler_->capabilities();
  co.min_nodes = job_.min_nodes;
  controller_ = std::make_unique<RunController>(co, clock_, recorder_.get(), this);
  RoleSupervisor::Hooks role_hooks;
  role_hooks.learner = [weak](const RoleIncident& incident) {
    if (auto self = weak.lock()) self->PostRoleIncident(incident);
  };
  roles_ = std::make_unique<RoleSupervisor>(&job_, clock_, recorder_.get(), std::move(role_hooks));
  if (metrics_.enabled()) HF_RETURN_IF_ERROR(metrics_.Start(MetricsFacts(), Views()));
  signals_.Start([weak](int sig) {
    if (auto self = weak.lock()) self->OnSignal(sig);
  });
  return Status::Ok();
}

// ---- RunActions ----
Status Supervisor::Impl::LaunchNow(int generation, int64_t resume_step) {
  GenerationSpec spec;
  spec.run_id = recorder_->run_id();
  spec.attempt = recorder_->attempt();
  spec.generation = generation;
  spec.world_size = members_.world();
  spec.store_addr = alloc_.self().addr + ":" + std::to_string(store_->port());
  spec.master_port = PickFreePort(io_, alloc_.self().addr);
  spec.resume_step = resume_step;
  spec.node_addr = alloc_.self().addr;
  for (int n : members_.joined_nodes()) {
    if (members_.plan().ForNode(n).empty()) continue;  // a spare, or a node that left the run
    StartMsg m;
    m.spec = spec;
    m.spec.node_addr.clear();  // each node sets its own
    m.ranks = members_.plan().ForNode(n);
    link_->Send(n, m);
  }
  const std::vector<RankPlacement> mine = members_.plan().ForNode(alloc_.this_node);
  Status s = ranks_.Launch(spec, mine);
  if (!roles_->empty() && (s.ok() || !ranks_.ranks().empty() || members_.has_followers())) {
    if (Status rs = StartRoles(spec, generation); !rs.ok()) {
      spdlog::error("{}", rs.ToString());
      RoleIncident inc;
      inc.cause = IncidentKind::kRoleFailed;
      inc.report.event = event_kind::kRoleCrash;
      inc.report.summary = rs.message() + ": a restart cannot help";
      PostRoleIncident(inc);
    }
  }
  if (s.ok()) return s;
  if (!members_.has_followers() && ranks_.ranks().empty()) return s;  // nothing started anywhere
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

// Role processes run on this (the leading) node: "alone" ones from the
// attempt's first generation on, "learner" ones with every generation.
Status Supervisor::Impl::StartRoles(const GenerationSpec& spec, int generation) {
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
    HF_RETURN_IF_ERROR(roles_->StartAlone(ctx));
  }
  return roles_->StartLearnerScoped(generation);
}

Result<int> Supervisor::Impl::Reshape(const std::vector<std::string>& leaving, const std::vector<std::string>& joining) {
  HF_ASSIGN_OR_RETURN(int world, members_.Reshape(leaving, joining));
  recorder_->SetWorldSize(world);
  return world;
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

Timer& Supervisor::Impl::TimerOf(ControllerTimer timer) {
  if (timer == ControllerTimer::kKillGrace) return *kill_timer_;
  return timer == ControllerTimer::kRestart ? *restart_timer_ : *preempt_timer_;
}

void Supervisor::Impl::ArmTimer(ControllerTimer timer, double seconds) {
  TimerOf(timer).Arm(seconds, [weak = std::weak_ptr<Impl>(shared_from_this()), timer] {
    auto self = weak.lock();
    if (self && !self->finished_) self->controller_->OnTimer(timer);
  });
}

void Supervisor::Impl::CancelTimer(ControllerTimer timer) { TimerOf(timer).Cancel(); }

void Supervisor::Impl::Finish(int code) {
  if (finished_) return;
  finished_ = true;
  exit_code_ = code;
  UpdateMetrics();  // the textfile keeps how the run ended
  FinishMsg fm;
  fm.code = code;
  fm.state = controller_ ? controller_->state_name() : "finished";
  Broadcast(fm);
  poll_timer_->Cancel();
  kill_timer_->Cancel();
  restart_timer_->Cancel();
  preempt_timer_->Cancel();
  join_timer_->Cancel();
  health_.Stop();
  signals_.Stop();
  if (control_) control_->Close();
  WithdrawControlEndpoint();
  if (store_) store_->Shutdown();
  if (recorder_) RemoveProgressRecords(job_.supervise.progress_dir, recorder_->run_id());
  StopMemoryReplicas();  // and the snapshots' folder
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
  if (!members_.has_followers()) {
    io_.stop();
    return;
  }
  // Let the followers read "finish" before the loop ends.
  kill_timer_->Arm(0.2, [self = shared_from_this()] { self->io_.stop(); });
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
  roles_timer_->Arm(std::min(job_.supervise.poll_ms, 50) / 1000.0, [self = shared_from_this(), killed, deadline_ns] {
    self->StopRolesThenEnd(killed, deadline_ns);
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
  poll_timer_->Arm(job_.supervise.poll_ms / 1000.0, [self = shared_from_this()] {
    if (self->finished_) return;
    self->Tick();
    if (!self->finished_) self->ArmPoll();
  });
}

void Supervisor::Impl::Tick() {
  Reap();  // a SIGCHLD can coalesce; reaping here too costs one syscall
  if (!finished_) { ranks_.TopUpSpares(); roles_->OnTick(); }
  if (!finished_) controller_->OnTick(Views());
  if (!finished_) UpdateMetrics();
}

void Supervisor::Impl::Reap() {
  std::vector<std::pair<pid_t, int>> others;
  std::vector<ReapedRank> reaped = ranks_.Reap(&others);
  for (const auto& [pid, wstatus] : others) {
    if (roles_) roles_->OnExit(pid, wstatus);
  }
  if (reaped.empty() || finished_) return;
  std::vector<RankExit> exits;
  for (ReapedRank& r : reaped) exits.push_back(RankExit{r.rank, r.wstatus, "", std::move(r.log_tail)});
  controller_->OnRankExits(exits, Views());
}

void Supervisor::Impl::OnSignal(int sig) {
  if (sig == SIGCHLD) {
    Reap();
    return;
  }
  DaemonSignalMeaning m = MeaningOf(sig);
  double lead_time_s = -1;
  bool warning = false;
  if (const std::optional<SignalMeaning> s = scheduler_->ExplainSignal(sig)) {
    m.kind = s->preemption ? IncidentKind::kPreemption : IncidentKind::kStopRequest;
    m.why = s->why;
    lead_time_s = s->lead_time_s;
    warning = s->warning && s->preemption;
  }
  if (warning) {  // the ranks may train on for a while (daemon/preempt_plan.h)
    controller_->OnPreemptionWarning(m.why, lead_time_s);
    return;
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
  return members_.Merge(ranks_.Views(alloc_.this_node, host()), clock_->MonotonicNs());
}

Supervisor::Supervisor(boost::asio::io_context* io, SupervisorOptions options, Scheduler* scheduler,
                       const TimeSource* clock, TimerFactory* timers)
    : impl_(std::make_shared<Impl>(io, std::move(options), scheduler, clock, timers)) {}
Supervisor::~Supervisor() = default;
Status Supervisor::Start() { return impl_->Start(); }
int Supervisor::exit_code() const { return impl_->exit_code(); }

}  // namespace holdfast
