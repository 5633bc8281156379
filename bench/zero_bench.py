#!/usr/bin/python3
"""Step time of holdfast-train with ZeRO-1 against plain data parallelism, same model, data and world.

  bench/zero_bench.sh [--holdfast-train PATH] [--rounds 3] [--steps 30] [--skip 5] [--dp 2] [--no-docs]

The model, data and per-rank settings of bench/trainer_bench.toml (3.3M parameters, micro_batch 8 per
rank, 1 thread per rank). For each world size it alternates runs with dist.zero_stage = 0 (gradients
allreduced, every rank updates all of AdamW's state) and 1 (gradients reduce-scattered, each rank updates
its slice, parameters all-gathered), `rounds` times each; a run's figure is its median step_ms after
`skip` warm-up steps, a mode's the median over its runs. Also reports the AdamW state each rank holds
(from the trainer's log) and the run's median time waiting on communication (comm_wait_ms). Prints a
table and rewrites the "## ZeRO-1" section of docs/benchmarks.md.
"""

import argparse
import datetime
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trainer_bench  # noqa: E402  (same folder: machine(), data_override(), the config)

DOCS = trainer_bench.DOCS
SECTION = "## ZeRO-1"


def run_once(args, dp, zero, sets, tmp, n):
    metrics = os.path.join(tmp, f"dp{dp}-z{zero}-{n}.jsonl")
    cmd = [args.holdfast_train, "--config", trainer_bench.CONFIG, "--metrics", metrics,
           "--set", f"train.steps={args.steps}", "--nproc", str(dp), "--set", f"dist.zero_stage={zero}"]
    for s in sets:
        cmd += ["--set", s]
    cwd = os.path.join(tmp, f"run-{n}")
    os.makedirs(cwd)
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=args.env)
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        sys.exit(f"DP={dp} zero_stage={zero} failed (exit {proc.returncode}): {shlex.join(cmd)}\n{out[-3000:]}")
    with open(metrics) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    kept = [r for r in rows if r["step"] > args.skip]
    if len(kept) < 5:
        sys.exit(f"DP={dp}: {len(rows)} metric lines, need more than skip+5 = {args.skip + 5}")
    if zero:
        state = [int(b) for b in re.findall(r"ZeRO-1, AdamW state (\d+) bytes on this rank", out)]
    else:
        state = [int(b) for b in re.findall(r"AdamW state (\d+) bytes on every rank", out)]
    return {"step_ms": statistics.median(r["step_ms"] for r in kept),
            "comm_ms": statistics.median(r.get("comm_wait_ms", 0.0) for r in kept),
            "state": max(state) if state else 0, "loss": rows[-1]["loss"]}


def render(results, args, info, data_desc, command):
    lines = [SECTION, "",
             "Median step time of `holdfast-train` with `dist.zero_stage = 1` (ZeRO stage 1: gradients "
             "reduce-scattered bucket by bucket during backward, each rank updating only its slice of "
             "AdamW's state, the updated parameters all-gathered bucket by bucket) against `dist.zero_stage = 0` "
             "(gradients allreduced, every rank updating all of it), same world size. Model: "
             "bench/trainer_bench.toml (3.29M parameters), micro_batch 8 per rank, 1 thread per rank, "
             f"float32 CPU, Gloo. Each run trains {args.steps} steps; the first {args.skip} are dropped; a run's "
             f"figure is its median step_ms; a mode's figure is the median over {args.rounds} runs, "
             "the two modes alternating.", "",
             f"- Machine: {info['cpu']}; {info['cores']}; Linux {info['kernel']}",
             f"- Torch: {info['torch']}",
             f"- Data: {data_desc}",
             f"- Date: {datetime.date.today().isoformat()}; load average before/after "
             f"{info['load_before']:.2f}/{info['load_after']:.2f} (a busy machine inflates both modes)",
             "",
             "| DP | plain step ms (median; runs) | ZeRO-1 step ms (median; runs) | ZeRO-1/plain | "
             "comm wait ms, plain / ZeRO-1 | AdamW state per rank, plain / ZeRO-1 |",
             "| --- | --- | --- | --- | --- | --- |"]
    for dp in args.dp:
        a, b = results[(dp, 0)], results[(dp, 1)]

        def cell(runs):
            ms = [r["step_ms"] for r in runs]
            return f"{statistics.median(ms):.1f} ({', '.join(f'{m:.1f}' for m in ms)})"
        ratio = statistics.median(r["step_ms"] for r in b) / statistics.median(r["step_ms"] for r in a)
        comm = (f"{statistics.median(r['comm_ms'] for r in a):.1f} / "
                f"{statistics.median(r['comm_ms'] for r in b):.1f}")
        state = f"{a[0]['state'] / 1e6:.2f} MB / {b[0]['state'] / 1e6:.2f} MB"
        lines.append(f"| {dp} | {cell(a)} | {cell(b)} | {ratio:.3f} | {comm} | {state} |")
    lines += ["", "ZeRO-1/plain below 1 means ZeRO-1 is faster. The AdamW state of the larger slice is shown "
              "(slices differ by at most one element).", "", "Command:", "", "```", command, "```", ""]
    return "\n".join(lines)


def write_docs(section):
    trainer_bench.replace_section(section, SECTION)

def main():
    default_bin = os.environ.get("HOLDFAST_TRAIN") or os.path.join(trainer_bench.REPO, "build", "trainer",
                                                                   "holdfast-train")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--holdfast-train", default=default_bin)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--skip", type=int, default=5)
    ap.add_argument("--dp", default="2", help="comma-separated world sizes (> 1)")
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()
    args.dp = [int(x) for x in args.dp.split(",")]
    if any(dp < 2 for dp in args.dp):
        sys.exit("--dp: ZeRO-1 needs a world size of 2 or more")
    if not os.access(args.holdfast_train, os.X_OK):
        sys.exit(f"holdfast-train not found ({args.holdfast_train}); build it or pass --holdfast-train PATH")
    args.env = dict(os.environ, OMP_NUM_THREADS="1")
    command = ("bench/zero_bench.sh " + shlex.join(sys.argv[1:])).rstrip()
    info = trainer_bench.machine()
    info["load_before"] = os.getloadavg()[0]
    results = {}
    with tempfile.TemporaryDirectory(prefix="holdfast-zero-bench-") as tmp:
        sets, data_desc = trainer_bench.data_override(tmp)
        n = 0
        for dp in args.dp:
            for r in range(args.rounds):
                for zero in ((0, 1) if r % 2 == 0 else (1, 0)):
                    n += 1
                    res = run_once(args, dp, zero, sets, tmp, n)
                    results.setdefault((dp, zero), []).append(res)
                    print(f"DP={dp} round {r + 1} zero_stage={zero}: median step {res['step_ms']:8.1f} ms, "
                          f"comm wait {res['comm_ms']:.1f} ms, AdamW state {res['state']} B/rank "
                          f"(final loss {res['loss']:.4f})", flush=True)
    info["load_after"] = os.getloadavg()[0]
    section = render(results, args, info, data_desc, command)
    print()
    print(section)
    if not args.no_docs:
        write_docs(section)
        print(f"wrote the '{SECTION}' section of {os.path.relpath(DOCS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
