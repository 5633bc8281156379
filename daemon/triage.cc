#include "daemon/triage.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "daemon/triage_internal.h"
#include "lineage/incident.h"

namespace holdfast {
namespace triage_internal {

double Seconds(int64_t ns) { return static_cast<double>(ns) / 1e9; }

std::string Fixed1(double v) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  os << v;
  return os.str();
}

// The step a rank works on, one past the steps it completed, for messages. A
// record is the job's to write: INT64_MAX completed steps must not overflow.
std::string StepAfter(int64_t completed) {
  if (completed == std::numeric_limits<int64_t>::max()) return "after " + std::to_string(completed);
  return std::to_string(completed + 1);
}

std::string Doing(int64_t now_ns, const RankView& r, const DeviceMesh* mesh) {
  std::string s;
  const RankProgress& p = r.progress;
  if (!p.valid) {
    s = "has not reported progress yet";
  } else {
    const double age = p.phase_started_ns > 0 ? Seconds(now_ns - p.phase_started_ns) : 0;
    // Inside a collective, name it as the ring does: "allreduce #15"; with a
    // mesh by its group and number in it, a send/recv by its peer and contents.
    std::string where = PhaseName(p.phase);
    if (p.in_collective()) {
      const CollectiveRecord* c = p.waited();
      where = mesh != nullptr && c != nullptr
                  ? CollectiveWords(*c, r.rank, mesh)
                  : std::string(CollectiveKindName(p.collective_kind)) + " #" + std::to_string(p.waiting_on);
    } else if (p.phase == Phase::kCollective && !p.ring.empty()) {
      // Its last wait ended and it has not said what it does since (the
      // phase stays until the next one is set): working after that collective.
      where = "compute after its last collective (" + CollectiveWords(p.ring.back(), r.rank, mesh) +
              (p.ring.back().completed() ? ", done)" : ")");
    }
    s = "in " + where + " of step " + StepAfter(p.step) + " for " + Fixed1(age) + " s";
  }
  if (const char* w = ProcStateWords(r.proc_state)) s += ", " + std::string(w);
  return s;
}

}  // namespace triage_internal

namespace {

using triage_internal::Doing;
using triage_internal::Fixed1;
using triage_internal::Seconds;
using triage_internal::StepAfter;

constexpr size_t kHistory = 200;

}  // namespace

RankEvidence RankEvidenceOf(int64_t now_ns, const RankView& r) {
  const RankProgress& p = r.progress;
  RankEvidence e;
  e.rank = r.rank;
  e.node = r.node;
  e.host = r.host;
  e.pid = r.pid;
  e.alive = r.alive;
  e.proc_state = std::string(1, ProcStateLetter(r.proc_state));
  e.record_valid = p.valid;
  e.record_torn = p.torn;
  if (p.valid) {
    e.step = p.step;
    e.phase = PhaseName(p.phase);
    e.phase_age_s = p.phase_started_ns > 0 ? Seconds(now_ns - p.phase_started_ns) : 0.0;
    e.heartbeat_age_s = p.heartbeat_ns > 0 ? Seconds(now_ns - p.heartbeat_ns) : 0.0;
    e.collectives_issued = p.collectives_issued;
    e.collectives_done = p.collectives_done;
    e.waiting_on = p.waiting_on;
    e.last_step_ms = static_cast<double>(p.last_step_ns) / 1e6;
    e.checkpoint_step = p.checkpoint_step;
    for (const CollectiveRecord& c : p.ring) {
      e.ring.push_back(CollectiveEvidence{c.seq, CollectiveKindName(c.kind), c.bytes, c.completed()});
    }
  }
  return e;
}

void HangDetector::StartGeneration(int64_t now_ns, int world_size) {
  last_step_.assign(world_size, -1);
  last_progress_ns_.assign(world_size, now_ns);
  stepped_.assign(world_size, false);
  stopped_since_ns_.assign(world_size, 0);
}

void HangDetector::Excuse(int64_t now_ns) { std::fill(last_progress_ns_.begin(), last_progress_ns_.end(), now_ns); }

HangDetector::Verdict HangDetector::Observe(int64_t now_ns, const std::vector<RankView>& ranks) {
  Verdict v;
  bool any_writer = false;
  for (const RankView& r : ranks) any_writer = any_writer || r.progress.attached();
  bool any_checkpoint = false, any_eval = false, all_stepped = true;
  int64_t oldest = now_ns;
  for (const RankView& r : ranks) {
    if (r.rank < 0 || r.rank >= static_cast<int>(last_step_.size())) continue;
    if (r.progress.valid) {
      const RankProgress& p = r.progress;
      if (last_step_[r.rank] < 0) {
        last_step_[r.rank] = p.step;  // the step this generation starts from
      } else if (p.step > last_step_[r.rank]) {
        if (r.rank == 0 && stepped_[0] && p.last_step_ns > 0) {
          // Step times from rank 0: in data parallel every rank steps together.
          step_seconds_.push_back(Seconds(p.last_step_ns));
          if (step_seconds_.size() > kHistory) step_seconds_.pop_front();
        }
        last_step_[r.rank] = p.step;
        // When the rank stepped: its heartbeat in the view that shows the step
        // (written at or after the step's end, in this machine's clock), not
        // when the view arrived. A follower reports every supervise.report_ms:
        // timing from arrival would make its ranks' stalls look that much longer.
        last_progress_ns_[r.rank] = p.heartbeat_ns > 0 && p.heartbeat_ns < now_ns ? p.heartbeat_ns : now_ns;
        stepped_[r.rank] = true;
      }
      const Phase ph = p.phase;
      // A stopped process gets no allowance for what it claims to be doing.
      const bool stopped = IsStopped(r.proc_state);
      any_checkpoint = any_checkpoint || (!stopped && (ph == Phase::kCheckpoint || ph == Phase::kStarting));
      any_eval = any_eval || (!stopped && ph == Phase::kEval);
    }
    all_stepped = all_stepped && stepped_[r.rank];
    oldest = std::min(oldest, last_progress_ns_[r.rank]);
  }
  v.stalled_s = Seconds(now_ns - oldest);
  if (!all_stepped) {
    // The first step of a generation includes start-up, rendezvous, restore.
    v.allowance = "startup";
    v.timeout_s = config_.startup_timeout_s;
  } else {
    v.allowance = "step";
    v.timeout_s = std::max(config_.hang_min_s, config_.hang_factor * P99StepSeconds());
    if (any_checkpoint) {
      v.allowance = "checkpoint";
      v.timeout_s = std::max(v.timeout_s, config_.checkpoint_allowance_s);
    }
    if (any_eval) {
      v.allowance = "eval";
      v.timeout_s = std::max(v.timeout_s, config_.eval_allowance_s);
    }
  }
  v.hung = v.stalled_s > v.timeout_s;
  if (ObserveStopped(now_ns, ranks, &v)) return v;
  if (!any_writer) {
    // Nobody writes progress (a job without the progress module): a step count
    // that never moves says nothing, so no hang is declared, on-call is told
    // that progress is unknown, and crashes are still handled.
    v.hung = false;
    v.progress_known = false;
    v.allowance = "none";
    v.timeout_s = 0;
  }
  return v;
}

// A rank in job-control stop runs no code at all: no allowance (a step, a
// checkpoint, start-up) can end with it making progress, so waiting one out
// only costs the run. A tracer's stop (gdb, strace, py-spy: t) is someone
// looking at the rank on purpose and gets the usual allowance. Judged with or
// without a progress record: the process state is the evidence.
bool HangDetector::ObserveStopped(int64_t now_ns, const std::vector<RankView>& ranks, Verdict* v) {
  if (config_.stopped_hang_s <= 0) return false;
  double longest_s = 0;
  std::vector<int> stopped;
  for (const RankView& r : ranks) {
    if (r.rank < 0 || r.rank >= static_cast<int>(stopped_since_ns_.size())) continue;
    int64_t& since = stopped_since_ns_[r.rank];
    if (!r.alive || r.proc_state != ProcState::kStopped) {
      since = 0;
      continue;
    }
    if (since == 0) since = now_ns;
    const double for_s = Seconds(now_ns - since);
    if (for_s >= config_.stopped_hang_s) {
      stopped.push_back(r.rank);
      longest_s = std::max(longest_s, for_s);
    }
  }
  if (stopped.empty()) return false;  // (stopped wins over a stall past its allowance: it names the culprit)
  v->hung = true;
  v->progress_known = true;
  v->allowance = "stopped";
  v->timeout_s = config_.stopped_hang_s;
  v->stalled_s = std::max(v->stalled_s, longest_s);
  v->stopped = std::move(stopped);
  return true;
}

double HangDetector::P99StepSeconds() const {
  if (step_seconds_.empty()) return 0;
  std::vector<double> sorted(step_seconds_.begin(), step_seconds_.end());
  std::sort(sorted.begin(), sorted.end());
  const size_t idx = static_cast<size_t>(std::ceil(0.99 * static_cast<double>(sorted.size()))) - 1;
  return sorted[std::min(idx, sorted.size() - 1)];
}

std::string RankList(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

std::string DescribeWaitStatus(int wstatus) {
  if (WIFEXITED(wstatus)) return "exited with code " + std::to_string(WEXITSTATUS(wstatus));
  if (WIFSIGNALED(wstatus)) {
    const int sig = WTERMSIG(wstatus);
    const char* abbrev = sigabbrev_np(sig);
    return "killed by signal " + std::to_string(sig) + " (SIG" + std::string(abbrev ? abbrev : "?") + ")";
  }
  return "ended";
}

// A follower's report older than this (and than half the stall) marks its node silent.
constexpr double kSilentNodeMinS = 2.0;

namespace {

// Nodes that sent nothing for much of the stall: their ranks are the culprits.
void BlameSilentNodes(int64_t now_ns, const std::vector<RankView>& ranks, const std::vector<int>& silent,
                      const std::vector<std::string>& silent_hosts, double silent_s, uint64_t w,
                      const std::string& kind, TriageReport* report) {
  TriageReport& inc = *report;
  inc.culprits = silent;
  std::string hosts;
  for (const std::string& h : silent_hosts) hosts += (hosts.empty() ? "" : ", ") + h;
  std::string line = hosts + (silent_hosts.size() == 1 ? " has" : " have") + " sent nothing for " +
                     Fixed1(silent_s) + " s (cut off from the network, or its holdfastd is stuck)";
  for (const RankView& r : ranks) {
    if (std::find(silent.begin(), silent.end(), r.rank) != silent.end()) {
      line += "; rank " + std::to_string(r.rank) + " last reported " + Doing(now_ns, r);
    }
  }
  std::vector<int> others;
  for (const RankView& r : ranks) {
    if (std::find(silent.begin(), silent.end(), r.rank) == silent.end()) others.push_back(r.rank);
  }
  line += "; " + std::string(others.size() == 1 ? "rank " : "ranks ") + RankList(others) +
          (w != 0 ? " waiting in " + kind + " #" + std::to_string(w) : std::string(" waiting for it"));
  inc.summary = line;
}

// Ranks in job-control stop past stopped_hang_s: they are the culprits
// whatever the others do (with a long step the others may not have reached
// the collective the stopped rank waits in yet, so "never entered" would name
// the wrong ranks).
void BlameStopped(int64_t now_ns, const std::vector<RankView>& ranks, const std::vector<int>& stopped,
                  TriageReport* report) {
  TriageReport& inc = *report;
  inc.culprits = stopped;
  std::string line;
  std::vector<int> in_collective, elsewhere;  // the others, folded (there may be 511)
  uint64_t w = 0;
  std::string kind = "collective";
  double wait_s = 0;
  for (const RankView& r : ranks) {
    if (std::find(stopped.begin(), stopped.end(), r.rank) != stopped.end()) {
      line += std::string(line.empty() ? "" : "; ") + "rank " + std::to_string(r.rank) + " " + Doing(now_ns, r);
    } else if (r.progress.valid && r.progress.in_collective()) {
      in_collective.push_back(r.rank);
      if (r.progress.waiting_on >= w) {
        w = r.progress.waiting_on;
        kind = CollectiveKindName(r.progress.collective_kind);
      }
      if (r.progress.phase_started_ns > 0) wait_s = std::max(wait_s, Seconds(now_ns - r.progress.phase_started_ns));
    } else {
      elsewhere.push_back(r.rank);
    }
  }
  auto ranks_word = [](const std::vector<int>& v) { return std::string(v.size() == 1 ? "rank " : "ranks ") + RankList(v); };
  if (!in_collective.empty()) {
    line += "; " + ranks_word(in_collective) + " waiting in " + kind + " #" + std::to_string(w) + " for " +
            Fixed1(wait_s) + " s";
  }
  if (!elsewhere.empty()) line += "; " + ranks_word(elsewhere) + " not in a collective";
  inc.summary = line;
}

// Nobody is in a collective: a stopped process, or the slowest compute.
void BlameCompute(int64_t now_ns, const std::vector<RankView>& ranks, TriageReport* report) {
  TriageReport& inc = *report;
  for (const RankView& r : ranks) {
    if (ProcStateWords(r.proc_state) != nullptr || !r.progress.valid) inc.culprits.push_back(r.rank);
  }
  if (inc.culprits.empty()) {
    const RankView* slowest = nullptr;
    for (const RankView& r : ranks) {
      if (slowest == nullptr || r.progress.phase_started_ns < slowest->progress.phase_started_ns) {
        slowest = &r;
      }
    }
    if (slowest != nullptr) inc.culprits.push_back(slowest->rank);
  }
  std::string line;
  for (int c : inc.culprits) {
    for (const RankView& r : ranks) {
      if (r.rank == c) line += std::string(line.empty() ? "" : "; ") + "rank " + std::to_string(c) + " " + Doing(now_ns, r);
    }
  }
  inc.summary = line + "; no rank is in a collective";
}

// The ranks that wait in a collective newer than `w` (another group's, which
// they reached because their own group did not need the culprit): "; ranks
// 2-3 waiting in reduce_scatter #239", the newest named.
std::string LaterWaits(const std::vector<RankView>& ranks, uint64_t w, const std::vector<int>& culprits) {
  std::vector<int> later;
  uint64_t newest = 0;
  std::string kind = "collective";
  for (const RankView& r : ranks) {
    if (!r.progress.valid || r.progress.phase != Phase::kCollective || r.progress.waiting_on <= w) continue;
    if (std::find(culprits.begin(), culprits.end(), r.rank) != culprits.end()) continue;
    later.push_back(r.rank);
    if (r.progress.waiting_on > newest) {
      newest = r.progress.waiting_on;
      kind = CollectiveKindName(r.progress.collective_kind);
    }
  }
  if (later.empty()) return "";
  return "; " + std::string(later.size() == 1 ? "rank " : "ranks ") + RankList(later) + " waiting in " +
         (later.size() == 1 ? "" : "collectives up to ") + kind + " #" + std::to_string(newest);
}

}  // namespace

TriageReport TriageHang(int64_t now_ns, const std::vector<RankView>& ranks, const HangDetector::Verdict& verdict) {
  TriageReport inc;
  inc.event = event_kind::kHang;
  // Ranks blocked in a collective, and the oldest collective anyone waits in:
  // the one that holds the others up. With one group (data parallel) every
  // waiting rank is in the same one; with tensor-parallel groups a rank waits
  // for its group's allreduce while the other groups have moved on to the
  // gradient reduction, and the culprit is who never entered the oldest.
  // Every rank issues the same sequence of collectives (its groups' included),
  // so #N is the same point of the step on every rank.
  uint64_t w = 0;
  std::vector<int> waiting;
  for (const RankView& r : ranks) {
    if (r.progress.valid && r.progress.phase == Phase::kCollective) {
      waiting.push_back(r.rank);
      if (r.progress.waiting_on != 0 && (w == 0 || r.progress.waiting_on < w)) w = r.progress.waiting_on;
    }
  }
  std::string kind = "collective";
  for (const RankView& r : ranks) {
    if (r.progress.valid && r.progress.waiting_on == w && w != 0) {
      kind = CollectiveKindName(r.progress.collective_kind);
    }
  }
  std::vector<std::string> parts;
  // A node that has sent nothing for much of the stall is the first suspect:
  // its ranks' records are as old as its last report (cut off from the
  // network, or its holdfastd stuck), and the others wait for them whatever
  // those records say (found by bench/soak_slurm.py: a partitioned follower's
  // last report had its rank inside the allreduce, and the hang named every rank).
  std::vector<int> silent;
  std::vector<std::string> silent_hosts;
  double silent_s = 0;
  for (const RankView& r : ranks) {
    if (r.report_age_s >= std::max(kSilentNodeMinS, verdict.stalled_s / 2)) {
      silent.push_back(r.rank);
      silent_s = std::max(silent_s, r.report_age_s);
      if (std::find(silent_hosts.begin(), silent_hosts.end(), r.host) == silent_hosts.end()) {
        silent_hosts.push_back(r.host);
      }
    }
  }
  // With model parallelism the ranks' collectives are numbered per group and
  // pipeline stages send and receive: the blame follows who waits on whom.
  const std::optional<DeviceMesh> mesh = ModelParallelMesh(ranks);
  if (mesh && !verdict.stopped.empty()) {
    triage_internal::BlameMesh(now_ns, ranks, *mesh, verdict.stopped, &inc);
  } else if (!verdict.stopped.empty()) {
    BlameStopped(now_ns, ranks, verdict.stopped, &inc);
  } else if (!silent.empty() && silent.size() < ranks.size()) {
    BlameSilentNodes(now_ns, ranks, silent, silent_hosts, silent_s, w, kind, &inc);
  } else if (mesh && triage_internal::BlameMesh(now_ns, ranks, *mesh, {}, &inc)) {
    // (named above)
  } else if (w != 0) {
    for (const RankView& r : ranks) {
      if (!r.progress.valid || r.progress.collectives_issued < w) {
        inc.culprits.push_back(r.rank);
        parts.push_back("rank " + std::to_string(r.rank) + " never entered " + kind + " #" + std::to_string(w) + " (" +
                        Doing(now_ns, r) + ")");
      }
    }
    double wait_s = 0;
    std::vector<int> in_w;
    for (const RankView& r : ranks) {
      if (r.progress.valid && r.progress.waiting_on == w) {
        in_w.push_back(r.rank);
        const int64_t since = r.progress.phase_started_ns;  // <= 0: unset
        if (since > 0) wait_s = std::max(wait_s, Seconds(now_ns - since));
      }
    }
    std::string line;
    for (size_t i = 0; i < parts.size(); ++i) line += (i ? "; " : "") + parts[i];
    if (inc.culprits.empty()) {
      // Everyone entered it. A stopped process explains it; otherwise the
      // collective itself (network, a peer's transport) is stuck.
      for (const RankView& r : ranks) {
        if (ProcStateWords(r.proc_state) != nullptr) {
          inc.culprits.push_back(r.rank);
          line += std::string(line.empty() ? "" : "; ") + "rank " + std::to_string(r.rank) + " " + Doing(now_ns, r);
        }
      }
      if (inc.culprits.empty()) {
        line = "all ranks entered " + kind + " #" + std::to_string(w) + " but it has not completed";
        for (const RankView& r : ranks) inc.culprits.push_back(r.rank);
      } else {
        in_w.erase(std::remove_if(in_w.begin(), in_w.end(),
                                  [&](int r) { return std::find(inc.culprits.begin(), inc.culprits.end(), r) !=
                                                      inc.culprits.end(); }),
                   in_w.end());
      }
    }
    if (in_w.empty()) in_w = waiting;
    // "it" only where the collective was just named ("never entered allreduce #15").
    const std::string what = parts.empty() ? kind + " #" + std::to_string(w) : std::string("it");
    line += "; " + std::string(in_w.size() == 1 ? "rank " : "ranks ") + RankList(in_w) + " waiting in " + what +
            " for " + Fixed1(wait_s) + " s";
    line += LaterWaits(ranks, w, inc.culprits);
    inc.summary = line;
  } else {
    BlameCompute(now_ns, ranks, &inc);
  }
  inc.summary += " (no step for " + Fixed1(verdict.stalled_s) + " s; " + verdict.allowance + " allowance " +
                 Fixed1(verdict.timeout_s) + " s)";
  IncidentEvidence ev;
  ev.stalled_s = verdict.stalled_s;
  ev.timeout_s = verdict.timeout_s;
  ev.allowance = verdict.allowance;
  ev.culprits = inc.culprits;
  for (const RankView& r : ranks) ev.ranks.push_back(RankEvidenceOf(now_ns, r));
  inc.evidence = std::move(ev);
  return inc;
}

TriageReport TriageRole(int64_t now_ns, const RankView& process, const RoleTrouble& t) {
  TriageReport inc;
  inc.event = t.hung ? event_kind::kRoleHang : event_kind::kRoleCrash;
  const std::string who = "role " + t.role + "[" + std::to_string(t.index) + "]";
  std::string where;
  if (process.progress.attached()) {
    const RankProgress& p = process.progress;
    where = " in " + std::string(PhaseName(p.phase)) + " at step " + std::to_string(p.step);
  }
  IncidentEvidence ev;
  ev.role = t.role;
  ev.role_index = t.index;
  const bool stopped = IsStopped(process.proc_state);
  if (t.hung && t.learner_waited_s > 0) {
    // Named for the learner's stall: what it is, then what it held up.
    const std::string what = process.proc_state == ProcState::kStopped ? "stopped (SIGSTOP)" : "stopped by a tracer";
    inc.summary = who + (stopped ? " is " + what : " has not moved for " + Fixed1(t.silent_s) + " s") +
                  "; the learner has waited " + Fixed1(t.learner_waited_s) + " s" +
                  (t.learner_doing.empty() ? "" : " " + t.learner_doing) + " for what it produces";
    ev.stalled_s = t.learner_waited_s;
    ev.timeout_s = t.timeout_s;
    ev.allowance = "learner_stall";
  } else if (t.hung) {
    inc.summary = who + " hung: " +
                  (t.attached ? "no heartbeat or step for " + Fixed1(t.silent_s) + " s (hang_s " + Fixed1(t.timeout_s) + ")"
                              : "no progress record written within " + Fixed1(t.timeout_s) + " s of its start") +
                  where;
    if (const char* words = ProcStateWords(process.proc_state)) inc.summary += ", " + std::string(words);
    ev.stalled_s = t.silent_s;
    ev.timeout_s = t.timeout_s;
    ev.allowance = t.attached ? "hang_s" : "startup";
  } else {
    inc.summary = who + " " + DescribeWaitStatus(t.wstatus) + where;
    ev.exit_status = DescribeWaitStatus(t.wstatus);
    ev.exit_code = WIFEXITED(t.wstatus) ? WEXITSTATUS(t.wstatus) : -1;
    ev.signal = WIFSIGNALED(t.wstatus) ? WTERMSIG(t.wstatus) : 0;
  }
  inc.summary += " (pid " + std::to_string(process.pid) + ")";
  ev.log_tail = t.log_tail;
  ev.ranks.push_back(RankEvidenceOf(now_ns, process));
  inc.evidence = std::move(ev);
  return inc;
}

TriageReport TriageExit(int64_t now_ns, const std::vector<RankView>& ranks, int rank, int wstatus,
                    const std::vector<std::string>& log_tail) {
  TriageReport inc;
  inc.event = event_kind::kCrash;
  inc.culprits = {rank};
  const RankView* self = nullptr;
  for (const RankView& r : ranks) {
    if (r.rank == rank) self = &r;
  }
  std::string where;
  if (self != nullptr && self->progress.valid) {
    const RankProgress& p = self->progress;
    where = " in " + std::string(PhaseName(p.phase)) + " of step " + StepAfter(p.step);
  }
  inc.summary = "rank " + std::to_string(rank) + " " + DescribeWaitStatus(wstatus) + where;
  IncidentEvidence ev;
  ev.rank = rank;
  ev.exit_status = DescribeWaitStatus(wstatus);
  ev.exit_code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
  ev.signal = WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0;
  ev.log_tail = log_tail;
  for (const RankView& r : ranks) ev.ranks.push_back(RankEvidenceOf(now_ns, r));
  inc.evidence = std::move(ev);
  return inc;
}

}  // namespace holdfast
