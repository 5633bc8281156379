#include "daemon/follower.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <tuple>
#include <vector>

#include <boost/asio.hpp>
#include <spdlog/spdlog.h>

#include "common/peer_auth.h"
#include "daemon/cluster_protocol.h"
#include "daemon/daemon_signals.h"
#include "daemon/exit_codes.h"
#include "daemon/health_watch.h"
#include "daemon/memory_restore.h"
#include "daemon/snapshot_dir.h"
#include "daemon/line_connection.h"
#include "daemon/rank_group.h"
#include "daemon/ring_delta.h"
#include "health/report.h"

namespace holdfast {

namespace asio = boost::asio;

class Follower::Impl : public std::enable_shared_from_this<Follower::Impl> {
 public:
  Impl(asio::io_context* io, FollowerOptions options, Scheduler* scheduler, const TimeSource* clock,
       TimerFactory* timers)
      : io_(*io),
        opts_(std::move(options)),
        scheduler_(scheduler),
        clock_(clock),
        signals_(io_),
        poll_timer_(timers->NewTimer()),
        kill_timer_(timers->NewTimer()),
        retry_timer_(timers->NewTimer()),
        warning_timer_(timers->NewTimer()),
        ranks_(&opts_.job, opts_.run_dir),
        health_(timers, &opts_.job, clock) {}

  Status Start();
  int exit_code() const { return exit_code_; }

 private:
  const std::string& host() const { return opts_.allocation.self().host; }
  int node() const { return opts_.allocation.this_node; }
  void Connect();
  // Whether the run's key is at hand (read once from the run directory);
  // false when Connect must wait for it or the follower is done.
  bool HaveKey();
  // The handshake (docs/cluster-protocol.md, "Trust"), then OnMessage.
  void OnLine(const ClusterMessage& msg);
  void OnMessage(const ClusterMessage& msg);
  // Opens this node's memory snapshot folder and its replica service for run `run_id`, once.
  void ReadyMemorySnapshots(const std::string& run_id);
  void OnLeaderGone(const std::string& why);
  // The periodic report: every supervise.report_ms, or at once when a rank
  // died, stopped or was replaced, committed or failed a checkpoint, reported
  // its restore or finished since the last one (what the leader acts on).
  void MaybeReport() {
    std::vector<RankView> views = ranks_.Views(node(), host());
    std::vector<ReportedState> states;
    states.reserve(views.size());
    for (const RankView& v : views) {
      const RankProgress& p = v.progress;
      states.emplace_back(v.rank, v.pid, v.alive, v.proc_state, p.checkpoint_step, p.checkpoint_failures,
                          p.restored_step, static_cast<uint32_t>(p.restore_tier), p.phase == Phase::kDone);
    }
    const int64_t now = clock_->MonotonicNs();
    if (states == reported_states_ && now - reported_ns_ < int64_t{opts_.job.supervise.report_ms} * 1'000'000) return;
    reported_states_ = std::move(states);
    reported_ns_ = now;
    ring_trimmer_.Trim(&views);
    Send(ProgressMsg{generation_, std::move(views)});
  }
  // This node's ranks for a report to the leader, their rings as deltas
  // (daemon/ring_delta.h) once the connection has carried a report.
  std::vector<RankView> Report() {
    std::vector<RankView> views = ranks_.Views(node(), host());
    if (conn_) ring_trimmer_.Trim(&views);
    return views;
  }
  void Send(const ClusterMessage& msg) {
    if (conn_) conn_->Send(EncodeClusterMessage(msg, clock_->MonotonicNs()));
  }
  void ArmPoll();
  void Reap();
  void StopRanks(double grace_s);
  void AwaitLeadersStop(const std::string& why, double lead_time_s);
  void Done(int code);
  void WaitForRanksThenStop();

  asio::io_context& io_;
  FollowerOptions opts_;
  Scheduler* scheduler_;     // not owned
  const TimeSource* clock_;  // not owned
  DaemonSignals signals_;
  std::unique_ptr<Timer> poll_timer_, kill_timer_, retry_timer_, warning_timer_;
  RankGroup ranks_;
  std::unique_ptr<SnapshotDir> snapshots_;  // this node's memory snapshot folder; null when the tier is off
  std::unique_ptr<ReplicaService> replicas_;  // its peer replicas (memory_restore.h); null when off
  HealthWatch health_;
  std::shared_ptr<LineConnection> conn_;
  std::optional<RunKey> key_;  // RUN_DIR/cluster.key
  std::string leader_addr_;    // the address the connection went to
  std::string nonce_;          // this follower's, sent in its hello ("" before the challenge)
  std::string leader_nonce_;   // the leader's challenge
  bool welcomed_ = false;      // the leader proved it holds the run's key
  std::string prelaunch_report_;
  std::string run_id_;
  bool swept_progress_ = false;  // this node's ranks' leftover progress records, at the first start
  RingTrimmer ring_trimmer_;     // what the leader holds of each rank's ring, on this connection
  // Of each rank in the last report: rank, pid, alive, process state, checkpoint step, checkpoint
  // failures, restored step, restore tier, done.
  using ReportedState = std::tuple<int, pid_t, bool, ProcState, int64_t, uint64_t, int64_t, uint32_t, bool>;
  std::vector<ReportedState> reported_states_;
  int64_t reported_ns_ = 0;                                               // when it was sent
  int generation_ = -1;
  int finish_code_ = -1;  // from the leader's "finish"
  bool done_ = false;
  int exit_code_ = kDaemonExitFailed;
  int64_t started_ns_ = 0;
};

Status Follower::Impl::Start() {
  started_ns_ = clock_->MonotonicNs();
  std::error_code ec;
  std::filesystem::create_directories(opts_.run_dir + "/logs", ec);
  if (ec) return IoError("create " + opts_.run_dir + "/logs: " + ec.message());
  std::filesystem::create_directories(opts_.job.supervise.progress_dir, ec);
  HF_RETURN_IF_ERROR(health_.SetUp());
  if (opts_.job.supervise.health_prelaunch) {
    std::vector<health::CheckResult> results = health_.RunPrelaunch(host());
    prelaunch_report_ = health::ReportToJson(results, health_.Decide(results));
  }
  std::weak_ptr<Impl> weak = shared_from_this();
  signals_.Start([weak](int sig) {
    auto self = weak.lock();
    if (!self) return;
    if (sig == SIGCHLD) {
      self->Reap();
      return;
    }
    // A scheduler's warning or requeue signal reaches every node's daemon at
    // once (srun forwards it to each task): the leader got it too and decides.
    const std::optional<SignalMeaning> meant = self->scheduler_->ExplainSignal(sig);
    if (meant && meant->preemption && meant->warning && meant->lead_time_s >= 0) {
      // The leader may use the lead time (daemon/preempt_plan.h): its stop
      // reaches this node as a StopMsg, when the save is due.
      self->AwaitLeadersStop(meant->why, meant->lead_time_s);
      return;
    }
    if (meant ? meant->preemption : MeaningOf(sig).kind == IncidentKind::kPreemption) {
      // Now: this node's ranks checkpoint on SIGTERM (they ignore SIGUSR1:
      // RankProcess) and report their exit to the leader as usual.
      spdlog::warn("{} ({}): telling this node's ranks to checkpoint and stop; the leader decides", SignalName(sig),
                   meant ? meant->why : MeaningOf(sig).why);
      if (self->ranks_.AnyAlive()) self->ranks_.SignalAll(SIGTERM);
      return;
    }
    // The leader decides about the run; this node's daemon was told to go.
    spdlog::warn("{}: stopping this node's ranks and leaving the run", SignalName(sig));
    self->StopRanks(self->opts_.job.supervise.term_grace_s);
    self->Done(kDaemonExitStopped);
  });
  health_.StartPolling([weak](const std::vector<health::CheckResult>& changed, const health::Decision& d) {
    auto self = weak.lock();
    if (self && !self->done_) self->Send(HealthMsg{self->generation_, health::ReportToJson(changed, d)});
  });
  Connect();
  ArmPoll();
  return Status::Ok();
}

bool Follower::Impl::HaveKey() {
  if (key_) return true;
  const std::string path = RunKeyPath(opts_.run_dir);
  Result<RunKey> key = ReadRunKey(path);
  if (key.ok()) {
    key_ = std::move(key).value();
    return true;
  }
  const bool missing = key.status().code() == StatusCode::kNotFound;
  if (missing && static_cast<double>(clock_->MonotonicNs() - started_ns_) / 1e9 <= opts_.job.supervise.startup_timeout_s) {
    retry_timer_->Arm(0.1, [self = shared_from_this()] { self->Connect(); });  // the leader writes it as it starts
    return false;
  }
  spdlog::error("cannot read the run's key: {}{}", key.status().message(),
                missing ? " (the leader creates it as it starts; a follower on a machine that does not share the run "
                          "directory needs a copy of the leader's, mode 0600)"
                        : "");
  Done(missing ? kDaemonExitFailed : kDaemonExitUsage);
  return false;
}

void Follower::Impl::Connect() {
  const double left_s = opts_.job.supervise.startup_timeout_s - static_cast<double>(clock_->MonotonicNs() - started_ns_) / 1e9;
  auto addr = scheduler_->FindLeader(std::chrono::milliseconds(static_cast<int64_t>(std::max(0.0, left_s) * 1000)));
  if (!addr.ok()) {
    spdlog::error("cannot find the leader: {}", addr.status().message());
    Done(kDaemonExitFailed);
    return;
  }
  const size_t colon = addr->rfind(':');
  boost::system::error_code ec;
  const auto ip = asio::ip::make_address(addr->substr(0, colon), ec);
  const int port = colon == std::string::npos ? 0 : std::atoi(addr->substr(colon + 1).c_str());
  if (ec || port <= 0 || port > 65535) {
    spdlog::error("leader address '{}': expected host:port (an IP address and a port)", *addr);
    Done(kDaemonExitUsage);
    return;
  }
  if (!HaveKey()) return;
  auto sock = std::make_shared<asio::ip::tcp::socket>(io_);
  sock->async_connect(asio::ip::tcp::endpoint(ip, static_cast<uint16_t>(port)), [self = shared_from_this(), sock,
                                                                                  a = *addr](const boost::system::error_code& e) {
    if (self->done_) return;
    if (e) {
      // A leader that is still starting, or a stale address: look again shortly.
      if (static_cast<double>(self->clock_->MonotonicNs() - self->started_ns_) / 1e9 >
          self->opts_.job.supervise.startup_timeout_s) {
        spdlog::error("cannot reach the leader at {}: {}", a, e.message());
        self->Done(kDaemonExitFailed);
        return;
      }
      self->retry_timer_->Arm(0.1, [self] { self->Connect(); });
      return;
    }
    ::fcntl(sock->native_handle(), F_SETFD, FD_CLOEXEC);
    self->conn_ = std::make_shared<LineConnection>(std::move(*sock));
    self->ring_trimmer_.Reset();  // a new connection: whole rings first, and a report at the first poll
    self->reported_states_.clear();
    self->reported_ns_ = 0;
    if (self->opts_.job.supervise.node_timeout_s > 0) {
      // A leader cut off the network must not keep this node's ranks waiting on it forever.
      Status s = self->conn_->SetPeerTimeout(self->opts_.job.supervise.node_timeout_s);
      if (!s.ok()) spdlog::warn("{}", s.ToString());
    }
    std::weak_ptr<Impl> weak = self;
    self->conn_->Start(
        [weak](std::string_view line) {
          auto s = weak.lock();
          if (!s) return;
          auto msg = ParseClusterMessage(line, s->clock_->MonotonicNs());
          if (!msg.ok()) {
            spdlog::error("bad message from the leader: {}", msg.status().message());
            s->conn_->Close("bad message: " + msg.status().message());
            return;
          }
          s->OnLine(*msg);
        },
        [weak](const std::string& why) {
          if (auto s = weak.lock()) s->OnLeaderGone(why);
        });
    self->leader_addr_ = a;  // the hello follows the leader's challenge (OnLine)
  });
}

void Follower::Impl::OnLine(const ClusterMessage& msg) {
  if (welcomed_ || std::holds_alternative<RejectMsg>(msg)) return OnMessage(msg);
  const auto* challenge = std::get_if<ChallengeMsg>(&msg);
  const auto* welcome = std::get_if<WelcomeMsg>(&msg);
  if (challenge != nullptr && nonce_.empty()) {
    Result<std::string> nonce = RandomBytes(kAuthNonceBytes);
    if (!nonce.ok()) {
      conn_->Close(nonce.status().message());
      return;
    }
    nonce_ = std::move(nonce).value();
    leader_nonce_ = challenge->nonce;
    HelloMsg hello;
    hello.version = kClusterProtocolVersion;
    hello.node = node();
    hello.host = host();
    hello.nproc = opts_.job.nproc;
    hello.pid = getpid();
    hello.health_report_json = prelaunch_report_;
    hello.nonce = nonce_;
    hello.proof = key_->Proof(kClusterFollowerLabel, leader_nonce_, nonce_);
    Send(hello);
    return;
  }
  std::string why;
  if (welcome != nullptr && !nonce_.empty()) {
    if (key_->Verify(kClusterLeaderLabel, leader_nonce_, nonce_, welcome->proof)) {
      welcomed_ = true;
      spdlog::info("node {} ({}) joined the leader at {}", node(), host(), leader_addr_);
      // Ready now, not at this node's first ranks: a spare must be able to
      // take a lost node's snapshot shards before its ranks start.
      if (!welcome->run_id.empty() && run_id_.empty()) ReadyMemorySnapshots(welcome->run_id);
      return;
    }
    why = "the peer at " + leader_addr_ + " did not prove it holds the run's key: it is not this run's leader";
  } else {
    why = std::string("the leader sent '") + ClusterMessageTypeName(msg) +
          "' before proving it holds the run's key (its challenge, then its welcome)";
  }
  spdlog::error("{}", why);
  conn_->Close(why);
}

void Follower::Impl::ReadyMemorySnapshots(const std::string& run_id) {
  run_id_ = run_id;
  Result<std::unique_ptr<SnapshotDir>> snapshots = OpenSnapshotDir(opts_.job.recovery, run_id_, opts_.allocation.nodes.size());
  if (!snapshots.ok()) {  // this node's ranks restore from disk; the leader's plan is not this node's to refuse
    spdlog::error("no memory snapshots on this node: {}", snapshots.status().ToString());
    return;
  }
  snapshots_ = std::move(snapshots).value();
  if (snapshots_) ranks_.set_snapshot_dir(snapshots_->path(), /*replicated=*/true);
  if (snapshots_ && key_) {
    replicas_ = StartReplicas(true, opts_.job.recovery, snapshots_->path(), node(), opts_.allocation.self().addr,
                              opts_.run_dir, *key_);
  }
}

void Follower::Impl::OnMessage(const ClusterMessage& msg) {
  if (const auto* m = std::get_if<StartMsg>(&msg)) {
    if (run_id_.empty()) ReadyMemorySnapshots(m->spec.run_id);  // a leader that did not say at the welcome
    if (!swept_progress_) {
      swept_progress_ = true;
      // A dead daemon's leftovers, of this node's ranks only: nodes on one
      // machine share the progress dir, and the leader's ranks are running.
      std::vector<int> mine;
      for (const RankPlacement& p : m->ranks) mine.push_back(p.global_rank);
      RemoveProgressRecords(opts_.job.supervise.progress_dir, run_id_, &mine);
    }
    generation_ = m->spec.generation;
    if (snapshots_) SweepDeadSnapshotDirs(opts_.job.recovery.memory_dir);  // as the leader does (LaunchGeneration)
    kill_timer_->Cancel();  // the previous generation's
    GenerationSpec spec = m->spec;
    spec.node_addr = opts_.allocation.self().addr;
    if (replicas_) replicas_->SetLocalFiles(LocalSnapshotFiles(spec.world_size, m->ranks));
    Status s = ranks_.Launch(spec, m->ranks);
    if (!s.ok()) {
      // The leader decides what a launch failure means.
      spdlog::error("{}", s.ToString());
      const std::vector<int> started = ranks_.ranks();
      for (const RankPlacement& p : m->ranks) {
        if (std::find(started.begin(), started.end(), p.global_rank) != started.end()) continue;
        RankExitMsg x;
        x.generation = generation_;
        x.rank = p.global_rank;
        x.wstatus = 127 << 8;
        x.exec_error = s.message();
        x.ranks = Report();
        Send(x);
      }
    }
  } else if (const auto* m = std::get_if<StopMsg>(&msg)) {
    if (m->generation == generation_) StopRanks(m->grace_s > 0 ? m->grace_s : opts_.job.supervise.term_grace_s);
  } else if (const auto* m = std::get_if<SignalMsg>(&msg)) {
    if (m->generation == generation_) ranks_.SignalAll(m->sig);
  } else if (const auto* m = std::get_if<KillMsg>(&msg)) {
    if (m->generation == generation_) ranks_.Kill(m->ranks);
  } else if (const auto* m = std::get_if<FinishMsg>(&msg)) {
    finish_code_ = m->code;
  } else if (const auto* m = std::get_if<RejectMsg>(&msg)) {
    spdlog::error("the leader rejected this node: {}", m->why);
    finish_code_ = kDaemonExitUsage;
  }
}

void Follower::Impl::OnLeaderGone(const std::string& why) {
  if (done_) return;
  spdlog::log(finish_code_ >= 0 ? spdlog::level::info : spdlog::level::err, "leader connection closed ({})", why);
  if (ranks_.AnyAlive()) StopRanks(opts_.job.supervise.term_grace_s);
  Done(finish_code_ >= 0 ? finish_code_ : kDaemonExitFailed);
}

// The KILL after the grace is for this generation's ranks only: a stop that
// arrives once they are all gone arms nothing, and a timer that outlives its
// generation does nothing (it once killed the next generation's fresh rank,
// which the leader then read as a new crash, every generation: bench/soak).
void Follower::Impl::StopRanks(double grace_s) {
  if (!ranks_.AnyAlive()) return;
  ranks_.SignalAll(SIGTERM);
  ranks_.SignalAll(SIGCONT);
  kill_timer_->Arm(grace_s, [self = shared_from_this(), gen = generation_] {
    if (self->generation_ == gen) self->ranks_.Kill({});
  });
}

// Slurm's warning with a known lead time: this node's ranks train on until the
// leader's stop. Should none come (a leader that can no longer act, its
// connection not yet found dead), this node stops its own ranks `margin` s
// before the limit; the leader's own plan stops them earlier than that.
void Follower::Impl::AwaitLeadersStop(const std::string& why, double lead_time_s) {
  const double margin = opts_.job.supervise.preempt_margin_s;
  const double fallback_s = std::max(0.0, lead_time_s - margin);
  spdlog::warn("{}: this node's ranks train on until the leader stops them (by itself {:.1f} s from now, {:.1f} s "
               "before the limit, should the leader not)",
               why, fallback_s, std::min(margin, lead_time_s));
  warning_timer_->Arm(fallback_s, [self = shared_from_this()] {
    if (self->done_ || !self->ranks_.AnyAlive()) return;
    spdlog::error("the leader has not stopped this node's ranks before the time limit: stopping them now");
    self->StopRanks(std::max(self->opts_.job.supervise.term_grace_s, self->opts_.job.supervise.checkpoint_allowance_s));
  });
}

void Follower::Impl::ArmPoll() {
  poll_timer_->Arm(opts_.job.supervise.poll_ms / 1000.0, [self = shared_from_this()] {
    if (self->done_) return;
    self->Reap();
    self->ranks_.TopUpSpares();
    if (self->conn_ && self->generation_ >= 0) self->MaybeReport();
    self->ArmPoll();
  });
}

void Follower::Impl::Reap() {
  std::vector<ReapedRank> reaped = ranks_.Reap();
  if (reaped.empty()) return;
  if (!ranks_.AnyAlive()) kill_timer_->Cancel();
  // The first exit carries the node's views after every exit of this poll, the
  // others none: a stop of 32 ranks sends 32 views, not 32 x 32.
  std::vector<RankView> views = Report();
  for (ReapedRank& r : reaped) {
    RankExitMsg x;
    x.generation = generation_;
    x.rank = r.rank;
    x.wstatus = r.wstatus;
    x.log_tail = std::move(r.log_tail);
    x.ranks = std::move(views);
    views.clear();
    Send(x);
  }
}

void Follower::Impl::Done(int code) {
  if (done_) return;
  done_ = true;
  exit_code_ = code;
  spdlog::info("node {} done", node());
  poll_timer_->Cancel();
  retry_timer_->Cancel();
  warning_timer_->Cancel();
  health_.Stop();
  signals_.Stop();
  if (conn_) conn_->Close("finished");
  if (!ranks_.AnyAlive()) {
    if (replicas_) replicas_->Stop();
    if (snapshots_) snapshots_->Remove();
    io_.stop();
    return;
  }
  // Wait for this node's ranks to go (TERM sent; KILL after the grace) before leaving.
  WaitForRanksThenStop();
}

void Follower::Impl::WaitForRanksThenStop() {
  ranks_.Reap();
  if (!ranks_.AnyAlive()) {
    if (replicas_) replicas_->Stop();
    if (snapshots_) snapshots_->Remove();
    io_.stop();
    return;
  }
  poll_timer_->Arm(0.05, [self = shared_from_this()] { self->WaitForRanksThenStop(); });
}

Follower::Follower(boost::asio::io_context* io, FollowerOptions options, Scheduler* scheduler, const TimeSource* clock,
                   TimerFactory* timers)
    : impl_(std::make_shared<Impl>(io, std::move(options), scheduler, clock, timers)) {}
Follower::~Follower() = default;
Status Follower::Start() { return impl_->Start(); }
int Follower::exit_code() const { return impl_->exit_code(); }

}  // namespace holdfast
