// Supervisor::Impl, the leading holdfastd's wiring (daemon/supervisor.h),
// shared by its source files (supervisor_memory.cc: memory snapshots across
// nodes): supervisor.cc (starting, the RunActions the
// RunController's decisions are carried out by, the poll loop) and
// supervisor_cluster.cc (the followers, the control socket's target, the
// metrics' facts). The decisions live elsewhere: the run's in RunController,
// the nodes' in ClusterMembership, the control socket's in ControlHandler.
//
// Every timer comes from the injected TimerFactory and every reading of the
// time from the injected TimeSource, so a whole Supervisor runs on a fake
// clock (daemon/supervisor_test.cc).
//
// Thread-safety: loop thread only; every field is the loop thread's.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio.hpp>

#include "common/peer_auth.h"
#include "common/status.h"
#include "common/tcp_store_server.h"
#include "common/time_source.h"
#include "common/timer.h"
#include "daemon/cluster_membership.h"
#include "daemon/cluster_protocol.h"
#include "daemon/control_handler.h"
#include "daemon/control_server.h"
#include "daemon/daemon_signals.h"
#include "daemon/exit_codes.h"
#include "daemon/health_watch.h"
#include "daemon/leader_link.h"
#include "daemon/memory_restore.h"
#include "daemon/metrics_reporter.h"
#include "daemon/rank_group.h"
#include "daemon/role_supervisor.h"
#include "daemon/run_controller.h"
#include "daemon/run_recorder.h"
#include "daemon/snapshot_dir.h"
#include "daemon/supervisor.h"

namespace holdfast {

class Supervisor::Impl : public RunActions, public ControlTarget, public std::enable_shared_from_this<Supervisor::Impl> {
 public:
  Impl(boost::asio::io_context* io, SupervisorOptions options, Scheduler* scheduler, const TimeSource* clock,
       TimerFactory* timers);

  Status Start();
  int exit_code() const { return exit_code_; }

  // ---- RunActions (supervisor.cc) ----
  Status LaunchGeneration(int generation, int64_t resume_step) override;
  void TerminateRanks(const std::string& why, double grace_s) override;
  void KillRanks(const std::vector<int>& ranks) override;
  int64_t NewestMemorySnapshot() const override;  // supervisor.cc
  std::string MemorySnapshotNote() const override {
    return restore_ && restore_->last_plan() ? restore_->last_plan()->note : "";
  }
  void ArmTimer(ControllerTimer timer, double seconds) override;
  void CancelTimer(ControllerTimer timer) override;
  Timer& TimerOf(ControllerTimer timer);
  Status Drain(const std::string& host, const std::string& reason) override { return scheduler_->Drain(host, reason); }
  Status Requeue(const std::vector<std::string>& exclude, const std::string& reason) override {
    return scheduler_->Requeue(recorder_->run_id(), exclude, reason);
  }
  std::string RequeueNote() const override { return scheduler_->last_requeue(); }
  std::vector<std::string> ActiveHosts() const override { return members_.HostsOf(members_.active()); }
  std::vector<std::string> SpareHosts() const override { return members_.HostsOf(members_.spares()); }
  Result<int> Reshape(const std::vector<std::string>& leaving, const std::vector<std::string>& joining) override;
  int BlameRolesForStall(double stalled_s, double timeout_s, const std::string& learner_doing) override {
    return roles_->BlameLearnerStall(stalled_s, timeout_s, learner_doing);
  }
  StackEvidence CaptureStacks(const std::vector<RankView>& views) override;  // supervisor_cluster.cc
  void Finish(int code) override;

  // ---- ControlTarget (supervisor_cluster.cc) ----
  const std::string& run_id() const override { return recorder_->run_id(); }
  RunStatus BuildStatus() const override;
  bool RanksRunning() const override { return controller_->state() == RunController::State::kRunning; }
  int64_t RequestCheckpoint() override;
  void RequestStop(const std::string& why) override;

 private:
  const std::string& host() const { return alloc_.self().host; }
  // ---- start and the loop (supervisor.cc) ----
  Status StartRankSide();  // lineage, the controller, roles, the control socket, metrics, signals
  Status StartRoles(const GenerationSpec& spec, int generation);
  // LaunchGeneration's work; LaunchGeneration defers it until a memory
  // restore's gather is done on every node (memory_restore.h).
  Status LaunchNow(int generation, int64_t resume_step);
  void StartMemoryReplicas();  // supervisor_memory.cc, like NewestMemorySnapshot and LaunchGeneration
  void StopMemoryReplicas();   // ... and removes the snapshot folder
  void ArmPoll();
  void Tick();
  void Reap();
  void OnSignal(int sig);
  std::vector<RankView> Views() const;
  // After Finish: the role processes get TERM, then KILL after term_grace_s;
  // the loop ends once they are gone.
  void StopRolesThenEnd(bool killed, int64_t deadline_ns);
  void EndLoop();
  void PostRoleIncident(const RoleIncident& incident);
  // ---- followers (supervisor_cluster.cc) ----
  Status StartCluster();
  // runctl from other nodes: the control protocol over TCP where munged runs,
  // and RUN_DIR/control-endpoint.json saying where (or why not).
  void StartRemoteControl();
  void WithdrawControlEndpoint();
  void OnJoinTimeout();
  std::string OnHello(const HelloMsg& hello);  // "" accepts
  void OnFollowerMessage(int node, ClusterMessage msg);
  // Judges the followers' exits read since the last flush (of the generation running now).
  void FlushFollowerExits();
  void OnFollowerLost(int node, const std::string& why);
  void Broadcast(const ClusterMessage& msg);
  // ---- metrics and health (supervisor_cluster.cc) ----
  MetricsSnapshot MetricsFacts() const;  // the run-level fields of a snapshot
  void UpdateMetrics();
  void RecordHealth(const std::vector<health::CheckResult>& results, const std::string& host);

  boost::asio::io_context& io_;
  // Followers' rank exits read and not yet judged, with their generations.
  std::vector<std::pair<int, RankExit>> pending_exits_;
  bool exits_posted_ = false;
  SupervisorOptions opts_;
  const JobConfig& job_;
  const Allocation& alloc_;
  Scheduler* scheduler_;     // not owned
  const TimeSource* clock_;  // not owned
  TimerFactory* timers_;     // not owned
  DaemonSignals signals_;
  std::unique_ptr<Timer> poll_timer_, kill_timer_, restart_timer_, preempt_timer_, join_timer_, roles_timer_;
  std::shared_ptr<LeaderLink> link_;  // several nodes only
  std::optional<RunKey> key_;  // RUN_DIR/cluster.key, once Start has read or made it
  std::unique_ptr<AsioTcpStoreServer> store_;
  std::shared_ptr<ControlServer> control_;
  bool endpoint_written_ = false;  // RUN_DIR/control-endpoint.json is this daemon's
  ControlHandler control_handler_;
  ClusterMembership members_;  // active and spare nodes, the plan, the followers' views
  RankGroup ranks_;
  std::unique_ptr<SnapshotDir> snapshots_;  // this node's memory snapshot folder; null when the tier is off
  std::unique_ptr<ReplicaService> replicas_;  // several nodes with the tier: its peer replicas; else null
  std::unique_ptr<MemoryRestore> restore_;    // with replicas_: the restore across nodes
  HealthWatch health_;
  MetricsReporter metrics_;
  std::unique_ptr<RunRecorder> recorder_;
  std::unique_ptr<RunController> controller_;
  std::unique_ptr<RoleSupervisor> roles_;  // the job's [[roles]] processes (this node: the leader)
  bool roles_started_ = false;             // the "alone" roles started with this attempt's first generation
  int64_t started_ns_ = 0;
  bool finished_ = false;
  int exit_code_ = kDaemonExitOk;
};

}  // namespace holdfast
