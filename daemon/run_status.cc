#include "daemon/run_status.h"

#include <algorithm>
#include <map>
#include <optional>

namespace holdfast {

RunStatus BuildRunStatus(const RunController& controller, const RunRecorder& recorder, const JobConfig& job,
                         const std::vector<RankView>& views, double uptime_s, int64_t now_ns) {
  RunStatus st;
  st.run_id = recorder.run_id();
  st.name = job.name;
  st.state = controller.state_name();
  st.attempt = recorder.attempt();
  st.generation = controller.generation();
  st.world_size = controller.world_size();
  st.restarts_used = controller.restarts_used();
  st.restart_budget = job.supervise.restart_budget;
  if (recorder.last_committed_step() >= 0) st.last_checkpoint_step = recorder.last_committed_step();
  if (const std::optional<GenerationRestore>& r = recorder.restore()) {
    st.restored_step = r->step;
    st.restore_tier = r->tier;
  }
  st.uptime_s = uptime_s;
  const Allocation& alloc = recorder.allocation();
  st.scheduler = SchedulerKindName(alloc.scheduler);
  st.job_id = alloc.job_id;
  st.restart_count = alloc.restart_count;
  st.hosts = alloc.hosts();
  // The mesh the ranks report (model parallelism only): each rank's place in it.
  const std::optional<DeviceMesh> mesh = ModelParallelMesh(views);
  if (mesh) st.mesh = mesh->Layout();
  std::map<int, NodeStatus> nodes;
  for (const RankView& v : views) {
    NodeStatus& node = nodes[v.node];
    node.node = v.node;
    node.host = v.host;
    RankStatus rs;
    rs.rank = v.rank;
    rs.pid = v.pid;
    rs.report_age_s = v.report_age_s;
    if (mesh) rs.place = mesh->Describe(v.rank);
    auto ex = controller.exits().find(v.rank);
    // A stopped rank says by what: SIGSTOP (or SIGTSTP ...) or a tracer (gdb, a stack capture).
    const char* stopped = v.proc_state == ProcState::kTraced ? "stopped (traced)" : "stopped (SIGSTOP)";
    rs.state = v.alive ? (IsStopped(v.proc_state) ? stopped : "running")
                       : (ex != controller.exits().end() ? DescribeWaitStatus(ex->second) : "exited");
    const RankProgress& p = v.progress;
    if (p.valid) {
      rs.step = p.step;
      rs.phase = p.attached() ? PhaseName(p.phase) : "unknown (no progress record written)";
      rs.heartbeat_age_s = p.heartbeat_ns > 0 ? static_cast<double>(now_ns - p.heartbeat_ns) / 1e9 : 0;
      if (p.last_step_ns > 0) rs.last_step_ms = static_cast<double>(p.last_step_ns) / 1e6;
      if (p.waiting_on != 0) rs.waiting_on = p.waiting_on;
      // With model parallelism each group numbers its own collectives: say
      // which one (without, the global number says it all, as before).
      for (const CollectiveRecord& c : p.ring) {
        if (!mesh || p.waiting_on == 0 || c.seq != p.waiting_on) continue;
        rs.waiting_kind = CollectiveKindName(c.kind);
        if (c.label.group != CollectiveGroup::kUnknown && c.group_seq != 0) {
          rs.waiting_group = CollectiveGroupName(c.label.group);
          rs.waiting_group_seq = c.group_seq;
        }
      }
      rs.collectives_issued = p.collectives_issued;
      if (auto pace = controller.stragglers().Pace(v.rank)) {
        rs.steps_per_s = pace->steps_per_s;
        rs.step_ms_p50 = pace->step_ms_p50;
        rs.step_ms_p99 = pace->step_ms_p99;
        rs.compute_ms_p50 = pace->compute_ms_p50;
        rs.wait_ms_p50 = pace->wait_ms_p50;
      }
    }
    node.ranks.push_back(rs);
  }
  st.step = NewestStep(views, st.step);
  for (auto& [n, node] : nodes) st.nodes.push_back(node);
  st.last_incident = recorder.last_incident();
  if (const auto& slow = controller.stragglers().Slowest()) {
    st.slowest_rank = slow->rank;
    st.slowest_rank_note = slow->note;
  }
  return st;
}

}  // namespace holdfast
