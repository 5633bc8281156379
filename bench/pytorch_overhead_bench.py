#!/usr/bin/python3
"""What supervision costs a PyTorch job: the DDP example, side by side.

  bench/pytorch_overhead_bench.sh [--rounds 5] [--steps 150] [--skip 10]

Runs examples/pytorch_ddp/train.py (2 ranks, Gloo, Debian's python3-torch), alternating:
  plain       the ranks started directly with torchrun's environment, without the progress
              module (--no-progress): what a user runs today;
  bare        the same command under holdfastd, still without the module (crash restarts only);
  supervised  under holdfastd with `import holdfast` writing the progress record (every phase,
              step and DDP bucket collective) and the daemon polling it.
The module's own cost is supervised vs bare; all of supervision's, supervised vs plain.
Each run's figure is the median step_ms of rank 0 after the first --skip steps; a side's figure
is the median over the rounds. Prints a Markdown table for docs/benchmarks.md. Needs build/
(holdfastd) and Debian's common-licenses texts.
"""

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
TRAIN = os.path.join(ROOT, "examples", "pytorch_ddp", "train.py")
MODEL_ARGS = ["--width", "512", "--context", "64", "--batch", "64", "--checkpoint-every", "1000000"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def step_ms(out, skip):
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics-rank0.jsonl")) if line.strip()]
    return statistics.median(r["step_ms"] for r in rows[skip:])


def run_plain(work, corpus, steps):
    out = os.path.join(work, "plain")
    port = free_port()
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        env.pop("HOLDFAST_PROGRESS_PATH", None)
        procs.append(subprocess.Popen(["/usr/bin/python3", TRAIN, "--data", corpus, "--out", out, "--steps",
                                       str(steps), "--no-progress"] + MODEL_ARGS, env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
    for p in procs:
        if p.wait() != 0:
            raise SystemExit(f"plain run failed (exit {p.returncode})")
    return out


def run_supervised(work, corpus, steps, module=True):
    out = os.path.join(work, "supervised")
    job = os.path.join(work, "job.toml")
    cmd = ["/usr/bin/python3", TRAIN, "--data", corpus, "--out", out, "--steps", str(steps)] + MODEL_ARGS
    if not module:
        cmd.append("--no-progress")
    with open(job, "w") as f:
        f.write("[job]\nname = \"overhead\"\ncommand = " + json.dumps(cmd) + "\nnproc = 2\n"
                f"[job.env]\nPYTHONPATH = \"{ROOT}/common/python\"\nOMP_NUM_THREADS = \"1\"\n"
                "[supervise]\npoll_ms = 200\nstartup_timeout_s = 120\n"
                "[health]\ncheckpoint_min_free_gb = 0.05\ncheckpoint_write_mb = 4\n")
    rc = subprocess.run([os.path.join(ROOT, "build", "daemon", "holdfastd"), "--run-dir", os.path.join(work, "run"),
                         "--config", job], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise SystemExit(f"supervised run failed (holdfastd exit {rc})")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--skip", type=int, default=10)
    args = ap.parse_args()
    plain, bare, supervised = [], [], []
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="hf-overhead-") as work:
        corpus = os.path.join(work, "corpus.txt")
        with open(corpus, "wb") as f:
            for name in ("GPL-3", "LGPL-2.1", "Apache-2.0"):
                f.write(open(os.path.join("/usr/share/common-licenses", name), "rb").read())
        for r in range(args.rounds):
            sides = (("plain", run_plain, plain),
                     ("bare", lambda w, c, n: run_supervised(w, c, n, module=False), bare),
                     ("supervised", run_supervised, supervised))
            for side, fn, into in sides:
                rdir = os.path.join(work, f"{side}-{r}")
                os.makedirs(rdir)
                into.append(step_ms(fn(rdir, corpus, args.steps), args.skip))
                print(f"round {r + 1} {side}: {into[-1]:.2f} ms", file=sys.stderr, flush=True)
    p, b, s = statistics.median(plain), statistics.median(bare), statistics.median(supervised)
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"- Machine: {cpu}, {os.cpu_count()} CPUs; load average before/after {load_before:.2f}/{os.getloadavg()[0]:.2f}")
    print(f"- Date: {time.strftime('%Y-%m-%d')}; {args.rounds} rounds alternating, {args.steps} steps each, "
          f"median step_ms of rank 0 after {args.skip} steps")
    print()
    print("| side | step ms (median; rounds) | vs plain |")
    print("| --- | --- | --- |")
    print(f"| plain (no module, no supervisor) | {p:.2f} ({', '.join(f'{x:.2f}' for x in plain)}) | 1.000 |")
    print(f"| bare (holdfastd, no module: progress unknown) | {b:.2f} ({', '.join(f'{x:.2f}' for x in bare)}) "
          f"| {b / p:.3f} |")
    print(f"| supervised (holdfastd + progress module) | {s:.2f} ({', '.join(f'{x:.2f}' for x in supervised)}) "
          f"| {s / p:.3f} |")
    print()
    print(f"The module's own cost (supervised / bare): {s / b:.3f}")


if __name__ == "__main__":
    main()
