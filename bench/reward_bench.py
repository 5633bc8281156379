#!/usr/bin/python3
"""The reward service's throughput: the task's rule against a learned reward model, and the model
with and without batching across requests.

  bench/reward_bench.sh [--build DIR] [--clients 1,8] [--seconds 5] [--rounds 3] [--no-docs]

Trains a small reward model once (examples/rl/rm.toml's model, 200 steps from random weights: its
quality does not matter here, only its size), then for each service configuration starts a real
`holdfast-reward` (1 LibTorch thread) and, for each client count, that many client threads (one
connection each) send requests of 8 items (one GRPO group: 8 completions of a train prompt) back to
back for --seconds. Per configuration and client count: requests answered per second (median over
--rounds) and the mean texts per scorer call (from the service's stats line).

- rule: the task's check (the peer: what a service costs without a model);
- model, --batch 8 and --batch 64: every request waiting when the scorer is free goes into its next
  call (up to 16 forwards' worth), scored in forwards of exactly --batch rows (docs/rl-reward.md: a
  text's reward must not depend on its batch), so --batch 64 pays for 64 rows even when one request
  of 8 texts waits.

Prints a table and rewrites the "## Reward service" section of docs/benchmarks.md.
"""

import argparse
import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trainer_bench  # noqa: E402  (same folder: machine())

REPO = trainer_bench.REPO
SECTION = "## Reward service"


def start_service(args, work, extra):
    addr = os.path.join(work, "reward.addr")
    if os.path.exists(addr):
        os.remove(addr)
    log = open(os.path.join(work, "service.log"), "w")
    proc = subprocess.Popen([args.reward, "--task", "add2", "--addr-file", addr, "--log-every", "0"] + extra,
                            stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        if os.path.exists(addr):
            host, port = open(addr).read().strip().rsplit(":", 1)
            return proc, (host, int(port))
        if proc.poll() is not None:
            sys.exit(f"holdfast-reward exited {proc.returncode}: see {log.name}")
        time.sleep(0.05)
    proc.kill()
    sys.exit("holdfast-reward did not write its address file within 30 s")


def client(address, seconds, start, counts, i):
    s = socket.create_connection(address)
    f = s.makefile("rw")
    items = [{"prompt_index": i * 1000 + k, "split": "train", "completion": f"{k}{k}\n"} for k in range(8)]
    line = json.dumps({"id": 0, "task": "add2", "items": items}) + "\n"
    start.wait()
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        f.write(line)
        f.flush()
        answer = json.loads(f.readline())
        if len(answer.get("rewards", [])) != 8:
            sys.exit(f"bad answer: {answer}")
        n += 1
    counts[i] = n
    s.close()


def scorer_texts_per_call(log_path):
    """Items / scorer calls from the service's stop line ("... (N items, B bad requests, C scorer calls)")."""
    import re
    m = re.search(r"\((\d+) items, \d+ bad requests, (\d+) scorer calls\)", open(log_path).read())
    return int(m.group(1)) / int(m.group(2)) if m and int(m.group(2)) > 0 else None


def measure(address, clients, seconds):
    start = threading.Event()
    counts = [0] * clients
    threads = [threading.Thread(target=client, args=(address, seconds, start, counts, i)) for i in range(clients)]
    for t in threads:
        t.start()
    t0 = time.monotonic()
    start.set()
    for t in threads:
        t.join()
    return sum(counts) / (time.monotonic() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--clients", default="1,8")
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()
    args.reward = os.path.join(args.build, "trainer", "rl", "holdfast-reward")
    train = os.path.join(args.build, "trainer", "holdfast-train")
    clients = [int(c) for c in args.clients.split(",")]
    info = trainer_bench.machine()
    info["load_before"] = os.getloadavg()[0]
    work = tempfile.mkdtemp(prefix="reward_bench.")
    pairs = os.path.join(work, "pairs.jsonl")
    subprocess.run([args.reward, "--task", "add2", "--emit", "reward-pairs", "--count", "2000", "--out", pairs],
                   check=True, stdout=subprocess.DEVNULL)
    cfg = os.path.join(work, "rm.toml")
    with open(os.path.join(REPO, "examples", "rl", "rm.toml")) as f:
        text = f.read()
    with open(cfg, "w") as f:
        f.write(text.replace('"../../runs/rl/data/reward_pairs.jsonl"', json.dumps(pairs))
                .replace('init_from = "../../runs/rl/sft/final"', "")
                .replace('dir = "runs/rl/rm"', f"dir = {json.dumps(os.path.join(work, 'rm'))}"))
    model = os.path.join(work, "rm", "final")
    subprocess.run([train, "--config", cfg, "--set", "train.steps=200", "--set", "eval.every_steps=0",
                    "--dump-final", model], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    configs = [("rule (the task's check)", []),
               ("model, forwards of 8 rows (--batch 8)", ["--model", model, "--model-config", cfg, "--batch", "8"]),
               ("model, forwards of 64 rows (--batch 64)", ["--model", model, "--model-config", cfg,
                                                             "--batch", "64"])]
    results, per_call = {}, {}
    for name, extra in configs:
        for c in clients:  # a service per client count: its stop line counts that count's calls
            proc, address = start_service(args, work, extra)
            try:
                rates = [measure(address, c, args.seconds) for _ in range(args.rounds)]
            finally:
                proc.terminate()
                proc.wait()
            results[(name, c)] = statistics.median(rates)
            per_call[(name, c)] = scorer_texts_per_call(os.path.join(work, "service.log")) if extra else None
            batched = f", {per_call[(name, c)]:.1f} texts per scorer call" if per_call[(name, c)] else ""
            print(f"{name:42s} {c:3d} clients: {results[(name, c)]:8.1f} requests/s "
                  f"({8 * results[(name, c)]:9.1f} texts/s){batched}", flush=True)
    info["load_after"] = os.getloadavg()[0]
    lines = [SECTION, "",
             "`holdfast-reward` answering requests of 8 items (one GRPO group) from concurrent clients, one "
             "connection each, back to back (`bench/reward_bench.sh`, docs/rl-reward.md). The model is "
             "examples/rl/rm.toml's (2 layers, 64 wide, context 16, reward head), 1 LibTorch thread; every "
             "forward is exactly `--batch` rows (a text's reward must not depend on its batch). "
             f"Median of {args.rounds} rounds of {args.seconds:g} s.", "",
             f"- Machine: {info['cpu']}; {info['cores']}; Linux {info['kernel']}",
             f"- Date: {datetime.date.today().isoformat()}; load average before/after "
             f"{info['load_before']:.2f}/{info['load_after']:.2f}",
             "",
             "| service | " + " | ".join(f"{c} client{'s' if c > 1 else ''}: requests/s (texts per scorer call)"
                                        for c in clients) + " |",
             "| --- | " + " | ".join("---:" for _ in clients) + " |"]
    for name, _ in configs:
        cells = []
        for c in clients:
            t = per_call[(name, c)]
            cells.append(f"{results[(name, c)]:.0f}" + (f" ({t:.1f})" if t else ""))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    trainer_bench.publish_section(lines, SECTION, not args.no_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
