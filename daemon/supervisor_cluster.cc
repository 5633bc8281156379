// Supervisor::Impl (daemon/supervisor_impl.h): the followers, the control
// socket's target, and the facts the metrics are made of.
#include <signal.h>
#include <unistd.h>

#include <algorithm>

#include <spdlog/spdlog.h>

#include "common/atomic_file.h"
#include "daemon/control_remote.h"
#include "daemon/munge_credential.h"
#include "daemon/run_status.h"
#include "daemon/stack_capture.h"
#include "daemon/supervisor_impl.h"
#include "health/report.h"
#include "lineage/incident.h"

namespace holdfast {

// ---- a hang's stacks (this node's ranks; daemon/stack_capture.h) ----

StackEvidence Supervisor::Impl::CaptureStacks(const std::vector<RankView>& views) {
  StackCaptureConfig config;
  config.tool = job_.supervise.stack_tool;
  config.timeout_s = job_.supervise.stack_timeout_s;
  if (config.timeout_s <= 0) return {};
  const int generation = ranks_.generation();
  const auto progress_path_of = [this, generation](int rank) {
    return ProgressRecordPath(job_.supervise.progress_dir, recorder_->run_id(), recorder_->attempt(), generation, rank);
  };
  spdlog::info("capturing the hung ranks' stacks (limit {} s)", config.timeout_s);
  StackEvidence stacks = CaptureHungStacks(views, alloc_.this_node, progress_path_of, config);
  spdlog::info("stacks captured in {:.2f} s: {} distinct, {} note(s)", stacks.took_s, stacks.groups.size(),
               stacks.notes.size());
  return stacks;
}

// ---- runctl from other nodes (daemon/control_remote.h) ----

void Supervisor::Impl::StartRemoteControl() {
  ControlEndpoint ep;
  ep.host = host();
  ep.addr = alloc_.self().addr;
  ep.pid = getpid();
  ep.run_id = recorder_->run_id();
  const std::string munge = MungeSocket();
  // Without munged nothing could prove who asks over TCP: runctl then works on this node only.
  Result<std::string> probe = MungeEncode(munge, "holdfastd " + ep.run_id);
  if (!probe.ok()) {
    ep.off = "on " + host() + ", " + probe.status().message();
  } else if (Result<uint16_t> port = control_->ListenTcp(ep.addr, opts_.control_port, munge); port.ok()) {
    ep.port = *port;
  } else {
    ep.off = port.status().message();
  }
  if (ep.port != 0) {
    spdlog::info("runctl on other nodes reaches this run at {} (MUNGE-authenticated)", ep.Where());
  } else {
    spdlog::info("runctl works on this node only: {}", ep.off);
  }
  const std::string path = ControlEndpointPath(opts_.run_dir);
  if (Status s = WriteFileAtomically(path, EncodeControlEndpoint(ep), 0644); !s.ok()) {
    spdlog::warn("{}: runctl on other nodes will not find this run", s.ToString());
    return;
  }
  endpoint_written_ = true;
}

void Supervisor::Impl::WithdrawControlEndpoint() {
  if (!endpoint_written_) return;
  endpoint_written_ = false;
  Result<ControlEndpoint> ep = ReadControlEndpoint(opts_.run_dir);
  if (ep.ok() && ep->pid == getpid()) ::unlink(ControlEndpointPath(opts_.run_dir).c_str());
}

// ---- followers ----

Status Supervisor::Impl::StartCluster() {
  std::weak_ptr<Impl> weak = shared_from_this();
  LeaderLink::Handlers h;
  h.on_hello = [weak](const HelloMsg& hello) {
    auto self = weak.lock();
    return self ? self->OnHello(hello) : std::string("the leader is going away");
  };
  h.on_message = [weak](int node, ClusterMessage msg) {
    if (auto self = weak.lock()) self->OnFollowerMessage(node, std::move(msg));
  };
  h.on_lost = [weak](int node, const std::string& why) {
    if (auto self = weak.lock()) self->OnFollowerLost(node, why);
  };
  link_ = std::make_shared<LeaderLink>(&io_, scheduler_, clock_, *key_, recorder_->run_id(), std::move(h),
                                       job_.supervise.node_timeout_s);
  HF_RETURN_IF_ERROR(link_->Listen(alloc_.self().addr, opts_.cluster_port));
  spdlog::info("leading {} nodes", alloc_.nodes.size());
  join_timer_->Arm(job_.supervise.startup_timeout_s, [weak] {
    if (auto self = weak.lock()) self->OnJoinTimeout();
  });
  return Status::Ok();
}

void Supervisor::Impl::OnJoinTimeout() {
  if (finished_ || controller_->state() != RunController::State::kIdle) return;
  for (int n = 1; n < static_cast<int>(alloc_.nodes.size()); ++n) {
    if (link_->has(n)) continue;
    controller_->OnNodeLost(members_.HostOf(n), members_.RanksOf(n),
                            std::to_string(link_->joined()) + " of " + std::to_string(alloc_.nodes.size() - 1) +
                                " follower daemons joined within startup_timeout_s");
    return;
  }
}

std::string Supervisor::Impl::OnHello(const HelloMsg& hello) {
  const std::string refuse =
      members_.CheckHello(hello, finished_, controller_->state() != RunController::State::kIdle);
  if (!refuse.empty()) return refuse;
  const int n = hello.node;
  const std::string& h = members_.HostOf(n);
  spdlog::info("node {} ({}) joined", n, h);
  members_.Join(n, clock_->MonotonicNs());
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
      self->join_timer_->Cancel();
      self->controller_->Launch();
    }
  });
  return "";
}

void Supervisor::Impl::OnFollowerMessage(int node, ClusterMessage msg) {
  if (finished_) return;
  members_.Heard(node, clock_->MonotonicNs());
  const std::string& h = members_.HostOf(node);
  if (const auto* health = std::get_if<HealthMsg>(&msg)) {
    auto results = health::ResultsFromReportJson(health->report_json);
    if (results.ok()) {
      RecordHealth(*results, h);
      controller_->OnHealth(health_.Decide(*results), h, "periodic");
    }
  } else if (auto* p = std::get_if<ProgressMsg>(&msg)) {
    if (p->generation == controller_->generation()) members_.SetViews(node, std::move(p->ranks));
  } else if (auto* x = std::get_if<RankExitMsg>(&msg)) {
    if (x->generation != controller_->generation()) return;  // from a generation that is over
    // The first exit of a follower's poll carries its views after all of that
    // poll's exits; the others carry none (docs/cluster-protocol.md).
    if (!x->ranks.empty()) members_.SetViews(node, std::move(x->ranks));
    // Exits that arrive together (a stop of every node's ranks) are judged
    // together, against one merge of the views, once the messages already
    // read are handled: a merge per exit is ranks x ranks at a stop.
    pending_exits_.emplace_back(x->generation,
                                RankExit{x->rank, x->wstatus, std::move(x->exec_error), std::move(x->log_tail)});
    if (exits_posted_) return;
    exits_posted_ = true;
    io_.post([weak = std::weak_ptr<Impl>(shared_from_this())] {
      if (auto self = weak.lock()) self->FlushFollowerExits();
    });
  }
}

void Supervisor::Impl::FlushFollowerExits() {
  exits_posted_ = false;
  std::vector<RankExit> exits;
  for (auto& [generation, e] : pending_exits_) {
    if (generation == controller_->generation()) exits.push_back(std::move(e));  // others: a generation that is over
  }
  pending_exits_.clear();
  if (!finished_ && !exits.empty()) controller_->OnRankExits(exits, Views());
}

void Supervisor::Impl::OnFollowerLost(int node, const std::string& why) {
  const std::vector<int> ranks = members_.RanksOf(node);
  const ClusterMembership::LostNode lost = members_.Lose(node);
  if (finished_) return;
  const std::string& h = members_.HostOf(node);
  switch (lost) {
    case ClusterMembership::LostNode::kActive:
      controller_->OnNodeLost(h, ranks, why);
      return;
    case ClusterMembership::LostNode::kSpare:
      spdlog::warn("node {} ({}) is gone ({}); it was a spare", node, h, why);
      recorder_->Record(event_kind::kNodeLost, h + "'s holdfastd is gone (" + why + "); it was a spare",
                        "none: no rank ran there; " + std::to_string(members_.spares().size()) + " spare(s) left",
                        {}, AtHost(h));
      return;
    case ClusterMembership::LostNode::kFormer:
      spdlog::warn("node {} ({}) is gone ({}); the run had left it", node, h, why);
      return;
  }
}

void Supervisor::Impl::Broadcast(const ClusterMessage& msg) {
  if (link_) link_->Broadcast(msg);
}

// ---- the control socket's target (ControlHandler decides) ----

RunStatus Supervisor::Impl::BuildStatus() const {
  const int64_t now = clock_->MonotonicNs();
  RunStatus st = BuildRunStatus(*controller_, *recorder_, job_, Views(), static_cast<double>(now - started_ns_) / 1e9,
                                now);
  st.roles = roles_->Statuses(now);
  return st;
}

int64_t Supervisor::Impl::RequestCheckpoint() {
  const int64_t step = NewestStep(Views(), 0);
  ranks_.SignalAll(SIGUSR2);  // the trainer saves after the step all ranks agree on
  Broadcast(SignalMsg{controller_->generation(), SIGUSR2});
  return step;
}

void Supervisor::Impl::RequestStop(const std::string& why) { controller_->OnStopRequest(IncidentKind::kStopRequest, why); }

// ---- metrics and health ----

MetricsSnapshot Supervisor::Impl::MetricsFacts() const {
  MetricsSnapshot s;
  s.now_ns = clock_->MonotonicNs();
  s.run_id = recorder_->run_id();
  s.state = controller_->state_name();
  s.attempt = recorder_->attempt();
  s.generation = std::max(0, controller_->generation());
  s.world_size = members_.world();
  s.restarts = controller_->restarts_used();
  s.restart_budget = job_.supervise.restart_budget;
  for (const auto& [kind, n] : recorder_->incident_counts()) s.incidents[kind] = n;
  s.checkpoint_step = recorder_->last_committed_step();
  return s;
}

void Supervisor::Impl::UpdateMetrics() {
  if (metrics_.enabled()) metrics_.Update(MetricsFacts(), Views());
}

void Supervisor::Impl::RecordHealth(const std::vector<health::CheckResult>& results, const std::string& host) {
  recorder_->RecordHealth(results, host);
  metrics_.RecordHealth(results, host);
}

}  // namespace holdfast
