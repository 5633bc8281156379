#!/usr/bin/python3
"""The pipeline's bubble and every layout's memory per rank, for holdfast-train on this machine.

  bench/parallel_bench.sh [--holdfast-train PATH] [--rounds 3] [--steps 20] [--skip 4]
                          [--layout-steps 12] [--micro 1,2,4,8] [--no-docs]

The model of bench/trainer_bench.toml made smaller so that a run takes seconds (4 layers, 128 wide,
context 128, byte vocabulary; 1 thread per rank, float32 CPU, Gloo), a global batch of 8 samples.

1. Bubble: for each number of micro-batches M (train.grad_accum = M, micro_batch 8 / M), one process
   (dist.pipeline_parallel = 1) against two pipeline stages (= 2), the two alternating `rounds` times.
   A run's figures are medians over its steps after `skip`: step_ms, tokens/s, and stage 0's time
   waiting for the other stage (comm_wait_ms: the pipeline's messages; no data parallelism here). The
   idle share of stage 0 (wait / step) is set against 1F1B's (S - 1) / (M + S - 1) for equal stages.
   Two processes on two cores: each stage has a core, the one process has one.
2. Layouts: for pp 1, 2, 4, tp 2, tp 2 x pp 2 and tp 2 x pp 2 x dp 2, and tp 2 and tp 2 x pp 2 x dp 2
   sequence parallel, and a 4-expert MoE model on 1 and 2 ranks and over expert groups of 2 and 4
   (`layout_steps` steps each, one run): tokens/s (the median over the steps after
   `skip`; every layout's ranks share the machine's cores, so this is what the layout costs here, not
   on a core or a GPU per rank), the parameters each rank holds (the trainer's "model part" line)
   and its AdamW state, against the formula from the model's shapes (below), the largest rank shown.

Prints the tables and rewrites the "## Pipeline and tensor parallelism" section of docs/benchmarks.md.
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

SECTION = "## Pipeline and tensor parallelism"
MODEL = {"n_layer": 4, "n_embd": 128, "block_size": 128, "vocab_size": 256, "n_head": 4}
GLOBAL_BATCH = 8


def model_sets():
    return [f"model.{k}={v}" for k, v in MODEL.items()] + ["dist.bucket_mb=1"]


def run(args, nproc, tp, pp, micro, accum, steps, sets, tmp, tag):
    metrics = os.path.join(tmp, f"{tag}.jsonl")
    cmd = [args.holdfast_train, "--config", trainer_bench.CONFIG, "--metrics", metrics, "--nproc", str(nproc)]
    for s in sets + model_sets() + [f"train.steps={steps}", f"train.micro_batch={micro}",
                                    f"train.grad_accum={accum}", f"dist.tensor_parallel={tp}",
                                    f"dist.pipeline_parallel={pp}"]:
        cmd += ["--set", s]
    cwd = os.path.join(tmp, tag)
    os.makedirs(cwd)
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=args.env)
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        sys.exit(f"{tag} failed (exit {proc.returncode}): {shlex.join(cmd)}\n{out[-3000:]}")
    with open(metrics) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return rows, out


def timed(args, pp, m, sets, tmp, tag):
    rows, _ = run(args, pp, 1, pp, GLOBAL_BATCH // m, m, args.steps, sets, tmp, tag)
    kept = [r for r in rows if r["step"] > args.skip]
    if len(kept) < 3:
        sys.exit(f"{tag}: {len(rows)} metric lines, need more than skip + 3")
    step = statistics.median(r["step_ms"] for r in kept)
    wait = statistics.median(r.get("comm_wait_ms", 0.0) for r in kept)
    return {"step_ms": step, "wait_ms": wait, "tok_s": statistics.median(r["tokens_per_s"] for r in kept),
            "loss": rows[-1]["loss"]}


def expected_params(tp, pp):
    """Parameters of each (tp rank, stage) from nanoGPT's shapes (bias on): the largest rank's."""
    c, v, t, n = MODEL["n_embd"], MODEL["vocab_size"], MODEL["block_size"], MODEL["n_layer"]
    split = 3 * c * c + 3 * c + c * c + 4 * c * c + 4 * c + 4 * c * c  # c_attn w+b, attn.c_proj w, c_fc w+b, mlp.c_proj w
    replicated = 4 * c + c + c  # ln_1, ln_2 (w+b), the two output projections' biases
    block = split // tp + replicated
    base, extra = divmod(n, pp)
    best = 0
    for s in range(pp):
        layers = base + (1 if s < extra else 0)
        p = layers * block
        if s == 0:
            p += v * c + t * c  # wte, wpe
        if s == pp - 1:
            p += 2 * c + (v * c if pp > 1 else 0)  # ln_f; the last stage's copy of the tied wte
        best = max(best, p)
    return best


def expected_moe_params(experts, ep):
    """Parameters on a rank of the model whose every MLP is `experts` experts and a router, the rank
    holding experts / ep of each block's experts (and every other parameter)."""
    c = MODEL["n_embd"]
    mlp = 4 * c * c + 4 * c + 4 * c * c + c  # c_fc w+b, c_proj w+b
    return expected_params(1, 1) + MODEL["n_layer"] * ((experts // ep - 1) * mlp + experts * c)


def memory(args, sets, tmp):
    out = []
    # (ranks, tp, pp, sequence parallel, experts, expert parallel)
    for nproc, tp, pp, sp, experts, ep in [(1, 1, 1, False, 0, 1), (2, 1, 2, False, 0, 1), (4, 1, 4, False, 0, 1),
                                           (2, 2, 1, False, 0, 1), (4, 2, 2, False, 0, 1), (8, 2, 2, False, 0, 1),
                                           (2, 2, 1, True, 0, 1), (8, 2, 2, True, 0, 1), (1, 1, 1, False, 4, 1),
                                           (2, 1, 1, False, 4, 1), (2, 1, 1, False, 4, 2), (4, 1, 1, False, 4, 2),
                                           (4, 1, 1, False, 4, 4)]:
        dp = nproc // (tp * pp)
        micro = max(1, GLOBAL_BATCH // (4 * dp))
        tag = f"mem-tp{tp}-pp{pp}-dp{dp}" + ("-sp" if sp else "") + (f"-moe{experts}-ep{ep}" if experts else "")
        extra = ["dist.sequence_parallel=true"] if sp else []
        if experts:
            extra += [f"moe.experts={experts}", "moe.top_k=2", f"dist.expert_parallel={ep}"]
        rows, log = run(args, nproc, tp, pp, micro, GLOBAL_BATCH // (micro * dp), args.layout_steps, sets + extra,
                        tmp, tag)
        kept = [r for r in rows if r["step"] > args.skip] or rows
        tok = statistics.median(r["tokens_per_s"] for r in kept)
        parts = [int(x) for x in re.findall(r"model part on this rank \([^)]*\): (\d+) parameters", log)]
        if not parts:
            parts = [int(x) for x in re.findall(r"model: (\d+) parameters", log)]
        state = [int(b) for b in re.findall(r"AdamW state (\d+) bytes on (?:this|every) rank", log)]
        want = expected_moe_params(experts, ep) if experts else expected_params(tp, pp)
        out.append({"tp": tp, "pp": pp, "dp": dp, "sp": sp, "experts": experts, "ep": ep, "params": max(parts),
                    "want": want, "state": max(state) if state else 0, "tok_s": tok, "micro": micro})
        print(f"layout {tag}: {tok:,.0f} tokens/s, {max(parts)} parameters on the largest rank (formula {want}), "
              f"AdamW state {max(state) if state else 0} B", flush=True)
    return out


def render(bubble, mem, args, info, data_desc, command):
    lines = [SECTION, "",
             "`holdfast-train` on this machine: the 1F1B pipeline's idle share (bubble) against its formula, "
             "and the memory each rank of a layout holds against the model's shapes. Model: "
             "bench/trainer_bench.toml made smaller (4 layers x 128 wide, 4 heads, context 128, byte vocabulary, "
             f"{expected_params(1, 1):,} parameters), a global batch of {GLOBAL_BATCH} samples cut into M "
             "micro-batches, 1 thread per rank, float32 CPU, Gloo.", "",
             f"- Machine: {info['cpu']}; {info['cores']}; Linux {info['kernel']}",
             f"- Torch: {info['torch']}",
             f"- Data: {data_desc}",
             f"- Date: {datetime.date.today().isoformat()}; load average before/after "
             f"{info['load_before']:.2f}/{info['load_after']:.2f}",
             "",
             f"Bubble: each run trains {args.steps} steps, the first {args.skip} dropped; a run's figure is "
             f"its median; a cell's the median over {args.rounds} runs, one process and two stages "
             "alternating. Stage 0's idle share is its wait for the other stage over its step time (the step "
             "also loads data and updates, so this is a lower bound of the pipeline phase's share); two "
             "processes on the machine's two cores, one process on one.", "",
             "| M | one process: step ms | pp=2: step ms | pp=2 / one | pp=2: tokens/s | stage 0 idle share | "
             "1F1B formula (S-1)/(M+S-1) |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for m in args.micro:
        one, two = bubble[(1, m)], bubble[(2, m)]
        s1 = statistics.median(r["step_ms"] for r in one)
        s2 = statistics.median(r["step_ms"] for r in two)
        idle = statistics.median(r["wait_ms"] / r["step_ms"] for r in two)
        tok = statistics.median(r["tok_s"] for r in two)
        lines.append(f"| {m} | {s1:.1f} | {s2:.1f} | {s2 / s1:.2f} | {tok:,.0f} | {idle:.2f} | "
                     f"{1 / (m + 1):.2f} |")
    lines += ["", f"Layouts ({args.layout_steps} steps each, one run; tokens/s the median over the steps after "
              f"{args.skip}, all ranks of a layout on this machine's cores; memory of the largest rank; the "
              "formula counts nanoGPT's shapes: a block's split matrices and biases / tp plus its LayerNorms and "
              "output biases, the embeddings on stage 0, ln_f and a copy of the tied wte on the last stage):", "",
              "| layout | ranks | micro-batches per step | tokens/s | parameters (largest rank) | formula | "
              "parameters + gradients MB | AdamW state MB |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in mem:
        name = f"tp={r['tp']},pp={r['pp']},dp={r['dp']}" + (", sequence parallel" if r["sp"] else "")
        if r["experts"]:
            name += f", {r['experts']} experts top 2" + (f", ep={r['ep']}" if r["ep"] > 1 else "")
        lines.append(f"| {name} | {r['tp'] * r['pp'] * r['dp']} | {GLOBAL_BATCH // (r['micro'] * r['dp'])} | "
                     f"{r['tok_s']:,.0f} | {r['params']:,} | {r['want']:,} | "
                     f"{r['params'] * 8 / 1e6:.2f} | {r['state'] / 1e6:.2f} |")
    lines += ["", "AdamW state is 8 bytes per parameter the rank holds, divided over its data-parallel group by "
              "ZeRO-1 (dp > 1). The mixture-of-experts rows replace every block's MLP by 4 expert MLPs and a router "
              "(moe.top_k 2, capacity factor 1.25: each token runs through 2 experts, about twice the dense MLP's "
              "compute); with ep > 1 each rank holds and computes 4 / ep of the experts for its expert group's "
              "tokens (all-to-all), and its ZeRO-1 slice is cut over the ranks holding the same experts (dp / ep "
              "of them), so the other parameters' AdamW state is divided by dp / ep, not dp.",
              "", "Command:", "", "```", command, "```", ""]
    return "\n".join(lines)


def main():
    default_bin = os.environ.get("HOLDFAST_TRAIN") or os.path.join(trainer_bench.REPO, "build", "trainer",
                                                                   "holdfast-train")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--holdfast-train", default=default_bin)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--skip", type=int, default=4)
    ap.add_argument("--layout-steps", type=int, default=12)
    ap.add_argument("--micro", default="1,2,4,8", help="comma-separated micro-batch counts (dividing 8)")
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()
    args.micro = [int(x) for x in args.micro.split(",")]
    if any(m < 1 or GLOBAL_BATCH % m for m in args.micro):
        sys.exit(f"--micro: each count must divide the global batch of {GLOBAL_BATCH}")
    if not os.access(args.holdfast_train, os.X_OK):
        sys.exit(f"holdfast-train not found ({args.holdfast_train}); build it or pass --holdfast-train PATH")
    args.env = dict(os.environ, OMP_NUM_THREADS="1")
    command = ("bench/parallel_bench.sh " + shlex.join(sys.argv[1:])).rstrip()
    info = trainer_bench.machine()
    info["load_before"] = os.getloadavg()[0]
    bubble = {}
    with tempfile.TemporaryDirectory(prefix="holdfast-parallel-bench-") as tmp:
        sets, data_desc = trainer_bench.data_override(tmp)
        n = 0
        for m in args.micro:
            for r in range(args.rounds):
                for pp in ((1, 2) if r % 2 == 0 else (2, 1)):
                    n += 1
                    res = timed(args, pp, m, sets, tmp, f"bubble-{n}")
                    bubble.setdefault((pp, m), []).append(res)
                    print(f"M={m} round {r + 1} pp={pp}: step {res['step_ms']:7.1f} ms, wait {res['wait_ms']:6.1f} "
                          f"ms, {res['tok_s']:,.0f} tok/s (final loss {res['loss']:.4f})", flush=True)
        mem = memory(args, sets, tmp)
    info["load_after"] = os.getloadavg()[0]
    section = render(bubble, mem, args, info, data_desc, command)
    print()
    print(section)
    if not args.no_docs:
        trainer_bench.replace_section(section, SECTION)
        print(f"wrote the '{SECTION}' section of {os.path.relpath(trainer_bench.DOCS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
