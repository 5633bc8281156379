#!/usr/bin/python3
"""Slurm lead-time benchmark: how much of each allocation a time-limited job trains, when Slurm's
warning signal comes well before its limit (issue 25, "use the lead time").

  bench/slurm_lead_time_bench.sh [--build-dir build] [--time-min 3] [--signal-s 60] [--steps 14000]
                                 [--no-docs] [--keep]

Starts scripts/slurm-cluster.sh --netns (three nodes, each in its own network namespace) and submits
one 2-node job (1 rank of holdfast-train per node, the quickstart-size GPT, a checkpoint every 25
steps) with examples/slurm/holdfast.sbatch, its `#SBATCH --signal` line set to
`B:USR1@{signal-s}` and `--time={time-min}`, so that every attempt (holdfastd resubmits the job with
the script's lines) gets the same warning. The run needs several attempts (14000 steps: three
at ~40 steps/s, what 2 ranks do here on an idle machine; more when it is busy). Per attempt, from
lineage.db and the ranks' own log timestamps (one clock):

  allocation   the attempt's job: StartTime to EndTime (`scontrol show job`, whole seconds)
  warning      the preempt event holding the plan: the lead time, measured save, margin and how long
               the ranks trained on (daemon/preempt_plan.h)
  trained      first to last training step of the attempt (`step N/M` lines, train.log_every = 1)
  before limit the last training step to the allocation's end
  committed    the stop's checkpoint, against the end: it must commit before the limit

Then compares the final parameters with a fault-free 2-rank run of the same configuration
(holdfast-train --nproc 2): they must be bit-identical. Prints a table and rewrites the
"## Slurm lead time" section of docs/benchmarks.md unless --no-docs. Takes about
(attempts x time-min) minutes plus the reference run.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import sqlite3
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEP_RX = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d\d\d)Z\] \[info\] \[rank \d+\] step +(\d+)/")
WORK = "/tmp/holdfast-lead-time-bench"


def sh(cmd, env=None, check=True):
    return subprocess.run(cmd, env=env, check=check, text=True, capture_output=True)


def utc_seconds(text, fmt):
    t = datetime.datetime.strptime(text, fmt)
    return t.replace(tzinfo=datetime.timezone.utc).timestamp()


def write_files(args):
    corpus = "".join(open("/usr/share/common-licenses/" + n).read() for n in ("GPL-3", "LGPL-2.1", "Apache-2.0"))
    open(os.path.join(WORK, "corpus.txt"), "w").write(corpus)
    train = os.path.join(WORK, "train.toml")
    open(train, "w").write(f"""[model]
n_layer = 2
n_head = 4
n_embd = 64
block_size = 64
dropout = 0.1
[data]
format = "text"
path = "{WORK}/corpus.txt"
[train]
steps = {args.steps}
micro_batch = 4
seed = 11
threads = 1
log_every = 1
[optim]
lr = 3e-3
min_lr = 3e-4
warmup_steps = 5
[dist]
bucket_mb = 0.05
[checkpoint]
every_steps = 25
""")
    job = os.path.join(WORK, "job.toml")
    open(job, "w").write(f"""[job]
name = "lead-time-bench"
command = ["{args.build_dir}/trainer/holdfast-train", "--config", "{train}", "--set", "output.dir={WORK}/out",
           "--set", "checkpoint.dir={WORK}/ck", "--dump-final", "{WORK}/final"]
nproc = 1
checkpoint_dir = "{WORK}/ck"
[supervise]
poll_ms = 100
startup_timeout_s = 60
[health]
checkpoint_min_free_gb = 0.05
checkpoint_write_mb = 4
""")
    script = open(os.path.join(ROOT, "examples/slurm/holdfast.sbatch")).read()
    script, n = re.subn(r"^#SBATCH --signal=\S+$", f"#SBATCH --signal=B:USR1@{args.signal_s}", script, flags=re.M)
    if n != 1:
        raise SystemExit("examples/slurm/holdfast.sbatch has no single '#SBATCH --signal=' line to set")
    script = script.replace("#SBATCH --requeue", f"#SBATCH --requeue\n#SBATCH --time={args.time_min}", 1)
    sbatch = os.path.join(WORK, "holdfast-lead-time.sbatch")
    open(sbatch, "w").write(script)
    return train, job, sbatch


def wait_for_run(db, timeout_s):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        time.sleep(1)
        if not os.path.exists(db):
            continue
        try:
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
            row = con.execute("SELECT state FROM run ORDER BY created_ms DESC LIMIT 1").fetchone()
            con.close()
        except sqlite3.Error:
            continue
        if row and row[0] in ("succeeded", "failed", "stopped"):
            return row[0]
    return None


def job_times(job_id, env):
    out = sh(["scontrol", "show", "job", "-o", str(job_id)], env=env, check=False).stdout
    f = dict(kv.split("=", 1) for kv in out.split() if "=" in kv)
    # scontrol prints local time; the cluster and this script run on one machine in UTC (checked in main).
    return (utc_seconds(f["StartTime"], "%Y-%m-%dT%H:%M:%S"), utc_seconds(f["EndTime"], "%Y-%m-%dT%H:%M:%S"))


def attempts(db, logs):
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    rows = con.execute("SELECT attempt, slurm_job_id, started_ms, ended_ms, state, resumed_from_step "
                       "FROM attempt ORDER BY attempt").fetchall()
    events = con.execute("SELECT attempt, time_ms, kind, summary, action, evidence FROM event "
                         "ORDER BY id").fetchall()
    ckpts = con.execute("SELECT attempt, step, committed_ms FROM checkpoint ORDER BY step").fetchall()
    con.close()
    out = []
    for attempt, job, started, ended, state, resumed in rows:
        a = {"attempt": attempt, "job": job, "state": state, "resumed": resumed}
        for (ea, t, kind, summary, action, ev) in events:
            if ea == attempt and kind == "preempt" and "save_in_s" in (ev or ""):
                a["plan"] = json.loads(ev)
                a["plan_action"] = action
                a["warning_t"] = t / 1000.0
        steps = []
        for name in os.listdir(logs):
            if name.startswith(f"a{attempt}-") and "rank" in name:
                for line in open(os.path.join(logs, name)):
                    m = STEP_RX.match(line)
                    if m:
                        steps.append(utc_seconds(m.group(1), "%Y-%m-%dT%H:%M:%S.%f"))
        if steps:
            a["first_step"], a["last_step"] = min(steps), max(steps)
        mine = [c for c in ckpts if c[0] == attempt]
        if mine:
            a["last_commit_step"], a["last_commit_t"] = mine[-1][1], mine[-1][2] / 1000.0
        out.append(a)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--time-min", type=int, default=3)
    ap.add_argument("--signal-s", type=int, default=60)
    ap.add_argument("--steps", type=int, default=14000)
    ap.add_argument("--timeout-s", type=float, default=1800)
    ap.add_argument("--no-docs", action="store_true")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    args.build_dir = os.path.abspath(args.build_dir)
    if os.geteuid() != 0:
        raise SystemExit("run as root: the bench starts a Slurm cluster (scripts/slurm-cluster.sh)")
    if time.strftime("%z") != "+0000":
        raise SystemExit("run with TZ=UTC: scontrol's local times are read as UTC, like the ranks' log lines")
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    train, job, sbatch = write_files(args)
    cluster = os.path.join(ROOT, "scripts/slurm-cluster.sh")
    env = dict(os.environ)
    sh([cluster, "start", "--netns"], env=env)
    env["SLURM_CONF"] = "/tmp/holdfast-slurm/slurm.conf"
    jobs = {}
    try:
        e = dict(env, RUN_DIR=WORK + "/run", CONFIG=job, HOLDFASTD=os.path.join(args.build_dir, "daemon/holdfastd"))
        sh(["sbatch", "--parsable", "-N2", "--chdir", WORK, "--output", WORK + "/job-%j.out", sbatch], env=e)
        db = os.path.join(WORK, "run/lineage.db")
        deadline = time.time() + args.timeout_s
        state = None
        while time.time() < deadline and state is None:
            # Every job's allocation, while scontrol still knows it.
            for line in sh(["squeue", "-h", "-o", "%i %T"], env=env, check=False).stdout.splitlines():
                jid, st = line.split()
                if st == "RUNNING" and jid not in jobs:
                    jobs[jid] = job_times(jid, env)
            state = wait_for_run(db, 2)
        if state != "succeeded":
            raise SystemExit(f"the run ended {state!r}; see {WORK}")
        rows = attempts(db, os.path.join(WORK, "run/logs"))
    finally:
        sh([cluster, "stop"], env=dict(os.environ), check=False)
    ref = sh([os.path.join(args.build_dir, "trainer/holdfast-train"), "--config", train, "--nproc", "2", "--set",
              f"output.dir={WORK}/ref-out", "--dump-final", f"{WORK}/ref-final"], check=False)
    same = (ref.returncode == 0 and open(f"{WORK}/ref-final/params.bin", "rb").read() ==
            open(f"{WORK}/final/params.bin", "rb").read())

    lines = [
        "## Slurm lead time",
        "",
        f"Measured {datetime.date.today()} by `bench/slurm_lead_time_bench.sh --time-min {args.time_min} "
        f"--signal-s {args.signal_s} --steps {args.steps}` on {platform.node()} ({os.cpu_count()} cores): a real "
        "Slurm cluster on this machine (`scripts/slurm-cluster.sh --netns`), one 2-node job (1 rank of holdfast-train "
        f"per node, the quickstart-size GPT, a checkpoint every 25 steps) with `--time={args.time_min} "
        f"--signal=B:USR1@{args.signal_s}` in every attempt, `[supervise] preempt_margin_s` at its default. Per "
        "attempt: the lead time Slurm's warning left, the plan (measured save + two p99 steps + margin), how long "
        "the ranks trained on after the warning, the share of the allocation between its first and last training "
        "step, and how long before the limit the last step ran and the stop's checkpoint committed.",
        "",
        "| attempt | allocation | lead at warning | save + 2 steps + margin | trained on after warning | "
        "training share | last step before limit | checkpoint committed before limit |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for a in rows:
        alloc = jobs.get(str(a["job"]))
        if not alloc or "first_step" not in a:
            continue
        start, end = alloc
        share = (a["last_step"] - a["first_step"]) / (end - start)
        p = a.get("plan")
        plan = (f"{p.get('save_s', float('nan')):.1f} + {p.get('step_allowance_s', 0):.1f} + "
                f"{p.get('margin_s', 0):.0f} s" if p else "-")
        lead = f"{p['lead_time_s']:.0f} s" if p and "lead_time_s" in p else "-"
        on = f"{p['save_in_s']:.1f} s" if p else "- (finished)"
        commit = f"{end - a['last_commit_t']:.1f} s" if a.get("last_commit_t") and p else "-"
        lines.append(f"| {a['attempt']} (job {a['job']}) | {end - start:.0f} s | {lead} | {plan} | {on} | "
                     f"**{share:.0%}** | {end - a['last_step']:.1f} s | {commit} |")
    lines += ["", f"Final parameters bit-identical to the fault-free 2-rank run: **{'yes' if same else 'NO'}**.", ""]
    text = "\n".join(lines)
    print(text)
    if not args.no_docs:
        doc = os.path.join(ROOT, "docs/benchmarks.md")
        cur = open(doc).read()
        start = cur.find("## Slurm lead time")
        if start < 0:
            cur = cur.rstrip("\n") + "\n\n" + text
        else:
            end = cur.find("\n## ", start + 1)
            cur = cur[:start] + text + ("" if end < 0 else cur[end:])
        open(doc, "w").write(cur.rstrip("\n") + "\n")
        print(f"wrote {doc}")
    if not args.keep:
        shutil.rmtree(WORK, ignore_errors=True)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
