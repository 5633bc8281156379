#include "daemon/role_supervisor.h"

#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include <spdlog/spdlog.h>

#include "common/launch_contract.h"
#include "common/peer_auth.h"
#include "daemon/rank_group.h"
#include "daemon/triage.h"
#include "lineage/incident.h"

namespace holdfast {

std::string RoleProgressPath(const std::string& progress_dir, const std::string& run_id, int attempt,
                             const std::string& role, int index) {
  return progress_dir + "/" + ProgressRecordPrefix(run_id) + "a" + std::to_string(attempt) + "-role-" + role + "-" +
         std::to_string(index) + ".rec";
}

RoleSupervisor::RoleSupervisor(const JobConfig* job, const TimeSource* clock, RunRecorder* recorder, Hooks hooks)
    : job_(job), clock_(clock), recorder_(recorder), hooks_(std::move(hooks)) {
  for (const RoleConfig& role : job_->roles) {
    for (int i = 0; i < role.count; ++i) {
      Slot s;
      s.role = &role;
      s.index = i;
      slots_.push_back(std::move(s));
    }
  }
}

RoleSupervisor::~RoleSupervisor() = default;

const char* RoleSupervisor::StateName(State s) {
  switch (s) {
    case State::kRunning: return "running";
    case State::kRestarting: return "restarting";
    case State::kFinished: return "finished";
    case State::kFailed: return "failed";
    case State::kStopped: return "stopped";
  }
  return "?";
}

Status RoleSupervisor::StartAlone(const Context& context) {
  ctx_ = context;
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(ctx_.run_dir, ec);
  if (!ec) ctx_.run_dir = abs.lexically_normal().string();
  for (Slot& s : slots_) {
    if (s.role->restart == RoleRestart::kAlone) HF_RETURN_IF_ERROR(StartSlot(&s));
  }
  return Status::Ok();
}

Status RoleSupervisor::StartLearnerScoped(int generation) {
  generation_ = generation;
  if (stopping_) return Status::Ok();
  for (Slot& s : slots_) {
    if (s.role->restart != RoleRestart::kLearner || s.state == State::kFinished) continue;
    if (s.proc && s.proc->alive()) {
      // It outlived its generation (TERM ignored): it must not meet the new one.
      s.proc->Signal(SIGKILL);
      retired_.push_back(std::move(s.proc));
    }
    if (s.starts > 0) ++s.restarts;
    HF_RETURN_IF_ERROR(StartSlot(&s));
  }
  return Status::Ok();
}

void RoleSupervisor::SignalLearnerScoped(int sig) {
  for (Slot& s : slots_) {
    if (s.role->restart != RoleRestart::kLearner || !s.proc || !s.proc->alive()) continue;
    s.expected_exit = true;
    s.proc->Signal(sig);
    if (sig == SIGTERM) s.proc->Signal(SIGCONT);
  }
}

Status RoleSupervisor::StartSlot(Slot* slot) {
  const RoleConfig& role = *slot->role;
  RankSpawn sp;
  sp.rank = slot->index;
  sp.argv = role.command;
  sp.workdir = job_->workdir;
  sp.env = job_->env;
  for (const auto& [k, v] : role.env) sp.env[k] = v;
  sp.log_path = RoleLogPath(ctx_.run_dir, ctx_.attempt, role.name, slot->index);
  sp.progress_path =
      RoleProgressPath(job_->supervise.progress_dir, ctx_.run_id, ctx_.attempt, role.name, slot->index);
  sp.env[kEnvRole] = role.name;
  sp.env[kEnvRoleIndex] = std::to_string(slot->index);
  sp.env[kEnvRoleCount] = std::to_string(role.count);
  sp.env[kEnvProgressPath] = sp.progress_path;
  sp.env[kEnvRunId] = ctx_.run_id;
  sp.env[kEnvRunDir] = ctx_.run_dir;
  sp.env[kEnvStoreAddr] = ctx_.store_addr;
  sp.env[kEnvStoreKeyFile] = RunKeyPath(ctx_.run_dir);
  sp.env[kEnvNodeAddr] = ctx_.node_addr;
  sp.env[kEnvHost] = ctx_.host;
  sp.env[kEnvNode] = std::to_string(ctx_.node);
  if (role.restart == RoleRestart::kLearner) sp.env[kEnvGeneration] = std::to_string(generation_);
  {
    std::ofstream log(sp.log_path, std::ios::app);
    log << "holdfastd: run " << ctx_.run_id << " attempt " << ctx_.attempt << ": role " << role.name << " process "
        << slot->index << " of " << role.count << " on " << ctx_.host << " (start " << slot->starts + 1
        << ", restart = \"" << RoleRestartName(role.restart) << "\")\n";
  }
  auto proc = RankProcess::Start(sp);
  if (!proc.ok()) {
    slot->state = State::kFailed;
    Status s = proc.status();
    std::string msg = s.message();
    const std::string job_hint = "fix [job] command in job.toml";
    if (const size_t at = msg.find(job_hint); at != std::string::npos) {
      msg.replace(at, job_hint.size(), "fix the command of [[roles]] '" + role.name + "' in job.toml");
    }
    return Status(s.code(), "start role " + role.name + "[" + std::to_string(slot->index) + "]: " + msg);
  }
  slot->proc = std::move(proc).value();
  slot->state = State::kRunning;
  slot->expected_exit = false;
  slot->awaiting_exit = false;
  ++slot->starts;
  const double startup_s = job_->supervise.startup_timeout_s;
  slot->hang.emplace(role.hang_s, startup_s, clock_->MonotonicNs());
  spdlog::info("role {}[{}] started (pid {})", role.name, slot->index, slot->proc->pid());
  return Status::Ok();
}

bool RoleSupervisor::OnExit(pid_t pid, int wstatus) {
  for (auto it = retired_.begin(); it != retired_.end(); ++it) {
    if ((*it)->pid() == pid) {
      retired_.erase(it);
      return true;
    }
  }
  for (Slot& s : slots_) {
    if (!s.proc || s.proc->pid() != pid || !s.proc->alive()) continue;
    s.proc->SetExited(wstatus);
    spdlog::info("role {}[{}] (pid {}) {}", s.role->name, s.index, pid, DescribeWaitStatus(wstatus));
    if (s.state == State::kRestarting && s.awaiting_exit) {
      // Killed as hung: the incident is recorded, the restart's clock starts now.
      s.awaiting_exit = false;
      s.restart_due_ns += clock_->MonotonicNs();
      return true;
    }
    if (s.expected_exit || stopping_) {
      s.state = s.role->restart == RoleRestart::kLearner && !stopping_ ? State::kRestarting : State::kStopped;
      return true;
    }
    if (s.state == State::kRunning) Failed(&s, /*hung=*/false, wstatus, nullptr);
    return true;
  }
  return false;
}

void RoleSupervisor::OnTick() {
  if (stopping_) return;
  const int64_t now = clock_->MonotonicNs();
  for (Slot& s : slots_) {
    if (stopping_) return;  // a role's failure ended the run
    if (s.state == State::kRunning && s.proc && s.proc->alive() && !s.expected_exit && s.hang) {
      const RoleHangWatch::Verdict v = s.hang->Observe(now, s.proc->Progress());
      if (v.hung) Failed(&s, /*hung=*/true, 0, &v);
      continue;
    }
    if (s.state == State::kRestarting && s.role->restart == RoleRestart::kAlone && !s.awaiting_exit &&
        now >= s.restart_due_ns) {
      ++s.restarts;
      Status st = StartSlot(&s);
      if (!st.ok()) {
        spdlog::error("{}", st.ToString());
        RoleIncident inc;
        inc.cause = IncidentKind::kRoleFailed;
        inc.report.event = event_kind::kRoleCrash;
        inc.report.summary = st.message() + ": a restart cannot help";
        if (hooks_.learner) hooks_.learner(inc);
        return;
      }
    }
  }
}

int RoleSupervisor::BlameLearnerStall(double learner_stalled_s, double learner_timeout_s,
                                      const std::string& learner_doing) {
  if (stopping_) return 0;
  std::vector<RoleStallObservation> seen;
  for (const Slot& s : slots_) {
    RoleStallObservation o;
    o.running = s.state == State::kRunning && s.proc && s.proc->alive() && !s.expected_exit;
    if (o.running) {
      o.stopped = IsStopped(s.proc->State());
      if (s.hang) {
        o.attached = s.hang->last().attached;
        o.silent_s = s.hang->last().silent_s;
      }
    }
    seen.push_back(o);
  }
  const std::vector<size_t> culprits = BlameRolesForLearnerStall(seen, learner_stalled_s);
  LearnerStall stall{learner_stalled_s, learner_doing};
  for (size_t i : culprits) {
    Slot& s = slots_[i];
    RoleHangWatch::Verdict v = s.hang ? s.hang->last() : RoleHangWatch::Verdict{};
    v.hung = true;
    v.timeout_s = learner_timeout_s;  // the allowance that ran out was the learner's
    Failed(&s, /*hung=*/true, 0, &v, &stall);
  }
  return static_cast<int>(culprits.size());
}

RankView RoleSupervisor::ViewOf(const Slot& s) const {
  RankView v;
  v.rank = s.index;
  v.node = ctx_.node;
  v.host = ctx_.host;
  if (s.proc) {
    v.pid = s.proc->pid();
    v.alive = s.proc->alive();
    v.proc_state = s.proc->State();
    v.progress = s.proc->Progress();
  } else {
    v.alive = false;
  }
  return v;
}

void RoleSupervisor::Failed(Slot* s, bool hung, int wstatus, const RoleHangWatch::Verdict* verdict,
                            const LearnerStall* stall) {
  const RoleConfig& role = *s->role;
  const int64_t now = clock_->MonotonicNs();
  // Progress: the process completed a step before it failed (then no backoff).
  const RankProgress p = s->proc ? s->proc->Progress() : RankProgress{};
  const bool progressed = p.attached() && p.step > 0;
  s->failures_without_progress = progressed ? 0 : s->failures_without_progress + 1;

  RoleTrouble t;
  t.role = role.name;
  t.index = s->index;
  t.hung = hung;
  t.wstatus = wstatus;
  if (verdict != nullptr) {
    t.silent_s = verdict->silent_s;
    t.timeout_s = verdict->timeout_s;
    t.attached = verdict->attached;
  }
  if (stall != nullptr) {
    t.learner_waited_s = stall->waited_s;
    t.learner_doing = stall->doing;
  }
  if (s->proc) t.log_tail = s->proc->LogTail(20);
  const TriageReport triage = TriageRole(now, ViewOf(*s), t);

  RoleFailureInput in;
  in.restart = role.restart;
  in.hung = hung;
  in.wstatus = wstatus;
  in.restarts_used = s->restarts;
  in.restart_budget = role.restart_budget;
  in.failures_without_progress = s->failures_without_progress;
  in.backoff_initial_s = job_->supervise.backoff_initial_s;
  in.backoff_max_s = job_->supervise.backoff_max_s;
  const RoleDecision d = DecideRoleFailure(in);

  if (hung && s->proc && s->proc->alive()) {
    s->proc->Signal(SIGKILL);  // a hung process acts on nothing else (a stopped one included)
    s->awaiting_exit = true;
  }
  const std::string who = role.name + "[" + std::to_string(s->index) + "]";
  switch (d.action) {
    case RoleAction::kFinished:
      s->state = State::kFinished;
      spdlog::info("role {} finished", who);
      return;
    case RoleAction::kRestartAlone: {
      s->state = State::kRestarting;
      // After a kill, the backoff counts from the exit (OnExit adds the time then).
      s->restart_due_ns = static_cast<int64_t>(d.backoff_s * 1e9) + (s->awaiting_exit ? 0 : now);
      const std::string action = std::string(hung ? "killed it (SIGKILL); " : "") + d.reason +
                                 "; the learner and the other role processes keep running";
      spdlog::warn("{}: {} -> {}", triage.event, triage.summary, action);
      recorder_->Record(triage.event, triage.summary, action, triage.evidence, AtHost(ctx_.host));
      return;
    }
    case RoleAction::kRestartLearner: {
      s->state = State::kRestarting;
      s->expected_exit = true;  // its exit (after a kill) is part of this incident
      RoleIncident inc;
      inc.cause = hung ? IncidentKind::kHang : IncidentKind::kCrash;
      inc.report = triage;
      if (hooks_.learner) hooks_.learner(inc);
      return;
    }
    case RoleAction::kStopRun: {
      s->state = State::kFailed;
      s->expected_exit = true;
      RoleIncident inc;
      inc.cause = IncidentKind::kRoleFailed;
      inc.report = triage;
      if (d.budget_exhausted) {
        inc.report.event = event_kind::kBudgetExhausted;
        inc.report.summary = "role " + who + " spent its restart budget of " + std::to_string(role.restart_budget) +
                             "; last: " + triage.summary;
      } else {
        inc.report.summary = triage.summary + " (" + d.reason.substr(d.reason.find(": ") + 2) + ")";
      }
      inc.runbook_of = event_kind::kRoleCrash;  // a role's budget: the roles guide, not the learner's
      if (hooks_.learner) hooks_.learner(inc);
      return;
    }
  }
}

void RoleSupervisor::StopAll(int sig) {
  stopping_ = true;
  for (Slot& s : slots_) {
    if (s.state == State::kRestarting && !(s.proc && s.proc->alive())) s.state = State::kStopped;
    if (!s.proc || !s.proc->alive()) continue;
    s.expected_exit = true;
    s.proc->Signal(sig);
    s.proc->Signal(SIGCONT);  // a stopped process must be able to act on it
  }
  for (auto& r : retired_) {
    r->Signal(sig);
    r->Signal(SIGCONT);
  }
}

bool RoleSupervisor::AnyAlive() const {
  for (const Slot& s : slots_) {
    if (s.proc && s.proc->alive()) return true;
  }
  return !retired_.empty();
}

void RoleSupervisor::ReapExited() {
  std::vector<pid_t> pids;
  for (const Slot& s : slots_) {
    if (s.proc && s.proc->alive()) pids.push_back(s.proc->pid());
  }
  for (const auto& r : retired_) pids.push_back(r->pid());
  for (pid_t pid : pids) {
    int wstatus = 0;
    pid_t got;
    do {
      got = ::waitpid(pid, &wstatus, WNOHANG);
    } while (got < 0 && errno == EINTR);
    if (got == pid) {
      OnExit(pid, wstatus);
    } else if (got < 0 && errno == ECHILD) {
      OnExit(pid, SIGKILL);  // reaped elsewhere already: gone either way
    }
  }
}

std::vector<RoleStatus> RoleSupervisor::Statuses(int64_t now_ns) const {
  std::vector<RoleStatus> out;
  for (const Slot& s : slots_) {
    RoleStatus r;
    r.role = s.role->name;
    r.index = s.index;
    r.restart = RoleRestartName(s.role->restart);
    r.restarts = s.restarts;
    r.state = StateName(s.state);
    if (s.proc) {
      r.pid = s.proc->pid();
      if (s.state == State::kRunning && s.proc->alive() && s.proc->State() == ProcState::kStopped) {
        r.state = "stopped (SIGSTOP)";
      }
      const RankProgress p = s.proc->Progress();
      if (p.attached()) {
        r.step = p.step;
        if (p.heartbeat_ns > 0) r.heartbeat_age_s = static_cast<double>(now_ns - p.heartbeat_ns) / 1e9;
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace holdfast
