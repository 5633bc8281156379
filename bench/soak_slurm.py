#!/usr/bin/python3
"""Soak under Slurm: the Slurm fault kinds as a randomised, repeatable schedule on the real
loopback cluster of the Slurm suite.

  bench/soak_slurm.sh [--per-kind 20] [--kinds a,b] [--seed N] [--steps 3000] [--build-dir build]
                      [--work DIR] [--keep] [--docs] [--cluster start|reuse]

The cluster is tests/slurm/cluster.sh's (munged, slurmctld, slurmd n1..n3, each node in its
own network namespace at 10.77.0.11..13, holdfast-health as the Prolog, holdfast-slurmctld-epilog
as EpilogSlurmctld). `--cluster start` (the default) waits until no other slurmctld runs on
this machine (only one cluster fits), starts it and stops it at the end; `--cluster reuse`
uses the one running and leaves it up. Needs root.

Jobs are examples/slurm/holdfast.sbatch on 2 nodes: one holdfastd per node supervising one
holdfast-train rank each, a small GPT for --steps steps with a checkpoint every 50. Each kind
is injected --per-kind times, in a shuffled order, one at a time, into a running job at a
random moment after it committed a checkpoint. A job takes several while it has steps
enough left, but after a requeue that excluded a node (a follower's node_partition) no
more prolog_fail or node_partition: Slurm keeps an excluded node out of that job for good
(ExcNodeList), and of three nodes too few would be left; the rest go to the next job.

  slurmctld_down  slurmctld is stopped (SIGTERM) for 30 s, then started again with its state.
                  Recovered: the ranks kept stepping through the outage (no stall, no new
                  generation, no incident) and after it, and the controller has the job
                  RUNNING again. Time to recover: controller started -> it answers, job RUNNING.
  prolog_fail     one of the job's nodes turns unhealthy for the shipped Prolog (the suite's
                  bad-prolog-nodes: an InfiniBand port down), and the job is requeued by
                  Slurm's warning signal (scancel --signal=USR1 --batch, what --signal=B:USR1@N
                  sends): the ranks checkpoint, holdfastd requeues, the requeue starts on that
                  node, its Prolog fails, Slurm drains it and requeues the job held, and
                  holdfast-slurmctld-epilog releases it onto the two other nodes. Recovered:
                  a new attempt trains there, from the checkpoint the warning committed.
                  Right cause: the node is drained with holdfast-health's reason naming the
                  failing check (ib.port_state), it is not among the attempt's nodes, and
                  lineage has no incident but the preemption. Time: the Prolog's failure ->
                  first step of the new attempt. The file is cleared and the node resumed
                  afterwards. Slurm does not always run the Prolog again where a requeue lands
                  (a node that ran it for that job id: not again, mostly): such a missed moment
                  is injected again at the next job's start instead, on one of the two nodes
                  Slurm will pick (then the job trains on the two others from its start).
  node_partition  a node's link goes down (ip link set hfvX down: the root side of the veth
                  of X's namespace), X chosen at random among the job's two nodes.
                  A follower's node: the leader must find it lost (node_lost naming X; a
                  hang naming X's rank may come first, the collective stalls at once) and
                  requeue the job excluding X; the job runs again on the two other nodes.
                  (Slurm may find X not responding first and requeue the job itself: the
                  daemons get SIGTERM, and the lost node is recorded and excluded all the
                  same.)
                  The leader's node: the leader cannot tell which side was cut off: it
                  records the follower lost, and its requeue cannot reach slurmctld; Slurm
                  finds X not responding and requeues the job itself (after its BeginTime
                  hold), the requeued job waits for the cut-off daemon to give up the run
                  and continues it without X. Recovered: the run trains again in a new
                  attempt without X, from its newest checkpoint. Time: link down -> the new
                  attempt's ranks step. The link comes back and X is resumed afterwards.

Every job must end COMPLETED, lineage `succeeded`, with final parameters equal bit for bit
to the fault-free reference run's (same config, 2 ranks, no supervisor), every checkpoint
on disk in lineage, and nothing left behind (holdfastd / holdfast-train processes of the
job in any namespace, its progress records in /dev/shm, sockets, checkpoint temp files).

Prints bench/soak.py's table and summary line (injected, recovered, time to recover
median / max, wrong causes, losses, leaks); writes WORK/soak.json; --docs rewrites the
"## Soak under Slurm" section of docs/reliability.md. Exit status 1 when anything was not
recovered, had a wrong cause, lost anything or leaked.
"""

import argparse
import datetime
import json
import os
import random
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import soak  # noqa: E402  (bench/soak.py: the table, the report and the fault exceptions)
from soak import Failure, NotExercised, Skip, log  # noqa: E402

REPO = soak.REPO
SECTION = "## Soak under Slurm"
KINDS = ["slurmctld_down", "prolog_fail", "node_partition"]
SLURM_DIR = os.environ.get("HOLDFAST_SLURM_DIR", "/tmp/holdfast-slurm")
SUITE_DIR = os.environ.get("HOLDFAST_SLURM_SUITE_DIR", "/tmp/hf-slurm-suite")
CONF = os.path.join(SLURM_DIR, "slurm.conf")
BAD_PROLOG = os.path.join(SUITE_DIR, "support", "bad-prolog-nodes")
PROLOG_LOG = os.path.join(SUITE_DIR, "support", "prolog.log")
NODES = ["n1", "n2", "n3"]
CKPT_EVERY = 50
OUTAGE_S = 30          # slurmctld_down: how long the controller is away
NODE_TIMEOUT_S = 10    # [supervise] node_timeout_s of the jobs
WAIT_S = 120           # a wait for something quick; longer is a failure
REQUEUE_WAIT_S = 420   # a wait that may span Slurm's own requeue (BeginTime ~120 s) and --slurm-timeout
STALL_S = 3.0          # slurmctld_down: the longest the ranks may go without a step


def sh(args, check=False, **kw):
    return subprocess.run(args, capture_output=True, text=True, check=check, **kw)


def slurm(*args):
    return sh(list(args))


def ctld_up():
    return "is UP" in slurm("scontrol", "ping").stdout


def ctld_pid():
    """slurmctld's pid from its pid file when that process is alive (a zombie is gone)."""
    try:
        with open(os.path.join(SLURM_DIR, "run", "slurmctld.pid")) as f:
            pid = int(f.read().strip() or 0)
        with open(f"/proc/{pid}/comm") as f:
            if f.read().strip() != "slurmctld":
                return None
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("State:") and line.split()[1] in ("Z", "X"):
                    return None
        return pid
    except (OSError, ValueError):
        return None


def live_pids(comm):
    """Pids of live (non-zombie) processes named `comm`."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() != comm:
                    continue
            with open(f"/proc/{pid}/status") as f:
                state = next((line.split()[1] for line in f if line.startswith("State:")), "?")
        except OSError:
            continue
        if state not in ("Z", "X"):
            out.append(int(pid))
    return out


def node_states():
    """{node: (state, reason)} from sinfo; {} when the controller does not answer."""
    r = slurm("sinfo", "-h", "-N", "-o", "%N|%t|%E")
    out = {}
    if r.returncode != 0:
        return out
    for line in r.stdout.splitlines():
        parts = line.split("|", 2)
        if len(parts) == 3:
            out[parts[0]] = (parts[1], parts[2])
    return out


def veth(node):
    return "hfv" + node[1:]


def show_job(job_id):
    """`scontrol show job J -o` as a dict; {} when Slurm has no such job (or does not answer)."""
    r = slurm("scontrol", "show", "job", str(job_id), "-o")
    if r.returncode != 0:
        return {}
    out = {}
    for tok in r.stdout.split():
        if "=" in tok:
            k, v = tok.split("=", 1)
            out.setdefault(k, v)
    return out


LIVE_JOB_STATES = ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                   "RESIZING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT")


def expand(hostlist):
    r = slurm("scontrol", "show", "hostnames", hostlist)
    return r.stdout.split() if r.returncode == 0 else []


# ------------------------------------------------------------------ the job ----

class Job:
    """One sbatch of examples/slurm/holdfast.sbatch: 2 nodes, one holdfastd and one rank each."""

    # The control-socket and lineage helpers of bench/soak.py's Run: same socket, same schema.
    status = soak.Run.status
    ranks = staticmethod(soak.Run.ranks)
    training = soak.Run.training
    db = soak.Run.db
    events = soak.Run.events
    wait_event = soak.Run.wait_event
    mark = soak.Run.mark
    generation = soak.Run.generation

    def __init__(self, s, index):
        self.soak, self.index = s, index
        self.name = f"hf-soak-{os.getpid()}-{index:03d}"
        self.dir = os.path.join(s.work, f"job-{index:03d}")
        self.run_dir = os.path.join(self.dir, "run")
        self.ck = os.path.join(self.dir, "ck")
        self.final = os.path.join(self.dir, "final")
        os.makedirs(self.run_dir, exist_ok=True)
        self.job = os.path.join(self.dir, "job.toml")
        cmd = [s.train, "--config", s.train_cfg, "--set", f"output.dir={self.dir}/out",
               "--set", f"checkpoint.dir={self.ck}", "--dump-final", self.final]
        with open(self.job, "w") as f:
            f.write(f"""[job]
name = "{self.name}"
command = {json.dumps(cmd)}
nproc = 1
checkpoint_dir = "{self.ck}"
[supervise]
poll_ms = 100
startup_timeout_s = 120
term_grace_s = 3
node_timeout_s = {NODE_TIMEOUT_S}
# The soak requeues one job many times on purpose: the run's bounds are not what it measures.
max_requeues = 1000000
max_excluded_nodes = 1000000
[health]
checkpoint_min_free_gb = 0.05
checkpoint_write_mb = 4
""")
        self.job_id = None
        self.last_event = 0
        self.info = {}         # the newest `scontrol show job` seen
        self.submitted = 0.0

    def submit(self):
        self.soak.jobs.append(self)
        env = dict(os.environ, RUN_DIR=self.run_dir, CONFIG=self.job, HOLDFASTD=self.soak.holdfastd,
                   SLURM_CONF=CONF)
        r = sh(["sbatch", "--parsable", "-N2", "--job-name", self.name, "--chdir", self.dir,
                "--output", os.path.join(self.dir, "job-%j.out"),
                os.path.join(REPO, "examples", "slurm", "holdfast.sbatch")], env=env)
        if r.returncode != 0:
            raise RuntimeError(f"sbatch failed: {r.stdout}{r.stderr}")
        self.job_id = int(r.stdout.strip().split(";")[0])
        self.submitted = time.time()

    def refresh(self):
        info = show_job(self.job_id)
        if info:
            self.info = info
        return info

    def ended(self):
        """The job's final Slurm state once it is over (COMPLETED, FAILED, ...), else None."""
        info = self.refresh()
        if not info:
            if not ctld_up():
                return None  # the controller is away: nothing is known
            last = self.info.get("JobState")  # purged (MinJobAge) since it was last seen
            return last if last and last not in LIVE_JOB_STATES else "GONE"
        st = info.get("JobState", "")
        return None if st in LIVE_JOB_STATES else st

    def step(self, st):
        return max((r.get("step") or 0) for r in self.ranks(st)) if st else 0

    def wait_training(self, min_step=0, timeout=WAIT_S, after=None, attempt_after=None):
        """Status once both ranks train at min_step or later (in another generation than
        `after` / a later attempt than `attempt_after` when given); None on timeout or job end."""
        deadline = time.monotonic() + timeout
        next_check = 0.0
        while time.monotonic() < deadline:
            st = self.status()
            if (self.training(st, min_step) and (after is None or self.generation(st) != after)
                    and (attempt_after is None or st["attempt"] > attempt_after)):
                return st
            if time.monotonic() > next_check:
                next_check = time.monotonic() + 2
                if self.ended():
                    return None
            time.sleep(0.05)
        return None

    # -- lineage --
    def has_db(self):
        return os.path.exists(os.path.join(self.run_dir, "lineage.db"))

    def query(self, sql, args=()):
        with self.db() as db:
            return db.execute(sql, args).fetchall()

    def attempts(self):
        rows = self.query("SELECT attempt, nodes, state, cause, resumed_from_step, restart_count "
                          "FROM attempt ORDER BY attempt")
        return [dict(zip(("attempt", "nodes", "state", "cause", "resumed_from_step", "restart_count"), r))
                for r in rows]

    def committed_steps(self):
        return soak.committed_steps(self)

    def newest_checkpoint_on_disk(self):
        steps = [int(n[5:]) for n in (os.listdir(self.ck) if os.path.isdir(self.ck) else [])
                 if n.startswith("step-") and os.path.exists(os.path.join(self.ck, n, "MANIFEST.json"))]
        return max(steps) if steps else -1

    def run_id(self):
        try:
            r = self.query("SELECT run_id FROM run ORDER BY created_ms DESC LIMIT 1")
            return r[0][0] if r else ""
        except sqlite3.Error:
            return ""


def incidents(job, since):
    return [e for e in job.events(since) if e["incident"]]


# ------------------------------------------------------------------ faults ----
# Each takes (soak, job, st), st a status of the job training, injects, waits for the
# outcome, checks the record and returns the seconds to recover; Failure for a wrong cause
# or no recovery, NotExercised when the moment was missed.

def f_slurmctld_down(s, job, st):
    gen = job.generation(st)
    since = job.last_event
    pid = ctld_pid()
    if pid is None:
        raise Failure("slurmctld is not running before the outage")
    os.kill(pid, signal.SIGTERM)
    s.ctld_stopped = True
    deadline = time.monotonic() + 30
    while ctld_pid() is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    if ctld_pid() is not None:
        raise Failure("slurmctld did not stop within 30 s of SIGTERM")
    t_down = time.monotonic()
    last_step, last_change, worst_stall, steps_in_outage = job.step(st), t_down, 0.0, 0
    problem = None
    while time.monotonic() - t_down < OUTAGE_S:
        cur = job.status()
        now = time.monotonic()
        if cur is not None and job.ranks(cur) and job.generation(cur) != gen:
            problem = f"the ranks were restarted while slurmctld was down (generation {gen} -> {job.generation(cur)})"
            break
        k = job.step(cur) if cur else last_step
        if k > last_step:
            steps_in_outage += k - last_step
            last_step, last_change = k, now
        elif cur is not None and cur.get("state") != "running":
            problem = f"the run left 'running' while slurmctld was down ({cur.get('state')})"
            break
        worst_stall = max(worst_stall, now - last_change)
        time.sleep(0.2)
    t0 = time.monotonic()
    r = sh(["slurmctld", "-f", CONF], env=dict(os.environ, SLURM_CONF=CONF))
    s.ctld_stopped = False
    if r.returncode != 0:
        raise Failure(f"slurmctld did not start again: {r.stdout}{r.stderr}")
    deadline = time.monotonic() + 60
    while not ctld_up() and time.monotonic() < deadline:
        time.sleep(0.1)
    if not ctld_up():
        raise Failure("slurmctld did not answer within 60 s of its restart")
    while job.refresh().get("JobState") != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.1)
    took = time.monotonic() - t0
    if problem:
        raise Failure(problem)
    if job.info.get("JobState") != "RUNNING":
        raise Failure(f"after the outage slurmctld has the job {job.info.get('JobState')}, not RUNNING")
    if worst_stall > STALL_S and last_step < s.args.steps:
        raise Failure(f"the ranks made no step for {worst_stall:.1f} s while slurmctld was down")
    if steps_in_outage == 0:
        raise Failure("no training step while slurmctld was down")
    st2 = job.wait_training(last_step + 20)
    if st2 is None and job.ended() != "COMPLETED":
        raise Failure("training did not go on after the outage")
    if st2 is not None and job.generation(st2) != gen:
        raise Failure("the ranks were restarted after the outage")
    inc = incidents(job, since)
    if inc:
        raise Failure(f"a controller outage must not be an incident; lineage has {inc[0]['kind']}: {inc[0]['summary']}")
    log(f"  {steps_in_outage} steps while slurmctld was down (longest stall {worst_stall:.2f} s)")
    return took


def prolog_failed_at(job_id, node, since):
    """Wall-clock time of the Prolog's failure on `node` for job `job_id` at `since` or later
    (prolog.log, which outlives clusters, whose job ids start again at 1), or None."""
    try:
        with open(PROLOG_LOG) as f:
            lines = f.readlines()
    except OSError:
        return None
    day = datetime.date.today()
    for line in lines:
        parts = line.split()
        # "07:20:35.123 n2 job 17: prolog exit 1"
        if (len(parts) >= 6 and parts[1] == node and parts[3] == f"{job_id}:" and parts[4] == "prolog"
                and parts[-1] != "0"):
            t = datetime.datetime.strptime(f"{day} {parts[0]}", "%Y-%m-%d %H:%M:%S.%f").timestamp()
            if t >= since:
                return t
    return None


def f_prolog_fail(s, job, st):
    """One of the job's nodes turns unhealthy for the Prolog, and the job is requeued (Slurm's
    warning signal, what --signal=B:USR1@N sends): the requeue starts there, the Prolog fails."""
    att = job.attempts()[-1]
    bad = random.choice(att["nodes"].split(","))
    since = job.last_event
    newest = job.newest_checkpoint_on_disk()
    with open(BAD_PROLOG, "w") as f:
        f.write(bad + "\n")
    s.bad_prolog_node = bad
    log(f"  {bad} fails the Prolog from now; Slurm's warning signal (USR1) requeues the job")
    t_inject = time.time()
    try:
        r = slurm("scancel", "--signal=USR1", "--batch", str(job.job_id))
        if r.returncode != 0:
            raise Failure(f"scancel --signal=USR1 --batch: {r.stdout}{r.stderr}")
        st2 = job.wait_training(attempt_after=st["attempt"], timeout=WAIT_S)
        t_step = time.time()
        failed = prolog_failed_at(job.job_id, bad, t_inject)
        att2 = [a for a in job.attempts() if a["attempt"] > st["attempt"]]
        if failed is None:
            if st2 is not None and att2 and bad in att2[0]["nodes"].split(","):
                raise NotExercised(f"the requeue ran on {bad} without running the Prolog there again")
            if st2 is not None:
                raise NotExercised(f"Slurm placed the requeue on {att2[-1]['nodes'] if att2 else '?'}, not on {bad}")
            raise Failure(f"the Prolog did not fail on {bad}, and no new attempt trained within {WAIT_S} s "
                          f"(Slurm: {job.info.get('JobState')} {job.info.get('Reason')})")
        if st2 is None:
            raise Failure(f"the job did not train on healthy nodes within {WAIT_S} s of the Prolog failing on "
                          f"{bad} (Slurm: {job.info.get('JobState')} {job.info.get('Reason')})")
        check_prolog_drain(bad)
        now = [a for a in job.attempts() if a["attempt"] == st2["attempt"]][0]
        if bad in now["nodes"].split(","):
            raise Failure(f"attempt {now['attempt']} runs on {now['nodes']}, with drained {bad}")
        if bad in expand(job.refresh().get("NodeList", "")):
            raise Failure(f"Slurm runs the job on {job.info.get('NodeList')}, with drained {bad}")
        if now["resumed_from_step"] is None or now["resumed_from_step"] < newest:
            raise Failure(f"attempt {now['attempt']} resumed from step {now['resumed_from_step']}, older than "
                          f"the newest checkpoint before the requeue ({newest})")
        other = [e for e in incidents(job, since) if e["kind"] != "preempt"]
        if other:
            raise Failure(f"a requeue onto a node failing the Prolog is no incident of the run; lineage has "
                          f"{other[0]['kind']}: {other[0]['summary']}")
        return max(0.0, t_step - failed)
    finally:
        restore_prolog(s)


def start_with_prolog_fail(s, job):
    """Submits the job with one of the two nodes Slurm will pick failing the Prolog."""
    first_two = sorted(n for n, (state, _) in node_states().items() if state == "idle")[:2]
    bad = random.choice(first_two)
    with open(BAD_PROLOG, "w") as f:
        f.write(bad + "\n")
    s.bad_prolog_node = bad
    log(f"job {job.index}: starts with {bad} failing the Prolog")
    try:
        job.submit()
        st = job.wait_training(1, timeout=WAIT_S)
        t_step = time.time()
        failed = prolog_failed_at(job.job_id, bad, job.submitted - 1)
        att = job.attempts() if job.has_db() else []
        if failed is None:
            if st is not None and att and bad not in att[-1]["nodes"].split(","):
                raise NotExercised(f"Slurm did not allocate {bad}: the Prolog never ran there")
            raise Failure(f"the Prolog did not fail on {bad}")
        if st is None:
            raise Failure(f"the job did not train on healthy nodes within {WAIT_S} s of the Prolog failing on "
                          f"{bad} (Slurm: {job.info.get('JobState')} {job.info.get('Reason')})")
        check_prolog_drain(bad)
        if not att or bad in att[-1]["nodes"].split(","):
            raise Failure(f"the attempt runs on {att[-1]['nodes'] if att else '?'}, with drained {bad}")
        if bad in expand(job.refresh().get("NodeList", "")):
            raise Failure(f"Slurm runs the job on {job.info.get('NodeList')}, with drained {bad}")
        inc = incidents(job, 0)
        if inc:
            raise Failure(f"a node failing the Prolog is no incident of the run; lineage has {inc[0]['kind']}: "
                          f"{inc[0]['summary']}")
        return max(0.0, t_step - failed)
    finally:
        restore_prolog(s)


def check_prolog_drain(bad):
    state, reason = node_states().get(bad, ("?", ""))
    if "drain" not in state:
        raise Failure(f"{bad} failed the Prolog but is {state}, not drained")
    if not reason.startswith("holdfast-health: ") or "ib.port_state" not in reason:
        raise Failure(f"{bad}'s drain reason does not name holdfast-health's failing check: {reason!r}")


def restore_prolog(s):
    """Clears bad-prolog-nodes and resumes the node the Prolog drained."""
    node, s.bad_prolog_node = s.bad_prolog_node, None
    if node is None:
        return
    with open(BAD_PROLOG, "w"):
        pass
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        state = node_states().get(node, ("?", ""))[0]
        if state in ("idle", "mix", "alloc"):
            return
        if "drain" in state or "down" in state or "drng" in state:
            slurm("scontrol", "update", f"nodename={node}", "state=resume")
        time.sleep(0.5)
    log(f"  warning: {node} is {node_states().get(node)} 30 s after its resume")


def f_node_partition(s, job, st):
    att = job.attempts()[-1]
    nodes = att["nodes"].split(",")
    if len(nodes) != 2:
        raise Failure(f"the attempt runs on {att['nodes']}, not 2 nodes")
    leader, follower = nodes
    cut = random.choice(nodes)
    other = follower if cut == leader else leader
    since = job.last_event
    newest = job.newest_checkpoint_on_disk()
    log(f"  cutting {cut} ({'the leader' if cut == leader else 'a follower'}) off the network")
    t0 = time.monotonic()
    sh(["ip", "link", "set", veth(cut), "down"], check=True)
    s.cut.add(cut)
    if cut == follower:
        e = job.wait_event(lambda e: e["kind"] == "node_lost", since=since, timeout=NODE_TIMEOUT_S + 60)
        if e is None:
            first = incidents(job, since)
            raise Failure(f"{cut} was cut off but the leader found no node lost within {NODE_TIMEOUT_S + 60} s"
                          + (f" (lineage has {first[0]['kind']}: {first[0]['summary']})" if first else ""))
        if e["node"] != cut:
            raise Failure(f"wrong node: {cut} was cut off, node_lost names {e['node']!r}: {e['summary']}")
        for i in incidents(job, since):
            if i["id"] >= e["id"]:
                break
            if i["kind"] != "hang" or i["node"] != cut:
                raise Failure(f"before node_lost, lineage has {i['kind']} on {i['node']!r}: {i['summary']}")
        rq = job.wait_event(lambda e: e["kind"] == "requeue" and not e["incident"], since=e["id"], timeout=30)
        if rq is None:
            raise Failure(f"{cut} was lost but the job was not requeued")
        if f"requeued excluding {cut}" not in rq["action"]:
            raise Failure(f"the requeue does not exclude {cut}: {rq['summary']} -> {rq['action']}")
        # Slurm may find the node not responding first and requeue the job itself (SIGTERM to
        # the daemons, then its ~120 s BeginTime hold): the wait may span that.
        timeout = REQUEUE_WAIT_S
    else:
        # The cut-off leader cannot tell which side was cut: it finds the follower lost and
        # cannot reach slurmctld to requeue; Slurm requeues the job itself when it finds the
        # leader's node not responding.
        e = job.wait_event(lambda e: e["kind"] == "node_lost", since=since, timeout=NODE_TIMEOUT_S + 60)
        if e is None:
            raise Failure(f"the leader's node {cut} was cut off but its holdfastd recorded no node lost")
        timeout = REQUEUE_WAIT_S
    st2 = job.wait_training(attempt_after=st["attempt"], timeout=timeout)
    if st2 is None:
        raise Failure(f"no new attempt trained within {timeout} s of cutting {cut} off "
                      f"(Slurm: {job.info.get('JobState')} {job.info.get('Reason')} on {job.info.get('NodeList')})")
    first = min(r["step"] for r in job.ranks(st2))
    if job.wait_training(first + 2, timeout=WAIT_S) is None and job.ended() != "COMPLETED":
        raise Failure("the new attempt stopped training")
    took = time.monotonic() - t0
    att2 = [a for a in job.attempts() if a["attempt"] == st2["attempt"]][0]
    if cut in att2["nodes"].split(","):
        raise Failure(f"attempt {att2['attempt']} runs on {att2['nodes']}, with {cut} that was cut off")
    if att2["resumed_from_step"] is None or att2["resumed_from_step"] < newest:
        raise Failure(f"attempt {att2['attempt']} resumed from step {att2['resumed_from_step']}, "
                      f"older than the newest checkpoint before the cut ({newest})")
    prev = [a for a in job.attempts() if a["attempt"] < st2["attempt"]][-1]
    if prev["state"] == "running":
        raise Failure(f"attempt {prev['attempt']} (cut off) never ended in lineage")
    s.partition_times["leader" if cut == leader else "follower"].append(took)
    if cut == leader:
        log(f"  the cut-off leader recorded {e['kind']} naming {e['node']!r} (it cannot tell which side was cut); "
            f"attempt {prev['attempt']} {prev['state']}: {prev['cause'][:160]}")
        s.notes.append(f"node_partition of the leader's node {cut} (job {job.index}): the cut-off leader "
                       f"recorded node_lost naming {e['node']}; attempt {prev['attempt']} {prev['state']}; "
                       f"attempt {att2['attempt']} on {att2['nodes']} after {took:.0f} s")
    heal(s, cut)
    return took


def heal(s, node):
    """The link back up, the node resumed in Slurm, and responding again."""
    sh(["ip", "link", "set", veth(node), "up"])
    s.cut.discard(node)
    deadline = time.monotonic() + WAIT_S
    good = 0  # the node re-registers after its first answer (briefly 'unk'): wait for it to settle
    while time.monotonic() < deadline:
        state = node_states().get(node, ("?", ""))[0]
        good = good + 1 if state in ("idle", "mix", "alloc") else 0
        if good >= 3:
            return
        if "down" in state or "drain" in state or state.endswith("*"):
            slurm("scontrol", "update", f"nodename={node}", "state=resume")
        time.sleep(1)
    log(f"  warning: {node} is still {node_states().get(node)} {WAIT_S} s after its link came back")


FAULTS = {"slurmctld_down": f_slurmctld_down, "prolog_fail": f_prolog_fail, "node_partition": f_node_partition}
# What a fault needs left of the job, in seconds of training: the run must not end during it.
NEEDS_S = {"slurmctld_down": OUTAGE_S + 20, "prolog_fail": 15, "node_partition": 15}
# Faults after which the job runs on the two other nodes: they need all three up, and a job
# whose nodes Slurm already excludes one of (ExcNodeList: a requeue keeps a node out for
# good) would have too few left.
NEEDS_THREE_NODES = {"prolog_fail", "node_partition"}


# ------------------------------------------------------------------ the soak ----

BINARIES = ("daemon/holdfastd", "trainer/holdfast-train", "health/holdfast-health",
            "scheduler/holdfast-slurmctld-epilog")


def copy_binary(src, dst):
    """Copies a built program once it runs (`--help`): a link in progress is retried."""
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    for _ in range(60):
        if os.access(src, os.X_OK):
            shutil.copy2(src, dst)
            if sh([dst, "--help"]).returncode == 0:
                return
        time.sleep(5)
    sys.exit(f"soak_slurm: {src} is missing or does not run: build first (scripts/build.sh)")


class SlurmSoak:
    def __init__(self, args):
        self.args = args
        if os.geteuid() != 0:
            sys.exit("soak_slurm: must run as root (the Slurm cluster, network namespaces, ip link)")
        self.work = os.path.abspath(args.work or tempfile.mkdtemp(prefix="holdfast-soak-slurm-"))
        os.makedirs(self.work, exist_ok=True)
        # The programs are copied: a rebuild of the build directory during the soak (a link
        # in progress is not executable) must not fail a job's start.
        self.build = os.path.join(self.work, "bin")
        for rel in BINARIES:
            copy_binary(os.path.join(os.path.abspath(args.build_dir), rel), os.path.join(self.build, rel))
        self.holdfastd = os.path.join(self.build, "daemon", "holdfastd")
        self.train = os.path.join(self.build, "trainer", "holdfast-train")
        os.environ["SLURM_CONF"] = CONF
        self.started_cluster = False
        self.cut = set()
        self.ctld_stopped = False
        self.bad_prolog_node = None
        self.notes = []
        self.partition_times = {"follower": [], "leader": []}
        self.jobs = []
        self.schedule = []
        self.rate = 20.0  # steps/s, measured as the jobs train

    # -- the cluster --
    def cluster_up(self):
        if self.args.cluster == "reuse":
            if not ctld_up():
                sys.exit(f"soak_slurm: --cluster reuse: no Slurm cluster answers at {CONF}")
            if not os.path.exists(BAD_PROLOG):
                sys.exit(f"soak_slurm: --cluster reuse: {BAD_PROLOG} is missing: not the Slurm suite's cluster "
                         "(tests/slurm/cluster.sh start BUILD_DIR)")
            log("soak_slurm: reusing the running cluster")
            return
        while True:
            other = " ".join(f"{pid} slurmctld" for pid in live_pids("slurmctld"))
            if not other:
                break
            log(f"soak_slurm: another Slurm cluster runs here ({other}); checking again in a minute")
            time.sleep(60)
        r = sh([os.path.join(REPO, "tests", "slurm", "cluster.sh"), "start", self.build])
        if r.returncode != 0:
            sys.exit(f"soak_slurm: tests/slurm/cluster.sh start failed:\n{r.stdout}{r.stderr}")
        self.started_cluster = True
        log("soak_slurm: started the cluster (tests/slurm/cluster.sh)")

    def cluster_down(self):
        if self.started_cluster:
            sh([os.path.join(REPO, "tests", "slurm", "cluster.sh"), "stop"])
            log("soak_slurm: stopped the cluster")

    def restore(self):
        """Puts the cluster back whatever happened: links up, controller up, nodes resumed."""
        for node in list(self.cut):
            sh(["ip", "link", "set", veth(node), "up"])
        self.cut.clear()
        if self.ctld_stopped or (ctld_pid() is None and os.path.exists(CONF)):
            sh(["slurmctld", "-f", CONF])
            self.ctld_stopped = False
            deadline = time.monotonic() + 30
            while not ctld_up() and time.monotonic() < deadline:
                time.sleep(0.1)
        restore_prolog(self)

    def wait_idle(self):
        """Until the three nodes are idle (as the Slurm suite starts each test)."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            states = node_states()
            if [states.get(n, ("?",))[0] for n in NODES] == ["idle"] * 3:
                return True
            for n, (state, _) in states.items():
                if "drain" in state or "down" in state:
                    slurm("scontrol", "update", f"nodename={n}", "state=resume")
            time.sleep(0.5)
        log(f"warning: the nodes are not all idle: {node_states()}")
        return False

    # -- the reference --
    def reference(self):
        t0 = time.monotonic()
        self.train_cfg = soak.write_train_config(self.work, self.args.steps, log_every=100, ckpt_every=CKPT_EVERY)
        self.ref_params = soak.reference_params(self.train, self.train_cfg, self.work)
        log(f"reference: {self.args.steps} steps in {time.monotonic() - t0:.0f} s")

    # -- the end of a job --
    def finish_job(self, job, result):
        deadline = time.monotonic() + REQUEUE_WAIT_S + self.args.steps / max(1.0, self.rate)
        end = None
        while time.monotonic() < deadline:
            end = job.ended()
            if end:
                break
            time.sleep(1)
        if end != "COMPLETED":
            result["losses"].append(f"job {job.index} (Slurm {job.job_id}): ended {end or 'never'} "
                                    f"({job.info.get('Reason', '')}), not COMPLETED")
            if end is None:
                slurm("scancel", str(job.job_id))
        state = job.query("SELECT state, cause FROM run ORDER BY created_ms DESC LIMIT 1") if job.has_db() else []
        if not state or state[0][0] != "succeeded":
            result["losses"].append(f"job {job.index}: lineage says the run is {state[0] if state else 'missing'}")
        try:
            with open(os.path.join(job.final, "params.bin"), "rb") as f:
                same = f.read() == self.ref_params
        except OSError:
            same = False
        if not same:
            result["losses"].append(f"job {job.index}: final parameters differ from the fault-free run")
        if job.has_db():
            on_disk = {int(n[5:]) for n in (os.listdir(job.ck) if os.path.isdir(job.ck) else [])
                       if n.startswith("step-") and os.path.exists(os.path.join(job.ck, n, "MANIFEST.json"))}
            for step in sorted(on_disk - set(job.committed_steps())):
                result["losses"].append(f"job {job.index}: checkpoint step {step} on disk but not in lineage")
        return end

    def leaks(self, job):
        out = []
        deadline = time.monotonic() + 30
        while True:
            procs = []
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                if job.dir + "/" in cmd and ("holdfastd" in cmd or "holdfast-train" in cmd) and "srun" not in cmd:
                    procs.append(f"{pid}: {cmd[:140]}")
            if not procs or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        out += [f"process {p}" for p in procs]
        run_id = job.run_id()
        if run_id:
            out += [f"shm /dev/shm/{n}" for n in sorted(os.listdir("/dev/shm")) if n.startswith(f"holdfast-{run_id}-")]
        for root, _, files in os.walk(job.dir):
            for name in files:
                p = os.path.join(root, name)
                try:
                    if (os.lstat(p).st_mode & 0o170000) == 0o140000:
                        out.append(f"socket {p}")
                except OSError:
                    pass
        for root, _, files in os.walk(job.ck):
            out += [f"checkpoint temp file {os.path.join(root, n)}" for n in files if n.endswith(".tmp")]
        return out

    def inject(self, per, index, kind, fault):
        """Runs one injection and counts it; False when its moment was missed (injected again)."""
        p = per[kind]
        try:
            took = fault()
            p["injected"] += 1
            p["recovered"] += 1
            p["times"].append(took)
            log(f"  recovered in {took:.2f} s")
        except NotExercised as e:
            p["retries"] += 1
            log(f"  not exercised ({e}); again later")
            if p["retries"] > 5 * self.args.per_kind:
                p["skipped"] = f"not exercised {p['retries']} times: {e}"
                self.schedule = [k for k in self.schedule if k != kind]
            else:
                self.schedule.insert(random.randrange(len(self.schedule) + 1), kind)
            return False
        except Skip as e:
            p["skipped"] = str(e)
            self.schedule = [k for k in self.schedule if k != kind]
        except Failure as e:
            p["injected"] += 1
            p["wrong"].append(f"job {index}: {e}")
            log(f"  FAILED: {e}")
        return True

    def measure_rate(self, job, st0, t0):
        st = job.status()
        if st is None or not job.ranks(st) or job.generation(st) != job.generation(st0):
            return
        dt = time.monotonic() - t0
        if dt > 3:
            self.rate = max(1.0, (job.step(st) - job.step(st0)) / dt)

    # -- the schedule --
    def main(self):
        a = self.args
        kinds = a.kinds.split(",") if a.kinds else list(KINDS)
        for k in kinds:
            if k not in KINDS:
                sys.exit(f"soak_slurm: unknown kind {k!r}; the kinds are: {', '.join(KINDS)}")
        random.seed(a.seed)
        log(f"soak_slurm: {a.per_kind} x {len(kinds)} kinds, seed {a.seed}, {a.steps} steps a job, work {self.work}")
        self.reference()
        self.schedule = [k for k in kinds for _ in range(a.per_kind)]
        random.shuffle(self.schedule)
        per = {k: {"injected": 0, "recovered": 0, "times": [], "wrong": [], "skipped": "", "retries": 0}
               for k in kinds}
        result = {"losses": [], "leaks": [], "runs": 0}
        index = 0
        prolog_at_start = False
        t_start = time.monotonic()
        while self.schedule:
            index += 1
            result["runs"] += 1
            self.wait_idle()
            job = Job(self, index)
            if self.schedule[0] == "prolog_fail" and prolog_at_start:
                # The moment missed in the last job's requeue: this job's start is one for sure.
                self.schedule.pop(0)
                self.inject(per, index, "prolog_fail", lambda: start_with_prolog_fail(self, job))
            else:
                job.submit()
            log(f"job {index}: Slurm job {job.job_id}")
            prolog_at_start = False
            st = job.wait_training(1, timeout=WAIT_S)
            if st is None:
                result["losses"].append(f"job {index}: never trained (Slurm: {job.info.get('JobState')} "
                                        f"{job.info.get('Reason')})")
            alive = st is not None
            last_ck = -1
            took_any = False
            while alive and self.schedule:
                kind = self.schedule[0]
                # A random moment after a checkpoint newer than the last injection's.
                t_rate, st_rate = time.monotonic(), st
                deadline = time.monotonic() + WAIT_S
                while job.newest_checkpoint_on_disk() <= last_ck and time.monotonic() < deadline and not job.ended():
                    time.sleep(0.1)
                ck = job.newest_checkpoint_on_disk()
                st = job.wait_training(ck + random.randint(1, CKPT_EVERY - 5), timeout=WAIT_S)
                if st is None:
                    break
                self.measure_rate(job, st_rate, t_rate)
                left_s = (a.steps - job.step(st)) / self.rate
                if left_s < NEEDS_S[kind] * 1.5:
                    log(f"job {index} step {job.step(st)}: ~{left_s:.0f} s of training left, too little for "
                        f"{kind}: the rest goes to the next job")
                    if not took_any:
                        sys.exit(f"soak_slurm: --steps {a.steps} is too few: a job trains ~{a.steps / self.rate:.0f} s, "
                                 f"{kind} needs {NEEDS_S[kind] * 1.5:.0f} s of it")
                    break
                if kind in NEEDS_THREE_NODES:
                    excluded = job.refresh().get("ExcNodeList", "(null)")
                    settle = time.monotonic() + 15  # a node re-registering shows 'unk' for a moment
                    while True:
                        states = node_states()
                        up = all(states.get(n, ("?",))[0] in ("idle", "mix", "alloc") for n in NODES)
                        if up or time.monotonic() > settle:
                            break
                        time.sleep(1)
                    if excluded not in ("", "(null)") or not up:
                        log(f"job {index}: Slurm keeps {excluded} out of it (nodes: {states}): {kind} goes to "
                            f"the next job")
                        break
                self.schedule.pop(0)
                took_any = True
                job.mark()
                log(f"job {index} step {job.step(st)} (checkpoint {ck}): {kind} ({len(self.schedule)} to go)")
                exercised = self.inject(per, index, kind, lambda: FAULTS[kind](self, job, st))
                self.restore()
                if not exercised and kind == "prolog_fail" and kind in self.schedule:
                    # Slurm does not always run the Prolog again where a job's requeue lands (a
                    # node that ran it for this job id): the next job's start is the next moment.
                    self.schedule.remove("prolog_fail")
                    self.schedule.insert(0, "prolog_fail")
                    prolog_at_start = True
                    break
                last_ck = job.newest_checkpoint_on_disk()
                st = job.status()
                if st is None or not job.training(st):
                    st = job.wait_training(timeout=REQUEUE_WAIT_S)
                    alive = st is not None
            for node in list(self.cut):
                heal(self, node)
            self.restore()
            end = self.finish_job(job, result)
            log(f"job {index}: Slurm job {job.job_id} {end}")
            leaks = self.leaks(job)
            result["leaks"] += [f"job {index}: {x}" for x in leaks]
            if not a.keep and end == "COMPLETED" and not leaks and not any(
                    x.startswith(f"job {index}:") for x in result["losses"]) and not any(
                    w.startswith(f"job {index}:") for p in per.values() for w in p["wrong"]):
                shutil.rmtree(job.dir, ignore_errors=True)
        result["wall_s"] = time.monotonic() - t_start
        result["per_kind"] = per
        result["notes"] = self.notes
        result["partition_times"] = self.partition_times
        return result


def write_docs(text):
    """Rewrites this soak's section of docs/reliability.md (bench/soak.py's writer, own section)."""
    saved = soak.SECTION
    soak.SECTION = SECTION
    try:
        soak.write_docs(text)
    finally:
        soak.SECTION = saved


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-kind", type=int, default=20)
    ap.add_argument("--kinds", default="", help=f"comma-separated, of: {', '.join(KINDS)}")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3000, help="training steps of each job")
    ap.add_argument("--build-dir", default=os.path.join(REPO, "build"))
    ap.add_argument("--work", default="")
    ap.add_argument("--keep", action="store_true", help="keep every job's folder (else only the failed ones)")
    ap.add_argument("--docs", action="store_true", help='rewrite the "## Soak under Slurm" section of docs/reliability.md')
    ap.add_argument("--cluster", choices=("start", "reuse"), default="start",
                    help="start: wait until no other Slurm cluster runs here, start the suite's, stop it at the end; "
                         "reuse: use the running one and leave it up")
    args = ap.parse_args()
    # A background job ignores SIGINT: let SIGTERM stop the soak too, putting the cluster back.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    s = SlurmSoak(args)
    s.cluster_up()
    try:
        result = s.main()
    finally:
        s.restore()
        for job in s.jobs:
            if job.job_id and show_job(job.job_id).get("JobState") not in (None, "COMPLETED", "FAILED", "CANCELLED"):
                slurm("scancel", str(job.job_id))
        s.cluster_down()
    t = soak.table(result)
    print(t)
    bad = sum(len(p["wrong"]) for p in result["per_kind"].values())
    unrec = sum(p["injected"] - p["recovered"] for p in result["per_kind"].values())
    summary = (f"{sum(p['injected'] for p in result['per_kind'].values())} injections in {result['runs']} jobs, "
               f"{result['wall_s'] / 60:.1f} min: {unrec} not recovered, {bad} wrong causes, "
               f"{len(result['losses'])} losses, {len(result['leaks'])} leaks")
    print(summary)
    sides = []
    for side, times in result["partition_times"].items():
        if times:
            sides.append(f"the {side}'s node {len(times)}x, {statistics.median(times):.1f} / {max(times):.1f} s")
    if sides:
        sides = "node_partition by side (median / max time to recover): " + "; ".join(sides)
        print(sides)
    for k, p in result["per_kind"].items():
        for w in p["wrong"]:
            print(f"  {k}: {w}")
    for x in result["losses"]:
        print(f"  loss: {x}")
    for x in result["leaks"]:
        print(f"  leak: {x}")
    for x in result["notes"]:
        print(f"  note: {x}")
    with open(os.path.join(s.work, "soak.json"), "w") as f:
        json.dump(result, f, indent=1)
    if args.docs:
        cmd = " ".join(["bench/soak_slurm.sh"] + sys.argv[1:])
        write_docs(f"{SECTION}\n\n`{cmd}` on {datetime.date.today()}, {soak.machine()}: the Slurm fault kinds "
                   f"(`bench/soak_slurm.py` says what each injects and what counts as recovered) on the Slurm "
                   f"suite's loopback cluster (3 nodes, each in its own network namespace), jobs of 2 nodes, "
                   f"{args.steps} steps each:\n\n{t}\n\n{summary}.\n"
                   + (f"\n{sides}: a cut-off leader's job waits for Slurm to find its node not responding "
                      f"and for Slurm's own requeue (its ~120 s BeginTime hold).\n" if sides else ""))
    ok = bad == 0 and unrec == 0 and not result["losses"] and not result["leaks"]
    if ok and not args.keep:
        shutil.rmtree(s.work, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
