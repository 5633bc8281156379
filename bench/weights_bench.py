#!/usr/bin/python3
"""Policy weights from the GRPO learner to its rollout workers: the exchange directory's files
against the network (trainer/rl/weights_wire.h).

  bench/weights_bench.sh [--build DIR] [--workers 2] [--rounds 3] [--no-docs]

Runs holdfast-weights-bench (bench/weights_bench.cc) for the RL example's policy (117,504
parameters) and a 100M-parameter state, in both modes, --rounds times each (interleaved): the time
from a version's hand-over by the learner's publisher thread to the last worker having it loaded
(files: weights/LATEST polled every 1 ms, then the folder read; network: the WeightsSubscriber's
verified copy). The exchange directory is under /tmp (this machine's disk; a shared file system
adds its own latency to the file path). Prints a table and rewrites the "## RL weights: files vs
network" section of docs/benchmarks.md.
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trainer_bench  # noqa: E402

SECTION = "## RL weights: files vs network"
SIZES = [("the RL example's policy", 117504, 20), ("a 100M-parameter state", 100_000_000, 3)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(trainer_bench.REPO, "build"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()
    binary = os.path.join(args.build, "bench", "holdfast-weights-bench")
    info = trainer_bench.machine()
    info["load_before"] = os.getloadavg()[0]
    results = {}
    with tempfile.TemporaryDirectory(prefix="weights_bench.") as work:
        for name, floats, versions in SIZES:
            for r in range(args.rounds):
                for mode in ("files", "network"):
                    out = subprocess.run([binary, "--dir", os.path.join(work, "x"), "--mode", mode, "--floats",
                                          str(floats), "--versions", str(versions), "--workers", str(args.workers)],
                                         check=True, capture_output=True, text=True).stdout
                    j = json.loads(out.strip().splitlines()[-1])
                    results.setdefault((name, mode), []).append(j["median_ms"])
                    print(f"{name:28s} {mode:8s} round {r + 1}: median {j['median_ms']:9.2f} ms, "
                          f"max {j['max_ms']:9.2f} ms", flush=True)
    info["load_after"] = os.getloadavg()[0]
    lines = [SECTION, "",
             "A version handed over by the learner's publisher thread until the last of "
             f"{args.workers} workers has it loaded (`bench/weights_bench.sh`, `bench/weights_bench.cc`): files = "
             "written to the exchange directory (fsync, rename, `weights/LATEST`) and read back by each worker "
             "polling every 1 ms; network = sent by learner rank 0's WeightsServer to each worker's "
             "WeightsSubscriber, checksummed and parsed (the files are still written after it, as in a run). "
             "Workers are threads of one process on this machine; the exchange directory is on local disk. "
             f"Median over {args.rounds} rounds of each round's median over its versions.", "",
             f"- Machine: {info['cpu']}; {info['cores']}; Linux {info['kernel']}",
             f"- Date: {datetime.date.today().isoformat()}; load average before/after "
             f"{info['load_before']:.2f}/{info['load_after']:.2f}", "",
             "| policy | parameters | files: ms | network: ms |", "| --- | ---: | ---: | ---: |"]
    for name, floats, _ in SIZES:
        f = statistics.median(results[(name, "files")])
        n = statistics.median(results[(name, "network")])
        lines.append(f"| {name} | {floats:,} | {f:.1f} | {n:.1f} |")
    lines.append("")
    trainer_bench.publish_section(lines, SECTION, not args.no_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
