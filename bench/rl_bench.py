#!/usr/bin/python3
"""GRPO run figures, synchronous against asynchronous (bounded staleness), same model and work.

  bench/rl_bench.sh [--build DIR] [--steps 60] [--skip 5] [--workers 2] [--staleness 2] [--no-docs]

Runs examples/rl: SFT of the tiny GPT once (examples/rl/sft.toml), then for each mode a GRPO run of
examples/rl/grpo.toml (eval and checkpoints off) as real processes: the reward service, `--workers`
rollout workers and the learner (no supervisor: the processes are what is measured). Reports, per
mode:

- learner step time (median of step_ms after `skip` steps) and the fraction of the learner's time
  spent waiting for groups (sum of wait_ms / sum of step_ms, same steps);
- rollout tokens/s: per worker, generated tokens / sampling time (gen_ms), median over workers; and
  overall, every worker's tokens over the measured steps' wall time;
- weight sync: the learner's background write of a version (publish_ms, median) and the time from a
  version's publication to a worker having it loaded (since_publish_ms, median over loads), with
  the load itself (load_ms);
- staleness of the trained groups (mean) and the mean reward.

Prints a table and rewrites the "## RL (GRPO)" section of docs/benchmarks.md.
"""

import argparse
import datetime
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trainer_bench  # noqa: E402  (same folder: machine())

REPO = trainer_bench.REPO
DOCS = trainer_bench.DOCS
SECTION = "## RL (GRPO)"


def run(cmd, log, env):
    with open(log, "w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    if proc.returncode != 0:
        with open(log) as f:
            sys.exit(f"failed (exit {proc.returncode}): {shlex.join(cmd)}\n{f.read()[-3000:]}")


def read_jsonl(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def one_mode(args, tmp, init, staleness):
    out = os.path.join(tmp, f"k{staleness}")
    rl = os.path.join(out, "rl")
    os.makedirs(rl)
    sets = ["--set", f"train.init_from={init}", "--set", f"output.dir={out}", "--set", f"train.steps={args.steps}",
            "--set", "eval.every_steps=0", "--set", "checkpoint.dir=", "--set", f"rl.max_staleness={staleness}",
            "--set", "train.log_every=1000"]
    cfg = os.path.join(REPO, "examples", "rl", "grpo.toml")
    env = dict(args.env)
    procs = []
    reward = subprocess.Popen([args.reward, "--task", "add2", "--addr-file", os.path.join(rl, "reward.addr")],
                              stdout=open(os.path.join(out, "reward.log"), "w"), stderr=subprocess.STDOUT, env=env)
    procs.append(reward)
    for w in range(args.workers):
        procs.append(subprocess.Popen([args.rollout, "--config", cfg, "--worker", str(w), "--workers",
                                       str(args.workers)] + sets,
                                      stdout=open(os.path.join(out, f"worker{w}.log"), "w"),
                                      stderr=subprocess.STDOUT, env=env))
    try:
        run([args.train, "--config", cfg] + sets, os.path.join(out, "learner.log"), env)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
    steps = [r for r in read_jsonl(os.path.join(out, "metrics.jsonl")) if "wait_ms" in r]
    kept = [r for r in steps if r["step"] > args.skip]
    if len(kept) < 5:
        sys.exit(f"max_staleness={staleness}: {len(steps)} step records, need more than skip+5")
    journals = [read_jsonl(os.path.join(rl, "workers", f"w{w}.jsonl")) for w in range(args.workers)]
    per_worker, loads, since, tokens_window = [], [], [], 0
    # The measured window: from the end of step `skip` to the end of the run, by wall clock.
    t_begin = kept[0]["time_ms"] / 1000.0 - kept[0]["step_ms"] / 1000.0
    t_end = kept[-1]["time_ms"] / 1000.0
    for j in journals:
        done = [e for e in j if e["event"] == "done"]
        gen = sum(e["gen_ms"] for e in done)
        if gen > 0:
            per_worker.append(sum(e["tokens"] for e in done) / (gen / 1000.0))
        tokens_window += sum(e["tokens"] for e in done if t_begin <= e["t"] <= t_end)
        for e in j:
            if e["event"] == "weights":
                loads.append(e["load_ms"])
                if e["since_publish_ms"] >= 0:
                    since.append(e["since_publish_ms"])
    window_s = max(1e-9, t_end - t_begin)
    return {
        "step_ms": statistics.median(r["step_ms"] for r in kept),
        "wait_frac": sum(r["wait_ms"] for r in kept) / sum(r["step_ms"] for r in kept),
        "wait_ms": statistics.median(r["wait_ms"] for r in kept),
        "tok_s_worker": statistics.median(per_worker) if per_worker else 0.0,
        "tok_s_all": tokens_window / window_s,
        "publish_ms": statistics.median(r["publish_ms"] for r in kept),
        "since_ms": statistics.median(since) if since else float("nan"),
        "load_ms": statistics.median(loads) if loads else float("nan"),
        "staleness": statistics.mean(r["staleness"] for r in kept),
        "reward": statistics.mean(r["reward"] for r in kept),
        "steps": len(kept),
    }


def render(results, args, info, command):
    with open(os.path.join(REPO, "examples", "rl", "grpo.toml"), "rb") as f:
        rl = tomllib.load(f)["rl"]
    lines = [SECTION, "",
             f"A GRPO run of examples/rl (2-layer GPT, 64 wide, add2: {rl['prompts_per_step']} prompts x "
             f"{rl['group_size']} completions a step, up to {rl['max_new_tokens']} new tokens, SFT weights to start "
             "from) as real processes: the learner (`holdfast-train`, 1 rank), "
             f"{args.workers} rollout workers (`holdfast-rollout`, KV cache) and the reward service "
             f"(`holdfast-reward`), 1 thread each, exchanging work through files (docs/rl.md). {args.steps} "
             f"steps per mode; figures over the steps after the first {args.skip}.", "",
             f"- Machine: {info['cpu']}; {info['cores']}; Linux {info['kernel']}",
             f"- Torch: {info['torch']}",
             f"- Date: {datetime.date.today().isoformat()}; load average before/after "
             f"{info['load_before']:.2f}/{info['load_after']:.2f}",
             "",
             "| mode | learner step ms (median) | waiting for groups (share of learner time; median ms) | "
             "rollout tokens/s per worker (sampling) | rollout tokens/s, all workers, wall clock | "
             "weights: publish ms / publish->loaded ms / load ms (medians) | staleness (mean) | reward (mean) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for k, r in results:
        mode = "synchronous (k = 0)" if k == 0 else f"asynchronous (k = {k})"
        lines.append(f"| {mode} | {r['step_ms']:.1f} | {100 * r['wait_frac']:.0f}% ({r['wait_ms']:.1f}) | "
                     f"{r['tok_s_worker']:.0f} | {r['tok_s_all']:.0f} | {r['publish_ms']:.1f} / "
                     f"{r['since_ms']:.1f} / {r['load_ms']:.1f} | {r['staleness']:.2f} | {r['reward']:.3f} |")
    lines += ["", "Synchronous: every step waits for groups of its own policy (deterministic; the workers idle "
              "while the learner trains). Asynchronous: workers generate ahead with the newest weights, up to "
              "k versions stale, so the learner waits less and trains on slightly older samples. On this 2-core "
              "machine the learner, the workers and the reward service share the cores, so what the learner no "
              "longer waits for, it loses to contention: the step time moves less than the waiting share.", "",
              "Command:", "", "```", command, "```", ""]
    return "\n".join(lines)


def write_docs(section):
    trainer_bench.replace_section(section, SECTION)

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--skip", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--staleness", type=int, default=2, help="max_staleness of the asynchronous mode")
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()
    args.train = os.path.join(args.build, "trainer", "holdfast-train")
    args.rollout = os.path.join(args.build, "trainer", "holdfast-rollout")
    args.reward = os.path.join(args.build, "trainer", "rl", "holdfast-reward")
    for b in (args.train, args.rollout, args.reward):
        if not os.access(b, os.X_OK):
            sys.exit(f"{b} not found: build first (scripts/build.sh) or pass --build DIR")
    args.env = dict(os.environ, OMP_NUM_THREADS="1")
    command = ("bench/rl_bench.sh " + shlex.join(sys.argv[1:])).rstrip()
    info = trainer_bench.machine()
    info["load_before"] = os.getloadavg()[0]
    results = []
    with tempfile.TemporaryDirectory(prefix="holdfast-rl-bench-") as tmp:
        data = os.path.join(tmp, "sft.jsonl")
        run([args.reward, "--task", "add2", "--emit", "sft", "--count", "20000", "--out", data],
            os.path.join(tmp, "emit.log"), args.env)
        init = os.path.join(tmp, "sft", "final")
        run([args.train, "--config", os.path.join(REPO, "examples", "rl", "sft.toml"), "--set", f"data.path={data}",
             "--set", f"output.dir={os.path.join(tmp, 'sft')}", "--dump-final", init], os.path.join(tmp, "sft.log"),
            args.env)
        for k in (0, args.staleness):
            t0 = time.time()
            r = one_mode(args, tmp, init, k)
            print(f"max_staleness={k}: step {r['step_ms']:.1f} ms, waiting {100 * r['wait_frac']:.0f}%, "
                  f"{r['tok_s_worker']:.0f} tok/s per worker, publish {r['publish_ms']:.1f} ms, "
                  f"publish->loaded {r['since_ms']:.1f} ms ({time.time() - t0:.0f} s)", flush=True)
            results.append((k, r))
    info["load_after"] = os.getloadavg()[0]
    section = render(results, args, info, command)
    print()
    print(section)
    if not args.no_docs:
        write_docs(section)
        print(f"wrote the '{SECTION}' section of {os.path.relpath(DOCS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
