#!/usr/bin/python3
"""Slurm requeue benchmark: from the failure that makes holdfastd requeue a job to the
requeued job's first training step, on a real Slurm cluster on this machine.

  bench/slurm_requeue_bench.sh [--build-dir build] [--rounds 5] [--peer-rounds 1] [--no-docs] [--keep]

Starts scripts/slurm-cluster.sh --netns (three nodes, each in its own network namespace) with
holdfast-slurmctld-epilog as EpilogSlurmctld, then per round submits a 2-node job whose rank on
n2 crashes twice (steps 8 and 14: a host implicated twice), so the recovery policy requeues the
job excluding n2. Measured per round, from the ranks' own log timestamps (one clock):

  failure      the second `FAULT INJECTED` line (the rank aborts right after it)
  requeued     lineage's requeue event
  running      attempt 2 started (holdfastd of the requeued job opened the run)
  first step   the first `step N/M` line of attempt 2 (train.log_every = 1)

for both requeue paths: `epilog` (same job id; the epilog excludes n2 and starts it now) and
`resubmit` (a new job with --exclude, --dependency=afterany). The peer, in the same run: Slurm's
own requeue of the same job (`--requeue-path epilog` with no EpilogSlurmctld installed would be
the same as `scontrol requeue`): the requeued job waits for BeginTime; `--peer-rounds 0` skips it
(each peer round takes ~2 minutes).

Prints a table and rewrites the "## Slurm requeue" section of docs/benchmarks.md unless --no-docs.
"""

import argparse
import datetime
import os
import platform
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# holdfast-train's log lines: "[2026-12-02T04:16:21.123Z] [info] [rank 1] step ..." (UTC; docs/cli.md).
STEP_RX = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d\d\d)Z\] \[info\] \[rank \d+\] step +(\d+)/")
FAULT_RX = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d\d\d)Z\] \[warning\] \[rank \d+\] FAULT INJECTED")


def sh(cmd, env=None, check=True):
    return subprocess.run(cmd, env=env, check=check, text=True, capture_output=True)


def log_seconds(m):
    t = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f")
    return t.replace(tzinfo=datetime.timezone.utc).timestamp()


def write_files(work, build, steps):
    corpus = "".join(open("/usr/share/common-licenses/" + n).read() for n in ("GPL-3", "LGPL-2.1", "Apache-2.0"))
    open(os.path.join(work, "corpus.txt"), "w").write(corpus)
    open(os.path.join(work, "train.toml"), "w").write(f"""[model]
n_layer = 2
n_head = 4
n_embd = 64
block_size = 64
dropout = 0.1
[data]
format = "text"
path = "{work}/corpus.txt"
[train]
steps = {steps}
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
every_steps = 5
""")
    wrapper = os.path.join(work, "faulty.sh")
    open(wrapper, "w").write(f"""#!/bin/bash
args=()
if [ "$HOLDFAST_HOST" = "$BAD_HOST" ]; then args=(--inject-fault "crash@$HOLDFAST_RANK:$((8 + 6 * HOLDFAST_GENERATION))"); fi
exec {build}/trainer/holdfast-train "$@" "${{args[@]}}"
""")
    os.chmod(wrapper, 0o755)


def job_toml(work, rnd):
    d = os.path.join(work, rnd)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "job.toml")
    open(path, "w").write(f"""[job]
name = "requeue-bench"
command = ["{work}/faulty.sh", "--config", "{work}/train.toml", "--set", "output.dir={d}/out",
           "--set", "checkpoint.dir={d}/ck"]
nproc = 1
checkpoint_dir = "{d}/ck"
[supervise]
poll_ms = 100
startup_timeout_s = 60
term_grace_s = 3
""")
    return d, path


def run_round(args, work, rnd, path, env):
    d, job = job_toml(work, rnd)
    e = dict(env, RUN_DIR=d + "/run", CONFIG=job, HOLDFASTD=os.path.join(args.build_dir, "daemon/holdfastd"),
             BAD_HOST="n2")
    extra = ["--requeue-path", path]
    r = sh(["sbatch", "--parsable", "-N2", "--chdir", d, "--output", d + "/job-%j.out",
            os.path.join(ROOT, "examples/slurm/holdfast.sbatch")] + extra, env=e)
    job_id = r.stdout.strip().split(";")[0]
    db = os.path.join(d, "run/lineage.db")
    deadline = time.time() + args.timeout_s
    state = None
    while time.time() < deadline:
        time.sleep(0.5)
        if not os.path.exists(db):
            continue
        try:
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
            row = con.execute("SELECT state FROM run ORDER BY created_ms DESC LIMIT 1").fetchone()
            con.close()
        except sqlite3.Error:
            continue
        state = row[0] if row else None
        if state in ("succeeded", "failed", "stopped"):
            break
    if state != "succeeded":
        raise SystemExit(f"round {rnd} ({path}): run ended {state!r}; see {d}")
    logs = os.path.join(d, "run/logs")
    fault_t = None
    for name in ("a1-g1-rank1.log",):
        for line in open(os.path.join(logs, name)):
            m = FAULT_RX.match(line)
            if m:
                fault_t = log_seconds(m)
    first = None
    for name in sorted(os.listdir(logs)):
        if not name.startswith("a2-g0-rank"):
            continue
        for line in open(os.path.join(logs, name)):
            m = STEP_RX.match(line)
            if m:
                t = log_seconds(m)
                first = t if first is None else min(first, t)
                break
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    requeued = con.execute("SELECT MIN(time_ms) FROM event WHERE kind = 'requeue'").fetchone()[0] / 1000.0
    started = con.execute("SELECT started_ms FROM attempt WHERE attempt = 2").fetchone()[0] / 1000.0
    nodes = con.execute("SELECT nodes FROM attempt WHERE attempt = 2").fetchone()[0]
    con.close()
    if fault_t is None or first is None:
        raise SystemExit(f"round {rnd}: no fault or no first step in {logs}")
    return {"job": job_id, "nodes": nodes, "requeued": requeued - fault_t, "running": started - fault_t,
            "first_step": first - fault_t}


def peer_round(args, work, env):
    """Slurm alone: `scontrol requeue` of a running job; seconds until it runs again."""
    d = os.path.join(work, "peer")
    os.makedirs(d, exist_ok=True)
    r = sh(["sbatch", "--parsable", "-N2", "--requeue", "--chdir", d, "--output", d + "/job-%j.out",
            "--wrap", "srun sleep 600"], env=env)
    job = r.stdout.strip()
    while "JobState=RUNNING" not in sh(["scontrol", "show", "job", job, "-o"], env=env).stdout:
        time.sleep(0.1)
    t0 = time.time()
    sh(["scontrol", "requeue", job], env=env)
    time.sleep(1)
    while "JobState=RUNNING" not in sh(["scontrol", "show", "job", job, "-o"], env=env).stdout:
        time.sleep(0.5)
        if time.time() - t0 > 400:
            break
    t = time.time() - t0
    sh(["scancel", job], env=env, check=False)
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--peer-rounds", type=int, default=1)
    ap.add_argument("--timeout-s", type=float, default=180)
    ap.add_argument("--no-docs", action="store_true")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    args.build_dir = os.path.abspath(args.build_dir)
    if os.geteuid() != 0:
        raise SystemExit("run as root: the bench starts a Slurm cluster (scripts/slurm-cluster.sh)")
    work = "/tmp/holdfast-requeue-bench"
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    write_files(work, args.build_dir, 40)
    epilog = os.path.join(work, "holdfast-slurmctld-epilog.sh")
    open(epilog, "w").write(f"""#!/bin/bash
exec {args.build_dir}/scheduler/holdfast-slurmctld-epilog --slurm-conf /tmp/holdfast-slurm/slurm.conf --log {work}/epilog.log
""")
    os.chmod(epilog, 0o755)
    cluster = os.path.join(ROOT, "scripts/slurm-cluster.sh")
    env = dict(os.environ, HOLDFAST_SLURM_EPILOG_SLURMCTLD=epilog)
    sh([cluster, "start", "--netns"], env=env)
    env["SLURM_CONF"] = "/tmp/holdfast-slurm/slurm.conf"
    results = {"epilog": [], "resubmit": []}
    peer = []
    try:
        for i in range(args.rounds):
            for path in ("epilog", "resubmit"):  # alternated, so drift hits both alike
                r = run_round(args, work, f"{path}-{i}", path, env)
                results[path].append(r)
                print(f"{path:9s} round {i}: failure -> requeued {r['requeued']:.2f} s, running {r['running']:.2f} s, "
                      f"first step {r['first_step']:.2f} s (job {r['job']}, attempt 2 on {r['nodes']})", flush=True)
        for i in range(args.peer_rounds):
            # Slurm's own requeue, without holdfast-slurmctld-epilog: restart the controller without it.
            if i == 0:
                sh([cluster, "start", "--netns"], env=dict(os.environ))
            t = peer_round(args, work, env)
            peer.append(t)
            print(f"peer      round {i}: scontrol requeue -> running again {t:.1f} s", flush=True)
    finally:
        sh([cluster, "stop"], env=dict(os.environ), check=False)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    def med(path, key):
        return statistics.median(r[key] for r in results[path])

    cpu = "?"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    lines = [
        "## Slurm requeue",
        "",
        f"Measured {datetime.date.today()} by `bench/slurm_requeue_bench.sh --rounds {args.rounds} --peer-rounds "
        f"{args.peer_rounds}` on {platform.node()} ({cpu}, {os.cpu_count()} cores): a real Slurm "
        f"{sh(['sinfo', '--version'], check=False).stdout.strip() or '22.05'} cluster on this machine "
        "(`scripts/slurm-cluster.sh --netns`: three slurmd, each node in its own network namespace), a 2-node "
        "job (1 rank of holdfast-train per node, the quickstart-size GPT) whose rank on n2 crashes at steps 8 "
        "and 14, so the recovery policy requeues the job excluding n2. Times from the second crash (the rank's "
        "`FAULT INJECTED` line) to: lineage's requeue event, attempt 2 opened by the requeued job's holdfastd, "
        "and attempt 2's first training step. Medians of the rounds; the two paths alternate.",
        "",
        "| path | rounds | requeue decided | requeued job running | first training step |",
        "|---|---|---|---|---|",
    ]
    for path, what in (("epilog", "epilog (same job; holdfast-slurmctld-epilog)"),
                       ("resubmit", "resubmit (new job, --exclude, no admin setting)")):
        lines.append(f"| {what} | {len(results[path])} | {med(path, 'requeued'):.2f} s | {med(path, 'running'):.2f} s "
                     f"| **{med(path, 'first_step'):.2f} s** |")
    if peer:
        lines.append(f"| peer: Slurm's own requeue (`scontrol requeue`, no epilog), same cluster | {len(peer)} | - | "
                     f"{statistics.median(peer):.1f} s | - |")
    lines += ["", "Every round's attempt 2 ran on n1,n3 (n2 excluded). Goal: <= 5 s for both paths.", ""]
    text = "\n".join(lines)
    print()
    print(text)
    if not args.no_docs:
        doc = os.path.join(ROOT, "docs/benchmarks.md")
        cur = open(doc).read()
        start = cur.find("## Slurm requeue")
        if start < 0:
            cur = cur.rstrip("\n") + "\n\n" + text
        else:
            end = cur.find("\n## ", start + 1)
            cur = cur[:start] + text + ("" if end < 0 else cur[end:])
        open(doc, "w").write(cur.rstrip("\n") + "\n")
        print(f"wrote {doc}")


if __name__ == "__main__":
    sys.exit(main())
